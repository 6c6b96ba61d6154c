"""The delta layout of :class:`~tulip_nb.memory.backends._delta_file.DeltaFileCheckpointer` (its default).

A thread directory in the delta layout holds:

``.tulip_nb_log``
    every checkpoint tulip_nb saved, as an append-only log of snapshots and deltas
    (:mod:`._delta_log`); a save appends what changed. A thread whose id differs from its
    directory's name (``a#1`` shares ``a_1/`` with ``a_1``) has ``.tulip_nb_log-<16 hex>`` instead.
    A drop (``prune``, ``delete`` of checkpoints, ``vacuum``) leaves the dropped records in the
    file; the log is compacted once that reclaims at least half the file and
    :attr:`DeltaLogs.COMPACT_MIN_BYTES` (1 MiB), keeping the records other threads' forks use.
``<checkpoint_id>.json``
    **one tulip envelope**, the *mirror*: the thread's latest turn end (a save whose ``source``
    is not ``"iteration"`` or ``"fork"`` — what tulip itself keeps), replaced at each turn end, so
    a tulip agent resumes the thread as it always has. Envelopes that tulip (or the ``"tulip"``
    layout) writes into the directory are checkpoints of the thread too: the thread's latest is
    the newest of the log's and the envelopes' (by ``created_at``), so tulip_nb continues after a
    tulip agent's turns. An envelope whose id is in the log is the mirror, listed once.
``.tulip_nb_forks``
    the logs (``<dir>/<log name>`` lines) that use this thread's checkpoints as the base of a fork
    or copy, which cost one small record each: before this thread is deleted, those logs are
    rewritten so they no longer depend on it.

A fork's first checkpoint has no mirror until its first turn end (its source thread has one);
``tulip-nb convert PATH THREAD --to tulip`` writes an envelope for every checkpoint of a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tulip_nb.core.errors import BackendUnavailable, CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.keys import FORKED_FROM_KEY, PARENT_KEY, SOURCE_KEY
from tulip_nb.memory.backends._delta_codec import state_of
from tulip_nb.memory.backends._delta_compact import reclaimable
from tulip_nb.memory.backends._delta_log import AUTO, LOG_NAME, DeltaLog, ForeignBase, Header
from tulip_nb.memory.backends._file_index import safe_name, unavailable
from tulip_nb.memory.backends._file_safety import NOFOLLOW, is_link, read_nofollow
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo

__all__ = [
    "FORKS_NAME",
    "NO_MIRROR_SOURCES",
    "DeltaLogs",
    "has",
    "info_of",
    "is_turn_end",
    "load_from",
    "log_name",
    "mirror_name",
]

FORKS_NAME = ".tulip_nb_forks"
NO_MIRROR_SOURCES = frozenset(("iteration", "fork"))
"""Save ``source`` values that are not turn ends: no tulip envelope is written for them."""


def is_turn_end(metadata: Mapping[str, Any]) -> bool:
    """Whether a save with this metadata gets the thread's tulip envelope (see the module docstring)."""
    return metadata.get(SOURCE_KEY) not in NO_MIRROR_SOURCES


def log_name(directory: Path, thread_id: str) -> str:
    """The log file of ``thread_id`` in its directory (a hashed name when ids share the directory)."""
    if directory.name == thread_id:
        return LOG_NAME
    return f"{LOG_NAME}-{hashlib.sha256(thread_id.encode()).hexdigest()[:16]}"


def info_of(header: Header, thread_id: str) -> CheckpointInfo:
    return CheckpointInfo(header.checkpoint_id, thread_id, header.created_at, dict(header.metadata))


