"""RedisBackend: tulip's key-value layout on Redis (redis-py asyncio).

Every logical key is stored as a Redis string ``<prefix><key>`` holding compact JSON (default
prefix ``tulip:state:``, as in tulip). The prefix is used as given, as tulip uses it, so one
``prefix=`` string names the same keys in tulip and in tulip_nb. It must end in ``:`` (or be
``""``, the whole database): tulip's ``prefix="trial"`` stores thread ``x1`` under ``trialx1:…``,
where ``prefix="trialx"`` stores thread ``1``, so ``"trial"`` would list, vacuum and search the
other prefix's threads, and a prefix without the ``:`` raises a :class:`ValueError` that says what
to write. (tulip_nb used to append the ``:``: ``prefix="trial:"`` is what ``"trial"`` stored under.)
Nested prefixes still overlap, because thread ids may contain ``:`` (``trial:`` sees the threads of
``trial:x:`` as ``x:…``): give each checkpointer a prefix that does not start with another's.

A save is one ``WATCH <index>`` / ``MULTI`` / ``EXEC``: if another process changes the thread's
index between our read and our write, Redis aborts the ``EXEC`` and the save re-runs (and a
compare-and-swap save then sees the new latest and raises
:class:`~tulip_nb.core.errors.CheckpointConflict`). ``:latest`` is written with ``COPY``, server
side, so the state's bytes cross the network once.

With ``ttl_seconds`` every key of a thread expires together, ``ttl_seconds`` after the thread's
last save (tulip sets the TTL per key, so its older checkpoints expire while its index still lists
them).

Over the keys, ``list_threads(pattern)`` lists them (glob, ``SCAN MATCH``), ``vacuum`` removes old
checkpoints of threads in tulip's layout (Redis keeps no write times: other keys expire by TTL) and
``search_data(path, value)`` matches each value's top-level ``path`` (read and matched here: Redis
strings are not queryable).

Use it through the factory::

    from tulip_nb.memory.backends import redis_checkpointer
    cp = redis_checkpointer(url="redis://localhost:6379/0", ttl_seconds=86_400)

With a TTL (or ``layout="kv"``) that is a checkpointer in tulip's layout over this backend; by
default ``redis_checkpointer`` keeps threads in the history model (:mod:`.redis_history`), under
``<prefix>\\x00h:`` (:data:`HISTORY_NAMESPACE`), with these keys written as its projection.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from tulip_nb.core.errors import BackendUnavailable
from tulip_nb.memory._pools import PoolPerLoop
from tulip_nb.memory.backends._kv import INDEX_SUFFIX, Copy, Delete, KVStore, Op, Put, Txn, parse_index

try:
    import redis.asyncio as aioredis
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisError, WatchError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("RedisBackend needs the 'redis' package: pip install 'tulip_nb[redis]'") from e

__all__ = ["HISTORY_NAMESPACE"]

T = TypeVar("T")
_MAX_RETRIES = 1000
PREFIX_SEPARATOR = ":"
"""What a non-empty ``prefix`` must end with (so that no prefix is the start of another's keys)."""
HISTORY_NAMESPACE = "\x00h:"
"""Where the history store (:mod:`._redis_history`) keeps its keys under the prefix:
``<prefix>\\x00h:...``. Thread ids cannot hold NUL, so no key of tulip's layout starts there;
the key listings here (``keys``, ``index_keys``, ``list_threads``) leave that namespace out."""


def _check_prefix(prefix: str) -> str:
    """``prefix`` itself, if it names the same keys here and in tulip and no other prefix's.

    Raises:
        ValueError: a non-empty prefix that does not end in ``:``.
    """
    if not isinstance(prefix, str):
        raise TypeError(f"RedisBackend: prefix must be a string, got {type(prefix).__name__}")
    if prefix and not prefix.endswith(PREFIX_SEPARATOR):
        fixed = prefix + PREFIX_SEPARATOR
        raise ValueError(
            f"RedisBackend: prefix={prefix!r} must end in {PREFIX_SEPARATOR!r}. Keys are prefix + key as given "
            f"(as in tulip), so thread 'x1' under {prefix!r} and thread '1' under {prefix + 'x'!r} would be the "
            f"same keys ({prefix + 'x1'!r}...); write prefix={fixed!r}, and give tulip the same string "
            f"(tulip_nb stored {prefix!r} under {fixed!r} before)"
        )
    return prefix


def _glob_escape(text: str) -> str:
    """Escape Redis MATCH pattern characters so ``text`` matches literally."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class _RedisTxn(Txn):
    def __init__(self, pipe: Any, prefix: str) -> None:
        super().__init__()
        self._pipe = pipe
        self._prefix = prefix

    async def get(self, key: str) -> bytes | None:
        value: bytes | None = await self._pipe.get(self._prefix + key)
        return value


class RedisBackend(KVStore):
    """Stores JSON values under ``<prefix><key>`` in one Redis database.

    Args:
        url: ``redis://host:port/db`` (or ``rediss://``).
        prefix: the key namespace, used as given (as tulip does), default ``"tulip:state:"``
            (tulip's). It must end in ``":"`` or be ``""`` (see the module docstring).
        ttl_seconds: expire every key of a thread this long after its last save (``None``: never).
        socket_timeout: seconds for connecting and for each command.
    """

    backend_name = "RedisBackend"

    def __init__(
        self,
        url: str = "redis://localhost:6379",
        *,
        prefix: str = "tulip:state:",
        ttl_seconds: int | None = None,
        socket_timeout: float = 10.0,
        **client_kwargs: Any,
    ) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive (or None for no expiry)")
        self.url = url
        self.prefix = _check_prefix(prefix)
        self.ttl_seconds = ttl_seconds
        # a blocking pool: under a burst of concurrent saves, wait for a connection, never fail
        client_kwargs.setdefault("max_connections", 64)
        self._client_args = dict(
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            timeout=socket_timeout,
            **client_kwargs,
        )
        # redis-py clients are bound to their event loop: one per loop (no schema)
        self._clients: PoolPerLoop[Any] = PoolPerLoop(self._new_client, lambda client: client.aclose())
        # a second pool for the reads of a transaction whose WATCH holds a connection of the first
        # (a writer never waits for a connection that another waiting writer holds)
        self._readers: PoolPerLoop[Any] = PoolPerLoop(self._new_client, lambda client: client.aclose())

    async def _new_client(self) -> Any:
        pool = aioredis.BlockingConnectionPool.from_url(self.url, **self._client_args)
        return aioredis.Redis.from_pool(pool)

    def __repr__(self) -> str:
        return f"RedisBackend(url={self.url!r}, prefix={self.prefix!r}, ttl_seconds={self.ttl_seconds})"

    async def client(self) -> Any:
        """This event loop's ``redis.asyncio.Redis`` client (for WATCH/MULTI transactions)."""
        return await self._clients.get()

    async def reader(self) -> Any:
        """This event loop's client for reads made while a transaction's WATCH holds a connection."""
        return await self._readers.get()

    def errors(self, key: str | None = None) -> contextlib.AbstractAsyncContextManager[None]:
        """Redis's errors as :class:`~tulip_nb.core.errors.BackendUnavailable` (``WatchError`` passes)."""
        return self._errors(key)

    @contextlib.asynccontextmanager
    async def _errors(self, key: str | None = None) -> AsyncIterator[None]:
        try:
            yield
        except BackendUnavailable:
            raise
        except (RedisConnectionError, RedisTimeoutError, OSError) as e:
            raise BackendUnavailable(f"RedisBackend: cannot reach Redis at {self.url}: {e}", path=key) from e
        except WatchError:
            raise
        except RedisError as e:
            raise BackendUnavailable(f"RedisBackend: Redis refused the operation: {e}", path=key) from e

    async def get(self, key: str) -> bytes | None:
        async with self._errors(key):
            value: bytes | None = await (await self._clients.get()).get(self.prefix + key)
            return value

    async def get_many(self, keys: list[str]) -> list[bytes | str | None]:
        if not keys:
            return []
        async with self._errors():
            values: list[bytes | str | None] = await (await self._clients.get()).mget([self.prefix + k for k in keys])
            return values

    async def transact(self, lock_key: str, body: Callable[[Txn], Awaitable[T]]) -> T:
        p = self.prefix
        client = await self._clients.get()
        async with self._errors(lock_key), client.pipeline(transaction=True) as pipe:
            for _ in range(_MAX_RETRIES):
                try:
                    await pipe.watch(p + lock_key)
                    txn = _RedisTxn(pipe, p)
                    result = await body(txn)
                    pipe.multi()
                    self._queue(pipe, txn.ops, lock_key)
                    await pipe.execute()
                    return result
                except WatchError:
                    continue
                finally:
                    await pipe.reset()
        raise BackendUnavailable(f"RedisBackend: {lock_key} kept changing; gave up after {_MAX_RETRIES} tries")

    def _queue(self, pipe: Any, ops: list[Op], lock_key: str) -> None:
        p, ttl = self.prefix, self.ttl_seconds
        for op in ops:
            match op:
                case Put(key, value):
                    pipe.set(p + key, value, ex=ttl)
                case Copy(source, dest):
                    pipe.copy(p + source, p + dest, replace=True)
                    if ttl:
                        pipe.expire(p + dest, ttl)
                case Delete(key):
                    pipe.delete(p + key)
        if ttl and lock_key.endswith(INDEX_SUFFIX) and any(not isinstance(op, Delete) for op in ops):
            # keep the whole thread alive together: refresh every record the index lists
            thread = lock_key[: -len(INDEX_SUFFIX)]
            written = {op.target for op in ops}
            for op in ops:
                if isinstance(op, Put) and op.key == lock_key:
                    for e in parse_index(op.value, where=op.key):
                        rk = f"{thread}:{e.checkpoint_id}"
                        if rk not in written:
                            pipe.expire(p + rk, ttl)

    async def index_keys(self) -> list[str]:
        match = _glob_escape(self.prefix) + "*" + INDEX_SUFFIX
        n = len(self.prefix)
        client = await self._clients.get()
        async with self._errors():
            found = [k.decode()[n:] async for k in client.scan_iter(match=match, count=1000)]
        return [k for k in found if not k.startswith(HISTORY_NAMESPACE)]

    async def keys(self, pattern: str = "*") -> list[str]:
        match = _glob_escape(self.prefix) + (pattern or "*")
        n = len(self.prefix)
        client = await self._clients.get()
        async with self._errors():
            found = [k.decode()[n:] async for k in client.scan_iter(match=match, count=1000)]
        return [k for k in found if not k.startswith(HISTORY_NAMESPACE)]

    async def close(self) -> None:
        await self._clients.aclose()
        await self._readers.aclose()
