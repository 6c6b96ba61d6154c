"""The key-value layout tulip's storage backends share, and the store interface behind it.

tulip's ``redis_checkpointer`` / ``postgresql_checkpointer`` / ``mysql_checkpointer`` /
(and ``opensearch_checkpointer``) keep each thread under three kinds of *logical keys*::

    <thread_id>:<checkpoint_id>   the state, flattened: AgentState keys at the top level plus
                                  "_checkpoint_id", "_checkpoint_timestamp" (ISO, +00:00) and
                                  "_metadata" (the save metadata)
    <thread_id>:latest            a full copy of the newest such record
    <thread_id>:_checkpoints      the index {"checkpoints": [{"checkpoint_id", "timestamp",
                                  "metadata"}, ...]}, newest first

A store (Redis, a SQL table) maps a logical key to one JSON value. This
module holds the pure parts (encoding a record, parsing the index) and :class:`KVStore`, the
small interface a store implements so :class:`~tulip_nb.memory.backends._adapters.StorageBackendAdapter`
can run every checkpointer operation on it. The one thing a store must do that tulip's do not is
:meth:`KVStore.transact`: run a read-modify-write of one thread's keys atomically (Redis
WATCH/MULTI, a SQL transaction holding the index row's lock), so the index, the record and
``:latest`` always change together and ``expected_parent`` is a real compare-and-swap.
"""

from __future__ import annotations

import fnmatch
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson

from tulip_nb.core import parse_datetime
from tulip_nb.core.errors import CheckpointCorrupt, InvalidThreadId
from tulip_nb.core.state import AgentState
from tulip_nb.memory._envelope import state_from_obj
from tulip_nb.memory.checkpointer import CheckpointInfo
from tulip_nb.memory.history import PROJECTION_KEY
from tulip_nb.memory.retention import relink

__all__ = [
    "INDEX_SUFFIX",
    "LATEST_SUFFIX",
    "RESERVED_CHECKPOINT_IDS",
    "Copy",
    "Delete",
    "IndexEntry",
    "KVStore",
    "Op",
    "Put",
    "Txn",
    "decode_record",
    "encode_index",
    "encode_record",
    "glob_to_like",
    "index_key",
    "json_contains",
    "latest_key",
    "parse_index",
    "record_key",
    "relink_survivors",
    "remove_checkpoints",
]

T = TypeVar("T")

LATEST_SUFFIX = ":latest"
INDEX_SUFFIX = ":_checkpoints"
RESERVED_CHECKPOINT_IDS = frozenset({"latest", "_checkpoints"})
_ENVELOPE_KEYS = ("_checkpoint_id", "_checkpoint_timestamp", "_metadata")
EMPTY_INDEX = b'{"checkpoints":[]}'


def record_key(thread_id: str, checkpoint_id: str) -> str:
    return f"{thread_id}:{checkpoint_id}"


def latest_key(thread_id: str) -> str:
    return thread_id + LATEST_SUFFIX


def index_key(thread_id: str) -> str:
    return thread_id + INDEX_SUFFIX


def check_checkpoint_id(checkpoint_id: str, thread_id: str) -> str:
    """Refuse ids that would make a key ambiguous: ``latest``, ``_checkpoints`` or any ``:``.

    With no ``:`` in checkpoint ids, ``<tid>:<cid>`` splits one way only, so no checkpoint of one
    thread can land on a key of another thread.
    """
    if checkpoint_id in RESERVED_CHECKPOINT_IDS or ":" in checkpoint_id:
        raise InvalidThreadId(
            f"checkpoint_id {checkpoint_id!r} is reserved in the key-value layout "
            "(not 'latest', '_checkpoints', nor containing ':')",
            thread_id=thread_id,
        )
    return checkpoint_id


@dataclass(frozen=True)
class IndexEntry:
    """One row of a thread's ``:_checkpoints`` index."""

    checkpoint_id: str
    created_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "timestamp": iso_micro(self.created_at),
            "metadata": self.metadata,
        }


