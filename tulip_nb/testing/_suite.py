"""The checkpointer conformance suite as a pytest class: see :mod:`tulip_nb.testing`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import pytest
import pytest_asyncio

from tulip_nb.core import AgentState, CheckpointConflict, CheckpointNotFound, InvalidThreadId, Message
from tulip_nb.memory.checkpointer import BaseCheckpointer, Capabilities, Checkpoint
from tulip_nb.testing._states import ODD_THREAD_IDS, full_state

__all__ = ["CAPABILITY_CALLS", "CheckpointerFactory", "CheckpointerSuite", "Opener", "dump", "store_view"]

_T = TypeVar("_T")

Opener = Callable[[], AbstractAsyncContextManager[BaseCheckpointer]]
"""Opens a new checkpointer instance on one store (as a fresh process would) and closes it after."""


class CheckpointerFactory(Protocol):
    """Sets up one fresh, empty store for a test, yields an :data:`Opener` for it, cleans up after.

    Every instance the opener opens must see the same store: the suite writes through one and
    re-reads through another. (For a store that lives inside its instance, like
    ``MemoryCheckpointer``, the opener may yield that one instance.)
    """

    def __call__(self, tmp_path: Path, /) -> AbstractAsyncContextManager[Opener]: ...


def dump(state: AgentState) -> dict[str, Any]:
    return state.model_dump(mode="json")


async def store_view(cp: BaseCheckpointer, thread_id: str, *, with_metadata: bool = True) -> dict[str, Any]:
    """What a reader sees of one thread: its latest and its listing (with times and metadata)."""
    infos = await cp.list_checkpoint_infos(thread_id, limit=1000)
    ckpt = await cp.load_checkpoint(thread_id)
    if with_metadata:
        listing: list[Any] = [(i.checkpoint_id, i.created_at, i.metadata) for i in infos]
    else:
        listing = [i.checkpoint_id for i in infos]
    latest = None if ckpt is None else (ckpt.checkpoint_id, dump(ckpt.state))
    return {"latest": latest, "listing": listing}


CAPABILITY_CALLS: dict[str, Callable[[BaseCheckpointer], Awaitable[Any]]] = {
    "search": lambda cp: cp.search("question", limit=5),
    "metadata_query": lambda cp: cp.query_by_metadata("step", 1),
    "vacuum": lambda cp: cp.vacuum(older_than_days=365),
    "branching": lambda cp: cp.copy_thread("cap", "cap-copy"),
    "list_threads": lambda cp: cp.list_threads(),
    "list_with_metadata": lambda cp: cp.list_with_metadata(),
}


class CheckpointerSuite:
    """Every behaviour a checkpointer must share; subclass it in a ``test_*.py`` to run it.

    Set :attr:`factory` (a :class:`CheckpointerFactory`), or override the ``checkpointer_store``
    fixture (e.g. parametrised over several backends). The flags below say which parts of the
    contract beyond the three required methods the backend keeps; a part that is off is skipped.
    Optional operations are tested as the backend's :attr:`~BaseCheckpointer.capabilities` say.
    """

    factory: ClassVar[CheckpointerFactory | None] = None
    supports_delete: ClassVar[bool] = True
    """``delete`` is implemented (the base class raises ``CapabilityNotSupported``)."""
    supports_compare_and_swap: ClassVar[bool] = True
    """``save(expected_parent=...)`` raises ``CheckpointConflict`` when the latest differs."""
    keeps_save_metadata: ClassVar[bool] = True
    """Save metadata (with ``parent_checkpoint_id``) and ``put_checkpoint``'s ``created_at`` are
    stored and listed back (needs ``list_checkpoint_infos`` / ``load_checkpoint`` overridden)."""
    races: ClassVar[bool] = False
    """Run the race cases (off by default): a fork racing a delete of its source, a copy racing a
    delete and a prune of its source, two forkers and a delete, several clients' compare-and-swap
    saves, each checking that every acknowledged write loads whole afterwards. They need delete,
    compare-and-swap, save metadata and ``branching``. A suite parametrised over several backends
    may set ``self.races`` per backend in its ``checkpointer_store`` fixture."""
    race_rounds: ClassVar[int] = 4
    """How many times each race runs (the start order varies between rounds)."""

    @pytest_asyncio.fixture
    async def checkpointer_store(self, tmp_path: Path) -> AsyncIterator[Opener]:
        factory = type(self).factory
        if factory is None:
            raise TypeError(f"{type(self).__name__} sets no factory and overrides no checkpointer_store")
        async with factory(tmp_path) as opener:
            yield opener

    @pytest_asyncio.fixture
    async def checkpointer(self, checkpointer_store: Opener) -> AsyncIterator[BaseCheckpointer]:
        async with checkpointer_store() as cp:
            yield cp

    @staticmethod
    def _skip_unless(flag: bool, what: str) -> None:
        if not flag:
            pytest.skip(f"backend does not claim {what}")

    async def test_round_trip_every_field_and_unknown_keys(self, checkpointer: BaseCheckpointer) -> None:
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

    async def test_saved_state_is_isolated_from_later_mutation(self, checkpointer: BaseCheckpointer) -> None:
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

    async def test_missing_thread_is_none_and_missing_checkpoint_raises(self, checkpointer: BaseCheckpointer) -> None:
        assert await checkpointer.load("nope") is None
        assert await checkpointer.list_checkpoints("nope") == []
        assert not await checkpointer.exists("nope")
        await checkpointer.save(full_state(), "there")
        with pytest.raises(CheckpointNotFound) as err:
            await checkpointer.load("there", "0" * 32)
        assert err.value.thread_id == "there"
        assert not await checkpointer.exists("there", "0" * 32)

    async def test_newest_first_listing_and_limit(self, checkpointer: BaseCheckpointer) -> None:
        ids = [await checkpointer.save(full_state(marker=str(i)), "list") for i in range(5)]
        assert await checkpointer.list_checkpoints("list") == ids[::-1]
        assert await checkpointer.list_checkpoints("list", limit=2) == ids[:2:-1][:2] == [ids[4], ids[3]]
        loaded = await checkpointer.load("list")
        assert loaded is not None and loaded.messages[1].content == "question 0 4"

    async def test_no_limit_lists_past_any_default(self, checkpointer: BaseCheckpointer) -> None:
        """``limit=None`` is the whole thread, however many checkpoints (a server's or a store's
        default page, 10 on many, must never cut it silently)."""
        ids = [await checkpointer.save(full_state(marker=str(i)), "many") for i in range(12)]
        assert await checkpointer.list_checkpoints("many", limit=None) == ids[::-1]
        infos = await checkpointer.list_checkpoint_infos("many", limit=None)
        assert [i.checkpoint_id for i in infos] == ids[::-1]

    async def test_every_save_records_its_parent(self, checkpointer: BaseCheckpointer) -> None:
        self._skip_unless(self.keeps_save_metadata, "save metadata")
        first = await checkpointer.save(full_state(), "lineage", metadata={"step": 1})
        second = await checkpointer.save(full_state(), "lineage", metadata={"step": 2})
        infos = await checkpointer.list_checkpoint_infos("lineage")
        assert [i.checkpoint_id for i in infos] == [second, first]
        assert infos[0].parent_checkpoint_id == first
        assert infos[1].parent_checkpoint_id is None
        assert infos[0].metadata["step"] == 2
        ckpt = await checkpointer.load_checkpoint("lineage")
        assert ckpt is not None and ckpt.checkpoint_id == second and ckpt.parent_checkpoint_id == first

    async def test_latest_after_deleting_the_newest(self, checkpointer: BaseCheckpointer) -> None:
        self._skip_unless(self.supports_delete, "delete")
        a = await checkpointer.save(full_state(marker="a"), "del")
        b = await checkpointer.save(full_state(marker="b"), "del")
        assert await checkpointer.delete("del", b)
        assert await checkpointer.list_checkpoints("del") == [a]
        loaded = await checkpointer.load("del")
        assert loaded is not None and loaded.messages[1].content == "question 0 a"
        c = await checkpointer.save(full_state(marker="c"), "del")
        ckpt = await checkpointer.load_checkpoint("del")
        assert ckpt is not None and ckpt.checkpoint_id == c
        assert ckpt.parent_checkpoint_id == a or not self.keeps_save_metadata
        assert await checkpointer.delete("del")
        assert await checkpointer.load("del") is None
        assert not await checkpointer.delete("del")

    async def test_copy_thread_is_isolated(self, checkpointer: BaseCheckpointer) -> None:
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
    async def test_odd_thread_ids(self, checkpointer: BaseCheckpointer, thread_id: str) -> None:
        state = full_state(marker=thread_id[:10])
        cid = await checkpointer.save(state, thread_id)
        loaded = await checkpointer.load(thread_id)
        assert loaded is not None and dump(loaded) == dump(state)
        assert await checkpointer.list_checkpoints(thread_id) == [cid]
        if checkpointer.capabilities.list_threads:
            assert await checkpointer.list_threads() == [thread_id]
        if not self.supports_delete:
            return
        assert await checkpointer.delete(thread_id)
        assert await checkpointer.load(thread_id) is None

    async def test_ids_that_sanitise_alike_never_mix(self, checkpointer: BaseCheckpointer) -> None:
        ids = ["a#1", "a_1", "a 1", "a/1"]
        for tid in ids:
            await checkpointer.save(full_state(marker=tid), tid)
        for tid in ids:
            loaded = await checkpointer.load(tid)
            assert loaded is not None and loaded.messages[1].content == f"question 0 {tid}"
            assert len(await checkpointer.list_checkpoints(tid)) == 1
        if checkpointer.capabilities.list_threads:
            assert sorted(await checkpointer.list_threads()) == sorted(ids)
        if not self.supports_delete:
            return
        await checkpointer.delete("a#1")
        assert await checkpointer.load("a#1") is None
        assert await checkpointer.load("a_1") is not None

    @pytest.mark.parametrize("bad", ["", "a\x00b", 42, None])
    async def test_invalid_thread_ids_are_rejected(self, checkpointer: BaseCheckpointer, bad: Any) -> None:
        with pytest.raises(InvalidThreadId):
            await checkpointer.save(full_state(), bad)
        with pytest.raises(InvalidThreadId):
            await checkpointer.load(bad)

    async def test_compare_and_swap(self, checkpointer: BaseCheckpointer) -> None:
        self._skip_unless(self.supports_compare_and_swap, "compare-and-swap")
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

    async def test_racing_compare_and_swap_has_one_winner(self, checkpointer: BaseCheckpointer) -> None:
        self._skip_unless(self.supports_compare_and_swap, "compare-and-swap")
        base = await checkpointer.save(full_state(), "race")
        results = await asyncio.gather(
            *(checkpointer.save(full_state(marker=str(i)), "race", expected_parent=base) for i in range(8)),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, str)]
        assert len(winners) == 1
        assert all(isinstance(r, CheckpointConflict) for r in results if not isinstance(r, str))

    async def test_concurrent_saves_lose_nothing(self, checkpointer: BaseCheckpointer) -> None:
        async def one(i: int) -> tuple[str, str]:
            tid = f"conc-{i % 20}"
            return tid, await checkpointer.save(full_state(n_turns=1, marker=str(i)), tid)

        saved = await asyncio.gather(*(one(i) for i in range(200)))
        for t in range(20):
            tid = f"conc-{t}"
            mine = {cid for th, cid in saved if th == tid}
            infos = await checkpointer.list_checkpoint_infos(tid, limit=100)
            assert {i.checkpoint_id for i in infos} == mine and len(mine) == 10
            if self.keeps_save_metadata:  # saves to one thread are totally ordered: one chain
                parents = [i.parent_checkpoint_id for i in infos]
                assert parents == [i.checkpoint_id for i in infos[1:]] + [None]
            for info in infos[:3]:
                assert await checkpointer.load(tid, info.checkpoint_id) is not None

    @pytest.mark.parametrize("capability", sorted(CAPABILITY_CALLS))
    async def test_capabilities_are_honest_both_ways(self, checkpointer: BaseCheckpointer, capability: str) -> None:
        caps = checkpointer.capabilities
        assert isinstance(caps, Capabilities)
        await checkpointer.save(full_state(), "cap", metadata={"step": 1})
        call = CAPABILITY_CALLS[capability]
        if getattr(caps, capability):
            await call(checkpointer)
        else:
            with pytest.raises(NotImplementedError, match=capability):
                await call(checkpointer)

    async def test_capability_results(self, checkpointer: BaseCheckpointer) -> None:
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

    async def test_put_checkpoint_writes_verbatim(self, checkpointer: BaseCheckpointer) -> None:
        """An import keeps ids, created_at and save metadata exactly; latest is the newest created_at."""
        self._skip_unless(self.keeps_save_metadata, "verbatim put_checkpoint")
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
        await checkpointer.put_checkpoint(
            Checkpoint("c-mid", tid, stamps["c-mid"], full_state(marker="z"), metas["c-mid"])
        )
        assert await checkpointer.list_checkpoints(tid) == ["c-new", "c-mid", "c-old"]
        again = await checkpointer.load(tid, "c-mid")
        assert again is not None and dump(again) == dump(full_state(marker="z"))
        # a normal save afterwards continues the lineage from the newest
        cid = await checkpointer.save(full_state(), tid)
        infos = await checkpointer.list_checkpoint_infos(tid)
        assert infos[0].checkpoint_id == cid and infos[0].parent_checkpoint_id == "c-new"
        assert infos[0].created_at > stamps["c-new"]

    # -- every write is seen by a fresh instance ------------------------------------------------
    async def _same_through_a_fresh_instance(
        self, cp: BaseCheckpointer, opener: Opener, *thread_ids: str, step: str
    ) -> None:
        caps = cp.capabilities
        meta = self.keeps_save_metadata
        async with opener() as fresh:
            for tid in thread_ids:
                mine, theirs = (
                    await store_view(cp, tid, with_metadata=meta),
                    await store_view(fresh, tid, with_metadata=meta),
                )
                assert theirs == mine, f"after {step}: a fresh instance sees {tid!r} differently"
                if mine["listing"]:  # the latest is the newest of the listing
                    newest = mine["listing"][0][0] if meta else mine["listing"][0]
                    assert mine["latest"][0] == newest, f"after {step}: latest is not the newest of {tid!r}"
            if caps.list_threads:
                assert await fresh.list_threads() == await cp.list_threads(), f"after {step}: list_threads"
            if caps.list_with_metadata:
                assert await fresh.list_with_metadata() == await cp.list_with_metadata(), f"after {step}"

    async def test_a_fresh_instance_sees_every_write(
        self, checkpointer: BaseCheckpointer, checkpointer_store: Opener
    ) -> None:
        """Save, put (also replacing a checkpoint under its id), copy, delete and vacuum all reach
        every index a fresh process reads: same latest, same listing, same metadata."""
        cp, same = checkpointer, self._same_through_a_fresh_instance
        a1 = await cp.save(full_state(marker="a1"), "w", metadata={"step": 1})
        a2 = await cp.save(full_state(marker="a2"), "w", metadata={"step": 2})
        await same(cp, checkpointer_store, "w", step="save")
        infos = await cp.list_checkpoint_infos("w")
        older = min(i.created_at for i in infos) - timedelta(days=1)
        await cp.put_checkpoint(Checkpoint(a2, "w", older, full_state(marker="r"), {"replaced": True}))
        await same(cp, checkpointer_store, "w", step="put_checkpoint replacing the latest")
        t0 = datetime(2025, 1, 1, tzinfo=UTC)
        for cid, hours in (("p2", 2), ("p1", 1), ("p3", 3)):
            await cp.put_checkpoint(
                Checkpoint(cid, "p", t0 + timedelta(hours=hours), full_state(marker=cid), {"h": hours})
            )
        await same(cp, checkpointer_store, "w", "p", step="put_checkpoint")
        threads = ["w", "p"]
        if cp.capabilities.branching:
            assert await cp.copy_thread("w", "w-copy")
            threads.append("w-copy")
            await same(cp, checkpointer_store, *threads, step="copy_thread")
        if self.supports_delete:
            assert await cp.delete("w", a1)
            await same(cp, checkpointer_store, *threads, step="delete of one checkpoint")
            assert await cp.delete("p")
            await same(cp, checkpointer_store, *threads, step="delete of a thread")
        if cp.capabilities.vacuum:
            await cp.save(full_state(marker="v"), "v")
            await cp.vacuum(older_than_days=-1)
            await same(cp, checkpointer_store, *threads, "v", step="vacuum")

    async def test_writes_through_another_instance_are_seen(
        self, checkpointer: BaseCheckpointer, checkpointer_store: Opener
    ) -> None:
        """A long-lived instance notices what another one (another process) wrote, including a
        checkpoint replaced under the same id."""
        cid = await checkpointer.save(full_state(marker="one"), "x", metadata={"v": 1})
        before = await checkpointer.list_checkpoint_infos("x")  # warm every cache
        async with checkpointer_store() as other:
            created = before[0].created_at + timedelta(seconds=1)
            await other.put_checkpoint(Checkpoint(cid, "x", created, full_state(marker="two"), {"v": 2}))
            second = await other.save(full_state(marker="three"), "x")
        assert await checkpointer.list_checkpoints("x") == [second, cid]
        replaced = await checkpointer.load("x", cid)
        assert replaced is not None and dump(replaced) == dump(full_state(marker="two"))
        latest = await checkpointer.load("x")
        assert latest is not None and dump(latest) == dump(full_state(marker="three"))
        if self.keeps_save_metadata:
            infos = await checkpointer.list_checkpoint_infos("x")
            assert infos[1].metadata == {"v": 2} and infos[1].created_at == created
            assert infos[0].parent_checkpoint_id == cid

    # -- retention: prune and vacuum keep a verifiable chain ------------------------------------
    async def _turns(self, cp: BaseCheckpointer, thread_id: str) -> dict[str, str]:
        """Two finished turns and an unfinished third, saved the way the agent saves them."""
        ids: dict[str, str] = {}
        steps = ["1a", "1b", "1end", "2a", "2end", "3a", "3b"]
        for n, step in enumerate(steps):
            source = "final" if step.endswith("end") else "iteration"
            ids[step] = await cp.save(full_state(marker=step), thread_id, metadata={"source": source, "n": n})
        return ids

    async def test_prune_drops_finished_iteration_saves(self, checkpointer_store: Opener) -> None:
        """Default prune: the iteration saves of ended turns go; turn ends and the open turn stay."""
        from tulip_nb.memory.integrity import verify_thread

        self._skip_unless(self.keeps_save_metadata and self.supports_delete, "save metadata and delete")
        async with checkpointer_store() as cp:
            ids = await self._turns(cp, "pr")
            assert await cp.prune("pr") == 3
            assert await cp.prune("pr") == 0  # nothing left to do: a re-run after a crash is harmless
        async with checkpointer_store() as cp:  # as a fresh process sees it
            kept = set(await cp.list_checkpoints("pr", limit=None))
            assert kept == {ids["1end"], ids["2end"], ids["3a"], ids["3b"]}
            latest = await cp.load_checkpoint("pr")
            assert latest is not None and latest.checkpoint_id == ids["3b"]
            report = await verify_thread(cp, "pr")
            assert report.ok, str(report)
            end2 = await cp.load_checkpoint("pr", ids["2end"])
            assert end2 is not None and end2.parent_checkpoint_id == ids["1end"]
            assert end2.state.messages[1].content == "question 0 2end"

    async def test_prune_keep_last(self, checkpointer: BaseCheckpointer) -> None:
        from tulip_nb.memory.integrity import verify_thread

        self._skip_unless(self.keeps_save_metadata and self.supports_delete, "save metadata and delete")
        ids = await self._turns(checkpointer, "kl")
        assert await checkpointer.prune("kl", keep_last=2, keep_turn_ends=False) == 5
        assert await checkpointer.list_checkpoints("kl", limit=None) == [ids["3b"], ids["3a"]]
        report = await verify_thread(checkpointer, "kl")
        assert report.ok, str(report)
        with pytest.raises(ValueError, match="keep_last"):
            await checkpointer.prune("kl", keep_last=-1)

    async def test_vacuum_keeps_a_verifiable_chain(self, checkpointer: BaseCheckpointer) -> None:
        """Signed checkpoints imported with old times: vacuum drops them, the rest still verifies."""
        from tulip_nb.memory.backends import MemoryCheckpointer
        from tulip_nb.memory.integrity import verify_thread

        self._skip_unless(self.keeps_save_metadata and checkpointer.capabilities.vacuum, "vacuum")
        source = MemoryCheckpointer()
        for i in range(4):
            await source.save(full_state(marker=str(i)), "vac")
        old = datetime.now(UTC) - timedelta(days=90)
        for n, info in enumerate(reversed(await source.list_checkpoint_infos("vac", None))):
            ckpt = await source.load_checkpoint("vac", info.checkpoint_id)
            assert ckpt is not None
            when = old + timedelta(seconds=n) if n < 2 else ckpt.created_at
            await checkpointer.put_checkpoint(Checkpoint(ckpt.checkpoint_id, "vac", when, ckpt.state, ckpt.metadata))
        assert await checkpointer.vacuum(older_than_days=30) == 2
        report = await verify_thread(checkpointer, "vac")
        assert report.ok and report.counts() == {"ok": 2}, str(report)

    async def test_vacuum_contract(self, checkpointer: BaseCheckpointer) -> None:
        """vacuum(days) drops every checkpoint older than the cutoff in every thread and returns how
        many; a thread left with none is gone, one left with some still verifies, newer ones stay,
        and a second run drops nothing (HistoryCheckpointer's docstring)."""
        from tulip_nb.memory.backends import MemoryCheckpointer
        from tulip_nb.memory.integrity import verify_thread

        self._skip_unless(self.keeps_save_metadata and checkpointer.capabilities.vacuum, "vacuum")
        old = datetime.now(UTC) - timedelta(days=90)
        plan = {"vc-old": 2, "vc-mixed": 3, "vc-new": 0}  # thread -> how many of its 5 saves are old
        kept: dict[str, list[str]] = {}
        for tid, n_old in plan.items():
            source = MemoryCheckpointer(sign=True)
            for i in range(2 if tid == "vc-old" else 5):
                await source.save(full_state(marker=f"{tid}{i}"), tid)
            infos = list(reversed(await source.list_checkpoint_infos(tid, None)))  # oldest first
            for n, info in enumerate(infos):
                ckpt = await source.load_checkpoint(tid, info.checkpoint_id)
                assert ckpt is not None
                when = old + timedelta(seconds=n) if n < n_old else ckpt.created_at
                await checkpointer.put_checkpoint(Checkpoint(ckpt.checkpoint_id, tid, when, ckpt.state, ckpt.metadata))
            kept[tid] = [i.checkpoint_id for i in reversed(infos[n_old:])]  # newest first
        assert await checkpointer.vacuum(older_than_days=30) == 5
        assert await checkpointer.load("vc-old") is None
        assert await checkpointer.list_checkpoints("vc-old", limit=None) == []
        if checkpointer.capabilities.list_threads:
            assert "vc-old" not in await checkpointer.list_threads(limit=None, pattern="vc-*")
        for tid in ("vc-mixed", "vc-new"):
            assert await checkpointer.list_checkpoints(tid, limit=None) == kept[tid]
            report = await verify_thread(checkpointer, tid)
            assert report.ok, str(report)
        assert await checkpointer.vacuum(older_than_days=30) == 0

    # -- races: every acknowledged write loads whole where threads share storage ----------------
    def _skip_unless_races(self, cp: BaseCheckpointer) -> None:
        self._skip_unless(self.races, "the race cases (races = True)")
        needs = self.supports_delete and self.supports_compare_and_swap and self.keeps_save_metadata
        assert needs and cp.capabilities.branching, "races = True needs delete, compare-and-swap, metadata, branching"

    @staticmethod
    async def _grow(
        cp: BaseCheckpointer, thread_id: str, turns: int, *, finals: bool = False
    ) -> list[tuple[str, dict[str, Any]]]:
        """A conversation that grows by a turn per save (with a turn end after each when ``finals``);
        the (checkpoint id, state) of every save, oldest first."""
        state = full_state(1, marker=thread_id)
        saved: list[tuple[str, dict[str, Any]]] = []
        for t in range(turns):
            state = state.model_copy()
            state.messages = [*state.messages, Message.user(f"{thread_id} turn {t}"), Message.assistant("x" * 300)]
            state.metadata = {**state.metadata, "turn": t, "log": [*state.metadata.get("log", []), t]}
            for source in ("iteration", "final") if finals else ("iteration",):
                cid = await cp.save(state, thread_id, metadata={"source": source, "turn": t})
                saved.append((cid, dump(state)))
        return saved

    @staticmethod
    def _forked(source: AgentState, note: str) -> AgentState:
        """A fork of ``source``: its messages (the same objects) and one of its own."""
        state = source.model_copy()
        state.messages = [*source.messages, Message.user(note)]
        return state

    async def _loads_whole(self, cp: BaseCheckpointer, thread_id: str, saved: dict[str, dict[str, Any]]) -> None:
        for cid, want in saved.items():
            got = await cp.load(thread_id, cid)
            assert got is not None and dump(got) == want, f"{thread_id}/{cid} does not load as it was saved"

    async def test_race_fork_against_a_delete_of_its_source(self, checkpointer_store: Opener) -> None:
        for r in range(self.race_rounds):
            src, fork = f"race/src-{r}", f"race/fork-{r}"
            async with checkpointer_store() as a, checkpointer_store() as b:
                self._skip_unless_races(a)
                await self._grow(a, src, 4)
                source = await a.load(src)
                assert source is not None
                forked = self._forked(source, f"fork {r}")
                meta = {"source": "fork", "forked_from": src}
                cid, deleted = await asyncio.gather(
                    _after(_ORDERS[r % 4][0], b.save(forked, fork, metadata=meta)),
                    _after(_ORDERS[r % 4][1], a.delete(src)),
                )
                assert deleted is True
            async with checkpointer_store() as fresh:
                assert await fresh.load(src) is None, f"round {r}: the deleted source is back"
                assert await fresh.list_checkpoints(fork, None) == [cid]
                await self._loads_whole(fresh, fork, {cid: dump(forked)})

    async def test_race_copy_against_a_delete_of_its_source(self, checkpointer_store: Opener) -> None:
        for r in range(self.race_rounds):
            src, dst = f"race/src-{r}", f"race/dst-{r}"
            async with checkpointer_store() as a, checkpointer_store() as b:
                self._skip_unless_races(a)
                saved = await self._grow(a, src, 4)
                copied, deleted = await asyncio.gather(
                    _after(_ORDERS[r % 4][0], a.copy_thread(src, dst)),
                    _after(_ORDERS[r % 4][1], b.delete(src)),
                    return_exceptions=True,
                )
                assert deleted is True, deleted
                assert copied is True or isinstance(copied, CheckpointNotFound), repr(copied)
            async with checkpointer_store() as fresh:
                assert await fresh.load(src) is None
                if copied is True:  # acknowledged: every checkpoint of the source, whole
                    assert await fresh.list_checkpoints(dst, None) == [cid for cid, _ in reversed(saved)]
                    await self._loads_whole(fresh, dst, dict(saved))
                else:
                    assert await fresh.load(dst) is None and await fresh.list_checkpoints(dst) == []

    async def test_race_copy_against_a_prune_of_its_source(self, checkpointer_store: Opener) -> None:
        turns = 5
        for r in range(self.race_rounds):
            src, dst = f"race/src-{r}", f"race/dst-{r}"
            async with checkpointer_store() as a, checkpointer_store() as b:
                self._skip_unless_races(a)
                saved = dict(await self._grow(a, src, turns, finals=True))
                copied, pruned = await asyncio.gather(
                    _after(_ORDERS[r % 4][0], a.copy_thread(src, dst)), _after(_ORDERS[r % 4][1], b.prune(src))
                )
                assert copied is True and pruned == turns
            async with checkpointer_store() as fresh:
                kept = await fresh.list_checkpoints(src, None)
                assert len(kept) == turns
                await self._loads_whole(fresh, src, {cid: saved[cid] for cid in kept})
                got = await fresh.list_checkpoints(dst, None)
                assert got in (kept, list(saved)[::-1]), f"round {r}: the copy is neither before nor after the prune"
                await self._loads_whole(fresh, dst, {cid: saved[cid] for cid in got})

    async def test_race_two_forkers_and_a_delete(self, checkpointer_store: Opener) -> None:
        for r in range(self.race_rounds):
            src = f"race/src-{r}"
            async with checkpointer_store() as a, checkpointer_store() as b, checkpointer_store() as c:
                self._skip_unless_races(a)
                await self._grow(a, src, 4)
                source = await a.load(src)
                assert source is not None
                forks = {f"race/f{i}-{r}": self._forked(source, f"fork {i}") for i in (1, 2)}
                d1, d2 = _ORDERS[r % 4]
                meta = {"source": "fork", "forked_from": src}
                results = await asyncio.gather(
                    *(
                        _after(d, cp.save(st, tid, metadata=meta))
                        for d, cp, (tid, st) in zip((d1, d2), (b, c), forks.items(), strict=True)
                    ),
                    _after(d1 + d2, a.delete(src)),
                )
                assert results[-1] is True
            async with checkpointer_store() as fresh:
                assert await fresh.load(src) is None
                for cid, (tid, state) in zip(results, forks.items(), strict=False):
                    assert await fresh.list_checkpoints(tid, None) == [cid]
                    await self._loads_whole(fresh, tid, {str(cid): dump(state)})

    async def test_race_several_clients_compare_and_swap(self, checkpointer_store: Opener) -> None:
        """Clients (instances) each read the latest and save after it with ``expected_parent``,
        retrying on a conflict: every acknowledged save is there, whole, in one chain."""
        from tulip_nb.memory.integrity import verify_thread

        clients, each, tid = 4, 4, "race/cas"
        async with checkpointer_store() as first:
            self._skip_unless_races(first)
            base = await first.save(full_state(1, marker="base"), tid, expected_parent="")
        acked: dict[str, tuple[int, str, dict[str, Any]]] = {}  # cid -> (client, its parent, state)

        async def client(k: int) -> None:
            won = lost = 0
            async with checkpointer_store() as cp:
                while won < each:
                    assert lost < 50 * clients * each, f"client {k} never wins"
                    latest = await cp.latest_checkpoint_id(tid)
                    state = await cp.load(tid, latest)
                    assert latest is not None and state is not None
                    await asyncio.sleep(0)  # the others read the same latest
                    state.messages = [*state.messages, Message.user(f"client {k} save {won}")]
                    try:
                        cid = await cp.save(state, tid, metadata={"client": k}, expected_parent=latest)
                    except CheckpointConflict:
                        lost += 1
                        continue
                    acked[cid] = (k, latest, dump(state))
                    won += 1

        await asyncio.gather(*(client(k) for k in range(clients)))
        async with checkpointer_store() as fresh:
            infos = await fresh.list_checkpoint_infos(tid, None)
            assert len(acked) == clients * each
            assert {i.checkpoint_id for i in infos} == {base, *acked}
            chain = [i.checkpoint_id for i in infos]
            assert [i.parent_checkpoint_id for i in infos] == [*chain[1:], None]  # one chain, newest first
            assert all(acked[i.checkpoint_id][1] == i.parent_checkpoint_id for i in infos[:-1])
            await self._loads_whole(fresh, tid, {cid: state for cid, (_, _, state) in acked.items()})
            report = await verify_thread(fresh, tid)
            assert report.ok, str(report)


_ORDERS = [(0, 1), (1, 0), (0, 0), (2, 0)]
"""Per round, how many times each racer yields to the event loop before it starts."""


async def _after(yields: int, op: Awaitable[_T]) -> _T:
    for _ in range(yields):
        await asyncio.sleep(0)
    return await op