class DeltaLogs:
    """The open :class:`DeltaLog` of each thread under one ``base_dir`` (one per log file)."""

    MAX_OPEN = 64
    """Logs kept open (two descriptors each); the least recently used is closed beyond this, so a
    corpus of thousands of threads never runs out of file descriptors."""

    def __init__(self, base_dir: Path, *, fsync: bool) -> None:
        self.base_dir = base_dir
        self.fsync = fsync
        self._logs: OrderedDict[Path, DeltaLog] = OrderedDict()
        self._lock = threading.Lock()

    def path(self, directory: Path, thread_id: str) -> Path:
        return directory / log_name(directory, thread_id)

    def _open(self, path: Path, thread_id: str | None) -> DeltaLog:
        if is_link(path):  # never read or append through a link planted in the store
            self.forget(path)
            raise BackendUnavailable("refusing a thread log that is a symbolic link", path=str(path))
        with self._lock:
            log = self._logs.get(path)
            if log is None:
                log = DeltaLog(path, fsync=self.fsync, thread_id=thread_id, resolver=self.resolve)
                self._logs[path] = log
                while len(self._logs) > self.MAX_OPEN:
                    self._logs.popitem(last=False)[1].close()  # its index is rebuilt if used again
            else:
                self._logs.move_to_end(path)
            return log

    def close(self) -> None:
        """Close every open log (their files stay; the next use opens them again)."""
        with self._lock:
            logs, self._logs = list(self._logs.values()), OrderedDict()
        for log in logs:
            log.close()

    def open_path(self, path: Path) -> DeltaLog:
        """The log at ``path`` (whatever thread it holds: see :attr:`DeltaLog.file_thread_id`)."""
        return self._open(path, None)

    def get(self, directory: Path, thread_id: str) -> DeltaLog | None:
        """The thread's log, or None when it has none."""
        path = self.path(directory, thread_id)
        if not path.exists() and not is_link(path):
            self.forget(path)
            return None
        return self._open(path, thread_id)

    def create(self, directory: Path, thread_id: str) -> DeltaLog:
        """The thread's log, created on its first append (call under the thread's lock)."""
        return self._open(self.path(directory, thread_id), thread_id)

    def forget(self, path: Path) -> None:
        with self._lock:
            log = self._logs.pop(path, None)
        if log is not None:
            log.close()

    def resolve(self, ref: str) -> DeltaLog:
        """The log a :class:`ForeignBase` names (``"<dir>/<log name>"`` under ``base_dir``)."""
        name, _, log = ref.partition("/")
        if not name or not log or "/" in log or name in (".", "..") or not log.startswith(LOG_NAME):
            raise CheckpointCorrupt(f"not a thread log reference: {ref!r}")
        path = self.base_dir / name / log
        if not path.exists() and not is_link(path):  # never a missing checkpoint: the fork's own record cannot be read
            raise CheckpointCorrupt("the log a fork's base lives in is gone", path=str(path))
        return self._open(path, None)

    def ref(self, directory: Path, thread_id: str) -> str:
        """How other logs name this thread's log in a :class:`ForeignBase`."""
        return f"{directory.name}/{log_name(directory, thread_id)}"

    # -- live headers as infos ------------------------------------------------------------------
    def infos(self, directory: Path, thread_id: str) -> list[CheckpointInfo]:
        log = self.get(directory, thread_id)
        return [] if log is None else [info_of(h, thread_id) for h in log.headers()]

    # -- forks: who depends on whom ---------------------------------------------------------------
    def fork_base(self, metadata: Mapping[str, Any], thread_dir: Any) -> tuple[ForeignBase, Path] | None:
        """The foreign base of a fork's first save: the parent checkpoint in its source thread's log.

        ``thread_dir`` maps a thread id to its directory. None when the source is not a thread of
        this store in the delta layout holding the parent.
        """
        source, parent = metadata.get(FORKED_FROM_KEY), metadata.get(PARENT_KEY)
        if not isinstance(source, str) or not isinstance(parent, str):
            return None
        try:
            src_dir = thread_dir(source)
        except Exception:  # an invalid source id: the fork is saved whole
            return None
        log = self.get(src_dir, source)
        if log is None:
            return None
        try:
            log.header(parent)
        except CheckpointNotFound:
            return None
        return ForeignBase(self.ref(src_dir, source), parent), src_dir

    def add_dependent(self, source_dir: Path, dependent_ref: str) -> None:
        """Record that ``dependent_ref``'s log uses checkpoints of a thread in ``source_dir``."""
        line = (dependent_ref + "\n").encode()
        try:
            fd = os.open(source_dir / FORKS_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o644)
            try:
                os.write(fd, line)
                if self.fsync:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise unavailable(e, source_dir / FORKS_NAME) from e

    def dependents(self, source_dir: Path) -> list[str]:
        try:
            text = read_nofollow(source_dir / FORKS_NAME).decode(errors="replace")
        except FileNotFoundError:
            return []
        except OSError as e:
            raise unavailable(e, source_dir / FORKS_NAME) from e
        return list(dict.fromkeys(line for line in text.splitlines() if line))

    def release_dependents(self, source_dir: Path, locked: Any, *, going: Path | None = None) -> None:
        """Rewrite every log that uses a base in ``source_dir`` so it stands alone.

        ``locked(directory)`` is the store's per-directory lock (a context manager); the caller
        holds ``source_dir``'s, so a dependent in that directory (a thread whose id sanitises like
        the source's) is rewritten under it. ``going``: the log about to be deleted (not rewritten).
        """
        prefix = source_dir.name + "/"
        for ref in self.dependents(source_dir):
            name, _, log_file = ref.partition("/")
            directory = self.base_dir / name
            path = directory / log_file
            if path == going or not path.exists():
                continue
            with contextlib.nullcontext() if directory == source_dir else locked(directory):
                log = self._open(path, None)
                if any(b.thread.startswith(prefix) for b in log.foreign_bases()):
                    log.materialise_foreign_bases()
        with contextlib.suppress(FileNotFoundError):
            (source_dir / FORKS_NAME).unlink()

    def used_by_others(self, directory: Path, log: DeltaLog) -> set[str]:
        """The ids of ``log`` that other logs' forks and copies use as bases (from ``.tulip_nb_forks``)."""
        me = f"{directory.name}/{log.path.name}"
        used: set[str] = set()
        for ref in self.dependents(directory):
            name, _, log_file = ref.partition("/")
            path = self.base_dir / name / log_file
            if path == log.path or not path.exists():
                continue
            used.update(b.checkpoint_id for b in self._open(path, None).foreign_bases() if b.thread == me)
        return used

    def before_rewrite(self, directory: Path, log: DeltaLog, checkpoint: Checkpoint, locked: Any) -> None:
        """Before ``checkpoint`` is written again into ``log`` (a put of an existing id): when other
        logs' forks use that id as a base and the new record would change what they read (another
        state or time), they are rewritten to stand alone first (see :meth:`release_dependents`)."""
        cid = checkpoint.checkpoint_id
        if not self.dependents(directory) or cid not in self.used_by_others(directory, log):
            return
        try:
            content, header = log.base_content(cid)
            same = header.created_at == checkpoint.created_at and (
                state_of(content, where=str(log.path)).to_json_bytes() == checkpoint.state.to_json_bytes()
            )
        except CheckpointCorrupt:
            same = False
        if not same:
            self.release_dependents(directory, locked, going=log.path)

    COMPACT_MIN_BYTES = 1 << 20
    """:meth:`maybe_compact` rewrites a log only when it reclaims at least this much and half the file."""

    def maybe_compact(self, directory: Path, log: DeltaLog) -> bool:
        """Compact ``log`` (under its thread's lock) when what it would reclaim is worth a rewrite.

        What it reclaims is the dead bytes less the records other logs still use as bases (kept
        by the rewrite, so they never trigger one again). Whether it compacted: a rewrite that fails
        (a full disk, say) leaves the log as it was and is tried again at the next drop.
        """
        dead = log.dead_bytes
        if dead < self.COMPACT_MIN_BYTES or 2 * dead <= log.file_bytes:
            return False  # cheap test first: no need to read the forks of the thread
        keep = self.used_by_others(directory, log)
        gain = reclaimable(log, keep)
        if gain < self.COMPACT_MIN_BYTES or 2 * gain <= log.file_bytes:
            return False
        try:
            log.compact(keep_bases=keep)
        except (BackendUnavailable, CheckpointCorrupt):
            return False  # a failed rewrite leaves the log as it was; the drop itself is done
        return True

    # -- writes -----------------------------------------------------------------------------------
    def append(
        self,
        log: DeltaLog,
        checkpoint: Checkpoint,
        *,
        base: Any = AUTO,
    ) -> Header:
        return log.append_checkpoint(
            checkpoint.checkpoint_id,
            checkpoint.created_at,
            checkpoint.state,
            checkpoint.metadata,
            _parent(checkpoint.metadata),
            base=base,
            extra=checkpoint.extra,
        )


def _parent(metadata: Mapping[str, Any]) -> str | None:
    parent = metadata.get(PARENT_KEY)
    return parent if isinstance(parent, str) else None


def mirror_name(checkpoint_id: str) -> str:
    return safe_name(checkpoint_id) + ".json"


def has(log: DeltaLog, checkpoint_id: str) -> bool:
    """Whether ``checkpoint_id`` is a live checkpoint of ``log``."""
    try:
        log.header(checkpoint_id)
    except CheckpointNotFound:
        return False
    return True


def load_from(log: DeltaLog, thread_id: str, checkpoint_id: str) -> Checkpoint:
    state, header = log.load(checkpoint_id)
    return Checkpoint(checkpoint_id, thread_id, header.created_at, state, dict(header.metadata), dict(header.extra))
