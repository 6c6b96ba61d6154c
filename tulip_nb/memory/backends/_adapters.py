"""StorageBackendAdapter: a checkpointer over a dict-shaped storage backend, in tulip's key layout.

Storage backends (:class:`RedisBackend`, :class:`PostgreSQLBackend`, :class:`MySQLBackend`,
:class:`OpenSearchBackend`) store one JSON value per key with ``save(thread_id, data)``; they are
not checkpointers. The adapter turns the agent's ``save(state, thread_id)`` into tulip's three keys
per thread (see :mod:`tulip_nb.memory.backends._kv`), so a tulip agent and tulip_nb read each
other's threads on the same server. Build one with a factory::

    from tulip_nb.memory.backends import postgresql_checkpointer
    cp = postgresql_checkpointer(dsn="postgresql://app@db/prod", table_name="checkpoints")
    cid = await cp.save(state, "ticket-42")
    state = await cp.load("ticket-42")

(``redis_checkpointer`` returns the history model on Redis, :mod:`.redis_history`, with tulip's
keys as its projection; this adapter with ``layout="kv"``, or with ``ttl_seconds``.)

It wraps *any* object with async ``save(thread_id, data)`` / ``load(thread_id)`` /
``delete(thread_id)`` / ``exists(thread_id)`` too (your own key-value class, a tulip storage
backend), in the same layout::

    class DictKV:
        def __init__(self): self.rows = {}
        async def save(self, thread_id, data): self.rows[thread_id] = data
        async def load(self, thread_id): return self.rows.get(thread_id)
        async def delete(self, thread_id): return self.rows.pop(thread_id, None) is not None
        async def exists(self, thread_id): return thread_id in self.rows
        async def list_threads(self): return list(self.rows)    # optional: enumeration

    agent = Agent(..., checkpointer=StorageBackendAdapter(DictKV()))

Such a backend has no transactions, so the adapter serialises each thread's read-modify-write in
this process (a lock per thread and event loop): saves never drop index entries and
``expected_parent=`` is a compare-and-swap among the writers on one event loop of this process (the
locks are per loop), not across loops or processes.
``list_threads`` / ``list_with_metadata`` / ``vacuum`` are offered when the backend has a
``list_threads()`` (raw keys) to enumerate with; ``search`` and metadata queries are not. tulip_nb's
own backends run each save as one server-side transaction instead.

Unlike tulip's adapter:

- each save (record, ``:latest``, index) is one atomic transaction on the server, serialised per
  thread across processes, so concurrent saves never drop index entries and ``expected_parent=``
  is a real compare-and-swap;
- deleting the newest checkpoint re-points ``:latest`` to the one before it;
- ``list_threads`` returns thread ids (not raw keys) and honours the glob ``pattern``;
- checkpoint ids ``latest`` / ``_checkpoints`` (or containing ``:``) are refused;
- vacuum removes records, index entries and ``:latest`` together, never leaving the index pointing
  at a missing record;
- a storage outage raises :class:`~tulip_nb.core.errors.BackendUnavailable`, never "no thread".
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson

from tulip_nb.core.errors import CheckpointConflict, CheckpointNotFound, UserError
from tulip_nb.core.state import AgentState, state_json_bytes
from tulip_nb.memory._envelope import info_row, metadata_matches, search_hit, search_state
from tulip_nb.memory._pools import PerLoop
from tulip_nb.memory.backends._base import InTreeCheckpointer
from tulip_nb.memory.backends._kv import (
    INDEX_SUFFIX,
    Copy,
    Delete,
    IndexEntry,
    KVStore,
    Put,
    Txn,
    check_checkpoint_id,
    created_before,
    decode_record,
    drop_checkpoints,
    encode_index,
    encode_record,
    index_key,
    latest_key,
    parse_index,
    record_key,
    remove_checkpoints,
    set_record_metadata,
)
from tulip_nb.memory.checkpointer import (
    BaseCheckpointer,
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    check_expected_parent,
    next_created_at,
    save_metadata,
    validate_checkpoint,
    validate_thread_id,
)

__all__: list[str] = []

_SNAPSHOT_TRIES = 20
"""How often a copy re-reads a source that keeps changing under it before it gives up."""

if TYPE_CHECKING:
    from tulip_nb.memory.backends._history_kv import SQLHistoryCheckpointer

_NO_LIMIT = 2**31 - 1
"""What ``limit=None`` (no limit) becomes where a store needs a number (SQL ``LIMIT``)."""


T = TypeVar("T")
_DICT_API = ("save", "load", "delete", "exists")


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a backend method that is async (or, leniently, plain)."""
    result = fn(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


class _ForeignTxn(Txn):
    def __init__(self, kv: _ForeignKV) -> None:
        super().__init__()
        self._kv = kv

    async def get(self, key: str) -> bytes | None:
        return await self._kv.get(key)


class _ForeignKV(KVStore):
    """:class:`KVStore` over an object with the dict-shaped ``save/load/delete/exists``.

    Transactions are per-key locks in this process (one set per event loop); writes are applied in
    order after the body, as the in-tree stores do at commit.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.backend_name = type(backend).__name__
        lister = getattr(backend, "list_threads", None)
        self._lister = lister if callable(lister) else None
        vacuum = getattr(backend, "vacuum", None)
        self.own_vacuum: Callable[..., Any] | None = vacuum if callable(vacuum) else None
        """The backend's own ``vacuum(older_than_days)`` (tulip's backends have one): used as is."""
        self.can_list_keys = self._lister is not None
        self.ttl_seconds = None
        self._locks: PerLoop[weakref.WeakValueDictionary[str, asyncio.Lock]] = PerLoop()

    def __repr__(self) -> str:
        return repr(self.backend)

    async def get(self, key: str) -> bytes | None:
        data = await _call(self.backend.load, key)
        if data is None:
            return None
        if not isinstance(data, dict):
            raise TypeError(f"{self.backend_name}.load({key!r}) returned {type(data).__name__}, not a dict")
        return _dumps(data)

    async def transact(self, lock_key: str, body: Callable[[Txn], Awaitable[T]]) -> T:
        locks = self._locks.get_sync(weakref.WeakValueDictionary)
        lock = locks.get(lock_key)
        if lock is None:
            lock = locks[lock_key] = asyncio.Lock()
        async with lock:
            txn = _ForeignTxn(self)
            result = await body(txn)
            written: dict[str, bytes] = {}
            for op in txn.ops:
                match op:
                    case Put(key, value):
                        await _call(self.backend.save, key, orjson.loads(value))
                        written[key] = value
                    case Copy(source, dest) if source in written:  # written above: no read back
                        await _call(self.backend.save, dest, orjson.loads(written[source]))
                        written[dest] = written[source]
                    case Copy(source, dest):
                        data = await _call(self.backend.load, source)
                        if data is not None:  # a fresh copy: a dict-backed store may keep the object
                            await _call(self.backend.save, dest, orjson.loads(_dumps(data)))
                    case Delete(key):
                        await _call(self.backend.delete, key)
            return result

    async def keys(self, pattern: str = "*") -> list[str]:
        if self._lister is None:
            raise NotImplementedError(f"{self.backend_name} has no list_threads() to enumerate keys with")
        try:
            takes_limit = "limit" in inspect.signature(self._lister).parameters
        except (TypeError, ValueError):
            takes_limit = False
        found = await _call(self._lister, **({"limit": 2**31 - 1} if takes_limit else {}))
        return [str(k) for k in found]

    async def index_keys(self) -> list[str]:
        return [k for k in await self.keys() if k.endswith(INDEX_SUFFIX)]

    async def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if callable(close):
            await _call(close)


class StorageBackendAdapter(InTreeCheckpointer):
    """A :class:`BaseCheckpointer` over a storage backend (see the module docstring).

    ``backend`` is one of tulip_nb's storage backends (their server-side transactions are used),
    or any object with async ``save(thread_id, data)`` / ``load(thread_id)`` /
    ``delete(thread_id)`` / ``exists(thread_id)`` (and optionally ``list_threads()``).
    """

    def __init__(self, backend: Any, *, sign: bool = True) -> None:
        self.sign = sign
        if isinstance(backend, BaseCheckpointer):
            raise TypeError(
                f"{type(backend).__name__} is already a checkpointer: pass it to the agent directly, "
                "StorageBackendAdapter wraps storage backends with save(thread_id, data)"
            )
        if isinstance(backend, KVStore):
            kv: KVStore = backend
        else:
            missing = [m for m in _DICT_API if not callable(getattr(backend, m, None))]
            if missing:
                raise TypeError(
                    "StorageBackendAdapter wraps a storage backend with async save(thread_id, data), "
                    f"load(thread_id), delete(thread_id) and exists(thread_id); {type(backend).__name__} "
                    f"lacks {', '.join(missing)}"
                )
            kv = _ForeignKV(backend)
        self.backend = backend
        self._kv = kv

    def __repr__(self) -> str:
        return f"StorageBackendAdapter({self.backend!r})"

    @property
    def capabilities(self) -> Capabilities:
        b = self._kv
        return Capabilities(
            search=b.supports_search,
            metadata_query=b.supports_metadata_query,
            vacuum=b.can_list_keys or (isinstance(b, _ForeignKV) and b.own_vacuum is not None),
            branching=True,
            ttl=b.ttl_seconds is not None,
            list_threads=b.can_list_keys,
            list_with_metadata=b.can_list_keys,
            persistent_checkpoint_ids=True,
        )

    async def close(self) -> None:
        await self._kv.close()

    # -- helpers ------------------------------------------------------------------------------
    async def _index(self, thread_id: str) -> list[IndexEntry]:
        key = index_key(thread_id)
        return parse_index(await self._kv.get(key), where=self._where(key))

    def _where(self, key: str) -> str:
        return f"{self._kv.backend_name}:{key}"

    def _decode(self, raw: bytes | str, key: str, thread_id: str, entry: IndexEntry | None) -> Checkpoint:
        state, env = decode_record(raw, where=self._where(key), thread_id=thread_id)
        cid = env.get("_checkpoint_id") if isinstance(env.get("_checkpoint_id"), str) else None
        cid = cid or (entry.checkpoint_id if entry else key.rsplit(":", 1)[-1])
        meta = env.get("_metadata")
        if not isinstance(meta, dict):
            meta = entry.metadata if entry else {}
        created = entry.created_at if entry else None
        if created is None:
            try:
                created = datetime.fromisoformat(str(env["_checkpoint_timestamp"]))
            except (KeyError, ValueError):
                created = state.updated_at
        if created.tzinfo is None:
            created = created.replace(tzinfo=UTC)
        return Checkpoint(cid, thread_id, created, state, dict(meta))

    def _check_id(self, checkpoint_id: str, thread_id: str) -> None:
        check_checkpoint_id(checkpoint_id, thread_id)

    # -- contract -----------------------------------------------------------------------------
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        cid = self._save_id(state, thread_id, checkpoint_id)
        state_bytes = state_json_bytes(state)  # outside the transaction: it may be retried
        ikey, rkey = index_key(thread_id), record_key(thread_id, cid)

        async def body(txn: Txn) -> str:
            entries = parse_index(await txn.get(ikey), where=self._where(ikey))
            latest_id = entries[0].checkpoint_id if entries else None
            check_expected_parent(expected_parent, latest_id, thread_id)
            now = next_created_at(entries[0].created_at if entries else None)
            meta = save_metadata(
                metadata,
                latest_id,
                state=state,
                parent_metadata=entries[0].metadata if entries else None,
                thread_id=thread_id,
                sign=self.sign,
                created_at=now,
            )
            txn.put(rkey, encode_record(state_bytes, cid, now, meta), _dumps(meta))
            txn.copy(rkey, latest_key(thread_id))
            rest = [e for e in entries if e.checkpoint_id != cid]
            txn.put(ikey, encode_index([IndexEntry(cid, now, meta), *rest]))
            return cid

        return await self._kv.transact(ikey, body)

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write a checkpoint verbatim, record, index and ``:latest`` in one transaction."""
        ckpt = validate_checkpoint(checkpoint)
        thread_id, cid = ckpt.thread_id, check_checkpoint_id(ckpt.checkpoint_id, ckpt.thread_id)
        meta = dict(ckpt.metadata)
        record = encode_record(state_json_bytes(ckpt.state), cid, ckpt.created_at, meta)
        ikey, rkey = index_key(thread_id), record_key(thread_id, cid)

        async def body(txn: Txn) -> None:
            before = parse_index(await txn.get(ikey), where=self._where(ikey))
            entries = [e for e in before if e.checkpoint_id != cid] + [IndexEntry(cid, ckpt.created_at, meta)]
            entries.sort(key=lambda e: e.created_at, reverse=True)
            txn.put(rkey, record, _dumps(meta))
            if entries[0].checkpoint_id == cid:
                txn.copy(rkey, latest_key(thread_id))
            elif before and before[0].checkpoint_id == cid:  # the old newest moved back in time
                txn.copy(record_key(thread_id, entries[0].checkpoint_id), latest_key(thread_id))
            txn.put(ikey, encode_index(entries))

        await self._kv.transact(ikey, body)

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        validate_thread_id(thread_id)
        if checkpoint_id is None:
            key = latest_key(thread_id)
            raw = await self._kv.get(key)
            if raw is None:
                # no :latest (never saved, or removed by hand): fall back to the index's newest
                entries = await self._index(thread_id)
                if not entries:
                    return None
                checkpoint_id = entries[0].checkpoint_id
            else:
                return self._decode(raw, key, thread_id, None)
        check_checkpoint_id(checkpoint_id, thread_id)
        key = record_key(thread_id, checkpoint_id)
        raw = await self._kv.get(key)
        if raw is None:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        return self._decode(raw, key, thread_id, None)

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        validate_thread_id(thread_id)
        return [
            CheckpointInfo(e.checkpoint_id, thread_id, e.created_at, dict(e.metadata))
            for e in (await self._index(thread_id))[:limit]
        ]

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        validate_thread_id(thread_id)
        ikey = index_key(thread_id)

        async def body(txn: Txn) -> bool:
            entries = parse_index(await txn.get(ikey), where=self._where(ikey))
            if checkpoint_id is None:
                for e in entries:
                    txn.delete(record_key(thread_id, e.checkpoint_id))
                txn.delete(latest_key(thread_id))
                txn.delete(ikey)
                return bool(entries)
            gone = [e for e in entries if e.checkpoint_id == checkpoint_id]
            if not gone:
                return False
            remove_checkpoints(txn, thread_id, entries, {checkpoint_id})
            return True

        return await self._kv.transact(ikey, body)

    # -- capabilities -------------------------------------------------------------------------
    async def _thread_ids(self) -> list[str]:
        prefix_len = len(INDEX_SUFFIX)
        return sorted(k[:-prefix_len] for k in await self._kv.index_keys())

    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        """Every thread's index (one read of all of them), newest first."""
        tids = await self._thread_ids()
        raws = await self._kv.get_many([index_key(t) for t in tids])
        out = {}
        for tid, raw in zip(tids, raws, strict=True):
            entries = parse_index(raw, where=self._where(index_key(tid)))
            if entries:
                out[tid] = [CheckpointInfo(e.checkpoint_id, tid, e.created_at, dict(e.metadata)) for e in entries]
        return out

    async def query_by_metadata(self, key: str, value: Any, limit: int | None = 100) -> list[dict[str, Any]]:
        self._require("metadata_query", "query_by_metadata")
        keys = await self._kv.metadata_candidates(key, value, limit=_NO_LIMIT if limit is None else max(limit * 4, 100))
        rows: list[CheckpointInfo] = []
        for rkey in keys:
            tid, _, cid = rkey.rpartition(":")
            ckpt = await self.load_checkpoint(tid, cid)
            if ckpt is not None and metadata_matches(ckpt.metadata, ckpt.state, key, value):
                rows.append(ckpt.info)
        rows.sort(key=lambda i: i.created_at, reverse=True)
        return [info_row(i) for i in rows[:limit]]

    async def search(self, query: str, limit: int | None = 10) -> list[dict[str, Any]]:
        self._require("search", "search")
        hits = []
        for lkey, score in await self._kv.search_latest(query, _NO_LIMIT if limit is None else limit):
            tid = lkey[: -len(":latest")]
            raw = await self._kv.get(lkey)
            if raw is None:
                continue
            ckpt = self._decode(raw, lkey, tid, None)
            _, idx, snippet = search_state(ckpt.state, query)
            hits.append(search_hit(ckpt, score, idx, snippet))
        hits.sort(key=lambda h: (-h["score"], h["thread_id"]))
        return hits[:limit]

    async def vacuum(self, older_than_days: float = 30) -> int:
        if isinstance(self._kv, _ForeignKV) and self._kv.own_vacuum is not None:
            return int(await _call(self._kv.own_vacuum, older_than_days))  # the backend's own guarantee
        self._require("vacuum", "vacuum")
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        return sum([await drop_checkpoints(self._kv, tid, created_before(cutoff)) for tid in await self._thread_ids()])

    async def _drop(self, thread_id: str, infos: list[CheckpointInfo], dropped: set[str]) -> int:
        """One transaction: re-link the survivors, remove ``dropped`` (a crash leaves all or nothing)."""
        return await drop_checkpoints(self._kv, thread_id, lambda _entries: set(dropped)) if dropped else 0

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        validate_thread_id(source_thread_id)
        validate_thread_id(dest_thread_id)
        entries, raws = await self._snapshot(source_thread_id)
        copied: list[tuple[IndexEntry, bytes]] = []
        for e, raw in zip(entries, raws, strict=True):
            if raw is None:
                continue  # a record expired (TTL) or removed by hand: nothing to copy
            meta = {**e.metadata, "copied_from": {"thread_id": source_thread_id, "checkpoint_id": e.checkpoint_id}}
            copied.append((IndexEntry(e.checkpoint_id, e.created_at, meta), set_record_metadata(raw, meta)))
        if not copied:
            raise CheckpointNotFound("source thread has no readable checkpoints", thread_id=source_thread_id)
        ikey = index_key(dest_thread_id)

        async def body(txn: Txn) -> bool:
            if parse_index(await txn.get(ikey), where=self._where(ikey)):
                raise CheckpointConflict(
                    "destination thread already has checkpoints; delete it first", thread_id=dest_thread_id
                )
            for entry, data in copied:
                txn.put(record_key(dest_thread_id, entry.checkpoint_id), data, _dumps(entry.metadata))
            txn.copy(record_key(dest_thread_id, copied[0][0].checkpoint_id), latest_key(dest_thread_id))
            txn.put(ikey, encode_index([e for e, _ in copied]))
            return True

        return await self._kv.transact(ikey, body)

    async def _snapshot(self, thread_id: str) -> tuple[list[IndexEntry], list[bytes | str | None]]:
        """The thread's index and its records as of one moment: the index is read again after the
        records and the read repeated until it has not changed, so a prune or delete committed in
        between (which changes the index and the records in one transaction) is never half seen."""
        ids: list[str] | None = None
        for _ in range(_SNAPSHOT_TRIES):
            entries = await self._index(thread_id)
            if not entries:
                raise CheckpointNotFound("source thread has no checkpoints", thread_id=thread_id)
            raws = await self._kv.get_many([record_key(thread_id, e.checkpoint_id) for e in entries])
            ids = [e.checkpoint_id for e in entries]
            if [e.checkpoint_id for e in await self._index(thread_id)] == ids:
                return entries, raws
        raise CheckpointConflict(
            f"source thread changed during each of {_SNAPSHOT_TRIES} reads; try the copy again", thread_id=thread_id
        )


