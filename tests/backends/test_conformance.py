"""Checkpointer conformance: the behaviour every backend must share (see conformance.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tulip_nb.core import AgentState, CheckpointConflict, CheckpointNotFound, InvalidThreadId, Message
from tulip_nb.memory.checkpointer import BaseCheckpointer, Capabilities

from .conformance import ODD_THREAD_IDS, full_state


def dump(state: AgentState) -> dict[str, Any]:
    return state.model_dump(mode="json")


async def test_round_trip_every_field_and_unknown_keys(checkpointer: BaseCheckpointer) -> None:
    state = full_state()
    cid = await checkpointer.save(state, "rt")
    loaded = await checkpointer.load("rt")
    assert loaded is not None
    assert dump(loaded) == dump(state)
    assert loaded.extra == {"unknown_top_level": {"future": True}}
    assert loaded.messages[1].model_extra == {"future_key": {"nested": [0]}}
    assert loaded.messages[-1].tool_calls[0].malformed_arguments == "{not json"
    assert loaded.tool_executions[0].model_extra == {"exec_extra": "kept"}
    assert loaded.started_at.tzinfo is not None
    by_id = await checkpointer.load("rt", cid)
    assert by_id is not None and dump(by_id) == dump(state)


async def test_saved_state_is_isolated_from_later_mutation(checkpointer: BaseCheckpointer) -> None:
    state = full_state()
    await checkpointer.save(state, "iso")
    state.metadata["user"] = "changed"
    state.messages.append(Message.user("late"))
    loaded = await checkpointer.load("iso")
    assert loaded is not None
    assert loaded.metadata["user"] == "u42"
    assert loaded.messages[-1].content == "partial"
    loaded.metadata["user"] = "again"
    reloaded = await checkpointer.load("iso")
    assert reloaded is not None and reloaded.metadata["user"] == "u42"


async def test_missing_thread_is_none_and_missing_checkpoint_raises(checkpointer: BaseCheckpointer) -> None:
    assert await checkpointer.load("nope") is None
    assert await checkpointer.list_checkpoints("nope") == []
    assert not await checkpointer.exists("nope")
    await checkpointer.save(full_state(), "there")
    with pytest.raises(CheckpointNotFound) as err:
        await checkpointer.load("there", "0" * 32)
    assert err.value.thread_id == "there"
    assert not await checkpointer.exists("there", "0" * 32)


async def test_newest_first_listing_and_limit(checkpointer: BaseCheckpointer) -> None:
    ids = [await checkpointer.save(full_state(marker=str(i)), "list") for i in range(5)]
    assert await checkpointer.list_checkpoints("list") == ids[::-1]
    assert await checkpointer.list_checkpoints("list", limit=2) == ids[:2:-1][:2] == [ids[4], ids[3]]
    loaded = await checkpointer.load("list")
    assert loaded is not None and loaded.messages[1].content == "question 0 4"


async def test_every_save_records_its_parent(checkpointer: BaseCheckpointer) -> None:
    first = await checkpointer.save(full_state(), "lineage", metadata={"step": 1})
    second = await checkpointer.save(full_state(), "lineage", metadata={"step": 2})
    infos = await checkpointer.list_checkpoint_infos("lineage")
    assert [i.checkpoint_id for i in infos] == [second, first]
    assert infos[0].parent_checkpoint_id == first
    assert infos[1].parent_checkpoint_id is None
    assert infos[0].metadata["step"] == 2
    ckpt = await checkpointer.load_checkpoint("lineage")
    assert ckpt is not None and ckpt.checkpoint_id == second and ckpt.parent_checkpoint_id == first


async def test_latest_after_deleting_the_newest(checkpointer: BaseCheckpointer) -> None:
    a = await checkpointer.save(full_state(marker="a"), "del")
    b = await checkpointer.save(full_state(marker="b"), "del")
    assert await checkpointer.delete("del", b)
    assert await checkpointer.list_checkpoints("del") == [a]
    loaded = await checkpointer.load("del")
    assert loaded is not None and loaded.messages[1].content == "question 0 a"
    c = await checkpointer.save(full_state(marker="c"), "del")
    ckpt = await checkpointer.load_checkpoint("del")
    assert ckpt is not None and ckpt.checkpoint_id == c and ckpt.parent_checkpoint_id == a
    assert await checkpointer.delete("del")
    assert await checkpointer.load("del") is None
    assert not await checkpointer.delete("del")


async def test_copy_thread_is_isolated(checkpointer: BaseCheckpointer) -> None:
    if not checkpointer.capabilities.branching:
        pytest.skip("backend has no branching")
    a1 = await checkpointer.save(full_state(marker="1"), "src")
    a2 = await checkpointer.save(full_state(marker="2"), "src")
    assert await checkpointer.copy_thread("src", "dst")
    assert len(await checkpointer.list_checkpoints("dst")) == 2
    copied = await checkpointer.load("dst")
    assert copied is not None and dump(copied) == dump(full_state(marker="2"))
    await checkpointer.save(full_state(marker="3"), "dst")
    assert await checkpointer.list_checkpoints("src") == [a2, a1]
    src = await checkpointer.load("src")
    assert src is not None and src.messages[1].content == "question 0 2"
    infos = await checkpointer.list_checkpoint_infos("dst")
    assert infos[1].metadata["copied_from"] == {"thread_id": "src", "checkpoint_id": a2}
    with pytest.raises(CheckpointConflict):
        await checkpointer.copy_thread("src", "dst")
    with pytest.raises(CheckpointNotFound):
        await checkpointer.copy_thread("missing", "dst2")


@pytest.mark.parametrize("thread_id", ODD_THREAD_IDS, ids=lambda t: repr(t[:20]))
async def test_odd_thread_ids(checkpointer: BaseCheckpointer, thread_id: str) -> None:
    state = full_state(marker=thread_id[:10])
    cid = await checkpointer.save(state, thread_id)
    loaded = await checkpointer.load(thread_id)
    assert loaded is not None and dump(loaded) == dump(state)
    assert await checkpointer.list_checkpoints(thread_id) == [cid]
    if checkpointer.capabilities.list_threads:
        assert await checkpointer.list_threads() == [thread_id]
    assert await checkpointer.delete(thread_id)
    assert await checkpointer.load(thread_id) is None


async def test_ids_that_sanitise_alike_never_mix(checkpointer: BaseCheckpointer) -> None:
    ids = ["a#1", "a_1", "a 1", "a/1"]
    for tid in ids:
        await checkpointer.save(full_state(marker=tid), tid)
    for tid in ids:
        loaded = await checkpointer.load(tid)
        assert loaded is not None and loaded.messages[1].content == f"question 0 {tid}"
        assert len(await checkpointer.list_checkpoints(tid)) == 1
    if checkpointer.capabilities.list_threads:
        assert sorted(await checkpointer.list_threads()) == sorted(ids)
    await checkpointer.delete("a#1")
    assert await checkpointer.load("a#1") is None
    assert await checkpointer.load("a_1") is not None


@pytest.mark.parametrize("bad", ["", "a\x00b", 42, None])
async def test_invalid_thread_ids_are_rejected(checkpointer: BaseCheckpointer, bad: Any) -> None:
    with pytest.raises(InvalidThreadId):
        await checkpointer.save(full_state(), bad)
    with pytest.raises(InvalidThreadId):
        await checkpointer.load(bad)


async def test_compare_and_swap(checkpointer: BaseCheckpointer) -> None:
    with pytest.raises(CheckpointConflict):
        await checkpointer.save(full_state(), "cas", expected_parent="not-there")
    first = await checkpointer.save(full_state(), "cas", expected_parent="")
    second = await checkpointer.save(full_state(), "cas", expected_parent=first)
    with pytest.raises(CheckpointConflict) as err:
        await checkpointer.save(full_state(), "cas", expected_parent=first)
    assert err.value.expected == first and err.value.actual == second
    with pytest.raises(CheckpointConflict):
        await checkpointer.save(full_state(), "cas", expected_parent="")
    assert await checkpointer.list_checkpoints("cas") == [second, first]


async def test_racing_compare_and_swap_has_one_winner(checkpointer: BaseCheckpointer) -> None:
    base = await checkpointer.save(full_state(), "race")
    results = await asyncio.gather(
        *(checkpointer.save(full_state(marker=str(i)), "race", expected_parent=base) for i in range(8)),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, str)]
    assert len(winners) == 1
    assert all(isinstance(r, CheckpointConflict) for r in results if not isinstance(r, str))


async def test_concurrent_saves_lose_nothing(checkpointer: BaseCheckpointer) -> None:
    async def one(i: int) -> tuple[str, str]:
        tid = f"conc-{i % 20}"
        return tid, await checkpointer.save(full_state(n_turns=1, marker=str(i)), tid)

    saved = await asyncio.gather(*(one(i) for i in range(200)))
    for t in range(20):
        tid = f"conc-{t}"
        mine = {cid for th, cid in saved if th == tid}
        infos = await checkpointer.list_checkpoint_infos(tid, limit=100)
        assert {i.checkpoint_id for i in infos} == mine and len(mine) == 10
        # saves to one thread are totally ordered: the parents form one chain
        parents = [i.parent_checkpoint_id for i in infos]
        assert parents == [i.checkpoint_id for i in infos[1:]] + [None]
        for info in infos[:3]:
            assert await checkpointer.load(tid, info.checkpoint_id) is not None


ALL_CAPABILITY_CALLS = {
    "search": lambda cp: cp.search("question", limit=5),
    "metadata_query": lambda cp: cp.query_by_metadata("step", 1),
    "vacuum": lambda cp: cp.vacuum(older_than_days=365),
    "branching": lambda cp: cp.copy_thread("cap", "cap-copy"),
    "list_threads": lambda cp: cp.list_threads(),
    "list_with_metadata": lambda cp: cp.list_with_metadata(),
}


@pytest.mark.parametrize("capability", sorted(ALL_CAPABILITY_CALLS))
async def test_capabilities_are_honest_both_ways(checkpointer: BaseCheckpointer, capability: str) -> None:
    caps = checkpointer.capabilities
    assert isinstance(caps, Capabilities)
    await checkpointer.save(full_state(), "cap", metadata={"step": 1})
    call = ALL_CAPABILITY_CALLS[capability]
    if getattr(caps, capability):
        await call(checkpointer)
    else:
        with pytest.raises(NotImplementedError, match=capability):
            await call(checkpointer)


async def test_capability_results(checkpointer: BaseCheckpointer) -> None:
    caps = checkpointer.capabilities
    await checkpointer.save(full_state(marker="alpha"), "t-alpha", metadata={"tag": "x"})
    await checkpointer.save(full_state(marker="beta"), "t-beta", metadata={"tag": "y"})
    if caps.list_threads:
        assert await checkpointer.list_threads(pattern="t-a*") == ["t-alpha"]
        assert await checkpointer.list_threads(limit=1) == ["t-alpha"]
    if caps.search:
        hits = await checkpointer.search("question beta")
        assert [h["thread_id"] for h in hits] == ["t-beta"]
        assert await checkpointer.search("zzz-nothing") == []
    if caps.metadata_query:
        rows = await checkpointer.query_by_metadata("tag", "y")
        assert [r["thread_id"] for r in rows] == ["t-beta"]
        assert (await checkpointer.get_metadata("t-alpha") or {})["tag"] == "x"
        rows = await checkpointer.query_by_metadata("user", "u42")  # state metadata
        assert {r["thread_id"] for r in rows} == {"t-alpha", "t-beta"}
    if caps.list_with_metadata:
        rows = await checkpointer.list_with_metadata()
        assert [r["thread_id"] for r in rows] == ["t-beta", "t-alpha"]
        assert rows[0]["metadata"]["tag"] == "y"
    if caps.vacuum:
        assert await checkpointer.vacuum(older_than_days=30) == 0
        assert await checkpointer.vacuum(older_than_days=-1) == 2
        assert await checkpointer.load("t-alpha") is None


async def test_minimal_user_subclass_works() -> None:
    class DictCheckpointer(BaseCheckpointer):
        def __init__(self) -> None:
            self.data: dict[str, list[tuple[str, AgentState]]] = {}

        async def save(self, state, thread_id, checkpoint_id=None, metadata=None, **kw):  # type: ignore[no-untyped-def]
            cid = checkpoint_id or f"c{sum(len(v) for v in self.data.values())}"
            self.data.setdefault(thread_id, []).insert(0, (cid, state.model_copy(deep=True)))
            return cid

        async def load(self, thread_id, checkpoint_id=None):  # type: ignore[no-untyped-def]
            for cid, state in self.data.get(thread_id, []):
                if checkpoint_id in (None, cid):
                    return state.model_copy(deep=True)
            return None

        async def list_checkpoints(self, thread_id, limit=10):  # type: ignore[no-untyped-def]
            return [cid for cid, _ in self.data.get(thread_id, [])][:limit]

    cp = DictCheckpointer()
    await cp.save(full_state(), "t")
    assert await cp.exists("t") and not await cp.exists("u")
    assert await cp.latest_checkpoint_id("t") == "c0"
    ckpt = await cp.load_checkpoint("t")
    assert ckpt is not None and ckpt.checkpoint_id == "c0"
    with pytest.raises(NotImplementedError, match="list_threads"):
        await cp.list_threads()
    with pytest.raises(NotImplementedError, match="branching"):
        await cp.copy_thread("t", "u")


async def test_put_checkpoint_writes_verbatim(checkpointer: BaseCheckpointer) -> None:
    """An import keeps ids, created_at and save metadata exactly; latest is the newest created_at."""
    from datetime import UTC, datetime

    from tulip_nb.memory.checkpointer import Checkpoint

    t0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    stamps = {"c-old": t0, "c-mid": t0.replace(minute=5), "c-new": t0.replace(hour=13)}
    metas: dict[str, dict[str, Any]] = {
        "c-old": {"source": "import", "nested": {"k": [1, 2]}},  # no parent_checkpoint_id: none added
        "c-mid": {"parent_checkpoint_id": "c-old", "step": 2},
        "c-new": {"parent_checkpoint_id": "c-mid", "forked_from": "x"},
    }
    tid = "imp/ort:1"
    for cid in ("c-new", "c-old", "c-mid"):  # out of order on purpose
        await checkpointer.put_checkpoint(Checkpoint(cid, tid, stamps[cid], full_state(marker=cid), metas[cid]))
    infos = await checkpointer.list_checkpoint_infos(tid)
    assert [i.checkpoint_id for i in infos] == ["c-new", "c-mid", "c-old"]
    assert {i.checkpoint_id: i.created_at for i in infos} == stamps
    assert {i.checkpoint_id: i.metadata for i in infos} == metas
    for cid in stamps:
        ckpt = await checkpointer.load_checkpoint(tid, cid)
        assert ckpt is not None and ckpt.created_at == stamps[cid] and ckpt.metadata == metas[cid]
        assert dump(ckpt.state) == dump(full_state(marker=cid))
    latest = await checkpointer.load(tid)
    assert latest is not None and dump(latest) == dump(full_state(marker="c-new"))
    # putting the same id again replaces it: nothing duplicated
    await checkpointer.put_checkpoint(Checkpoint("c-mid", tid, stamps["c-mid"], full_state(marker="z"), metas["c-mid"]))
    assert await checkpointer.list_checkpoints(tid) == ["c-new", "c-mid", "c-old"]
    again = await checkpointer.load(tid, "c-mid")
    assert again is not None and dump(again) == dump(full_state(marker="z"))
    # a normal save afterwards continues the lineage from the newest
    cid = await checkpointer.save(full_state(), tid)
    infos = await checkpointer.list_checkpoint_infos(tid)
    assert infos[0].checkpoint_id == cid and infos[0].parent_checkpoint_id == "c-new"
    assert infos[0].created_at > stamps["c-new"]
