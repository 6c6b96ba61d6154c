"""MemoryCheckpointer on the history model (``DictHistory``): messages stored once, fields as
patches, corruption caught on load, each primitive atomic for coroutines and threads (issue 26).

The shipped conformance suite, with its race cases, runs on memory in test_conformance.py.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, Message
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.memory.backends._dict_history import DictHistory
from tulip_nb.memory.checkpointer import Checkpoint
from tulip_nb.memory.rest_delta import joined, state_parts
from tulip_nb.testing import full_state


def dump(state: AgentState) -> dict[str, Any]:
    return state.model_dump(mode="json")


async def grow(cp: MemoryCheckpointer, thread_id: str, turns: int, tag: str = "m") -> list[tuple[str, AgentState]]:
    """A conversation saved after every turn: messages appended, a log in the metadata growing."""
    state = AgentState(messages=[Message.system("sys")], metadata={"log": []})
    saved = []
    for i in range(turns):
        state = state.model_copy()
        state.messages = [*state.messages, Message.user(f"{tag} q{i} " + "x" * 200), Message.assistant(f"{tag} a{i}")]
        state.metadata = {"log": [*state.metadata["log"], {"turn": i, "note": "y" * 100}], "n": i}
        state.iteration = i
        saved.append((await cp.save(state, thread_id, metadata={"source": "final", "n": i}), state))
    return saved


def store(cp: MemoryCheckpointer) -> DictHistory:
    assert cp.store.integrity_sync() == []
    return cp.store


# -- the model: messages once, fields as patches ---------------------------------------------------
async def test_messages_are_stored_once_and_collected_with_their_last_row() -> None:
    cp = MemoryCheckpointer(sign=False)
    await grow(cp, "t", 20)
    await cp.copy_thread("t", "copy")
    state = await cp.load("t")
    assert state is not None
    state.messages = [*state.messages, Message.user("fork only")]
    await cp.save(state, "fork", metadata={"forked_from": "t"})
    assert store(cp).entry_count() == 1 + 2 * 20 + 1
    await cp.delete("t")
    await cp.delete("copy")
    assert store(cp).entry_count() == 1 + 2 * 20 + 1  # the fork reaches them all
    await cp.prune("fork", keep_last=1, keep_turn_ends=False)
    assert store(cp).entry_count() == 1 + 2 * 20 + 1
    await cp.delete("fork")
    assert store(cp).entry_count() == 0 and repr(cp) == "MemoryCheckpointer(threads=0)"


async def test_fields_are_patches_and_survive_dropping_their_base() -> None:
    """Growing metadata is stored as patches (far less than the fields whole at every save), and
    dropping any row that others patch leaves every other row loading as it was saved."""
    cp = MemoryCheckpointer(sign=False)
    saved = await grow(cp, "t", 80)
    whole = sum(len(joined(state_parts(state))) for _, state in saved)  # the fields whole at every save
    rows = cp.store._threads["t"].rows
    stored = sum(len(r.rest) for r in rows.values())
    assert stored * 10 < whole, (stored, whole)
    assert sum(r.base is None for r in rows.values()) >= 2  # snapshots every MAX_DEPTH patches at most
    dropped = {saved[i][0] for i in (0, 1, 5, 33, 40, 79)}
    for cid in sorted(dropped):
        assert await cp.delete("t", cid)
        store(cp)
    for cid, state in saved:
        if cid not in dropped:
            got = await cp.load("t", cid)
            assert got is not None and dump(got) == dump(state)
    survivors = [(cid, state) for cid, state in saved if cid not in dropped]
    assert await cp.prune("t", keep_last=3, keep_turn_ends=False) == len(survivors) - 3
    assert await cp.list_checkpoints("t", None) == [cid for cid, _ in survivors[-3:]][::-1]
    for cid, state in survivors[-3:]:
        got = await cp.load("t", cid)
        assert got is not None and dump(got) == dump(state)
    store(cp)


async def test_latest_is_the_newest_created_at_whatever_the_write_order() -> None:
    cp = MemoryCheckpointer()
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    for cid, hours in (("b", 2), ("a", 1), ("d", 2), ("c", 3)):
        await cp.put_checkpoint(Checkpoint(cid, "t", t0 + timedelta(hours=hours), full_state(marker=cid), {}))
    assert await cp.list_checkpoints("t", None) == ["c", "d", "b", "a"]  # ties: the greater id first
    await cp.put_checkpoint(Checkpoint("c", "t", t0, full_state(marker="c2"), {}))  # replaced, now the oldest
    assert await cp.list_checkpoints("t", None) == ["d", "b", "a", "c"]
    latest = await cp.load_checkpoint("t")
    assert latest is not None and latest.checkpoint_id == "d"
    assert await cp.list_checkpoints("t", 2) == ["d", "b"] and await cp.list_checkpoints("t", 0) == []


async def test_a_failed_write_changes_nothing() -> None:
    cp = MemoryCheckpointer()
    saved = await grow(cp, "t", 3)
    before = (await cp.list_checkpoint_infos("t", None), store(cp).entry_count())
    longer = saved[-1][1].model_copy()
    longer.messages = [*longer.messages, Message.user("never stored")]
    with pytest.raises(CheckpointConflict):
        await cp.save(longer, "t", expected_parent=saved[0][0])
    with pytest.raises(TypeError, match="not JSON"):
        await cp.save(longer, "t", checkpoint_id=saved[-1][0], metadata={"bad": object()})
    assert (await cp.list_checkpoint_infos("t", None), store(cp).entry_count()) == before
    with pytest.raises(CheckpointNotFound):
        await cp.copy_thread("missing", "t2")
    with pytest.raises(CheckpointConflict):
        await cp.copy_thread("t", "t")
    assert await cp.list_threads() == ["t"]


async def test_what_a_listing_or_load_returns_is_the_callers_own() -> None:
    cp = MemoryCheckpointer()
    saved = await grow(cp, "t", 2)
    info = (await cp.list_checkpoint_infos("t"))[0]
    info.metadata["n"] = "edited"
    ckpt = await cp.load_checkpoint("t")
    assert ckpt is not None
    ckpt.metadata["n"] = "edited"
    ckpt.state.metadata["log"].append("edited")
    assert (await cp.list_checkpoint_infos("t"))[0].metadata["n"] == 1
    again = await cp.load_checkpoint("t")
    assert again is not None and again.metadata["n"] == 1 and dump(again.state) == dump(saved[-1][1])


# -- corruption: CheckpointCorrupt, never another state -----------------------------------------
CORRUPTIONS = ["message", "parent", "missing-entry", "missing-head", "rest", "metadata", "fields", "moved", "cycle"]


def corrupt(cp: MemoryCheckpointer, where: str, cid: str) -> None:
    """Change the store's dicts the way a bug or a stray write would (no digest recomputed)."""
    s = cp.store
    row = s._threads["t"].rows[cid]
    head = s._entries[row.head]  # type: ignore[index]
    if where == "message":
        head.message = Message.assistant("not what was said")
    elif where == "parent":
        head.parent = s._entries[head.parent].parent  # type: ignore[index]  # skip one message
    elif where == "missing-entry":
        del s._entries[head.parent]  # type: ignore[arg-type]
    elif where == "missing-head":
        del s._entries[row.head]  # type: ignore[arg-type]
    elif where == "rest":
        row.rest = row.rest[:-1] + bytes([row.rest[-1] ^ 1])
    elif where == "metadata":
        row.meta = row.meta.replace(b'"n":2', b'"n":7')
    elif where == "fields":
        row.fields = bytes(32)
    elif where == "cycle":
        head.parent = row.head
    else:  # the other thread's newest row moved in, as this thread's newest
        other = s._threads["other"].latest()
        assert other is not None
        other.row = type(other.row)(
            "t",
            other.row.checkpoint_id,
            other.row.created_at + timedelta(days=1),
            other.row.metadata,
            other.row.n_messages,
        )
        s._threads["t"].add(other)


