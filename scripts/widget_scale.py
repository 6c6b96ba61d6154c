"""Thread handles and widgets at scale: a 10,000-checkpoint thread and a corpus of 300 threads.

python scripts/widget_scale.py     # a few minutes: the 10,000 saves dominate
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from typing import Any

from tulip_nb.core import AgentState, Message
from tulip_nb.lab import open_thread, threads
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.widgets import ReplayPlayer, ThreadBrowser


def timed(label: str, fn: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    out = fn()
    print(f"{label}: {1e3 * (time.perf_counter() - t0):,.0f} ms")
    return out


async def long_thread(cp: FileCheckpointer, n: int) -> None:
    state = AgentState(messages=[Message.system("s")] + [Message.user(f"u{i}") for i in range(20)])
    for i in range(n):
        state.iteration = i
        await cp.save(state, "big")


async def corpus(cp: FileCheckpointer, n: int) -> None:
    for t in range(n):
        state = AgentState(messages=[Message.system("s")])
        for k in range(10):
            state.messages += [Message.user(f"thread {t} turn {k}"), Message.assistant(f"answer {k}")]
            await cp.save(state, f"case-{t:03d}")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        timed("10,000 saves", lambda: asyncio.run(long_thread(FileCheckpointer(d, fsync=False), 10_000)))
        thread = timed("open_thread, 10,000 checkpoints, new instance", lambda: open_thread(FileCheckpointer(d), "big"))
        player = timed("ReplayPlayer", lambda: ReplayPlayer(thread))
        timed("checkpoint mode", lambda: setattr(player.mode, "value", "checkpoints"))
        timed("seek to checkpoint 9,000", lambda: (player.controller.seek(9_000), player.controller.html()))
    with tempfile.TemporaryDirectory() as d:
        timed(
            "corpus of 300 threads x 10 checkpoints", lambda: asyncio.run(corpus(FileCheckpointer(d, fsync=False), 300))
        )
        frame = timed("threads() listing", lambda: threads(FileCheckpointer(d)))
        print(f"  {len(frame)} rows")
        timed("ThreadBrowser", lambda: ThreadBrowser(FileCheckpointer(d)))


if __name__ == "__main__":
    main()
