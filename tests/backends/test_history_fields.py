"""History rows store the state's other fields as patches: every checkpoint still loads exactly.

Rows patch their thread's previous row (:mod:`tulip_nb.memory.rest_delta`); a drop rewrites whole
the rows that patch what it drops, a copy keeps the patches, a corrupt base is never patched
against. Checked on random operation sequences and on messy agent threads (failed turns, tulip
turns, forks).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, CheckpointCorrupt, Message
from tulip_nb.memory.backends._history_file import HistoryFileCheckpointer
from tulip_nb.memory.backends._sqlite_history import DB_DIR, DB_NAME
from tulip_nb.memory.checkpointer import Checkpoint
from tulip_nb.testing._messy import MessySpec, abuild_messy_thread


class Recording(HistoryFileCheckpointer):
    """Records the state JSON of every checkpoint it saves or puts (the ground truth)."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        self.saved: dict[tuple[str, str], bytes] = {}

    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        **kw: Any,
    ) -> str:
        cid = await super().save(state, thread_id, checkpoint_id, metadata, **kw)
        self.saved[(thread_id, cid)] = state.to_json_bytes()
        return cid

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        await super().put_checkpoint(checkpoint)
        self.saved[(checkpoint.thread_id, checkpoint.checkpoint_id)] = checkpoint.state.to_json_bytes()


async def _all_load_as_saved(base: Path, saved: dict[tuple[str, str], bytes], threads: set[str]) -> int:
    fresh = HistoryFileCheckpointer(base)  # nothing cached: every row rebuilt from its patches
    n = 0
    for thread_id in sorted(threads):
        for info in await fresh.list_checkpoint_infos(thread_id, limit=None):
            got = await fresh.load_checkpoint(thread_id, info.checkpoint_id)
            assert got is not None
            assert got.state.to_json_bytes() == saved[(thread_id, info.checkpoint_id)], (thread_id, info)
            n += 1
    await fresh.close()
    return n


ops = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.integers(0, 3)),
        st.tuples(st.just("replace"), st.integers(0, 50)),
        st.tuples(st.just("delete"), st.integers(0, 50)),
        st.tuples(st.just("prune"), st.integers(1, 6)),
        st.tuples(st.just("copy"), st.integers(0, 0)),
    ),
    min_size=5,
    max_size=40,
)


