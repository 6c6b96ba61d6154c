"""A read-only reader of the delta layout, the file store before the history model (``tulip-nb convert``).

The previous release kept each thread's checkpoints in an append-only log beside one tulip
envelope (its latest turn end), or as one envelope per checkpoint (its ``layout="tulip"``). This
module reads such a store, never writes it: :class:`LegacyStore` lists every thread and
checkpoint the old engine listed and decodes each one, for
:mod:`~tulip_nb.memory.backends.file_convert` to move into the history layout.

**A log** (``<thread dir>/.tulip_nb_log``, or ``.tulip_nb_log-<16 hex>`` for a thread whose id is
not its directory's name) is a run of records (little-endian)::

    magic b"\\xd7\\x1b" | kind u8 | header length u32 | body length u32 | header crc32 u32 |
    body crc32 u32 | header (JSON) | body

The header crc covers the four fields before it and the header; the body crc the body. Kinds:
1 ``FILE`` (first: ``{"format": "tulip_nb delta log", "version": 1, "thread_id"}``), 2
``SNAPSHOT`` (the body is the state's JSON), 3 ``DELTA`` (the body is a delta against its
``base``), 4 ``PRUNE`` (``{"ids": [...]}``: those checkpoints leave the listing but stay bases). A
checkpoint's header holds ``checkpoint_id``, ``created_at``, ``parent``, ``metadata``, ``base``
(``null``; an id: the nearest earlier record of it in this log; or ``{"thread", "checkpoint_id",
"created_at"}``: a record of another thread's log, ``"<dir>/<log name>"``: a fork or a copy) and
``extra`` (envelope keys kept verbatim). A record written again under the same id supersedes the
older one. A delta body is ``u32 len(M) | M | R``: ``M`` the JSON array of the messages after the
first ``R["keep"]`` of the base's; ``R``'s ``set``/``append``/``drop``/``order``/``patch`` change
the other fields (``patch``: an object field changed key by key, the same ops inside).

**Crash leftovers**, read as the old engine finished them (nothing is changed on disk here):

- a torn last record (a crash mid-append: the file ends inside it) is not a checkpoint; bytes
  that are not a valid record between two valid ones are skipped with a warning; a whole record
  whose body fails its checksum is listed, and reading it is :class:`CheckpointCorrupt` (the old
  engine took one at the end of the log for a torn append, and lost an acknowledged save);
- a tombstone ``.tulip_nb_trash-<hex>/`` in a thread directory holding a ``.drop`` record (a
  committed drop: ``{"thread_id", "files", "logged"}``) means those checkpoints are gone; one
  holding ``.thread`` (a committed delete of a thread sharing the directory) means that thread is
  gone; one with neither was never committed;
- a staging directory ``.tulip_nb_copy-<...>/`` in a thread directory holding ``.thread`` (a
  committed copy) holds files of the directory (its log, its envelopes), which it would have
  moved in; without ``.thread``, or in ``base_dir``, it was never committed;
- the tombstones of deleted threads in ``base_dir`` hold nothing that lists.

A log or an envelope that is a symbolic link or hard-linked is never read.

>>> import tempfile
>>> LegacyStore(Path(tempfile.mkdtemp())).threads()
[]
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import warnings
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from pydantic import ValidationError

from tulip_nb.core import Message, iso_offset, parse_datetime
from tulip_nb.core.errors import CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.fastload import gc_paused, messages_from_json
from tulip_nb.core.keys import MIRROR_KEY
from tulip_nb.core.state import AgentState
from tulip_nb.memory._envelope import HEAD_BYTES, decode_envelope, info_from_head, read_head, state_from_obj
from tulip_nb.memory.backends._history_dir import NOFOLLOW, read_nofollow, safe_name
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.history import PROJECTION_KEY

__all__ = ["COPY_PREFIX", "DOT_FILES", "LOCK_NAME", "LOG_NAME", "TRASH_PREFIX", "Entry", "LegacyLog", "LegacyStore"]

LOG_NAME = ".tulip_nb_log"
DOT_FILES = (".tulip_nb_index", ".tulip_nb_forks")
"""The delta engine's bookkeeping in a thread directory (its header index, its fork records)."""
LOCK_NAME = ".lock"
TRASH_PREFIX = ".tulip_nb_trash-"
COPY_PREFIX = ".tulip_nb_copy-"
_FORMAT, _VERSION = "tulip_nb delta log", 1
_MAGIC = b"\xd7\x1b"
_PREFIX = struct.Struct("<2sBIIII")
_CRCED = 11  # the header crc covers magic, kind and both lengths, then the header
_FILE, _SNAPSHOT, _DELTA, _PRUNE = 1, 2, 3, 4
_U32 = struct.Struct("<I")
_OPEN_LOGS = 8


