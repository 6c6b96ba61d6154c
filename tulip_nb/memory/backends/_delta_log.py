"""The delta layout of the file store: one append-only log of checkpoints per thread.

A thread's checkpoints live in ``<thread dir>/.tulip_nb_log`` (not ``*.json``, so tulip's
FileCheckpointer never looks at it). Each save appends one record: a small header (id, time,
parent, message count, save metadata, which record it is a delta of) and a body that is either
the whole state (a *snapshot*) or a *delta* against a base checkpoint (:mod:`._delta_codec`):
the messages appended after those shared with the base, and the fields that changed. A save
costs the change; listing reads headers only; a load reads one chain back to a snapshot, which
is written often enough that the chain costs at most about twice the state itself.

The record format is in :mod:`._delta_frame` (framing, headers), the bodies in :mod:`._delta_codec`,
the write side (appends' I/O, prunes, compaction) in :mod:`._delta_compact`. Behaviour:

- A local ``base`` id names the nearest record with that id *before* this one (a checkpoint
  written again under the same id supersedes the older record, which stays a valid base).
- ``load_bytes`` is the cost of materialising the record (its chain's body bytes plus
  :data:`RECORD_COST` per record) and ``depth`` its chain length, so the snapshot rule is O(1).
- A record torn at the end of the file (a crash mid-append) is ignored and cut by the next append.
  A bad header in the middle is skipped with a warning (the scan resynchronises on the next
  frame); a bad body raises :class:`CheckpointCorrupt` (file, offset) when that record is needed.
- ``prune`` appends a ``PRUNE`` record: the checkpoints leave the listing but stay in the file as
  bases; :meth:`DeltaLog.compact` rewrites the log with only what live checkpoints (and the ids
  other logs still use) need, re-encoding deltas whose base goes away.
- A delta may have its base in another thread's log (a fork costs one small record); the
  ``resolver`` opens that log, and :meth:`DeltaLog.materialise_foreign_bases` removes the
  dependency (before the other thread is deleted or compacted).
- :attr:`DeltaLog.dead_bytes` (of :attr:`DeltaLog.file_bytes`): what pruned and superseded
  records, ``PRUNE`` records and skipped bytes take (O(1)).

Locking is the caller's: appends, prunes and compactions run under one exclusive lock per thread
(FileCheckpointer's ``flock`` on ``<dir>/.lock``); reads need none; threads may share an instance.
"""

from __future__ import annotations

import contextlib
import operator
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from tulip_nb.core import iso_offset
from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.fastload import gc_paused
from tulip_nb.core.state import AgentState
from tulip_nb.memory.backends import _delta_compact
from tulip_nb.memory.backends._delta_codec import Content, DecodeError, apply_chain, content_of_state, state_of
from tulip_nb.memory.backends._delta_frame import (
    FORMAT,
    NO_EXTRA,
    RECORD_COST,
    VERSION,
    ForeignBase,
    Frame,
    Gap,
    Header,
    Kind,
    file_ok,
    header_of,
    latest_chain,
    read_bodies,
    scan_records,
)
from tulip_nb.memory.backends._file_index import unavailable

__all__ = ["AUTO", "LOG_NAME", "RECORD_COST", "DeltaLog", "ForeignBase", "Header", "Kind", "Resolver"]

LOG_NAME = ".tulip_nb_log"


class _Auto:
    def __repr__(self) -> str:
        return "AUTO"


AUTO: Any = _Auto()
"""``base=AUTO``: a delta of the parent when it is in this log, else of the last record written."""

Resolver = Callable[[str], "DeltaLog"]
"""Opens the log of another thread (``ForeignBase.thread``) to read a fork's base from."""


class _Rec(NamedTuple):
    header: Header
    body_off: int
    body_len: int
    bcrc: int
    base_off: int | None  # the local base record (None: a snapshot, a foreign base, or missing)


