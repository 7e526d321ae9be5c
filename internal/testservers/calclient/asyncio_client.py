"""An asyncio client that counts its own calls and measures its CPU.

Opens --conns keep-alive HTTP/1.1 connections to --addr, prints "ready",
and on SIGUSR1 makes --calls calls in all from --conns tasks: task i calls
GET /c{i} and, after each answer, burns (i + 1) * --burn-us of CPU in a
loop calibrated on the thread's clock. Then it prints one JSON line
(calls, process_cpu_ns, per path: calls and burn_ns, the thread CPU one
call's burn took, timed around each burn during the calls) and waits for
SIGTERM. All tasks run on one loop thread, interleaving their
calls: what reqprof's asyncio model (runtime "asyncio") has to split.

--lib raw writes the calls and parses the answers itself, a connection per
task; --lib aiohttp makes them with aiohttp's ClientSession, its pool held
to --conns connections (opened before "ready"), as an application would.
"""

import argparse
import asyncio
import json
import signal
import sys
import time


def spin(rounds):
    """CPU with no syscall."""
    x = 1
    for _ in range(rounds):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def rounds_for(ns):
    """Rounds of spin that take ns of thread CPU, measured here."""
    n = 1000
    while True:
        t0 = time.thread_time_ns()
        spin(n)
        took = time.thread_time_ns() - t0
        if took >= 20_000_000:
            return max(1, round(n * ns / took))
        n *= 2


async def read_response(reader):
    status = await reader.readline()
    if not status.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("status line %r" % status)
    length = -1
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length < 0:
        raise RuntimeError("no content-length")
    await reader.readexactly(length)


class RawCalls:
    """Calls written and parsed here, on a connection per task."""

    async def open(self, host, port, conns):
        self.conns = [await asyncio.open_connection(host, port) for _ in range(conns)]

    async def call(self, task, path):
        reader, writer = self.conns[task]
        writer.write(("GET %s HTTP/1.1\r\nHost: asyncio-client\r\n\r\n" % path).encode())
        await read_response(reader)

    async def close(self):
        for _, writer in self.conns:
            writer.close()


class AiohttpCalls:
    """Calls made with aiohttp's client, its pool of keep-alive
    connections shared by the tasks."""

    async def open(self, host, port, conns):
        import aiohttp  # only this mode needs it

        self.base = "http://%s:%d" % (host, port)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conns))
        # Open the pool's connections before the calls that are counted:
        # as many calls at once as it holds.
        await asyncio.gather(*(self.call(i, "/warm") for i in range(conns)))

    async def call(self, task, path):
        async with self.session.get(self.base + path) as resp:
            await resp.read()

    async def close(self):
        await self.session.close()


async def calls_on(client, task, path, n, rounds, stats):
    """n calls of path, each followed by a burn, timed on the thread's
    clock: a burn takes what the host's pace makes of it then, which a
    measurement taken before the calls can miss (the pace changes by the
    minute). The clock reads are syscalls, which do not end the
    task's piece of the loop's iteration (only a read, a write or a poll
    does), and cost each call alike."""
    burnt = 0
    for _ in range(n):
        await client.call(task, path)
        t0 = time.thread_time_ns()
        spin(rounds)
        burnt += time.thread_time_ns() - t0
    stats[path] = {"calls": n, "rounds": rounds, "burn_ns": burnt // n}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--burn-us", type=int, default=50)
    ap.add_argument("--lib", choices=("raw", "aiohttp"), default="raw")
    args = ap.parse_args()
    host, port = args.addr.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    start, stop = asyncio.Event(), asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, start.set)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    per_us = rounds_for(1_000_000) / 1000
    rounds = [round(per_us * (i + 1) * args.burn_us) for i in range(args.conns)]
    client = AiohttpCalls() if args.lib == "aiohttp" else RawCalls()
    await client.open(host, int(port), args.conns)
    print("ready", flush=True)
    await start.wait()
    stats = {}
    cpu0 = time.process_time_ns()
    tasks = []
    for i in range(args.conns):
        n = args.calls // args.conns + (1 if i < args.calls % args.conns else 0)
        tasks.append(calls_on(client, i, "/c%d" % i, n, rounds[i], stats))
    await asyncio.gather(*tasks)
    cpu = time.process_time_ns() - cpu0
    print(json.dumps({"calls": args.calls, "process_cpu_ns": cpu, "paths": stats}), flush=True)
    await stop.wait()
    await client.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