def iso_micro(value: datetime) -> str:
    """ISO 8601 with microseconds and ``+00:00``: sorts as text the way it sorts as time."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def parse_index(raw: bytes | str | None, *, where: str) -> list[IndexEntry]:
    """The index's entries, newest first (``[]`` for a missing or empty index)."""
    if raw is None:
        return []
    try:
        obj = orjson.loads(raw)
        rows = obj.get("checkpoints", []) if isinstance(obj, dict) else None
        if not isinstance(rows, list):
            raise TypeError("'checkpoints' must be a list")
        out = []
        for row in rows:
            cid = row.get("checkpoint_id")
            if not isinstance(cid, str) or not cid:
                continue  # tulip skips these too
            meta = row.get("metadata") or {}
            out.append(IndexEntry(cid, parse_datetime(row["timestamp"]), meta if isinstance(meta, dict) else {}))
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError, AttributeError) as e:
        raise CheckpointCorrupt(f"unreadable checkpoint index: {e}", path=where) from e
    out.sort(key=lambda e: e.created_at, reverse=True)
    return out


def encode_index(entries: list[IndexEntry]) -> bytes:
    return orjson.dumps({"checkpoints": [e.to_json() for e in entries]}, option=orjson.OPT_NON_STR_KEYS)


def encode_record(state_bytes: bytes, checkpoint_id: str, created_at: datetime, metadata: dict[str, Any]) -> bytes:
    """The flattened record: the state's JSON object with the three ``_`` keys appended."""
    return (
        state_bytes[:-1]
        + b',"_checkpoint_id":'
        + orjson.dumps(checkpoint_id)
        + b',"_checkpoint_timestamp":'
        + orjson.dumps(iso_micro(created_at))
        + b',"_metadata":'
        + orjson.dumps(metadata, option=orjson.OPT_NON_STR_KEYS)
        + b"}"
    )


def decode_record(raw: bytes | str, *, where: str, thread_id: str) -> tuple[AgentState, dict[str, Any]]:
    """Parse a flattened record into (state, the ``_`` keys that were around it).

    The messages take :mod:`tulip_nb.core.fastload`'s path (pydantic's only for odd ones); the
    projection mark of a record tulip_nb wrote (:data:`~tulip_nb.memory.history.PROJECTION_KEY`)
    is not part of the state and is dropped.
    """
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise CheckpointCorrupt(f"not a valid checkpoint record: {e}", path=where, thread_id=thread_id) from e
    if not isinstance(obj, dict):
        what = f"not a valid checkpoint record: a JSON {type(obj).__name__}, not an object"
        raise CheckpointCorrupt(what, path=where, thread_id=thread_id)
    envelope = {k: obj.pop(k) for k in _ENVELOPE_KEYS if k in obj}
    obj.pop(PROJECTION_KEY, None)
    try:
        state = state_from_obj(obj, where=where, thread_id=thread_id)
    except CheckpointCorrupt as e:
        raise CheckpointCorrupt(f"not a valid checkpoint record: {e.message}", path=where, thread_id=thread_id) from e
    return state, envelope


def set_record_metadata(raw: bytes | str, metadata: dict[str, Any]) -> bytes:
    """A record with its ``_metadata`` replaced (used when copying a thread)."""
    obj = orjson.loads(raw)
    obj["_metadata"] = metadata
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


async def relink_survivors(txn: Txn, thread_id: str, entries: list[IndexEntry], cids: set[str]) -> list[IndexEntry]:
    """Queue the rewrite of each survivor whose parent is in ``cids``; the entries, re-linked.

    The new metadata is :func:`tulip_nb.memory.retention.relink`'s; pass the returned entries to
    :func:`remove_checkpoints` in the same transaction.
    """
    infos = [CheckpointInfo(e.checkpoint_id, thread_id, e.created_at, e.metadata) for e in entries]
    changed = relink(infos, cids)
    out = []
    for e in entries:
        meta = changed.get(e.checkpoint_id)
        if meta is None:
            out.append(e)
            continue
        raw = await txn.get(record_key(thread_id, e.checkpoint_id))
        if raw is not None:
            txn.put(record_key(thread_id, e.checkpoint_id), set_record_metadata(raw, meta), _meta_json(meta))
        out.append(IndexEntry(e.checkpoint_id, e.created_at, meta))
    survivors = [e for e in out if e.checkpoint_id not in cids]
    if survivors and survivors[0].checkpoint_id in changed:  # the newest was rewritten: so is :latest
        txn.copy(record_key(thread_id, survivors[0].checkpoint_id), latest_key(thread_id))
    return out


