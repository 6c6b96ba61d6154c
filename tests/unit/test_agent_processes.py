"""Durability across processes: each turn runs in its own ``python`` child process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.memory.backends import FileCheckpointer

pytestmark = pytest.mark.slow  # each test runs the agent in new Python processes

ROOT = Path(__file__).resolve().parents[2]


def scenario(tmp_path: Path, *args: str, env: dict[str, str] | None = None, expect_rc: int = 0) -> dict[str, Any]:
    full_env = {**os.environ, "SCENARIO_LEDGER": str(tmp_path / "ledger.txt"), **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.unit.agent_scenarios", args[0], str(tmp_path / "threads"), *args[1:]],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == expect_rc, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1]) if expect_rc == 0 else {}


def ledger(tmp_path: Path) -> list[str]:
    path = tmp_path / "ledger.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_seed_000_day_1_day_2_in_two_processes(tmp_path: Path) -> None:
    day1 = scenario(tmp_path, "day", "Look into the refund request on order ord-4821.")
    assert day1["text"] == "The return on ord-4821 is eligible." and day1["stop_reason"] == "complete"
    day2 = scenario(tmp_path, "day", "What did we conclude?")
    assert day2["text"].startswith("We concluded: ord-4821: delivered 12 days ago")
    assert [role for role, _ in day2["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert ledger(tmp_path) == ["lookup ord-4821"]
    cp = FileCheckpointer(tmp_path / "threads")
    infos = asyncio.run(cp.list_checkpoint_infos("ticket-8912-refund"))
    assert len(infos) == 2 and infos[0].parent_checkpoint_id == infos[1].checkpoint_id
    assert infos[0].checkpoint_id == day2["checkpoint_id"]


def test_crash_in_iteration_3_resumes_with_iterations_1_2_and_no_rerun(tmp_path: Path) -> None:
    scenario(tmp_path, "crash", env={"CRASH": "1"}, expect_rc=17)
    assert ledger(tmp_path) == ["charge 10", "note charged"]  # iteration 3's charge was a cache hit
    cp = FileCheckpointer(tmp_path / "threads")
    saved = asyncio.run(cp.load_checkpoint("case-4821"))
    assert saved is not None and saved.metadata["source"] == "iteration" and saved.state.iteration == 2
    assert len(saved.state.metadata["_tulip_iteration_checkpoints"]) == 2
    assert [e.tool_name for e in saved.state.tool_executions] == ["charge", "note"]

    resumed = scenario(tmp_path, "crash-resume")
    assert resumed["stop_reason"] == "complete" and resumed["text"] == "All done." and resumed["iterations"] == 4
    assert resumed["tool_calls"] == [["charge", True], ["explode", False]]
    assert ledger(tmp_path) == ["charge 10", "note charged"]  # charge never ran again
    roles = [role for role, _ in resumed["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "tool", "assistant"]
    final = asyncio.run(cp.load("case-4821"))
    assert final is not None and [e.idempotent_cache_hit for e in final.tool_executions] == [False, False, True, False]


def test_interrupt_resumed_in_a_new_process(tmp_path: Path) -> None:
    paused = scenario(tmp_path, "interrupt")
    assert paused["stop_reason"] == "interrupted" and paused["pending"] == "Approve a refund of 120?"
    done = scenario(tmp_path, "interrupt-resume", "Approved by Dana.")
    assert done["stop_reason"] == "complete" and done["text"] == "Manager said: Approved by Dana."
    assert done["tool_calls"] == [["ask_manager", False]]
