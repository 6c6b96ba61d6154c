"""export_threads against the real servers: 100 threads x 20 checkpoints File -> PostgreSQL, verified;
an export to PostgreSQL killed midway and resumed; every destination backend round-trips a thread."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tulip_nb.lab.export import aexport_threads
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer

from .conformance import full_state
from .conftest import BACKENDS, backend_params
from .factories.kv import PG_DSN, drop_pg_table, postgresql_backend, unique


async def fill(cp: BaseCheckpointer, threads: list[str], n: int) -> None:
    for t in threads:
        for i in range(n):
            await cp.save(full_state(n_turns=1 + i % 3, marker=f"{t}-{i}"), t, metadata={"step": i})


@pytest.mark.parametrize("kind", backend_params())
async def test_export_from_file_to_each_backend_and_back(kind: str, tmp_path: Path) -> None:
    src = FileCheckpointer(tmp_path / "src", fsync=False)
    threads = ["plain", "user/42:chat #1"]
    await fill(src, threads, 3)
    async with BACKENDS[kind](tmp_path) as open_store, open_store() as dst:
        out = await aexport_threads(src, dst, progress=False)
        assert out["verified"].all() and list(out["copied"]) == [3, 3], out.to_dict("records")
        back = FileCheckpointer(tmp_path / "back", fsync=False)
        home = await aexport_threads(dst, back, threads, progress=False)
        assert home["verified"].all() and list(home["checksum"]) == list(out["checksum"])


@pytest.mark.service("postgresql")
async def test_100_threads_x_20_checkpoints_file_to_postgresql_verifies_clean(tmp_path: Path) -> None:
    src = FileCheckpointer(tmp_path / "src", fsync=False)
    threads = [f"thread-{i:03d}" for i in range(100)]
    await fill(src, threads, 20)
    async with postgresql_backend(tmp_path) as open_store, open_store() as dst:
        report = await aexport_threads(src, dst, progress=False, concurrency=8)
        assert len(report) == 100 and int(report["copied"].sum()) == 2000
        assert report["verified"].all() and report["error"].isna().all()
        assert set(report["status"]) == {"copied"}
        # re-running is a no-op that still verifies
        again = await aexport_threads(src, dst, progress=False, concurrency=8, verify=False)
        assert int(again["copied"].sum()) == 0 and int(again["skipped"].sum()) == 2000


_KILLER = """
import os, sys
from tulip_nb.lab import export_threads
from tulip_nb.memory.backends import FileCheckpointer, postgresql_checkpointer

dest = postgresql_checkpointer(dsn=sys.argv[2], table_name=sys.argv[3])
die_at, calls = int(sys.argv[4]), 0
put = dest.put_checkpoint

async def dying_put(ckpt):
    global calls
    calls += 1
    if calls == die_at:
        os._exit(9)  # mid-export: a SIGKILL-like exit, no cleanup, connections dropped
    await put(ckpt)

dest.put_checkpoint = dying_put
export_threads(FileCheckpointer(sys.argv[1]), dest, progress=False, concurrency=4)
"""


@pytest.mark.service("postgresql")
async def test_export_to_postgresql_killed_midway_resumes(tmp_path: Path) -> None:
    from tests.conftest import require_service

    require_service("postgresql", "127.0.0.1", 5432)
    from tulip_nb.memory.backends import postgresql_checkpointer

    src = FileCheckpointer(tmp_path / "src", fsync=False)
    threads = [f"t{i}" for i in range(6)]
    await fill(src, threads, 5)
    table = unique("tnb_exp_")
    try:
        killed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", _KILLER, str(tmp_path / "src"), PG_DSN, table, "17"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert killed.returncode == 9, killed.stderr
        dst = postgresql_checkpointer(dsn=PG_DSN, table_name=table)
        try:
            done = sum([len(await dst.list_checkpoints(t, limit=100)) for t in threads])
            assert 0 < done < 30
            report = await aexport_threads(src, dst, progress=False)
            assert int(report["copied"].sum()) == 30 - done and int(report["skipped"].sum()) == done
            assert report["verified"].all()
            for t in threads:
                assert await dst.list_checkpoints(t, limit=100) == await src.list_checkpoints(t, limit=100)
        finally:
            await dst.close()
    finally:
        await drop_pg_table(table)