def _meta_json(meta: dict[str, Any]) -> bytes:
    return orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS)


def remove_checkpoints(txn: Txn, thread_id: str, entries: list[IndexEntry], cids: set[str]) -> None:
    """Queue the removal of ``cids`` from a thread, re-pointing ``:latest`` when the newest goes."""
    keep = [e for e in entries if e.checkpoint_id not in cids]
    for cid in cids:
        txn.delete(record_key(thread_id, cid))
    if not keep:
        txn.delete(latest_key(thread_id))
        txn.delete(index_key(thread_id))
        return
    if entries and entries[0].checkpoint_id in cids:
        txn.copy(record_key(thread_id, keep[0].checkpoint_id), latest_key(thread_id))
    txn.put(index_key(thread_id), encode_index(keep))


async def drop_checkpoints(kv: KVStore, thread_id: str, choose: Callable[[list[IndexEntry]], set[str]]) -> int:
    """Drop ``choose(entries)`` of a thread in one transaction that re-links the survivors first
    (a crash leaves all or nothing); how many went. A prune's and a vacuum's drop."""
    ikey = index_key(thread_id)

    async def body(txn: Txn) -> int:
        entries = parse_index(await txn.get(ikey), where=f"{kv.backend_name}:{ikey}")
        gone = choose(entries) & {e.checkpoint_id for e in entries}
        if gone:
            remove_checkpoints(txn, thread_id, await relink_survivors(txn, thread_id, entries, gone), gone)
        return len(gone)

    return await kv.transact(ikey, body)


def created_before(cutoff: datetime) -> Callable[[list[IndexEntry]], set[str]]:
    """What a vacuum drops of a thread: its checkpoints created before ``cutoff``."""
    return lambda entries: {e.checkpoint_id for e in entries if e.created_at < cutoff}


def thread_of(key: str) -> str:
    """The thread part of a layout key (checkpoint ids and suffixes hold no ``:``)."""
    return key.rpartition(":")[0]


def json_contains(doc: Any, probe: Any) -> bool:
    """PostgreSQL's ``@>`` on parsed JSON: objects by key (recursively), arrays by element."""
    if isinstance(probe, dict):
        return isinstance(doc, dict) and all(k in doc and json_contains(doc[k], v) for k, v in probe.items())
    if isinstance(probe, list):
        return isinstance(doc, list) and all(any(json_contains(d, p) for d in doc) for p in probe)
    if isinstance(probe, bool) or isinstance(doc, bool):
        return type(probe) is type(doc) and probe == doc
    return bool(doc == probe)


def glob_to_like(pattern: str) -> str:
    """A glob (``*``, ``?``) as a SQL ``LIKE`` pattern with ``\\`` as escape (``[...]`` is literal)."""
    out = []
    for c in pattern:
        if c == "*":
            out.append("%")
        elif c == "?":
            out.append("_")
        elif c in "%_\\":
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Put:
    """Write ``value`` under ``key``; ``metadata`` fills SQL's ``metadata`` column."""

    key: str
    value: bytes
    metadata: bytes = b"{}"

    @property
    def target(self) -> str:
        return self.key