# -- factories ---------------------------------------------------------------------------------
def redis_checkpointer(
    url: str = "redis://localhost:6379",
    ttl_seconds: int | None = None,
    prefix: str = "tulip:state:",
    *,
    sign: bool | None = None,
    layout: Literal["history", "tulip", "kv"] | None = None,
    **kwargs: Any,
) -> BaseCheckpointer:
    """A checkpointer on Redis, keys under ``prefix`` (tulip's keys ``<prefix><tid>:<cid>`` included).

    ``layout``:

    - ``"history"`` (the default): the history model (:mod:`.redis_history`): each message stored
      once, a save costs what it adds, a copy writes rows only; the thread's latest turn end is
      also written as tulip's keys, in the same transaction, so a tulip agent resumes it.
    - ``"tulip"``: the same, with every checkpoint written as tulip's keys.
    - ``"kv"``: tulip's own layout only (:class:`StorageBackendAdapter`): every checkpoint's whole
      state, rewritten index; the cost of a save grows with the thread. The layout for
      ``ttl_seconds`` (every key of a thread expires together, ``ttl_seconds`` after its last
      save): with ``ttl_seconds`` and no ``layout``, this one is used; the history layouts refuse
      a TTL (entries are shared between threads, so they cannot expire with one).

    ``sign``: hash-chain every save (:mod:`tulip_nb.memory.integrity`); by default off for the
    history layouts (opt-in, as in the file store: every row carries a content digest checked on
    load either way) and on for ``"kv"`` (as before).
    """
    from tulip_nb.memory.backends.redis import RedisBackend

    chosen = layout if layout is not None else ("kv" if ttl_seconds is not None else "history")
    if chosen not in ("history", "tulip", "kv"):
        raise UserError(f"redis_checkpointer layout must be 'history', 'tulip' or 'kv', got {layout!r}")
    backend = RedisBackend(url=url, prefix=prefix, ttl_seconds=ttl_seconds, **kwargs)
    if chosen == "kv":
        return StorageBackendAdapter(backend, sign=True if sign is None else sign)
    from tulip_nb.memory.backends._redis_history_checkpointer import RedisHistoryCheckpointer

    return RedisHistoryCheckpointer(backend, layout=chosen, sign=bool(sign))


