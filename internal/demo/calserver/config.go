package calserver

import (
	"fmt"
	"time"
)

// Model is how the server maps connections onto OS threads. In the threads
// and epoll models a request is served start to finish on one thread, so that
// thread's CPU clock is the request's ground truth; in the pool model it is
// read on one thread and served on another, and the truth is the sum of both
// threads' parts (see Totals).
type Model string

const (
	// Threads gives each connection its own OS thread doing blocking I/O.
	Threads Model = "threads"
	// Epoll serves every connection from one OS thread running an epoll loop.
	Epoll Model = "epoll"
	// Pool reads requests on one OS thread running an epoll loop, which
	// queues each complete request and wakes one of Config.Workers worker
	// threads with a futex; the worker does the request's work and writes
	// the response.
	Pool Model = "pool"
)

// DefaultWorkers is the pool model's number of workers when Config.Workers
// is 0.
const DefaultWorkers = 2

// DefaultRoute names, in Stats, the requests whose route key Config.Routes
// lacks.
const DefaultRoute = "*"

// Config says how the server serves and how much work each request costs.
type Config struct {
	Model  Model
	Listen string // IP:port to listen on; "127.0.0.1:0" if empty

	Burn time.Duration // user CPU burnt per request
	// Routes is the burn per route key, instead of Burn. A request's route
	// key is, for a POST whose body is a JSON-RPC 2.0 request (a JSON object
	// with "jsonrpc":"2.0" and a string "method"), the method, followed for
	// "tools/call" and "prompts/get" by a space and params.name ("tools/list",
	// "tools/call add"); for any other request, the path without the query
	// ("/a"). Stats.Routes is keyed the same way.
	Routes map[string]time.Duration

	// Kernel work per request: DevNullWrites writes of DevNullBytes each to
	// /dev/null.
	DevNullWrites int
	DevNullBytes  int
	// GetppidCalls getppid() calls per request after the writes, timed
	// apart (Stats.GetppidCPUNs): the cheapest syscall, nearly all of it
	// the kernel's entry and exit paths, for tests that tell a syscall's
	// own kernel work from what the calls around it cost the process.
	GetppidCalls int

	Sleep time.Duration // off-CPU wait per request, after the CPU work

	// Workers is the pool model's number of worker threads; 0 means
	// DefaultWorkers. Other models ignore it. The pool model raises the
	// process's GOMAXPROCS to Workers+2 if it is lower, and the epoll
	// model to 2, so that every serving thread keeps a P of its own.
	Workers int

	// CloseAfterResponse closes each connection once its first response is
	// out, as an HTTP/1.0 server does: with the threads model, a thread is
	// made for, and ends with, every request. Only the threads model has it.
	CloseAfterResponse bool
}

func (c Config) validate() error {
	if c.Burn < 0 || c.Sleep < 0 || c.DevNullWrites < 0 || c.DevNullBytes < 0 || c.GetppidCalls < 0 {
		return fmt.Errorf("calserver: negative burn, sleep, /dev/null writes or getppid calls in %+v", c)
	}
	if c.CloseAfterResponse && c.Model != Threads {
		return fmt.Errorf("calserver: closing after each response needs the threads model, not %q", c.Model)
	}
	if c.Workers < 0 {
		return fmt.Errorf("calserver: negative number of workers %d", c.Workers)
	}
	for key, burn := range c.Routes {
		if key == "" || key == DefaultRoute {
			return fmt.Errorf("calserver: route key %q is reserved", key)
		}
		if burn < 0 {
			return fmt.Errorf("calserver: route %q has negative burn %v", key, burn)
		}
	}
	return nil
}
