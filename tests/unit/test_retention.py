"""Retention: plan_prune and relink on generated long threads, and a real agent's thread pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tulip_nb.agent import Agent
from tulip_nb.core.keys import PARENT_KEY, PRUNED_KEY
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import CheckpointInfo
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.memory.retention import is_iteration, plan_prune, relink
from tulip_nb.models import ScriptedModel, text, tool_call

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def chain(sources: list[str]) -> list[CheckpointInfo]:
    """A linear thread whose i-th checkpoint has ``sources[i]`` (each the child of the previous)."""
    out = []
    for n, source in enumerate(sources):
        meta = {"source": source, PARENT_KEY: f"c{n - 1}" if n else None, "tulip_nb_hash": f"h{n}"}
        meta["tulip_nb_parent_hash"] = f"h{n - 1}" if n else None
        out.append(CheckpointInfo(f"c{n}", "t", T0 + timedelta(seconds=n), meta))
    return out


sources = st.lists(st.sampled_from(["iteration", "iteration", "iteration", "final", "interrupt"]), max_size=300)


@settings(deadline=None)
@given(sources=sources, keep_last=st.none() | st.integers(0, 20), keep_turn_ends=st.booleans())
def test_plan_prune_invariants(sources: list[str], keep_last: int | None, keep_turn_ends: bool) -> None:
    infos = chain(sources)
    dropped = plan_prune(infos, keep_last, keep_turn_ends)
    ids = [i.checkpoint_id for i in infos]
    assert dropped <= set(ids)
    if keep_turn_ends:
        assert not any(i.checkpoint_id in dropped for i in infos if not is_iteration(i))
    if keep_last is None:
        if ids:
            assert ids[-1] not in dropped  # the latest is never dropped
        # the unfinished last turn (trailing iteration saves) is what resume() continues from
        for info in reversed(infos):
            if not is_iteration(info):
                break
            assert info.checkpoint_id not in dropped
        if keep_turn_ends:  # only iteration saves with a later turn end go
            for n, info in enumerate(infos):
                ended = any(not is_iteration(j) for j in infos[n + 1 :])
                assert (info.checkpoint_id in dropped) == (is_iteration(info) and ended)
    else:
        assert not dropped & set(ids[len(ids) - keep_last :] if keep_last else [])


@settings(deadline=None)
@given(sources=sources, keep_last=st.none() | st.integers(0, 20), rounds=st.integers(1, 3))
def test_relink_points_every_survivor_at_its_nearest_surviving_ancestor(
    sources: list[str], keep_last: int | None, rounds: int
) -> None:
    infos = chain(sources)
    original = {i.checkpoint_id: dict(i.metadata) for i in infos}
    for _ in range(rounds):  # repeated prunes compose
        dropped = plan_prune(infos, keep_last, keep_turn_ends=keep_last is None)
        new = relink(infos, dropped)
        infos = [
            CheckpointInfo(i.checkpoint_id, "t", i.created_at, new.get(i.checkpoint_id, i.metadata))
            for i in infos
            if i.checkpoint_id not in dropped
        ]
    alive = [i.checkpoint_id for i in infos]
    for n, info in enumerate(infos):
        want = alive[n - 1] if n else None
        assert info.metadata[PARENT_KEY] == want
        record = info.metadata.get(PRUNED_KEY)
        orig_parent = original[info.checkpoint_id][PARENT_KEY]
        if orig_parent == want:
            assert record is None
        else:
            assert record["parent"] == orig_parent
            assert record["parent_hash"] == original[info.checkpoint_id]["tulip_nb_parent_hash"]
            assert record["base_hash"] == (original[want]["tulip_nb_hash"] if want else None)
            first = int(orig_parent[1:])
            assert record["dropped"] == first - (int(want[1:]) if want else -1)


def lookup(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order id.
    """
    return f"{order_id}: delivered"


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_real_thread_pruned_verifies_and_resumes(kind: str, tmp_path: Path) -> None:
    """30 turns of 3 tool calls each, saved after every iteration: prune keeps turn ends only."""
    cp = MemoryCheckpointer() if kind == "memory" else FileCheckpointer(tmp_path, sign=True)
    turns = 30
    script = []
    for t in range(turns):
        script += [tool_call("lookup", order_id=f"o-{t}-{k}") for k in range(3)] + [text(f"answer {t}")]
    agent = Agent(ScriptedModel(script), [lookup], checkpointer=cp, checkpoint_every_n_iterations=1)
    for t in range(turns):
        await agent.run(f"question {t}", thread_id="long")
    before = await cp.list_checkpoint_infos("long", None)
    latest = await cp.load_checkpoint("long")
    assert latest is not None
    dropped = await cp.prune("long")
    after = await cp.list_checkpoint_infos("long", None)
    assert dropped == len(before) - len(after) == sum(is_iteration(i) for i in before)
    assert dropped >= 2 * turns and all(not is_iteration(i) for i in after)
    report = await verify_thread(cp, "long")
    assert report.ok and report.counts() == {"ok": len(after)}, str(report)
    again = await cp.load_checkpoint("long")
    assert again is not None and again.checkpoint_id == latest.checkpoint_id
    assert again.state.messages == latest.state.messages
    agent2 = Agent(ScriptedModel([text("more")]), [lookup], checkpointer=cp)
    result = await agent2.run("one more", thread_id="long")
    assert result.state.messages[: len(latest.state.messages)] == latest.state.messages
    assert (await verify_thread(cp, "long")).ok
