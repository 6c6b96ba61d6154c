"""Mixed writers on one file thread: a tulip agent (takes no lock) and a strict tulip_nb agent, on the
history layout and with every checkpoint projected (``layout="tulip"``). Ported from the delta
layout's mixed-writer tests (issue 26): there, tulip_nb's checkpoints were files tulip could
overwrite or delete; here they are rows of the history, which tulip never touches (it writes and
removes envelopes), so every acknowledged turn of ours stays, and a tulip turn that landed in
between is either continued after or is a ``CheckpointConflict``, never a silent loss.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from tulip_nb.agent import Agent, NullManager
from tulip_nb.core.errors import CheckpointConflict
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.models import ScriptedModel, text

from .conftest import record_figure

tulip_file = pytest.importorskip(
    "tulip.memory.backends.file", reason="tulip-agents (the interop peer) is not installed"
)
tulip_agent = pytest.importorskip("tulip.agent")
tulip_testing = pytest.importorskip("tulip.testing")
tulip_conversation = pytest.importorskip("tulip.memory.conversation")

pytestmark = pytest.mark.interop

THREAD = "mixed/42:chat #1"


def _tulip_agent(base: Path) -> object:
    return tulip_agent.Agent(
        model=tulip_testing.ScriptedModel([tulip_testing.text("tulip ok")] * 200),
        tools=[],
        conversation_manager=tulip_conversation.NullManager(),
        checkpointer=tulip_file.FileCheckpointer(base_dir=str(base)),
    )


@pytest.mark.parametrize("layout", ["history", "tulip"])
async def test_mixed_agents_lose_no_acknowledged_turn(tmp_path: Path, layout: str) -> None:
    """30 turns each, concurrently, on one thread: every acknowledged tulip_nb checkpoint loads, as
    acknowledged, from a fresh instance; tulip's turns are read as the thread's; the envelopes are
    the history's once the writers stop."""
    turns = 30
    cp = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    ours = Agent(
        ScriptedModel([text("ok")], repeat_last=True),
        checkpointer=cp,
        conversation_manager=NullManager(),
        strict_concurrency=True,
    )
    theirs = _tulip_agent(tmp_path)
    rng = random.Random(7)

    def tulip_turns() -> None:
        for i in range(turns):
            theirs.run_sync(f"tulip {i}", thread_id=THREAD)  # type: ignore[attr-defined]
            time.sleep(rng.random() * 0.003)

    acknowledged: dict[str, bytes] = {}
    conflicts = 0
    worker = asyncio.create_task(asyncio.to_thread(tulip_turns))
    for i in range(turns):
        try:
            result = await ours.run(f"ours {i}", thread_id=THREAD)
        except CheckpointConflict:
            conflicts += 1
            continue
        assert result.checkpoint_id is not None
        acknowledged[result.checkpoint_id] = result.state.to_json_bytes()
        await asyncio.sleep(rng.random() * 0.003)
    await worker
    fresh = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    for cid, state in acknowledged.items():
        loaded = await fresh.load_checkpoint(THREAD, cid)
        assert loaded is not None and loaded.state.to_json_bytes() == state, cid
    ids = await fresh.list_checkpoints(THREAD, None)
    assert set(acknowledged) <= set(ids) and len(ids) == len(set(ids))
    tulip_ids = await tulip_file.FileCheckpointer(base_dir=str(tmp_path)).list_checkpoints(THREAD, limit=10_000)
    assert set(tulip_ids) <= set(ids)  # whatever tulip lists is a checkpoint of the thread for us too
    assert fresh.check_mirror(THREAD) == []
    assert (await verify_thread(fresh, THREAD)).counts().get("broken_chain", 0) == 0
    record_figure(f"mixed_writers_acknowledged_{layout}", len(acknowledged))
    record_figure(f"mixed_writers_conflicts_{layout}", conflicts)
