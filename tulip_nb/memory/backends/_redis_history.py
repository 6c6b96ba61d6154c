"""The history model (:mod:`tulip_nb.memory.history`) on Redis, with tulip's keys as its projection.

The keys, the row format and the Lua scripts: :mod:`._redis_layout`.

**Writes.** Every read-modify-write (save, copy, rewrite, delete) WATCHes the version key (and
the thread's tulip index key), reads what it needs, and writes everything (entries, reference
counts, rows, tulip's keys) in one ``MULTI``/``EXEC`` that also INCRs the version; a concurrent
write makes ``EXEC`` fail and the body runs again. So writers are serialised store-wide, as
SQLite's ``BEGIN IMMEDIATE`` serialises the file store's: entries are shared between threads
(a fork or copy points at them), and a delete of one thread may collect an entry another writer
is about to reference; with one version key no such write can commit on a stale read.
Reference-count walks run server side (a Lua script queued in the same ``EXEC``).

**Loads** are one Lua script (atomic, one round trip): the row, the stored fields of its patch
chain, and its history walked from the head entry by the parent links, server side. Every
entry is re-hashed against its id and the row's digest is checked: a flipped bit is
:class:`~tulip_nb.core.errors.CheckpointCorrupt`, never an older state.

**tulip's keys** (:mod:`._kv_projection`) are written in the same ``EXEC``: the latest turn end
(or every checkpoint) as ``<tid>:<cid>``, ``<tid>:latest`` and the ``<tid>:_checkpoints`` index,
which also keeps tulip's own checkpoints (index entries naming no row: a tulip agent's turns).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Literal, TypeVar

import orjson

from tulip_nb.core import iso_offset
from tulip_nb.core.errors import (
    BackendUnavailable,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
    TulipNBError,
)
from tulip_nb.core.fastload import gc_paused
from tulip_nb.core.state import MessageBlobCache, state_json_parts
from tulip_nb.memory._pools import PerLoop
from tulip_nb.memory.backends import _kv_projection as projection
from tulip_nb.memory.backends._history_common import newest
from tulip_nb.memory.backends._kv import (
    Copy,
    Delete,
    IndexEntry,
    Op,
    Put,
    decode_record,
    encode_record,
    index_key,
    parse_index,
    record_key,
    set_record_metadata,
)
from tulip_nb.memory.backends._redis_layout import (
    EPOCH,
    LOAD,
    RELEASE,
    ROOT,
    Head,
    Keys,
    Queue,
    meta_bytes,
    micros,
    parse_head,
)
from tulip_nb.memory.backends._redis_verify import Blobs, Known, Verifier
from tulip_nb.memory.backends.redis import HISTORY_NAMESPACE, RedisBackend
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.history import (
    HistoryStore,
    MessageChain,
    RewritePlanFn,
    Row,
    RowWrite,
    SavePlanFn,
    StoredCheckpoint,
    fields_hash,
    row_digest,
)
from tulip_nb.memory.rest_delta import Parts, encode, pack, parts_of_json

try:
    from redis.exceptions import WatchError
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("the Redis history store needs the 'redis' package: pip install 'tulip_nb[redis]'") from e

__all__ = ["RedisHistory"]

T = TypeVar("T")
_MAX_RETRIES = 1000
_CACHED_THREADS = 64
Projection = Literal["latest", "every"]


@dataclass
class _View:
    """What a write transaction read of one thread: its rows' headers, tulip's index."""

    thread_id: str
    heads: dict[str, Head]
    broken: dict[str, Row]
    """Rows whose header cannot be read (listed with no metadata, their order's time)."""
    scores: dict[str, int]
    index: list[IndexEntry]

    @property
    def ids(self) -> set[str]:
        return set(self.scores)

    def rows(self) -> list[Row]:
        out = [Row(self.thread_id, h.cid, h.created_at, orjson.loads(h.meta), h.n) for h in self.heads.values()]
        return sorted([*out, *self.broken.values()], key=lambda r: (r.created_at, r.checkpoint_id), reverse=True)

    def foreign(self) -> list[IndexEntry]:
        return projection.foreign(self.index, self.ids)


_MARK = b"\x00tulip_nb-messages\x00"
"""Where a record's messages go (JSON text never holds a raw NUL)."""


def _record_parts(row: Row, fields_bytes: bytes) -> tuple[bytes, bytes]:
    """tulip's record of a row, around its messages: what comes before them and after them (the
    state's other fields, from their canonical bytes, and the three envelope keys)."""
    tail = b"]}" if fields_bytes == b"{}" else b"]," + fields_bytes[1:]
    whole = encode_record(b'{"messages":[' + _MARK + tail, row.checkpoint_id, row.created_at, dict(row.metadata))
    pre, _, post = whole.partition(_MARK)
    return pre, post


def _put_heads(queue: Queue, key: str, heads: Mapping[str, Head]) -> None:
    """Queue the write of row headers (none: nothing)."""
    if heads:
        values = {c: h.encode() for c, h in heads.items()}
        queue.add("hset", key, mapping=values)


def _entry(row: Row) -> IndexEntry:
    return IndexEntry(row.checkpoint_id, row.created_at, dict(row.metadata))


def _info(thread_id: str, e: IndexEntry) -> CheckpointInfo:
    return CheckpointInfo(e.checkpoint_id, thread_id, e.created_at, dict(e.metadata))


class RedisHistory(HistoryStore):
    """The history store on Redis (see the module docstring) over a :class:`RedisBackend`.

    ``project``: what of each thread is written as tulip's keys in the same transaction:
    ``"latest"`` (the latest turn end), ``"every"`` (every checkpoint) or None (nothing).
    """

    def __init__(self, backend: RedisBackend, *, project: Projection | None = "latest") -> None:
        if "\x00" in backend.prefix:
            raise ValueError(
                "RedisHistory: the key prefix must not contain NUL (the history's namespace starts with it)"
            )
        self.backend = backend
        self.project = project
        self.keys = Keys(backend.prefix + HISTORY_NAMESPACE)
        self.where = f"redis {backend.url} prefix {backend.prefix!r}"
        self._verify = Verifier(self.where)
        # thread -> (checkpoint id, fields hash, parts, depth, chain, ((id, blob), ...)) of its newest save
        self._fields: OrderedDict[str, tuple[str, bytes, Parts, int, int, Blobs]] = OrderedDict()
        self._checked: set[str] = set()
        """Threads whose projection this instance has checked whole (once per thread: a repair)."""
        self._blobs = MessageBlobCache()
        self._lock: PerLoop[asyncio.Lock] = PerLoop()

    def __repr__(self) -> str:
        return f"RedisHistory({self.where}, project={self.project!r})"

    def _tulip_key(self, key: str) -> str:
        return self.backend.prefix + key

    # -- transactions -------------------------------------------------------------------------
    async def _transact(self, watch: Sequence[str], body: Callable[[Any], Awaitable[tuple[T, Queue]]]) -> T:
        """Run ``body(reader)`` and its queued writes as one WATCH/MULTI/EXEC, again on a conflict.

        The body's reads are not a snapshot: a write committed meanwhile can make them disagree
        (a row listed, then gone). Whatever the body raises, the WATCH is checked (an empty
        ``EXEC``) and the body runs again if anything changed, so an error (a conflict, a row not
        found, a corrupt read) is raised only when it was read from one consistent state. The
        writers of this process wait for each other on a lock (per event loop): among them
        optimistic retries would only cost round trips; other processes are held off by the WATCH.
        """
        async with self._lock.get_sync(asyncio.Lock), self.backend.errors(self.keys.version):
            client = await self.backend.client()
            reader = await self.backend.reader()
            for attempt in range(_MAX_RETRIES):
                async with client.pipeline(transaction=True) as pipe:
                    try:
                        await pipe.watch(self.keys.version, *watch)
                        try:
                            result, queue = await body(reader)
                        except (TulipNBError, ValueError, TypeError):
                            pipe.multi()
                            await pipe.execute()  # WatchError when the reads were not of one state
                            raise
                        pipe.multi()
                        queue.send(pipe)
                        pipe.incr(self.keys.version)
                        await pipe.execute()
                        return result
                    except WatchError:
                        pass
                await asyncio.sleep(random.uniform(0, 0.0005 * 2 ** min(attempt, 7)))
        raise BackendUnavailable(f"{self.where}: the store kept changing; gave up after {_MAX_RETRIES} tries")

    async def _eval(self, r: Any, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await r.eval(script, len(keys), *keys, *args)

    def _load_keys(self, thread_id: str) -> list[str]:
        k = self.keys
        return [k.rows(thread_id), k.rests(thread_id), k.order(thread_id), k.entries, k.line(thread_id)]

    # -- reading rows -------------------------------------------------------------------------
    def _row(self, thread_id: str, cid: str, raw: bytes, score: float | None) -> Row:
        """A listing's row: a damaged header is listed with no metadata (its load reports it)."""
        try:
            h = parse_head(cid, raw)
            meta = orjson.loads(h.meta)
            if not isinstance(meta, dict):
                raise ValueError("save metadata is not an object")
            return Row(thread_id, cid, h.created_at, meta, h.n)
        except (ValueError, TypeError, KeyError):
            when = EPOCH + timedelta(microseconds=int(score or 0))
            return Row(thread_id, cid, when, {}, 0)

    async def _view(self, r: Any, thread_id: str) -> _View:
        k = self.keys
        pipe = r.pipeline(transaction=False)
        pipe.hgetall(k.rows(thread_id))
        pipe.zrange(k.order(thread_id), 0, -1, withscores=True)
        pipe.get(self._tulip_key(index_key(thread_id)))
        raw_rows, scored, raw_index = await pipe.execute()
        scores = {c.decode(): int(s) for c, s in scored}
        heads: dict[str, Head] = {}
        broken: dict[str, Row] = {}
        for c, raw in raw_rows.items():
            cid = c.decode()
            try:
                heads[cid] = parse_head(cid, raw)
                orjson.loads(heads[cid].meta)
            except (ValueError, TypeError, KeyError):
                heads.pop(cid, None)
                broken[cid] = self._row(thread_id, cid, raw, scores.get(cid))
        index = self._index(thread_id, raw_index)
        return _View(thread_id, heads, broken, scores, index)

    def _index(self, thread_id: str, raw: bytes | None) -> list[IndexEntry]:
        if not self.project:
            return []
        return parse_index(raw, where=f"{self.where} key {self._tulip_key(index_key(thread_id))!r}")

    async def rows(self, thread_id: str, limit: int | None = None) -> list[Row]:
        async with self.backend.errors(self.keys.order(thread_id)):
            r = await self.backend.reader()
            stop = -1 if limit is None else limit - 1
            if limit is not None and limit <= 0:
                return []
            scored = await r.zrevrange(self.keys.order(thread_id), 0, stop, withscores=True)
            return await self._rows_of(r, thread_id, [(c.decode(), s) for c, s in scored])

    async def _rows_of(self, r: Any, thread_id: str, scored: Sequence[tuple[str, float]]) -> list[Row]:
        if not scored:
            return []
        raws = await r.hmget(self.keys.rows(thread_id), [c for c, _ in scored])
        rows = [self._row(thread_id, c, raw, s) for (c, s), raw in zip(scored, raws, strict=True) if raw is not None]
        return sorted(rows, key=lambda row: (row.created_at, row.checkpoint_id), reverse=True)

    async def threads(self) -> list[str]:
        """The threads that have rows."""
        async with self.backend.errors(self.keys.threads):
            r = await self.backend.reader()
            return sorted(t.decode() for t in await r.smembers(self.keys.threads))

    async def all_rows(self) -> dict[str, list[Row]]:
        return {t: rows for t in await self.threads() if (rows := await self.rows(t))}

    async def infos(self, thread_id: str, limit: int | None = None) -> list[CheckpointInfo]:
        """The thread's checkpoints, newest first: its rows and tulip's own (index entries naming no row)."""
        async with self.backend.errors(self.keys.order(thread_id)):
            r = await self.backend.reader()
            pipe = r.pipeline(transaction=False)
            pipe.zrevrange(self.keys.order(thread_id), 0, -1, withscores=True)
            pipe.get(self._tulip_key(index_key(thread_id)))
            scored, raw_index = await pipe.execute()
            pairs = [(c.decode(), s) for c, s in scored]
            tulip = projection.foreign(self._index(thread_id, raw_index), {c for c, _ in pairs})
            if not tulip:
                rows = await self._rows_of(r, thread_id, pairs if limit is None else pairs[: max(limit, 0)])
                return [row.info for row in rows]
            rows = await self._rows_of(r, thread_id, pairs if limit is None else pairs[: max(limit, 0)])
            merged = [*(row.info for row in rows), *(_info(thread_id, e) for e in tulip)]
            merged.sort(key=lambda i: (i.created_at, i.checkpoint_id), reverse=True)
            return merged if limit is None else merged[: max(limit, 0)]

    async def foreign_threads(self) -> list[str]:
        """Threads tulip wrote that have no rows (their index is all tulip's own)."""
        suffix = ":_checkpoints"
        return [k[: -len(suffix)] for k in await self.backend.index_keys()]

    # -- loading ------------------------------------------------------------------------------
    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> StoredCheckpoint | None:
        async with self.backend.errors(self.keys.rows(thread_id)):
            r = await self.backend.reader()
            got = await self._eval(r, LOAD, self._load_keys(thread_id), [checkpoint_id or "", "0"])
            return self._verify.loaded(thread_id, checkpoint_id, got)

    async def load_latest(self, thread_id: str) -> Checkpoint | StoredCheckpoint | None:
        """The thread's latest: its newest row, or a newer checkpoint of tulip's own (its record)."""
        async with self.backend.errors(self.keys.rows(thread_id)):
            r = await self.backend.reader()
            pipe = r.pipeline(transaction=False)
            pipe.get(self._tulip_key(index_key(thread_id)))
            pipe.eval(LOAD, 5, *self._load_keys(thread_id), "", "0")
            raw_index, got = await pipe.execute()
            index = self._index(thread_id, raw_index)
            stored = self._verify.loaded(thread_id, None, got) if got else None  # corrupt: raises
            ours = stored.checkpoint.info if stored is not None else None
            newer = [e for e in index if ours is None or newest(ours, _info(thread_id, e)) is not ours]
            if newer:
                scores = await r.zmscore(self.keys.order(thread_id), [e.checkpoint_id for e in newer])
                for e in projection.newest_first([e for e, s in zip(newer, scores, strict=True) if s is None]):
                    found = await self._foreign(r, thread_id, e)
                    if found is not None:
                        return found
            return stored

    async def load_many(
        self, thread_id: str, checkpoint_ids: Sequence[str]
    ) -> list[StoredCheckpoint | Checkpoint | CheckpointCorrupt | CheckpointNotFound]:
        """Several checkpoints of one thread, each verified as :meth:`load` does, each history read
        only down to the head of the one loaded before it (a thread's checkpoints in order cost each
        message once: ``verify_thread`` is linear). tulip's own checkpoints are read from their
        records; a missing or corrupt one is its error in the list."""
        out: list[StoredCheckpoint | Checkpoint | CheckpointCorrupt | CheckpointNotFound] = []
        known: Known | None = None
        async with self.backend.errors(self.keys.rows(thread_id)):
            r = await self.backend.reader()
            for cid in checkpoint_ids:
                stop, m = (known.ids[-1], len(known.ids)) if known is not None and known.ids else (b"", 0)
                try:
                    got = await self._eval(r, LOAD, self._load_keys(thread_id), [cid, "0", stop, m])
                    stored = self._verify.loaded(thread_id, cid, got, known)
                    assert stored is not None
                    known = Known(stored.ids, stored.checkpoint.state.messages)
                    out.append(stored)
                except CheckpointNotFound as e:
                    try:
                        out.append(await self.load_foreign(thread_id, cid))
                    except CheckpointNotFound:
                        out.append(e)
                    except CheckpointCorrupt as bad:
                        out.append(bad)
                except CheckpointCorrupt as e:
                    out.append(e)
        return out

    async def load_foreign(self, thread_id: str, checkpoint_id: str) -> Checkpoint:
        """One of tulip's own checkpoints of the thread (an index entry naming no row)."""
        async with self.backend.errors(self._tulip_key(index_key(thread_id))):
            r = await self.backend.reader()
            index = self._index(thread_id, await r.get(self._tulip_key(index_key(thread_id))))
            for e in index:
                if e.checkpoint_id == checkpoint_id:
                    found = await self._foreign(r, thread_id, e)
                    if found is not None:
                        return found
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)

    async def _foreign(self, r: Any, thread_id: str, e: IndexEntry) -> Checkpoint | None:
        key = record_key(thread_id, e.checkpoint_id)
        raw = await r.get(self._tulip_key(key))
        if raw is None:
            return None  # listed but gone (tulip removed it): not a checkpoint any more
        state, env = decode_record(raw, where=f"{self.where} key {self._tulip_key(key)!r}", thread_id=thread_id)
        meta = env.get("_metadata")
        return Checkpoint(
            e.checkpoint_id, thread_id, e.created_at, state, dict(meta if isinstance(meta, dict) else e.metadata)
        )

    async def _fields_of(self, r: Any, thread_id: str, h: Head) -> tuple[dict[str, Any], Blobs]:
        got = await self._eval(r, LOAD, self._load_keys(thread_id), [h.cid, "1"])
        if len(got) < 3:
            raise CheckpointCorrupt("the row is gone", path=self.where, thread_id=thread_id, checkpoint_id=h.cid)
        k = int(got[2])
        chain = [(got[3 + 2 * i].decode(), got[4 + 2 * i]) for i in range(k)]
        return self._verify.fields(chain, h.fields, {"thread_id": thread_id, "checkpoint_id": h.cid})

    # -- save ---------------------------------------------------------------------------------
    async def save(self, thread_id: str, plan: SavePlanFn) -> Row:
        """Write ``plan(latest)`` as a row (see :meth:`HistoryStore.save`); ``latest`` is the newest
        of the thread's rows and tulip's own checkpoints."""
        k = self.keys
        done: list[tuple[str, bytes, Parts, int, int, Blobs]] = []

        async def body(r: Any) -> tuple[Row, Queue]:
            done.clear()
            pipe = r.pipeline(transaction=False)
            pipe.zrevrange(k.order(thread_id), 0, 1, withscores=True)
            pipe.get(self._tulip_key(index_key(thread_id)))
            top_raw, raw_index = await pipe.execute()
            top = [(c.decode(), s) for c, s in top_raw]
            index = self._index(thread_id, raw_index)
            pipe = r.pipeline(transaction=False)
            pipe.hmget(k.rows(thread_id), [c for c, _ in top] or ["\x00"])
            pipe.zmscore(k.order(thread_id), [e.checkpoint_id for e in index] or ["\x00"])
            raw_heads, scores = await pipe.execute()
            tops: dict[str, Head] = {}
            for c, raw in zip([c for c, _ in top], raw_heads, strict=False):
                with contextlib.suppress(ValueError, TypeError, KeyError):  # damaged: never patched against
                    tops[c] = parse_head(c, raw)
            # the latest row as a listing shows it: a damaged header has no metadata (its load reports
            # it), and the thread stays writable
            newest_row = self._row(thread_id, top[0][0], raw_heads[0], top[0][1]) if top and raw_heads[0] else None
            shown = {e.checkpoint_id for e, s in zip(index, scores, strict=False) if s is not None}
            tulip = projection.newest_first([e for e in index if e.checkpoint_id not in shown])
            latest = newest(newest_row.info if newest_row else None, _info(thread_id, tulip[0]) if tulip else None)
            write = plan(latest)
            return await self._insert(r, thread_id, write, tops, [c for c, _ in top], index, shown, done)

        row = await self._transact([self._tulip_key(index_key(thread_id))], body)
        if done:
            self._remember(thread_id, done[0])
        if self.project:
            self._checked.add(thread_id)
        return row

    async def _insert(
        self,
        r: Any,
        thread_id: str,
        write: RowWrite,
        tops: dict[str, Head],
        top: list[str],
        index: list[IndexEntry],
        shown: set[str],
        done: list[tuple[str, bytes, Parts, int, int, Blobs]],
    ) -> tuple[Row, Queue]:
        k, cid, chain = self.keys, write.checkpoint_id, write.chain
        meta = meta_bytes(write.metadata, thread_id, cid)
        replacing = cid in tops or (await r.zscore(k.order(thread_id), cid)) is not None
        base = next((tops[c] for c in top if c != cid and c in tops), None)
        queue = Queue()
        head_ops = await self._store_chain(r, chain)
        line_ops = await self._line(r, thread_id, chain)
        view: _View | None = None
        if replacing or (self.project and thread_id not in self._checked):
            view = await self._view(r, thread_id)
        if replacing:
            assert view is not None
            rebased: dict[str, Head] = {}
            await self._drop(r, view, {cid}, queue, rebased)
            _put_heads(queue, k.rows(thread_id), rebased)
        base_parts, depth, chain_len, blobs = await self._base_parts(r, thread_id, base)
        enc, parts, fields_bytes = encode(write.rest, base_parts, depth, chain_len)
        blobs = (*blobs, (cid, enc.blob)) if enc.patch else ((cid, enc.blob),)
        digest_of_fields = fields_hash(fields_bytes)
        digest = row_digest(thread_id, cid, write.created_at, meta, chain.head, chain.n, digest_of_fields)
        h = Head(
            cid,
            chain.n,
            iso_offset(write.created_at),
            chain.head,
            base.cid if enc.patch and base is not None else None,
            enc.depth,
            enc.chain,
            digest_of_fields,
            digest,
            meta,
        )
        queue.before(line_ops)
        queue.before(head_ops)  # the new head is referenced before a replaced row lets go of it
        queue.add("hset", k.rows(thread_id), cid, h.encode())
        queue.add("hset", k.rests(thread_id), cid, enc.blob)
        queue.add("zadd", k.order(thread_id), {cid: micros(write.created_at)})
        queue.add("sadd", k.threads, thread_id)
        done.append((cid, digest_of_fields, parts, enc.depth, enc.chain, blobs))
        row = Row(thread_id, cid, write.created_at, orjson.loads(meta), chain.n)
        if self.project:
            new = _entry(row)
            if view is not None:  # the first save of this instance to the thread: all rows, records checked
                rows = [_entry(x) for x in view.rows() if x.checkpoint_id != cid] + [new]
                ours = view.ids | {cid}
            else:
                rows = [e for e in index if e.checkpoint_id in shown] + [new]
                ours = shown | {cid}
            want = projection.wanted(rows, every=self.project == "every")
            missing = await self._missing_records(r, thread_id, want) if view is not None else set()
            change = projection.changes(index, ours=ours, want=want, rewrite=missing | {cid})
            records: dict[str, bytes] = {}
            for c in change.write:
                if c != cid:
                    if (record := await self._stored_record(r, thread_id, c)) is not None:
                        records[c] = record
                else:  # the messages' JSON is each message's cached bytes, joined once
                    pre, post = _record_parts(row, fields_bytes)
                    records[c] = pre + b",".join(chain.data(i) for i in range(chain.n)) + post
            self._queue_ops(queue, projection.ops(thread_id, change, records, index))
        return row, queue

    async def _missing_records(self, r: Any, thread_id: str, rows: Sequence[IndexEntry]) -> set[str]:
        """The rows whose record key is missing (a repair rewrites the wanted ones)."""
        if not rows:
            return set()
        pipe = r.pipeline(transaction=False)
        for e in rows:
            pipe.exists(self._tulip_key(record_key(thread_id, e.checkpoint_id)))
        return {e.checkpoint_id for e, n in zip(rows, await pipe.execute(), strict=True) if not n}

    async def _stored_record(
        self, r: Any, thread_id: str, cid: str, metadata: dict[str, Any] | None = None
    ) -> bytes | None:
        """tulip's record of a stored row (with ``metadata`` instead of its own when given), or
        None when the row cannot be loaded: a damaged row is not shown to tulip, and never stops
        the write that projects it (its loads and verify report it)."""
        try:
            stored = self._verify.loaded(
                thread_id, cid, await self._eval(r, LOAD, self._load_keys(thread_id), [cid, "0"])
            )
        except (CheckpointCorrupt, CheckpointNotFound):
            return None
        assert stored is not None
        ck = stored.checkpoint
        meta = dict(ck.metadata) if metadata is None else metadata
        return encode_record(b"".join(state_json_parts(ck.state)), cid, ck.created_at, meta)

    def _queue_ops(self, queue: Queue, ops: Sequence[Op]) -> None:
        p = self._tulip_key
        for op in ops:
            match op:
                case Put(key, value):
                    queue.add("set", p(key), value)
                case Copy(source, dest):
                    queue.add("copy", p(source), p(dest), replace=True)
                case Delete(key):
                    queue.add("delete", p(key))

    async def _store_chain(self, r: Any, chain: MessageChain) -> Queue:
        """Queue the entries of ``chain`` the store lacks (checked here, inside the transaction) and
        one reference to its head; returns those writes (the caller queues them first).

        An entry present means its whole prefix is, so one read of the reference counts of the
        entries from the writer's ``known`` hint to the head finds what is stored (a binary search
        when the hint is stale). Stored entries the writer has not verified are compared with its
        messages and a damaged one is rewritten (its id proves the writer's bytes).
        """
        k, n, ids = self.keys, chain.n, chain.ids
        out = Queue()
        if n == 0:
            return out
        k0 = max(min(chain.known, n) - 1, 0)
        present = [v is not None for v in await r.hmget(k.refs, list(ids[k0:n]))]
        if present[-1]:
            lo = n
        elif present[0] or k0 == 0:
            lo = k0 + present.index(False)
        else:  # the hint is stale (a delete collected entries): search the stored prefix
            lo, hi = 0, k0
            while lo < hi:
                mid = (lo + hi) // 2
                if await r.hexists(k.refs, ids[mid]):
                    lo = mid + 1
                else:
                    hi = mid
        await self._check_stored(r, chain, min(chain.known, lo), lo, out)
        if lo < n:
            if lo:
                out.add("hincrby", k.refs, ids[lo - 1], 1)
            values = {ids[i]: (ids[i - 1] if i else ROOT) + chain.data(i) for i in range(lo, n)}
            refs = {ids[i]: 1 for i in range(lo, n - 1)}
            refs[ids[n - 1]] = 0
            out.add("hset", k.entries, mapping=values)
            out.add("hset", k.refs, mapping=refs)
        out.add("hincrby", k.refs, ids[n - 1], 1)
        return out

    async def _line(self, r: Any, thread_id: str, chain: MessageChain) -> Queue:
        """Keep the thread's main line (the entry ids of its latest save's history, which loads read
        with one ``LRANGE`` and ``HMGET`` instead of a walk): extended when the save extends it, left
        when the save is a prefix of it, written anew when the save's history is another."""
        key, ids, n = self.keys.line(thread_id), chain.ids, chain.n
        out = Queue()
        pipe = r.pipeline(transaction=False)
        pipe.llen(key)
        pipe.lindex(key, max(n - 1, 0))
        pipe.lindex(key, -1)
        length, at_n, last = await pipe.execute()
        if length <= n and (length == 0 or last == ids[length - 1]):
            if n > length:
                out.add("rpush", key, *ids[length:n])
        elif length > n and (n == 0 or at_n == ids[n - 1]):
            pass
        else:
            out.add("delete", key)
            if n:
                out.add("rpush", key, *ids[:n])
        return out

    async def _check_stored(self, r: Any, chain: MessageChain, start: int, upto: int, out: Queue) -> None:
        if upto <= start:
            return
        ids = chain.ids
        stored = await r.hmget(self.keys.entries, list(ids[start:upto]))
        for i, value in zip(range(start, upto), stored, strict=True):
            mine = (ids[i - 1] if i else ROOT) + chain.data(i)
            if value is None:
                raise CheckpointCorrupt(
                    f"stored history lacks message {i}, which its reference count says is stored", path=self.where
                )
            if value != mine:
                out.add("hset", self.keys.entries, ids[i], mine)

    async def _base_parts(self, r: Any, thread_id: str, base: Head | None) -> tuple[Parts | None, int, int, Blobs]:
        """The parts, depth, chain and stored chain of the row a save patches against (None: none).

        This instance's own newest save when the row is still that one (same id, fields hash and
        stored blobs), else rebuilt; a base that cannot be rebuilt gives None (the save is whole).
        """
        if base is None:
            return None, 0, 0, ()
        cached = self._fields.get(thread_id)
        if cached is not None and cached[0] == base.cid and cached[1] == base.fields:
            blobs = cached[5]
            stored = await r.hmget(self.keys.rests(thread_id), [c for c, _ in blobs])
            if all(s == b for s, (_, b) in zip(stored, blobs, strict=True)):
                return cached[2], cached[3], cached[4], blobs
        try:
            with gc_paused():
                fields, blobs = await self._fields_of(r, thread_id, base)
                parts = parts_of_json(orjson.dumps(fields))
        except CheckpointCorrupt:
            return None, 0, 0, ()
        return parts, base.depth, base.chain, blobs

    def _remember(self, thread_id: str, value: tuple[str, bytes, Parts, int, int, Blobs]) -> None:
        self._fields[thread_id] = value
        self._fields.move_to_end(thread_id)
        while len(self._fields) > _CACHED_THREADS:
            self._fields.popitem(last=False)

    # -- drop ---------------------------------------------------------------------------------
    async def _drop(self, r: Any, view: _View, cids: Collection[str], queue: Queue, changed: dict[str, Head]) -> int:
        """Queue the removal of rows ``cids`` of ``view``'s thread: the survivors whose fields patch
        one of them rewritten whole first (all rebuilt before any is rewritten), then the rows, then
        one reference fewer to each head (entries nothing reaches go, server side)."""
        k, tid = self.keys, view.thread_id
        found = [c for c in cids if c in view.scores or c in view.heads or c in view.broken]
        if not found:
            return 0
        gone = set(found)
        for dep in sorted(view.heads.values(), key=lambda h: h.cid):
            if dep.base in gone and dep.cid not in gone:
                try:
                    fields, _ = await self._fields_of(r, tid, dep)
                except CheckpointCorrupt:
                    continue  # damaged already: left as it is (its load reports it)
                whole = pack(orjson.dumps(fields))
                was = changed.get(dep.cid, dep)
                changed[dep.cid] = replace(was, base=None, depth=0, chain=0)
                queue.add("hset", k.rests(tid), dep.cid, whole)
        heads = [view.heads[c].head for c in found if c in view.heads and view.heads[c].head is not None]
        queue.add("hdel", k.rows(tid), *found)
        queue.add("hdel", k.rests(tid), *found)
        queue.add("zrem", k.order(tid), *found)
        if heads:
            queue.add("eval", RELEASE, 2, k.entries, k.refs, *heads)
        for c in found:
            changed.pop(c, None)
        self._fields.pop(tid, None)
        return len(found)

    async def rewrite(self, thread_id: str, plan: RewritePlanFn) -> int:
        """Apply ``plan`` to the thread's checkpoints (its rows and tulip's own, newest first) in one
        transaction: new save metadata, checkpoints dropped (tulip's records and index entries too)."""
        k = self.keys

        async def body(r: Any) -> tuple[int, Queue]:
            view = await self._view(r, thread_id)
            tulip = view.foreign()
            infos = [row.info for row in view.rows()] + [_info(thread_id, e) for e in tulip]
            infos.sort(key=lambda i: (i.created_at, i.checkpoint_id), reverse=True)
            change = plan(infos)
            queue = Queue()
            changed: dict[str, Head] = {}
            tulip_ids = {e.checkpoint_id for e in tulip}
            relinked: dict[str, IndexEntry] = {}
            records: dict[str, bytes] = {}
            for cid, meta in change.metadata.items():
                if cid in change.drop:
                    continue
                h = view.heads.get(cid)
                if h is not None:
                    if h.digest_for(thread_id) != h.digest:
                        continue  # a damaged or moved-in row is never re-signed
                    blob = meta_bytes(meta, thread_id, cid)
                    changed[cid] = replace(h, meta=blob, digest=h.digest_for(thread_id, blob))
                elif cid in tulip_ids:
                    raw = await r.get(self._tulip_key(record_key(thread_id, cid)))
                    e = next(e for e in tulip if e.checkpoint_id == cid)
                    relinked[cid] = IndexEntry(cid, e.created_at, dict(meta))
                    if raw is not None:
                        records[cid] = set_record_metadata(raw, dict(meta))
            gone = await self._drop(r, view, change.drop & view.ids, queue, changed)
            dropped_tulip = change.drop & tulip_ids
            _put_heads(queue, k.rows(thread_id), changed)
            survivors = view.ids - change.drop
            if not survivors:
                queue.add("delete", k.rows(thread_id), k.rests(thread_id), k.order(thread_id), k.line(thread_id))
                queue.add("srem", k.threads, thread_id)
            if self.project:
                rows = [
                    IndexEntry(x.checkpoint_id, x.created_at, orjson.loads(changed[x.checkpoint_id].meta))
                    if x.checkpoint_id in changed
                    else _entry(x)
                    for x in view.rows()
                    if x.checkpoint_id in survivors
                ]
                want = projection.wanted(rows, every=self.project == "every")
                pc = projection.changes(
                    view.index,
                    ours=view.ids,
                    want=want,
                    drop_foreign=dropped_tulip,
                    foreign_metadata=relinked,
                    rewrite=await self._missing_records(r, thread_id, want),
                )
                for c in pc.write:
                    given = orjson.loads(changed[c].meta) if c in changed else None
                    if (record := await self._stored_record(r, thread_id, c, given)) is not None:
                        records[c] = record
                self._queue_ops(queue, projection.ops(thread_id, pc, records, view.index))
            return gone + len(dropped_tulip), queue

        gone = await self._transact([self._tulip_key(index_key(thread_id))], body)
        if self.project:
            self._checked.add(thread_id)
        return gone

    async def delete_thread(self, thread_id: str) -> int:
        """Remove every row of the thread and every checkpoint tulip lists for it; how many went."""
        k = self.keys

        async def body(r: Any) -> tuple[int, Queue]:
            view = await self._view(r, thread_id)
            queue = Queue()
            heads = [h.head for h in view.heads.values() if h.head is not None]
            queue.add("delete", k.rows(thread_id), k.rests(thread_id), k.order(thread_id), k.line(thread_id))
            queue.add("srem", k.threads, thread_id)
            if heads:
                queue.add("eval", RELEASE, 2, k.entries, k.refs, *heads)
            tulip = view.foreign()
            if self.project:
                pc = projection.changes(
                    view.index, ours=view.ids, want=[], drop_foreign={e.checkpoint_id for e in tulip}
                )
                self._queue_ops(queue, projection.ops(thread_id, pc, {}, view.index))
            return len(view.ids | set(view.heads) | set(view.broken)) + len(tulip), queue

        gone = await self._transact([self._tulip_key(index_key(thread_id))], body)
        self._fields.pop(thread_id, None)
        self._checked.discard(thread_id)
        return gone

    # -- copy ---------------------------------------------------------------------------------
    async def copy(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        """The source's rows as rows of ``dest`` on the same entries: no entry is written."""
        k = self.keys

        async def body(r: Any) -> tuple[int, Queue]:
            src = await self._view(r, source)
            if not src.scores:
                raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
            pipe = r.pipeline(transaction=False)
            pipe.exists(k.order(dest))
            pipe.get(self._tulip_key(index_key(dest)))
            pipe.hgetall(k.rests(source))
            dest_rows, dest_index, rests = await pipe.execute()
            if dest_rows or self._index(dest, dest_index):
                raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
            heads: dict[str, bytes] = {}
            rows: list[Row] = []
            refs: dict[bytes, int] = {}
            for row in src.rows():
                cid = row.checkpoint_id
                h = src.heads.get(cid)
                raw = (await r.hget(k.rows(source), cid)) if h is None else None
                if h is None:  # a damaged header is copied as it is (its loads keep failing)
                    if raw is not None:
                        heads[cid] = raw
                    continue
                intact = h.digest_for(source) == h.digest
                meta = meta_bytes(metadata(row), dest, cid)
                copy = replace(h, meta=meta, digest=h.digest_for(dest, meta) if intact else h.digest)
                heads[cid] = copy.encode()
                rows.append(Row(dest, cid, row.created_at, orjson.loads(meta), row.n_messages))
                if h.head is not None:
                    refs[h.head] = refs.get(h.head, 0) + 1
            queue = Queue()
            queue.add("hset", k.rows(dest), mapping=heads)
            queue.add("zadd", k.order(dest), {c: s for c, s in src.scores.items() if c in heads})
            queue.add("sadd", k.threads, dest)
            if rests:
                queue.add("hset", k.rests(dest), mapping=rests)
            for head, n in refs.items():
                queue.add("hincrby", k.refs, head, n)
            if self.project:
                want = projection.wanted([_entry(x) for x in rows], every=self.project == "every")
                pc = projection.changes([], ours=set(heads), want=want)
                records = {}
                for c in pc.write:  # the source's state, with the copy's metadata
                    row = next(x for x in rows if x.checkpoint_id == c)
                    if (record := await self._stored_record(r, source, c, dict(row.metadata))) is not None:
                        records[c] = record
                self._queue_ops(queue, projection.ops(dest, pc, records, []))
            return len(heads), queue

        return await self._transact([self._tulip_key(index_key(dest)), self._tulip_key(index_key(source))], body)

    # -- checks -------------------------------------------------------------------------------
    async def check_projection(self, thread_id: str) -> list[str]:
        """Problems with tulip's keys of the thread ([]: tulip reads what it is shown right).

        Each projected checkpoint (the latest turn end; every row with ``project="every"``) must be
        in the index with its ``created_at`` and save metadata, and its record must hold exactly its
        state; no other row may be shown; ``:latest`` must be the newest entry's record.
        """
        if not self.project:
            return []
        async with self.backend.errors(self.keys.rows(thread_id)):
            r = await self.backend.reader()
            view = await self._view(r, thread_id)
            want = projection.wanted([_entry(x) for x in view.rows()], every=self.project == "every")
            shown = {e.checkpoint_id: e for e in view.index if e.checkpoint_id in view.ids}
            wanted = {e.checkpoint_id for e in want}
            problems = [f"{c}: shown to tulip, but not a projected checkpoint" for c in shown if c not in wanted]
            for e in want:
                problems += await self._check_record(r, thread_id, e, shown.get(e.checkpoint_id))
            if view.index:
                key = self._tulip_key(record_key(thread_id, view.index[0].checkpoint_id))
                pipe = r.pipeline(transaction=False)
                pipe.get(key)
                pipe.get(self._tulip_key(thread_id + ":latest"))
                newest_record, latest = await pipe.execute()
                if latest != newest_record:
                    problems.append(f"{view.index[0].checkpoint_id}: tulip's :latest is not the newest record")
            return problems

    async def _check_record(self, r: Any, thread_id: str, e: IndexEntry, shown: IndexEntry | None) -> list[str]:
        cid = e.checkpoint_id
        if shown is None:
            return [f"{cid}: not in tulip's index"]
        if shown != e:
            return [f"{cid}: tulip's index entry differs from the history (created_at or save metadata)"]
        raw = await r.get(self._tulip_key(record_key(thread_id, cid)))
        if raw is None:
            return [f"{cid}: tulip's record is missing"]
        try:
            stored = self._verify.loaded(
                thread_id, cid, await self._eval(r, LOAD, self._load_keys(thread_id), [cid, "0"])
            )
        except CheckpointCorrupt:
            return []  # the row itself is damaged: its load and verify say so
        assert stored is not None
        ours = stored.checkpoint
        try:
            state, env = decode_record(raw, where=self.where, thread_id=thread_id)
        except CheckpointCorrupt as err:
            return [f"{cid}: tulip's record cannot be read: {err}"]
        problems = []
        if orjson.loads(state.to_json_bytes()) != orjson.loads(ours.state.to_json_bytes()):
            problems.append(f"{cid}: tulip's record differs from the history (state)")
        if env.get("_metadata") != ours.metadata:
            problems.append(f"{cid}: tulip's record differs from the history (save metadata)")
        return problems

    async def integrity(self) -> list[str]:
        """The entries' reference counts and every head and parent present; [] when all is well."""
        k = self.keys
        async with self.backend.errors(k.entries):
            r = await self.backend.reader()
            entries = await r.hgetall(k.entries)
            refs = {e: int(v) for e, v in (await r.hgetall(k.refs)).items()}
            want: dict[bytes, int] = dict.fromkeys(entries, 0)
            problems: list[str] = []
            for eid, value in entries.items():
                parent = value[:32]
                if parent != ROOT:
                    if parent not in want:
                        problems.append(f"entry {eid.hex()[:12]}: its parent entry is missing")
                        continue
                    want[parent] += 1
            for tid in await self.threads():
                for c, raw in (await r.hgetall(k.rows(tid))).items():
                    h = self._verify.head(tid, c.decode(), raw)
                    if h.head is None:
                        continue
                    if h.head not in want:
                        problems.append(f"{tid}/{h.cid}: its head entry is missing")
                        continue
                    want[h.head] += 1
            for eid, n in want.items():
                if refs.get(eid) != n:
                    problems.append(f"entry {eid.hex()[:12]}: refs {refs.get(eid)}, reached {n} times")
            problems += [f"entry {e.hex()[:12]}: a reference count without an entry" for e in refs if e not in entries]
            return problems

    async def close(self) -> None:
        await self.backend.close()
