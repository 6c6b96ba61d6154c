"""Child-process bodies of test_crash_ops.py: one thread-level operation of the file store, killed.

Two kinds of child:

- the **kill** bodies (:func:`run_op`, :func:`fork_loop`) start through the forkserver and report
  progress in shared integers, so the parent knows whether its SIGKILL landed mid-operation;
- :func:`crash_at` runs in a plain ``os.fork`` child: it wraps every mutating ``os`` call and
  ``os._exit`` s just before the ``n``-th one (a torn write for ``writev``/``write``), so every
  crash point of an operation is reached deterministically, with nothing of the operation's own
  cleanup (``finally`` blocks) running, as after a kill -9.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends.file import FileCheckpointer

KEEP = 12  # messages kept per state: checkpoints stay small however long the thread

CRASHED = 75
"""Exit status of a child that reached its crash point."""


def state_at(i: int) -> AgentState:
    """The state of save ``i`` of a test thread (bounded size, every one different)."""
    first = max(0, i - KEEP)
    messages = [Message.system("ops")] + [Message.user(f"m{j}:" + "y" * 64) for j in range(first, i + 1)]
    return AgentState(messages=messages, iteration=i, metadata={"n": i})


async def fill(cp: FileCheckpointer, thread_id: str, count: int, *, start: int = 0, source: str = "final") -> None:
    for i in range(start, start + count):
        await cp.save(state_at(i), thread_id, metadata={"source": source, "n": i})


def days_before(cutoff: datetime) -> float:
    """``older_than_days`` that makes ``vacuum`` drop exactly what was saved before ``cutoff``."""
    return (datetime.now(UTC) - cutoff).total_seconds() / 86400


def operation(cp: FileCheckpointer, op: str, args: tuple[Any, ...]) -> Callable[[], Any]:
    """The sync body of one operation (the checkpointer's own implementations, no event loop)."""
    if op == "copy":
        return lambda: cp._copy_sync(args[0], args[1])
    if op == "delete":
        return lambda: cp._delete_sync(args[0], None)
    if op == "vacuum":
        cutoff = datetime.fromisoformat(args[0])
        return lambda: asyncio.run(cp.vacuum(days_before(cutoff)))  # the sync body is per thread now
    if op == "fork":
        return lambda: asyncio.run(_fork(cp, args[0], args[1], args[2]))
    raise ValueError(f"unknown operation {op!r}")


async def _fork(cp: FileCheckpointer, how: str, source: str, new_id: str) -> str:
    if how == "lab":
        from tulip_nb.lab import afork

        latest = await cp.load(source)
        assert latest is not None
        return (await afork(source, len(latest.messages) - 1, new_thread_id=new_id, checkpointer=cp)).thread_id
    from tulip_nb.agent import Agent
    from tulip_nb.models import ScriptedModel, text

    return await Agent(ScriptedModel([text("x")]), checkpointer=cp).fork(source, new_thread_id=new_id)


def run_op(base: str, layout: Any, op: str, args: tuple[Any, ...], flag: Any, took: Any) -> None:
    """Run ``op`` once; ``flag``: 1 when it starts, 2 when it returned (the parent kills at random);
    ``took``: how long it took (seconds)."""
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    body = operation(cp, op, args)
    started = time.perf_counter()
    flag.value = 1
    body()
    took.value = time.perf_counter() - started
    flag.value = 2
    time.sleep(60)  # wait for the kill


def fork_loop(base: str, layout: Any, source: str, started: Any, done: Any) -> None:
    """Fork ``source`` into ``fork-<i>`` for i = 0, 1, ... until killed; ``started``/``done`` count."""
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    i = done.value
    while True:
        started.value = i + 1
        asyncio.run(_fork(cp, "agent", source, f"fork-{i}"))
        done.value = i + 1
        i += 1


_MUTATING = ("rename", "replace", "unlink", "mkdir", "rmdir", "ftruncate", "writev", "write", "open")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def crash_at(n: int, body: Callable[[], Any]) -> None:
    """Run ``body`` (in a forked child) and ``os._exit(CRASHED)`` just before its ``n``-th mutation.

    A crash at a ``writev`` or ``write`` writes half its bytes first (a torn write). Exits 0 when
    ``body`` made fewer than ``n`` mutations (the crash point is past the end).
    """
    count = [0]
    real = {name: getattr(os, name) for name in _MUTATING}

    def wrap(name: str) -> Callable[..., Any]:
        def call(*a: Any, **k: Any) -> Any:
            if name == "open" and not (len(a) > 1 and a[1] & _WRITE_FLAGS):
                return real[name](*a, **k)
            count[0] += 1
            if count[0] == n:
                if name == "writev" and a[1]:
                    first = bytes(a[1][0])
                    real["write"](a[0], first[: len(first) // 2])
                elif name == "write" and a[1]:
                    real["write"](a[0], bytes(a[1])[: len(a[1]) // 2])
                os._exit(CRASHED)
            return real[name](*a, **k)

        return call

    for name in _MUTATING:
        setattr(os, name, wrap(name))
    try:
        body()
    except BaseException:
        os._exit(CRASHED + 1)
    os._exit(0)
