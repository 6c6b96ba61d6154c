"""Issue 26's attacks, each a test, against the history file layout (``layout="history"``).

Issue 26 found the delta engine losing acknowledged saves wherever one thread's storage pointed
into another's, taking a flipped bit for a torn append, serving a log moved in from another
thread and writing through planted links. Here each of those attacks runs against
``FileCheckpointer(base_dir, layout="history")`` (history in ``.tulip_nb/history.sqlite3``, tulip's
envelope per thread as a projection; docs/history-model.md):

1. a fork saved while its source is deleted (12 runs, two processes);
2. a copy racing a delete (10 runs) and a prune (8 runs, with a compaction in the thread);
3. tulip-agents deleting the source thread (its ``delete`` is an ``rmtree``), after and during
   tulip_nb's saves, forks and copies;
4. one flipped bit in the newest row or entry: ``CheckpointCorrupt`` on an explicit load and on
   load-latest, never an older state, and ``verify_thread`` / ``tulip-nb verify`` report it;
5. a corrupt row in the latest's chain: later saves still succeed and load whole (decided below);
6. a row moved in from another thread is never served to its new thread;
7. links planted as the database files, the ``.tulip_nb`` directory, a thread directory, the
   projection's name and a temp file's name: nothing outside ``base_dir`` is written or truncated;
8. tulip reads the latest turn end tulip_nb wrote, and tulip's own turn is tulip_nb's newest.

Races run in real processes (``_history_attack_worker``), each with its own SQLite connection;
the parent checks every acknowledged save through a fresh instance. An attack that finds a bug is
``xfail(strict=True)`` with the bug named in its reason (tulip_nb's code is not changed here).
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import types
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.reliability import _history_attack_worker as worker
from tulip_nb._cli.verify import verify as cli_verify
from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import (
    BackendUnavailable,
    CheckpointCorrupt,
    CheckpointNotFound,
    TulipNBError,
)
from tulip_nb.memory.backends import FileCheckpointer, _history_dir
from tulip_nb.memory.backends._history_file import HistoryFileCheckpointer
from tulip_nb.memory.backends._sqlite_history import DB_DIR, DB_NAME
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.memory.retention import prune_plan

from .conftest import forkserver, kill, record_figure

try:  # tulip-agents, the interop peer (the tests that drive it are skipped without it)
    from tulip.core import messages as tulip_messages
    from tulip.core import state as tulip_state
    from tulip.memory.backends import file as tulip_file
except ImportError:  # pragma: no cover - installed with the dev extras
    tulip_file = tulip_state = tulip_messages = None  # type: ignore[assignment]
NEEDS_TULIP = pytest.mark.skipif(tulip_file is None, reason="tulip-agents (the interop peer) is not installed")

SRC = worker.SOURCE


# -- helpers --------------------------------------------------------------------------------------
def history(base: Path) -> HistoryFileCheckpointer:
    cp = FileCheckpointer(base, layout="history", fsync=False)
    assert isinstance(cp, HistoryFileCheckpointer)
    return cp


def db(base: Path) -> sqlite3.Connection:
    return sqlite3.connect(base / DB_DIR / DB_NAME, isolation_level=None)


async def build_thread(
    cp: HistoryFileCheckpointer,
    thread_id: str,
    turns: int,
    *,
    tag: str = "m",
    compact_at: int | None = None,
    last_source: str = "final",
) -> dict[str, bytes]:
    """Save ``turns`` turns (a mid-turn save, then the turn end); checkpoint id -> the state's JSON.

    The state's other fields grow too (a log in its metadata), as an agent's do. At turn
    ``compact_at`` the history is compacted: the messages so far become one summary.
    """
    state = AgentState(messages=[Message.system("sys")])
    saved: dict[str, bytes] = {}
    for i in range(turns):
        if i == compact_at:
            state.messages = [Message.system("sys"), Message.assistant(f"{tag} summary of turns 0-{i - 1}")]
        state.messages = [*state.messages, Message.user(f"{tag} q{i} " + "x" * 300)]
        state.metadata = {
            "turn": i,
            "log": [f"{tag} {j}" for j in range(i + 1)],
            "compacted": i >= (compact_at or turns),
        }
        saved[await cp.save(state, thread_id, metadata={"source": "iteration"})] = state.to_json_bytes()
        state.messages = [*state.messages, Message.assistant(f"{tag} a{i} marker-{tag}-{i}")]
        source = last_source if i == turns - 1 else "final"
        saved[await cp.save(state, thread_id, metadata={"source": source})] = state.to_json_bytes()
    return saved


async def loads_whole(cp: HistoryFileCheckpointer, thread_id: str, checkpoint_id: str, want: bytes) -> str | None:
    """None when the checkpoint loads with exactly the state ``want``; else what went wrong."""
    try:
        ckpt = await cp.load_checkpoint(thread_id, checkpoint_id)
    except Exception as e:
        return f"{thread_id}/{checkpoint_id}: {type(e).__name__}: {e}"
    if ckpt is None:
        return f"{thread_id}/{checkpoint_id}: missing"
    if ckpt.state.to_json_bytes() != want:
        return f"{thread_id}/{checkpoint_id}: loads a different state"
    return None


async def expect_corrupt(what: str, call: Callable[[], Awaitable[Any]]) -> None:
    """``call`` must raise CheckpointCorrupt: anything else (a state, None, another error) fails."""
    try:
        got = await call()
    except CheckpointCorrupt:
        return
    except Exception as e:
        raise AssertionError(f"{what}: raised {type(e).__name__}: {e}, not CheckpointCorrupt") from e
    served = getattr(got, "checkpoint_id", got)
    raise AssertionError(f"{what}: served {served!r} instead of raising CheckpointCorrupt")


async def verify_reports(cp: HistoryFileCheckpointer, thread_id: str, bad: set[str]) -> None:
    """``verify_thread`` and ``tulip-nb verify``'s check both name every checkpoint in ``bad``."""
    try:
        report = await verify_thread(cp, thread_id)
    except Exception as e:
        raise AssertionError(f"verify_thread raised {type(e).__name__}: {e} instead of reporting") from e
    assert not report.ok, f"verify_thread passed a corrupt thread: {report}"
    assert bad <= {v.checkpoint_id for v in report.failures}, str(report)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, problems = await cli_verify(cp, thread_id)
    except Exception as e:
        raise AssertionError(f"tulip-nb verify raised {type(e).__name__}: {e} instead of reporting") from e
    for cid in bad:
        assert any(cid in line for line in problems), (cid, problems)