@pytest.mark.parametrize("where", CORRUPTIONS)
@pytest.mark.parametrize("loaded_before", [False, True], ids=["cold", "verified-before"])
async def test_corruption_is_reported_never_another_state(where: str, loaded_before: bool) -> None:
    cp = MemoryCheckpointer()
    saved = await grow(cp, "t", 3)
    await grow(cp, "other", 1, tag="o")
    if loaded_before:  # the memo of verified entries must not hide a later change
        for cid, _ in saved:
            assert await cp.load("t", cid) is not None
    corrupt(cp, where, saved[-1][0])
    with pytest.raises(CheckpointCorrupt) as err:
        await cp.load("t")
    assert err.value.thread_id == "t" and err.value.path == "memory"
    if where != "moved":
        with pytest.raises(CheckpointCorrupt):
            await cp.load("t", saved[-1][0])
        got = await cp.load("t", saved[0][0])  # a checkpoint that does not reach the damage
        assert got is not None and dump(got) == dump(saved[0][1])


# -- generated operation sequences against a plain reference ------------------------------------
THREADS = ["a", "b", "c/d"]
op = st.one_of(
    st.tuples(st.just("grow"), st.sampled_from(THREADS), st.integers(1, 3)),
    st.tuples(st.just("rewrite"), st.sampled_from(THREADS), st.integers(0, 3)),
    st.tuples(st.just("fork"), st.sampled_from(THREADS), st.sampled_from(THREADS)),
    st.tuples(st.just("copy"), st.sampled_from(THREADS), st.sampled_from(THREADS)),
    st.tuples(st.just("delete"), st.sampled_from(THREADS), st.booleans()),
    st.tuples(st.just("prune"), st.sampled_from(THREADS), st.integers(0, 3)),
    st.tuples(st.just("put"), st.sampled_from(THREADS), st.integers(-3, 3)),
)


class Reference:
    """The contract the plain way: per thread, every checkpoint's whole state, deep-copied."""

    def __init__(self) -> None:
        self.threads: dict[str, dict[str, tuple[datetime, dict[str, Any]]]] = {}

    def ids(self, tid: str) -> list[str]:
        rows = self.threads.get(tid, {})
        return sorted(rows, key=lambda c: (rows[c][0], c), reverse=True)


