"""Convert a file store written before the history model into it, every checkpoint verified.

``tulip-nb convert PATH [THREAD ...]`` (:func:`convert_to_history`): a store the previous
release wrote (its ``delta`` layout: a log per thread beside one tulip envelope; its ``tulip``
layout: one envelope per checkpoint; and tulip-agents' own envelopes) moves into the history
layout (``FileCheckpointer(base_dir)``) on the same ``base_dir``, in two phases:

1. *write and verify*, thread by thread: every checkpoint is read with the read-only reader of
   the old layout (:mod:`._legacy_delta`: logs, forks that point into other threads' logs,
   envelopes, and what a crash left behind, read as the old engine finished it), written with
   ``put_checkpoint``, loaded back and compared (checkpoint id, state JSON bytes, save metadata,
   ``created_at``). A checkpoint the history holds already is compared, not written again.
   No old file is removed; one is rewritten: the history's projection of the thread's latest
   turn end replaces the old envelope of that checkpoint (the delta layout's mirror, or the tulip
   layout's envelope), with the same checkpoint in it.
2. *remove the old files*, only once every requested thread made it: per thread its log, the
   tulip_nb envelopes now held as rows (the delta layout's mirror, the tulip layout's envelopes),
   then, when no old data is left in the directory, its ``.tulip_nb_index``, ``.tulip_nb_forks``,
   ``.lock``, dead writers' temp files, tombstones and copy staging directories; then the
   tombstones and dead copy staging directories in ``base_dir``. Forks and copies point into their
   source's log, so a thread's log goes only after every log that uses it as a base (dependents
   first), and a log that a thread not converted in this run still uses stays, with its thread's
   other old files (the thread is reported ``pending``).

What is not converted, and why:

- **tulip-agents' own envelopes** (no tulip_nb mark: no ``tulip_nb_messages`` in the save
  metadata, no :data:`~tulip_nb.core.keys.MIRROR_KEY`) stay as they are. The history layout reads
  them as checkpoints of their thread (``docs/history-model.md``); left as files, tulip keeps
  listing and loading every checkpoint it wrote, which it could not once they were rows (tulip
  sees only the projection, the latest turn end). Each is loaded through the history layout and
  compared like a row.
- **Envelope extras** (top-level keys beyond tulip's five, :attr:`Checkpoint.extra`): the history
  layout stores state, save metadata and ``created_at`` and no envelope extras, so a thread with
  one on a checkpoint that would become a row is **refused** (status ``refused``, nothing of it
  written, its old files kept), never converted without them. The marks of the layouts
  themselves (``MIRROR_KEY``, the history's projection mark) carry no data and are not extras.

Every step is re-runnable: a conversion killed at any point leaves each thread whole in the old
layout (phase 1 removes nothing) or in the history layout (phase 2 removes only what the history
holds, verified, forks before their sources), and running it again finishes. Old-release writers
must be stopped while it runs: the conversion takes each old thread's ``.lock`` (the old
release's ``flock``) while it reads and while it removes (and re-checks, before removing, that the
thread has not changed since it was verified), but a save the old release makes after that is not
converted.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from tulip_nb._sync import run_sync
from tulip_nb.core.errors import CheckpointCorrupt, CheckpointNotFound, UserError
from tulip_nb.core.keys import MIRROR_KEY
from tulip_nb.memory.backends._history_dir import NOFOLLOW, is_stale_temp, is_turn_end, safe_name
from tulip_nb.memory.backends._legacy_delta import COPY_PREFIX, DOT_FILES, LOCK_NAME, TRASH_PREFIX, Entry, LegacyStore
from tulip_nb.memory.checkpointer import Checkpoint
from tulip_nb.memory.history import PROJECTION_KEY

if TYPE_CHECKING:
    from tulip_nb.memory.backends._history_file import FileCheckpointer

__all__ = ["HistoryConversion", "aconvert_to_history", "convert_to_history"]


# -- to the history layout ------------------------------------------------------------------------

Status = Literal["converted", "already", "pending", "refused"]

_MARKS = frozenset((MIRROR_KEY, PROJECTION_KEY))
"""Envelope keys that are marks of a layout, not data: not extras the history would lose."""


@dataclass(frozen=True)
class HistoryConversion:
    """What :func:`convert_to_history` did to one thread.

    ``status``: ``converted`` (rows written by this run, old files gone), ``already`` (the history
    held every checkpoint: compared, nothing written), ``pending`` (converted and verified, but its
    old files are kept: a thread not converted yet uses its log, see ``detail``), ``refused``
    (not converted, old files kept; ``detail`` says why).
    """

    thread_id: str
    status: Status
    checkpoints: int
    """The thread's checkpoints in the history layout after the run (tulip's envelopes included)."""
    converted: int
    """Written as history rows by this run."""
    verified: int
    """Checkpoints of the old store loaded through the history layout and found equal to the old
    layout's by this run (rows and tulip's envelopes; none once the old files are gone)."""
    tulip_kept: int = 0
    """tulip-agents' own envelopes, left as files (the history layout reads them)."""
    removed: int = 0
    """Old files removed (logs, envelopes held as rows, bookkeeping)."""
    detail: str = ""


