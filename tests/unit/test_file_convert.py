"""tulip-nb convert / convert_thread: delta <-> tulip layouts, verified, re-runnable, forks kept."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tulip_nb.agent import Agent
from tulip_nb.core.errors import CheckpointCorrupt
from tulip_nb.memory.backends import file_convert as _file_convert
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.backends.file_convert import convert_thread
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.models import ScriptedModel, text, tool_call


def lookup(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order id.
    """
    return f"{order_id}: delivered"


def _build(base: Path) -> None:
    async def go() -> None:
        script: list[Any] = []
        for t in range(4):
            script += [tool_call("lookup", order_id=f"o-{t}-{k}") for k in range(2)] + [text(f"answer {t}")]
        cp = FileCheckpointer(base)
        agent = Agent(
            ScriptedModel([*script, text("fork answer")]), [lookup], checkpointer=cp, checkpoint_every_n_iterations=1
        )
        for t in range(4):
            await agent.run(f"question {t}", thread_id="t")
        await agent.fork("t", new_thread_id="t-fork")
        await agent.run("and the fork?", thread_id="t-fork")

    asyncio.run(go())


def _view(base: Path, thread_id: str) -> list[tuple[Any, ...]]:
    async def go() -> list[tuple[Any, ...]]:
        cp = FileCheckpointer(base)
        out = []
        for info in await cp.list_checkpoint_infos(thread_id, None):
            ck = await cp.load_checkpoint(thread_id, info.checkpoint_id)
            assert ck is not None
            out.append((info.checkpoint_id, info.created_at, dict(info.metadata), ck.state.to_json_bytes()))
        assert (await verify_thread(cp, thread_id)).ok
        return out

    return asyncio.run(go())


def _envelopes(base: Path, thread_id: str) -> int:
    return len(list((base / thread_id).glob("*.json")))


def test_round_trip_between_layouts(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    _build(base)
    before = {t: _view(base, t) for t in ("t", "t-fork")}
    assert _envelopes(base, "t") == 1 and (base / "t" / ".tulip_nb_log").exists()
    cp = FileCheckpointer(base, layout="tulip")
    done = convert_thread(cp, "t", "tulip")
    assert done.converted == done.checkpoints == len(before["t"]) > 10
    assert not (base / "t" / ".tulip_nb_log").exists() and _envelopes(base, "t") == len(before["t"])
    assert _view(base, "t") == before["t"]
    assert _view(base, "t-fork") == before["t-fork"]  # its base log is gone: it was made to stand alone
    again = convert_thread(cp, "t", "tulip")
    assert again.converted == 0 and again.checkpoints == len(before["t"])
    back = convert_thread(FileCheckpointer(base), "t", "delta")
    assert back.converted == len(before["t"]) and _envelopes(base, "t") == 1
    assert _view(base, "t") == before["t"]


def test_a_conversion_that_stops_midway_leaves_a_whole_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "threads"
    _build(base)
    before = _view(base, "t")
    convert_thread(FileCheckpointer(base, layout="tulip"), "t", "tulip")
    real, calls = _file_convert._check, {"n": 0}

    def failing(written: Any, source: Any, where: str) -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise CheckpointCorrupt("injected", path=where)
        real(written, source, where)

    monkeypatch.setattr(_file_convert, "_check", failing)
    with pytest.raises(CheckpointCorrupt, match="injected"):
        convert_thread(FileCheckpointer(base), "t", "delta")
    assert _view(base, "t") == before  # half in the log, half in envelopes: listed once, whole
    monkeypatch.setattr(_file_convert, "_check", real)
    convert_thread(FileCheckpointer(base), "t", "delta")
    assert _view(base, "t") == before and _envelopes(base, "t") == 1


def test_cli(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    _build(base)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tulip_nb.cli", "convert", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    r = cli(str(base), "--to", "tulip")
    assert r.returncode == 0, r.stderr
    assert sorted(ln.split(":")[0] for ln in r.stdout.splitlines()) == ["t", "t-fork"]
    assert "verified" in r.stdout and "2 thread(s) in the tulip layout" in r.stderr
    r = cli(str(base), "t", "--to", "delta")
    assert r.returncode == 0 and r.stdout.startswith("t: ") and "converted" in r.stdout
    r = cli(str(base), "nope", "--to", "delta")
    assert r.returncode == 2 and "no such thread" in r.stderr
    r = cli(str(tmp_path / "missing"), "--to", "delta")
    assert r.returncode == 2 and "no such directory" in r.stderr