@dataclass(frozen=True, slots=True)
class Copy:
    """Copy ``source``'s value to ``dest`` server-side (no bytes back and forth)."""

    source: str
    dest: str

    @property
    def target(self) -> str:
        return self.dest


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove ``key``."""

    key: str

    @property
    def target(self) -> str:
        return self.key


Op = Put | Copy | Delete
"""One queued write of a :class:`Txn`; a store applies them in order with ``match``."""


class Txn(ABC):
    """One atomic read-modify-write of one thread's keys, handed to a transaction body.

    Reads happen now (inside the transaction); writes are queued as :data:`Op` values in
    :attr:`ops` and applied in order at commit. A body may be run more than once (Redis retries
    after a concurrent change), so it must not have side effects other than through this object.
    """

    def __init__(self) -> None:
        self.ops: list[Op] = []

    @abstractmethod
    async def get(self, key: str) -> bytes | str | None:
        """The current value of ``key`` (None when absent)."""

    def put(self, key: str, value: bytes, metadata: bytes = b"{}") -> None:
        """Write ``value`` under ``key``; ``metadata`` fills SQL's ``metadata`` column."""
        self.ops.append(Put(key, value, metadata))

    def copy(self, source: str, dest: str) -> None:
        """Copy ``source``'s value to ``dest`` server-side (no bytes back and forth)."""
        self.ops.append(Copy(source, dest))

    def delete(self, key: str) -> None:
        self.ops.append(Delete(key))

    def writes(self, key: str) -> bool:
        """Whether a queued op writes or removes ``key``."""
        return any(op.target == key for op in self.ops)


