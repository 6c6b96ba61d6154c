"""tulip-nb convert: delta <-> tulip layouts (convert_thread), and to the history layout on stores this
engine writes (convert_to_history): verified, re-runnable, forks kept."""

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
from tulip_nb.memory.backends._history_file import HistoryFileCheckpointer
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.backends.file_convert import convert_thread, convert_to_history
from tulip_nb.memory.checkpointer import Checkpoint
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
        cp = FileCheckpointer(base, layout="delta")
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
        cp = FileCheckpointer(base, layout="delta")
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
    back = convert_thread(FileCheckpointer(base, layout="delta"), "t", "delta")
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
        convert_thread(FileCheckpointer(base, layout="delta"), "t", "delta")
    assert _view(base, "t") == before  # half in the log, half in envelopes: listed once, whole
    monkeypatch.setattr(_file_convert, "_check", real)
    convert_thread(FileCheckpointer(base, layout="delta"), "t", "delta")
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


# -- to the history layout, on stores this engine writes (tests/unit/test_convert_history.py runs
# the committed store of the previous release, which needs no writer) ------------------------------


def test_to_history_refuses_a_thread_whose_log_holds_envelope_extras(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    _build(base)
    before = {t: _view(base, t) for t in ("t", "t-fork")}
    cp = FileCheckpointer(base, layout="delta")
    latest = asyncio.run(cp.load_checkpoint("t"))
    assert latest is not None
    extra = Checkpoint("imported-1", "t", latest.created_at, latest.state, {"source": "import"}, {"x_origin": "s3"})
    asyncio.run(cp.put_checkpoint(extra))  # an envelope key, kept in the log record
    done = {r.thread_id: r for r in convert_to_history(base)}
    assert done["t"].status == "refused" and "x_origin" in done["t"].detail and "imported-1" in done["t"].detail
    assert done["t-fork"].status == "converted"
    hist = HistoryFileCheckpointer(base)
    assert asyncio.run(hist.store.rows("t")) == []  # nothing of it was written
    assert (base / "t" / ".tulip_nb_log").exists()  # and its log, which the fork used, stays
    asyncio.run(hist.close())
    assert asyncio.run(FileCheckpointer(base, layout="delta").load_checkpoint("t", "imported-1")).extra == {
        "x_origin": "s3"
    }
    assert [v for v in _view(base, "t") if v[0] != "imported-1"] == before["t"]


def test_to_history_keeps_a_save_made_between_the_phases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An old-release writer saving after the thread was verified: its log is kept, a re-run takes it."""
    base = tmp_path / "threads"
    _build(base)

    def late_save(event: str, thread_id: str, what: str = "") -> None:
        if event == "phase2":
            cp = FileCheckpointer(base, layout="delta")
            state = asyncio.run(cp.load("t"))
            assert state is not None
            asyncio.run(cp.save(state, "t", metadata={"source": "late"}, checkpoint_id="late-1"))

    monkeypatch.setattr(_file_convert, "_step", late_save)
    done = {r.thread_id: r for r in convert_to_history(base)}
    assert done["t"].status == "pending" and "changed in the old store" in done["t"].detail
    assert (base / "t" / ".tulip_nb_log").exists()
    monkeypatch.undo()
    again = {r.thread_id: r for r in convert_to_history(base)}
    assert again["t"].status == "converted" and again["t"].converted == 1
    assert not (base / "t" / ".tulip_nb_log").exists()
    hist = FileCheckpointer(base)
    latest = asyncio.run(hist.load_checkpoint("t"))
    assert latest is not None and latest.checkpoint_id == "late-1"
    assert asyncio.run(verify_thread(hist, "t")).ok
    asyncio.run(hist.close())


def test_cli_converts_to_history_by_default(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    _build(base)
    n = {t: len(_view(base, t)) for t in ("t", "t-fork")}
    r = subprocess.run(
        [sys.executable, "-m", "tulip_nb.cli", "convert", str(base)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"t: {n['t']} checkpoint(s), {n['t']} converted, {n['t']} verified, 4 old file(s) removed; converted",
        f"t-fork: {n['t-fork']} checkpoint(s), {n['t-fork']} converted, {n['t-fork']} verified,"
        " 3 old file(s) removed; converted",
    ]
    assert not list(base.rglob(".tulip_nb_log*"))
