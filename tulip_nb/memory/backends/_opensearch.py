"""OpenSearchBackend: tulip's key-value layout as documents of one OpenSearch index (opensearch-py).

Tested against an emulator (osmem-server, reporting OpenSearch API 3.8), not a real cluster.

Each logical key (``<tid>:<cid>``, ``<tid>:latest``, ``<tid>:_checkpoints``; see
:mod:`tulip_nb.memory.backends._kv`) is one document whose ``_id`` is the key, shaped the way
tulip-agents' ``opensearch_checkpointer`` writes it, so either side reads the other's threads::

    {"thread_id": "<key>",            # keyword: the logical key again
     "data": {...},                   # the JSON value (object, not indexed)
     "data_json": "<data as text>",   # text: what tulip's own search matches (not on :latest)
     "metadata": {...},               # the save metadata (not indexed in indices we create)
     "created_at": ..., "updated_at": ...,
     # tulip_nb's additions (tulip ignores them):
     "kv_kind": "record"|"latest"|"index",
     "message_text": "...",           # text, on :latest only: the messages' content, for search
     "meta_terms": ["step=1", ...]}   # keyword, on records: key=json(value) of save + state metadata

Analysing text dominates the cost of a write, so each save indexes the state's text twice, as
tulip does: ``data_json`` on the record (tulip's search still finds our threads through it) and
``message_text`` on ``:latest`` (our search, over message content only).

Keys longer than OpenSearch's 512-byte ``_id`` limit (tulip cannot store those at all) get the id
``#h:<sha256 of the key>``; every read checks ``thread_id`` against the key.

**Concurrency.** OpenSearch has no multi-document transaction, so a save is ordered around one
compare-and-swap on the thread's index document: (1) the new record is written, (2) the index
document is replaced with ``if_seq_no``/``if_primary_term`` (or created with ``op_type=create``
for a new thread) — a concurrent writer makes this fail with 409, and the whole read-modify-write
re-runs, so ``expected_parent`` is a real compare-and-swap across processes — then (3) ``:latest``
is written with ``version_type=external`` and the index document's new ``_seq_no`` as version, so a
slower writer can never put an older ``:latest`` over a newer one. Removed records are deleted after
the swap. The index therefore never lists a missing record; a crash between steps leaves at worst
an unlisted record or a missing ``:latest`` (loads then fall back to the index's newest entry).

**Visibility.** Gets are real-time, so loads always see the last save. For searches, each
transaction ends with one ``_refresh`` of the index (tulip instead refreshes on every write; one
refresh covering all shards is cheaper and also makes the index document visible), so the next
search, ``list_threads`` or metadata query sees the save. Pass ``refresh=False`` to leave it to
the index's refresh interval.

**The storage-backend surface.** ``list_threads(pattern)`` lists keys (a ``wildcard`` query),
``vacuum(older_than_days)`` removes old checkpoints (index and ``:latest`` kept consistent) and
documents not written since (``updated_at``), and ``search_data(path, value)`` matches the
documents' ``data`` (not indexed, so read and matched here).

Use it through the factory::

    from tulip_nb.memory.backends import opensearch_checkpointer
    cp = opensearch_checkpointer(hosts=["http://localhost:9200"], index_name="tulip-checkpoints")
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson

from tulip_nb.core.errors import BackendUnavailable
from tulip_nb.memory._pools import PoolPerLoop
from tulip_nb.memory.backends._kv import INDEX_SUFFIX, LATEST_SUFFIX, Copy, Delete, KVStore, Op, Put, Txn, parse_index

try:
    from opensearchpy import AsyncOpenSearch
    from opensearchpy.exceptions import ConnectionError as OSConnectionError
    from opensearchpy.exceptions import TransportError
    from opensearchpy.serializer import JSONSerializer
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("OpenSearchBackend needs opensearch-py (and aiohttp): pip install 'tulip_nb[opensearch]'") from e

__all__ = ["OpenSearchBackend", "document_id"]

T = TypeVar("T")
_MAX_ID_BYTES = 512
_HASHED_PREFIX = "#h:"
_MAX_TERM_BYTES = 256
_MAX_RETRIES = 1000
_PAGE = 1000
_STREAM_OVER = 2**20 - 1

MAPPINGS: dict[str, Any] = {
    "properties": {
        # tulip's fields
        "thread_id": {"type": "keyword"},
        "data": {"type": "object", "enabled": False},
        "data_json": {"type": "text"},
        "metadata": {"type": "object", "enabled": False},  # no dynamic-mapping type clashes
        "created_at": {"type": "date"},
        "updated_at": {"type": "date"},
        # tulip_nb's
        "kv_kind": {"type": "keyword"},
        "message_text": {"type": "text"},
        "meta_terms": {"type": "keyword"},
    }
}


def document_id(key: str) -> str:
    """The ``_id`` of a logical key: the key itself (as tulip), hashed when over 512 bytes."""
    if len(key.encode()) <= _MAX_ID_BYTES and not key.startswith(_HASHED_PREFIX):
        return key
    return _HASHED_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def meta_term(key: str, value: Any) -> str:
    """The ``meta_terms`` entry for ``key == value`` (hashed when long: Lucene caps term size)."""
    term = key + "=" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    if len(term.encode()) > _MAX_TERM_BYTES:
        return "#" + hashlib.sha256(term.encode()).hexdigest()
    return term


def _kind(key: str) -> bytes:
    if key.endswith(LATEST_SUFFIX):
        return b"latest"
    if key.endswith(INDEX_SUFFIX):
        return b"index"
    return b"record"


def _derived_fields(key: str, value: bytes) -> bytes:
    """tulip_nb's searchable fields of a document, as JSON members (``,"k":v...``).

    A record gets ``data_json`` (tulip's search) and ``meta_terms``; ``:latest`` gets
    ``message_text``; the index document gets ``data_json`` only (small).
    """
    kind = _kind(key)
    data_json = b',"data_json":' + orjson.dumps(value.decode())
    if kind == b"index":
        return data_json
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        return data_json
    if kind == b"latest":
        messages = obj.get("messages") or ()
        texts = [m["content"] for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)]
        return b',"message_text":' + orjson.dumps("\n".join(texts))
    terms: set[str] = set()
    for meta in (obj.get("_metadata"), obj.get("metadata")):
        if isinstance(meta, dict):
            terms.update(meta_term(str(k), v) for k, v in meta.items())
    return data_json + b',"meta_terms":' + orjson.dumps(sorted(terms))


class _Serializer(JSONSerializer):
    """orjson both ways; str/bytes/stream bodies (our NDJSON bulk bodies) pass through untouched."""

    def loads(self, s: str) -> Any:
        return orjson.loads(s)

    def dumps(self, data: Any) -> Any:
        if isinstance(data, str | bytes | io.BytesIO):
            return data
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode()


class _Doc:
    __slots__ = ("primary_term", "seq_no", "value")

    def __init__(self, value: bytes, seq_no: int, primary_term: int) -> None:
        self.value, self.seq_no, self.primary_term = value, seq_no, primary_term


class _OSTxn(Txn):
    def __init__(self, backend: OpenSearchBackend, lock_key: str, locked: _Doc | None) -> None:
        super().__init__()
        self._backend, self._lock_key, self._locked = backend, lock_key, locked

    async def get(self, key: str) -> bytes | None:
        if key == self._lock_key:
            return self._locked.value if self._locked else None
        return await self._backend.get(key)


class _Conflict(Exception):
    """The index document changed under us: re-run the transaction."""


class OpenSearchBackend(KVStore):
    """Stores JSON values as documents of one OpenSearch index (see the module docstring)."""

    backend_name = "OpenSearchBackend"
    supports_search = True
    supports_metadata_query = True

    def __init__(
        self,
        hosts: list[str] | str | None = None,
        *,
        index_name: str = "tulip-checkpoints",
        username: str | None = None,
        password: str | None = None,
        refresh: bool = True,
        timeout: float = 10.0,
        **client_kwargs: Any,
    ) -> None:
        self.hosts = [hosts] if isinstance(hosts, str) else list(hosts or ["http://localhost:9200"])
        self.index_name = index_name
        self.refresh = refresh
        if username is not None and password is not None:
            client_kwargs.setdefault("http_auth", (username, password))
        client_kwargs.setdefault("max_retries", 0)  # an outage must surface now, not after retries
        self._client_kwargs = {"timeout": timeout, "serializer": _Serializer(), **client_kwargs}
        # the client's aiohttp session is bound to its event loop: one per loop, the index once
        self._clients: PoolPerLoop[Any] = PoolPerLoop(self._new_client, lambda c: c.close(), self._create_index)

    def __repr__(self) -> str:
        return f"OpenSearchBackend(hosts={self.hosts!r}, index_name={self.index_name!r})"

    # -- connection, errors, index ------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _errors(self, key: str | None = None) -> AsyncIterator[None]:
        try:
            yield
        except (TimeoutError, OSConnectionError, OSError) as e:
            raise BackendUnavailable(
                f"OpenSearchBackend: cannot reach OpenSearch at {self.hosts}: {e}", path=key
            ) from e
        except TransportError as e:
            raise BackendUnavailable(f"OpenSearchBackend: OpenSearch refused the operation: {e}", path=key) from e

    async def _new_client(self) -> Any:
        return AsyncOpenSearch(hosts=self.hosts, **self._client_kwargs)

    async def _es(self) -> Any:
        return await self._clients.get()

    async def setup(self) -> None:
        """Create the index with its mapping now (idempotent), instead of on first use."""
        await self._es()

    async def _create_index(self, client: Any) -> None:
        async with self._errors():
            if await client.indices.exists(index=self.index_name):
                return
            try:
                await client.indices.create(index=self.index_name, body={"mappings": MAPPINGS})
            except TransportError as e:
                if "resource_already_exists_exception" not in str(e.error):
                    raise  # another process created it first: fine; anything else is not

    async def close(self) -> None:
        await self._clients.aclose()

    # -- reads ----------------------------------------------------------------------------------
    async def _docs(self, keys: list[str]) -> list[_Doc | None]:
        """Real-time reads of several keys in one ``_mget`` (ids travel in the body, not the URL)."""
        if not keys:
            return []
        es = await self._es()
        async with self._errors(keys[0] if len(keys) == 1 else None):
            # whole documents: source filtering costs the server more than the extra bytes cost us
            resp = await es.mget(index=self.index_name, body={"docs": [{"_id": document_id(k)} for k in keys]})
        out: list[_Doc | None] = []
        for key, doc in zip(keys, resp["docs"], strict=True):
            if "error" in doc:
                raise BackendUnavailable(f"OpenSearchBackend: cannot read {key!r}: {doc['error']}", path=key)
            src = doc.get("_source") if doc.get("found") else None
            if not src or src.get("thread_id") != key or "data" not in src:
                out.append(None)
                continue
            out.append(
                _Doc(orjson.dumps(src["data"], option=orjson.OPT_NON_STR_KEYS), doc["_seq_no"], doc["_primary_term"])
            )
        return out

    async def get(self, key: str) -> bytes | None:
        (doc,) = await self._docs([key])
        return doc.value if doc else None

    async def get_many(self, keys: list[str]) -> list[bytes | str | None]:
        out: list[bytes | str | None] = []
        for i in range(0, len(keys), _PAGE):
            out += [d.value if d else None for d in await self._docs(keys[i : i + _PAGE])]
        return out

    # -- writes ---------------------------------------------------------------------------------
    def _source(self, key: str, value: bytes, meta: bytes, now: bytes) -> bytes:
        return (
            b'{"thread_id":'
            + orjson.dumps(key)
            + b',"kv_kind":"'
            + _kind(key)
            + b'","data":'
            + value
            + b',"metadata":'
            + meta
            + b',"created_at":'
            + now
            + b',"updated_at":'
            + now
            + _derived_fields(key, value)
            + b"}"
        )

    async def _bulk(self, lines: list[bytes], key: str | None) -> list[dict[str, Any]]:
        """Send NDJSON ``lines``; the per-item results, in order."""
        if not lines:
            return []
        es = await self._es()
        body = b"\n".join(lines) + b"\n"
        # aiohttp warns (ResourceWarning) on raw bytes over 1 MiB: hand it a stream instead
        payload = io.BytesIO(body) if len(body) > _STREAM_OVER else body
        async with self._errors(key):
            resp = await es.transport.perform_request("POST", "/_bulk", params=None, body=payload)
        return [next(iter(item.values())) for item in resp["items"]]

    def _action(self, op: str, key: str, **extra: Any) -> bytes:
        return orjson.dumps({op: {"_index": self.index_name, "_id": document_id(key), **extra}})

    @staticmethod
    def _check(items: list[dict[str, Any]], keys: list[str], ok: tuple[int, ...]) -> None:
        for item, key in zip(items, keys, strict=True):
            if item.get("status", 500) >= 300 and item.get("status") not in ok:
                raise BackendUnavailable(
                    f"OpenSearchBackend: OpenSearch refused a write: {item.get('error')}", path=key
                )

    async def transact(self, lock_key: str, body: Callable[[Txn], Awaitable[T]]) -> T:
        """Read the lock document, run ``body``, write around a CAS of the lock document; retry on 409."""
        orphans: set[str] = set()  # records written by attempts whose swap lost
        for _ in range(_MAX_RETRIES):
            (locked,) = await self._docs([lock_key])
            txn = _OSTxn(self, lock_key, locked)
            try:
                result = await body(txn)
            except BaseException:
                if orphans:
                    await self._drop_orphans(orphans, lock_key, locked)
                    await self._refresh(lock_key)
                raise
            try:
                written = await self._commit(txn.ops, lock_key, locked)
            except _Conflict as c:
                orphans |= c.args[0]
                continue
            await self._drop_orphans(orphans - written, lock_key, None)
            if txn.ops:
                await self._refresh(lock_key)
            return result
        raise BackendUnavailable(f"OpenSearchBackend: {lock_key} kept changing; gave up after {_MAX_RETRIES} tries")

    async def _refresh(self, key: str) -> None:
        """Make this transaction's writes visible to searches (one refresh of the whole index)."""
        if self.refresh:
            es = await self._es()
            async with self._errors(key):
                await es.indices.refresh(index=self.index_name)

    async def _drop_orphans(self, orphans: set[str], lock_key: str, locked: _Doc | None) -> None:
        """Delete records a lost swap left behind, unless the current index lists them."""
        if not orphans:
            return
        listed: set[str] = set()
        if lock_key.endswith(INDEX_SUFFIX):
            thread = lock_key[: -len(INDEX_SUFFIX)]
            raw = locked.value if locked else await self.get(lock_key)
            listed = {f"{thread}:{e.checkpoint_id}" for e in parse_index(raw, where=lock_key)}
        drop = sorted(orphans - listed)
        items = await self._bulk([self._action("delete", k) for k in drop], None)
        self._check(items, drop, ok=(404,))

    async def _commit(self, ops: list[Op], lock_key: str, locked: _Doc | None) -> set[str]:
        """Apply ``ops``: plain records, then the lock CAS, then ``:latest`` and deletes.

        Returns the keys written before the swap; raises :class:`_Conflict` (carrying them) on 409.
        """
        now = orjson.dumps(datetime.now(UTC).isoformat(timespec="microseconds"))
        values: dict[str, tuple[bytes, bytes]] = {}
        pre: list[tuple[str, bytes, bytes]] = []
        cas: tuple[bytes, bytes] | None = None
        cas_delete = False
        post: list[tuple[str, str, bytes, bytes]] = []  # ("put"|"delete", key, value, meta)
        for op in ops:
            key = op.target
            match op:
                case Delete():
                    if key == lock_key:
                        cas, cas_delete = None, True
                    else:
                        post.append(("delete", key, b"", b""))
                    continue
                case Copy(src):
                    got = values.get(src)
                    if got is None:
                        raw = await self.get(src)
                        if raw is None:
                            continue  # the source vanished: leave :latest missing (loads use the index)
                        got = (raw if isinstance(raw, bytes) else raw.encode(), b"{}")
                    value, meta = got
                case Put(_, value, meta):
                    pass
            values[key] = (value, meta)
            if key == lock_key:
                cas, cas_delete = (value, meta), False
            elif key.endswith(LATEST_SUFFIX):
                post.append(("put", key, value, meta))
            else:
                pre.append((key, value, meta))

        def source(key: str, value: bytes, meta: bytes) -> bytes:
            return self._source(key, value, meta, now)

        lines: list[bytes] = []
        for key, value, meta in pre:
            lines += [self._action("index", key), source(key, value, meta)]
        self._check(await self._bulk(lines, lock_key), [k for k, *_ in pre], ok=())
        written = {k for k, *_ in pre}

        seq: int | None = None
        guard = {"if_seq_no": locked.seq_no, "if_primary_term": locked.primary_term} if locked else {}
        if cas is not None or (cas_delete and locked):
            if cas is not None:
                action = self._action("index", lock_key, **guard) if locked else self._action("create", lock_key)
                lines = [action, source(lock_key, *cas)]
            else:
                lines = [self._action("delete", lock_key, **guard)]
            (item,) = await self._bulk(lines, lock_key)
            if item.get("status") == 409:
                raise _Conflict(written)
            self._check([item], [lock_key], ok=())
            seq = int(item["_seq_no"])

        lines, keys = [], []
        for kind, key, value, meta in post:
            # :latest carries the index document's seq_no as external version: newest swap wins
            version = (
                {"version": seq, "version_type": "external"} if seq is not None and key.endswith(LATEST_SUFFIX) else {}
            )
            lines.append(self._action("index" if kind == "put" else "delete", key, **version))
            if kind == "put":
                lines.append(source(key, value, meta))
            keys.append(key)
        items = await self._bulk(lines, lock_key)
        self._check(items, keys, ok=(404, 409))
        stale = [i for i, item in enumerate(items) if item.get("status") == 409 and post[i][0] == "put"]
        if stale and seq is not None:
            await self._force_latest([post[i] for i in stale], lock_key, seq, source)
        return written

    async def _force_latest(
        self,
        puts: list[tuple[str, str, bytes, bytes]],
        lock_key: str,
        seq: int,
        source: Callable[[str, bytes, bytes], bytes],
    ) -> None:
        """A ``:latest`` refused our version although our swap is the newest: a writer without
        external versions (tulip, on another shard) pushed its version past our seq_no. While the
        index still carries our swap, overwrite it with internal versioning."""
        (current,) = await self._docs([lock_key])
        if current is None or current.seq_no != seq:
            return  # a newer swap exists; its writer owns :latest
        lines: list[bytes] = []
        for _, key, value, meta in puts:
            lines += [self._action("index", key), source(key, value, meta)]
        self._check(await self._bulk(lines, lock_key), [k for _, k, *_ in puts], ok=())

    # -- queries --------------------------------------------------------------------------------
    async def _search(self, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        es = await self._es()
        async with self._errors(key):
            resp: dict[str, Any] = await es.search(index=self.index_name, body=body)
        return resp

    async def _scan_keys(self, query: dict[str, Any]) -> list[str]:
        """Every document's key matching ``query``, paged with ``search_after``."""
        out: list[str] = []
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {"size": _PAGE, "_source": ["thread_id"], "sort": [{"thread_id": "asc"}]}
            body["query"] = query
            if after is not None:
                body["search_after"] = after
            hits = (await self._search(body))["hits"]["hits"]
            out += [h["_source"]["thread_id"] for h in hits]
            if len(hits) < _PAGE:
                return out
            after = hits[-1]["sort"]

    async def index_keys(self) -> list[str]:
        keys = await self._scan_keys({"wildcard": {"thread_id": {"value": "*" + INDEX_SUFFIX}}})
        return [k for k in keys if k.endswith(INDEX_SUFFIX)]

    async def keys(self, pattern: str = "*") -> list[str]:
        wildcard = "*" if "[" in pattern or "\\" in pattern else (pattern or "*")
        return await self._scan_keys({"wildcard": {"thread_id": {"value": wildcard}}})

    async def stale_keys(self, cutoff: datetime) -> list[str]:
        stamp = cutoff.astimezone(UTC).isoformat(timespec="microseconds")
        return await self._scan_keys({"range": {"updated_at": {"lt": stamp}}})

    async def search_latest(self, query: str, limit: int) -> list[tuple[str, float]]:
        """Full-text, all terms, over the messages of each thread's ``:latest`` document.

        Documents tulip wrote have no ``message_text``; for those the match runs on ``data_json``.
        """
        text_match = {"match": {"message_text": {"query": query, "operator": "and"}}}
        tulip_match = {
            "bool": {
                "must_not": [{"exists": {"field": "message_text"}}],
                "must": [{"match": {"data_json": {"query": query, "operator": "and"}}}],
            }
        }
        body = {
            "size": limit,
            "_source": ["thread_id"],
            "query": {
                "bool": {
                    "filter": [{"wildcard": {"thread_id": {"value": "*" + LATEST_SUFFIX}}}],
                    "should": [text_match, tulip_match],
                    "minimum_should_match": 1,
                }
            },
        }
        hits = (await self._search(body))["hits"]["hits"]
        return [
            (h["_source"]["thread_id"], float(h["_score"] or 0.0))
            for h in hits
            if h["_source"]["thread_id"].endswith(LATEST_SUFFIX)
        ]

    async def metadata_candidates(self, key: str, value: Any, limit: int) -> list[str]:
        """Record keys with ``key == value`` in save or state metadata: a term query on ``meta_terms``.

        Records tulip wrote have no ``meta_terms``; their save metadata is matched with a term query
        on ``metadata.<key>`` where the index maps it (indices tulip created).
        """
        should: list[dict[str, Any]] = [{"term": {"meta_terms": meta_term(key, value)}}]
        if isinstance(value, str | int | float | bool) and key and "." not in key:
            should.append({"term": {f"metadata.{key}": value}})
        body = {
            "size": limit,
            "_source": ["thread_id"],
            "sort": [{"created_at": "desc"}],
            "query": {
                "bool": {
                    "should": should,
                    "minimum_should_match": 1,
                    "must_not": [{"terms": {"kv_kind": ["latest", "index"]}}],
                }
            },
        }
        hits = (await self._search(body))["hits"]["hits"]
        keys = [h["_source"]["thread_id"] for h in hits]
        keys = [k for k in keys if not k.endswith((LATEST_SUFFIX, INDEX_SUFFIX))]
        if not keys:
            return []
        # searches lag deletes until the next refresh; a real-time existence check does not
        es = await self._es()
        async with self._errors():
            resp = await es.mget(
                index=self.index_name,
                body={"docs": [{"_id": document_id(k)} for k in keys]},
                params={"_source_includes": "thread_id"},
            )
        return [k for k, d in zip(keys, resp["docs"], strict=True) if d.get("found")]