def postgresql_checkpointer(
    dsn: str = "postgresql://postgres@localhost:5432/tulip",
    schema_name: str = "public",
    table_name: str = "checkpoints",
    *,
    sign: bool = False,
    layout: Literal["history", "tulip"] = "history",
    pool_size: int = 4,
    fts_index: bool = False,
    **connect_kwargs: Any,
) -> SQLHistoryCheckpointer:
    """A checkpointer on PostgreSQL: the history model beside tulip's table ``<schema>.<table>``.

    The history lives in ``<table>_h_entries`` / ``<table>_h_rows`` / ``<table>_h_lock`` (created
    on first use); tulip's table holds the projection, written in the same transaction: the latest
    turn end (``layout="history"``) or every checkpoint (``layout="tulip"``). A tulip agent resumes
    any thread, and tulip_nb continues after a tulip agent's turns
    (:mod:`~tulip_nb.memory.backends._history_kv`). ``connect_kwargs`` go to ``psycopg.connect``.
    """
    from tulip_nb.memory.backends._history_kv import SQLHistoryCheckpointer
    from tulip_nb.memory.backends._postgresql import PostgreSQLBackend, kv_table_ddl
    from tulip_nb.memory.backends._sql_server import PostgresDialect

    for legacy in ("min_pool_size", "max_pool_size"):  # the key-value adapter's pool sizes
        if legacy in connect_kwargs:
            size = connect_kwargs.pop(legacy)
            pool_size = max(pool_size, size) if legacy == "max_pool_size" else pool_size
    table = f'"{schema_name}"."{table_name}"'
    dialect = PostgresDialect(
        dsn,
        schema_name=schema_name,
        table_name=table_name,
        kv_ddl=kv_table_ddl(table, table_name, fts_index=fts_index),
        pool_size=pool_size,
        connect_kwargs=connect_kwargs,
    )
    backend = PostgreSQLBackend(dsn=dsn, schema_name=schema_name, table_name=table_name, fts_index=fts_index)
    return SQLHistoryCheckpointer(dialect, layout=layout, sign=sign, backend=backend)


