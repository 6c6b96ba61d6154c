"""Trying to break FileCheckpointer's delta layout: forks sharing history, retention and compaction,
faults mid-save, threads sharing a directory, many logs, two writers, the tulip envelope (mirror)
and a model-based comparison against MemoryCheckpointer. tulip-as-a-peer cases are in
tests/interop/test_file_delta_interop.py."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.workload import build_conversation
from tulip_nb.agent import Agent
from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import BackendUnavailable, CheckpointConflict
from tulip_nb.core.keys import MIRROR_KEY
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.memory.backends._delta_log import DeltaLog
from tulip_nb.memory.backends._file_delta import DeltaLogs
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, caller_metadata
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.models import ScriptedModel, text

BIG = "big/thread:1"


# -- helpers ----------------------------------------------------------------------------------------
def _state(n: int, tag: str = "m") -> AgentState:
    return AgentState(messages=[Message.user(f"{tag}{i}") for i in range(n)], metadata={"n": n})


def _mirrors(directory: Path) -> list[dict[str, Any]]:
    """The tulip_nb mirror envelopes in ``directory`` (parsed)."""
    out = []
    for p in sorted(directory.glob("*.json")):
        raw = orjson.loads(p.read_bytes())
        if raw.get(MIRROR_KEY):
            out.append(raw)
    return out


def _log(cp: FileCheckpointer, thread: str) -> Path:
    return cp._logs.path(cp.thread_dir(thread), thread)


def _subdirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir())


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _dump(state: AgentState | None) -> Any:
    return None if state is None else state.model_dump(mode="json")


async def _big_source(cp: FileCheckpointer, thread: str = BIG) -> tuple[str, AgentState]:
    state = AgentState(messages=build_conversation(2000))
    cid = await cp.save(state, thread, metadata={"source": "final"})
    return cid, state


def _agent(cp: FileCheckpointer) -> Agent:
    return Agent(ScriptedModel([text("x")]), checkpointer=cp)


async def _same(cp: BaseCheckpointer, thread: str, expected: AgentState, *, source_gone: bool = False) -> None:
    """``thread`` loads ``expected`` and verifies. A fork whose origin checkpoint is gone from its
    source (pruned, vacuumed) verifies with that one link ``origin_gone`` (not a failure);
    ``source_gone``: the fork's origin checkpoint was deleted, so exactly that must be reported."""
    got = await cp.load(thread)
    assert _dump(got) == _dump(expected)
    report = await verify_thread(cp, thread)
    assert report.ok, report
    assert all(v.status in ("ok", "origin_gone") for v in report.verdicts), report
    gone = [v for v in report.verdicts if v.status == "origin_gone"]
    assert len(gone) <= 1 and all(v is report.verdicts[0] for v in gone), report
    if source_gone:
        assert len(gone) == 1, report


# -- forks and copies share history --------------------------------------------------------------
async def test_a_fork_is_one_small_record_and_survives_its_parent(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="delta")
    _, state = await _big_source(cp)
    agent = _agent(cp)
    before = _disk(tmp_path)
    forks = [await agent.fork(BIG, new_thread_id=f"fork/{i}") for i in range(100)]
    first_dir = cp.thread_dir(forks[0])
    record = _log(cp, forks[0]).stat().st_size
    assert record < 5_000, record  # the fork's log: one small record referencing the parent's
    assert not _mirrors(first_dir)  # a fork is not a turn end: no envelope
    assert _disk(tmp_path) - before < 20_000_000 and _disk(tmp_path) < 20_000_000
    await cp.delete(BIG)
    assert not cp.thread_dir(BIG).exists()
    fresh = FileCheckpointer(tmp_path, layout="delta")
    for f in forks:
        await _same(fresh, f, state, source_gone=True)
        await _same(cp, f, state, source_gone=True)


async def test_lab_fork_and_copy_share_history_and_survive_the_parent(tmp_path: Path) -> None:
    from tulip_nb.lab import afork

    cp = FileCheckpointer(tmp_path, layout="delta")
    _, state = await _big_source(cp)
    thread = await afork(BIG, 1999, new_thread_id="lab/fork", checkpointer=cp)
    forked = await cp.load("lab/fork")
    assert forked is not None and forked.messages == state.messages
    assert _log(cp, thread.thread_id).stat().st_size < 5_000
    assert await cp.copy_thread(BIG, "copy/1")
    assert _log(cp, "copy/1").stat().st_size < 5_000
    assert len(_mirrors(cp.thread_dir("copy/1"))) == 1  # the copy's latest is a turn end
    assert cp.check_mirror("copy/1") == []
    await cp.delete(BIG)
    await _same(FileCheckpointer(tmp_path, layout="delta"), "lab/fork", forked, source_gone=True)
    await _same(FileCheckpointer(tmp_path, layout="delta"), "copy/1", state)
    assert cp.check_mirror("copy/1") == []