def flip_bit(conn: sqlite3.Connection, table: str, column: str, key: str, value: Any, index: int, bit: int) -> None:
    """Flip one bit of one stored value (a BLOB stays a BLOB, TEXT stays TEXT, an INTEGER an INTEGER)."""
    (old,) = conn.execute(f"SELECT {column} FROM {table} WHERE {key} = ?", (value,)).fetchone()
    if isinstance(old, int):
        new: Any = old ^ (1 << bit)
    else:
        raw = bytearray(old.encode() if isinstance(old, str) else old)
        raw[index] ^= 1 << bit
        new = raw.decode() if isinstance(old, str) else bytes(raw)
    assert new != old
    conn.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (new, value))


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links not followed) and its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
    }


def run_race(roles: tuple[str, str], jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Two processes play ``roles`` over ``jobs``; run -> role -> (result, (start, end))."""
    ctx = forkserver()
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=worker.play, args=(role, jobs, barrier, out)) for role in roles]
    for p in procs:
        p.start()
    results: dict[int, dict[str, Any]] = {}
    try:
        for _ in range(len(jobs) * len(roles)):
            run, role, result, span = out.get(timeout=120)
            results.setdefault(run, {})[role] = (result, span)
        for p in procs:
            p.join(30)
            assert p.exitcode == 0, f"a racing process failed (exit {p.exitcode})"
    finally:
        for p in procs:
            kill(p)
    return results


def delays(run: int, first: str, second: str) -> dict[str, float]:
    """Land the two operations in different orders across runs (0-2 ms apart either way)."""
    step = (run // 3 % 3) * 0.0005 + 0.0005
    return {first: step if run % 3 == 0 else 0.0, second: step if run % 3 == 2 else 0.0}


def overlapped(spans: list[tuple[float, float]]) -> bool:
    (a0, a1), (b0, b1) = spans
    return a0 < b1 and b0 < a1


# -- 1. a fork saved while its source is deleted --------------------------------------------------
async def test_fork_saved_while_its_source_is_deleted_always_loads_whole(tmp_path: Path) -> None:
    runs = 12
    jobs: list[dict[str, Any]] = []
    for run in range(runs):
        base = tmp_path / f"run{run}"
        cp = history(base)
        await build_thread(cp, SRC, 8, tag=f"r{run}")
        await cp.close()
        jobs.append({"run": run, "base": str(base), "delay": delays(run, "fork", "delete")})
    results = run_race(("fork", "delete"), jobs)
    problems: list[str] = []
    for run in range(runs):
        (fork, _), (deleted, _) = results[run]["fork"], results[run]["delete"]
        if deleted != ("ok", True):
            problems.append(f"run {run}: the delete answered {deleted}")
        outcome = fork[1]
        if fork[0] != "ok" or outcome["errors"] or len(outcome["acked"]) != 2:
            problems.append(f"run {run}: a fork save was refused: {fork}")  # a fork needs nothing of its source
            continue
        fresh = history(Path(jobs[run]["base"]))
        for cid, want in outcome["acked"]:
            if (bad := await loads_whole(fresh, "fork", cid, want)) is not None:
                problems.append(f"run {run}: acknowledged fork save lost: {bad}")
        latest = await fresh.latest_checkpoint_id("fork")
        if latest != outcome["acked"][-1][0]:
            problems.append(f"run {run}: the fork's latest is {latest}, not its last acknowledged save")
        if await fresh.load(SRC) is not None:
            problems.append(f"run {run}: the deleted source still loads")
        if store := fresh.check_store():
            problems.append(f"run {run}: store: {store}")
        report = await verify_thread(fresh, "fork")
        if not report.ok:
            problems.append(f"run {run}: verify: {report}")
        await fresh.close()
    record_figure(
        "history_fork_vs_delete_overlapping_runs", sum(overlapped([s for _, s in r.values()]) for r in results.values())
    )
    assert not problems, "\n".join(problems)


# -- 2. a copy racing a delete, and a copy racing a prune -------------------------------------------
async def test_copy_racing_a_delete_every_acknowledged_checkpoint_loads(tmp_path: Path) -> None:
    runs = 10
    jobs: list[dict[str, Any]] = []
    saved: list[dict[str, bytes]] = []
    for run in range(runs):
        base = tmp_path / f"run{run}"
        cp = history(base)
        saved.append(await build_thread(cp, SRC, 6, tag=f"r{run}"))
        await cp.close()
        jobs.append({"run": run, "base": str(base), "delay": delays(run, "copy", "delete")})
    results = run_race(("copy", "delete"), jobs)
    problems: list[str] = []
    copied = 0
    for run in range(runs):
        (copy, _), (deleted, _) = results[run]["copy"], results[run]["delete"]
        fresh = history(Path(jobs[run]["base"]))
        if deleted != ("ok", True):
            problems.append(f"run {run}: the delete answered {deleted}")
        if copy == ("ok", True):
            copied += 1
            ids = await fresh.list_checkpoints("dst", None)
            if sorted(ids) != sorted(saved[run]):
                problems.append(f"run {run}: the copy holds {len(ids)} of the source's {len(saved[run])} checkpoints")
            for cid, want in saved[run].items():
                if (bad := await loads_whole(fresh, "dst", cid, want)) is not None:
                    problems.append(f"run {run}: acknowledged copy lost a checkpoint: {bad}")
            if mirror := fresh.check_mirror("dst"):
                problems.append(f"run {run}: tulip's envelope of the copy: {mirror}")
        elif copy[0] == "error" and copy[1] == "CheckpointNotFound":
            if await fresh.list_checkpoints("dst", None):
                problems.append(f"run {run}: a refused copy left checkpoints behind")
        else:
            problems.append(f"run {run}: the copy answered {copy}")
        if store := fresh.check_store():
            problems.append(f"run {run}: store: {store}")
        await fresh.close()
    record_figure("history_copy_vs_delete_copied", copied)
    record_figure(
        "history_copy_vs_delete_overlapping_runs", sum(overlapped([s for _, s in r.values()]) for r in results.values())
    )
    assert not problems, "\n".join(problems)


async def test_copy_racing_a_prune_every_acknowledged_checkpoint_loads(tmp_path: Path) -> None:
    runs = 8
    jobs: list[dict[str, Any]] = []
    saved: list[dict[str, bytes]] = []
    plans: list[tuple[str, set[str]]] = []
    for run in range(runs):
        base = tmp_path / f"run{run}"
        cp = history(base)
        saved.append(await build_thread(cp, SRC, 10, tag=f"r{run}", compact_at=5))
        role = "prune_turn_ends" if run % 2 == 0 else "prune_last"
        infos = await cp.list_checkpoint_infos(SRC, None)
        plan = prune_plan(infos) if role == "prune_turn_ends" else prune_plan(infos, 4, False)
        plans.append((role, set(plan.dropped)))
        await cp.close()
        jobs.append({"run": run, "base": str(base), "delay": delays(run, "copy", role)})
    results: dict[int, dict[str, Any]] = {}
    for role in ("prune_turn_ends", "prune_last"):
        results.update(run_race(("copy", role), [j for j, (r, _) in zip(jobs, plans, strict=True) if r == role]))
    record_figure(
        "history_copy_vs_prune_overlapping_runs", sum(overlapped([s for _, s in r.values()]) for r in results.values())
    )
    problems: list[str] = []
    for run in range(runs):
        role, dropped = plans[run]
        (copy, _), (pruned, _) = results[run]["copy"], results[run][role]
        all_ids = set(saved[run])
        if pruned != ("ok", len(dropped)):
            problems.append(f"run {run}: the prune answered {pruned}, planned {len(dropped)}")
        if copy != ("ok", True):
            problems.append(f"run {run}: the copy answered {copy}")
            continue
        fresh = history(Path(jobs[run]["base"]))
        ids = set(await fresh.list_checkpoints("dst", None))
        if ids not in (all_ids, all_ids - dropped):  # the source before the prune or after it
            problems.append(f"run {run}: the copy holds {len(ids)} checkpoints, a state the source never had")
        for cid in sorted(ids & all_ids):
            if (bad := await loads_whole(fresh, "dst", cid, saved[run][cid])) is not None:
                problems.append(f"run {run}: acknowledged copy lost a checkpoint: {bad}")
        for cid in sorted(all_ids - dropped):
            if (bad := await loads_whole(fresh, SRC, cid, saved[run][cid])) is not None:
                problems.append(f"run {run}: a checkpoint the prune kept is lost: {bad}")
        # the copy's own retention, then the source gone: the copy stands alone
        await fresh.prune("dst", keep_last=2, keep_turn_ends=False)
        await fresh.delete(SRC)
        for cid in await fresh.list_checkpoints("dst", None):
            if (bad := await loads_whole(fresh, "dst", cid, saved[run][cid])) is not None:
                problems.append(f"run {run}: after pruning the copy and deleting its source: {bad}")
        if store := fresh.check_store():
            problems.append(f"run {run}: store: {store}")
        await fresh.close()
    assert not problems, "\n".join(problems)


# -- 3. tulip deleting a source thread ------------------------------------------------------------------


@NEEDS_TULIP
async def test_tulip_rmtree_of_a_source_breaks_no_fork_or_copy(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    ours = history(base)
    saved = await build_thread(ours, SRC, 5)
    source = await ours.load_checkpoint(SRC)
    assert source is not None
    fork = await worker.fork_checkpoint(ours, source, "fork")
    assert not fork["errors"]
    assert await ours.copy_thread(SRC, "copy")
    assert sorted(os.listdir(base / SRC)) == [f"{list(saved)[-1]}.json"]  # the projection tulip reads

    theirs = tulip_file.FileCheckpointer(base_dir=str(base))
    assert await theirs.delete(SRC)  # tulip's delete of a thread: shutil.rmtree of its directory
    assert not (base / SRC).exists()

    fresh = history(base)
    problems = [await loads_whole(fresh, "fork", cid, want) for cid, want in fork["acked"]]
    problems += [await loads_whole(fresh, "copy", cid, want) for cid, want in saved.items()]
    assert [p for p in problems if p] == []
    assert await fresh.list_checkpoints("copy", None) == list(saved)[::-1]
    assert fresh.check_store() == []
    assert fresh.check_mirror("copy") == []
    copy_seen = await theirs.load("copy")  # tulip still reads the copy's latest turn end
    assert copy_seen is not None and copy_seen.messages[-1].content == source.state.messages[-1].content
    # documented (docs/history-model.md): tulip's rmtree removes only the projection; the history
    # keeps the source, whole, and re-projects it for tulip on the next touch
    assert await loads_whole(fresh, SRC, list(saved)[-1], list(saved.values())[-1]) is None
    assert fresh.check_mirror(SRC) == [] and (base / SRC / f"{list(saved)[-1]}.json").is_file()
    assert (await verify_thread(fresh, "fork")).ok and (await verify_thread(fresh, "copy")).ok


@NEEDS_TULIP
async def test_tulip_rmtree_racing_saves_forks_and_copies(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    seed = history(base)
    seeded = await build_thread(seed, SRC, 1)
    await seed.close()
    ctx = forkserver()
    go, stop, out = ctx.Barrier(3), ctx.Event(), ctx.Queue()  # all three start together
    procs = [
        ctx.Process(target=worker.save_turns, args=(str(base), 40, go, out)),
        ctx.Process(target=worker.fork_and_copy, args=(str(base), 6, go, out)),
        ctx.Process(target=worker.tulip_rmtree_loop, args=(str(base), go, stop, out)),
    ]
    for p in procs:
        p.start()
    got: dict[str, Any] = {}
    try:
        for _ in range(2):
            msg = out.get(timeout=120)
            got[msg[0]] = msg[1:]
        stop.set()
        msg = out.get(timeout=60)
        got[msg[0]] = msg[1:]
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    finally:
        stop.set()
        for p in procs:
            kill(p)
    (acked, save_errors), (forks, copies), (removed,) = got["saver"], got["forker"], got["tulip"]
    assert removed > 0, "tulip never deleted the source directory: the attack did not run"
    fresh = history(base)
    by_cid = {**seeded, **dict(acked)}
    problems = [await loads_whole(fresh, SRC, cid, want) for cid, want in by_cid.items()]
    for fork in forks:
        problems += [await loads_whole(fresh, fork["name"], cid, want) for cid, want in fork["acked"]]
    for name, result in copies:
        if result != ("ok", True):
            continue  # refused (the tulip rmtree window above): nothing acknowledged to check
        for cid in await fresh.list_checkpoints(name, None):  # a copy holds source checkpoints only
            if cid not in by_cid:  # committed by a save that reported failure (the xfail below)
                source = await fresh.load_checkpoint(SRC, cid)
                by_cid[cid] = source.state.to_json_bytes() if source is not None else b"not a source checkpoint"
            problems.append(await loads_whole(fresh, name, cid, by_cid[cid]))
    assert [p for p in problems if p] == []
    assert fresh.check_store() == []
    for tid in await fresh.list_threads(None):
        assert await fresh.load(tid) is not None
        assert fresh.check_mirror(tid) == [], tid
    # a save that said it failed is nonetheless in the history (the xfail below reproduces it)
    record_figure(
        "history_rmtree_saves_refused_but_committed", len(await fresh.list_checkpoints(SRC, None)) - 2 - len(acked)
    )
    record_figure("history_rmtree_removals", removed)
    errors = [*save_errors, *(e for f in forks for e in f["errors"]), *(r[1:] for _, r in copies if r[0] == "error")]
    record_figure("history_rmtree_unclear_errors", sum(e[0] != "BackendUnavailable" for e in errors))


@pytest.mark.parametrize("window", ["after-mkdir", "before-rename"])
async def test_a_committed_save_is_not_reported_failed_when_tulip_removes_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    base = tmp_path / "threads"
    cp = history(base)
    await build_thread(cp, SRC, 2)
    before = await cp.list_checkpoints(SRC, None)
    real_write_all, real_mkdir = getattr(_history_dir, "write_all"), os.mkdir  # noqa: B009 (not re-exported)

    def rmtree_before_rename(fd: int, parts: Any) -> None:  # tulip's delete: shutil.rmtree
        shutil.rmtree(base / SRC, ignore_errors=True)
        real_write_all(fd, parts)

    def rmtree_after_mkdir(path: Any, mode: int = 0o777) -> None:
        real_mkdir(path, mode)
        shutil.rmtree(path, ignore_errors=True)

    if window == "before-rename":
        monkeypatch.setattr(_history_dir, "write_all", rmtree_before_rename)
    else:  # the module's view of os: mkdir as it is, and tulip deleting right after it
        monkeypatch.setattr(_history_dir, "os", types.SimpleNamespace(**{**vars(os), "mkdir": rmtree_after_mkdir}))
    shutil.rmtree(base / SRC)  # (a directory that exists is never made: start from tulip's delete)
    state = AgentState(messages=[Message.user("one more turn")])
    raised: Exception | None = None
    try:  # the envelope fails after the commit: a warning (it is repaired), never a failed save
        with pytest.warns(RuntimeWarning, match="could not be written"):
            cid = await cp.save(state, SRC, metadata={"source": "final"})
    except Exception as e:
        raised = e
    monkeypatch.undo()
    after = await history(base).list_checkpoints(SRC, None)
    if raised is not None:
        assert isinstance(raised, TulipNBError), f"save raised a bare {type(raised).__name__}: {raised!r}"
        assert after == before, f"save() raised {raised!r}, yet its checkpoint was committed"
    else:
        assert after[0] == cid


# -- 4. one flipped bit in the newest row or entry --------------------------------------------------
def _head(conn: sqlite3.Connection, cid: str) -> int:
    return int(conn.execute("SELECT head FROM checkpoints WHERE cid = ?", (cid,)).fetchone()[0])


FLIPS: dict[str, Callable[[sqlite3.Connection, str], None]] = {
    "entry": lambda c, cid: flip_bit(c, "entries", "data", "rowid", _head(c, cid), 40, 2),
    "metadata": lambda c, cid: flip_bit(c, "checkpoints", "metadata", "cid", cid, 12, 0),
    "metadata-json": lambda c, cid: flip_bit(c, "checkpoints", "metadata", "cid", cid, 0, 0),
    "rest": lambda c, cid: flip_bit(c, "checkpoints", "rest", "cid", cid, -3, 0),
    "digest": lambda c, cid: flip_bit(c, "checkpoints", "digest", "cid", cid, 5, 3),
    "created_at": lambda c, cid: flip_bit(c, "checkpoints", "created_at", "cid", cid, 22, 0),
    "n": lambda c, cid: flip_bit(c, "checkpoints", "n", "cid", cid, 0, 1),
    "head": lambda c, cid: flip_bit(c, "checkpoints", "head", "cid", cid, 0, 1),
}


@pytest.mark.parametrize("source", ["iteration", "final"])
@pytest.mark.parametrize("where", list(FLIPS))
async def test_a_flipped_bit_in_the_newest_row_is_corrupt_never_an_older_state(
    tmp_path: Path, where: str, source: str
) -> None:
    """``source``: the newest save is a mid-turn one (the delta engine took its damage for a torn
    append) or a turn end (whose tulip envelope, intact, must not be served instead)."""
    cp = history(tmp_path)
    saved = await build_thread(cp, "t", 3, last_source=source)
    ids = list(saved)
    await cp.close()
    with db(tmp_path) as conn:
        FLIPS[where](conn, ids[-1])
    fresh = history(tmp_path)
    try:  # a listing first (the delta engine served a damaged log after one)
        await fresh.list_checkpoint_infos("t", None)
    except Exception as e:
        raise AssertionError(f"listing the thread raised {type(e).__name__}: {e}") from e
    await expect_corrupt("explicit load", lambda: fresh.load_checkpoint("t", ids[-1]))
    await expect_corrupt("load latest", lambda: fresh.load_checkpoint("t"))
    await expect_corrupt("load latest, state", lambda: fresh.load("t"))
    assert await loads_whole(fresh, "t", ids[0], saved[ids[0]]) is None  # the damage stays where it is
    await verify_reports(fresh, "t", {ids[-1]})


async def test_a_flipped_bit_in_the_database_file_is_corrupt(tmp_path: Path) -> None:
    """The same, by editing the SQLite file itself: one bit of the newest message's bytes on disk."""
    cp = history(tmp_path)
    ids = list(await build_thread(cp, "t", 3, tag="disk", last_source="iteration"))
    await cp.close()
    with db(tmp_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = tmp_path / DB_DIR / DB_NAME
    data = bytearray(path.read_bytes())
    marker = b"marker-disk-2"
    assert data.count(marker) == 1, "the newest message should be stored once"
    data[data.index(marker) + len(marker) - 1] ^= 0x01
    path.write_bytes(bytes(data))
    fresh = history(tmp_path)
    await expect_corrupt("explicit load", lambda: fresh.load_checkpoint("t", ids[-1]))
    await expect_corrupt("load latest", lambda: fresh.load_checkpoint("t"))
    await verify_reports(fresh, "t", {ids[-1]})


def test_a_flipped_parent_bit_that_makes_a_cycle_is_corrupt_not_a_hang(tmp_path: Path) -> None:
    import asyncio

    async def build() -> str:
        cp = history(tmp_path)
        state = AgentState(messages=[Message.system("sys")])
        for i in range(4):  # 9 messages: entry rowids 1..9, the head's parent is 8 (8 ^ 1 == 9)
            state.messages = [*state.messages, Message.user(f"q{i}"), Message.assistant(f"a{i}")]
            cid = await cp.save(state, "t", metadata={"source": "iteration"})
        await cp.close()
        return cid

    cid = asyncio.run(build())
    with db(tmp_path) as conn:
        head = _head(conn, cid)
        (parent,) = conn.execute("SELECT parent FROM entries WHERE rowid = ?", (head,)).fetchone()
        assert parent ^ 1 == head, (parent, head)
        flip_bit(conn, "entries", "parent", "rowid", head, 0, 0)
    child = textwrap.dedent(
        f"""
        import asyncio, resource
        from tulip_nb.core.errors import CheckpointCorrupt
        from tulip_nb.memory.backends import FileCheckpointer
        pages = int(open("/proc/self/statm").read().split()[0])
        cap = pages * resource.getpagesize() + (512 << 20)  # what the import took, and 512 MB
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        try:
            asyncio.run(FileCheckpointer({str(tmp_path)!r}, layout="history").load("t"))
            print("served")
        except CheckpointCorrupt:
            print("CheckpointCorrupt")
        except BaseException as e:
            print(type(e).__name__)
        """
    )
    try:
        done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("loading the thread did not finish in 30 s") from None
    assert done.stdout.strip() == "CheckpointCorrupt", (done.stdout, done.stderr[-500:])


ORDERING = {
    "at_us": "the newest row's at_us (the sort key) made older: load-latest serves the previous checkpoint",
    "turn_end": "the newest turn end's turn_end flag cleared: tulip is re-served the previous turn end",
}


AT_US_LIMIT = pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason=(
        "known limit: at_us (the order key) is derived from created_at and kept beside it; the loaded "
        "row's own order columns are checked on load and check_store (`tulip-nb verify`) reports any "
        "row whose at_us or turn_end no longer matches, but one flipped bit that makes the newest row "
        "sort lower still makes load-latest serve the previous checkpoint"
    ),
)


@NEEDS_TULIP
@pytest.mark.parametrize("column", [pytest.param(c, marks=AT_US_LIMIT) if c == "at_us" else c for c in ORDERING])
async def test_a_flipped_bit_in_a_rows_ordering_columns_serves_no_older_state(tmp_path: Path, column: str) -> None:
    base = tmp_path / "threads"
    cp = history(base)
    ids = list(await build_thread(cp, "t", 3))
    newest = await cp.load_checkpoint("t")
    assert newest is not None and newest.checkpoint_id == ids[-1]
    await cp.close()
    with db(base) as conn:
        if column == "at_us":
            (at,) = conn.execute("SELECT at_us FROM checkpoints WHERE cid = ?", (ids[-1],)).fetchone()
            bit = next(b for b in range(36, 50) if at >> b & 1)  # a set bit worth hours: cleared, it is older
            flip_bit(conn, "checkpoints", "at_us", "cid", ids[-1], 0, bit)
        else:
            flip_bit(conn, "checkpoints", "turn_end", "cid", ids[-1], 0, 0)
    fresh = history(base)
    try:
        latest = await fresh.load_checkpoint("t")
    except CheckpointCorrupt:
        latest = None
    assert latest is None or latest.checkpoint_id == ids[-1], ORDERING[column]
    seen = await tulip_file.FileCheckpointer(base_dir=str(base)).load("t")
    caught = not (await verify_thread(fresh, "t")).ok or bool(fresh.check_mirror("t"))
    assert caught or (seen is not None and seen.messages[-1].content == newest.state.messages[-1].content), ORDERING[
        column
    ]


# -- 5. a corrupt row in the latest's chain: later saves succeed, and load whole ------------------------
# Decided: a later save must SUCCEED, and its checkpoint must load whole. Each row names its whole
# state (a head entry for the messages, the fields whole or as a patch the store can always write
# whole instead), and the caller hands the save the whole new state: nothing of a damaged older
# row is needed to store it. Failing (the delta engine's "every later save raises") would stop
# every agent on the thread until someone repairs the store by hand, for damage that verify already
# reports; acknowledging a save that then cannot be loaded would lose it. So neither.
CHAIN_DAMAGE: dict[str, Callable[[sqlite3.Connection, list[str]], None]] = {
    "latest-rest": lambda c, ids: flip_bit(c, "checkpoints", "rest", "cid", ids[-1], -3, 0),
    "parent-rest": lambda c, ids: flip_bit(c, "checkpoints", "rest", "cid", ids[-2], -3, 0),
    "latest-digest": lambda c, ids: flip_bit(c, "checkpoints", "digest", "cid", ids[-1], 5, 3),
    "latest-metadata": lambda c, ids: flip_bit(c, "checkpoints", "metadata", "cid", ids[-1], 12, 0),
    "latest-metadata-json": lambda c, ids: flip_bit(c, "checkpoints", "metadata", "cid", ids[-1], 0, 0),
    "latest-created_at": lambda c, ids: flip_bit(c, "checkpoints", "created_at", "cid", ids[-1], 0, 6),
    "shared-entry": lambda c, ids: flip_bit(c, "entries", "data", "rowid", 4, 30, 1),
}


def _chain_case(name: str, instance: str) -> Any:
    return pytest.param(name, instance, id=f"{name}-{instance}")


@pytest.mark.parametrize(("damage", "instance"), [_chain_case(n, i) for n in CHAIN_DAMAGE for i in ("same", "fresh")])
async def test_a_corrupt_row_in_the_latests_chain_does_not_stop_later_saves(
    tmp_path: Path, damage: str, instance: str
) -> None:
    """``instance``: the writer that saved the thread goes on (its caches warm), or a fresh one."""
    cp = history(tmp_path)
    saved = await build_thread(cp, "t", 4)
    ids = list(saved)
    with db(tmp_path) as conn:
        CHAIN_DAMAGE[damage](conn, ids)
    writer = cp if instance == "same" else history(tmp_path)
    state = AgentState.model_validate_json(saved[ids[-1]])
    for i in range(2):
        state.messages = [*state.messages, Message.user(f"after the damage {i}")]
        state.metadata = {**state.metadata, "log": [*state.metadata["log"], f"after {i}"]}
        try:
            cid = await writer.save(state, "t", metadata={"source": "final"})
        except Exception as e:
            raise AssertionError(f"save {i} after the damage raised {type(e).__name__}: {e}") from e
        want = state.to_json_bytes()
        reader = history(tmp_path)
        assert await loads_whole(reader, "t", cid, want) is None, await loads_whole(reader, "t", cid, want)
        latest = await reader.load_checkpoint("t")
        assert latest is not None and latest.checkpoint_id == cid


# -- 6. a row moved in from another thread ---------------------------------------------------------------
async def _alice_and_bob(base: Path, *, alice_first: bool) -> tuple[list[str], list[str]]:
    cp = history(base)
    order = ("alice", "bob") if alice_first else ("bob", "alice")
    made = {tid: list(await build_thread(cp, tid, 3, tag=tid.upper())) for tid in order}
    await cp.close()
    return made["alice"], made["bob"]


def _no_alice(state: AgentState | None) -> bool:
    return state is None or all("ALICE" not in (m.content or "") for m in state.messages)


async def _never_alice(what: str, call: Callable[[], Awaitable[Any]]) -> None:
    """``call`` refuses (CheckpointCorrupt) or answers with nothing of alice's conversation."""
    try:
        got = await call()
    except CheckpointCorrupt:
        return
    state = getattr(got, "state", got)
    if isinstance(state, AgentState):
        assert _no_alice(state), f"{what}: bob is served alice's checkpoint"
    else:
        assert "ALICE" not in repr(got), f"{what}: {got!r}"


@NEEDS_TULIP
async def test_a_row_moved_in_from_another_thread_is_never_served(tmp_path: Path) -> None:
    alice, bob = await _alice_and_bob(tmp_path, alice_first=False)  # alice's rows are the newest
    with db(tmp_path) as conn:
        conn.execute("UPDATE checkpoints SET thread = 'bob' WHERE thread = 'alice'")
    fresh = history(tmp_path)
    for _ in range(2):  # and again after every listing and load has run once
        await _never_alice("listing", lambda: fresh.list_checkpoint_infos("bob", None))
        await _never_alice("threads", lambda: fresh.list_threads())
        await expect_corrupt("bob's latest", lambda: fresh.load_checkpoint("bob"))
        await expect_corrupt("bob's latest state", lambda: fresh.load("bob"))
        for cid in alice:
            await expect_corrupt(f"bob loading alice's {cid}", functools.partial(fresh.load_checkpoint, "bob", cid))
        for cid in bob:
            await _never_alice(f"bob's own {cid}", functools.partial(fresh.load_checkpoint, "bob", cid))
        await _never_alice("search", lambda: fresh.search("ALICE"))
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    await _never_alice("tulip reading bob", lambda: theirs.load("bob"))


@pytest.mark.parametrize("damage", ["moved-in", "flipped-envelope-lost"])
async def test_a_damaged_newest_turn_end_leaves_the_rest_of_the_thread_usable(tmp_path: Path, damage: str) -> None:
    if damage == "moved-in":
        alice, bob = await _alice_and_bob(tmp_path, alice_first=False)
        with db(tmp_path) as conn:
            conn.execute("UPDATE checkpoints SET thread = 'bob' WHERE thread = 'alice'")
        thread, bad, good = "bob", set(alice), bob
    else:
        cp = history(tmp_path)
        ids = list(await build_thread(cp, "bob", 3))
        await cp.close()
        with db(tmp_path) as conn:
            FLIPS["rest"](conn, ids[-1])
        (tmp_path / "bob" / f"{ids[-1]}.json").unlink()  # a crash lost the (unsynced) envelope
        thread, bad, good = "bob", {ids[-1]}, ids[:-1]
    fresh = history(tmp_path)
    for cid in good:
        try:
            got = await fresh.load_checkpoint(thread, cid)
        except Exception as e:
            raise AssertionError(f"bob's own checkpoint {cid}: {type(e).__name__}: {e}") from e
        assert got is not None and _no_alice(got.state)
    await verify_reports(fresh, thread, bad)
    try:
        await fresh.save(AgentState(messages=[Message.user("bob goes on")]), thread, metadata={"source": "final"})
    except Exception as e:
        raise AssertionError(f"a save after the damage: {type(e).__name__}: {e}") from e


@pytest.mark.parametrize("after", ["copy", "prune"])
async def test_a_moved_in_row_stays_refused_after_a_copy_or_a_prune(tmp_path: Path, after: str) -> None:
    alice, _ = await _alice_and_bob(tmp_path, alice_first=True)  # moved rows lurk under bob's newest
    with db(tmp_path) as conn:
        conn.execute("UPDATE checkpoints SET thread = 'bob' WHERE thread = 'alice' AND cid IN (?, ?)", alice[:2])
    fresh = history(tmp_path)
    for cid in alice[:2]:
        await expect_corrupt(f"bob loading alice's {cid}", functools.partial(fresh.load_checkpoint, "bob", cid))
    if after == "copy":
        assert await fresh.copy_thread("bob", "carol")
        reader = "carol"
    else:  # drop alice's first row: the relink rewrites the second's parent
        kept = len(await fresh.list_checkpoints("bob", None)) - 1
        assert await fresh.prune("bob", keep_last=kept, keep_turn_ends=False) == 1
        reader = "bob"
    for cid in await fresh.list_checkpoints(reader, None):
        try:
            state = await fresh.load(reader, cid)
        except CheckpointCorrupt:
            continue
        assert _no_alice(state), f"{reader} is served alice's checkpoint {cid}"
    assert not (await verify_thread(fresh, reader)).ok


# -- 7. confinement: planted links ----------------------------------------------------------------------
async def _outside_store(root: Path) -> Path:
    """A real history store outside base_dir (what a followed link would write into)."""
    cp = history(root)
    await build_thread(cp, "theirs", 2, tag="outside")
    await cp.close()
    return root


async def _attempts(cp: HistoryFileCheckpointer, thread_id: str) -> list[str]:
    """Save, load, list, copy, prune and delete; what each did: ``name: ok <what it returned>``,
    or ``name: <error type>: <message>`` (an unclear error fails the test here)."""
    calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("save", lambda: cp.save(AgentState(messages=[Message.user("in")]), thread_id, metadata={"source": "final"})),
        ("load", lambda: cp.load(thread_id)),
        ("list_threads", lambda: cp.list_threads()),
        ("copy", lambda: cp.copy_thread(thread_id, f"{thread_id}-copy")),
        ("prune", lambda: cp.prune(thread_id, keep_last=1)),
        ("delete", lambda: cp.delete(thread_id)),
    ]
    out = []
    for name, call in calls:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a skipped link is warned about
                got = await call()
            out.append(f"{name}: ok {'a state' if isinstance(got, AgentState) else got!r}")
        except (TulipNBError, CheckpointNotFound) as e:
            out.append(f"{name}: {type(e).__name__}: {e}")
        except Exception as e:  # an unclear error is a failure of its own
            raise AssertionError(f"{name} raised {type(e).__name__}: {e}, not a clear error") from e
    return out