class _Refused(Exception):
    """A thread that is not converted (its old files stay), with why and what was done before."""

    def __init__(self, message: str, done: _Verified) -> None:
        super().__init__(message)
        self.done = done


@dataclass
class _Verified:
    """Phase 1's result for one thread: what phase 2 may remove."""

    thread_id: str
    directory: Path
    rows: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    """Checkpoint id -> (created_at, save metadata JSON) of each checkpoint verified as a row."""
    checkpoints: int = 0
    converted: int = 0
    verified: int = 0
    tulip_kept: int = 0
    note: str = ""


def _step(event: str, thread_id: str, what: str = "") -> None:
    """Called after each durable step of :func:`convert_to_history` (tests raise here to kill it)."""


def _meta_bytes(metadata: dict[str, Any]) -> bytes:
    return orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def _differs(got: Checkpoint | None, want: Checkpoint) -> str:
    """'' when ``got`` (read through the history layout) is ``want`` (the old layout's), else what differs."""
    if got is None:
        return "it cannot be loaded"
    problems = [
        what
        for what, same in (
            ("checkpoint id", got.checkpoint_id == want.checkpoint_id and got.thread_id == want.thread_id),
            ("created_at", got.created_at == want.created_at),
            ("save metadata", _meta_bytes(got.metadata) == _meta_bytes(want.metadata)),
            ("state", got.state.to_json_bytes() == want.state.to_json_bytes()),
        )
        if not same
    ]
    return ", ".join(problems)


def _compare(hist: FileCheckpointer, thread_id: str, checkpoint_id: str, source: Checkpoint) -> str:
    """'' when the history layout loads ``checkpoint_id`` as ``source``, else what differs."""
    try:
        got = run_sync(hist.load_checkpoint(thread_id, checkpoint_id))
    except (CheckpointNotFound, CheckpointCorrupt) as e:
        return f"it cannot be loaded: {e}"
    return _differs(got, source)


