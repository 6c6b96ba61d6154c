"""The export's cost estimate (``dest_bytes``): computed without writing, within 2x of what the
destination really holds, for the file store in both layouts; and what the CLI prints."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.core import AgentState, Message
from tulip_nb.lab._export_cost import CostModel, DestLayout, dest_layout
from tulip_nb.lab.export import aexport_threads
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import Checkpoint


def _text(rng: random.Random, n: int) -> str:
    words = ("tool", "result", "row", "error", "trace", "value", "thread", "cache", "index", "page")
    return " ".join(rng.choice(words) + str(rng.randrange(10_000)) for _ in range(n // 9))


async def _fill(cp: Any, thread: str, turns: int, seed: int = 0) -> int:
    """A thread saved after every model call (a turn: user, a tool round, an answer); its messages' JSON."""
    rng = random.Random(seed)
    state = AgentState(messages=[Message.system("You are a research agent.")], metadata={"user": "u-1"})
    for t in range(turns):
        state.messages.append(Message.user(f"question {t}: " + _text(rng, 200)))
        await state_save(cp, state, thread, "iteration")
        state.messages.append(
            Message.tool(_text(rng, rng.randrange(500, 3000)), tool_call_id=f"call_{t}", name="fetch")
        )
        await state_save(cp, state, thread, "iteration")
        state.messages.append(Message.assistant(_text(rng, rng.randrange(100, 1200))))
        state.metadata.setdefault("turns", []).append({"turn": t, "ok": True})
        await state_save(cp, state, thread, "final")
    return len(b"[" + b",".join(m.json_bytes() for m in state.messages) + b"]")


async def state_save(cp: Any, state: AgentState, thread: str, source: str) -> None:
    await cp.save(state, thread, metadata={"source": source})


def _stored_bytes(base: Path) -> int:
    """Every byte under ``base`` once SQLite's WAL is folded into the database (what stays)."""
    for db in base.rglob("*.sqlite3"):
        conn = sqlite3.connect(db)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    return sum(p.stat().st_size for p in base.rglob("*") if p.is_file())


@pytest.mark.parametrize("layout", ["history", "tulip"])
async def test_estimate_is_within_2x_of_the_bytes_the_file_store_writes(tmp_path: Path, layout: str) -> None:
    src = FileCheckpointer(tmp_path / "src", fsync=False)
    json_a = await _fill(src, "a", 40, seed=1)
    json_all = json_a + await _fill(src, "b", 15, seed=2)
    dst = FileCheckpointer(tmp_path / "dst", fsync=False, layout=layout)  # type: ignore[arg-type]
    dry = await aexport_threads(src, dst, dry_run=True, progress=False)
    assert not (tmp_path / "dst").exists() or _stored_bytes(tmp_path / "dst") < 100_000  # no rows written
    assert await dst.list_threads() == []
    assert dry.attrs["dest_layout"].startswith(layout)
    estimate = int(dry["dest_bytes"].sum())
    report = await aexport_threads(src, dst, progress=False, verify=False)
    assert list(report["copied"]) == [120, 45]
    # the same figure, dry or not (a message both threads share counts in whichever came first)
    assert int(report["dest_bytes"].sum()) == estimate
    await dst.close()
    real = _stored_bytes(tmp_path / "dst")
    assert real / 2 <= estimate <= real * 2, (estimate, real)
    if layout == "history":  # messages once, rows, each thread's latest envelope
        assert estimate < 3 * json_all
    else:  # a whole envelope per checkpoint: quadratic in the thread
        assert estimate > 20 * json_a


