/* A tiny HTTP/1.1 server in C whose two routes burn CPU in two functions
 * of their own, for reqprof's stack tests: GET /alpha burns in burn_alpha,
 * GET /beta in burn_beta, each for as long as its flag says, measured by
 * the thread's CPU clock around the burn. A thread per connection,
 * keep-alive. It says "listening on IP:PORT" once it serves, and on
 * SIGTERM prints what it served and burned as one JSON line and exits.
 *
 *   cserver [--alpha-us N] [--beta-us N]
 *
 * Built with frame pointers (-fno-omit-frame-pointer) so that its stacks
 * can be walked. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

/* The same xorshift loop twice: two functions a profile names apart. */
__attribute__((noinline)) uint64_t burn_alpha(uint64_t n, uint64_t x)
{
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
	}
	return x;
}

__attribute__((noinline)) uint64_t burn_beta(uint64_t n, uint64_t x)
{
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
	}
	return x;
}

static int64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct route {
	const char *path;
	uint64_t (*burn)(uint64_t, uint64_t);
	uint64_t iterations;
	uint64_t requests;
	int64_t burn_ns;
};

static struct route routes[] = {
	{"/alpha", burn_alpha, 0, 0, 0},
	{"/beta", burn_beta, 0, 0, 0},
};
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

/* Rounds of the loop a microsecond of thread CPU runs, measured once. */
static double iterations_per_us(void)
{
	uint64_t n = 1 << 16;
	for (;;) {
		int64_t start = thread_cpu_ns();
		sink = burn_alpha(n, sink | 1);
		int64_t took = thread_cpu_ns() - start;
		if (took >= 20000000)
			return (double)n / ((double)took / 1000);
		n *= 2;
	}
}

static void serve_request(int fd, const char *path)
{
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
	static const char missing[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		struct route *r = &routes[i];
		if (strcmp(path, r->path) != 0)
			continue;
		int64_t start = thread_cpu_ns();
		sink = r->burn(r->iterations, sink | 1);
		int64_t took = thread_cpu_ns() - start;
		pthread_mutex_lock(&stats_lock);
		r->requests++;
		r->burn_ns += took;
		pthread_mutex_unlock(&stats_lock);
		(void)!write(fd, ok, sizeof(ok) - 1);
		return;
	}
	(void)!write(fd, missing, sizeof(missing) - 1);
}

static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[8192];
	size_t have = 0;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = 0;
		char *end;
		while ((end = strstr(buf, "\r\n\r\n")) != NULL) {
			char path[256] = "";
			sscanf(buf, "%*s %255s", path);
			serve_request(fd, path);
			size_t used = (size_t)(end + 4 - buf);
			memmove(buf, buf + used, have - used);
			have -= used;
			buf[have] = 0;
		}
		if (have == sizeof(buf) - 1)
			break; /* a request larger than the buffer: not ours */
	}
	close(fd);
	return NULL;
}

static void *accept_loop(void *arg)
{
	int ln = (int)(intptr_t)arg;
	for (;;) {
		int fd = accept(ln, NULL, NULL);
		if (fd < 0)
			continue;
		pthread_t t;
		if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) == 0)
			pthread_detach(t);
		else
			close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double alpha_us = 1000, beta_us = 2000;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--alpha-us") == 0)
			alpha_us = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--beta-us") == 0)
			beta_us = atof(argv[i + 1]);
	}
	double rate = iterations_per_us();
	routes[0].iterations = (uint64_t)(alpha_us * rate);
	routes[1].iterations = (uint64_t)(beta_us * rate);

	/* SIGTERM is taken by sigwait below, in no other thread. */
	sigset_t term;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigaddset(&term, SIGINT);
	pthread_sigmask(SIG_BLOCK, &term, NULL);

	int ln = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(ln, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(ln, (struct sockaddr *)&addr, sizeof(addr)) || listen(ln, 128)) {
		perror("listen");
		return 1;
	}
	socklen_t len = sizeof(addr);
	getsockname(ln, (struct sockaddr *)&addr, &len);
	printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
	fflush(stdout);

	pthread_t acceptor;
	pthread_create(&acceptor, NULL, accept_loop, (void *)(intptr_t)ln);
	int sig;
	sigwait(&term, &sig);

	pthread_mutex_lock(&stats_lock);
	printf("{\"requests\":{\"/alpha\":%llu,\"/beta\":%llu},\"burn_us\":{\"/alpha\":%.3f,\"/beta\":%.3f}}\n",
	       (unsigned long long)routes[0].requests, (unsigned long long)routes[1].requests,
	       routes[0].requests ? routes[0].burn_ns / 1e3 / routes[0].requests : 0.0,
	       routes[1].requests ? routes[1].burn_ns / 1e3 / routes[1].requests : 0.0);
	fflush(stdout);
	_exit(0);
}