@contextlib.contextmanager
def _old_lock(directory: Path) -> Iterator[None]:
    """The old release's lock of ``directory`` (an ``flock`` on ``.lock``), when it has one."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _rows(hist: FileCheckpointer, thread_id: str) -> set[str]:
    return {r.checkpoint_id for r in run_sync(hist.store.rows(thread_id))}


def _phase1(old: LegacyStore, hist: FileCheckpointer, thread_id: str) -> _Verified:
    """Write every checkpoint of the thread into the history and verify it (nothing old is removed).

    Every checkpoint is read once before anything is written, so a thread the old store cannot
    read whole, or one with envelope extras, is refused with nothing of it written.
    """
    directory = old.base / safe_name(thread_id)
    done = _Verified(thread_id, directory)
    with _old_lock(directory):
        try:
            entries = old.entries(thread_id)
        except CheckpointCorrupt as e:
            raise _Refused(f"the old store cannot be listed: {e}", done) from e
        done.checkpoints = len(entries)  # until the history's count replaces it
        for entry in entries:
            source = _read_old(old, thread_id, entry, done)
            extras = set(source.extra) - _MARKS
            if extras and entry.kind != "tulip":
                raise _Refused(
                    f"checkpoint {entry.info.checkpoint_id} has envelope keys {sorted(extras)} that the history"
                    " layout does not keep (it stores the state, save metadata and created_at only);"
                    " nothing of the thread was converted and its files are as they were",
                    done,
                )
        have = _rows(hist, thread_id)
        for entry in _write_order(entries):
            _convert_one(old, hist, thread_id, entry, have, done)
    infos = run_sync(hist.list_checkpoint_infos(thread_id, None))
    done.checkpoints = len(infos)
    if done.rows and entries:  # the old engine ordered by the parent chain first, the history by created_at
        ours, theirs = entries[-1].info.checkpoint_id, infos[0].checkpoint_id
        if theirs != ours:
            done.note = f"the latest is {theirs} in the history layout, {ours} in the old store"
    return done


def _convert_one(
    old: LegacyStore, hist: FileCheckpointer, thread_id: str, entry: Entry, have: set[str], done: _Verified
) -> None:
    cid = entry.info.checkpoint_id
    source = _read_old(old, thread_id, entry, done)
    if entry.kind == "tulip":  # stays a file: the history layout must read it as it is
        problem = _compare(hist, thread_id, cid, source)
        if problem:
            raise _Refused(
                f"tulip's envelope {entry.path.name} reads differently in the history layout ({problem})", done
            )
        done.tulip_kept += 1
        done.verified += 1
        _step("verified", thread_id, cid)
        return
    if cid in have:
        problem = _compare(hist, thread_id, cid, source)
        if problem:
            raise _Refused(
                f"the history already holds checkpoint {cid} and it differs from the old store's ({problem}):"
                " the thread was written in the history layout since an interrupted conversion;"
                " neither copy was changed",
                done,
            )
    else:
        row = Checkpoint(cid, thread_id, source.created_at, source.state, dict(source.metadata))
        run_sync(hist.put_checkpoint(row))
        done.converted += 1
        _step("put", thread_id, cid)
        problem = _compare(hist, thread_id, cid, source)
        if problem:
            raise _Refused(
                f"checkpoint {cid} reads back differently ({problem}) from the history layout; the old"
                " files are kept and stay the thread's store",
                done,
            )
    done.rows[cid] = (source.created_at.isoformat(), _meta_bytes(source.metadata))
    done.verified += 1
    _step("verified", thread_id, cid)


def _read_old(old: LegacyStore, thread_id: str, entry: Entry, done: _Verified) -> Checkpoint:
    try:
        return old.load(thread_id, entry)
    except (CheckpointCorrupt, CheckpointNotFound) as e:
        raise _Refused(f"checkpoint {entry.info.checkpoint_id} cannot be read from the old store: {e}", done) from e


def _write_order(entries: list[Entry]) -> list[Entry]:
    """The order to write a thread's checkpoints in: oldest first, but the newest turn end first
    when the thread has envelopes tulip_nb wrote (the tulip layout).

    Each write re-projects the thread's latest turn end as the envelope ``<id>.json``, which
    replaces an old envelope of that id (same content) and removes the projection it moves from:
    oldest first, that would remove the tulip layout's envelopes one by one while phase 1 runs.
    Written first, the newest turn end stays the projection, so only its envelope is replaced.
    """
    if not any(e.kind == "envelope" for e in entries):
        return entries
    ends = [e for e in entries if e.kind != "tulip" and is_turn_end(e.info.metadata)]
    if not ends:
        return entries
    first = max(ends, key=lambda e: (e.info.created_at, e.info.checkpoint_id))
    return [first, *(e for e in entries if e is not first)]


# -- phase 2: remove the old files ----------------------------------------------------------------


def _removal_order(old: LegacyStore, verified: dict[str, _Verified]) -> tuple[list[str], dict[str, str]]:
    """The threads whose old files go, dependents before their bases; and those kept, with why.

    A log that a thread not converted by this run uses as a base (directly, or through another
    log that is kept) is kept, and so are its thread's other old files.
    """
    bases = {p: _bases_of(old, p) for d in old.thread_dirs() for p in old.logs_in(d)}
    own: dict[str, Path] = {}
    for t, v in verified.items():
        mine = old.thread_log(v.directory, t)
        if mine is not None:
            own[t] = mine.path
    owner = {p: t for t, p in own.items()}
    going = set(own.values())
    users: dict[Path, set[Path]] = {}
    for log, used in bases.items():
        for b in used:
            users.setdefault(b, set()).add(log)
    kept = {log for log in bases if log not in going}
    why: dict[Path, Path] = {}
    stack = list(kept)
    while stack:
        log = stack.pop()
        for b in bases.get(log, ()):
            if b not in kept:
                kept.add(b)
                why[b] = why.get(log, log)
                stack.append(b)
    blocked = {
        owner[p]: f"its log is the base of forks or copies not converted yet ({why[p].parent.name}/{why[p].name});"
        " convert them too (or the whole store), then run again"
        for p in going & kept
    }
    order: list[str] = []
    left = {t for t in verified if t not in blocked}
    removed: set[Path] = set()
    while left:
        ready = sorted(t for t in left if t not in own or not (users.get(own[t], set()) & going) - removed - {own[t]})
        if not ready:  # circular bases (never written by the delta engine): keep them
            for t in sorted(left):
                blocked[t] = "its log and another's use each other as bases; kept"
            break
        for t in ready:
            order.append(t)
            left.discard(t)
            if t in own:
                removed.add(own[t])
    return order, blocked


def _bases_of(old: LegacyStore, log: Path) -> set[Path]:
    try:
        return old.base_logs(log)
    except (CheckpointCorrupt, OSError):  # unreadable (its thread was refused): it stays, as do its bases
        return set()


def _remove(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _remove_tree(path: Path) -> bool:
    if os.path.islink(path) or not os.path.isdir(path):
        return _remove(path)
    shutil.rmtree(path, ignore_errors=True)  # rmtree never follows symbolic links
    return not os.path.lexists(path)


def _tidy(old: LegacyStore, directory: Path, thread_id: str) -> int:
    """Remove a directory's bookkeeping once no old data of any thread is left in it."""
    if not os.path.isdir(directory) or old.logs_in(directory) or old.has_tulip_nb_envelopes(directory):
        return 0
    removed = 0
    for path in old.deleted_files(directory):  # a thread whose delete a crash interrupted: gone
        removed += _remove(path)
        _step("removed", thread_id, path.name)
    for name in sorted(os.listdir(directory)):
        path = directory / name
        if name in DOT_FILES or name.startswith((TRASH_PREFIX, COPY_PREFIX)):
            removed += _remove_tree(path)
        elif is_stale_temp(directory, name, writes_locked=False):
            removed += _remove(path)
        else:
            continue
        _step("removed", thread_id, name)
    if _remove(directory / LOCK_NAME):  # last: the lock is held (if it was there) until now
        removed += 1
        _step("removed", thread_id, LOCK_NAME)
    with contextlib.suppress(OSError):
        os.rmdir(directory)  # only when nothing is left in it (a thread without a turn end)
    return removed