async def test_a_fork_of_a_fork_survives_the_middle_one(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="delta")
    _, state = await _big_source(cp)
    agent = _agent(cp)
    middle = await agent.fork(BIG, new_thread_id="middle")
    grand = await agent.fork(middle, new_thread_id="grand")
    grand_copy = "grand-copy"
    await cp.copy_thread(middle, grand_copy)
    await cp.delete(middle)
    for t in (grand, grand_copy):
        await _same(FileCheckpointer(tmp_path, layout="delta"), t, state, source_gone=t == grand)
    await _same(FileCheckpointer(tmp_path, layout="delta"), BIG, state)
    await cp.delete(BIG)
    for t in (grand, grand_copy):
        await _same(FileCheckpointer(tmp_path, layout="delta"), t, state, source_gone=True)


@pytest.mark.parametrize("how", ["fork", "copy"])
async def test_a_fork_into_a_thread_sharing_the_directory_survives_the_source(tmp_path: Path, how: str) -> None:
    """Bug: ``a#1`` and ``a_1`` share ``a_1/``; the dependent in the same directory was skipped when
    the source was deleted, so the fork's base vanished and it loaded as None."""
    cp = FileCheckpointer(tmp_path, layout="delta")
    state = _state(30)
    await cp.save(state, "a#1", metadata={"source": "final"})
    if how == "fork":
        await _agent(cp).fork("a#1", new_thread_id="a_1")
    else:
        await cp.copy_thread("a#1", "a_1")
    assert await cp.delete("a#1")
    await _same(FileCheckpointer(tmp_path, layout="delta"), "a_1", state, source_gone=how == "fork")
    await _same(cp, "a_1", state, source_gone=how == "fork")


async def test_unknown_envelope_keys_survive_the_delta_layout(tmp_path: Path) -> None:
    """Bug: ``Checkpoint.extra`` (envelope keys of a newer version) was dropped by the log."""
    cp = FileCheckpointer(tmp_path, layout="delta")
    now = datetime.now(UTC)
    await cp.put_checkpoint(Checkpoint("c1", "t", now, _state(2), {"source": "final"}, {"future": [1, 2]}))
    got = await FileCheckpointer(tmp_path, layout="delta").load_checkpoint("t", "c1")
    assert got is not None and got.extra == {"future": [1, 2]}
    await cp.copy_thread("t", "t2")
    copied = await FileCheckpointer(tmp_path, layout="delta").load_checkpoint("t2", "c1")
    assert copied is not None and copied.extra == {"future": [1, 2]}


async def test_a_checkpoint_written_again_rewrites_its_mirror(tmp_path: Path) -> None:
    """Bug: put_checkpoint of the mirrored id with a new state left the old envelope (tulip read it)."""
    cp = FileCheckpointer(tmp_path, layout="delta")
    now = datetime.now(UTC)
    await cp.put_checkpoint(Checkpoint("c1", "t", now, _state(2), {"source": "final"}))
    await cp.put_checkpoint(Checkpoint("c1", "t", now, _state(3, "other"), {"source": "final", "k": 1}))
    assert cp.check_mirror("t") == []
    (mirror,) = _mirrors(tmp_path / "t")
    assert [m["content"] for m in mirror["state"]["messages"]] == ["other0", "other1", "other2"]
    assert mirror["metadata"]["k"] == 1


@pytest.mark.parametrize("change", ["state", "time", "delete then put"])
async def test_rewriting_a_fork_base_leaves_the_fork_as_it_was(tmp_path: Path, change: str) -> None:
    """Bug: a put of the source checkpoint a fork is based on (same id, same created_at, another
    state) changed what the fork loaded; with another created_at the fork became unreadable."""
    cp = FileCheckpointer(tmp_path, layout="delta")
    c1 = await cp.save(_state(3, "orig"), "src", metadata={"source": "final"})
    await cp.save(_state(4, "orig"), "src", metadata={"source": "final"})
    ck = await cp.load_checkpoint("src", c1)
    assert ck is not None
    await _agent(cp).fork("src", c1, new_thread_id="f")
    await cp.copy_thread("src", "copy")
    before = {t: _dump(await cp.load(t, c1 if t == "copy" else None)) for t in ("f", "copy")}
    when = ck.created_at + timedelta(microseconds=1) if change == "time" else ck.created_at
    other = _state(2, "CHANGED") if change != "time" else ck.state
    if change == "delete then put":
        await cp.delete("src", c1)
    await cp.put_checkpoint(Checkpoint(c1, "src", when, other, dict(ck.metadata)))
    for reader in (cp, FileCheckpointer(tmp_path, layout="delta")):
        assert _dump(await reader.load("f")) == before["f"]
        assert _dump(await reader.load("copy", c1)) == before["copy"]
    assert _dump(await cp.load("src", c1)) == _dump(other)


