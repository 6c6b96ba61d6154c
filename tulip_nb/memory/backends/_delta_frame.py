"""The record format of the file store's delta log: framing, checkpoint headers, and scanning.

The body codec (snapshots and deltas) is :mod:`._delta_codec`, the log itself :mod:`._delta_log`;
this module is pure: the reading helpers take a ``read(offset, n)`` function.

Records (little-endian)::

    magic b"\\xd7\\x1b" | kind u8 | header length u32 | body length u32 | header crc32 u32 |
    body crc32 u32 | header (compact JSON) | body

The header crc covers the frame fields before it and the header, so a scan checks every header
without reading a body; the body crc is checked when the body is read. Kinds: 1 ``FILE`` (the
first record: ``{"format": "tulip_nb delta log", "version": 1, "thread_id"}``), 2 ``SNAPSHOT``,
3 ``DELTA``, 4 ``PRUNE`` (``{"ids": [...]}``, no body). A checkpoint's header::

    {"checkpoint_id", "created_at" (ISO, +00:00), "parent", "messages" (count), "tokens",
     "metadata", "base" (null | id | {"thread", "checkpoint_id", "created_at"}),
     "state_bytes", "load_bytes", "depth", "base_at" (offset of a local base), "newest" (bool),
     "extra" (only when not empty: envelope keys kept verbatim)}
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from tulip_nb.core import iso_offset, parse_datetime

__all__ = [
    "FORMAT",
    "MAGIC",
    "PREFIX",
    "RECORD_COST",
    "VERSION",
    "ForeignBase",
    "Frame",
    "Gap",
    "Header",
    "Kind",
    "file_header",
    "file_ok",
    "frame",
    "frame_at",
    "frames",
    "header_json",
    "header_of",
    "last_frame",
    "latest_chain",
    "read_bodies",
    "scan_frames",
    "scan_records",
]

FORMAT = "tulip_nb delta log"
VERSION = 1
MAGIC = b"\xd7\x1b"  # 0x1b never occurs raw in JSON, so a resync rarely stops inside a body
PREFIX = struct.Struct("<2sBIIII")  # magic, kind, header length, body length, header crc, body crc
_CRCED = 11  # the header crc covers magic, kind and both lengths, then the header
RECORD_COST = 1024
"""Bytes a record costs to load beyond its body (read, checksum, decode): the snapshot rule's unit."""
_SPAN_GAP = 1 << 16  # bodies closer than this are read in one pread
_TAIL = 1 << 16  # where a cold load looks for the last record
_WINDOW = 16384  # a scan reads this much at a record's offset: its header and a few more, never a big body


class Kind(enum.IntEnum):
    """Record kinds (the byte after the magic)."""

    FILE = 1
    SNAPSHOT = 2
    DELTA = 3
    PRUNE = 4


@dataclass(frozen=True, slots=True)
class ForeignBase:
    """A base checkpoint in another thread's log; ``thread`` is whatever the resolver opens.

    ``created_at`` (ISO) pins the base: if the other log's checkpoint was since replaced under
    the same id, materialising raises ``CheckpointCorrupt`` instead of using other content.
    """

    thread: str
    checkpoint_id: str
    created_at: str | None = None


NO_EXTRA: Mapping[str, Any] = MappingProxyType({})


class Header(NamedTuple):
    """One checkpoint as a log's index knows it, without reading its state (immutable).

    A named tuple rather than a frozen dataclass: a scan builds one per record, and this is
    three times cheaper to build (10,000 headers: 3 ms instead of 10 ms).

    ``offset``/``length`` locate the record; ``state_bytes`` is about the size of the state's
    JSON, ``load_bytes`` what materialising it reads (its chain's bodies plus a fixed cost per
    record) and ``depth`` the number of deltas since the chain's snapshot. ``extra`` holds the
    envelope keys of the checkpoint that this version does not know, kept verbatim (read-only,
    like ``metadata``).
    """

    checkpoint_id: str
    created_at: datetime
    parent_checkpoint_id: str | None
    metadata: Mapping[str, Any]
    message_count: int
    tokens: int | None
    kind: Kind = Kind.DELTA
    base: str | ForeignBase | None = None
    offset: int = 0
    length: int = 0
    state_bytes: int = 0
    load_bytes: int = 0
    depth: int = 0
    extra: Mapping[str, Any] = NO_EXTRA


_KINDS = {k.value: k for k in Kind}


def _when(text: str) -> datetime:
    when = datetime.fromisoformat(text)  # always aware when this module wrote it
    return when if when.tzinfo is not None else parse_datetime(when)


def file_header(thread_id: str | None) -> bytes:
    return orjson.dumps({"format": FORMAT, "version": VERSION, "thread_id": thread_id})