def _phase2(old: LegacyStore, hist: FileCheckpointer, done: _Verified) -> HistoryConversion:
    """Remove the thread's old files, which the history now holds (verified in phase 1)."""
    thread_id, directory = done.thread_id, done.directory
    removed = 0
    with _old_lock(directory):
        now = old.entries(thread_id)
        changed = [
            e.info.checkpoint_id
            for e in now
            if e.kind != "tulip"
            and done.rows.get(e.info.checkpoint_id) != (e.info.created_at.isoformat(), _meta_bytes(e.info.metadata))
        ]
        if changed:
            return _result(
                done,
                "pending",
                0,
                f"{len(changed)} checkpoint(s) changed in the old store since they were verified"
                f" (an old-release writer? first: {changed[0]}); old files kept: run convert again",
            )
        rows = _rows(hist, thread_id)
        log = old.thread_log(directory, thread_id)
        for entry in old.own_envelopes(directory, thread_id):
            cid = entry.info.checkpoint_id
            if cid in rows and cid in done.rows:
                removed += _remove(entry.path)
                _step("removed", thread_id, entry.path.name)
        if log is not None and _remove(log.path):
            removed += 1
            _step("removed", thread_id, log.path.name)
        old.close()
        removed += _tidy(old, directory, thread_id)
    status: Status = "converted" if done.converted or removed else "already"
    return _result(done, status, removed, done.note)