async def _step(cp: MemoryCheckpointer, ref: Reference, step: int, action: tuple[Any, ...]) -> None:
    kind, tid = action[0], action[1]
    latest = await cp.load(tid) or AgentState(messages=[Message.system("sys")])
    cid = f"c{step}"
    state = latest.model_copy()
    state.metadata = {**latest.metadata, "log": [*latest.metadata.get("log", []), step], "step": step}
    if kind in ("grow", "rewrite", "fork", "put"):
        if kind == "grow":
            state.messages = [*latest.messages, *(Message.user(f"{step}.{i}") for i in range(action[2]))]
        elif kind == "rewrite":  # a compaction: a shorter, different history
            state.messages = [*latest.messages[: action[2]], Message.assistant(f"summary {step}")]
        else:
            state.messages = [*latest.messages, Message.user(f"{kind} {step}")]
        target = action[2] if kind == "fork" else tid
        if kind == "put":  # an import at a time around the latest's
            infos = await cp.list_checkpoint_infos(target, 1)
            base = infos[0].created_at if infos else datetime(2025, 1, 1, tzinfo=UTC)
            when = base + timedelta(seconds=action[2])
            await cp.put_checkpoint(Checkpoint(cid, target, when, state, {"step": step}))
        else:
            await cp.save(state, target, cid, {"source": "final", "step": step})
            when = (await cp.list_checkpoint_infos(target, 1))[0].created_at
        ref.threads.setdefault(target, {})[cid] = (when, dump(state))
    elif kind == "copy":
        try:
            await cp.copy_thread(tid, action[2])
        except (CheckpointConflict, CheckpointNotFound) as e:
            assert isinstance(e, CheckpointNotFound) == (not ref.threads.get(tid))
            return
        ref.threads[action[2]] = dict(ref.threads[tid])
    elif kind == "delete":
        ids = ref.ids(tid)
        if action[2] or not ids:
            assert await cp.delete(tid) == bool(ids)
            ref.threads.pop(tid, None)
        else:
            assert await cp.delete(tid, ids[len(ids) // 2])
            del ref.threads[tid][ids[len(ids) // 2]]
    else:
        ids = ref.ids(tid)
        assert await cp.prune(tid, keep_last=action[2], keep_turn_ends=False) == max(0, len(ids) - action[2])
        for gone in ids[action[2] :]:
            del ref.threads[tid][gone]
    for t in list(ref.threads):
        if not ref.threads[t]:
            del ref.threads[t]


@settings(max_examples=examples(0.6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=16))
def test_generated_operations_behave_as_the_reference(actions: list[tuple[Any, ...]]) -> None:
    async def run() -> None:
        cp, ref = MemoryCheckpointer(), Reference()
        for step, action in enumerate(actions):
            await _step(cp, ref, step, action)
            store(cp)  # every entry reached exactly as often as its count says
            assert sorted(await cp.list_threads()) == sorted(ref.threads), (step, action)
            for tid in THREADS:
                assert await cp.list_checkpoints(tid, None) == ref.ids(tid), (step, action, tid)
                for cid in ref.ids(tid):
                    got = await cp.load(tid, cid)
                    assert got is not None and dump(got) == ref.threads[tid][cid][1], (step, action, tid, cid)

    asyncio.run(run())


# -- atomic for threads, too ---------------------------------------------------------------------
def test_threads_forking_copying_pruning_and_deleting_lose_no_acknowledged_write() -> None:
    cp = MemoryCheckpointer()
    asyncio.run(grow(cp, "src", 6))
    source = asyncio.run(cp.load("src"))
    assert source is not None
    acked: dict[tuple[str, str], dict[str, Any]] = {}
    copies: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def forker(k: int) -> None:
        start.wait()
        for i in range(15):
            state = source.model_copy()
            state.messages = [*source.messages, Message.user(f"fork {k}.{i}")]
            cid = asyncio.run(cp.save(state, f"fork/{k}", metadata={"forked_from": "src"}))
            with lock:
                acked[(f"fork/{k}", cid)] = dump(state)

    def copier() -> None:
        start.wait()
        for i in range(15):
            try:
                asyncio.run(cp.copy_thread("src", f"copy/{i}"))
            except CheckpointNotFound:
                continue
            copies.append(f"copy/{i}")

    def pruner_and_deleter() -> None:
        start.wait()
        asyncio.run(cp.prune("src", keep_last=2, keep_turn_ends=False))
        asyncio.run(cp.delete("src"))

    workers = [threading.Thread(target=forker, args=(k,)) for k in range(2)]
    workers += [threading.Thread(target=copier), threading.Thread(target=pruner_and_deleter)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert asyncio.run(cp.load("src")) is None
    for (tid, cid), want in acked.items():
        got = asyncio.run(cp.load(tid, cid))
        assert got is not None and dump(got) == want
    for tid in copies:  # each copy: all six checkpoints, or the two the prune kept
        assert len(asyncio.run(cp.list_checkpoints(tid, None))) in (6, 2)
        got = asyncio.run(cp.load(tid))
        assert got is not None and len(got.messages) == 13
    store(cp)