@pytest.mark.parametrize("existing", [False, True], ids=["new-store", "existing-store"])
@pytest.mark.parametrize("link", ["symlink", "dangling-symlink", "hardlink"])
@pytest.mark.parametrize("name", [DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal"])
async def test_links_planted_as_the_database_files_write_nothing_outside(
    tmp_path: Path, name: str, link: str, existing: bool
) -> None:
    outside = await _outside_store(tmp_path / "outside")
    target = outside / DB_DIR / DB_NAME if name == DB_NAME else outside / "precious.bin"
    if target.name == "precious.bin":
        target.write_bytes(b"precious\n" * 1000)
    before = tree(outside)
    base = tmp_path / "threads"
    if existing:
        cp = history(base)
        await build_thread(cp, "t", 1)
        await cp.close()
    (base / DB_DIR).mkdir(parents=True, exist_ok=True)
    planted = base / DB_DIR / name
    planted.unlink(missing_ok=True)
    if link == "hardlink":
        os.link(target, planted)
    else:
        planted.symlink_to(target if link == "symlink" else outside / "never-created")
    did = await _attempts(history(base), "t")
    assert tree(outside) == before, f"a file outside base_dir changed: {did}"
    assert not (outside / "never-created").exists()
    assert did[0].startswith("save: BackendUnavailable") and str(planted) in did[0], did  # refused, named
    # the rest: refused, or (reads of a store whose database is not there) nothing to read
    allowed = ("BackendUnavailable", "CheckpointNotFound", "ok None", "ok []", "ok False", "ok 0")
    assert all(any(a in line for a in allowed) for line in did), did


@pytest.mark.parametrize("plant", ["symlink-to-a-store", "dangling-symlink", "file"])
async def test_the_tulip_nb_directory_planted_as_a_link_writes_nothing_outside(tmp_path: Path, plant: str) -> None:
    outside = await _outside_store(tmp_path / "outside")
    before = tree(outside)
    base = tmp_path / "threads"
    base.mkdir()
    if plant == "symlink-to-a-store":
        (base / DB_DIR).symlink_to(outside / DB_DIR, target_is_directory=True)
    elif plant == "dangling-symlink":
        (base / DB_DIR).symlink_to(outside / "never-created", target_is_directory=True)
    else:
        (base / DB_DIR).write_bytes(b"not a directory")
    did = await _attempts(history(base), "theirs")
    assert tree(outside) == before, did
    assert not (outside / "never-created").exists()
    assert did[0].startswith("save: BackendUnavailable"), did
    assert "load: ok a state" not in did, f"read another store through the link: {did}"


@NEEDS_TULIP
async def test_a_thread_directory_planted_as_a_link_writes_nothing_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    theirs = tulip_file.FileCheckpointer(base_dir=str(outside))
    await theirs.save(tulip_state.AgentState(messages=[tulip_messages.Message.user("outside")]), "t")
    (outside / "t" / "precious.bin").write_bytes(b"precious")
    before = tree(outside)
    base = tmp_path / "threads"
    cp = history(base)
    await build_thread(cp, "t", 2)
    await build_thread(cp, "u", 1)
    shutil.rmtree(base / "t")
    (base / "t").symlink_to(outside / "t", target_is_directory=True)  # the thread's directory, replaced
    (base / "u-copy").symlink_to(outside / "t", target_is_directory=True)  # and a copy's destination
    fresh = history(base)
    did = await _attempts(fresh, "t")
    did += await _attempts(fresh, "u")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for call in (fresh.vacuum(0), fresh.search("outside")):
            try:
                await call
            except TulipNBError as e:
                did.append(f"{type(e).__name__}: {e}")
    assert tree(outside) == before, did
    assert did[0].startswith("save: InvalidThreadId"), did
    assert any(line.startswith("copy: InvalidThreadId") for line in did[6:]), did  # u -> the linked u-copy


@NEEDS_TULIP
@pytest.mark.parametrize("link", ["symlink", "hardlink"])
async def test_links_planted_as_the_projection_write_nothing_outside(tmp_path: Path, link: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "precious.json"
    precious.write_bytes(b'{"checkpoint_id": "x", "precious": true}')
    before = tree(outside)
    base = tmp_path / "threads"
    cp = history(base)
    saved = await build_thread(cp, "t", 3)
    ids = list(saved)

    def plant(path: Path) -> None:
        path.unlink(missing_ok=True)
        if link == "hardlink":
            os.link(precious, path)
        else:
            path.symlink_to(precious)

    plant(base / "t" / f"{ids[-1]}.json")  # the current projection, replaced by a link
    plant(base / "t" / "planned.json")  # the name the next projection takes
    (base / "t-copy").mkdir()
    plant(base / "t-copy" / f"{ids[-1]}.json")  # the copy's projection
    fresh = history(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # each skipped link is warned about
        assert await loads_whole(fresh, "t", ids[-1], saved[ids[-1]]) is None
        await fresh.save(AgentState(messages=[Message.user("next")]), "t", "planned", {"source": "final"})
        assert tree(outside) == before
        await fresh.delete("t", "planned")  # the projection goes back to the previous turn end
        assert await fresh.prune("t") == 3
        assert await fresh.copy_thread("t", "t-copy")
        assert fresh.check_mirror("t-copy") == []
        seen = await tulip_file.FileCheckpointer(base_dir=str(base)).load("t-copy")
        assert seen is not None and seen.messages[-1].content == "m a2 marker-m-2"
        assert await fresh.delete("t") and await fresh.delete("t-copy")
    assert tree(outside) == before, "a planted link was written through"
    assert os.stat(precious).st_nlink == 1  # every planted name was replaced or removed, never the file
    assert not [p for p in base.rglob("*") if p.is_symlink()]


async def test_links_planted_as_the_temp_file_name_write_nothing_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The envelope's temp name is random; here it is made predictable and a link planted there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "precious.bin"
    precious.write_bytes(b"precious\n" * 100)
    before = tree(outside)
    base = tmp_path / "threads"
    cp = history(base)
    await build_thread(cp, "t", 1)
    fixed = types.SimpleNamespace(hex="0123456789abcdef0123456789abcdef")
    monkeypatch.setattr(_history_dir, "uuid", types.SimpleNamespace(uuid4=lambda: fixed))
    outcomes = []
    for link in ("symlink", "hardlink", "dangling-symlink"):
        cid = f"c-{link}"
        tmp = base / "t" / f".{cid}.json.{fixed.hex}.tmp"
        if link == "hardlink":
            os.link(precious, tmp)
        else:
            tmp.symlink_to(precious if link == "symlink" else outside / "never-created")
        try:
            with warnings.catch_warnings(record=True) as seen:  # the envelope refused after the commit
                warnings.simplefilter("always")
                await cp.save(AgentState(messages=[Message.user(link)]), "t", cid, {"source": "final"})
            outcomes.append(f"{link}: ok" + "".join(f" (warned: {w.message})" for w in seen))
        except BackendUnavailable as e:  # refused: O_EXCL | O_NOFOLLOW will not open the planted name
            outcomes.append(f"{link}: {e}")
        tmp.unlink(missing_ok=True)  # (a refused write may remove the planted name: never its target)
        assert tree(outside) == before, outcomes
        assert not (outside / "never-created").exists()
    assert os.stat(precious).st_nlink == 1
    monkeypatch.undo()
    fresh = history(base)  # whatever the planted names did to the envelope, it is repaired
    assert await fresh.load("t") is not None and fresh.check_mirror("t") == []


# -- 8. tulip reads what it should, both ways ---------------------------------------------------------------
@NEEDS_TULIP
async def test_tulip_reads_the_latest_turn_end_and_its_own_turn_becomes_the_newest(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    ours = history(base)
    thread = "user/42:chat #1"
    saved = await build_thread(ours, thread, 3)
    last_turn_end = list(saved)[-1]
    running = AgentState.model_validate_json(saved[last_turn_end])
    running.messages = [*running.messages, Message.user("a turn still running")]
    await ours.save(running, thread, metadata={"source": "iteration"})  # tulip must not see this one

    theirs = tulip_file.FileCheckpointer(base_dir=str(base))
    assert await theirs.list_checkpoints(thread) == [last_turn_end]
    seen = await theirs.load(thread)
    assert seen is not None
    want = tulip_state.AgentState.model_validate_json(saved[last_turn_end])
    assert seen.model_dump(mode="json") == want.model_dump(mode="json")  # every field tulip knows, intact

    seen = seen.model_copy(
        update={
            "messages": (
                *seen.messages,
                tulip_messages.Message.user("tulip asks"),
                tulip_messages.Message.assistant("tulip answers"),
            )
        }
    )
    tulip_cid = await theirs.save(seen, thread, metadata={"source": "final", "by": "tulip"})
    fresh = history(base)
    latest = await fresh.load_checkpoint(thread)
    assert latest is not None and latest.checkpoint_id == tulip_cid
    assert [m.content for m in latest.state.messages[-2:]] == ["tulip asks", "tulip answers"]
    assert latest.metadata["by"] == "tulip"
    assert (await fresh.list_checkpoints(thread))[0] == tulip_cid

    state = latest.state.model_copy(deep=True)
    state.messages = [*state.messages, Message.user("ours again")]
    ours_next = await fresh.save(state, thread, metadata={"source": "final"})
    infos = await fresh.list_checkpoint_infos(thread)
    assert infos[0].checkpoint_id == ours_next and infos[0].parent_checkpoint_id == tulip_cid
    assert (await theirs.list_checkpoints(thread))[:2] == [ours_next, tulip_cid]
    back = await theirs.load(thread)
    assert back is not None and back.messages[-1].content == "ours again"
    assert fresh.check_mirror(thread) == [] and fresh.check_store() == []
    assert (await verify_thread(fresh, thread)).ok


@NEEDS_TULIP
async def test_after_a_prune_tulip_reads_the_latest_turn_ends_current_save_metadata(tmp_path: Path) -> None:
    base = tmp_path / "threads"
    cp = history(base)
    await build_thread(cp, "t", 3)  # the newest turn end's parent is a mid-turn save: pruned below
    assert await cp.prune("t") == 3
    ours = await cp.get_metadata("t")
    rows = await tulip_file.FileCheckpointer(base_dir=str(base)).list_with_metadata()
    assert [r["metadata"] for r in rows if r["thread_id"] == "t"] == [ours], "tulip reads stale save metadata"
    assert history(base).check_mirror("t") == []


@pytest.mark.parametrize(("field", "said"), [("created_at", "created_at"), ("metadata", "save metadata")])
async def test_verify_reports_a_tulip_envelope_whose_save_metadata_or_created_at_differs(
    tmp_path: Path, field: str, said: str
) -> None:
    """tulip reads both from the envelope; the delta engine's verify checked neither."""
    base = tmp_path / "threads"
    cp = history(base)
    ids = list(await build_thread(cp, "t", 2))
    await cp.close()
    path = base / "t" / f"{ids[-1]}.json"
    envelope = orjson.loads(path.read_bytes())
    if field == "created_at":
        envelope["created_at"] = "2001-01-01T00:00:00+00:00"
    else:
        envelope["metadata"] = {**envelope["metadata"], "source": "edited"}
    path.write_bytes(orjson.dumps(envelope))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, problems = await cli_verify(history(base), "t")
    assert any(ids[-1] in line and said in line for line in problems), problems
