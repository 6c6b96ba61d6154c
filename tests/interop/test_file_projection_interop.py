"""tulip-agents and the history layout sharing one thread directory: tulip resumes from the projection
(the latest turn end's envelope), tulip_nb continues after tulip's envelopes, and the directory keeps
one projection. (Ported from the delta layout's interop test, the same scenario.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tulip_nb.agent import Agent, NullManager
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.checkpointer import caller_metadata
from tulip_nb.memory.history import PROJECTION_KEY
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.models import ScriptedModel, text

tulip_agent = pytest.importorskip("tulip.agent", reason="tulip-agents (the interop peer) is not installed")
tulip_testing = pytest.importorskip("tulip.testing")
tulip_file = pytest.importorskip("tulip.memory.backends.file")
tulip_conversation = pytest.importorskip("tulip.memory.conversation")

pytestmark = pytest.mark.interop

THREAD = "user/7:history #1"


def _ours(base: Path, replies: list[str]) -> Agent:
    return Agent(
        ScriptedModel([text(r) for r in replies]),
        [],
        system_prompt="You are terse.",
        checkpointer=FileCheckpointer(base),
        conversation_manager=NullManager(),
        checkpoint_every_n_iterations=1,
    )


def _theirs(base: Path, replies: list[str]) -> Any:
    return tulip_agent.Agent(
        model=tulip_testing.ScriptedModel([tulip_testing.text(r) for r in replies]),
        tools=[],
        system_prompt="You are terse.",
        conversation_manager=tulip_conversation.NullManager(),
        checkpointer=tulip_file.FileCheckpointer(base_dir=str(base)),
    )


def _envelopes(directory: Path) -> list[dict[str, Any]]:
    return [orjson.loads(p.read_bytes()) for p in sorted(directory.glob("*.json"))]


def _mirrors(directory: Path) -> list[str]:
    return [e["checkpoint_id"] for e in _envelopes(directory) if e.get(PROJECTION_KEY)]


async def test_tulip_resumes_a_history_thread_and_we_continue_after_tulip(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    directory = cp.thread_dir(THREAD)
    ours = _ours(tmp_path, ["one", "two", "three"])
    results = []
    for q in ("q1", "q2", "q3"):
        results.append(await ours.run(q, thread_id=THREAD))
        assert _mirrors(directory) == [results[-1].checkpoint_id]  # replaced at each turn end
    assert len(_envelopes(directory)) == 1
    logged = await cp.list_checkpoints(THREAD, None)
    assert len(logged) >= 3  # every save is a row; only the projection is an envelope

    # tulip sees exactly the projection, and loads our third turn
    tcp = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    assert await tcp.list_checkpoints(THREAD) == [results[-1].checkpoint_id]
    loaded = await tcp.load(THREAD)
    assert loaded is not None and [m.content for m in loaded.messages][-2:] == ["q3", "three"]

    # a tulip agent continues the thread from the projection
    t_result = await asyncio.to_thread(_theirs(tmp_path, ["four"]).run_sync, "q4", thread_id=THREAD)
    assert [m.content for m in t_result.state.messages][-4:] == ["q3", "three", "q4", "four"]
    tulip_ids = [e["checkpoint_id"] for e in _envelopes(directory) if not e.get(PROJECTION_KEY)]
    assert tulip_ids  # tulip's own envelope(s)
    tulip_latest = (await tcp.list_checkpoints(THREAD))[0]
    assert tulip_latest in tulip_ids

    # we see tulip's envelope as the latest and continue after it
    fresh = FileCheckpointer(tmp_path)
    assert await fresh.latest_checkpoint_id(THREAD) == tulip_latest
    latest = await fresh.load(THREAD)
    assert latest is not None and latest.messages[-1].content == "four"
    fifth = await _ours(tmp_path, ["five"]).run("q5", thread_id=THREAD)
    assert [m.content for m in fifth.state.messages][-4:] == ["q4", "four", "q5", "five"]
    infos = await fresh.list_checkpoint_infos(THREAD, None)
    ids = [i.checkpoint_id for i in infos]
    assert len(ids) == len(set(ids))  # the projection is listed once, as the row's
    assert set(tulip_ids) <= set(ids) and set(logged) <= set(ids)
    assert ids[0] == fifth.checkpoint_id
    # the first save after tulip's turn is the child of tulip's checkpoint
    after = [i for i in infos if i.parent_checkpoint_id == tulip_latest]
    assert len(after) == 1 and caller_metadata(after[0].metadata)["parent_checkpoint_id"] == tulip_latest
    # one projection, the new turn end; tulip's envelopes stay
    assert _mirrors(directory) == [fifth.checkpoint_id]
    assert set(tulip_ids) <= {e["checkpoint_id"] for e in _envelopes(directory)}
    assert fresh.check_mirror(THREAD) == []
    assert (await verify_thread(fresh, THREAD)).counts().get("broken_chain", 0) == 0
    # and tulip resumes our fifth turn
    assert (await tcp.list_checkpoints(THREAD))[0] == fifth.checkpoint_id
    again = await tcp.load(THREAD)
    assert again is not None and again.messages[-1].content == "five"


async def test_tulip_save_into_a_history_thread_is_continued(tmp_path: Path) -> None:
    """tulip's FileCheckpointer (no agent) saves on top of the projection; our save follows it."""
    cp = FileCheckpointer(tmp_path)
    await _ours(tmp_path, ["a"]).run("q", thread_id=THREAD)
    tcp = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    state = await tcp.load(THREAD)
    assert state is not None
    extra = type(state.messages[0])(role="user", content="from tulip")
    state = state.model_copy(update={"messages": (*state.messages, extra)})
    tid = await tcp.save(state, THREAD, metadata={"source": "tulip"})
    latest = await cp.load_checkpoint(THREAD)
    assert latest is not None and latest.checkpoint_id == tid
    assert latest.state.messages[-1].content == "from tulip"
    ours = await cp.save(latest.state, THREAD, metadata={"source": "final"}, expected_parent=tid)
    assert (await cp.list_checkpoint_infos(THREAD, 1))[0].parent_checkpoint_id == tid
    assert _mirrors(cp.thread_dir(THREAD)) == [ours]
    assert (await tcp.list_checkpoints(THREAD))[0] == ours
    # an iteration save after tulip's does not move the projection, and stays out of tulip's view
    it = await cp.save(latest.state, THREAD, metadata={"source": "iteration"})
    assert await cp.latest_checkpoint_id(THREAD) == it
    assert _mirrors(cp.thread_dir(THREAD)) == [ours]
    assert it not in await tcp.list_checkpoints(THREAD)
    # once the turn ends, prune drops the iteration; the new projection and tulip's envelope stay
    end = await cp.save(latest.state, THREAD, metadata={"source": "final"})
    assert await cp.prune(THREAD) >= 1
    assert _mirrors(cp.thread_dir(THREAD)) == [end]
    assert it not in await cp.list_checkpoints(THREAD, None)
    assert tid in await cp.list_checkpoints(THREAD, None)
    assert cp.check_mirror(THREAD) == []
