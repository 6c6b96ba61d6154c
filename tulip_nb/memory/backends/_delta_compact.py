"""The write side of the file store's delta log: appends, prunes, and rewrites (compaction).

:func:`append` encodes a checkpoint under the snapshot rule and appends it; :func:`prune` appends
a ``PRUNE`` record; both go through :func:`append_records`, one write that cuts off a torn tail
first.

:func:`compact` keeps the live checkpoints (and the ids other logs' forks use);
:func:`materialise_foreign_bases` removes every dependency on another log. Both write the new
file record by record to a temp file and rename it over the log, so a failed rewrite leaves the
log as it was. A kept delta's body is copied when its base is in the new file and its chain stays
within the snapshot rule; otherwise it is re-encoded against its nearest kept ancestor, or as a
snapshot. Headers (metadata, ``extra``, ...) are kept as they are.

These are the machinery behind :class:`~._delta_log.DeltaLog`'s writes: they take the log, under
its lock (and under the caller's exclusive lock for the thread), and keep its index's file state
(end, stamp, descriptors) up to date; the records' index entries are the log's to add.
"""

from __future__ import annotations

import contextlib
import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import orjson

from tulip_nb.core.errors import BackendUnavailable, CheckpointConflict
from tulip_nb.memory.backends._delta_codec import Content, choose_body, common_prefix
from tulip_nb.memory.backends._delta_frame import (
    NO_EXTRA,
    PREFIX,
    RECORD_COST,
    ForeignBase,
    Header,
    Kind,
    file_header,
    frame,
    frames,
    header_json,
)
from tulip_nb.memory.backends._file_index import unavailable, write_all

if TYPE_CHECKING:
    from tulip_nb.memory.backends._delta_log import DeltaLog, _Rec

__all__ = ["append", "append_records", "compact", "encode", "materialise_foreign_bases", "prune", "reclaimable"]

_BATCH = 256  # chunks per write while the new file is written


def append_records(log: DeltaLog, records: list[tuple[Kind, bytes, bytes]]) -> list[tuple[int, int]]:
    """Append records to ``log`` in one write (cutting off a torn tail first); their ``(offset, end)``.

    A new file gets its ``FILE`` record first. The index is the caller's to update.
    """
    fd = _writer(log)
    if log._good_end == 0:
        records = [(Kind.FILE, file_header(log.thread_id), b""), *records]
    chunks, spans = frames(records, log._good_end)
    end = spans[-1][1]
    try:
        if log._stamp is None or log._stamp[2] != log._good_end:
            os.ftruncate(fd, log._good_end)  # a torn tail (or a new file)
        write_all(fd, chunks)
        if log.fsync:
            os.fdatasync(fd)
        st = os.fstat(fd)
    except OSError as e:
        # Not acknowledged, so not kept: cut off whatever reached the file (best effort; if even
        # that fails, the record is a torn or complete tail that the next scan judges).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, log._good_end)
        log._stamp = None
        raise unavailable(e, log.path) from e
    if st.st_size != end:
        log._stamp = None
        raise CheckpointConflict("the log changed during an append: is the caller's lock held?", path=str(log.path))
    log._good_end = end
    log._stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if records[0][0] == Kind.FILE:
        log._live_bytes += spans[0][1] - spans[0][0]
        log._file_thread = log.thread_id  # as a scan of the new file would find it
    return [span for span, (kind, _, _) in zip(spans, records, strict=True) if kind != Kind.FILE]


def _writer(log: DeltaLog) -> int:
    """The log's append descriptor (creating the file, and opening its reader, if need be)."""
    if log._wfd is None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        try:
            try:
                fd = os.open(log.path, flags | os.O_EXCL, 0o644)
                if log.fsync:
                    _fsync_dir(log.path.parent)
            except FileExistsError:
                fd = os.open(log.path, flags, 0o644)
            if log._rfd is None:
                log._rfd = os.open(log.path, os.O_RDONLY)
        except OSError as e:
            raise unavailable(e, log.path) from e
        log._wfd = fd
    return log._wfd


def encode(
    log: DeltaLog, target: Content, keep: int, base: Content | None, base_header: Header | None
) -> tuple[Kind, bytes, int, int]:
    """``(kind, body, load_bytes, depth)`` of ``target``'s record under ``log``'s snapshot rule."""
    return choose_body(target, keep, base, base_header, max_chain=log.max_chain, load_factor=log.load_factor)