def mysql_checkpointer(
    dsn: str = "mysql://root@localhost:3306/tulip",
    table_name: str = "checkpoints",
    *,
    sign: bool = False,
    layout: Literal["history", "tulip"] = "history",
    pool_size: int = 4,
    charset: str = "utf8mb4",
    collation: str = "utf8mb4_unicode_ci",
    **connect_kwargs: Any,
) -> SQLHistoryCheckpointer:
    """A checkpointer on MySQL 8 / MariaDB 10.5+: the history model beside tulip's table.

    As :func:`postgresql_checkpointer` (side tables ``<table>_h_*``, the projection in the same
    transaction). ``connect_kwargs`` (and the DSN's query, ``?ssl=disabled`` too) go to
    ``mysql.connector.connect``.
    """
    from tulip_nb.memory.backends._history_kv import SQLHistoryCheckpointer
    from tulip_nb.memory.backends._mysql import MySQLBackend, kv_table_ddl, parse_mysql_dsn
    from tulip_nb.memory.backends._mysql_tls import tls_choice
    from tulip_nb.memory.backends._sql_server import MySQLDialect

    kwargs = {**parse_mysql_dsn(dsn), **connect_kwargs}
    mode, why = tls_choice(kwargs)  # the rules of MySQLBackend (_mysql_tls): preferred by default
    if mode == "disabled":
        kwargs["ssl_disabled"] = True
    kwargs.pop("max_pool_size", None)
    kwargs.setdefault("charset", charset)
    kwargs.setdefault("collation", collation)

    def ddl(nopad: str | None) -> str:
        return kv_table_ddl(f"`{table_name}`", table_name, nopad, charset, collation)

    tls = why if mode == "required" else None
    dialect = MySQLDialect(kwargs, table_name=table_name, kv_ddl=ddl, pool_size=pool_size, tls_required=tls)
    backend = MySQLBackend(dsn=dsn, table_name=table_name, charset=charset, collation=collation, **connect_kwargs)
    return SQLHistoryCheckpointer(dialect, layout=layout, sign=sign, backend=backend)


def opensearch_checkpointer(
    hosts: list[str] | str | None = None,
    index_name: str = "tulip-checkpoints",
    *,
    sign: bool = True,
    **kwargs: Any,
) -> StorageBackendAdapter:
    """A checkpointer on OpenSearch: one document per key in ``index_name`` (created on first use).

    ``hosts`` are URLs (``["http://localhost:9200"]``, ``https://user:pass@host:9200``); other
    keywords (``username``, ``password``, ``refresh``, ``timeout``, opensearch-py client options
    such as ``verify_certs``) go to :class:`~tulip_nb.memory.backends._opensearch.OpenSearchBackend`.
    Tested against an emulator (osmem-server), not a real cluster.
    """
    from tulip_nb.memory.backends._opensearch import OpenSearchBackend

    return StorageBackendAdapter(OpenSearchBackend(hosts=hosts, index_name=index_name, **kwargs), sign=sign)