async def test_relinking_a_fork_base_keeps_the_fork_shared(tmp_path: Path) -> None:
    """A prune re-links survivors with puts of the same state: the forks stay one small record."""
    cp = FileCheckpointer(tmp_path, layout="delta")
    await _turns(cp, "src", 3, 2)
    await _agent(cp).fork("src", new_thread_id="f")  # the latest turn end, re-linked by the prune
    size = _log(cp, "f").stat().st_size
    assert await cp.prune("src") == 6
    assert _log(cp, "f").stat().st_size == size
    assert (await cp.load("f")) is not None


# -- retention on the delta layout ---------------------------------------------------------------
async def _turns(cp: FileCheckpointer, thread: str, turns: int, per_turn: int, scratch: int = 0) -> list[str]:
    """A thread of ``turns`` turns, each ``per_turn`` iteration saves and one final; the finals' ids.

    Each iteration carries ``scratch`` bytes of working state that the turn end no longer has.
    """
    msgs: list[Message] = []
    finals = []
    for t in range(turns):
        for i in range(per_turn):
            msgs = [*msgs, Message.user(f"t{t} i{i}")]
            work = {"scratch": f"{t}.{i}" * (scratch // 4)} if scratch else {}
            await cp.save(AgentState(messages=msgs, metadata=work), thread, metadata={"source": "iteration"})
        msgs = [*msgs, Message.assistant(f"turn {t} done")]
        finals.append(await cp.save(AgentState(messages=msgs), thread, metadata={"source": "final"}))
    return finals


async def _consistent(cp: FileCheckpointer, base: Path, thread: str, *, verify: bool = True) -> None:
    """Listing, latest and mirror agree between this instance and a fresh one; verify is ok
    (``verify=False``: checkpoints were deleted one by one, which re-links nothing)."""
    fresh = FileCheckpointer(base, layout="delta")
    ours = [(i.checkpoint_id, caller_metadata(i.metadata)) for i in await cp.list_checkpoint_infos(thread, None)]
    theirs = [(i.checkpoint_id, caller_metadata(i.metadata)) for i in await fresh.list_checkpoint_infos(thread, None)]
    assert ours == theirs
    assert await cp.latest_checkpoint_id(thread) == await fresh.latest_checkpoint_id(thread)
    assert cp.check_mirror(thread) == [] and fresh.check_mirror(thread) == []
    ids = {cid for cid, _ in ours}
    mirrors = _mirrors(cp.thread_dir(thread))
    assert len(mirrors) <= 1 and all(m["checkpoint_id"] in ids for m in mirrors)
    report = await verify_thread(fresh, thread)
    assert report.ok or not verify, report
    assert not [v for v in report.verdicts if v.status in ("mismatch", "unreadable")], report


async def test_delete_one_checkpoint_moves_the_mirror(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="delta")
    finals = await _turns(cp, "t", 3, 2)
    assert _mirrors(tmp_path / "t")[0]["checkpoint_id"] == finals[-1]
    assert await cp.delete("t", finals[-1])
    latest = await cp.latest_checkpoint_id("t")
    assert latest != finals[-1]
    assert _mirrors(tmp_path / "t")[0]["checkpoint_id"] == finals[-2]  # the latest turn end left
    await _consistent(cp, tmp_path, "t")
    for cid in [i.checkpoint_id for i in await cp.list_checkpoint_infos("t", None)][:-1]:
        await cp.delete("t", cid)
        await _consistent(cp, tmp_path, "t")


async def test_prune_and_vacuum_keep_listing_latest_and_mirror(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="delta")
    finals = await _turns(cp, "t", 4, 3)
    assert await cp.prune("t") == 12  # the iterations of ended turns
    assert [i.checkpoint_id for i in await cp.list_checkpoint_infos("t", None)] == finals[::-1]
    await _consistent(cp, tmp_path, "t")
    assert await cp.prune("t", keep_last=1, keep_turn_ends=False) == 3
    assert await cp.list_checkpoints("t", None) == [finals[-1]]
    await _consistent(cp, tmp_path, "t")
    await cp.save(_state(1), "t", metadata={"source": "iteration"})
    assert await cp.vacuum(older_than_days=-1) == 2
    assert not (tmp_path / "t").exists()  # everything was old: the thread is gone


async def test_vacuum_of_part_of_a_thread_keeps_the_mirror_on_a_survivor(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="delta")
    old = datetime.now(UTC) - timedelta(days=40)
    await cp.put_checkpoint(Checkpoint("old", "t", old, _state(1), {"source": "final"}))
    await cp.save(_state(2), "t", metadata={"source": "iteration"})
    assert _mirrors(tmp_path / "t")[0]["checkpoint_id"] == "old"
    assert await cp.vacuum(30) == 1
    assert _mirrors(tmp_path / "t") == []  # no turn end left: no envelope, never a dropped one
    await _consistent(cp, tmp_path, "t")


async def test_compaction_shrinks_a_pruned_log_and_forks_still_load(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, fsync=False, layout="delta")
    finals = await _turns(cp, "long", 20, 15, scratch=8000)
    log = _log(cp, "long")
    # a fork of an iteration checkpoint that prune drops: its base must survive compaction
    infos = await cp.list_checkpoint_infos("long", None)
    iteration = next(i for i in infos if i.metadata.get("source") == "iteration")
    kept_state = await cp.load("long", iteration.checkpoint_id)
    await cp.save(kept_state, "fork", metadata={"forked_from": "long", "parent_checkpoint_id": iteration.checkpoint_id})  # type: ignore[arg-type]
    before = log.stat().st_size
    assert await cp.prune("long") == 300
    after = log.stat().st_size
    assert after < before / 2, (before, after)
    assert (await cp.list_checkpoints("long", None)) == finals[::-1]
    await _consistent(cp, tmp_path, "long")
    await _same(FileCheckpointer(tmp_path, layout="delta"), "fork", kept_state)  # type: ignore[arg-type]
    for cid in finals:
        assert (await FileCheckpointer(tmp_path, layout="delta").load_checkpoint("long", cid)) is not None
    print(f"\ncompaction: {before} -> {after} bytes")


async def test_bases_kept_for_forks_do_not_trigger_compaction_again(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(DeltaLogs, "COMPACT_MIN_BYTES", 10_000)
    calls: list[int] = []
    real = DeltaLog.compact

    def counting(self: DeltaLog, *, keep_bases: Any = ()) -> None:
        calls.append(1)
        real(self, keep_bases=keep_bases)

    monkeypatch.setattr(DeltaLog, "compact", counting)
    cp = FileCheckpointer(tmp_path, fsync=False, layout="delta")
    big = AgentState(messages=[Message.user("y" * 100_000)])
    first = await cp.save(big, "src", metadata={"source": "final"})
    await _agent(cp).fork("src", new_thread_id="f")
    for i in range(3):
        await cp.save(_state(1, f"s{i}"), "src", metadata={"source": "final"})
    await cp.delete("src", first)  # 100 KB dead but kept for the fork: nothing to reclaim
    assert calls == []
    for i in range(5):
        cid = await cp.save(_state(1, f"more{i}"), "src", metadata={"source": "final"})
        await cp.delete("src", cid)
    assert calls == []
    await _same(FileCheckpointer(tmp_path, layout="delta"), "f", big, source_gone=True)  # its parent was deleted


async def test_compaction_keeps_every_base_forks_and_copies_use(tmp_path: Path, monkeypatch: Any) -> None:
    """Forks of checkpoints the source then drops one by one, compacting at every drop."""
    monkeypatch.setattr(DeltaLogs, "COMPACT_MIN_BYTES", 0)
    compactions: list[set[str]] = []
    real = DeltaLog.compact

    def counting(self: DeltaLog, *, keep_bases: Any = ()) -> None:
        compactions.append(set(keep_bases))
        real(self, keep_bases=keep_bases)

    monkeypatch.setattr(DeltaLog, "compact", counting)
    cp = FileCheckpointer(tmp_path, fsync=False, layout="delta")
    msgs: list[Message] = []
    ids = []
    for i in range(12):
        msgs = [*msgs, Message.user(f"{i} " + "z" * 500)]
        src = "final" if i % 3 == 2 else "iteration"
        ids.append(await cp.save(AgentState(messages=msgs), "src", metadata={"source": src}))
    expected = {}
    for k, cid in enumerate(ids[::2]):
        state = await cp.load("src", cid)
        assert state is not None
        meta = {"forked_from": "src", "parent_checkpoint_id": cid, "source": "fork"}
        await cp.save(state, f"f{k}", metadata=meta)
        expected[f"f{k}"] = state
    await cp.copy_thread("f0", "f0-copy")  # a copy of a fork: its base is a fork record
    expected["f0-copy"] = expected["f0"]
    for cid in ids[:-1]:
        await cp.delete("src", cid)
        for t, state in expected.items():
            assert _dump(await FileCheckpointer(tmp_path, layout="delta").load(t)) == _dump(state), (t, cid)
    assert compactions and any(compactions), compactions  # bases were kept for the forks
    assert cp.check_mirror("src") == []
    await cp.prune("f0", keep_last=0, keep_turn_ends=False)  # the copy's base goes from f0's listing
    assert _dump(await FileCheckpointer(tmp_path, layout="delta").load("f0-copy")) == _dump(expected["f0"])
    await cp.delete("src")
    for t, state in expected.items():
        if t != "f0":
            assert _dump(await FileCheckpointer(tmp_path, layout="delta").load(t)) == _dump(state), t


# -- faults mid-save -----------------------------------------------------------------------------
@contextlib.contextmanager
def _failing(monkeypatch: Any, name: str, code: int, after: int = 0) -> Iterator[None]:
    real = getattr(os, name)
    seen = {"n": 0}

    def failing(*args: Any, **kwargs: Any) -> Any:
        seen["n"] += 1
        if seen["n"] > after:
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, failing)
    try:
        yield
    finally:
        monkeypatch.setattr(os, name, real)


@pytest.mark.parametrize(
    ("call", "code", "after"),
    [
        ("fdatasync", errno.EIO, 0),  # the log append
        ("writev", errno.ENOSPC, 0),  # the log append
        ("writev", errno.ENOSPC, 1),  # the mirror's envelope, after the record was appended
        ("fsync", errno.EIO, 0),  # the mirror's envelope
        ("replace", errno.EACCES, 0),  # the mirror's rename
    ],
)
@pytest.mark.parametrize("source", ["final", "iteration"])
async def test_a_failed_delta_save_leaves_the_thread_as_it_was(
    tmp_path: Path, monkeypatch: Any, call: str, code: int, after: int, source: str
) -> None:
    cp = FileCheckpointer(tmp_path, layout="delta")
    await cp.save(_state(2), "t", metadata={"source": "final"})
    good = await cp.save(_state(3), "t", metadata={"source": "final"})
    failed = False
    with _failing(monkeypatch, call, code, after):
        try:
            await cp.save(_state(4), "t", metadata={"source": source})
        except BackendUnavailable as e:
            failed = True
            assert errno.errorcode[code] in str(e)
    if not failed:  # an iteration save writes no envelope: a mirror-only fault cannot reach it
        assert source == "iteration" and (call, after) != ("fdatasync", 0) and (call, after) != ("writev", 0)
        return
    for reader in (FileCheckpointer(tmp_path, layout="delta"), cp):
        assert await reader.latest_checkpoint_id("t") == good
        assert len(await reader.list_checkpoints("t", None)) == 2
    assert [m["checkpoint_id"] for m in _mirrors(tmp_path / "t")] == [good]
    assert not [p for p in (tmp_path / "t").iterdir() if p.name.endswith(".tmp")]
    assert cp.check_mirror("t") == []
    assert (await verify_thread(FileCheckpointer(tmp_path, layout="delta"), "t")).ok
    nxt = await cp.save(_state(5), "t", metadata={"source": "final"}, expected_parent=good)
    await _consistent(cp, tmp_path, "t")
    assert _mirrors(tmp_path / "t")[0]["checkpoint_id"] == nxt


async def test_another_instance_compacting_under_us(tmp_path: Path, monkeypatch: Any) -> None:
    """Instance A has the log open (indexed, cached) when B prunes and compacts it (a new file)."""
    monkeypatch.setattr(DeltaLogs, "COMPACT_MIN_BYTES", 0)
    a, b = FileCheckpointer(tmp_path, layout="delta"), FileCheckpointer(tmp_path, layout="delta")
    finals = await _turns(a, "t", 4, 5, scratch=1000)
    every = await a.list_checkpoint_infos("t", None)
    mid = next(i.checkpoint_id for i in every if i.metadata.get("source") == "iteration")
    fork_state = await a.load("t", mid)
    assert fork_state is not None
    await a.save(fork_state, "fork", metadata={"forked_from": "t", "parent_checkpoint_id": mid, "source": "fork"})
    states = {cid: await a.load("t", cid) for cid in finals}
    inode = _log(a, "t").stat().st_ino
    assert await b.prune("t") == 20
    assert _log(a, "t").stat().st_ino != inode  # compacted: a new file
    assert await a.list_checkpoints("t", None) == finals[::-1]
    for cid, state in states.items():
        assert _dump(await a.load("t", cid)) == _dump(state)
    assert _dump(await a.load("fork")) == _dump(fork_state)
    nxt = await a.save(_state(1), "t", metadata={"source": "final"}, expected_parent=finals[-1])
    assert await b.latest_checkpoint_id("t") == nxt
    await _consistent(a, tmp_path, "t")
    await _consistent(b, tmp_path, "t")


@pytest.mark.parametrize(("call", "code"), [("replace", errno.EACCES), ("fsync", errno.EIO)])
async def test_a_failed_compaction_does_not_fail_the_drop(
    tmp_path: Path, monkeypatch: Any, call: str, code: int
) -> None:
    """The drop is done (a PRUNE record) before the compaction; a failed rewrite changes nothing."""
    monkeypatch.setattr(DeltaLogs, "COMPACT_MIN_BYTES", 0)
    cp = FileCheckpointer(tmp_path, layout="delta")
    finals = await _turns(cp, "t", 3, 4, scratch=2000)
    iterations = [i.checkpoint_id for i in await cp.list_checkpoint_infos("t", None) if i.checkpoint_id not in finals]
    size = _log(cp, "t").stat().st_size
    with _failing(monkeypatch, call, code):
        for cid in iterations[:10]:
            assert await cp.delete("t", cid)
    assert _log(cp, "t").stat().st_size >= size  # not compacted
    assert not [p for p in (tmp_path / "t").iterdir() if p.name.endswith(".tmp")]
    await _consistent(cp, tmp_path, "t", verify=False)
    assert await cp.delete("t", iterations[10])  # now it compacts
    assert _log(cp, "t").stat().st_size < size / 2
    await _consistent(cp, tmp_path, "t", verify=False)
    assert len(await cp.list_checkpoints("t", None)) == 3 + 12 - 11


# -- threads sharing a directory -----------------------------------------------------------------
async def test_ids_that_sanitise_alike_keep_their_own_logs(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="delta")
    ids = ["a#1", "a_1", "a 1"]
    for n, t in enumerate(ids):
        await cp.save(_state(n + 1, f"{t}-"), t, metadata={"source": "final", "who": t})
        await cp.save(_state(n + 2, f"{t}-"), t, metadata={"source": "iteration", "who": t})
    (directory,) = _subdirs(tmp_path)
    assert len([p for p in directory.iterdir() if p.name.startswith(".tulip_nb_log")]) == 3
    assert len(_mirrors(directory)) == 3
    fresh = FileCheckpointer(tmp_path, layout="delta")
    assert sorted(await fresh.list_threads()) == sorted(ids)
    for n, t in enumerate(ids):
        st_ = await fresh.load(t)
        assert st_ is not None and len(st_.messages) == n + 2 and st_.messages[0].content == f"{t}-0"
        assert len(await fresh.list_checkpoints(t, None)) == 2
        assert fresh.check_mirror(t) == []
        hits = await fresh.query_by_metadata("who", t)
        assert {h["thread_id"] for h in hits} == {t} and len(hits) == 2
    found = await fresh.search("a#1-0")
    assert {h["thread_id"] for h in found} == {"a#1"}
    listed = await fresh.list_with_metadata()
    assert sorted(r["thread_id"] for r in listed) == sorted(ids)
    await fresh.delete("a_1")
    assert sorted(await fresh.list_threads()) == ["a 1", "a#1"]
    assert await fresh.vacuum(older_than_days=-1) == 4
    assert await fresh.list_threads() == [] and not directory.exists()


# -- many logs, one process ------------------------------------------------------------------------
def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
async def test_more_threads_than_open_logs_round_robin(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, fsync=False, layout="delta")
    n = DeltaLogs.MAX_OPEN + 36
    threads = [f"t{i}" for i in range(n)]
    last: dict[str, str] = {}
    for t in threads:
        last[t] = await cp.save(_state(1, t), t, metadata={"source": "final"})
    baseline = _fds()
    for rnd in range(3):
        for i, t in enumerate(threads):
            meta = {"source": "iteration" if i % 2 else "final"}
            last[t] = await cp.save(_state(rnd + 2, t), t, metadata=meta, expected_parent=last[t])
            if i % 7 == 0:
                await _agent(cp).fork(threads[(i + 1) % n], new_thread_id=f"fork-{rnd}-{i}")
        assert _fds() <= baseline + 4
    assert len(cp._logs._logs) <= DeltaLogs.MAX_OPEN
    fresh = FileCheckpointer(tmp_path, fsync=False, layout="delta")
    for t in threads:
        assert await fresh.latest_checkpoint_id(t) == last[t]
        got = await fresh.load(t)
        assert got is not None and len(got.messages) == 4 and got.messages[0].content == f"{t}0"
    for t in [t for t in await fresh.list_threads(None) if t.startswith("fork-")]:
        assert (await fresh.load(t)) is not None
    await cp.close()
    await fresh.close()
    assert _fds() <= baseline


# -- two writers -----------------------------------------------------------------------------------
_WRITER = r"""
import asyncio, sys
from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import CheckpointConflict
from tulip_nb.memory.backends.file import FileCheckpointer

async def main(base, who, rounds):
    cp = FileCheckpointer(base, layout="delta")
    wins = 0
    for i in range(rounds):
        for _ in range(200):
            latest = await cp.load_checkpoint("shared")
            parent = latest.checkpoint_id if latest else ""
            msgs = list(latest.state.messages) if latest else []
            msgs.append(Message.user(f"{who}{i}"))
            src = "final" if i % 3 == 0 else "iteration"
            try:
                await cp.save(AgentState(messages=msgs), "shared", metadata={"source": src}, expected_parent=parent)
                wins += 1
                break
            except CheckpointConflict:
                continue
    print(wins)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def _run_writers(base: Path, rounds: int) -> list[int]:
    """Two processes saving one thread alternately, each with expected_parent; their wins."""
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(base), who, str(rounds)], stdout=subprocess.PIPE, cwd=root)
        for who in ("A", "B")
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    return [int(o) for o in outs]


async def test_two_processes_compare_and_swap_one_delta_thread(tmp_path: Path) -> None:
    wins = await asyncio.to_thread(_run_writers, tmp_path, 15)
    assert sum(wins) == 30
    cp = FileCheckpointer(tmp_path, layout="delta")
    infos = await cp.list_checkpoint_infos("shared", None)
    assert len(infos) == 30 and len({i.checkpoint_id for i in infos}) == 30
    # one chain: each parent is the previous checkpoint, each state extends its parent's
    chain = infos[::-1]
    for prev, cur in itertools.pairwise(chain):
        assert cur.parent_checkpoint_id == prev.checkpoint_id
    latest = await cp.load("shared")
    assert latest is not None and len(latest.messages) == 30
    assert cp.check_mirror("shared") == [] and len(_mirrors(tmp_path / "shared")) == 1
    assert (await verify_thread(cp, "shared")).ok


async def test_two_instances_alternate_with_expected_parent(tmp_path: Path) -> None:
    a, b = FileCheckpointer(tmp_path, layout="delta"), FileCheckpointer(tmp_path, layout="delta")
    parent = ""
    for i in range(10):
        w, other = (a, b) if i % 2 == 0 else (b, a)
        cid = await w.save(_state(i + 1), "t", metadata={"source": "final"}, expected_parent=parent)
        with pytest.raises(CheckpointConflict):
            await other.save(_state(i + 2), "t", expected_parent=parent)
        assert await other.latest_checkpoint_id("t") == cid
        parent = cid
    assert await a.list_checkpoints("t", None) == await b.list_checkpoints("t", None)
    assert len(_mirrors(tmp_path / "t")) == 1 and a.check_mirror("t") == []


# -- check_mirror ---------------------------------------------------------------------------------
async def test_check_mirror_reports_each_problem(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="delta")
    first = await cp.save(_state(1), "t", metadata={"source": "final"})
    second = await cp.save(_state(2), "t", metadata={"source": "final"})
    directory = tmp_path / "t"
    good = (directory / f"{second}.json").read_bytes()
    assert cp.check_mirror("t") == []
    # missing
    (directory / f"{second}.json").unlink()
    assert any("cannot be read" in p for p in FileCheckpointer(tmp_path, layout="delta").check_mirror("t"))
    # stale extra mirror (an older turn end still has its envelope)
    (directory / f"{second}.json").write_bytes(good)
    raw = orjson.loads(good)
    raw["checkpoint_id"] = first
    (directory / f"{first}.json").write_bytes(orjson.dumps(raw))
    problems = FileCheckpointer(tmp_path, layout="delta").check_mirror("t")
    assert any("stale" in p and first in p for p in problems), problems
    (directory / f"{first}.json").unlink()
    # differs from the log
    raw = orjson.loads(good)
    raw["state"]["messages"][0]["content"] = "tampered"
    (directory / f"{second}.json").write_bytes(orjson.dumps(raw))
    assert any("differs" in p for p in FileCheckpointer(tmp_path, layout="delta").check_mirror("t"))
    (directory / f"{second}.json").write_bytes(good)
    assert FileCheckpointer(tmp_path, layout="delta").check_mirror("t") == []
    # the log lost the record (cut) while the mirror remains
    log = directory / ".tulip_nb_log"
    fresh = FileCheckpointer(tmp_path, layout="delta")
    header = fresh._logs.get(directory, "t").header(second)  # type: ignore[union-attr]
    await fresh.close()
    os.truncate(log, header.offset)
    problems = FileCheckpointer(tmp_path, layout="delta").check_mirror("t")
    assert any("lost" in p and second in p for p in problems), problems


# -- model-based: the delta layout against MemoryCheckpointer -------------------------------------
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.sampled_from(["t1", "a#1", "a_1"]), st.sampled_from(["iteration", "final"])),
        st.tuples(st.just("put"), st.sampled_from(["t1", "a#1", "a_1"]), st.integers(0, 5)),
        st.tuples(st.just("tulip_save"), st.sampled_from(["t1", "a#1"]), st.sampled_from(["iteration", "final"])),
        st.tuples(st.just("delete_one"), st.sampled_from(["t1", "a#1", "a_1", "f", "g", "c"]), st.integers(0, 10)),
        st.tuples(
            st.just("prune"), st.sampled_from(["t1", "a#1", "a_1", "f", "g", "c"]), st.sampled_from([None, 1, 2])
        ),
        st.tuples(st.just("fork"), st.sampled_from(["t1", "a#1", "a_1", "f"]), st.integers(0, 10)),
        st.tuples(st.just("copy"), st.sampled_from(["t1", "a#1", "f"]), st.just(0)),
        st.tuples(st.just("delete"), st.sampled_from(["t1", "a#1", "a_1", "f", "g", "c"]), st.just(0)),
        st.tuples(st.just("reopen"), st.just(""), st.just(0)),
    ),
    max_size=30,
)


async def _apply(stores: list[Any], base: Path, op: tuple[str, str, Any], n: int) -> None:
    """Apply ``op`` to the model (``stores[0]``) and the file store, with the same states and ids."""
    kind, thread, arg = op
    model = stores[0]
    if kind == "reopen":
        await stores[1].close()
        stores[1] = FileCheckpointer(base, fsync=False, layout="delta")
        return
    ids = await model.list_checkpoints(thread, None)
    if kind == "save":
        latest = await model.load(thread)
        state = AgentState(messages=[*(latest.messages if latest else []), Message.user(f"{thread} {n}")])
        for cp in stores:
            await cp.save(state.model_copy(deep=True), thread, f"s{n}", metadata={"source": arg, "n": n})
    elif kind == "tulip_save":  # an envelope written into the directory, as tulip (or layout="tulip") does
        latest = await model.load(thread)
        state = AgentState(messages=[*(latest.messages if latest else []), Message.user(f"tulip {n}")])
        meta = {"source": arg, "n": n}
        await model.save(state.model_copy(deep=True), thread, f"e{n}", metadata=dict(meta))
        envelopes = FileCheckpointer(base, fsync=False, layout="tulip")
        await envelopes.save(state.model_copy(deep=True), thread, f"e{n}", metadata=dict(meta))
    elif kind == "put":
        at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n)
        state = AgentState(messages=[Message.user(f"put {n} {j}") for j in range(arg)])
        meta = {"source": "final" if arg % 2 else "iteration", "parent_checkpoint_id": None}
        for cp in stores:
            await cp.put_checkpoint(Checkpoint(f"p{n}", thread, at, state.model_copy(deep=True), dict(meta)))
    elif kind == "delete_one" and ids:
        for cp in stores:
            await cp.delete(thread, ids[arg % len(ids)])
    elif kind == "prune":
        for cp in stores:
            await cp.prune(thread, keep_last=arg)
    elif kind == "fork" and ids and not await model.list_checkpoints(target := "g" if thread == "f" else "f", 1):
        src_id = ids[arg % len(ids)]
        ck = await model.load_checkpoint(thread, src_id)
        meta = {"forked_from": thread, "parent_checkpoint_id": src_id, "source": "fork"}
        for cp in stores:
            await cp.save(ck.state.model_copy(deep=True), target, f"f{n}", metadata=dict(meta))
    elif kind == "copy" and ids and not await model.list_checkpoints("c", 1):
        for cp in stores:
            await cp.copy_thread(thread, "c")
    elif kind == "delete":
        for cp in stores:
            await cp.delete(thread)


async def _agree(model: MemoryCheckpointer, file_cp: FileCheckpointer, base: Path) -> None:
    threads = sorted(await model.list_threads(None))
    assert sorted(await file_cp.list_threads(None)) == threads
    for t in threads:
        m_infos = await model.list_checkpoint_infos(t, None)
        f_infos = await file_cp.list_checkpoint_infos(t, None)
        assert [i.checkpoint_id for i in f_infos] == [i.checkpoint_id for i in m_infos]
        assert [caller_metadata(i.metadata) for i in f_infos] == [caller_metadata(i.metadata) for i in m_infos]
        for info in m_infos:
            m = await model.load(t, info.checkpoint_id)
            f = await file_cp.load(t, info.checkpoint_id)
            assert _dump(f) == _dump(m)
        assert _dump(await file_cp.load(t)) == _dump(await model.load(t))
        assert file_cp.check_mirror(t) == []
    for d in _subdirs(base):
        owners = [m["thread_id"] for m in _mirrors(d)]
        assert len(owners) == len(set(owners)), (d, owners)  # at most one mirror per thread


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
@pytest.mark.parametrize("compact_at", [None, 0])
def test_delta_layout_behaves_like_the_memory_store(
    tmp_path_factory: Any, ops: list[Any], compact_at: int | None, monkeypatch: Any
) -> None:
    """``compact_at=0``: compact whenever a drop leaves more dead bytes than live ones."""
    if compact_at is not None:
        monkeypatch.setattr(DeltaLogs, "COMPACT_MIN_BYTES", compact_at)
    base = tmp_path_factory.mktemp("model")

    async def run() -> None:
        stores: list[Any] = [MemoryCheckpointer(), FileCheckpointer(base, fsync=False, layout="delta")]
        for n, op in enumerate(ops):
            await _apply(stores, base, op, n)
            await _agree(stores[0], stores[1], base)
        await _agree(stores[0], FileCheckpointer(base, fsync=False, layout="delta"), base)
        await stores[1].close()

    asyncio.run(run())
