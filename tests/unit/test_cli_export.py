"""``tulip-nb export`` through a real subprocess."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends import FileCheckpointer


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tulip_nb.cli", "export", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def make_source(base: Path) -> FileCheckpointer:
    cp = FileCheckpointer(base)

    async def fill() -> None:
        for t in ("ticket-1", "ticket-2", "anon:support/7"):
            for i in range(3):
                await cp.save(AgentState(messages=[Message.user(f"{t} {i}")]), t, metadata={"i": i})

    asyncio.run(fill())
    return cp


@pytest.mark.slow
def test_export_prints_the_report_and_resumes(tmp_path: Path) -> None:
    make_source(tmp_path / "src")
    out = cli(f"file:{tmp_path / 'src'}", f"file:{tmp_path / 'dst'}")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("will write ~") and "history" in lines[0]  # the cost, before writing
    assert lines[1].split()[:4] == ["thread", "status", "checkpoints", "copied"]
    assert sum("copied" in line and "True" in line for line in lines) == 3
    assert "3 thread(s), copied 9 checkpoint(s), 0 failed" in out.stdout
    again = cli(f"file:{tmp_path / 'src'}", f"file:{tmp_path / 'dst'}", "--threads", "ticket-*", "--no-verify")
    assert again.returncode == 0 and "copied 0 checkpoint(s)" in again.stdout
    assert "up to date" in again.stdout and "support" not in again.stdout


@pytest.mark.slow
def test_dry_run_latest_only_and_id_mapping(tmp_path: Path) -> None:
    make_source(tmp_path / "src")
    dry = cli(str(tmp_path / "src"), str(tmp_path / "dst"), "--dry-run", "--latest-only")
    assert dry.returncode == 0 and "would copy 3 checkpoint(s)" in dry.stdout
    assert not (tmp_path / "dst").exists()
    mapped = cli(str(tmp_path / "src"), str(tmp_path / "plain"), "--map-ids", "strip-principal", "--principal", "anon")
    assert mapped.returncode == 0, mapped.stderr
    assert asyncio.run(FileCheckpointer(tmp_path / "plain").list_threads()) == ["support/7"]


@pytest.mark.slow
def test_conflict_exits_non_zero_and_bad_input_exits_2(tmp_path: Path) -> None:
    make_source(tmp_path / "src")
    asyncio.run(FileCheckpointer(tmp_path / "dst").save(AgentState(), "ticket-1"))
    out = cli(str(tmp_path / "src"), str(tmp_path / "dst"))
    assert out.returncode == 1 and "conflict" in out.stdout and "1 failed" in out.stdout
    over = cli(str(tmp_path / "src"), str(tmp_path / "dst"), "--on-conflict", "overwrite")
    assert over.returncode == 0, over.stdout
    bad = cli("nosuch://x", str(tmp_path / "dst"))
    assert bad.returncode == 2 and "unknown checkpointer URL scheme" in bad.stderr
    unmapped = cli(str(tmp_path / "src"), str(tmp_path / "x"), "--map-ids", "add-principal")
    assert unmapped.returncode == 2 and "principal" in unmapped.stderr
