"""Convert a file store's threads between layouts, every checkpoint verified.

``tulip-nb convert PATH [--to history|delta|tulip] [THREAD ...]``.

**To the history layout** (:func:`convert_to_history`, the default target): a store the old
engine wrote (``layout="delta"`` or ``"tulip"``, and tulip-agents' own envelopes) moves into the
history layout (``FileCheckpointer(base_dir)``) on the same ``base_dir``, in two phases:

1. *write and verify*, thread by thread: every checkpoint is read through the old engine
   (``FileCheckpointer(base, layout="delta")``, :class:`._delta_file.DeltaFileCheckpointer`,
   which reads logs, forks that point into other threads' logs, and envelopes), written with
   ``put_checkpoint``, loaded back and compared (checkpoint id, state JSON bytes, save metadata,
   ``created_at``). A checkpoint the history holds already is compared, not written again.
   No old file is removed; one is rewritten: the history's projection of the thread's latest
   turn end replaces the old envelope of that checkpoint (the delta layout's mirror, or the tulip
   layout's envelope), with the same checkpoint in it.
2. *remove the old files*, only once every requested thread made it: per thread its log, the
   tulip_nb envelopes now held as rows (the delta layout's mirror, the tulip layout's envelopes),
   then, when no old data is left in the directory, its ``.tulip_nb_index``, ``.tulip_nb_forks``,
   ``.lock``, dead writers' temp files and tombstones; then the tombstones and dead copy staging
   directories in ``base_dir``. Forks and copies point into their source's log, so a thread's log
   goes only after every log that uses it as a base (dependents first), and a log that a thread
   not converted in this run still uses stays, with its thread's other old files (the thread is
   reported ``pending``).

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
engine (phase 1 removes nothing) or in the history layout (phase 2 removes only what the history
holds, verified, forks before their sources), and running it again finishes. Old-release writers
must be stopped while it runs: the conversion takes each old thread's ``.lock`` while it reads and
while it removes (and re-checks, before removing, that the thread has not changed since it was
verified), but a save the old release makes after that is not converted.

**Between the delta and tulip layouts** (:func:`convert_thread`, ``--to delta|tulip``): every
checkpoint is written in the target layout and read back and compared (state JSON, save
metadata, ``created_at``, envelope extras) before the source copy goes, and only after every
checkpoint of the thread made it:

- **to delta**: each envelope becomes a log record; then the envelopes are removed but one, the
  latest turn end, which stays as the thread's tulip envelope;
- **to tulip**: each log record becomes an envelope; then the forks that use the log as their base
  are rewritten to stand alone and the log is removed.

At every moment each checkpoint exists in one layout or both (the listing shows it once), so a
conversion killed midway leaves a whole thread and can simply be run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from tulip_nb._sync import run_sync
from tulip_nb.core.errors import CheckpointCorrupt, CheckpointNotFound, UserError
from tulip_nb.core.keys import MESSAGES_KEY, MIRROR_KEY
from tulip_nb.memory._envelope import HEAD_BYTES, read_head
from tulip_nb.memory.backends._delta_log import AUTO, LOG_NAME, DeltaLog
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.history import PROJECTION_KEY

if TYPE_CHECKING:
    from tulip_nb.memory.backends._delta_file import DeltaFileCheckpointer
    from tulip_nb.memory.backends._history_file import HistoryFileCheckpointer

__all__ = [
    "Conversion",
    "HistoryConversion",
    "aconvert_to_history",
    "convert_between",
    "convert_thread",
    "convert_to_history",
]

Layout = Literal["delta", "tulip"]


@dataclass(frozen=True)
class Conversion:
    """What :func:`convert_thread` did to one thread."""

    thread_id: str
    layout: Layout
    converted: int
    """Checkpoints written in the target layout (0: the thread already was in it)."""
    checkpoints: int
    """Checkpoints the thread has, all verified."""


def _same(a: Checkpoint, b: Checkpoint) -> bool:
    extra_a = {k: v for k, v in a.extra.items() if k != MIRROR_KEY}
    extra_b = {k: v for k, v in b.extra.items() if k != MIRROR_KEY}
    return (
        a.checkpoint_id == b.checkpoint_id
        and a.created_at == b.created_at
        and dict(a.metadata) == dict(b.metadata)
        and extra_a == extra_b
        and a.state.to_json_bytes() == b.state.to_json_bytes()
    )


def _logged(log: DeltaLog, thread_id: str, checkpoint_id: str) -> Checkpoint:
    state, header = log.load(checkpoint_id)
    extra = dict(getattr(header, "extra", {}) or {})
    return Checkpoint(checkpoint_id, thread_id, header.created_at, state, dict(header.metadata), extra)


def _check(written: Checkpoint, source: Checkpoint, where: str) -> None:
    if not _same(written, source):
        raise CheckpointCorrupt(
            "converted checkpoint reads back differently; the source copy is kept",
            thread_id=source.thread_id,
            checkpoint_id=source.checkpoint_id,
            path=where,
        )


def convert_thread(cp: DeltaFileCheckpointer, thread_id: str, layout: Layout) -> Conversion:
    """Convert one thread of ``cp``'s store to ``layout`` (see the module docstring)."""
    if layout not in ("delta", "tulip"):
        raise UserError(f"layout must be 'delta' or 'tulip', got {layout!r}")
    directory = cp.thread_dir(thread_id)
    converted = 0
    with cp._locked(directory, create=False):
        entries = list(reversed(cp._infos(thread_id, directory)))  # oldest first
        log = cp._logs.get(directory, thread_id)
        if layout == "delta":
            envelopes = [(n, i) for n, i in entries if n is not None]
            if envelopes:
                log = log or cp._logs.create(directory, thread_id)
                for name, _info in envelopes:
                    source = cp._read_checkpoint(directory / name, thread_id)
                    parent = source.metadata.get("parent_checkpoint_id")
                    log.append_checkpoint(
                        source.checkpoint_id,
                        source.created_at,
                        source.state,
                        source.metadata,
                        parent if isinstance(parent, str) else None,
                        base=AUTO,
                        extra=source.extra or None,
                    )
                    _check(_logged(log, thread_id, source.checkpoint_id), source, str(log.path))
                    converted += 1
                cp._sync_mirror(directory, thread_id)  # the envelopes now in the log go, but one
        elif log is not None:
            logged = [i for n, i in entries if n is None]
            for info in logged:
                source = _logged(log, thread_id, info.checkpoint_id)
                plain = Checkpoint(
                    source.checkpoint_id, thread_id, source.created_at, source.state, source.metadata, source.extra
                )
                cp._write_envelope(directory, plain)
                path = directory / (cp.checkpoint_path(thread_id, info.checkpoint_id).name)
                _check(cp._read_checkpoint(path, thread_id), source, str(path))
                converted += 1
            cp._logs.release_dependents(directory, lambda d: _relock(cp, d, directory))
            cp._logs.forget(log.path)
            with contextlib.suppress(FileNotFoundError):
                log.path.unlink()
        total = len(cp._infos(thread_id, directory))
    return Conversion(thread_id, layout, converted, total)


