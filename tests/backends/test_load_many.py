"""``load_checkpoints``: a thread's checkpoints read in one pass, equal to loading them one by one.

The file store walks each history only down to the checkpoint loaded before it and patches each
row's fields onto its base's; these tests hold it to the one-by-one loads on generated messy
threads (failed turns, tulip turns, forks that change the prompt), and to the same corruption
verdicts.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import examples
from tulip_nb.core import AgentState, CheckpointCorrupt, CheckpointNotFound, Message
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.testing import MessySpec, abuild_messy_thread, messy_specs


def _same(a: Checkpoint, b: Checkpoint) -> bool:
    return (
        a.checkpoint_id == b.checkpoint_id
        and a.created_at == b.created_at
        and a.metadata == b.metadata
        and a.state.to_json_bytes() == b.state.to_json_bytes()
    )


async def _check_equal(cp: BaseCheckpointer, thread_id: str) -> int:
    infos = await cp.list_checkpoint_infos(thread_id, limit=None)
    ids = [i.checkpoint_id for i in reversed(infos)]  # oldest first, as verify reads them
    fresh = type(cp)(cp.base_dir) if isinstance(cp, FileCheckpointer) else cp
    many = await fresh.load_checkpoints(thread_id, ids)
    assert len(many) == len(ids)
    for cid, got in zip(ids, many, strict=True):
        one = await cp.load_checkpoint(thread_id, cid)
        assert isinstance(got, Checkpoint) and one is not None, (cid, got)
        assert _same(got, one), cid
    # newest first and with repeats: no order assumption
    back = await fresh.load_checkpoints(thread_id, [*reversed(ids), ids[0], ids[0]])
    assert all(isinstance(g, Checkpoint) for g in back)
    assert _same(back[-1], many[0])  # type: ignore[arg-type]
    return len(ids)


@settings(max_examples=examples(0.04), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=messy_specs(min_turns=4, max_turns=14, max_forks=2))
async def test_batch_equals_one_by_one_on_messy_threads(spec: MessySpec) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cp = FileCheckpointer(tmp, fsync=False)
        mt = await abuild_messy_thread(cp, "messy", spec)
        assert await _check_equal(cp, "messy") > 0
        for fork in mt.forks:
            await _check_equal(cp, fork.thread_id)
        await cp.close()


async def test_states_of_one_batch_share_no_mutable_value(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, fsync=False)
    ids = []
    for i in range(3):
        state = AgentState(messages=[Message.user(f"q{k}") for k in range(i + 1)], metadata={"log": list(range(i))})
        ids.append(await cp.save(state, "t"))
    _, b, c = await FileCheckpointer(tmp_path).load_checkpoints("t", ids)
    assert isinstance(b, Checkpoint) and isinstance(c, Checkpoint)
    b.state.metadata["log"].append("mutated")
    assert c.state.metadata["log"] == [0, 1]


async def test_missing_and_corrupt_checkpoints_are_their_errors(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, fsync=False)
    ids = []
    for i in range(6):
        ids.append(await cp.save(AgentState(messages=[Message.user(f"q{k}") for k in range(i + 1)]), "t"))
    with sqlite3.connect(tmp_path / ".tulip_nb" / "history.sqlite3") as conn:
        rowid, data = conn.execute(  # one bit of the fourth message: checkpoints 3.. hold it
            "SELECT e.rowid, e.data FROM entries e JOIN checkpoints c ON c.head = e.rowid WHERE c.cid = ?",
            (ids[3],),
        ).fetchone()
        conn.execute(
            "UPDATE entries SET data = ? WHERE rowid = ?", (data[:-2] + bytes([data[-2] ^ 4]) + data[-1:], rowid)
        )
    got = await FileCheckpointer(tmp_path).load_checkpoints("t", [*ids, "nope"])
    assert [type(g).__name__ for g in got] == ["Checkpoint"] * 3 + ["CheckpointCorrupt"] * 3 + ["CheckpointNotFound"]
    assert isinstance(got[3], CheckpointCorrupt) and got[3].checkpoint_id == ids[3]
    assert isinstance(got[-1], CheckpointNotFound)
    report = await verify_thread(FileCheckpointer(tmp_path), "t")
    assert [v.status for v in report.verdicts][3:] == ["unreadable"] * 3


@pytest.mark.parametrize("make", [MemoryCheckpointer, lambda: FileCheckpointer(tempfile.mkdtemp(), fsync=False)])
async def test_the_default_and_the_file_store_agree_on_a_long_thread(make: object) -> None:
    cp = make()  # type: ignore[operator]
    mt = await abuild_messy_thread(cp, "long", MessySpec(turns=60, forks=1, seed=7))
    assert await _check_equal(cp, "long") > 60
    report = await verify_thread(cp, "long")
    assert report.ok, report.failures
    assert mt.forks