def _result(done: _Verified, status: Status, removed: int, detail: str) -> HistoryConversion:
    return HistoryConversion(
        done.thread_id, status, done.checkpoints, done.converted, done.verified, done.tulip_kept, removed, detail
    )


def _clean_base(base: Path) -> int:
    """The old release's tombstones and dead copies' staging directories in ``base_dir``."""
    return sum(_remove_tree(base / n) for n in sorted(os.listdir(base)) if n.startswith((TRASH_PREFIX, COPY_PREFIX)))


def convert_to_history(
    base_dir: str | os.PathLike[str], thread_ids: Sequence[str] | None = None, *, fsync: bool = True
) -> list[HistoryConversion]:
    """Convert the file store at ``base_dir`` into the history layout (see the module docstring).

    ``thread_ids``: the threads to convert (default: every thread of the store). Returns one
    :class:`HistoryConversion` per thread, in the order asked (sorted for all). Raises
    :class:`~tulip_nb.core.errors.UserError` for a missing directory and
    :class:`~tulip_nb.core.errors.CheckpointNotFound` for a thread the store does not have, before
    anything is written.
    """
    from tulip_nb.memory.backends._history_file import FileCheckpointer

    base = Path(base_dir)
    if not base.is_dir():
        raise UserError(f"no such directory: {base} (convert works on a FileCheckpointer base directory)")

    def history() -> FileCheckpointer:
        cp = FileCheckpointer(base, fsync=fsync)
        cp.allow_legacy = True  # it reads past the old files this conversion is about to remove
        return cp

    old = LegacyStore(base.resolve())
    hist = history()
    try:
        known = set(old.threads()) | set(hist.store.threads_sync())  # the old files, and rows of a run before
        wanted = list(dict.fromkeys(thread_ids)) if thread_ids else sorted(known)
        for thread_id in wanted:
            if thread_id not in known:
                raise CheckpointNotFound("no such thread", thread_id=thread_id, path=str(base))
        out: dict[str, HistoryConversion] = {}
        verified: dict[str, _Verified] = {}
        for thread_id in wanted:  # phase 1: write and verify, remove nothing
            own = history()  # one instance per thread: its caches (of the thread's history) go with it
            try:
                verified[thread_id] = _phase1(old, own, thread_id)
            except _Refused as e:
                detail = str(e)
                if e.done.converted:
                    detail += f" ({e.done.converted} checkpoint(s) were written to the history before this)"
                out[thread_id] = _result(e.done, "refused", 0, detail)
            finally:
                run_sync(own.close())
        _step("phase2", "")
        order, blocked = _removal_order(old, verified)
        for thread_id in order:  # phase 2: dependents first
            out[thread_id] = _phase2(old, hist, verified[thread_id])
        for thread_id, why in blocked.items():
            out[thread_id] = _result(verified[thread_id], "pending", 0, f"old files kept: {why}")
        _clean_base(base)
        return [out[t] for t in wanted]
    finally:
        run_sync(hist.close())


async def aconvert_to_history(
    base_dir: str | os.PathLike[str], thread_ids: Sequence[str] | None = None, *, fsync: bool = True
) -> list[HistoryConversion]:
    """Async twin of :func:`convert_to_history` (it runs in a worker thread)."""
    return await asyncio.to_thread(convert_to_history, base_dir, thread_ids, fsync=fsync)