class DeltaLog:
    """The checkpoints of one thread as an append-only log of snapshots and deltas.

    See the module docstring for the format. ``path`` is the log file (``<dir>/.tulip_nb_log``);
    the directory must exist. ``thread_id`` is recorded in a new log and checked on an existing
    one. Appends, :meth:`prune` and :meth:`compact` must be called under the caller's exclusive
    lock for the thread; reads need none and see what other processes appended.

    ``max_chain`` and ``load_factor`` are the snapshot rule: a delta is written only if the chain
    it ends has at most ``max_chain`` deltas and costs at most ``load_factor`` times the state
    (in body bytes plus :data:`RECORD_COST` per record).

    >>> import tempfile, datetime
    >>> from tulip_nb.core import AgentState, Message
    >>> log = DeltaLog(Path(tempfile.mkdtemp()) / LOG_NAME, fsync=False)
    >>> now = datetime.datetime.now(datetime.UTC)
    >>> s = AgentState(messages=[Message.user("hi")])
    >>> log.append_checkpoint("c1", now, s, {}, None).kind.name
    'SNAPSHOT'
    >>> s.messages.append(Message.assistant("hello"))
    >>> h = log.append_checkpoint("c2", now, s, {}, "c1")
    >>> h.kind.name, h.base, log.load("c2")[0] == s
    ('DELTA', 'c1', True)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = True,
        thread_id: str | None = None,
        resolver: Resolver | None = None,
        max_chain: int = 256,
        load_factor: float = 2.0,
        cache_size: int = 8,
    ) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.thread_id = thread_id
        self.resolver = resolver
        self.max_chain = max_chain
        self.load_factor = load_factor
        self.cache_size = cache_size
        self.bytes_read = 0
        """Bytes this instance has read from the file (for tests and benchmarks)."""
        self._lock = threading.RLock()
        self._rfd: int | None = None
        self._wfd: int | None = None
        self._cache: OrderedDict[Any, Content] = OrderedDict()
        self._cache_file: tuple[int, int] | None = None  # (device, inode) the cached offsets are of
        self._tried_cold = False
        self._warned: set[int] = set()
        self._reset()

    def __repr__(self) -> str:
        return f"DeltaLog({str(self.path)!r})"

    def close(self) -> None:
        """Close the file descriptors and drop the caches (the log can still be used after)."""
        with self._lock:
            self._reset()
            self._cache.clear()

    def __enter__(self) -> DeltaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        for fd in (getattr(self, "_rfd", None), getattr(self, "_wfd", None)):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- index --------------------------------------------------------------------------------
    def _reset(self) -> None:
        for fd in (self._rfd, self._wfd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._rfd = self._wfd = None
        self._stamp: tuple[int, int, int, int] | None = None
        self._recs: dict[int, _Rec] = {}
        self._current: dict[str, int] = {}  # id -> offset of its newest record
        self._dead: set[int] = set()  # pruned records (superseded ones are dead too)
        self._live_bytes = 0  # the FILE record and the records of live checkpoints
        self._good_end = 0
        self._last: int | None = None  # the last checkpoint record in the file
        self._sorted: list[Header] | None = []  # live headers by time; None: sort when asked
        self._file_thread: str | None = None

    def _refresh(self) -> None:
        """Bring the index up to the file: nothing, the new tail, or a new file (compacted)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._stamp is not None:
                self._reset()
                self._cache.clear()
            return
        except OSError as e:
            raise unavailable(e, self.path) from e
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return
        if self._stamp is None or self._stamp[:2] != stamp[:2] or st.st_size < self._good_end:
            self._reset()
            try:
                self._rfd = os.open(self.path, os.O_RDONLY)
                st = os.fstat(self._rfd)
            except FileNotFoundError:
                return
            except OSError as e:
                raise unavailable(e, self.path) from e
            stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp[:2] != self._cache_file:
                self._cache.clear()  # another file: an id may now name other content
                self._cache_file = stamp[:2]
        assert self._rfd is not None
        self._scan(self._rfd, self._good_end, st.st_size)
        self._stamp = stamp

    def _pread(self, fd: int, n: int, pos: int) -> bytes:
        try:
            data = os.pread(fd, n, pos)
        except OSError as e:
            raise unavailable(e, self.path) from e
        self.bytes_read += len(data)
        return data

    def _scan(self, fd: int, pos: int, size: int) -> None:
        """Index the records in ``[pos, size)``, reading frames and headers only.

        The last record is indexed only once its body checks out, so a torn tail (short, or
        stale bytes after a crash) never becomes the latest; the next append truncates it.
        """
        with gc_paused():  # thousands of headers, no cycles: no collections while they are built
            self._good_end = self._scan_items(fd, pos, size)

    def _scan_items(self, fd: int, pos: int, size: int) -> int:
        for item in scan_records(lambda at, n: self._pread(fd, n, at), pos, size):
            if isinstance(item, Gap):
                self._warn(item.offset, f"skipping {item.end - item.offset} unreadable bytes at offset {item.offset}")
            else:
                self._index(item)
            pos = item.end  # the items are contiguous: this is where the good part ends
        return pos

    def _warn(self, offset: int, message: str) -> None:
        if offset not in self._warned:
            self._warned.add(offset)
            warnings.warn(f"{message} of {self.path}", RuntimeWarning, stacklevel=5)

    def _index(self, f: Frame) -> None:
        try:
            obj = orjson.loads(f.header)
            if f.kind == Kind.FILE:
                self._live_bytes += f.end - f.offset
                self._file_thread = obj.get("thread_id")
                if file_ok(f.header, None) is None:
                    raise CheckpointCorrupt(f"not a version {VERSION} {FORMAT}: {obj!r}", path=str(self.path))
                if file_ok(f.header, self.thread_id) is None:
                    what = f"log belongs to thread {self._file_thread!r}"
                    raise CheckpointConflict(what, thread_id=self.thread_id, path=str(self.path))
            elif f.kind == Kind.PRUNE:
                self._kill(self._current[i] for i in obj["ids"] if i in self._current)
            elif f.kind in (Kind.SNAPSHOT, Kind.DELTA):
                self._add(header_of(obj, f.kind, f.offset, f.end - f.offset), f.body_length, f.body_crc)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            self._warn(f.offset, f"skipping record at offset {f.offset}: bad header ({type(e).__name__}: {e})")

    def _add(self, header: Header, body_len: int, bcrc: int) -> Header:
        base = header.base
        base_off = self._current.get(base) if isinstance(base, str) else None
        pos = header.offset
        self._recs[pos] = _Rec(header, pos + header.length - body_len, body_len, bcrc, base_off)
        old = self._current.get(header.checkpoint_id)
        if old is not None:
            self._kill((old,))  # superseded: still a base of what was written after it
        self._live_bytes += header.length
        self._current[header.checkpoint_id] = pos
        self._last = pos
        done = self._sorted
        if done is not None and (old is not None or (done and done[-1].created_at > header.created_at)):
            self._sorted = None  # not simply the newest: sort again when asked
        elif done is not None:
            done.append(header)  # the usual save (and scan): the listing stays sorted in O(1)
        return header

    def _kill(self, offsets: Iterable[int]) -> None:
        """Mark the records at ``offsets`` dead (pruned or superseded): out of the listing."""
        for off in offsets:
            if off not in self._dead:
                self._dead.add(off)
                self._live_bytes -= self._recs[off].header.length
        self._sorted = None

    # -- reading ------------------------------------------------------------------------------
    @property
    def file_bytes(self) -> int:
        """The length of the log's indexed part (a torn tail not counted); O(1) after a refresh."""
        with self._lock:
            self._refresh()
            return self._good_end

    @property
    def live_bytes(self) -> int:
        """Bytes of the live checkpoints' records (and the file's first record); O(1)."""
        with self._lock:
            self._refresh()
            return self._live_bytes

    @property
    def dead_bytes(self) -> int:
        """``file_bytes - live_bytes``: pruned and superseded records, ``PRUNE`` records, skipped
        bytes; an upper bound of what :meth:`compact` reclaims (it keeps ``keep_bases``)."""
        with self._lock:
            self._refresh()
            return self._good_end - self._live_bytes

    def headers(self) -> list[Header]:
        """Live checkpoints, oldest first (by ``created_at``, then by position in the log)."""
        with self._lock:
            self._refresh()
            return list(self._sorted if self._sorted is not None else self._sort())

    def _sort(self) -> list[Header]:
        live = [self._recs[o].header for o in sorted(self._current.values()) if o not in self._dead]
        live.sort(key=_created)  # stable: equal times stay in log order
        self._sorted = live
        return live

    def discard(self, header: Header) -> None:
        """Cut off ``header``'s record, the last one appended, under the caller's lock: a save that
        failed after its append is not acknowledged, so it does not stay. Anything else is refused."""
        with self._lock:
            _delta_compact.discard(self, header)

    @property
    def file_thread_id(self) -> str | None:
        """The thread id the log's first record names (None: an empty or unreadable log)."""
        with self._lock:
            self._refresh()
            return self._file_thread

    def latest(self) -> Header | None:
        """The newest live checkpoint (by ``created_at``, then position), or None; O(1) after a save."""
        with self._lock:
            self._refresh()
            live = self._sorted if self._sorted is not None else self._sort()
            return live[-1] if live else None

    def header(self, checkpoint_id: str) -> Header:
        """The live checkpoint ``checkpoint_id``; :class:`CheckpointNotFound` if there is none."""
        with self._lock:
            self._refresh()
            off = self._current.get(checkpoint_id)
            if off is None or off in self._dead:
                raise CheckpointNotFound(
                    "no such checkpoint in the log", checkpoint_id=checkpoint_id, path=str(self.path)
                )
            return self._recs[off].header

    def load(self, checkpoint_id: str | None = None) -> tuple[AgentState, Header]:
        """A fresh state of a live checkpoint (the latest by default) and its header.

        The latest, before anything else was read, takes no scan when the last record says it
        is the newest checkpoint (what every save by this class writes): the chain is followed
        by the offsets its headers record.
        """
        with self._lock:
            cold = None
            if checkpoint_id is None and self._stamp is None and not self._tried_cold:
                self._tried_cold = True
                cold = self._latest_unscanned()
            if cold is not None:
                content, header = cold
            else:
                found = self.header(checkpoint_id) if checkpoint_id is not None else self.latest()
                if found is None:
                    raise CheckpointNotFound("the log has no checkpoints", path=str(self.path))
                content, header = self._content(found.offset), found
            return state_of(content, where=f"{self.path}@{header.offset}", thread_id=self.thread_id), header

    def _latest_unscanned(self) -> tuple[Content, Header] | None:
        """The latest checkpoint without a scan, or None when the file's end does not vouch for it."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise unavailable(e, self.path) from e
        self._rfd = fd  # the next refresh scans (no stamp yet) and reopens
        st = os.fstat(fd)
        self._cache_file = (st.st_dev, st.st_ino)

        def read(at: int, n: int) -> bytes:
            return self._pread(fd, n, at)

        links = latest_chain(read, st.st_size, self.thread_id)
        if links is None:
            return None
        chain = [_Rec(h, f.end - f.body_length, f.body_length, f.body_crc, None) for h, f in links]
        start = self._foreign(chain[-1].header.base)[0] if isinstance(chain[-1].header.base, ForeignBase) else None
        chain.reverse()
        try:
            content = apply_chain(start, self._bodies(chain))
        except DecodeError as e:
            raise self._corrupt(chain[e.index], str(e)) from e
        self._remember(chain[-1].header.offset, content)  # the scan that follows keeps it: same offsets
        return content, chain[-1].header

    def base_content(self, checkpoint_id: str, created_at: str | None = None) -> tuple[Content, Header]:
        """The content of ``checkpoint_id``, pruned or not, for a log whose delta is based on it."""
        with self._lock:
            self._refresh()
            off = self._current.get(checkpoint_id)
            header = self._recs[off].header if off is not None else None
            if header is None or (created_at is not None and iso_offset(header.created_at) != created_at):
                what = "is gone" if header is None else "was replaced"
                raise CheckpointCorrupt(
                    f"fork base {what}", checkpoint_id=checkpoint_id, path=str(self.path), created_at=created_at
                )
            return self._content(off), header  # type: ignore[arg-type]

    def _content(self, off: int) -> Content:
        """The content of the record at ``off``: its chain back to a cached state or a snapshot."""
        chain: list[_Rec] = []
        start: Content | None = None
        at: int | None = off
        while True:
            assert at is not None
            hit = self._cache.get(at)
            if hit is not None:
                self._cache.move_to_end(at)
                start = hit
                break
            rec = self._recs[at]
            chain.append(rec)
            base = rec.header.base
            if rec.header.kind == Kind.SNAPSHOT:
                break
            if isinstance(base, ForeignBase):
                start = self._foreign(base)[0]
                break
            if rec.base_off is None:
                raise self._corrupt(rec, f"its base checkpoint {base!r} is missing from the log")
            at = rec.base_off
        chain.reverse()
        try:
            content = apply_chain(start, self._bodies(chain)) if chain else start
        except DecodeError as e:
            raise self._corrupt(chain[e.index], str(e)) from e
        assert content is not None
        self._remember(off, content)
        return content

    def _foreign(self, base: ForeignBase) -> tuple[Content, Header]:
        if self.resolver is None:
            raise CheckpointCorrupt(
                f"base in thread {base.thread!r} but no resolver", checkpoint_id=base.checkpoint_id, path=str(self.path)
            )
        key = (base.thread, base.checkpoint_id, base.created_at)
        log = self.resolver(base.thread)
        content, header = log.base_content(base.checkpoint_id, base.created_at)
        self._remember(key, content)
        return content, header

    def _remember(self, key: Any, content: Content) -> None:
        self._cache[key] = content
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _bodies(self, recs: list[_Rec]) -> list[bytes]:
        """The checked bodies of ``recs``, reading neighbouring ones in one ``pread``."""
        fd = self._rfd
        assert fd is not None
        bodies = read_bodies(lambda at, n: self._pread(fd, n, at), [(r.body_off, r.body_len, r.bcrc) for r in recs])
        for rec, body in zip(recs, bodies, strict=True):
            if body is None:
                raise self._corrupt(rec, "its body fails its checksum")
        return bodies  # type: ignore[return-value]

    def _corrupt(self, rec: _Rec, why: str) -> CheckpointCorrupt:
        h = rec.header
        return CheckpointCorrupt(
            f"bad record at offset {h.offset}: {why}", checkpoint_id=h.checkpoint_id, path=str(self.path)
        )

    # -- writing (under the caller's lock) ----------------------------------------------------
    def append_checkpoint(
        self,
        checkpoint_id: str,
        created_at: datetime,
        state: AgentState,
        metadata: Mapping[str, Any],
        parent: str | None,
        *,
        base: str | ForeignBase | None = AUTO,
        tokens: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Header:
        """Append ``state`` as checkpoint ``checkpoint_id``: a delta of ``base`` when the rule allows.

        ``base`` is :data:`AUTO` (the parent if it is in this log, else the last record), a
        checkpoint id of this log, a :class:`ForeignBase`, or None for a snapshot. Writing an id
        again supersedes its older record. ``extra`` (the checkpoint's envelope keys this version
        does not know) is kept verbatim in the header. Returns the new record's header; with
        ``fsync`` the record is on disk when this returns.
        """
        with self._lock:
            self._refresh()
            base_content, base_header, ref = self._base_for(base, parent)
            target, keep = content_of_state(state, base_content)
            new = Header(
                checkpoint_id,
                created_at,
                parent,
                metadata,
                len(target.messages),
                tokens,
                state_bytes=target.size,
                extra=extra or NO_EXTRA,
            )
            return _delta_compact.append(self, new, target, keep, ref, base_content, base_header)

    def append_fork(
        self,
        checkpoint_id: str,
        created_at: datetime,
        source: ForeignBase,
        metadata: Mapping[str, Any],
        parent: str | None = None,
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> Header:
        """Append a checkpoint whose state is ``source``'s (in another log): one small record.

        The new header takes ``metadata`` and ``extra``, not the source's.
        """
        with self._lock:
            self._refresh()
            content, header, ref = self._base_for(source, parent)
            assert content is not None and header is not None
            new = header._replace(
                checkpoint_id=checkpoint_id,
                created_at=created_at,
                parent_checkpoint_id=parent,
                metadata=metadata,
                extra=extra or NO_EXTRA,
            )
            return _delta_compact.append(self, new, content, len(content.messages), ref, content, header)

    def _base_for(
        self, base: str | ForeignBase | None, parent: str | None
    ) -> tuple[Content | None, Header | None, str | ForeignBase | None]:
        if base is AUTO:
            base = parent if parent is not None and parent in self._current else None
            if base is None and self._last is not None:
                base = self._recs[self._last].header.checkpoint_id
        if base is None:
            return None, None, None
        if isinstance(base, ForeignBase):
            content, header = self._foreign(base)
            return content, header, ForeignBase(base.thread, base.checkpoint_id, iso_offset(header.created_at))
        off = self._current.get(base)
        if off is None:
            raise CheckpointNotFound("base checkpoint is not in the log", checkpoint_id=base, path=str(self.path))
        return self._content(off), self._recs[off].header, base

    def prune(self, checkpoint_ids: Iterable[str]) -> int:
        """Drop checkpoints from the listing (one ``PRUNE`` record); returns how many were live.

        Their records stay in the file, as bases of later deltas and of other logs' forks, until
        :meth:`compact`.
        """
        return _delta_compact.prune(self, checkpoint_ids)

    def foreign_bases(self) -> list[ForeignBase]:
        """The checkpoints of other logs that records of this log are deltas of."""
        with self._lock:
            self._refresh()
            bases = (r.header.base for r in self._recs.values())
            return list(dict.fromkeys(b for b in bases if isinstance(b, ForeignBase)))

    def compact(self, *, keep_bases: Iterable[str] = ()) -> None:
        """Rewrite the log with the live checkpoints only (plus ``keep_bases``, pruned or not).

        Pass as ``keep_bases`` the ids other logs' forks are based on. A delta whose base goes
        away is re-encoded against its nearest kept ancestor (or as a snapshot); the rest is
        copied. The new file replaces the old atomically (fsynced, and its directory, if ``fsync``).
        :attr:`dead_bytes` says how much a compaction would reclaim at most.
        """
        _delta_compact.compact(self, keep_bases)

    def materialise_foreign_bases(self) -> None:
        """Rewrite the log so that no record depends on another log (before that one goes away)."""
        _delta_compact.materialise_foreign_bases(self)


_created = operator.attrgetter("created_at")