@settings(max_examples=examples(0.25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_random_saves_drops_and_copies_all_load_as_saved(tmp_path_factory: pytest.TempPathFactory, plan: list) -> None:
    base = tmp_path_factory.mktemp("fields")

    async def run() -> None:
        cp = Recording(base)
        msgs = [Message.system("sys")]
        meta: dict[str, Any] = {"tulip_nb_turns": [], "events": [], "user": "u42"}
        copies = 0
        for op, arg in plan:
            cids = [i.checkpoint_id for i in await cp.list_checkpoint_infos("t", limit=None)]
            if op == "save":
                msgs = [*msgs, Message.user(f"q{len(msgs)}"), Message.assistant("a" * arg)]
                meta = {**meta, "tulip_nb_turns": [*meta["tulip_nb_turns"], {"turn": len(msgs), "o": "answered"}]}
                if arg == 3:
                    meta = {**meta, "events": [*meta["events"], {"summary": "s" * 600}]}
                if arg == 2:
                    meta = {"user": "u42", **{k: v for k, v in meta.items() if k != "user"}}  # a key order change
                await cp.save(AgentState(messages=msgs, metadata=meta, iteration=arg), "t")
            elif op == "replace" and cids:
                old = await cp.load_checkpoint("t", cids[arg % len(cids)])
                assert old is not None
                state = old.state.model_copy(update={"iteration": 99, "metadata": {**old.state.metadata, "x": arg}})
                await cp.put_checkpoint(Checkpoint(old.checkpoint_id, "t", old.created_at, state, old.metadata))
            elif op == "delete" and cids:
                await cp.delete("t", cids[arg % len(cids)])
            elif op == "prune" and cids:
                await cp.prune("t", keep_last=arg, keep_turn_ends=False)
            elif op == "copy" and cids:
                copies += 1
                dest = f"copy{copies}"
                await cp.copy_thread("t", dest)
                for info in await cp.list_checkpoint_infos(dest, limit=None):
                    cp.saved[(dest, info.checkpoint_id)] = cp.saved[("t", info.checkpoint_id)]
        await cp.close()
        await _all_load_as_saved(base, cp.saved, {"t", *(f"copy{i}" for i in range(1, copies + 1))})

    asyncio.run(run())


async def test_rows_patch_their_parent_and_a_drop_rewrites_their_dependents_whole(tmp_path: Path) -> None:
    cp = Recording(tmp_path)
    msgs = [Message.system("sys")]
    turns: list[dict[str, Any]] = []
    for i in range(40):
        msgs = [*msgs, Message.user(f"q{i}"), Message.assistant(f"a{i}")]
        turns = [*turns, {"turn": i, "outcome": "answered", "note": "n" * 200}]
        await cp.save(AgentState(messages=msgs, metadata={"tulip_nb_turns": turns}), "t")
    with sqlite3.connect(tmp_path / DB_DIR / DB_NAME) as conn:
        kinds = conn.execute("SELECT base IS NULL, COUNT(*), MAX(LENGTH(rest)) FROM checkpoints GROUP BY 1").fetchall()
        patched = dict((bool(k), (n, size)) for k, n, size in kinds)
        assert patched[False][0] >= 24, kinds  # most rows are patches ...
        assert patched[False][1] < 500 < patched[True][1], kinds  # ... smaller than a snapshot
        middle = conn.execute("SELECT cid FROM checkpoints WHERE base IS NOT NULL ORDER BY seq LIMIT 1 OFFSET 5")
        victim = middle.fetchone()[0]
    await cp.delete("t", victim)
    del cp.saved[("t", victim)]
    assert await _all_load_as_saved(tmp_path, cp.saved, {"t"}) == 39


async def test_a_corrupt_base_is_never_patched_against(tmp_path: Path) -> None:
    cp = Recording(tmp_path)
    msgs = [Message.system("sys")]
    for i in range(6):
        msgs = [*msgs, Message.user(f"q{i}")]
        await cp.save(AgentState(messages=msgs, metadata={"log": list(range(i * 100))}), "t")
    await cp.close()
    with sqlite3.connect(tmp_path / DB_DIR / DB_NAME) as conn:  # the snapshot every row patches
        seq, rest = conn.execute("SELECT seq, rest FROM checkpoints WHERE base IS NULL ORDER BY seq DESC").fetchone()
        conn.execute("UPDATE checkpoints SET rest = ? WHERE seq = ?", (rest[:-4] + b"\x00\x00\x00\x00", seq))
    fresh = Recording(tmp_path)  # no cached base: the next save must see the corruption
    with pytest.raises(CheckpointCorrupt):
        await fresh.load("t")
    msgs = [*msgs, Message.user("after the damage")]
    cid = await fresh.save(AgentState(messages=msgs, metadata={"log": [1]}), "t")
    got = await HistoryFileCheckpointer(tmp_path).load_checkpoint("t", cid)
    assert got is not None and got.state.messages[-1].content == "after the damage"


@pytest.mark.parametrize("seed", [3, 11])
async def test_a_messy_thread_with_forks_loads_every_checkpoint_as_saved(tmp_path: Path, seed: int) -> None:
    cp = Recording(tmp_path)
    spec = MessySpec(seed=seed, turns=40, forks=2, tulip_rate=0.1, tulip_deletes_iteration_saves=True)
    thread = await abuild_messy_thread(cp, "messy", spec)
    threads = {"messy", *(f.thread_id for f in thread.forks)}
    ours = dict(cp.saved)  # what tulip_nb saved (tulip turns too when written through it)
    fresh = HistoryFileCheckpointer(tmp_path)
    checked = 0
    for thread_id in sorted(threads):
        for info in await fresh.list_checkpoint_infos(thread_id, limit=None):
            if (thread_id, info.checkpoint_id) in ours:
                got = await fresh.load_checkpoint(thread_id, info.checkpoint_id)
                assert got is not None and got.state.to_json_bytes() == ours[(thread_id, info.checkpoint_id)]
                checked += 1
    assert checked > 60
    latest = await fresh.load("messy")
    assert latest is not None and len(latest.messages) == thread.n_messages


async def test_an_entry_damaged_after_a_load_is_caught_by_the_same_instance(tmp_path: Path) -> None:
    """Loads reuse the messages an instance verified (same id, bytes and parent): changed bytes are
    hashed again and refused, never served from the cache."""
    cp = Recording(tmp_path)
    msgs = [Message.system("sys"), *(Message.user(f"q{i} " + "x" * 50) for i in range(5))]
    cid = await cp.save(AgentState(messages=msgs), "t")
    assert (await cp.load_checkpoint("t", cid)) is not None  # every entry verified and cached
    with sqlite3.connect(tmp_path / DB_DIR / DB_NAME) as conn:
        rowid, data = conn.execute("SELECT rowid, data FROM entries ORDER BY rowid LIMIT 1 OFFSET 2").fetchone()
        conn.execute("UPDATE entries SET data = ? WHERE rowid = ?", (data.replace(b"q1", b"q9"), rowid))
    with pytest.raises(CheckpointCorrupt, match="no longer matches its entry id"):
        await cp.load_checkpoint("t", cid)
