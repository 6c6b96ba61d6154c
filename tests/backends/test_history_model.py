"""The history model against the in-memory checkpointer, on generated operation sequences.

Saves that grow, rewrite (a compaction: a shorter, different history) and fork, copies, deletes
and prunes, in any order: the history layout lists and loads exactly what ``MemoryCheckpointer``
does, and after every step each entry is reached exactly as often as its reference count says
(nothing a row reaches is ever collected, nothing unreachable stays).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, CheckpointConflict, CheckpointNotFound, Message
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.memory.history import ChainCache, entry_id

THREADS = ["a", "b", "c/d"]
op = st.one_of(
    st.tuples(st.just("grow"), st.sampled_from(THREADS), st.integers(1, 3), st.sampled_from(["final", "iteration"])),
    st.tuples(st.just("rewrite"), st.sampled_from(THREADS), st.integers(0, 3), st.sampled_from(["final", "iteration"])),
    st.tuples(st.just("fork"), st.sampled_from(THREADS), st.sampled_from(THREADS), st.just("fork")),
    st.tuples(st.just("copy"), st.sampled_from(THREADS), st.sampled_from(THREADS), st.just("")),
    st.tuples(st.just("delete"), st.sampled_from(THREADS), st.booleans(), st.just("")),
    st.tuples(st.just("prune"), st.sampled_from(THREADS), st.integers(1, 3), st.just("")),
)


async def _apply(cp: BaseCheckpointer, step: int, action: tuple[object, ...]) -> object:
    kind, tid = action[0], str(action[1])
    latest = await cp.load(tid) or AgentState(messages=[Message.system("sys")])
    cid = f"c{step}"
    try:
        if kind == "grow":
            latest.messages = [*latest.messages, *(Message.user(f"{step}.{i}") for i in range(int(action[2])))]  # type: ignore[call-overload]
            return await cp.save(latest, tid, cid, {"source": action[3]})
        if kind == "rewrite":
            keep = int(action[2])  # type: ignore[call-overload]
            latest.messages = [*latest.messages[:keep], Message.assistant(f"summary {step}")]
            return await cp.save(latest, tid, cid, {"source": action[3]})
        if kind == "fork":
            latest.messages = [*latest.messages, Message.user(f"fork {step}")]
            return await cp.save(latest, str(action[2]), cid, {"source": "fork", "forked_from": tid})
        if kind == "copy":
            return await cp.copy_thread(tid, str(action[2]))
        if kind == "delete":
            if action[2]:
                return await cp.delete(tid)
            ids = await cp.list_checkpoints(tid, None)
            return await cp.delete(tid, ids[len(ids) // 2]) if ids else False
        return await cp.prune(tid, keep_last=int(action[2]), keep_turn_ends=False)  # type: ignore[call-overload]
    except (CheckpointConflict, CheckpointNotFound) as e:
        return type(e).__name__


async def _view(cp: BaseCheckpointer, tid: str) -> tuple[list[str], list[list[str | None]]]:
    ids = await cp.list_checkpoints(tid, None)
    states = []
    for cid in ids:
        state = await cp.load(tid, cid)
        assert state is not None
        states.append([m.content for m in state.messages])
    return ids, states


@settings(max_examples=examples(0.4), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=14))
def test_history_layout_behaves_as_memory(actions: list[tuple[object, ...]]) -> None:
    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            ours = FileCheckpointer(Path(tmp), layout="history", fsync=False)
            oracle = MemoryCheckpointer(sign=False)
            for step, action in enumerate(actions):
                got, want = await _apply(ours, step, action), await _apply(oracle, step, action)
                assert got == want, (step, action)
                assert ours.check_store() == []  # type: ignore[attr-defined]
                for tid in THREADS:
                    assert await _view(ours, tid) == await _view(oracle, tid), (step, action, tid)
            fresh = FileCheckpointer(Path(tmp), layout="history")
            for tid in THREADS:
                assert await _view(fresh, tid) == await _view(oracle, tid)
                assert fresh.check_mirror(tid) == []
            await ours.close()
            await fresh.close()

    asyncio.run(run())


@given(st.lists(st.text(max_size=5), max_size=8), st.lists(st.text(max_size=5), max_size=8))
def test_chain_cache_ids_equal_hashing_from_scratch(first: list[str], second: list[str]) -> None:
    cache = ChainCache()
    a = [Message.user(t) for t in first]
    b = a[: len(a) // 2] + [Message.user(t) for t in second]
    for msgs in (a, b, a[:1], b):
        chain = cache.chain("t", msgs)
        parent = None
        expected = []
        for m in msgs:
            parent = entry_id(parent, m.json_bytes())
            expected.append(parent)
        assert list(chain.ids[: chain.n]) == expected and chain.n == len(msgs)
