"""The README's main job (scripts/demo.py) runs offline and leaves a two-checkpoint thread."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tulip_nb.memory.backends import FileCheckpointer

DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"


@pytest.mark.slow
def test_demo_two_processes(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(DEMO), str(tmp_path)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "Day 2 (a new Python process)" in out and "We concluded: ord-4821: eligible" in out
    infos = asyncio.run(FileCheckpointer(tmp_path).list_checkpoint_infos("ticket-8912-refund"))
    assert len(infos) == 2 and infos[0].parent_checkpoint_id == infos[1].checkpoint_id
    assert str(infos[0].checkpoint_id) in out
