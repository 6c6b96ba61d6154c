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

Sync twins follow one naming rule, ``ax`` is async and ``x`` its sync twin (``aopen_thread`` /
``open_thread``, ``Replay.astep`` / ``Replay.step``), and one mechanism, :func:`sync_twin`, which
also serves the seed's ``x`` / ``x_sync`` names (``Agent.run`` / ``Agent.run_sync``)::

    async def aopen_thread(checkpointer, thread_id): ...
    open_thread = sync_twin(aopen_thread)

    class Agent:
        async def run(self, prompt): ...
        run_sync = sync_twin(run, name="run_sync")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

__all__ = ["background_loop", "run_sync", "sync_twin"]

T = TypeVar("T")
P = ParamSpec("P")

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


def sync_twin(afn: Callable[P, Coroutine[Any, Any, T]], *, name: str | None = None) -> Callable[P, T]:
    """The sync twin of the coroutine function ``afn``: same parameters, returns what ``afn``
    returns, by running it with :func:`run_sync` (so it works inside a running loop too).

    ``name``: the twin's name; by default ``afn``'s without its leading ``a`` (``aopen_thread`` ->
    ``open_thread``). Works on module functions and on methods (assigned in the class body); a
    method twin looks ``afn`` up on the instance at each call, so a subclass's override of
    ``afn`` is the one that runs, as with a hand-written ``run_sync(self.afn(...))``. The twin's
    docstring says "Sync twin of :func:`afn`" above ``afn``'s own; ``inspect.signature`` and
    ``help()`` show ``afn``'s parameters.

    >>> async def adouble(x: int) -> int:
    ...     \"\"\"Twice ``x``.\"\"\"
    ...     return 2 * x
    >>> double = sync_twin(adouble)
    >>> double(21), double.__name__, double.__doc__.splitlines()[0]
    (42, 'double', 'Sync twin of :func:`adouble` (works inside a running event loop too).')
    """
    if not inspect.iscoroutinefunction(afn):
        raise TypeError(f"sync_twin() needs an async def function, got {afn!r}")
    aname = afn.__name__
    if name is None:
        if len(aname) < 2 or not aname.startswith("a"):
            raise ValueError(f"sync_twin({aname}): the name of an async function starts with 'a'; pass name=")
        name = aname[1:]
    owner = afn.__qualname__.rpartition(".")[0]
    is_method = bool(owner) and not owner.endswith("<locals>")

    if is_method:

        def twin(*args: P.args, **kwargs: P.kwargs) -> T:
            # Look the coroutine method up on the instance: a subclass may override it.
            bound: Callable[..., Coroutine[Any, Any, T]] = getattr(args[0], aname)
            return run_sync(bound(*args[1:], **kwargs))

    else:

        def twin(*args: P.args, **kwargs: P.kwargs) -> T:
            return run_sync(afn(*args, **kwargs))

    functools.update_wrapper(twin, afn)  # __module__, __doc__, __dict__, __wrapped__ (the signature)
    twin.__name__ = name
    twin.__qualname__ = f"{owner}.{name}" if owner else name
    role = "meth" if is_method else "func"
    head = f"Sync twin of :{role}:`{aname}` (works inside a running event loop too)."
    doc = inspect.cleandoc(afn.__doc__) if afn.__doc__ else ""
    twin.__doc__ = f"{head}\n\n{doc}" if doc else head
    return twin
