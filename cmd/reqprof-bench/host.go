package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// hostInfo says where and how the figures were taken: they are only
// comparable with figures from the same machine and load.
type hostInfo struct {
	date     string
	kernel   string
	cpu      string
	cores    int
	loadavg  string // before the bench started: others' load skews it
	nginx    string
	wrk      string
	revision string // of the working tree reqprof was built from
	command  string
}

func describeHost(t tools) hostInfo {
	h := hostInfo{
		date:     time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		cpu:      cpuModel(),
		cores:    runtime.NumCPU(),
		nginx:    "unknown",
		wrk:      "unknown",
		revision: "unknown",
		command:  strings.Join(append([]string{"reqprof-bench"}, os.Args[1:]...), " "),
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		h.kernel = unix.ByteSliceToString(uts.Release[:])
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.loadavg = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	// nginx -v prints "nginx version: nginx/VERSION"; wrk -v prints
	// "wrk VERSION [epoll] Copyright ..." and exits with status 1.
	if out, err := exec.Command(t.nginx, "-v").CombinedOutput(); err == nil {
		h.nginx = strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: ")
	}
	if out, _ := exec.Command(t.wrk, "-v").CombinedOutput(); strings.HasPrefix(string(out), "wrk ") {
		h.wrk = strings.Join(strings.Fields(string(out))[:2], " ")
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		h.revision = strings.TrimSpace(string(out))
	}
	return h
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "unknown"
}
