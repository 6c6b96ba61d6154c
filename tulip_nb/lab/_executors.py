"""Run work over many threads: in process, on any ``concurrent.futures.Executor``, or on Dask.

Corpus work is split **by thread**: :func:`map_threads` cuts the thread ids into chunks and calls
``task(source, chunk, payload)`` once per chunk, wherever the executor runs it. ``task`` is a
top-level (picklable) function — sync, or ``async def`` — that returns a list of row dicts, one or
more per thread of its chunk, each with its ``thread_id``. Nothing but the store URL, the ids and
``payload`` travels: the worker opens the store from its URL
(:func:`~tulip_nb.memory.backends.checkpointer_from_url`), so a worker's memory is one chunk's
rows and one thread at a time, whatever the corpus size::

    from tulip_nb.lab import map_threads

    async def count_messages(source, chunk, payload):      # top level: workers import it
        cp, opened = open_checkpointer(source)
        try:
            return [{"thread_id": t, "messages": len((await cp.load(t)).messages)} for t in chunk]
        finally:
            if opened:
                await cp.close()

    rows = map_threads(count_messages, "file:./corpus", ids, None)                  # in process
    rows = map_threads(count_messages, "file:./corpus", ids, None, executor=pool)   # ProcessPool
    rows = map_threads(count_messages, "file:./corpus", ids, None, executor=client) # Dask Client

``executor``:

- ``None``: in this process, one chunk after the other (an async task on the caller's loop, a
  sync one in a worker thread); ``source`` may then be a checkpointer instance. Out of process, a
  :class:`~tulip_nb.memory.backends.FileCheckpointer` instance's URL is derived from its
  directory when every worker runs on this machine (a process pool, a local Dask cluster); a
  remote worker, or an instance whose URL cannot be derived, is a :class:`UserError` saying why.
- any :class:`concurrent.futures.Executor`. A process pool needs a store URL, and the payload must
  pickle. Use a ``spawn`` or ``forkserver`` context (``ProcessPoolExecutor(mp_context=
  multiprocessing.get_context("spawn"))``): forking a process that runs tulip_nb's background
  event loop thread is unsafe. A ``ThreadPoolExecutor`` also takes a checkpointer instance.
- a ``dask.distributed.Client`` (recognised by duck typing; ``pip install 'tulip_nb[dask]'``):
  chunks are submitted as tasks (``pure=False``); the workers must be able to import tulip_nb and
  reach the store URL.

**Failures never lose the run.** A thread that fails inside ``task`` is the task's to report as a
row with ``error`` (the corpus tasks do). A chunk whose task raises, or whose worker process died
(``BrokenProcessPool``, Dask's ``KilledWorker``), becomes one row ``{"thread_id": t, "error":
"<Type>: <msg>"}`` per thread of the chunk; the other chunks' rows are kept. Rows come back in
thread order (chunk by chunk, each chunk's rows as its task returned them).

``progress``: ``None`` shows tqdm's bar in a terminal (stderr is a tty) when tqdm is installed
and there is more than one chunk, and nothing in a notebook (``CorpusView`` has its own bar);
``True`` always shows it (the notebook bar in Jupyter); ``False`` shows nothing; a callable is
called as ``progress(threads_done, threads_total)`` after each chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import os
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from tulip_nb._sync import run_sync, sync_twin
from tulip_nb.core.errors import UserError
from tulip_nb.lab._stores import open_checkpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = [
    "amap_threads",
    "error_row",
    "is_dask_client",
    "map_threads",
    "plan_chunks",
    "require_picklable",
    "worker_source",
]

Task = Callable[[Any, list[str], Any], Any]
"""``task(source, chunk, payload) -> list[dict]`` (or an ``async def`` returning it)."""
Progress = bool | Callable[[int, int], Any] | None

_IN_PROCESS_CHUNK = 25
"""Threads per chunk in process (only the progress bar's granularity)."""
_MAX_CHUNK = 64


def error_row(thread_id: str, error: BaseException) -> dict[str, Any]:
    """The row of a thread that failed: ``{"thread_id": ..., "error": "<Type>: <msg>"}``.

    >>> error_row("t-17", ValueError("no such order"))
    {'thread_id': 't-17', 'error': 'ValueError: no such order'}
    """
    return {"thread_id": thread_id, "error": f"{type(error).__name__}: {error}"}


def is_dask_client(executor: Any) -> bool:
    """Whether ``executor`` is a ``dask.distributed.Client`` (duck typing: dask is not imported)."""
    module = type(executor).__module__ or ""
    return module.split(".")[0] == "distributed" and all(
        hasattr(executor, a) for a in ("submit", "gather", "scheduler_info")
    )


def require_picklable(what: str, value: Any, *, dask: bool = False) -> None:
    """:class:`UserError` naming ``what`` unless ``value`` can be sent to a worker process.

    Dask sends with cloudpickle (lambdas and closures work); a process pool uses plain pickle.
    """
    try:
        if dask:
            import cloudpickle  # type: ignore[import-untyped]  # what Dask sends tasks with (from distributed)

            cloudpickle.dumps(value)
        else:
            pickle.dumps(value)
    except Exception as e:
        raise UserError(
            f"{what} cannot be sent to the executor's workers ({type(e).__name__}: {e}); it must pickle: "
            "use top-level functions instead of lambdas or closures, or run in process (executor=None)"
        ) from e


def _run_async_task(task: Task, source: Any, chunk: list[str], payload: Any) -> Any:
    """Run an ``async def`` task to completion in a worker (top level, so it pickles)."""
    return run_sync(task(source, chunk, payload))


def _source_for(where: Any, executor: Any) -> Any:
    """What the task is given as ``source``: in process the open checkpointer, elsewhere the store
    URL (a thread pool may share the checkpointer when there is no URL)."""
    if isinstance(where, str):
        if executor is None:
            return where
        if not where.lower().startswith("memory:"):
            return _absolute(where)
        where = open_checkpointer(where)[0]  # refused below: a worker's memory: store is its own, empty one
    cp = where if isinstance(where, BaseCheckpointer) else getattr(where, "checkpointer", None)
    url = None if isinstance(where, BaseCheckpointer) else getattr(where, "source", None)
    if not isinstance(cp, BaseCheckpointer):
        raise UserError(f"map_threads: expected a Corpus, a store URL or a checkpointer, got {type(where).__name__}")
    if executor is None:
        return cp
    threads_only = isinstance(executor, ThreadPoolExecutor)
    if isinstance(url, str) and url.lower().startswith("memory:"):
        url = None  # every process (and every open) has its own memory store: only the instance will do
    if isinstance(url, str):
        return _absolute(url)
    if threads_only:
        return cp
    return _derived_url(cp, executor)


def _derived_url(cp: BaseCheckpointer, executor: Any) -> str:
    """The URL workers open an instance's store from: a file store's directory, when every worker
    runs on this machine (a process pool, a local Dask cluster); else a :class:`UserError` saying why not."""
    what = f"executor={type(executor).__name__}: workers open the store from its URL, and this corpus was opened from "
    base = getattr(cp, "base_dir", None)
    if type(cp).__name__ != "FileCheckpointer" or getattr(cp, "layout", "history") != "history" or base is None:
        raise UserError(
            what + f"a {type(cp).__name__} instance, whose URL cannot be derived; open it from a URL the workers can "
            "reach (open_corpus('postgresql://...'), 's3://bucket/prefix/', 'file:///shared/dir')"
        )
    url = "file://" + os.path.abspath(str(base))
    remote = _remote_workers(executor) if is_dask_client(executor) else []
    if remote:
        raise UserError(
            what + f"a FileCheckpointer on this machine ({url}) and workers {remote[:3]} run elsewhere: they cannot "
            "read its directory; put the store on a server the workers reach (PostgreSQL, S3) and open it from its URL"
        )
    return url


def _local_hosts() -> set[str]:
    import socket

    hosts = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    with contextlib.suppress(OSError):
        hosts |= {str(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None)}
    return hosts


def _remote_workers(client: Any) -> list[str]:
    """The addresses of ``client``'s workers that are not on this machine."""
    from urllib.parse import urlsplit

    try:
        workers = list(client.scheduler_info()["workers"])
    except Exception:
        return ["(unknown: the scheduler did not answer)"]
    local = _local_hosts()
    return [w for w in workers if (urlsplit(w).hostname or "") not in local and not w.startswith("inproc://")]


def _absolute(url: str) -> str:
    """A relative file-store URL made absolute: a worker's working directory may be another."""
    if url.lower().startswith("file:") and not url.lower().startswith("file://"):
        return "file://" + os.path.abspath(os.path.expanduser(url[5:]))
    if url.startswith(("./", "../", "~")):
        return os.path.abspath(os.path.expanduser(url))
    return url


def _workers(executor: Any) -> int:
    if is_dask_client(executor):
        try:
            threads = sum(int(w.get("nthreads", 1)) for w in executor.scheduler_info()["workers"].values())
        except Exception:
            threads = 0
        return max(1, threads)
    n = getattr(executor, "_max_workers", None)
    return n if isinstance(n, int) and n > 0 else os.cpu_count() or 1


def _chunks(ids: list[str], size: int) -> list[list[str]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def plan_chunks(ids: Sequence[str], executor: Any, chunk_size: int | None) -> list[list[str]]:
    """The chunks :func:`map_threads` cuts ``ids`` into for ``executor`` (one task each)."""
    ids = list(ids)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise UserError(f"map_threads: chunk_size must be a positive int or None, got {chunk_size!r}")
    if chunk_size is None:
        per = _IN_PROCESS_CHUNK if executor is None else math.ceil(len(ids) / (4 * _workers(executor)))
        chunk_size = max(1, min(_MAX_CHUNK, per))
    return _chunks(ids, chunk_size)


def worker_source(corpus_or_source: Any, executor: Any) -> Any:
    """What a task is given as ``source`` for ``executor``: the open checkpointer in process (or on
    a thread pool without a URL), else the store URL workers open -- derived from a file store
    instance when every worker runs on this machine; :class:`UserError` when there is none."""
    return _source_for(corpus_or_source, executor)


def _terminal() -> bool:
    """Whether a progress bar has a terminal to go to (not a notebook kernel, not a pipe)."""
    import sys

    if "ipykernel" in sys.modules:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Progress:
    def __init__(self, progress: Progress, total: int, chunks: int) -> None:
        self.total = total
        self.done = 0
        self.fn: Callable[[int, int], Any] | None = None
        self.bar: Any = None
        if callable(progress) and not isinstance(progress, bool):
            self.fn = progress
        elif progress is True or (progress is None and chunks > 1 and _terminal()):
            try:
                from tqdm.auto import tqdm
            except ImportError:
                if progress is True:
                    raise UserError("progress=True needs tqdm: pip install 'tulip_nb[notebook]'") from None
            else:
                self.bar = tqdm(total=total, unit="thread", desc="threads")

    def step(self, n: int) -> None:
        self.done += n
        if self.fn is not None:
            self.fn(self.done, self.total)
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def amap_threads(
    task: Task,
    corpus_or_source: Any,
    thread_ids: Sequence[str],
    payload: Any,
    *,
    executor: Executor | Any | None = None,
    progress: Progress = None,
    chunk_size: int | None = None,
) -> list[dict[str, Any]]:
    """Call ``task(source, chunk, payload)`` over ``thread_ids`` in chunks; the rows, in thread order.

    See the module docstring. ``corpus_or_source``: a :class:`~tulip_nb.lab.corpus.Corpus`, a store
    URL or a checkpointer (in process or on a thread pool only). ``chunk_size``: threads per task
    (default: about four tasks per worker, at most 64; 25 in process). :class:`UserError` for an
    executor it does not know, a payload or task that does not pickle for a process pool or Dask,
    or an out-of-process executor without a store URL.
    """
    ids = list(thread_ids)
    dask = executor is not None and is_dask_client(executor)
    if executor is not None and not dask and not isinstance(executor, Executor):
        raise UserError(
            f"executor must be None, a concurrent.futures.Executor or a dask.distributed.Client, "
            f"got {type(executor).__name__}"
        )
    chunks = plan_chunks(ids, executor, chunk_size)
    source = _source_for(corpus_or_source, executor)
    if executor is not None and not isinstance(executor, ThreadPoolExecutor):
        require_picklable("the task", task, dask=dask)
        require_picklable("the payload", payload, dask=dask)
    bar = _Progress(progress, len(ids), len(chunks))
    results: list[list[dict[str, Any]] | None] = [None] * len(chunks)
    try:
        if executor is None:
            await _in_process(task, source, chunks, payload, results, bar)
        elif dask:
            await _on_dask(executor, task, source, chunks, payload, results, bar)
        else:
            await _on_executor(executor, task, source, chunks, payload, results, bar)
    finally:
        bar.close()
    return [row for rows in results if rows is not None for row in rows]


def _checked(rows: Any, chunk: list[str]) -> list[dict[str, Any]]:
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        err = TypeError(f"the task returned {type(rows).__name__}, expected a list of row dicts")
        return [error_row(t, err) for t in chunk]
    return rows


async def _in_process(
    task: Task, source: Any, chunks: list[list[str]], payload: Any, results: list[Any], bar: _Progress
) -> None:
    is_async = inspect.iscoroutinefunction(task)
    for k, chunk in enumerate(chunks):
        try:
            rows = (
                await task(source, chunk, payload)
                if is_async
                else await asyncio.to_thread(task, source, chunk, payload)
            )
            results[k] = _checked(rows, chunk)
        except Exception as e:
            results[k] = [error_row(t, e) for t in chunk]
        bar.step(len(chunk))


def _call(task: Task) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The picklable callable and leading arguments that run ``task`` in a worker."""
    return (_run_async_task, (task,)) if inspect.iscoroutinefunction(task) else (task, ())


async def _on_executor(
    executor: Executor,
    task: Task,
    source: Any,
    chunks: list[list[str]],
    payload: Any,
    results: list[Any],
    bar: _Progress,
) -> None:
    fn, lead = _call(task)
    pending: dict[asyncio.Future[Any], int] = {}
    for k, chunk in enumerate(chunks):
        try:
            pending[asyncio.wrap_future(executor.submit(fn, *lead, source, chunk, payload))] = k
        except Exception as e:  # a broken pool refuses new work
            results[k] = [error_row(t, e) for t in chunk]
            bar.step(len(chunk))
    await _drain(pending, chunks, results, bar)


async def _drain(
    pending: dict[asyncio.Future[Any], int], chunks: list[list[str]], results: list[Any], bar: _Progress
) -> None:
    waiting = set(pending)
    while waiting:
        done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        for fut in done:
            k = pending[fut]
            exc = fut.exception()
            results[k] = [error_row(t, exc) for t in chunks[k]] if exc else _checked(fut.result(), chunks[k])
            bar.step(len(chunks[k]))


def _settle(marker: asyncio.Future[Any], value: Any) -> None:
    if not marker.done():
        marker.set_result(value)


def _dask_result(fut: Any) -> tuple[Any, BaseException | None]:
    """``(rows, None)`` or ``(None, error)`` of a finished Dask future (runs in a thread: it fetches)."""
    try:
        return fut.result(), None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # KilledWorker, a cancelled future (lost cluster), the task's error
        return None, e


async def _on_dask(
    client: Any, task: Task, source: Any, chunks: list[list[str]], payload: Any, results: list[Any], bar: _Progress
) -> None:
    fn, lead = _call(task)
    loop = asyncio.get_running_loop()
    pending: dict[asyncio.Future[Any], int] = {}
    futures: list[Any] = []
    for k, chunk in enumerate(chunks):
        done: asyncio.Future[Any] = loop.create_future()
        try:
            fut = client.submit(fn, *lead, source, chunk, payload, pure=False)
        except Exception as e:
            results[k] = [error_row(t, e) for t in chunk]
            bar.step(len(chunk))
            continue
        futures.append(fut)

        def ready(f: Any, done: asyncio.Future[Any] = done) -> None:  # called in a Dask thread
            loop.call_soon_threadsafe(_settle, done, f)

        fut.add_done_callback(ready)
        pending[done] = k
    try:
        waiting = set(pending)
        while waiting:
            finished, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for marker in finished:
                k = pending[marker]
                rows, exc = await asyncio.to_thread(_dask_result, marker.result())
                results[k] = [error_row(t, exc) for t in chunks[k]] if exc is not None else _checked(rows, chunks[k])
                bar.step(len(chunks[k]))
    finally:
        for fut in futures:  # release the results on the cluster (and stop work nobody waits for)
            fut.release()


map_threads = sync_twin(amap_threads)
