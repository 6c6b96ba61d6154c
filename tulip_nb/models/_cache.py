"""A content-addressed model response cache in one SQLite file: re-running a cell is free and the same.

An entry's **key** is the SHA-256 of the canonical JSON (sorted keys, no whitespace) of what
decides an answer: the model name, the base URL, the exact request (messages, tools,
tool_choice, generation parameters as sent) and an **epoch** (a sample number: ask the same
request again under ``epoch=1`` for a second, independent sample). Entries are immutable: the
first answer stored under a key is the answer, forever (until pruned). A hit returns that answer
bit for bit, with ``usage.cache_hits == 1`` (``usage.cached`` is True) and the token counts and
cost of the call that made it; nothing is sent.

The file is stdlib ``sqlite3`` in WAL mode (``synchronous=NORMAL``: durable against a killed
process, not against power loss), safe for several threads and processes on one machine (WAL
needs a local filesystem, not NFS). Share a cache by copying the one file after :meth:`close`
(which folds the write-ahead log back in). ``tulip-nb cache ls/prune/clear PATH`` lists and trims
it from a shell.

Two ways to use it: ``OpenAIModel(..., cache=cache)`` (keys on the exact wire request), or
:func:`cached` around any model::

    from tulip_nb.models import ModelCache, cached

    cache = ModelCache("responses.sqlite")
    model = cached(my_model, cache)                   # or OpenAIModel("gpt-4o", cache=cache)

>>> import asyncio, tempfile, os
>>> from tulip_nb.core import Message
>>> from tulip_nb.models import ScriptedModel
>>> cache = ModelCache(os.path.join(tempfile.mkdtemp(), "c.sqlite"))
>>> model = cached(ScriptedModel(["one", "two"]), cache)
>>> first = asyncio.run(model.complete([Message.user("hi")], []))
>>> again = asyncio.run(model.complete([Message.user("hi")], []))
>>> first.message.content, again.message.content, first.usage.cached, again.usage.cached
('one', 'one', False, True)
>>> [(e.model, e.epoch) for e in cache.entries()]
[('scripted', 0)]
>>> cache.close()
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.models._base import Model, ModelResponse, Usage

__all__: list[str] = []

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    base_url TEXT,
    epoch INTEGER NOT NULL,
    created REAL NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created);
"""


def _refuse(value: Any) -> Any:
    raise UserError(
        f"a model request holds {type(value).__name__} {value!r}, which has no canonical JSON: "
        "the response cache keys on JSON values only"
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_refuse)


def request_key(model: str, base_url: str | None, request: Mapping[str, Any], epoch: int = 0) -> str:
    """The cache key: SHA-256 hex of the canonical JSON of (model, base URL, request, epoch).

    >>> a = request_key("gpt-4o", None, {"messages": [{"role": "user", "content": "hi"}], "temperature": 0})
    >>> a == request_key("gpt-4o", None, {"temperature": 0, "messages": [{"content": "hi", "role": "user"}]})
    True
    >>> a == request_key("gpt-4o", None, {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}, 1)
    False
    """
    body = {"model": model, "base_url": base_url, "request": request, "epoch": epoch}
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """One stored answer, as :meth:`ModelCache.entries` lists it (``size``: bytes of its JSON)."""

    key: str
    model: str
    base_url: str | None
    epoch: int
    created: float
    size: int


