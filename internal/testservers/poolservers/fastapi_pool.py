# A FastAPI app under uvicorn (asyncio loop, h11), for reqprof's tests of
# worker pools a runtime hands its own work to: the loop thread reads and
# writes every connection, and the work runs on pool threads that never
# touch a socket. By POOL, the endpoints are
#   anyio      plain `def` endpoints, which Starlette runs on anyio's
#              worker threads (a queue per worker);
#   to_thread  `async def` endpoints handing their work to
#              asyncio.to_thread, on the loop's default ThreadPoolExecutor
#              (one queue its threads share).
#   /light  UNITS units of pure-Python work in the pool thread
#   /heavy  4 x UNITS units
#   /warm   no work, on the pool: to start its threads before a window
# It speaks calserver's protocol: it prints "listening on IP:PORT", serves
# until SIGTERM, then prints its own figures as one JSON line: per route
# the requests served and the CPU of their work, read from the pool
# thread's own clock (time.thread_time) around the work.
#
# usage: python3 fastapi_pool.py BURN_MICROS [POOL]
import asyncio
import json
import socket
import sys
import threading
import time

import uvicorn
from fastapi import FastAPI

burn_micros = float(sys.argv[1])
pool = sys.argv[2] if len(sys.argv) > 2 else "anyio"

_sink = 1


def spin(n):
    global _sink
    x = _sink | 1
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    _sink = x


def calibrate():
    """Rounds of spin per µs of this thread's CPU, once warm."""
    spin(200000)
    n = 100000
    while True:
        t0 = time.thread_time_ns()
        spin(n)
        took = (time.thread_time_ns() - t0) / 1e3
        if took >= 200000:
            return n / took
        n *= 2


per_micro = calibrate()
routes = {}
lock = threading.Lock()


def work(route, units):
    t0 = time.thread_time_ns()
    spin(round(units * burn_micros * per_micro))
    took = (time.thread_time_ns() - t0) / 1e3
    with lock:
        r = routes.setdefault(route, {"requests": 0, "burn_us": 0.0})
        r["requests"] += 1
        r["burn_us"] += took
    return "ok\n"


app = FastAPI()


def job(route, units):
    return work(route, units) if units else "ok\n"


def endpoint_of(route, units):
    if pool == "anyio":
        def endpoint():
            return job(route, units)
    else:
        async def endpoint():
            return await asyncio.to_thread(job, route, units)
    return endpoint


if pool not in ("anyio", "to_thread"):
    sys.exit(f"fastapi_pool.py: unknown pool {pool!r}: want anyio or to_thread")
for route, units in {"/light": 1, "/heavy": 4, "/warm": 0}.items():
    app.get(route)(endpoint_of(route, units))


sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(4096)
config = uvicorn.Config(app, loop="asyncio", http="h11", lifespan="off", log_level="warning",
                        access_log=False, timeout_keep_alive=60)
server = uvicorn.Server(config)
host, port = sock.getsockname()
print(f"listening on {host}:{port}", flush=True)
# uvicorn stops on SIGTERM, and returns once its connections are done.
server.run(sockets=[sock])
print(json.dumps({"routes": routes, "per_micro": per_micro}), flush=True)
