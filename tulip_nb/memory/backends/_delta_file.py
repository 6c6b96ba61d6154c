"""The file store before the history model (``FileCheckpointer(layout="delta" | "tulip")``): kept to read
and convert stores it wrote (``tulip-nb convert``), and as the ``layout="tulip"`` writer until the
history layout projects every checkpoint. New stores use the history layout (:mod:`.file`).

One directory per thread on a local disk, readable by tulip.

``<base_dir>/<safe(thread_id)>/``, where ``safe`` keeps letters, digits, ``-`` and ``_`` and turns
every other character into ``_`` (so ``user/42:chat #1`` lives in ``user_42_chat__1/``). Two layouts:

- ``layout="delta"`` (the default): each save appends what changed to the thread's log
  ``.tulip_nb_log``, and the directory keeps one tulip envelope, the latest turn end, so tulip
  still resumes the thread (:mod:`._file_delta`). A save costs its change, not the history.
- ``layout="tulip"``: tulip's own layout, one JSON envelope ``<safe(checkpoint_id)>.json`` per
  checkpoint (each save rewrites the whole history).

Either instance reads both (a directory may hold a log and envelopes written by tulip or by the
other layout); the layout only decides how this instance writes. Each envelope is written to a
temp file, fsynced and renamed into place, so a crash never leaves a half-written checkpoint under
a real name; a log record torn by a crash is ignored. The latest checkpoint is the head of the
parent chain, then the newest ``created_at`` (a save chained to another is newer, whatever the
clocks said); there is no pointer file to go stale.

**With tulip.** ``expected_parent=`` (``Agent(strict_concurrency=True)``) is compare-and-swap that
protects tulip_nb writers only (an ``flock`` on ``<dir>/.lock``): tulip takes no lock, so its writes
are detected, not ordered. A tulip checkpoint a strict save would hide or overwrite raises
:class:`CheckpointConflict` naming it; one landing during the write warns and the next strict
save raises (:mod:`._file_foreign` says what is detected and what cannot be).

Better than tulip, while staying readable by it:

- two thread ids that sanitise to the same directory (``a#1`` and ``a_1``) never mix: each
  envelope's ``thread_id`` is checked;
- a thread id whose directory name would exceed the file system's limit gets a shortened name
  with a hash suffix instead of failing;
- a corrupt or truncated file raises :class:`CheckpointCorrupt` naming the file when asked for
  explicitly, and is skipped with a warning (never chosen) when finding the latest;
- ``expected_parent=`` is compare-and-swap across tulip_nb processes (see above), and detects
  what a writer that takes no lock (tulip) did meanwhile;
- finding the latest reads only the first bytes of files it has not seen before (or that another
  process replaced since), not every file; every write records the file's header in memory and
  in the persistent index, each checked against the file itself (see :mod:`._file_index`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, InvalidThreadId, UserError
from tulip_nb.core.keys import MIRROR_KEY
from tulip_nb.core.state import AgentState, MessageBlobCache
from tulip_nb.memory._envelope import decode_envelope, encode_envelope_parts
from tulip_nb.memory.backends import _file_foreign as foreign
from tulip_nb.memory.backends import _file_threads as threads
from tulip_nb.memory.backends._base import InTreeCheckpointer, newest_first, prepare_save_after
from tulip_nb.memory.backends._delta_log import AUTO
from tulip_nb.memory.backends._file_delta import DeltaLogs, has, is_turn_end, load_from, mirror_name
from tulip_nb.memory.backends._file_index import (
    Bad,
    Entry,
    append_index,
    index_line,
    inodes_in,
    read_entry,
    read_index,
    safe_name,
    stamp_of,
    unavailable,
    write_all,
)
from tulip_nb.memory.backends._file_safety import NOFOLLOW, fsync_dir, is_link, is_loop, read_nofollow
from tulip_nb.memory.checkpointer import (
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    new_checkpoint_id,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)

__all__ = ["DeltaFileCheckpointer", "safe_name"]


def _key(info: CheckpointInfo) -> tuple[datetime, str]:
    return info.created_at, info.checkpoint_id


class DeltaFileCheckpointer(InTreeCheckpointer):
    """Checkpoints as JSON files on a local disk (see the module docstring).

    ``expected_parent=`` is compare-and-swap that protects tulip_nb writers only: tulip takes no
    lock, so its writes are detected (a :class:`CheckpointConflict` naming the checkpoint), not
    ordered.

    >>> import asyncio, tempfile
    >>> from tulip_nb.core import AgentState, Message
    >>> cp = DeltaFileCheckpointer(base_dir=tempfile.mkdtemp())
    >>> cid = asyncio.run(cp.save(AgentState(messages=[Message.user("hi")]), "user/42"))
    >>> asyncio.run(cp.list_threads())
    ['user/42']
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] = ".tulip_checkpoints",
        *,
        fsync: bool = True,
        sign: bool = True,
        layout: Literal["delta", "tulip"] = "delta",
    ) -> None:
        if layout not in ("delta", "tulip"):
            raise UserError(f"DeltaFileCheckpointer layout must be 'delta' or 'tulip', got {layout!r}")
        self.base_dir = Path(base_dir)
        self._base = self.base_dir.resolve()  # a symlinked base_dir is followed once, here
        self.sign = sign
        self.fsync = fsync
        self.layout = layout
        self._logs = DeltaLogs(self._base, fsync=fsync)
        self._held = threading.local()  # the directories whose lock this thread holds
        # directory -> file name -> (inode of the file, its header or why it is unreadable)
        self._heads: dict[Path, dict[str, tuple[int, Entry]]] = {}
        self._heads_lock = threading.Lock()
        self._warned: set[tuple[Path, str]] = set()
        self._blobs = MessageBlobCache()
        self._foreign = foreign.ForeignWatch()  # what each thread held when last saved or read
        threads.clean_base(self._base)  # tombstones of deletes a crash interrupted

    def __repr__(self) -> str:
        return f"FileCheckpointer(base_dir={str(self.base_dir)!r}, layout={self.layout!r})"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            search=True,
            metadata_query=True,
            vacuum=True,
            branching=True,
            list_threads=True,
            list_with_metadata=True,
            persistent_checkpoint_ids=True,
        )

    # -- paths --------------------------------------------------------------------------------
    def thread_dir(self, thread_id: str) -> Path:
        """The directory that holds ``thread_id`` (shared with ids that sanitise alike)."""
        validate_thread_id(thread_id)
        name = safe_name(thread_id)
        path = self._base / name
        if not name or name.startswith(".") or path.parent != self._base:
            raise InvalidThreadId("thread_id resolves outside base_dir", thread_id=thread_id, path=str(path))
        if is_link(path):
            raise InvalidThreadId("the thread's directory is a symbolic link (never followed)", path=str(path))
        return path

    def checkpoint_path(self, thread_id: str, checkpoint_id: str) -> Path:
        validate_checkpoint_id(checkpoint_id, thread_id)
        return self.thread_dir(thread_id) / (safe_name(checkpoint_id) + ".json")

    # -- low-level I/O (sync; run in a worker thread) -----------------------------------------
    @contextlib.contextmanager
    def _locked(self, directory: Path, *, create: bool) -> Iterator[None]:
        held: set[Path] = self._held.__dict__.setdefault("dirs", set())
        fd = None if directory in held else threads.lock_fd(self, directory, create=create)
        if fd is None:
            yield  # held already by this thread, or nothing to lock: the directory does not exist
            return
        held.add(directory)
        try:
            yield
        finally:
            held.discard(directory)
            os.close(fd)  # closing releases the flock

    def _scan(self, directory: Path) -> dict[str, Entry]:
        """Headers of every checkpoint file in ``directory``, reading only new or replaced files."""
        leftovers: list[str] = []
        try:
            inodes = inodes_in(directory, leftovers)
            if leftovers:  # a delete, drop or copy a crash interrupted, or temp files of dead writers
                threads.settle(self, directory, leftovers)
                inodes = inodes_in(directory)  # after what the settle moved in or out
        except FileNotFoundError:
            with self._heads_lock:
                self._heads.pop(directory, None)
            return {}
        with self._heads_lock:
            first_look = directory not in self._heads
        if first_look:  # a new process: start from the persistent index instead of every head
            indexed = read_index(directory, inodes)
            with self._heads_lock:
                self._heads.setdefault(directory, {}).update(indexed)
        with self._heads_lock:
            known = self._heads.setdefault(directory, {})
            stale = [n for n, ino in inodes.items() if n not in known or known[n][0] != ino]
        fresh: dict[str, tuple[int, Entry]] = {}
        for name in stale:
            entry = read_entry(directory / name)
            if entry is not None:
                fresh[name] = (inodes[name], entry)
        with self._heads_lock:
            known = self._heads.setdefault(directory, {})
            known.update(fresh)
            for gone in [n for n in known if n not in inodes]:
                del known[gone]
            return {n: e for n, (_, e) in known.items()}

    def _infos(self, thread_id: str, directory: Path) -> list[tuple[str | None, CheckpointInfo]]:
        """(file name, info) of the thread's readable checkpoints, newest first.

        The name is None for a checkpoint in the thread's log; an envelope whose id is in the log
        is the log's mirror and is listed once, as the log's.
        """
        scanned = self._scan(directory)  # first: it finishes a delete a crash interrupted
        logged = self._logs.infos(directory, thread_id)
        in_log = {i.checkpoint_id for i in logged}
        out: list[tuple[str | None, CheckpointInfo]] = [(None, i) for i in logged]
        for name, entry in scanned.items():
            if isinstance(entry, Bad):
                self._warn_bad(directory / name, entry.reason)
            elif entry.thread_id == thread_id and entry.checkpoint_id not in in_log:
                out.append((name, entry))
        return foreign.listed(self, thread_id, directory, out)  # the parent chain first, then created_at

    def _latest_info(self, thread_id: str, directory: Path) -> tuple[str | None, CheckpointInfo] | None:
        """The thread's newest checkpoint (the parent chain first, then ``created_at``: see
        :mod:`._file_foreign`), reading only the log's latest header and the envelopes' headers."""
        found, _ = foreign.latest_scan(self, thread_id, directory)
        return found[0] if found is not None else None

    def _warn_bad(self, path: Path, reason: str) -> None:
        key = (path, reason)
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"skipping unreadable checkpoint file {path}: {reason}", RuntimeWarning, stacklevel=4)

    def _mark_bad(self, path: Path, reason: str) -> None:
        stamp = stamp_of(path)
        if stamp is not None:
            with self._heads_lock:
                self._heads.setdefault(path.parent, {})[path.name] = (stamp[0], Bad(reason))
        self._warn_bad(path, reason)

    def _read_checkpoint(self, path: Path, thread_id: str) -> Checkpoint:
        try:
            data = read_nofollow(path)
        except FileNotFoundError as e:
            raise CheckpointNotFound("checkpoint file is gone", thread_id=thread_id, path=str(path)) from e
        except OSError as e:
            if is_loop(e):
                raise CheckpointCorrupt("a symbolic link (never followed)", thread_id=thread_id, path=str(path)) from e
            raise unavailable(e, path) from e
        return decode_envelope(data, where=str(path), thread_id=thread_id)

    def _write_atomic(self, path: Path, data: bytes | list[bytes | bytearray]) -> None:
        """Write ``data`` (bytes, or chunks for one ``writev``) to a temp file, fsync, rename."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        chunks: list[bytes | bytearray] = [data] if isinstance(data, bytes) else data
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o644)
            try:
                write_all(fd, chunks)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            if self.fsync:  # the rename itself survives a power cut
                fsync_dir(path.parent)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise unavailable(e, path) from e

    def _record_write(self, path: Path, info: CheckpointInfo) -> None:
        """After writing ``path`` (under its directory's lock): keep every index of it.

        The one place a write reaches the in-process heads (keyed by the file's inode) and the
        persistent index (keyed by its stamp), so neither this process after another one replaced
        the file nor a fresh process ever trusts a header that is not the file's.
        """
        stamp = stamp_of(path)
        if stamp is None:
            return  # deleted already (a concurrent vacuum): the listing is the truth
        with self._heads_lock:
            self._heads.setdefault(path.parent, {})[path.name] = (stamp[0], info)
        append_index(path.parent, [index_line(path.name, stamp, info)])

    # -- sync implementations -----------------------------------------------------------------
    def _save_sync(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None,
        metadata: dict[str, Any] | None,
        expected_parent: str | None,
    ) -> str:
        cid = validate_checkpoint_id(checkpoint_id, thread_id) if checkpoint_id else new_checkpoint_id()
        directory = self.thread_dir(thread_id)
        with self._locked(directory, create=True):
            # the latest (chain first), it re-stamped at its effective time, the foreign envelopes;
            # with expected_parent, a foreign write this save would hide raises (see _file_foreign)
            latest, after, look = foreign.before_save(self, directory, thread_id, state, expected_parent)
            self._check_name_free(directory / mirror_name(cid), thread_id, cid)
            plan = prepare_save_after(after, thread_id, state, metadata, expected_parent, self._blobs, sign=self.sign)
            ckpt = Checkpoint(cid, thread_id, plan.created_at, state, plan.metadata)
            with foreign.saving(self, directory, ckpt, look, strict=expected_parent is not None):
                if self.layout == "tulip":
                    self._write_envelope(directory, ckpt)
                    return cid
                base: Any = AUTO
                if latest is None:  # a new thread: a fork of a thread in the delta layout shares its history
                    fork = self._logs.fork_base(plan.metadata, self.thread_dir)
                    if fork is not None:
                        base, source_dir = fork
                        self._logs.add_dependent(source_dir, self._logs.ref(directory, thread_id))
                elif latest[0] is not None:
                    base = None  # the latest is an envelope (tulip's): this record is a snapshot
                self._append_logged(directory, ckpt, base, mirror=is_turn_end(plan.metadata))
        return cid

    def _append_logged(self, directory: Path, ckpt: Checkpoint, base: Any, *, mirror: bool) -> None:
        """Append ``ckpt`` to its thread's log and, for a turn end, make it the tulip envelope.

        All or nothing: when the envelope cannot be written, the record is cut off again and the
        new envelope removed, so a failed save leaves the thread as it was.
        """
        log = self._logs.create(directory, ckpt.thread_id)
        header = self._logs.append(log, ckpt, base=base)
        if not mirror:
            return
        try:
            self._sync_mirror(directory, ckpt.thread_id, ckpt)
        except BaseException:
            with contextlib.suppress(Exception):
                self._unlink(directory / mirror_name(ckpt.checkpoint_id))
            log.discard(header)
            raise

    def _put_sync(self, ckpt: Checkpoint) -> None:
        directory = self.thread_dir(ckpt.thread_id)
        with self._locked(directory, create=True):
            self._scan(directory)
            self._put_locked(directory, ckpt)

    def _put_locked(self, directory: Path, ckpt: Checkpoint) -> None:
        """Write ``ckpt`` verbatim (its directory's lock is held), in this instance's layout."""
        cid, thread_id = ckpt.checkpoint_id, ckpt.thread_id
        self._check_name_free(directory / mirror_name(cid), thread_id, cid)
        if self.layout == "tulip":
            self._write_envelope(directory, ckpt)
            return
        log = self._logs.get(directory, thread_id)
        if log is not None:  # forks based on this id must not see it change
            self._logs.before_rewrite(directory, log, ckpt, lambda d: self._locked(d, create=False))
        self._append_logged(directory, ckpt, AUTO, mirror=True)

    def _write_envelope(self, directory: Path, ckpt: Checkpoint, *, mirror_of: str | None = None) -> None:
        """Write ``ckpt`` as a tulip envelope; ``mirror_of``: the log it mirrors (:data:`MIRROR_KEY`)."""
        cid, thread_id = ckpt.checkpoint_id, ckpt.thread_id
        meta = dict(ckpt.metadata)
        extra = {**ckpt.extra, MIRROR_KEY: mirror_of} if mirror_of else ckpt.extra
        parts = encode_envelope_parts(
            cid, thread_id, ckpt.created_at, ckpt.state, meta, extra or None, cache=self._blobs
        )
        path = directory / mirror_name(cid)
        self._write_atomic(path, parts)
        self._record_write(path, CheckpointInfo(cid, thread_id, ckpt.created_at, meta))

    def _mirrors(self, directory: Path, thread_id: str) -> dict[str, str]:
        """File name -> checkpoint id of the envelopes that mirror a checkpoint of the thread's log."""
        log = self._logs.get(directory, thread_id)
        if log is None:
            return {}
        return {
            name: e.checkpoint_id
            for name, e in self._scan(directory).items()
            if isinstance(e, CheckpointInfo) and e.thread_id == thread_id and has(log, e.checkpoint_id)
        }

    def _sync_mirror(
        self,
        directory: Path,
        thread_id: str,
        have: Checkpoint | None = None,
        *,
        dropping: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        """Make the thread's one tulip envelope its latest turn end (leaving ``dropping`` out).

        The new envelope is written before the old one goes, so a crash leaves one or two, never
        none while the log has a turn end; a checkpoint about to be dropped loses its envelope
        first (so it never outlives the log record as an envelope of its own).
        """
        log = self._logs.get(directory, thread_id)
        if log is None:
            return
        want = next(
            (h for h in reversed(log.headers()) if h.checkpoint_id not in dropping and is_turn_end(h.metadata)), None
        )
        mirrors = self._mirrors(directory, thread_id)
        rewritten = have is not None and want is not None and have.checkpoint_id == want.checkpoint_id
        if want is not None and (rewritten or mirror_name(want.checkpoint_id) not in mirrors):
            if have is not None and rewritten:  # a checkpoint written again: its envelope follows
                meta, extra = dict(want.metadata), dict(have.extra)
                ckpt = Checkpoint(have.checkpoint_id, thread_id, want.created_at, have.state, meta, extra)
            else:
                ckpt = load_from(log, thread_id, want.checkpoint_id)
            self._write_envelope(directory, ckpt, mirror_of=log.path.name)
        for name, cid in mirrors.items():
            if want is None or cid != want.checkpoint_id:
                self._unlink(directory / name)

    def check_mirror(self, thread_id: str) -> list[str]:
        """Problems with the thread's tulip envelope in the delta layout (none: tulip reads it right).

        The envelope must exist when the log has a turn end, decode, and hold exactly the log's
        state of that checkpoint; no other envelope may mirror the log. ``tulip-nb verify`` runs it.
        """
        directory = self.thread_dir(thread_id)
        log = self._logs.get(directory, thread_id)
        if log is None:
            return []
        want = next((h for h in reversed(log.headers()) if is_turn_end(h.metadata)), None)
        mirrors = self._mirrors(directory, thread_id)
        problems = [
            f"{cid}: stale tulip envelope {name}"
            for name, cid in mirrors.items()
            if want is None or cid != want.checkpoint_id
        ]
        for name, info in self._infos(thread_id, directory):
            if name is None or mirror_name(info.checkpoint_id) != name:
                continue
            with contextlib.suppress(CheckpointNotFound, CheckpointCorrupt):
                if self._read_checkpoint(directory / name, thread_id).extra.get(MIRROR_KEY) == log.path.name:
                    problems.append(
                        f"{info.checkpoint_id}: the log has lost this checkpoint's record (its tulip envelope"
                        f" {name} still holds it): the log was cut or edited"
                    )
        if want is None:
            return problems
        path = directory / mirror_name(want.checkpoint_id)
        try:
            got = self._read_checkpoint(path, thread_id)
        except (CheckpointNotFound, CheckpointCorrupt) as e:
            return [*problems, f"{want.checkpoint_id}: the tulip envelope {path.name} cannot be read: {e.message}"]
        ours = load_from(log, thread_id, want.checkpoint_id)
        if got.checkpoint_id != ours.checkpoint_id or got.state.to_json_bytes() != ours.state.to_json_bytes():
            problems.append(f"{want.checkpoint_id}: the tulip envelope {path.name} differs from the log")
        return problems

    def _unlink(self, path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise unavailable(e, path) from e
        with self._heads_lock:
            self._heads.get(path.parent, {}).pop(path.name, None)
        return True

    def _check_name_free(self, path: Path, thread_id: str, cid: str) -> None:
        """A file name shared by two threads (ids that sanitise alike) is never overwritten."""
        existing = self._scan_entry(path.parent, path.name)
        if isinstance(existing, CheckpointInfo) and existing.thread_id != thread_id:
            raise CheckpointConflict(
                "checkpoint id already used by another thread in the same directory",
                thread_id=thread_id,
                checkpoint_id=cid,
                path=str(path),
            )

    def _scan_entry(self, directory: Path, name: str) -> Entry | None:
        with self._heads_lock:
            known = self._heads.get(directory, {}).get(name)
        return known[1] if known else None

    def _load_sync(self, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        directory = self.thread_dir(thread_id)
        if checkpoint_id is not None:
            return self._load_by_id(directory, thread_id, validate_checkpoint_id(checkpoint_id, thread_id))
        for name, info in self._infos(thread_id, directory):
            if name is None:
                log = self._logs.get(directory, thread_id)
                if log is None:
                    continue
                try:
                    return load_from(log, thread_id, info.checkpoint_id)
                except CheckpointCorrupt as e:
                    self._warn_bad(log.path, e.message)
                    continue
                except CheckpointNotFound:
                    continue  # pruned under us
            path = directory / name
            try:
                ckpt = self._read_checkpoint(path, thread_id)
            except CheckpointCorrupt as e:
                self._mark_bad(path, e.message)
                continue
            except CheckpointNotFound:
                continue  # deleted under us; the next newest is the latest now
            if ckpt.thread_id == thread_id:
                return ckpt
        return None

    def _load_by_id(self, directory: Path, thread_id: str, checkpoint_id: str) -> Checkpoint:
        """The checkpoint's own file, read directly: no directory listing (O(1) in thread length).

        The envelope names its thread and checkpoint, so a file of another thread sharing the
        directory (ids that sanitise alike) or of an id that sanitises alike is not this one.
        """
        log = self._logs.get(directory, thread_id)
        if log is not None and has(log, checkpoint_id):
            return load_from(log, thread_id, checkpoint_id)
        path = directory / (safe_name(checkpoint_id) + ".json")
        try:
            ckpt = self._read_checkpoint(path, thread_id)
        except CheckpointNotFound:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id) from None
        except CheckpointCorrupt as e:
            raise CheckpointCorrupt(e.message, thread_id=thread_id, checkpoint_id=checkpoint_id, path=str(path)) from e
        if ckpt.thread_id != thread_id or ckpt.checkpoint_id != checkpoint_id:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        return ckpt

    async def close(self) -> None:
        """Close the open thread logs (nothing is lost: the next call opens them again)."""
        self._logs.close()

    # -- thread-level operations (in _file_threads) ------------------------------------------------
    def _delete_sync(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        return threads.delete_sync(self, thread_id, checkpoint_ids)

    def _all_infos(self) -> list[CheckpointInfo]:
        return threads.all_infos(self)

    def _copy_sync(self, source: str, dest: str) -> bool:
        return threads.copy_sync(self, source, dest)

    def _vacuum_sync(self, older_than_days: float) -> int:
        return threads.vacuum_sync(self, older_than_days)

    # -- async contract -----------------------------------------------------------------------
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        return await asyncio.to_thread(self._save_sync, state, thread_id, checkpoint_id, metadata, expected_parent)

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        await asyncio.to_thread(self._put_sync, validate_checkpoint(checkpoint))

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        return await asyncio.to_thread(self._load_sync, thread_id, checkpoint_id)

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        directory = self.thread_dir(thread_id)
        infos = await asyncio.to_thread(self._infos, thread_id, directory)
        return [info for _, info in (infos if limit is None else infos[:limit])]

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        ids = None if checkpoint_id is None else {validate_checkpoint_id(checkpoint_id, thread_id)}
        return bool(await asyncio.to_thread(self._delete_sync, thread_id, ids))

    async def _delete_checkpoints(self, thread_id: str, checkpoint_ids: set[str]) -> int:
        return await asyncio.to_thread(self._delete_sync, thread_id, set(checkpoint_ids))

    # -- capabilities (the scans are derived in InTreeCheckpointer) ---------------------------
    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        per: dict[str, list[CheckpointInfo]] = {}
        for info in await asyncio.to_thread(self._all_infos):
            per.setdefault(info.thread_id, []).append(info)
        return {t: newest_first(infos) for t, infos in per.items()}

    async def _relink_survivors(self, thread_id: str, infos: list[CheckpointInfo], dropped: set[str]) -> None:
        # Oldest first: each re-linked record is then a delta of its parent's new record, so the
        # log stays a forward chain (a compaction copies it rather than re-encoding it).
        await super()._relink_survivors(thread_id, newest_first(infos)[::-1], dropped)

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        return await asyncio.to_thread(self._copy_sync, source_thread_id, dest_thread_id)

    async def vacuum(self, older_than_days: float = 30) -> int:
        return await asyncio.to_thread(self._vacuum_sync, older_than_days)