def append(
    log: DeltaLog,
    new: Header,
    target: Content,
    keep: int,
    ref: str | ForeignBase | None,
    base: Content | None,
    base_header: Header | None,
) -> Header:
    """Append checkpoint ``new`` (content ``target``) as a delta of ``ref`` when the rule allows.

    ``keep`` is how many leading messages ``target`` shares with ``base`` (``ref``'s content).
    Returns the header as indexed.
    """
    kind, body, cost, depth = encode(log, target, keep, base, base_header)
    ref = ref if kind == Kind.DELTA else None
    latest, base_at = log.latest(), log._current.get(ref) if isinstance(ref, str) else None
    newest = latest is None or new.created_at >= latest.created_at
    raw = header_json(new, kind, ref, cost, depth, base_at=base_at, newest=newest)
    pos, end = append_records(log, [(kind, raw, body)])[0]
    meta, size = MappingProxyType(dict(new.metadata)), end - pos
    extra = MappingProxyType(dict(new.extra)) if new.extra else NO_EXTRA
    header = new._replace(
        metadata=meta, extra=extra, kind=kind, base=ref, offset=pos, length=size, load_bytes=cost, depth=depth
    )
    log._add(header, len(body), zlib.crc32(body))
    log._remember(pos, target)
    return header


def prune(log: DeltaLog, checkpoint_ids: Iterable[str]) -> int:
    """Append a ``PRUNE`` record of the live ones of ``checkpoint_ids``; how many they are."""
    with log._lock:
        log._refresh()
        current, dead = log._current, log._dead
        ids = [i for i in dict.fromkeys(checkpoint_ids) if i in current and current[i] not in dead]
        if ids:
            append_records(log, [(Kind.PRUNE, orjson.dumps({"ids": ids}), b"")])
            log._kill(current[i] for i in ids)
        return len(ids)


def reclaimable(log: DeltaLog, keep_bases: Iterable[str] = ()) -> int:
    """About what :func:`compact` with ``keep_bases`` reclaims: the log's dead bytes less the dead
    records it keeps (the bases other logs use); O(len(keep_bases))."""
    with log._lock:
        log._refresh()
        kept = {log._current[i] for i in keep_bases if log._current.get(i) in log._dead}
        return log._good_end - log._live_bytes - sum(log._recs[o].header.length for o in kept)


def compact(log: DeltaLog, keep_bases: Iterable[str] = ()) -> None:
    """Rewrite ``log`` with its live checkpoints only (plus ``keep_bases``, pruned or not)."""
    with log._lock:
        log._refresh()
        if log._stamp is None:
            return  # no log
        keep = {o for o in log._current.values() if o not in log._dead}
        _rewrite(log, keep | {log._current[i] for i in keep_bases if i in log._current}, foreign=True)


def materialise_foreign_bases(log: DeltaLog) -> None:
    """Rewrite ``log`` so that no record depends on another log (if one does)."""
    with log._lock:
        log._refresh()
        if any(isinstance(r.header.base, ForeignBase) for r in log._recs.values()):
            _rewrite(log, set(log._current.values()), foreign=False)


def _rewrite(log: DeltaLog, keep: set[int], *, foreign: bool) -> None:
    """Write the records at ``keep`` (offsets) to a new file in order, then swap it in."""
    moved: dict[int, Header] = {}  # old offset -> the record's header in the new file
    _swap_in(log, _rewritten(log, keep, foreign, moved))
    cache = OrderedDict(
        (moved[k].offset if isinstance(k, int) else k, v)
        for k, v in log._cache.items()
        if not isinstance(k, int) or k in moved
    )
    log._reset()
    log._cache = cache  # same ids, same content, new offsets
    st = os.stat(log.path)
    log._cache_file = (st.st_dev, st.st_ino)
    log._refresh()