def header_json(
    h: Header, kind: Kind, base: str | ForeignBase | None, load_bytes: int, depth: int, **changes: Any
) -> bytes:
    """The header record of checkpoint ``h`` (with ``changes`` to its other fields)."""
    ref: Any = base if kind == Kind.DELTA else None
    if isinstance(ref, ForeignBase):
        ref = {"thread": ref.thread, "checkpoint_id": ref.checkpoint_id, "created_at": ref.created_at}
    obj = {
        "checkpoint_id": h.checkpoint_id,
        "created_at": iso_offset(h.created_at),
        "parent": h.parent_checkpoint_id,
        "messages": h.message_count,
        "tokens": h.tokens,
        "metadata": dict(h.metadata),
        "base": ref,
        "state_bytes": h.state_bytes,
        "load_bytes": load_bytes,
        "depth": depth,
    }
    if h.extra:
        obj["extra"] = dict(h.extra)
    obj.update(changes)
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


def header_of(obj: dict[str, Any], kind: int, offset: int, length: int) -> Header:
    """A checkpoint header from its parsed JSON (``KeyError``/``TypeError``/``ValueError`` if bad)."""
    raw_base = obj["base"]
    base: str | ForeignBase | None = None
    if isinstance(raw_base, dict):
        base = ForeignBase(str(raw_base["thread"]), str(raw_base["checkpoint_id"]), raw_base.get("created_at"))
    elif isinstance(raw_base, str) and kind == Kind.DELTA:
        base = raw_base
    cid, parent, meta, tokens = obj["checkpoint_id"], obj["parent"], obj["metadata"], obj["tokens"]
    extra = obj.get("extra")
    kind = _KINDS[kind]
    if not isinstance(cid, str) or not isinstance(meta, dict) or (parent is not None and not isinstance(parent, str)):
        raise TypeError("checkpoint_id, parent or metadata of the wrong type")
    if extra is not None and not isinstance(extra, dict):
        raise TypeError("extra of the wrong type")
    if kind == Kind.DELTA and base is None:
        raise TypeError("a delta without a base")
    return Header(
        cid,
        _when(obj["created_at"]),
        parent,
        MappingProxyType(meta),
        int(obj["messages"]),
        None if tokens is None else int(tokens),
        kind,
        base,
        offset,
        length,
        int(obj["state_bytes"]),
        int(obj["load_bytes"]),
        int(obj["depth"]),
        MappingProxyType(extra) if extra else NO_EXTRA,
    )


def frame(kind: int, header: bytes, body: bytes | bytearray) -> bytes:
    """A record's fixed-size prefix followed by its header (the body follows that)."""
    lengths = struct.pack("<2sBII", MAGIC, kind, len(header), len(body))
    hcrc = zlib.crc32(header, zlib.crc32(lengths))
    return lengths + struct.pack("<II", hcrc, zlib.crc32(body)) + header


def frames(records: list[tuple[Kind, bytes, bytes]], pos: int) -> tuple[list[bytes | bytearray], list[tuple[int, int]]]:
    """The chunks to write for ``(kind, header, body)`` records appended at ``pos``, and their spans."""
    chunks: list[bytes | bytearray] = []
    spans = []
    for kind, header, body in records:
        chunks += [frame(kind, header, body), body]
        spans.append((pos, pos + PREFIX.size + len(header) + len(body)))
        pos = spans[-1][1]
    return chunks, spans


class Frame(NamedTuple):
    """A record whose prefix and header check out (its body is checked when read)."""

    offset: int
    kind: int
    header: bytes
    body_length: int
    body_crc: int
    end: int


class Gap(NamedTuple):
    """Unreadable bytes between two valid records (a bad record in the middle of a log)."""

    offset: int
    end: int


def scan_frames(read: Callable[[int, int], bytes], pos: int, size: int) -> Iterator[Frame | Gap]:
    """The records in ``[pos, size)`` of a log, reading prefixes and headers only.

    ``read(offset, n)`` reads the file. Bytes that are not a valid frame are a :class:`Gap` if a
    valid frame follows them, else a torn tail, where the scan stops, as it does at a record whose
    body goes past ``size``: the last item's end is where the good part of the file ends.
    """
    frame_at = _Window(read).frame_at
    while pos < size:
        got = frame_at(pos, size)
        if got is None:
            resume = _resync(read, frame_at, pos + 1, size)
            if resume is None:
                return
            yield Gap(pos, resume)
            pos = resume
            continue
        if got.end > size:
            return
        yield got
        pos = got.end


def scan_records(read: Callable[[int, int], bytes], pos: int, size: int) -> Iterator[Frame | Gap]:
    """:func:`scan_frames`, but the last record only once its body checks out.

    So a torn tail (short, or stale bytes after a crash) is never a record: the items are
    contiguous, and the last one's end is where the good part of the file ends.
    """
    held: list[Frame | Gap] = []  # the last frame so far and the gaps after it
    for item in scan_frames(read, pos, size):
        if isinstance(item, Gap) and not held:
            yield item
        elif isinstance(item, Gap):
            held.append(item)
        else:
            yield from held
            held = [item]
    if held:
        last = held[0]
        assert isinstance(last, Frame)
        blen = last.body_length
        if not blen or zlib.crc32(read(last.end - blen, blen)) == last.body_crc:
            yield from held