def convert_between(
    base_dir: str | os.PathLike[str], layout: Layout, thread_ids: Sequence[str] | None = None
) -> list[Conversion]:
    """:func:`convert_thread` for each of ``thread_ids`` (default: every thread) of the store at
    ``base_dir``, in the old engine's delta or tulip layout.

    Raises :class:`~tulip_nb.core.errors.CheckpointNotFound` for a thread without checkpoints.
    """
    from tulip_nb.memory.backends._delta_file import DeltaFileCheckpointer

    if layout not in ("delta", "tulip"):
        raise UserError(f"layout must be 'delta' or 'tulip', got {layout!r}")
    cp = DeltaFileCheckpointer(base_dir, layout=layout)
    try:
        threads = list(thread_ids) if thread_ids else run_sync(cp.list_threads(limit=None))
        out = []
        for thread_id in threads:
            if not run_sync(cp.list_checkpoints(thread_id, limit=1)):
                raise CheckpointNotFound("no such thread", thread_id=thread_id)
            out.append(convert_thread(cp, thread_id, layout))
        return out
    finally:
        run_sync(cp.close())


def _relock(cp: DeltaFileCheckpointer, directory: Path, held: Path) -> contextlib.AbstractContextManager[None]:
    """The lock of another thread's directory (the one held already is not taken twice)."""
    if directory == held:
        return contextlib.nullcontext()
    return cp._locked(directory, create=False)


