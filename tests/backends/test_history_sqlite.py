"""The file store's history layout (``FileCheckpointer(base_dir)``, the default): the shipped
conformance suite signed, plus the races, corruption and confinement cases of issue 26."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.testing import CheckpointerSuite, Opener

from .factories import opener


@contextlib.asynccontextmanager
async def history_signed_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    yield opener(lambda: FileCheckpointer(tmp_path / "threads", layout="history", sign=True))


# (unsigned, the default: the "file" factory of test_conformance.py runs the suite and its races)
class TestHistorySignedConformance(CheckpointerSuite):
    factory = staticmethod(history_signed_backend)
    races = True


# -- helpers ------------------------------------------------------------------------------------
import asyncio  # noqa: E402
import os  # noqa: E402
import sqlite3  # noqa: E402

import pytest  # noqa: E402

from tulip_nb.core import AgentState, CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, Message  # noqa: E402
from tulip_nb.core.errors import BackendUnavailable, InvalidThreadId  # noqa: E402
from tulip_nb.memory._envelope import encode_envelope  # noqa: E402
from tulip_nb.memory.backends._history_file import HistoryFileCheckpointer  # noqa: E402
from tulip_nb.memory.backends._sqlite_history import DB_DIR, DB_NAME  # noqa: E402


def history(base: Path, *, sign: bool = False) -> HistoryFileCheckpointer:
    cp = FileCheckpointer(base, layout="history", sign=sign)
    assert isinstance(cp, HistoryFileCheckpointer)
    return cp


def conversation(n: int, tag: str = "m") -> AgentState:
    msgs = [Message.system("sys")]
    for i in range(n):
        msgs += [Message.user(f"{tag} q{i} " + "x" * 200), Message.assistant(f"{tag} a{i}")]
    return AgentState(messages=msgs, metadata={"n": n, "tag": tag})


async def grow(cp: HistoryFileCheckpointer, thread_id: str, turns: int, tag: str = "m") -> list[str]:
    """Save a growing conversation, one checkpoint per turn (the messages appended each time)."""
    state = AgentState(messages=[Message.system("sys")])
    ids = []
    for i in range(turns):
        state.messages = [*state.messages, Message.user(f"{tag} q{i} " + "x" * 200), Message.assistant(f"{tag} a{i}")]
        state.metadata = {"n": i + 1, "tag": tag}
        ids.append(await cp.save(state, thread_id))
    return ids


def db(base: Path) -> sqlite3.Connection:
    return sqlite3.connect(base / DB_DIR / DB_NAME, isolation_level=None)


# -- the model: a save stores only what is new; forks and copies share entries --------------------
async def test_messages_are_stored_once_and_collected_with_their_last_row(tmp_path: Path) -> None:
    cp = history(tmp_path)
    await grow(cp, "t", 20)
    await cp.copy_thread("t", "copy")
    state = await cp.load("t")
    assert state is not None
    state.messages = [*state.messages, Message.user("fork only")]
    await cp.save(state, "fork", metadata={"forked_from": "t"})
    with db(tmp_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 1 + 2 * 20 + 1
    assert cp.check_store() == []
    await cp.delete("t")
    await cp.delete("copy")
    with db(tmp_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 1 + 2 * 20 + 1  # the fork reaches them
    await cp.delete("fork")
    with db(tmp_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 0
    assert cp.check_store() == []


# -- races: nothing acknowledged is lost where threads share entries --------------------------------
@pytest.mark.parametrize("run", range(6))
async def test_fork_saved_while_its_source_is_deleted(tmp_path: Path, run: int) -> None:
    a, b = history(tmp_path), history(tmp_path)  # two instances: two connections, as two processes
    await grow(a, "src", 15)
    source = await a.load("src")
    assert source is not None
    forked = source.model_copy()
    forked.messages = [*source.messages, Message.user("the fork's own")]
    results = await asyncio.gather(
        b.save(forked, "fork", metadata={"forked_from": "src"}), a.delete("src"), return_exceptions=True
    )
    assert all(not isinstance(r, BaseException) for r in results), results
    async with contextlib.AsyncExitStack():
        fresh = history(tmp_path)
        got = await fresh.load("fork")
        assert got is not None and [m.content for m in got.messages] == [m.content for m in forked.messages]
        assert await fresh.load("src") is None
        assert fresh.check_store() == []
    for cp in (a, b):
        await cp.close()


@pytest.mark.parametrize("run", range(5))
async def test_copy_racing_a_delete_of_its_source(tmp_path: Path, run: int) -> None:
    a, b = history(tmp_path), history(tmp_path)
    ids = await grow(a, "src", 12)
    copied, deleted = await asyncio.gather(a.copy_thread("src", "dst"), b.delete("src"), return_exceptions=True)
    assert deleted is True
    fresh = history(tmp_path)
    if copied is True:
        assert await fresh.list_checkpoints("dst", None) == ids[::-1]
        for cid in ids:
            assert await fresh.load("dst", cid) is not None
    else:
        assert isinstance(copied, CheckpointNotFound)
        assert await fresh.load("dst") is None
    assert fresh.check_store() == []


async def test_copy_racing_a_prune_of_its_source(tmp_path: Path) -> None:
    a, b = history(tmp_path), history(tmp_path)
    for turn in range(10):
        state = conversation(turn + 1, "p")
        await a.save(state, "src", metadata={"source": "iteration"})
        await a.save(state, "src", metadata={"source": "final"})
    copied, pruned = await asyncio.gather(a.copy_thread("src", "dst"), b.prune("src"))
    assert copied is True and pruned == 10
    fresh = history(tmp_path)
    infos = await fresh.list_checkpoint_infos("dst", None)
    assert len(infos) in (10, 20)  # before or after the prune, never in between
    for info in infos:
        ckpt = await fresh.load_checkpoint("dst", info.checkpoint_id)
        assert ckpt is not None and ckpt.state.metadata["tag"] == "p"
    assert fresh.check_store() == []


async def test_two_forkers_and_a_delete(tmp_path: Path) -> None:
    cps = [history(tmp_path) for _ in range(3)]
    await grow(cps[0], "src", 10)
    source = await cps[0].load("src")
    assert source is not None

    async def fork(cp: HistoryFileCheckpointer, name: str) -> str:
        state = source.model_copy()
        state.messages = [*source.messages, Message.user(name)]
        return await cp.save(state, name, metadata={"forked_from": "src"})

    results = await asyncio.gather(fork(cps[1], "f1"), fork(cps[2], "f2"), cps[0].delete("src"))
    fresh = history(tmp_path)
    for name, cid in (("f1", results[0]), ("f2", results[1])):
        got = await fresh.load(name, cid)
        assert got is not None and got.messages[-1].content == name and len(got.messages) == 22
    assert fresh.check_store() == []


async def test_compare_and_swap_across_instances(tmp_path: Path) -> None:
    cps = [history(tmp_path) for _ in range(4)]
    base = await cps[0].save(conversation(1), "cas")
    results = await asyncio.gather(
        *(cp.save(conversation(2, str(i)), "cas", expected_parent=base) for i, cp in enumerate(cps)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, str) for r in results) == 1
    assert all(isinstance(r, CheckpointConflict) for r in results if not isinstance(r, str))


# -- corruption: a flipped bit is CheckpointCorrupt, never an older state -------------------------------
@pytest.mark.parametrize("where", ["entry", "rest", "metadata", "moved"])
async def test_corruption_is_reported_never_an_older_state(tmp_path: Path, where: str) -> None:
    cp = history(tmp_path)
    ids = await grow(cp, "t", 3)
    await grow(cp, "other", 1, tag="o")
    with db(tmp_path) as conn:
        if where == "entry":  # one bit of the newest message
            rowid, data = conn.execute(
                "SELECT e.rowid, e.data FROM entries e JOIN checkpoints c ON c.head = e.rowid WHERE c.cid = ?",
                (ids[-1],),
            ).fetchone()
            flipped = bytes([data[0]]) + bytes([data[1] ^ 0x04]) + data[2:]
            conn.execute("UPDATE entries SET data = ? WHERE rowid = ?", (flipped, rowid))
        elif where == "rest":
            rest = conn.execute("SELECT rest FROM checkpoints WHERE cid = ?", (ids[-1],)).fetchone()[0]
            conn.execute(
                "UPDATE checkpoints SET rest = ? WHERE cid = ?",
                (rest[:-3] + bytes([rest[-3] ^ 1]) + rest[-2:], ids[-1]),
            )
        elif where == "metadata":
            conn.execute(
                "UPDATE checkpoints SET metadata = ? WHERE cid = ?", (b'{"parent_checkpoint_id":null}', ids[-1])
            )
        else:  # the other thread's row moved into this one, as the newest
            conn.execute("UPDATE checkpoints SET thread = 't', at_us = at_us + 10000000000 WHERE thread = 'other'")
    fresh = history(tmp_path)
    with pytest.raises(CheckpointCorrupt) as err:
        await fresh.load("t")
    assert err.value.thread_id == "t"
    if where != "moved":
        with pytest.raises(CheckpointCorrupt):
            await fresh.load("t", ids[-1])
        assert await fresh.load("t", ids[0]) is not None  # the rest of the thread still loads


async def test_a_damaged_database_file_is_corrupt_not_empty(tmp_path: Path) -> None:
    cp = history(tmp_path)
    await grow(cp, "t", 3)
    await cp.close()
    path = tmp_path / DB_DIR / DB_NAME
    with db(tmp_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    data[0:16] = b"not a database!!"
    path.write_bytes(bytes(data))
    with pytest.raises((CheckpointCorrupt, BackendUnavailable)):
        await history(tmp_path).load("t")


# -- confinement: links are never followed -------------------------------------------------------
async def test_links_planted_in_the_thread_directory_are_never_written_through(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    cp = history(base)
    await cp.save(conversation(1), "t", checkpoint_id="c0")
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    os.symlink(outside, base / "t" / "c1.json")
    with pytest.warns(RuntimeWarning, match="links are never followed"):
        await cp.save(conversation(2), "t", checkpoint_id="c1")
    assert outside.read_text() == "precious"
    assert not (base / "t" / "c1.json").is_symlink()
    os.link(outside, base / "t" / "c2.json")
    with pytest.warns(RuntimeWarning, match="singly linked"):
        await cp.save(conversation(3), "t", checkpoint_id="c2")
    assert outside.read_text() == "precious" and os.stat(outside).st_nlink == 1
    assert os.stat(base / "t" / "c2.json").st_nlink == 1
    assert sorted(os.listdir(base / "t")) == ["c2.json"]  # one projection: the latest turn end
    assert cp.check_mirror("t") == []


async def test_a_symlinked_thread_directory_or_store_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    base.mkdir()
    os.symlink(elsewhere, base / "t")
    cp = history(base)
    with pytest.raises(InvalidThreadId):
        await cp.save(conversation(1), "t")
    base2 = tmp_path / "threads2"
    base2.mkdir()
    os.symlink(elsewhere, base2 / DB_DIR)
    with pytest.raises(BackendUnavailable, match="symbolic link"):
        await history(base2).save(conversation(1), "t")
    assert os.listdir(elsewhere) == []


# -- the projection tulip reads ----------------------------------------------------------------
async def test_a_tulip_envelope_newer_than_the_history_is_the_latest(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    cp = history(base)
    ours = await cp.save(conversation(1), "t", metadata={"source": "final"})
    latest = await cp.load_checkpoint("t")
    assert latest is not None
    later = latest.created_at.replace(year=latest.created_at.year + 1)
    tulip_state = conversation(2, "tulip")
    (base / "t" / "tulipcid.json").write_bytes(encode_envelope("tulipcid", "t", later, tulip_state, {}))
    fresh = history(base)
    assert await fresh.list_checkpoints("t") == ["tulipcid", ours]
    got = await fresh.load("t")
    assert got is not None and got.metadata["tag"] == "tulip"
    nxt = await fresh.save(got, "t")
    infos = await fresh.list_checkpoint_infos("t")
    assert infos[0].checkpoint_id == nxt and infos[0].parent_checkpoint_id == "tulipcid"
    assert await fresh.delete("t")
    assert not (base / "t").exists()


async def test_a_lost_projection_is_repaired_from_the_history(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    cp = history(base)
    cid = await cp.save(conversation(2), "t", metadata={"source": "final"})
    await cp.save(conversation(3), "t", metadata={"source": "iteration"})
    saved = await cp.load_checkpoint("t", cid)
    assert saved is not None
    (base / "t" / f"{cid}.json").unlink()  # a power cut before the unsynced envelope reached the disk
    stale = encode_envelope("stale", "t", saved.created_at, conversation(1), {}, {"tulip_nb_projection": DB_NAME})
    (base / "t" / "stale.json").write_bytes(stale)
    fresh = history(base)
    assert cp.check_mirror("t") != []
    assert len(await fresh.list_checkpoints("t")) == 2
    assert sorted(os.listdir(base / "t")) == [f"{cid}.json"]
    assert fresh.check_mirror("t") == []


async def test_tulip_resumes_the_projection(tmp_path: Path) -> None:
    tulip_backends = pytest.importorskip("tulip.memory.backends")
    base = tmp_path / "threads"
    cp = history(base)
    state = conversation(3)
    cid = await cp.save(state, "user/42:chat #1", metadata={"source": "final"})
    theirs = tulip_backends.FileCheckpointer(base_dir=str(base))
    loaded = await theirs.load("user/42:chat #1")
    assert loaded is not None and [m.content for m in loaded.messages] == [m.content for m in state.messages]
    assert await theirs.list_checkpoints("user/42:chat #1") == [cid]
