"""Issue 18's operations at research scale: a 10,000-checkpoint thread and a 300-turn thread.

python scripts/store_ops_scale.py     # about a minute

On a file store (delta layout, fsync on for the timed operations): build the thread, then time
``copy_thread`` (crash-atomic: staging directory + rename), ``verify_thread`` with and without an
anchor, a rollback caught by the anchor, a strict save (compare-and-swap + the foreign-writer
check) against a plain one, ``vacuum`` and ``delete(thread)`` (tombstone), and check that every
result is right (the copy verifies, the rollback is reported, the thread is gone).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.integrity import verify_thread


async def timed(label: str, fn: Callable[[], Awaitable[Any]]) -> Any:
    t0 = time.perf_counter()
    out = await fn()
    print(f"  {label}: {time.perf_counter() - t0:,.2f} s")
    return out


async def build(cp: FileCheckpointer, thread: str, checkpoints: int, per_turn: int) -> None:
    """``checkpoints`` saves; a user turn every ``per_turn`` saves (the rest are iterations)."""
    state = AgentState(messages=[Message.system("You are a support agent.")])
    for i in range(checkpoints):
        if i % per_turn == 0:
            state.messages.append(Message.user(f"turn {i // per_turn}: " + "details " * 20))
        state.messages.append(Message.assistant(f"step {i}"))
        source = "final" if i % per_turn == per_turn - 1 else "iteration"
        await cp.save(state, thread, metadata={"source": source})


async def strict_vs_plain(base: Path, thread: str, n: int = 20) -> tuple[float, float]:
    cp = FileCheckpointer(base)
    state = await cp.load(thread)
    assert state is not None
    plain, strict = [], []
    for _ in range(n):
        state.messages.append(Message.assistant("one more"))
        t = time.perf_counter()
        await cp.save(state, thread)
        plain.append(time.perf_counter() - t)
        head = (await cp.list_checkpoint_infos(thread, limit=1))[0].checkpoint_id
        state.messages.append(Message.assistant("and a strict one"))
        t = time.perf_counter()
        await cp.save(state, thread, expected_parent=head)
        strict.append(time.perf_counter() - t)
    return 1e3 * statistics.median(plain), 1e3 * statistics.median(strict)


async def scenario(label: str, checkpoints: int, per_turn: int) -> None:
    print(f"{label}: {checkpoints:,} checkpoints, a turn every {per_turn}")
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        await timed("build (fsync off)", lambda: build(FileCheckpointer(base, fsync=False), "t", checkpoints, per_turn))
        cp = FileCheckpointer(base)
        await timed("copy_thread", lambda: cp.copy_thread("t", "t-copy"))
        copy = await timed("verify_thread of the copy", lambda: verify_thread(FileCheckpointer(base), "t-copy"))
        assert copy.ok, copy
        report = await timed("verify_thread", lambda: verify_thread(FileCheckpointer(base), "t"))
        assert report.ok and report.head_anchor is not None, report
        anchor = report.head_anchor
        newest = (await cp.list_checkpoint_infos("t-copy", limit=3))[:3]
        for info in newest:  # roll the copy back by three checkpoints
            assert await cp.delete("t-copy", info.checkpoint_id)
        copy_anchor = copy.head_anchor
        rolled = await timed(
            "verify_thread of the rolled-back copy, with its anchor",
            lambda: verify_thread(FileCheckpointer(base), "t-copy", expect=copy_anchor),
        )
        assert not rolled.ok, "a rollback below the anchor must be reported"
        again = await timed(
            "verify_thread with the anchor", lambda: verify_thread(FileCheckpointer(base), "t", expect=anchor)
        )
        assert again.ok, again
        plain, strict = await strict_vs_plain(base, "t")
        print(f"  save, median of 20: {plain:.2f} ms plain, {strict:.2f} ms strict (CAS + foreign-writer check)")
        await timed("delete(thread) of the copy", lambda: cp.delete("t-copy"))
        assert await FileCheckpointer(base).load("t-copy") is None
        removed = await timed("vacuum(0) of everything", lambda: FileCheckpointer(base).vacuum(0))
        print(f"  vacuum removed {removed:,} checkpoints")


async def main() -> None:
    await scenario("10,000-checkpoint thread", 10_000, 25)
    await scenario("300-turn thread", 300 * 4, 4)


if __name__ == "__main__":
    asyncio.run(main())
