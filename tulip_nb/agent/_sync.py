"""Run a coroutine to completion from sync code, including inside a running event loop.

In a plain script there is no running loop, so :func:`run_sync` uses ``asyncio.run``. In a
notebook cell (or any coroutine) a loop is already running in this thread and cannot be re-entered;
instead of patching asyncio (``nest_asyncio``), the coroutine runs on a private loop in a worker
thread while this thread waits. Context variables are carried over.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` and return its result, whether or not this thread has a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    ctx = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tulip_nb-run_sync") as pool:
        return pool.submit(ctx.run, asyncio.run, coro).result()
