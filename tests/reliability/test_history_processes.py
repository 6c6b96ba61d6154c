"""The history layout under several processes: saves from spawned processes, and kill -9 mid-save.

Each child opens its own ``FileCheckpointer(base_dir, layout="history")`` (its own SQLite
connection); the parent then checks, through a fresh instance, that every save a child had
acknowledged is there and loads, and that the store's reference counts are exact.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends import FileCheckpointer

SPAWN = multiprocessing.get_context("spawn")


def _open(base: str) -> Any:
    return FileCheckpointer(base, layout="history")


async def _saver(base: str, worker: int, threads: int, saves: int) -> list[tuple[str, str]]:
    cp = _open(base)
    acked: list[tuple[str, str]] = []
    try:
        for i in range(saves):
            tid = f"shared-{i % threads}"
            state = await cp.load(tid) or AgentState(messages=[Message.system("sys")])
            state.messages = [*state.messages, Message.user(f"w{worker} s{i} " + "y" * 300)]
            state.metadata = {"worker": worker, "i": i}
            meta = {"source": "final" if i % 3 == 2 else "iteration"}
            acked.append((tid, await cp.save(state, tid, metadata=meta)))
    finally:
        await cp.close()
    return acked


def saver(base: str, worker: int, threads: int, saves: int, out: Any) -> None:
    out.put(asyncio.run(_saver(base, worker, threads, saves)))


async def _loop(base: str, acked: Any) -> None:
    cp = _open(base)
    state = AgentState(messages=[Message.system("sys")])
    n = 0
    while True:
        n += 1
        state.messages = [*state.messages, Message.user(f"m{n} " + "z" * 2000 + f" end{n}")]
        state.metadata = {"n": n}
        for tid in ("k1", "k2"):
            await cp.save(state, tid, metadata={"source": "final" if n % 2 else "iteration"})
        acked.value = n


def save_loop(base: str, acked: Any) -> None:
    asyncio.run(_loop(base, acked))


async def test_several_processes_lose_no_acknowledged_save(tmp_path: Path) -> None:
    base = str(tmp_path / "threads")
    out = SPAWN.Queue()
    procs = [SPAWN.Process(target=saver, args=(base, w, 3, 25, out)) for w in range(3)]
    for p in procs:
        p.start()
    acked = [pair for _ in procs for pair in out.get(timeout=300)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    cp = _open(base)
    for t in range(3):
        tid = f"shared-{t}"
        mine = {cid for th, cid in acked if th == tid}
        infos = await cp.list_checkpoint_infos(tid, None)
        assert {i.checkpoint_id for i in infos} == mine
        parents = [i.parent_checkpoint_id for i in infos]
        assert parents == [i.checkpoint_id for i in infos[1:]] + [None]  # one chain: saves were ordered
        for info in infos:
            assert await cp.load(tid, info.checkpoint_id) is not None
        assert cp.check_mirror(tid) == []
    assert cp.check_store() == []


@pytest.mark.parametrize("run", range(3))
def test_kill_9_leaves_every_thread_whole(tmp_path: Path, run: int) -> None:
    base = str(tmp_path / "threads")
    acked = SPAWN.Value("i", 0)
    proc = SPAWN.Process(target=save_loop, args=(base, acked))
    proc.start()
    deadline = time.monotonic() + 120
    while acked.value < 5 + 7 * run and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.013 * (run + 1))  # land the kill somewhere inside a save
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=30)
    asyncio.run(_check_after_kill(base, acked.value))


async def _check_after_kill(base: str, done: int) -> None:
    assert done >= 5
    cp = _open(base)
    for tid in ("k1", "k2"):
        latest = await cp.load(tid)
        assert latest is not None
        n = latest.metadata["n"]
        assert n >= done  # every acknowledged save is there
        assert len(latest.messages) == n + 1 and (latest.messages[-1].content or "").endswith(f" end{n}")
        for info in await cp.list_checkpoint_infos(tid, None):
            assert await cp.load(tid, info.checkpoint_id) is not None
    assert cp.check_store() == []
    for tid in ("k1", "k2"):  # the projection a kill may have left behind is repaired on first touch
        assert cp.check_mirror(tid) == []
    await cp.close()