async def test_shared_messages_are_counted_once_in_the_history_layout(tmp_path: Path) -> None:
    src = MemoryCheckpointer()
    await _fill(src, "a", 20, seed=3)
    one = await aexport_threads(src, MemoryCheckpointer(), dry_run=True, progress=False)
    await src.copy_thread("a", "b")  # the same messages, a second thread of rows
    two = await aexport_threads(src, MemoryCheckpointer(), dry_run=True, progress=False)
    a, both = int(one["dest_bytes"].sum()), int(two["dest_bytes"].sum())
    assert a < both < 1.5 * a  # the copy adds its rows, not its messages again
    tulip = await aexport_threads(src, FileCheckpointer(tmp_path / "t", layout="tulip"), dry_run=True, progress=False)
    assert int(tulip["dest_bytes"].sum()) > 5 * both


def test_layouts_are_read_off_the_destination(tmp_path: Path) -> None:
    assert dest_layout(FileCheckpointer(tmp_path)).envelopes == "latest"
    assert dest_layout(FileCheckpointer(tmp_path, layout="tulip")).envelopes == "every"
    assert dest_layout(MemoryCheckpointer()) == DestLayout("history (in memory)", True, "none")
    from tulip_nb.memory.backends import redis_checkpointer

    kv = redis_checkpointer(url="redis://127.0.0.1:1/0")  # built, never connected
    got = dest_layout(kv)
    assert got.label.startswith(getattr(kv, "layout", "tulip key-value"))
    if not hasattr(kv, "layout"):  # the store before the history model: a whole record per save
        assert (got.history, got.envelopes, got.latest_copies, got.index) == (False, "every", 1, True)


def test_cost_model_counts_a_growing_thread_quadratically_only_in_tulips_layout() -> None:
    msgs = [Message.user("x" * 1000) for _ in range(50)]
    history = CostModel(DestLayout("h", True, "latest"))
    whole = CostModel(DestLayout("t", False, "every"))
    for n in range(1, 51):
        state = AgentState(messages=msgs[:n])
        ck = Checkpoint(f"c{n}", "t", datetime.now(UTC), state, {})
        size = len(state.to_json_bytes())
        history.add("t", ck, size)
        whole.add("t", ck, size)
    h, w = history.finish("t"), whole.finish("t")
    assert 50_000 < h < 50_000 + 50 * 1_500 + 60_000  # each message once, rows, one envelope
    assert w > 25 * 51 * 1000  # ~n²/2 messages


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tulip_nb.cli", "export", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_cli_says_what_it_will_write_before_writing(tmp_path: Path) -> None:
    src = FileCheckpointer(tmp_path / "src", fsync=False)
    asyncio.run(_fill(src, "t", 12))
    dry = _cli(str(tmp_path / "src"), str(tmp_path / "dst"), "--dry-run", "--layout", "tulip")
    assert dry.returncode == 0, dry.stderr
    assert "would copy 36 checkpoint(s)" in dry.stdout
    line = next(x for x in dry.stdout.splitlines() if x.startswith("would write ~"))
    assert 'its layout: tulip (layout="tulip"' in line and "36 checkpoint(s)" in line
    assert not (tmp_path / "dst").exists() or not any((tmp_path / "dst").rglob("*.json"))
    hist = _cli(str(tmp_path / "src"), str(tmp_path / "dst"), "--dry-run")
    hist_line = next(x for x in hist.stdout.splitlines() if x.startswith("would write ~"))
    assert "history" in hist_line

    def mb(text: str) -> float:
        number, unit = text.split("~")[1].split()[:2]
        return float(number.replace(",", "")) * (1e6 if unit == "MB" else 1e3)

    assert mb(line) > 3 * mb(hist_line)  # tulip's layout says it costs more, before writing it
    real = _cli(str(tmp_path / "src"), str(tmp_path / "dst"), "--layout", "tulip", "--no-verify")
    assert real.returncode == 0, real.stderr
    first = real.stdout.splitlines()[0]
    assert first.startswith("will write ~") and "tulip" in first and "copied 36 checkpoint(s)" in real.stdout
    refused = _cli(str(tmp_path / "src"), "memory:", "--layout", "tulip")
    assert refused.returncode == 2 and "takes no --layout" in refused.stderr
