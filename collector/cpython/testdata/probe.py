"""A target for collector/cpython's live tests (CPython 3.10 to 3.13).

It runs to known places and, at each, prints a JSON line saying what it
knows of itself (its threads, the blocked thread's frames with their code
objects' ids, names and lines, the running task's coroutines and
contextvars.Context), then blocks in os.read on stdin, the GIL released,
until the test writes a line. Usage: probe.py [asyncio|uvloop]
"""

import asyncio
import contextvars
import gc
import json
import os
import sys
import threading

LOOP = sys.argv[1] if len(sys.argv) > 1 else "asyncio"


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def stack_of(frame):
    """The frames from frame outward, as Python sees them."""
    frames = []
    while frame is not None:
        code = frame.f_code
        frames.append({
            "name": code.co_name,
            "qualname": getattr(code, "co_qualname", code.co_name),
            "file": code.co_filename,
            "line": frame.f_lineno,
            "code": id(code),
        })
        frame = frame.f_back
    return frames


def threads():
    return [{"name": t.name, "ident": t.ident, "native_id": t.native_id} for t in threading.enumerate()]


def block(phase, **fields):
    """Says where it is and waits for the test's line (one line: the frame's line is that of os.read)."""
    emit(phase=phase, pid=os.getpid(), tid=threading.get_native_id(), ident=threading.get_ident(), threads=threads(), stack=stack_of(sys._getframe()), **fields); os.read(0, 1)


MARK = contextvars.ContextVar("mark")


def task_context(task):
    """The contextvars.Context the running task runs its steps in: the one
    the task refers to (before 3.12, which has get_context(), the only
    way) that holds a value set in this step; the task also refers to its
    done callbacks' contexts."""
    marker = object()
    MARK.set(marker)
    contexts = [o for o in gc.get_referents(task) if type(o) is contextvars.Context and o.get(MARK) is marker]
    assert len(contexts) == 1, contexts
    if hasattr(task, "get_context"):
        assert task.get_context() is contexts[0]
    return contexts[0]


def level_two():
    niveau_é()


# Names of each kind of str: Latin-1 (not ASCII), UCS-2, UCS-4.
def niveau_é():
    επίπεδο_λ()


def επίπεδο_λ():
    𠀀_kind4()


def 𠀀_kind4():
    block("plain")


def level_one():
    level_two()


def spin(stop):
    while not stop.is_set():
        pass


def gil_phases():
    stop = threading.Event()
    spinner = threading.Thread(target=spin, args=(stop,), name="spinner")
    spinner.start()
    block("gil-held", spinner=spinner.native_id)
    stop.set()
    spinner.join()
    block("gil-free")


def coroutine_of(frame):
    """The coroutine whose frame is frame."""
    coroutines = [o for o in gc.get_objects() if asyncio.iscoroutine(o) and getattr(o, "cr_frame", None) is frame]
    assert len(coroutines) == 1, coroutines
    return coroutines[0]


async def inner_coroutine():
    task = asyncio.current_task()
    inner, outer = coroutine_of(sys._getframe()), coroutine_of(sys._getframe(1))
    assert outer is task.get_coro()
    block("task", context=id(task_context(task)), outer=id(outer), inner=id(inner))


async def outer_coroutine():
    await inner_coroutine()


def handle_callback(ctx):
    block("handle", context=id(ctx))


class BlockingProtocol(asyncio.Protocol):
    """A server's protocol whose data_received blocks: it says whether the
    value connection_made set in its context is seen there (whether both
    run in one context)."""

    def connection_made(self, transport):
        self.transport = transport
        self.marker = object()
        MARK.set(self.marker)

    def data_received(self, data):
        block("protocol", marked=MARK.get(None) is self.marker)
        self.transport.write(data)


async def protocol_phase(loop):
    server = await loop.create_server(BlockingProtocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(2):
        writer.write(b"x")
        await reader.readexactly(1)
    writer.close()
    server.close()


async def amain():
    loop = asyncio.get_running_loop()
    await asyncio.ensure_future(outer_coroutine())
    ctx = contextvars.Context()
    done = loop.create_future()
    loop.call_soon(lambda: (handle_callback(ctx), done.set_result(None)), context=ctx)
    await done
    await protocol_phase(loop)


def main():
    release = threading.Event()
    waiter = threading.Thread(target=release.wait, name="waiter", daemon=True)
    waiter.start()
    emit(phase="start", version=list(sys.version_info[:3]), loop=LOOP, asyncio_module=getattr(sys.modules.get("_asyncio"), "__file__", "built-in"))
    level_one()
    gil_phases()
    if LOOP == "uvloop":
        import uvloop
        uvloop.install()
    asyncio.run(amain())
    emit(phase="end")


main()