# -- to the history layout ------------------------------------------------------------------------

Status = Literal["converted", "already", "pending", "refused"]

_MARKS = frozenset((MIRROR_KEY, PROJECTION_KEY))
"""Envelope keys that are marks of a layout, not data: not extras the history would lose."""
_DOT_FILES = (".tulip_nb_index", ".tulip_nb_forks")
_LOCK = ".lock"
_TRASH = ".tulip_nb_trash-"
_COPY = ".tulip_nb_copy-"


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
    engine's by this run (rows and tulip's envelopes; none once the old files are gone)."""
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
    """'' when ``got`` (read through the history layout) is ``want`` (the old engine's), else what differs."""
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


def _compare(hist: HistoryFileCheckpointer, thread_id: str, checkpoint_id: str, source: Checkpoint) -> str:
    """'' when the history layout loads ``checkpoint_id`` as ``source``, else what differs."""
    try:
        got = run_sync(hist.load_checkpoint(thread_id, checkpoint_id))
    except (CheckpointNotFound, CheckpointCorrupt) as e:
        return f"it cannot be loaded: {e}"
    return _differs(got, source)


def _tulip_nb_wrote(metadata: dict[str, Any]) -> bool:
    """Whether an envelope with this save metadata was written by tulip_nb (every save of it adds
    ``tulip_nb_messages``; tulip writes no such key)."""
    return MESSAGES_KEY in metadata


def _envelope_keys(path: Path, old: DeltaFileCheckpointer, thread_id: str) -> dict[str, Any]:
    """The top-level keys of an envelope beyond the state (extras included), reading its head only
    when it holds them (tulip_nb writes them before the state)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            head = read_head(os.read(fd, HEAD_BYTES))
        finally:
            os.close(fd)
    except OSError:
        head = None
    if head is not None:
        return head
    ckpt = old._read_checkpoint(path, thread_id)
    return {"metadata": ckpt.metadata, **ckpt.extra}


@contextlib.contextmanager
def _old_lock(old: DeltaFileCheckpointer, directory: Path) -> Iterator[None]:
    """The old engine's lock of ``directory``, when it has one (never created where there is none)."""
    if os.path.lexists(directory / _LOCK):
        with old._locked(directory, create=False):
            yield
    else:
        yield


_Entry = tuple[str, str | None, CheckpointInfo]


def _old_entries(old: DeltaFileCheckpointer, thread_id: str) -> list[_Entry]:
    """The thread's checkpoints in the old store, oldest first: ``(kind, file name, info)``.

    ``kind``: ``log`` (a record of its delta log), ``envelope`` (an envelope tulip_nb wrote),
    ``tulip`` (an envelope tulip wrote: no tulip_nb mark). The history layout's own projection is
    not an old checkpoint and is left out.
    """
    directory = old.thread_dir(thread_id)
    out: list[_Entry] = []
    for name, info in reversed(old._infos(thread_id, directory)):
        if name is None:
            out.append(("log", None, info))
            continue
        keys = _envelope_keys(directory / name, old, thread_id)
        if PROJECTION_KEY in keys:
            continue
        wrote = _tulip_nb_wrote(info.metadata) or MIRROR_KEY in keys
        out.append(("envelope" if wrote else "tulip", name, info))
    return out


def _load_old(old: DeltaFileCheckpointer, thread_id: str, kind: str, name: str | None, cid: str) -> Checkpoint:
    from tulip_nb.memory.backends._file_delta import load_from

    directory = old.thread_dir(thread_id)
    if kind == "log":
        log = old._logs.get(directory, thread_id)
        if log is None:
            raise CheckpointNotFound("the thread's log is gone", thread_id=thread_id, checkpoint_id=cid)
        return load_from(log, thread_id, cid)
    assert name is not None
    return old._read_checkpoint(directory / name, thread_id)


def _rows(hist: HistoryFileCheckpointer, thread_id: str) -> set[str]:
    return {r.checkpoint_id for r in run_sync(hist.store.rows(thread_id))}


def _phase1(old: DeltaFileCheckpointer, hist: HistoryFileCheckpointer, thread_id: str) -> _Verified:
    """Write every checkpoint of the thread into the history and verify it (nothing old is removed).

    Every checkpoint is read once before anything is written, so a thread the old store cannot
    read whole, or one with envelope extras, is refused with nothing of it written.
    """
    directory = old.thread_dir(thread_id)
    done = _Verified(thread_id, directory)
    with _old_lock(old, directory):
        try:
            entries = _old_entries(old, thread_id)
        except CheckpointCorrupt as e:
            raise _Refused(f"the old store cannot be listed: {e}", done) from e
        done.checkpoints = len(entries)  # until the history's count replaces it
        for kind, name, info in entries:
            source = _read_old(old, thread_id, kind, name, info.checkpoint_id, done)
            extras = set(source.extra) - _MARKS
            if extras and kind != "tulip":
                raise _Refused(
                    f"checkpoint {info.checkpoint_id} has envelope keys {sorted(extras)} that the history"
                    " layout does not keep (it stores the state, save metadata and created_at only);"
                    " nothing of the thread was converted and its files are as they were",
                    done,
                )
        have = _rows(hist, thread_id)
        for kind, name, info in _write_order(entries):
            cid = info.checkpoint_id
            source = _read_old(old, thread_id, kind, name, cid, done)
            if kind == "tulip":  # stays a file: the history layout must read it as it is
                problem = _compare(hist, thread_id, cid, source)
                if problem:
                    raise _Refused(f"tulip's envelope {name} reads differently in the history layout ({problem})", done)
                done.tulip_kept += 1
                done.verified += 1
                _step("verified", thread_id, cid)
                continue
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
    infos = run_sync(hist.list_checkpoint_infos(thread_id, None))
    done.checkpoints = len(infos)
    if done.rows:  # the old engine orders by the parent chain first, the history by created_at
        ours, theirs = entries[-1][2].checkpoint_id, infos[0].checkpoint_id
        if theirs != ours:
            done.note = f"the latest is {theirs} in the history layout, {ours} in the old engine"
    return done


def _read_old(
    old: DeltaFileCheckpointer, thread_id: str, kind: str, name: str | None, cid: str, done: _Verified
) -> Checkpoint:
    try:
        return _load_old(old, thread_id, kind, name, cid)
    except (CheckpointCorrupt, CheckpointNotFound) as e:
        raise _Refused(f"checkpoint {cid} cannot be read from the old store: {e}", done) from e


def _write_order(entries: list[_Entry]) -> list[_Entry]:
    """The order to write a thread's checkpoints in: oldest first, but the newest turn end first
    when the thread has envelopes tulip_nb wrote (the tulip layout).

    Each write re-projects the thread's latest turn end as the envelope ``<id>.json``, which
    replaces an old envelope of that id (same content) and removes the projection it moves from:
    oldest first, that would remove the tulip layout's envelopes one by one while phase 1 runs.
    Written first, the newest turn end stays the projection, so only its envelope is replaced.
    """
    from tulip_nb.memory.backends._file_delta import is_turn_end

    if not any(kind == "envelope" for kind, _, _ in entries):
        return entries
    ends = [e for e in entries if e[0] != "tulip" and is_turn_end(e[2].metadata)]
    if not ends:
        return entries
    first = max(ends, key=lambda e: (e[2].created_at, e[2].checkpoint_id))
    return [first, *(e for e in entries if e is not first)]


# -- phase 2: remove the old files ----------------------------------------------------------------


def _logs_in(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as it:
            return sorted(
                directory / e.name
                for e in it
                if (e.name == LOG_NAME or e.name.startswith(LOG_NAME + "-")) and not e.is_symlink()
            )
    except (FileNotFoundError, NotADirectoryError):
        return []


def _thread_dirs(base: Path) -> list[Path]:
    with os.scandir(base) as it:
        return sorted(base / e.name for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))


def _bases(old: DeltaFileCheckpointer, base: Path) -> dict[Path, set[Path]]:
    """Every log of the store -> the logs its records use as bases (forks and copies)."""
    out: dict[Path, set[Path]] = {}
    for directory in _thread_dirs(base):
        for path in _logs_in(directory):
            refs = old._logs.open_path(path).foreign_bases()
            out[path] = {old._logs.base_dir / b.thread for b in refs} - {path}
    return out


def _removal_order(
    old: DeltaFileCheckpointer, base: Path, verified: dict[str, _Verified]
) -> tuple[list[str], dict[str, str]]:
    """The threads whose old files go, dependents before their bases; and those kept, with why.

    A log that a thread not converted by this run uses as a base (directly, or through another
    log that is kept) is kept, and so are its thread's other old files.
    """
    bases = _bases(old, base)
    own = {t: old._logs.path(v.directory, t) for t, v in verified.items()}
    owner = {p: t for t, p in own.items()}
    going = {p for p in own.values() if p in bases}
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
        ready = sorted(t for t in left if not (users.get(own[t], set()) & going) - removed - {own[t]})
        if not ready:  # circular bases (never written by the delta engine): keep them
            for t in sorted(left):
                blocked[t] = "its log and another's use each other as bases; kept"
            break
        for t in ready:
            order.append(t)
            left.discard(t)
            removed.add(own[t])
    return order, blocked


def _remove(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _marked(old: DeltaFileCheckpointer, directory: Path, name: str, info: CheckpointInfo) -> str:
    """What an envelope of the directory is: ``projection``, ``tulip_nb`` (an old layout's) or ``tulip``."""
    keys = _envelope_keys(directory / name, old, info.thread_id)
    if PROJECTION_KEY in keys:
        return "projection"
    return "tulip_nb" if _tulip_nb_wrote(info.metadata) or MIRROR_KEY in keys else "tulip"


def _tidy(old: DeltaFileCheckpointer, directory: Path, thread_id: str) -> int:
    """Remove a directory's bookkeeping once no old data of any thread is left in it."""
    from tulip_nb.memory.backends._file_crash import stale_tmp
    from tulip_nb.memory.backends._file_safety import remove_tree

    if _logs_in(directory):
        return 0
    for name, entry in old._scan(directory).items():
        if isinstance(entry, CheckpointInfo) and _marked(old, directory, name, entry) == "tulip_nb":
            return 0
    removed = 0
    for name in sorted(os.listdir(directory)):
        path = directory / name
        if name in _DOT_FILES or (name.startswith(_DOT_FILES) and stale_tmp(directory, name)):
            removed += _remove(path)
        elif name.startswith(_TRASH) and not os.path.islink(path):
            remove_tree(path)
            removed += 1
        elif name.endswith(".tmp") and name.startswith(".") and stale_tmp(directory, name):
            removed += _remove(path)
        else:
            continue
        _step("removed", thread_id, name)
    if _remove(directory / _LOCK):  # last: the lock is held (if it was there) until now
        removed += 1
        _step("removed", thread_id, _LOCK)
    with contextlib.suppress(OSError):
        os.rmdir(directory)  # only when nothing is left in it (a thread without a turn end)
    return removed


def _phase2(old: DeltaFileCheckpointer, hist: HistoryFileCheckpointer, done: _Verified) -> HistoryConversion:
    """Remove the thread's old files, which the history now holds (verified in phase 1)."""
    thread_id, directory = done.thread_id, done.directory
    removed = 0
    with _old_lock(old, directory):
        now = _old_entries(old, thread_id)
        changed = [
            i.checkpoint_id
            for kind, _, i in now
            if kind != "tulip" and done.rows.get(i.checkpoint_id) != (i.created_at.isoformat(), _meta_bytes(i.metadata))
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
        for name, entry in sorted(old._scan(directory).items()):
            if not isinstance(entry, CheckpointInfo) or entry.thread_id != thread_id:
                continue
            cid = entry.checkpoint_id
            if cid in rows and cid in done.rows and _marked(old, directory, name, entry) == "tulip_nb":
                removed += _remove(directory / name)
                _step("removed", thread_id, name)
        log = old._logs.path(directory, thread_id)
        old._logs.forget(log)
        if _remove(log):
            removed += 1
            _step("removed", thread_id, log.name)
        removed += _tidy(old, directory, thread_id)
    status: Status = "converted" if done.converted or removed else "already"
    return _result(done, status, removed, done.note)


def _result(done: _Verified, status: Status, removed: int, detail: str) -> HistoryConversion:
    return HistoryConversion(
        done.thread_id, status, done.checkpoints, done.converted, done.verified, done.tulip_kept, removed, detail
    )


def _clean_base(base: Path) -> int:
    """The delta engine's tombstones and dead copies' staging directories in ``base_dir``."""
    from tulip_nb.memory.backends._file_crash import clean_staging
    from tulip_nb.memory.backends._file_safety import remove_tree

    removed = 0
    for name in sorted(os.listdir(base)):
        path = base / name
        if name.startswith(_TRASH) and not os.path.islink(path):
            remove_tree(path)
        elif name.startswith(_COPY):
            clean_staging(path)
        else:
            continue
        removed += not os.path.lexists(path)
    return removed


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
    from tulip_nb.memory.backends._delta_file import DeltaFileCheckpointer
    from tulip_nb.memory.backends._history_file import HistoryFileCheckpointer

    base = Path(base_dir)
    if not base.is_dir():
        raise UserError(f"no such directory: {base} (convert works on a FileCheckpointer base directory)")

    def history() -> HistoryFileCheckpointer:
        cp = HistoryFileCheckpointer(base, fsync=fsync)
        cp.allow_legacy = True  # it reads past the old files this conversion is about to remove
        return cp

    old = DeltaFileCheckpointer(base, layout="delta", fsync=fsync)  # the reader of the old layouts
    hist = history()
    try:
        known = set(run_sync(old.list_threads(limit=None))) | set(run_sync(hist.list_threads(limit=None)))
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
                run_sync(old.close())  # the old engine's open logs (each opens again when read)
        _step("phase2", "")
        order, blocked = _removal_order(old, base, verified)
        for thread_id in order:  # phase 2: dependents first
            out[thread_id] = _phase2(old, hist, verified[thread_id])
        for thread_id, why in blocked.items():
            out[thread_id] = _result(verified[thread_id], "pending", 0, f"old files kept: {why}")
        _clean_base(base)
        return [out[t] for t in wanted]
    finally:
        run_sync(hist.close())
        run_sync(old.close())


async def aconvert_to_history(
    base_dir: str | os.PathLike[str], thread_ids: Sequence[str] | None = None, *, fsync: bool = True
) -> list[HistoryConversion]:
    """Async twin of :func:`convert_to_history` (it runs in a worker thread)."""
    return await asyncio.to_thread(convert_to_history, base_dir, thread_ids, fsync=fsync)
