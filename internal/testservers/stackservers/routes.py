"""A threaded HTTP/1.1 server whose two routes spend their CPU in Python
functions of their own: GET /light in light_work, GET /heavy in
heavy_work, each burning for the µs its argument gives (light, heavy).
It says "listening on ADDR" once it serves, and on SIGTERM prints its
requests by path as one JSON line and exits."""
import http.server
import json
import signal
import sys
import threading
import time

LIGHT_US, HEAVY_US = (float(a) for a in sys.argv[1:3])
served = {}
lock = threading.Lock()


def spin(us):
    """Burns CPU for us µs of the thread's own CPU clock."""
    end = time.thread_time() + us / 1e6
    x = 0
    while time.thread_time() < end:
        for i in range(1000):
            x += i * i
    return x


def light_work():
    return spin(LIGHT_US)


def heavy_work():
    return spin(HEAVY_US)


ROUTES = {"/light": light_work, "/heavy": heavy_work}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        work = ROUTES.get(self.path)
        if work is not None:
            work()
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with lock:
            served[self.path] = served.get(self.path, 0) + 1

    def log_message(self, *args):
        pass


def stop(*_):
    with lock:
        print(json.dumps({"requests": served}), flush=True)
    sys.exit(0)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
signal.signal(signal.SIGTERM, stop)
print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
server.serve_forever()