def log_name(directory: Path, thread_id: str) -> str:
    """The log file of ``thread_id`` in its directory (a hashed name when ids share the directory)."""
    if directory.name == thread_id:
        return LOG_NAME
    return f"{LOG_NAME}-{hashlib.sha256(thread_id.encode()).hexdigest()[:16]}"


def _plain(path: Path) -> bool:
    """A regular, singly linked file (links planted in the store are never read)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


# -- records -------------------------------------------------------------------------------------
class _Record(NamedTuple):
    info: CheckpointInfo
    extra: Mapping[str, Any]
    delta: bool
    base: str | tuple[str, str, str | None] | None  # local id | (log ref, id, created_at) | snapshot
    base_at: int | None  # index of the local base record
    body: bytes | None  # None: it fails its checksum (listed; its load says so)


def _frame_at(data: bytes, pos: int) -> tuple[int, bytes, int, int, int] | None:
    """``(kind, header, body length, body crc, end)`` of a frame whose header checks out at ``pos``."""
    if data[pos : pos + 2] != _MAGIC or len(data) - pos < _PREFIX.size:
        return None
    _, kind, hlen, blen, hcrc, bcrc = _PREFIX.unpack_from(data, pos)
    start = pos + _PREFIX.size
    header = data[start : start + hlen]
    if len(header) != hlen or zlib.crc32(header, zlib.crc32(data[pos : pos + _CRCED])) != hcrc:
        return None
    return kind, header, blen, bcrc, start + hlen + blen


def _frames(data: bytes, warn: Any) -> Iterator[tuple[int, bytes, bytes | None]]:
    """``(kind, header, body or None when its crc fails)`` of each record; a torn tail is left out."""
    pos, held = 0, None
    while pos < len(data):
        got = _frame_at(data, pos)
        if got is None:
            at = data.find(_MAGIC, pos + 1)
            while at >= 0 and _frame_at(data, at) is None:
                at = data.find(_MAGIC, at + 1)
            if at < 0:
                break  # a torn tail
            warn(f"skipping {at - pos} unreadable bytes at offset {pos}")
            pos = at
            continue
        kind, header, blen, bcrc, end = got
        if end > len(data):
            break  # its body goes past the end: a torn tail
        body = data[end - blen : end]
        if held is not None:
            yield held
        held = (kind, header, body if zlib.crc32(body) == bcrc else None)
        pos = end
    if held is not None:  # whole but failing its checksum: damaged, never taken for a torn append
        yield held


@dataclass(eq=False)
class _Content:
    messages: tuple[Message, ...]
    fields: dict[str, bytes]


def _key(name: str) -> bytes:
    return orjson.dumps(name)


def _messages(raw: Any) -> tuple[Message, ...]:
    try:
        return tuple(messages_from_json(raw))
    except ValidationError as e:
        raise ValueError(f"invalid messages: {e.errors(include_url=False)[:1]}") from e


def _snapshot(body: bytes) -> _Content:
    obj = orjson.loads(body)
    if type(obj) is not dict:
        raise ValueError("a snapshot that is not a JSON object")
    messages = _messages(obj.pop("messages", []))
    return _Content(messages, {k: orjson.dumps(v) for k, v in obj.items()})


def _apply(base: _Content, body: bytes) -> _Content:
    (mlen,) = _U32.unpack_from(body)
    raw, ops = orjson.loads(body[4 : 4 + mlen]), orjson.loads(body[4 + mlen :])
    keep = ops["keep"]
    if type(keep) is not int or not 0 <= keep <= len(base.messages) or type(raw) is not list:
        raise ValueError(f"keep={keep!r} of {len(base.messages)} base messages")
    fields = dict(base.fields)
    _apply_ops(fields, ops)
    return _Content(base.messages[:keep] + _messages(raw), fields)


def _apply_ops(fields: dict[str, bytes], ops: Mapping[str, Any]) -> None:
    for name in ops.get("drop", ()):
        fields.pop(name, None)
    for name, value in ops.get("set", {}).items():
        fields[name] = orjson.dumps(value)
    for name, items in ops.get("append", {}).items():
        fields[name] = fields[name][:-1] + b"," + orjson.dumps(items)[1:]
    for name, patch in ops.get("patch", {}).items():
        inner = {k: orjson.dumps(v) for k, v in orjson.loads(fields[name]).items()}
        _apply_ops(inner, patch)
        fields[name] = b"{" + b",".join([_key(k) + b":" + v for k, v in inner.items()]) + b"}"
    order = ops.get("order")
    if order is not None:
        reordered = {k: fields[k] for k in order}
        fields.clear()
        fields.update(reordered)


class LegacyLog:
    """One thread's log, read whole: its live checkpoints and each one's state.

    ``resolve(ref)`` opens the log another thread's ``"<dir>/<log name>"`` names (a fork's base).
    """

    def __init__(self, path: Path, resolve: Any, *, hidden: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.thread_id: str | None = None
        self._resolve = resolve
        self._records: list[_Record] = []
        self._current: dict[str, int] = {}
        self._dead: set[int] = set()
        self._cache: OrderedDict[int, _Content] = OrderedDict()
        if not _plain(path):
            raise CheckpointCorrupt("a thread log that is a link or not a plain file (never read)", path=str(path))
        with gc_paused():
            for kind, header, body in _frames(read_nofollow(path), self._warn):
                self._index(kind, header, body)
        for cid in hidden:  # a committed drop a crash interrupted
            if cid in self._current:
                self._dead.add(self._current[cid])

    def _warn(self, message: str) -> None:
        warnings.warn(f"{message} of {self.path}", RuntimeWarning, stacklevel=2)

    def _index(self, kind: int, header: bytes, body: bytes | None) -> None:
        try:
            obj = orjson.loads(header)
            if kind == _FILE:
                if obj.get("format") != _FORMAT or obj.get("version") != _VERSION:
                    raise CheckpointCorrupt(f"not a version {_VERSION} {_FORMAT}: {obj!r}", path=str(self.path))
                self.thread_id = obj.get("thread_id")
            elif kind == _PRUNE:
                self._dead.update(self._current[i] for i in obj["ids"] if i in self._current)
            elif kind in (_SNAPSHOT, _DELTA):
                self._add(obj, kind, body)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            self._warn(f"skipping a record with a bad header ({type(e).__name__}: {e})")

    def _add(self, obj: dict[str, Any], kind: int, body: bytes | None) -> None:
        raw_base, cid, meta = obj["base"], obj["checkpoint_id"], obj["metadata"]
        base: str | tuple[str, str, str | None] | None = None
        if isinstance(raw_base, dict):
            base = (str(raw_base["thread"]), str(raw_base["checkpoint_id"]), raw_base.get("created_at"))
        elif isinstance(raw_base, str) and kind == _DELTA:
            base = raw_base
        if not isinstance(cid, str) or not isinstance(meta, dict) or (kind == _DELTA and base is None):
            raise TypeError("checkpoint_id, metadata or base of the wrong type")
        when = parse_datetime(obj["created_at"])
        info = CheckpointInfo(cid, self.thread_id or "", when, meta)
        base_at = self._current.get(base) if isinstance(base, str) else None
        index = len(self._records)
        self._records.append(_Record(info, obj.get("extra") or {}, kind == _DELTA, base, base_at, body))
        old = self._current.get(cid)
        if old is not None:
            self._dead.add(old)  # superseded: still a base of what was written after it
        self._current[cid] = index

    def live(self) -> list[CheckpointInfo]:
        """The live checkpoints, oldest first (``created_at``, then their order in the log)."""
        out = [(i, self._records[i].info) for i in sorted(self._current.values()) if i not in self._dead]
        return [info for _, info in sorted(out, key=lambda p: (p[1].created_at, p[0]))]

    def _corrupt(self, index: int, why: str) -> CheckpointCorrupt:
        cid = self._records[index].info.checkpoint_id
        return CheckpointCorrupt(f"bad record #{index}: {why}", checkpoint_id=cid, path=str(self.path))

    def checkpoint(self, thread_id: str, checkpoint_id: str) -> Checkpoint:
        """A live checkpoint, decoded; :class:`CheckpointCorrupt` naming the record if it does not."""
        index = self._current.get(checkpoint_id)
        if index is None or index in self._dead:
            raise CheckpointNotFound("no such checkpoint in the log", checkpoint_id=checkpoint_id, path=str(self.path))
        content, rec = self._content(index), self._records[index]
        with gc_paused():
            rest = orjson.loads(b"{" + b",".join([_key(k) + b":" + v for k, v in content.fields.items()]) + b"}")
            state: AgentState = state_from_obj(rest, where=f"{self.path}#{index}", thread_id=thread_id)
        state.messages = list(content.messages)
        info = rec.info
        return Checkpoint(checkpoint_id, thread_id, info.created_at, state, dict(info.metadata), dict(rec.extra))

    def base_content(self, checkpoint_id: str, created_at: str | None) -> _Content:
        """The content of ``checkpoint_id`` (pruned or not) for another log's fork based on it."""
        index = self._current.get(checkpoint_id)
        rec = self._records[index] if index is not None else None
        moved = rec is not None and created_at is not None and iso_offset(rec.info.created_at) != created_at
        if rec is None or rec.body is None or moved:
            what = "is gone" if index is None else "was replaced or is damaged"
            raise CheckpointCorrupt(f"fork base {what}", checkpoint_id=checkpoint_id, path=str(self.path))
        assert index is not None
        return self._content(index)

    def _content(self, index: int) -> _Content:
        chain: list[int] = []
        at: int | None = index
        start: _Content | None = None
        while at is not None:
            hit = self._cache.get(at)
            if hit is not None:
                start = hit
                break
            rec = self._records[at]
            if rec.body is None:
                raise self._corrupt(at, "its body fails its checksum")
            if len(chain) > len(self._records):
                raise self._corrupt(index, "its chain of bases loops")
            chain.append(at)
            if not rec.delta:
                break
            if isinstance(rec.base, tuple):
                ref, cid, when = rec.base
                start = self._resolve(ref).base_content(cid, when)
                break
            if rec.base_at is None:
                raise self._corrupt(at, f"its base checkpoint {rec.base!r} is missing from the log")
            at = rec.base_at
        content = start
        for i in reversed(chain):
            rec = self._records[i]
            assert rec.body is not None
            try:
                content = _apply(content, rec.body) if rec.delta and content is not None else _snapshot(rec.body)
            except (struct.error, orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
                raise self._corrupt(i, f"it does not decode ({type(e).__name__}: {e})") from e
            self._cache[i] = content
            self._cache.move_to_end(i)
            while len(self._cache) > 16:
                self._cache.popitem(last=False)
        assert content is not None
        return content

    def foreign_refs(self) -> set[str]:
        """The other logs (``"<dir>/<log name>"``) this log's records are deltas of."""
        return {r.base[0] for r in self._records if isinstance(r.base, tuple)}


# -- the store -----------------------------------------------------------------------------------
class Entry(NamedTuple):
    """One checkpoint of the old store: ``kind`` is ``log`` (a record of its log), ``envelope`` (an
    envelope tulip_nb wrote: the tulip layout's, or a log's mirror whose record is gone) or
    ``tulip`` (an envelope tulip-agents wrote, no tulip_nb mark); ``path``: where it is."""

    kind: str
    path: Path
    info: CheckpointInfo


@dataclass
class _Dir:
    """What a thread directory holds once the crash leftovers are read as finished."""

    files: dict[str, Path] = field(default_factory=dict)
    dropped: dict[str, set[str]] = field(default_factory=dict)  # thread -> dropped checkpoint ids
    gone_files: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)  # threads deleted from a shared directory
    deleted_files: list[Path] = field(default_factory=list)  # what of them the delete had not moved yet