def _path_of(path_or_url: str | os.PathLike[str]) -> Path:
    text = os.fspath(path_or_url)
    for prefix in ("sqlite:///", "file:"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    if not text:
        raise UserError(f"ModelCache needs a file path, got {path_or_url!r}")
    return Path(text).expanduser()


def _response_json(response: ModelResponse) -> str:
    usage = {k: v for k, v in asdict(response.usage).items() if k != "cache_hits"}
    return _canonical({"message": json.loads(response.message.json_bytes()), "usage": usage})


def _response_from(text: str, key: str) -> ModelResponse:
    data = json.loads(text)
    message = Message.model_validate(data["message"])
    usage = Usage(**{**data["usage"], "cache_hits": int(data["usage"].get("requests", 1) or 1)})
    return ModelResponse(message, usage, raw={"cached": True, "key": key})


class ModelCache:
    """Model answers on disk, keyed by the request (see the module docstring).

    Args:
        path_or_url: the SQLite file (created with its folder), or ``sqlite:///path``.
        expiry: answers older than this are not served (a miss; the new answer replaces them).
            None: never expire.
        clock: seconds since the epoch (injectable for tests).

    ``hits`` / ``misses`` count this instance's lookups.
    """

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        expiry: timedelta | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = _path_of(path_or_url)
        self.expiry = expiry
        self.clock = clock
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(_SCHEMA)
            except sqlite3.DatabaseError as e:
                db.close()
                raise UserError(f"{self.path} is not a model response cache: {e}", path=str(self.path)) from e
            self._db = db
        return self._db

    def _fresh_after(self) -> float:
        return -1.0 if self.expiry is None else self.clock() - self.expiry.total_seconds()

    # -- entries --------------------------------------------------------------------------------
    def get(self, key: str) -> ModelResponse | None:
        """The stored answer under ``key`` (marked cached), or None (missing or expired)."""
        with self._lock:
            row = (
                self._conn()
                .execute("SELECT response FROM responses WHERE key = ? AND created > ?", (key, self._fresh_after()))
                .fetchone()
            )
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
        return _response_from(row[0], key)

    def put(
        self,
        key: str,
        response: ModelResponse,
        *,
        model: str,
        base_url: str | None = None,
        request: Mapping[str, Any] | None = None,
        epoch: int = 0,
    ) -> None:
        """Store ``response`` under ``key`` unless a live answer is there already (immutable:
        the first one stays; an expired one is replaced)."""
        body = _response_json(response)
        req = _canonical(request or {})
        with self._lock:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM responses WHERE key = ? AND created <= ?", (key, self._fresh_after()))
                db.execute(
                    "INSERT OR IGNORE INTO responses (key, model, base_url, epoch, created, request, response) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (key, model, base_url, epoch, self.clock(), req, body),
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def contains(self, key: str) -> bool:
        """Whether a live (unexpired) answer is stored under ``key``; not counted as a lookup."""
        with self._lock:
            sql = "SELECT 1 FROM responses WHERE key = ? AND created > ?"
            return self._conn().execute(sql, (key, self._fresh_after())).fetchone() is not None

    async def fetch(
        self,
        *,
        model: str,
        base_url: str | None,
        request: Mapping[str, Any],
        epoch: int,
        call: Callable[[], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """The cached answer to ``request``, else ``await call()``, stored, then served from the
        store (so a concurrent writer's earlier answer wins and every caller sees the same)."""
        key = request_key(model, base_url, request, epoch)
        hit = self.get(key)
        if hit is not None:
            return hit
        response = await call()
        self.put(key, response, model=model, base_url=base_url, request=request, epoch=epoch)
        with self._lock:
            row = self._conn().execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None or row[0] == _response_json(response):
            return response
        return _response_from(row[0], key)

    def entries(self, model: str | None = None) -> list[CacheEntry]:
        """Every entry (or ``model``'s), oldest first."""
        sql = "SELECT key, model, base_url, epoch, created, length(request) + length(response) FROM responses"
        args: tuple[Any, ...] = ()
        if model is not None:
            sql, args = sql + " WHERE model = ?", (model,)
        with self._lock:
            rows = self._conn().execute(sql + " ORDER BY created, key", args).fetchall()
        return [CacheEntry(*row) for row in rows]

    def prune(self, *, older_than: timedelta | None = None, model: str | None = None) -> int:
        """Delete the entries older than ``older_than`` and/or of ``model``; returns how many.
        With neither, the cache's ``expiry`` is the age; without one either, UserError."""
        if older_than is None and model is None:
            older_than = self.expiry
        if older_than is None and model is None:
            raise UserError("prune: say what to delete (older_than= or model=); clear() deletes everything")
        where: list[str] = []
        args: list[Any] = []
        if older_than is not None:
            where.append("created <= ?")
            args.append(self.clock() - older_than.total_seconds())
        if model is not None:
            where.append("model = ?")
            args.append(model)
        with self._lock:
            cur = self._conn().execute("DELETE FROM responses WHERE " + " AND ".join(where), args)
        return cur.rowcount

    def clear(self) -> int:
        """Delete every entry; returns how many."""
        with self._lock:
            return self._conn().execute("DELETE FROM responses").rowcount

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn().execute("SELECT count(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Fold the write-ahead log into the file and close it (the file alone is then the cache)."""
        with self._lock:
            if self._db is not None:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._db.close()
                self._db = None

    def __del__(self) -> None:  # an instance dropped unclosed: close quietly (no checkpoint)
        db = self.__dict__.get("_db")
        if db is not None:
            db.close()

    def __getstate__(self) -> dict[str, Any]:  # travels to workers as its path; each opens the file
        state = dict(self.__dict__)
        state.update(_db=None, _lock=None, hits=0, misses=0)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __enter__(self) -> ModelCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ModelCache({str(self.path)!r})"


def generic_request(messages: list[Message], tools: list[dict[str, Any]], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The request a model without its own wire format is keyed on: messages as tulip JSON,
    tools, and the call's keyword arguments."""
    return {"messages": [json.loads(m.json_bytes()) for m in messages], "tools": tools, "params": dict(kwargs)}


class CachedModel:
    """``model`` behind a :class:`ModelCache`: a hit answers without calling it.

    The request is the model's own ``cache_request(messages, tools, **kwargs)`` when it has one
    (``OpenAIModel``: the exact wire request), else tulip messages + tools + keyword arguments. The
    key also holds ``model.name``, ``model.base_url`` (if any) and ``epoch``.
    """

    def __init__(self, model: Model, cache: ModelCache, *, epoch: int = 0) -> None:
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise UserError(f"epoch must be an int >= 0, got {epoch!r}")
        self.model = model
        self.cache = cache
        self.epoch = epoch
        self.name = model.name

    def _request(self, messages: list[Message], tools: list[dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
        own = getattr(self.model, "cache_request", None)
        return own(messages, tools, **kwargs) if callable(own) else generic_request(messages, tools, kwargs)

    def has_cached(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> bool:
        """Whether this request would be answered from the cache (nothing sent)."""
        request = self._request(messages, tools, kwargs)
        base_url = getattr(self.model, "base_url", None)
        return self.cache.contains(request_key(self.name, base_url, request, self.epoch))

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> ModelResponse:
        request = self._request(messages, tools, kwargs)
        return await self.cache.fetch(
            model=self.name,
            base_url=getattr(self.model, "base_url", None),
            request=request,
            epoch=self.epoch,
            call=lambda: self.model.complete(messages, tools, **kwargs),
        )

    def __getattr__(self, name: str) -> Any:  # metadata lookups (context window, params) reach the model
        if "model" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["model"], name)

    def __repr__(self) -> str:
        return f"cached({self.model!r}, {self.cache!r})"


def cached(model: Model, cache: ModelCache, *, epoch: int = 0) -> CachedModel:
    """``model`` answering from ``cache`` when it can (see :class:`CachedModel`)."""
    return CachedModel(model, cache, epoch=epoch)
