// Package nginxconf writes the nginx configuration reqprof's tests and
// benchmark run Debian's nginx with: every request answered with a small
// fixed body, or passed to a FastCGI server (php-fpm), on loopback,
// everything nginx writes kept in one directory.
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
	// FastCGI, when set (unix:PATH or HOST:PORT), is where nginx passes
	// every request, as a PHP script under Root: a path that is no file
	// goes to Root/index.php (a front controller), REQUEST_URI still the
	// path asked for. The params are those of Debian's fastcgi_params
	// with SCRIPT_FILENAME, in its order.
	FastCGI string
	Root    string
	// FastCGIKeepConn keeps connections to FastCGI open between requests
	// (an upstream with keepalive, fastcgi_keep_conn); by default nginx
	// opens one a request.
	FastCGIKeepConn bool
}

// fastcgiParams are Debian's /etc/nginx/fastcgi_params, and SCRIPT_FILENAME.
const fastcgiParams = `
			fastcgi_param QUERY_STRING $query_string;
			fastcgi_param REQUEST_METHOD $request_method;
			fastcgi_param CONTENT_TYPE $content_type;
			fastcgi_param CONTENT_LENGTH $content_length;
			fastcgi_param SCRIPT_NAME $fastcgi_script_name;
			fastcgi_param REQUEST_URI $request_uri;
			fastcgi_param DOCUMENT_URI $document_uri;
			fastcgi_param DOCUMENT_ROOT $document_root;
			fastcgi_param SERVER_PROTOCOL $server_protocol;
			fastcgi_param REQUEST_SCHEME $scheme;
			fastcgi_param HTTPS $https if_not_empty;
			fastcgi_param GATEWAY_INTERFACE CGI/1.1;
			fastcgi_param SERVER_SOFTWARE nginx/$nginx_version;
			fastcgi_param REMOTE_ADDR $remote_addr;
			fastcgi_param REMOTE_PORT $remote_port;
			fastcgi_param REMOTE_USER $remote_user;
			fastcgi_param SERVER_ADDR $server_addr;
			fastcgi_param SERVER_PORT $server_port;
			fastcgi_param SERVER_NAME $server_name;
			fastcgi_param REDIRECT_STATUS 200;
			fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;`

// locations answers every request, or passes it to FastCGI.
func (c Config) locations() (upstream, locations string) {
	if c.FastCGI == "" {
		return "", `location / { return 200 "ok\n"; }`
	}
	pass := c.FastCGI
	if c.FastCGIKeepConn {
		upstream = fmt.Sprintf("upstream fastcgi { server %s; keepalive 16; }\n\t", c.FastCGI)
		pass = "fastcgi;\n\t\t\tfastcgi_keep_conn on"
	}
	return upstream, fmt.Sprintf(`root %s;
		location / { try_files $uri /index.php$is_args$args; }
		location ~ \.php$ {
			try_files $uri =404;
			fastcgi_pass %s;%s
		}`, c.Root, pass, fastcgiParams)
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
	upstream, locations := c.locations()
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
	%[7]sserver {
		listen 127.0.0.1:%[2]d backlog=4096;
		%[8]s
	}
}
`, c.Dir, c.Port, master, workers, connections, rlimit, upstream, locations)
}