def _json(path: Path) -> Any:
    try:
        return orjson.loads(read_nofollow(path)) if _plain(path) else None
    except (OSError, orjson.JSONDecodeError):
        return None


class LegacyStore:
    """The threads of a store the delta engine wrote under ``base``, read only (module docstring)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._logs: OrderedDict[Path, tuple[tuple[int, int, int], LegacyLog]] = OrderedDict()

    def close(self) -> None:
        """Forget what was read (a later call reads the files again)."""
        self._logs.clear()

    # -- directories ----------------------------------------------------------------------------
    def thread_dirs(self) -> list[Path]:
        try:
            with os.scandir(self.base) as it:
                names = [e.name for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return []
        return [self.base / n for n in sorted(names)]

    def _dir(self, directory: Path) -> _Dir:
        out = _Dir()
        try:
            names = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return out
        for name in names:
            path = directory / name
            if name.startswith(COPY_PREFIX) and not os.path.islink(path) and os.path.isdir(path):
                if os.path.lexists(path / ".thread"):  # a committed copy: its files are the directory's
                    for inner in sorted(os.listdir(path)):
                        if _movable(inner):
                            out.files[inner] = path / inner
            elif name.startswith(TRASH_PREFIX) and not os.path.islink(path) and os.path.isdir(path):
                record = _json(path / ".drop")
                if isinstance(record, dict) and isinstance(record.get("thread_id"), str):
                    out.dropped.setdefault(record["thread_id"], set()).update(map(str, record.get("logged") or []))
                    out.gone_files.update(map(str, dict(record.get("files") or {})))
                elif _plain(path / ".thread"):
                    out.deleted.add(read_nofollow(path / ".thread").decode(errors="replace"))
            elif _movable(name) and name not in out.files:
                out.files[name] = path
        for name in out.gone_files:
            out.files.pop(name, None)
        for thread_id in out.deleted:
            mine = {log_name(directory, thread_id)} | {
                n for n, p in out.files.items() if n.endswith(".json") and _thread_of(p) == thread_id
            }
            out.deleted_files += [out.files.pop(n) for n in sorted(mine) if n in out.files]
        return out

    def deleted_files(self, directory: Path) -> list[Path]:
        """Files of threads whose delete from a shared directory a crash interrupted (they are gone)."""
        return self._dir(directory).deleted_files

    def logs_in(self, directory: Path) -> list[Path]:
        """The log files of the directory (those a committed copy staged included)."""
        return sorted(p for n, p in self._dir(directory).files.items() if n.startswith(LOG_NAME))

    def log(self, path: Path, hidden: frozenset[str] = frozenset()) -> LegacyLog:
        st = os.lstat(path)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        known = self._logs.get(path)
        if known is None or known[0] != stamp or hidden:
            known = (stamp, LegacyLog(path, self._resolve, hidden=hidden))
            if not hidden:
                self._logs[path] = known
                while len(self._logs) > _OPEN_LOGS:  # a log read whole holds its bodies: keep a few
                    self._logs.popitem(last=False)
        else:
            self._logs.move_to_end(path)
        return known[1]

    def _resolve(self, ref: str) -> LegacyLog:
        name, _, log = ref.partition("/")
        if not name or not log or "/" in log or name in (".", "..") or not log.startswith(LOG_NAME):
            raise CheckpointCorrupt(f"not a thread log reference: {ref!r}")
        found = {p.name: p for p in self.logs_in(self.base / name)}.get(log)
        if found is None:
            raise CheckpointCorrupt("the log a fork's base lives in is gone", path=str(self.base / name / log))
        return self.log(found)

    def base_logs(self, path: Path) -> set[Path]:
        """The logs the log at ``path`` uses as bases (forks and copies), itself left out."""
        out = set()
        for ref in self.log(path).foreign_refs():
            name, _, log = ref.partition("/")
            out.add(self.base / name / log)
        return out - {path}

    # -- threads and checkpoints ----------------------------------------------------------------
    def threads(self) -> list[str]:
        """Every thread with a checkpoint the old engine listed (a thread of the history's
        projection only is not one)."""
        found: set[str] = set()
        for directory in self.thread_dirs():
            d = self._dir(directory)
            for name, path in d.files.items():
                if name.startswith(LOG_NAME):
                    try:
                        log = self.log(path)
                    except (CheckpointCorrupt, OSError) as e:  # its thread's listing says so
                        warnings.warn(f"skipping thread log {path}: {e}", RuntimeWarning, stacklevel=2)
                        continue
                    if log.thread_id and log.live():
                        found.add(log.thread_id)
            found.update(e.info.thread_id for e in self._envelopes(directory, d) if e.info.thread_id not in d.deleted)
        return sorted(found)

    def _envelopes(self, directory: Path, d: _Dir) -> list[Entry]:
        out = []
        for name, path in d.files.items():
            if not name.endswith(".json") or not _plain(path):
                continue
            keys = self._keys(path)
            if keys is None:
                warnings.warn(f"skipping unreadable checkpoint file {path}", RuntimeWarning, stacklevel=3)
                continue
            if PROJECTION_KEY in keys:
                continue  # the history layout's own projection: not an old checkpoint
            try:
                info = info_from_head(keys, where=str(path))
            except CheckpointCorrupt as e:
                warnings.warn(f"skipping unreadable checkpoint file {path}: {e}", RuntimeWarning, stacklevel=3)
                continue
            ours = "tulip_nb_messages" in info.metadata or MIRROR_KEY in keys
            out.append(Entry("envelope" if ours else "tulip", path, info))
        return out

    def _keys(self, path: Path) -> dict[str, Any] | None:
        """An envelope's top-level keys beyond the state (its head when it holds them)."""
        try:
            fd = os.open(path, os.O_RDONLY | NOFOLLOW)
            try:
                head = read_head(os.read(fd, HEAD_BYTES))
            finally:
                os.close(fd)
            if head is not None and "metadata" in head:
                return head
            obj = orjson.loads(read_nofollow(path))
        except (OSError, orjson.JSONDecodeError):
            return None
        if not isinstance(obj, dict):
            return None
        obj.pop("state", None)
        return obj

    def thread_log(self, directory: Path, thread_id: str) -> LegacyLog | None:
        d = self._dir(directory)
        path = d.files.get(log_name(directory, thread_id))
        if path is None or thread_id in d.deleted:
            return None
        log = self.log(path, frozenset(d.dropped.get(thread_id, ())))
        if log.thread_id not in (None, thread_id):
            raise CheckpointCorrupt(f"the log belongs to thread {log.thread_id!r}", thread_id=thread_id, path=str(path))
        return log

    def entries(self, thread_id: str) -> list[Entry]:
        """The thread's checkpoints, oldest first; an envelope whose id is in the log is the log's
        mirror and is listed once, as the log's."""
        directory = self.base / safe_name(thread_id)
        d = self._dir(directory)
        if thread_id in d.deleted:
            return []
        log = self.thread_log(directory, thread_id)
        out = [Entry("log", log.path, i) for i in log.live()] if log is not None else []
        logged = {e.info.checkpoint_id for e in out}
        dropped = d.dropped.get(thread_id, set())
        out += [
            e
            for e in self._envelopes(directory, d)
            if e.info.thread_id == thread_id and e.info.checkpoint_id not in logged | dropped
        ]
        return sorted(out, key=lambda e: e.info.created_at)  # stable: the log's order among equal times

    def own_envelopes(self, directory: Path, thread_id: str | None = None) -> list[Entry]:
        """The envelopes tulip_nb's old layouts wrote in ``directory`` (of ``thread_id``, or of any
        thread): the tulip layout's, and the delta layout's mirrors."""
        d = self._dir(directory)
        return [
            e
            for e in self._envelopes(directory, d)
            if e.kind == "envelope" and (thread_id is None or e.info.thread_id == thread_id)
        ]

    def has_tulip_nb_envelopes(self, directory: Path) -> bool:
        return bool(self.own_envelopes(directory))

    def load(self, thread_id: str, entry: Entry) -> Checkpoint:
        """The checkpoint ``entry`` names, decoded (``CheckpointCorrupt`` / ``CheckpointNotFound``)."""
        if entry.kind == "log":
            log = self.thread_log(self.base / safe_name(thread_id), thread_id)
            if log is None:
                raise CheckpointNotFound("the thread's log is gone", thread_id=thread_id)
            return log.checkpoint(thread_id, entry.info.checkpoint_id)
        try:
            ckpt = decode_envelope(read_nofollow(entry.path), where=str(entry.path), thread_id=thread_id)
        except FileNotFoundError as e:
            raise CheckpointNotFound("checkpoint file is gone", thread_id=thread_id, path=str(entry.path)) from e
        except OSError as e:
            raise CheckpointCorrupt(f"cannot be read: {e}", thread_id=thread_id, path=str(entry.path)) from e
        return ckpt


def _thread_of(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
        try:
            head = read_head(os.read(fd, HEAD_BYTES))
        finally:
            os.close(fd)
    except OSError:
        return None
    got = head.get("thread_id") if head is not None else None
    return got if isinstance(got, str) else None


def _movable(name: str) -> bool:
    """A file of the old layout that holds checkpoints: a log or a (not hidden) envelope."""
    if name.endswith(".tmp"):
        return False
    return name.startswith(LOG_NAME) or (name.endswith(".json") and not name.startswith("."))