class KVStore(ABC):
    """What a store implements; the dict-shaped public API is built on it here.

    ``save(thread_id, data)`` / ``load`` / ``delete`` / ``exists`` / ``list_threads`` are the
    storage-backend shape the seeds describe: a ``thread_id`` here is a raw key (the adapter passes
    ``"<tid>:<cid>"``). A storage backend is *not* a checkpointer: wrap it with
    :class:`~tulip_nb.memory.backends._adapters.StorageBackendAdapter` (or a ``*_checkpointer()``
    factory) to pass it to an agent.
    """

    backend_name: str = "KVStore"
    can_list_keys: bool = True
    """Whether :meth:`keys` can enumerate the store (every in-tree store can)."""
    supports_search: bool = False
    supports_metadata_query: bool = False
    ttl_seconds: int | None = None

    # -- primitives ---------------------------------------------------------------------------
    @abstractmethod
    async def get(self, key: str) -> bytes | str | None:
        """Read one logical key."""

    async def get_many(self, keys: list[str]) -> list[bytes | str | None]:
        """Read several logical keys (stores override this with one round trip)."""
        return [await self.get(k) for k in keys]

    @abstractmethod
    async def transact(self, lock_key: str, body: Callable[[Txn], Awaitable[T]]) -> T:
        """Run ``body`` atomically and return what it returns.

        Transactions with the same ``lock_key`` (a thread's index key) are serialised, in any
        process: a SQL store holds the row lock of ``lock_key`` (creating the row if needed, and
        removing it again if the body leaves it unwritten), Redis WATCHes it and retries.
        Inside the body, ``txn.get(lock_key)`` is None until something was written there.
        """

    @abstractmethod
    async def index_keys(self) -> list[str]:
        """Every logical key ending in ``:_checkpoints``."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""

    async def keys(self, pattern: str = "*") -> list[str]:
        """Every stored logical key matching the glob ``pattern`` (any order)."""
        raise NotImplementedError(f"{type(self).__name__} cannot enumerate its keys")

    async def stale_keys(self, cutoff: datetime) -> list[str]:
        """Keys not written since ``cutoff`` (stores that keep no write time return ``[]``)."""
        return []

    # -- optional server-side queries ---------------------------------------------------------
    async def search_latest(self, query: str, limit: int) -> list[tuple[str, float]]:
        """(``:latest`` key, score) of threads whose messages match ``query``."""
        raise NotImplementedError

    async def metadata_candidates(self, key: str, value: Any, limit: int) -> list[str]:
        """Record keys whose save or state metadata may have ``key == value`` (a superset)."""
        raise NotImplementedError

    # -- the dict-shaped storage-backend API --------------------------------------------------
    async def save(
        self,
        thread_id: str,
        data: dict[str, Any],
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Store ``data`` (a JSON object) under the key ``thread_id``; returns a row id."""
        if not isinstance(data, dict):
            raise TypeError(
                f"{type(self).__name__}.save(thread_id, data) takes a dict; to save an AgentState "
                "wrap the backend with the matching *_checkpointer() factory (StorageBackendAdapter)"
            )
        if not isinstance(thread_id, str):
            raise TypeError(f"{type(self).__name__}.save(thread_id, data): thread_id must be a str")
        value = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
        meta = orjson.dumps(metadata or {}, option=orjson.OPT_NON_STR_KEYS)

        async def body(txn: Txn) -> None:
            txn.put(thread_id, value, meta)

        await self.transact(thread_id, body)
        return checkpoint_id or uuid.uuid4().hex

    async def load(self, thread_id: str) -> dict[str, Any] | None:
        """The JSON object stored under ``thread_id``, or None."""
        raw = await self.get(thread_id)
        if raw is None:
            return None
        value = orjson.loads(raw)
        return value if isinstance(value, dict) else {"value": value}

    async def delete(self, thread_id: str) -> bool:
        """Delete the key ``thread_id``; whether it existed."""

        async def body(txn: Txn) -> bool:
            found = await txn.get(thread_id) is not None
            txn.delete(thread_id)
            return found

        return await self.transact(thread_id, body)

    async def exists(self, thread_id: str) -> bool:
        return await self.get(thread_id) is not None

    async def list_threads(self, pattern: str = "*", limit: int = 100, offset: int = 0) -> list[str]:
        """Stored keys (rows), sorted, matching the glob ``pattern`` (``"%"`` also means all).

        These are raw keys, as in tulip: through a ``*_checkpointer()`` factory a thread has the
        keys ``<tid>:<cid>``, ``<tid>:latest`` and ``<tid>:_checkpoints``; the adapter's
        ``list_threads`` returns the thread ids.
        """
        pattern = "*" if pattern in ("%", "") else pattern
        found = sorted(k for k in await self.keys(pattern) if fnmatch.fnmatchcase(k, pattern))
        return found[max(offset, 0) :][: max(limit, 0)]

    async def vacuum(self, older_than_days: float = 30) -> int:
        """Delete what is older than ``older_than_days``; returns how many checkpoints and rows went.

        Threads in tulip's layout keep the checkpointers' vacuum contract
        (:class:`~tulip_nb.memory.backends._history_common.HistoryCheckpointer`): each thread
        loses its checkpoints older than the cutoff in one transaction that re-links the survivors
        (:func:`drop_checkpoints`), with the index and ``:latest`` kept consistent (a thread with none
        left disappears). Beyond the contract, the raw backend also removes other rows last
        written before the cutoff (stores that keep write times: the SQL tables and OpenSearch;
        Redis expires keys with TTLs instead), and counts them in what it returns.
        """
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        removed = 0
        for ikey in await self.index_keys():
            removed += await drop_checkpoints(self, ikey[: -len(INDEX_SUFFIX)], created_before(cutoff))
        live = set(await self.index_keys())
        loose = [
            k
            for k in await self.stale_keys(cutoff)
            if not k.endswith(INDEX_SUFFIX) and thread_of(k) + INDEX_SUFFIX not in live
        ]
        for k in loose:
            removed += await self.delete(k)
        return removed

    async def search_data(self, path: str, value: Any, limit: int = 100) -> list[dict[str, Any]]:
        """Rows whose JSON data has ``path == value`` (a top-level key; containment, as ``@>``).

        Each hit is ``{"thread_id": <key>, "data": <object>, "updated_at": <ISO or None>}``, newest
        first where the store keeps write times. This base version reads every key; the SQL
        backends match in the database (JSONB ``@>``, ``JSON_CONTAINS``).
        """
        probe = {path: value}
        keys = sorted(await self.keys("*"))
        hits: list[dict[str, Any]] = []
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            for key, raw in zip(chunk, await self.get_many(chunk), strict=True):
                if raw is None:
                    continue
                data = orjson.loads(raw)
                if json_contains(data, probe):
                    stamp = data.get("_checkpoint_timestamp") if isinstance(data, dict) else None
                    hits.append({"thread_id": key, "data": data, "updated_at": stamp})
        hits.sort(key=lambda h: h["updated_at"] or "", reverse=True)
        return hits[: max(limit, 0)]

    async def __aenter__(self) -> KVStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
