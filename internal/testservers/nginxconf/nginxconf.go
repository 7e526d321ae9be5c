// Package nginxconf writes the nginx configuration reqprof's tests and
// benchmark run Debian's nginx with: every request answered with a small
// fixed body, on loopback, everything nginx writes kept in one directory.
//
// It is compiled into reqprof-bench, so it lives under internal/, not
// testdata/, beside the other servers only tests and the bench run; see
// package calserver for the layout.
package nginxconf

import "fmt"

// Config describes the server.
type Config struct {
	Dir         string // nginx's prefix: logs, pid file, temporary files
	Port        int    // on 127.0.0.1
	Workers     int    // 0: one process, no master; else a master and this many workers (pre-fork)
	Connections int    // per worker; 0 means 1024
	FileLimit   uint64 // worker_rlimit_nofile; 0 leaves nginx's default
}

// Text is the configuration file's text.
func (c Config) Text() string {
	master, workers := "off", 1
	if c.Workers > 0 {
		master, workers = "on", c.Workers
	}
	connections := c.Connections
	if connections == 0 {
		connections = 1024
	}
	rlimit := ""
	if c.FileLimit > 0 {
		rlimit = fmt.Sprintf("worker_rlimit_nofile %d;\n", c.FileLimit)
	}
	// A listen backlog that absorbs a client's bursts of dialling.
	return fmt.Sprintf(`daemon off;
master_process %[3]s;
worker_processes %[4]d;
%[6]serror_log %[1]s/error.log;
pid %[1]s/nginx.pid;
events { worker_connections %[5]d; }
http {
	access_log off;
	client_body_temp_path %[1]s;
	proxy_temp_path %[1]s;
	fastcgi_temp_path %[1]s;
	uwsgi_temp_path %[1]s;
	scgi_temp_path %[1]s;
	server {
		listen 127.0.0.1:%[2]d backlog=4096;
		location / { return 200 "ok\n"; }
	}
}
`, c.Dir, c.Port, master, workers, connections, rlimit)
}