class _Window:
    """A scan's reads: ``_WINDOW`` bytes at a time, from the offset of a record not yet read."""

    def __init__(self, read: Callable[[int, int], bytes]) -> None:
        self.read, self.start, self.data = read, 0, b""

    def frame_at(self, pos: int, size: int) -> Frame | None:
        data, off = self.data, pos - self.start
        if off < 0 or off + PREFIX.size > len(data):
            data, off = self._load(pos, _WINDOW), 0
        if data[off : off + 2] != MAGIC or len(data) - off < PREFIX.size:
            return None
        _, kind, hlen, blen, hcrc, bcrc = PREFIX.unpack_from(data, off)
        if pos + PREFIX.size + hlen > size:
            return None
        if off + PREFIX.size + hlen > len(data):
            data, off = self._load(pos, max(PREFIX.size + hlen, _WINDOW)), 0
        header = data[off + PREFIX.size : off + PREFIX.size + hlen]
        if zlib.crc32(header, zlib.crc32(data[off : off + _CRCED])) != hcrc:
            return None
        return Frame(pos, kind, header, blen, bcrc, pos + PREFIX.size + hlen + blen)

    def _load(self, pos: int, n: int) -> bytes:
        self.start, self.data = pos, self.read(pos, n)
        return self.data


def file_ok(header: bytes, thread_id: str | None) -> dict[str, Any] | None:
    """The parsed ``FILE`` header if it is this format and version, for ``thread_id``; else None."""
    meta = orjson.loads(header)
    if type(meta) is not dict or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        return None
    return meta if thread_id is None or meta.get("thread_id") in (None, thread_id) else None


def latest_chain(
    read: Callable[[int, int], bytes], size: int, thread_id: str | None
) -> list[tuple[Header, Frame]] | None:
    """The chain of the latest checkpoint, newest first, found from the file's end without a scan.

    Only when the last record says it was the newest when written (``"newest": true``) and every
    link's ``base_at`` offset holds the base it names; None otherwise (then scan the log).
    """
    found, first = last_frame(read, size), frame_at(read, 0, size)
    if found is None or first is None or first.kind != Kind.FILE or file_ok(first.header, thread_id) is None:
        return None
    chain: list[tuple[Header, Frame]] = []
    f: Frame | None = found
    want = None
    while f is not None:
        obj = orjson.loads(f.header)
        if f.kind not in (Kind.SNAPSHOT, Kind.DELTA) or (want is None and obj.get("newest") is not True):
            return None
        h = header_of(obj, f.kind, f.offset, f.end - f.offset)
        if want is not None and h.checkpoint_id != want:
            return None
        chain.append((h, f))
        if h.kind == Kind.SNAPSHOT or isinstance(h.base, ForeignBase):
            return chain
        at, want = obj.get("base_at"), h.base
        f = frame_at(read, at, size) if type(at) is int and 0 < at < f.offset else None
    return None


def last_frame(read: Callable[[int, int], bytes], size: int) -> Frame | None:
    """The record that ends the file, if it starts in its last :data:`_TAIL` bytes."""
    start = max(0, size - _TAIL)
    tail = read(start, size - start)
    at = tail.rfind(MAGIC)
    while at >= 0:
        f = frame_at(read, start + at, size)
        if f is not None and f.end == size:
            return f
        at = tail.rfind(MAGIC, 0, at)
    return None


def read_bodies(read: Callable[[int, int], bytes], spans: list[tuple[int, int, int]]) -> list[bytes | None]:
    """The bodies at ``(offset, length, crc)``, None where the crc fails; neighbours in one read."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    out: list[bytes | None] = [None] * len(spans)
    i = 0
    while i < len(order):
        j, start = i, spans[order[i]][0]
        end = start + spans[order[i]][1]
        while j + 1 < len(order) and spans[order[j + 1]][0] - end <= _SPAN_GAP:
            j += 1
            end = max(end, spans[order[j]][0] + spans[order[j]][1])
        data = read(start, end - start)
        for k in order[i : j + 1]:
            off, length, crc = spans[k]
            body = data[off - start : off - start + length]
            out[k] = body if len(body) == length and zlib.crc32(body) == crc else None
        i = j + 1
    return out


def frame_at(read: Callable[[int, int], bytes], pos: int, size: int) -> Frame | None:
    """The valid frame at ``pos`` of a file of ``size`` bytes, or None."""
    return _Window(read).frame_at(pos, size)


def _resync(
    read: Callable[[int, int], bytes], frame_at: Callable[[int, int], Frame | None], pos: int, size: int
) -> int | None:
    """The offset of the next valid frame at or after ``pos``, or None."""
    rest = read(pos, size - pos)
    at = rest.find(MAGIC)
    while at >= 0:
        if frame_at(pos + at, size) is not None:
            return pos + at
        at = rest.find(MAGIC, at + 1)
    return None
