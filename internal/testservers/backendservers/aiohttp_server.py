"""An aiohttp server whose requests call a backend midway, for reqprof's
tests of requests that wait on a backend on an asyncio loop. Each route
burns a calibrated amount of CPU, awaits an HTTP call to the backend
(aiohttp's client, a pool of keep-alive connections), and burns again:
  /light     B, call, B
  /heavy     4B, call, 4B
  /two       B, call, B, call, B
  /twoheavy  B, call, 4B, call, B
  /warm      a call, no burn: to open the pool of backend connections
It speaks calserver's protocol: it prints "listening on IP:PORT", serves
until SIGTERM, then prints its own figures as one JSON line: per route the
requests served and the CPU its burns took, read from the loop thread's
own CPU clock (time.thread_time_ns) around each burn.

usage: python3 aiohttp_server.py BACKEND_HOST:PORT BURN_MICROS
"""
import asyncio
import json
import signal
import sys
import time

from aiohttp import ClientSession, TCPConnector, web

backend_host, backend_port = sys.argv[1].rsplit(":", 1)
burn_micros = int(sys.argv[2])
backend_url = f"http://{backend_host}:{backend_port}/backend"


def spin(n):
    x = 1
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def calibrate():
    """Rounds of spin per µs of the thread's CPU, once warm."""
    spin(200_000)
    n = 100_000
    while True:
        t0 = time.thread_time_ns()
        spin(n)
        took = time.thread_time_ns() - t0
        if took >= 200_000_000:
            return n / (took / 1e3)
        n *= 2


per_micro = calibrate()
routes = {}
plans = {
    "/light": [1, 1],
    "/heavy": [4, 4],
    "/two": [1, 1, 1],
    "/twoheavy": [1, 4, 1],
    "/warm": [0, 0],
}


def burn(r, units):
    t0 = time.thread_time_ns()
    spin(round(units * burn_micros * per_micro))
    r["burn_us"] += (time.thread_time_ns() - t0) / 1e3


async def main():
    session = ClientSession(connector=TCPConnector(limit=64, keepalive_timeout=60))

    async def call():
        async with session.get(backend_url) as resp:
            await resp.read()

    async def handle(request):
        plan = plans.get(request.path)
        if plan is None:
            return web.Response(status=404)
        r = routes.setdefault(request.path, {"requests": 0, "burn_us": 0.0})
        for step, units in enumerate(plan):
            if step:
                await call()
            burn(r, units)
        r["requests"] += 1
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=60)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    host, port = site._server.sockets[0].getsockname()[:2]
    sys.stdout.write(f"listening on {host}:{port}\n")
    sys.stdout.flush()

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    sys.stdout.write(json.dumps({"routes": routes, "per_micro": per_micro}) + "\n")
    sys.stdout.flush()


asyncio.run(main())
