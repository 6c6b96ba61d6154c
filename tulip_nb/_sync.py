"""Run a coroutine to completion from sync code, including inside a running event loop.

Every :func:`run_sync` call in a process runs on **one** long-lived event loop in a daemon thread
(started on first use), while the calling thread waits. That works the same in a plain script and
in a notebook cell (whose own loop is already running and cannot be re-entered) without patching
asyncio (``nest_asyncio``), and it keeps connection pools usable across calls: an asyncpg or redis
pool is bound to the loop that created it, so ``agent.run_sync(...)`` twice on a PostgreSQL
checkpointer must see the same loop both times. Context variables are carried over; interrupting
the waiting thread (Ctrl-C, a notebook's stop button) cancels the coroutine.

A ``run_sync`` issued *from* that loop's own thread (a coroutine calling sync code that calls
``run_sync``) cannot wait on its own loop, so it runs on a private loop in a worker thread instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["background_loop", "run_sync"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The process-wide loop :func:`run_sync` runs coroutines on (started on first use)."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=serve, name="tulip_nb-loop", daemon=True)
            thread.start()
            ready.wait()
            _loop, _thread = loop, thread
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` and return its result (or raise its exception), from any thread."""
    ctx = contextvars.copy_context()
    if threading.current_thread() is _thread:
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tulip_nb-nested") as pool:
            return pool.submit(ctx.run, asyncio.run, coro).result()
    loop = background_loop()
    result: concurrent.futures.Future[T] = concurrent.futures.Future()
    task_box: list[asyncio.Task[T]] = []

    def start() -> None:
        task = loop.create_task(coro, context=ctx)
        task_box.append(task)

        def done(t: asyncio.Task[T]) -> None:
            if t.cancelled():
                result.cancel()
            elif (exc := t.exception()) is not None:
                result.set_exception(exc)
            else:
                result.set_result(t.result())

        task.add_done_callback(done)

    loop.call_soon_threadsafe(start)
    try:
        return result.result()
    except concurrent.futures.CancelledError:
        raise asyncio.CancelledError() from None
    except BaseException:
        if not result.done():  # interrupted while waiting: stop the coroutine too
            loop.call_soon_threadsafe(lambda: [t.cancel() for t in task_box])
        raise