def _rewritten(log: DeltaLog, keep: set[int], foreign: bool, moved: dict[int, Header]) -> Iterator[bytes]:
    """The new file's bytes, record by record (filling ``moved``)."""
    newest: dict[str, int] = {}  # id -> old offset of its newest record written so far
    first = file_header(log.thread_id or log._file_thread)
    yield frame(Kind.FILE, first, b"")
    pos = PREFIX.size + len(first)
    top: datetime | None = None  # the newest live created_at written so far
    for old in sorted(keep):
        h = log._recs[old].header
        kind, body, ref, cost, depth = _reencode(log, log._recs[old], moved, newest, foreign)
        live = old not in log._dead
        base_at = moved[newest[ref]].offset if isinstance(ref, str) and kind == Kind.DELTA else None
        raw = header_json(
            h, kind, ref, cost, depth, base_at=base_at, newest=live and (top is None or h.created_at >= top)
        )
        if live and (top is None or h.created_at > top):
            top = h.created_at
        yield frame(kind, raw, body)
        yield body
        size = PREFIX.size + len(raw) + len(body)
        moved[old] = h._replace(kind=kind, base=ref, offset=pos, length=size, load_bytes=cost, depth=depth)
        newest[h.checkpoint_id] = old
        pos += size
    dead = [cid for cid, o in newest.items() if o in log._dead]
    if dead:
        yield frame(Kind.PRUNE, orjson.dumps({"ids": dead}), b"")


def _reencode(
    log: DeltaLog, rec: _Rec, moved: dict[int, Header], newest: dict[str, int], foreign: bool
) -> tuple[Kind, bytes, str | ForeignBase | None, int, int]:
    """``(kind, body, base, load_bytes, depth)`` of ``rec`` in the new file.

    The body is copied when its base is in the new file (or is foreign and may stay) and the
    chain stays within the rule; otherwise the record is re-encoded against its nearest kept
    ancestor, or as a snapshot.
    """
    h = rec.header
    ref: str | ForeignBase | None = None
    base_header: Header | None = None
    at: _Rec | None = rec if h.kind == Kind.DELTA else None
    while at is not None:
        if isinstance(at.header.base, ForeignBase):
            if foreign:
                ref, base_header = at.header.base, log._foreign(at.header.base)[1]
            break
        b = at.base_off
        if b is None:
            break
        if b in moved and newest.get(log._recs[b].header.checkpoint_id) == b:  # the id names it there
            ref, base_header = moved[b].checkpoint_id, moved[b]
            break
        at = log._recs[b]
    if h.kind == Kind.SNAPSHOT or (ref is not None and at is rec):  # the body can be copied
        assert h.kind == Kind.SNAPSHOT or base_header is not None
        body = log._bodies([rec])[0]
        cost = len(body) + RECORD_COST + (base_header.load_bytes if base_header else 0)
        depth = base_header.depth + 1 if base_header else 0
        within = depth <= log.max_chain and cost <= log.load_factor * (h.state_bytes + RECORD_COST)
        if h.kind == Kind.SNAPSHOT or within:
            return h.kind, body, ref if h.kind == Kind.DELTA else None, cost, depth
    if ref is None and newest and h.kind == Kind.DELTA:
        # No kept ancestor on its chain (every record of it superseded or dropped, as after a
        # prune re-links survivors newest first): a delta of its parent, or of the last record
        # written, when already in the new file, instead of a snapshot (the rule still decides).
        parent = h.parent_checkpoint_id
        ref = parent if parent is not None and parent in newest else next(reversed(newest))
        base_header = moved[newest[ref]]
    target = log._content(h.offset)
    base: Content | None = None
    if isinstance(ref, ForeignBase):
        base = log._foreign(ref)[0]
    elif ref is not None:
        base = log._content(newest[ref])
    keep = common_prefix(base.messages, target.messages) if base is not None else 0
    kind, body, cost, depth = encode(log, target, keep, base, base_header)
    return kind, body, ref if kind == Kind.DELTA else None, cost, depth


def _swap_in(log: DeltaLog, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to a temp file as they come, then rename it over the log (fsynced)."""
    path = log.path
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            batch: list[bytes | bytearray] = []
            for chunk in chunks:
                batch.append(chunk)
                if len(batch) >= _BATCH:
                    write_all(fd, batch)
                    batch = []
            write_all(fd, batch)
            if log.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if log.fsync:
            _fsync_dir(path.parent)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a failed rewrite leaves the log as it was
        if isinstance(e, OSError) and not isinstance(e, BackendUnavailable):
            raise unavailable(e, path) from e
        raise


def _fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def discard(log: DeltaLog, header: Header) -> None:
    """:meth:`DeltaLog.discard` (the log's lock is held)."""
    end = header.offset + header.length
    if end != log._good_end or log._wfd is None:
        raise CheckpointConflict("only the last record appended can be discarded", path=str(log.path))
    try:
        os.ftruncate(log._wfd, header.offset)
        if log.fsync:
            os.fdatasync(log._wfd)
    except OSError as e:
        raise unavailable(e, log.path) from e
    finally:
        log._reset()
        log._cache.clear()
