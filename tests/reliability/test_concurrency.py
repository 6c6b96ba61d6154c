"""N processes x M threads on one backend: nothing lost; compare-and-swap races end in
CheckpointConflict, never a silent overwrite."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import _worker
from tulip_nb.memory.backends import checkpointer_from_url
from tulip_nb.memory.integrity import verify_thread

from .conftest import ITERATIONS, drop_table, forkserver, record_figure, shared_url

PROCS, THREADS = 4, 3


async def _hammer(url: str, tmp_path: Path) -> None:
    ctx = forkserver()
    saves = max(5, ITERATIONS // 2)
    outs = [tmp_path / f"out{w}" for w in range(PROCS)]
    procs = [
        ctx.Process(target=_worker.hammer, args=(url, w, THREADS, saves, "shared", str(outs[w])), daemon=True)
        for w in range(PROCS)
    ]
    for p in procs:
        p.start()
    for p in procs:
        await asyncio.to_thread(p.join, 120)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
        p.close()
    conflicts = 0
    shared_ok: list[str] = []
    own: list[str] = []
    for out in outs:
        first, second = out.read_text().split("\n")
        c, *ok = first.split()
        conflicts += int(c)
        shared_ok += ok
        own += second.split()
    cp = checkpointer_from_url(url)
    try:
        # every acknowledged save of every own thread is there, in order, and verifies
        for w in range(PROCS):
            for t in range(THREADS):
                infos = await cp.list_checkpoint_infos(f"own-{w}-{t}", limit=10_000)
                assert len(infos) == saves, f"own-{w}-{t}: {len(infos)} of {saves} saves"
                assert (await verify_thread(cp, f"own-{w}-{t}")).ok
        assert len(own) == PROCS * THREADS * saves
        # the shared thread: each successful CAS save is there, forming one linear chain
        infos = await cp.list_checkpoint_infos("shared", limit=10_000)
        assert sorted(i.checkpoint_id for i in infos) == sorted(shared_ok)
        assert len(shared_ok) + conflicts == PROCS * saves
        ordered = sorted(infos, key=lambda i: i.created_at)
        for older, newer in itertools.pairwise(ordered):
            assert newer.parent_checkpoint_id == older.checkpoint_id, "a CAS save did not build on the latest"
        latest = await cp.load("shared")
        assert latest is not None and len(latest.messages) == len(shared_ok)  # no lost update
        assert (await verify_thread(cp, "shared")).ok
    finally:
        await cp.close()
    record_figure("concurrent_saves", len(own) + len(shared_ok))
    record_figure("cas_conflicts", conflicts)


async def test_file(tmp_path: Path) -> None:
    await _hammer(f"file:{tmp_path / 'store'}", tmp_path)


async def test_redis(session_redis: Any, tmp_path: Path) -> None:
    await _hammer(session_redis.url + f"?prefix=conc{tmp_path.name[-6:]}:", tmp_path)


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_sql(kind: str, tmp_path: Path) -> None:
    url = shared_url(kind)
    try:
        await _hammer(url, tmp_path)
    finally:
        await drop_table(url)
