"""Server backends in tulip's key-value layout: concurrency, CAS across clients, layout, outages."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from tests.conftest import require_service
from tulip_nb.core import BackendUnavailable, CheckpointConflict, InvalidThreadId
from tulip_nb.memory.backends._kv import KVStore
from tulip_nb.memory.backends.adapters import StorageBackendAdapter
from tulip_nb.memory.checkpointer import BaseCheckpointer

from .conformance import full_state
from .factories.kv import MYSQL_DSN, PG_DSN, REDIS_URL, drop_mysql_table, drop_pg_table, drop_redis_prefix

SERVICES = {"redis": 6379, "postgresql": 5432, "mysql": 3306}


def make(kind: str, name: str, **kw: Any) -> StorageBackendAdapter:
    from tulip_nb.memory.backends import mysql_checkpointer, postgresql_checkpointer, redis_checkpointer

    if kind == "redis":
        return redis_checkpointer(url=kw.pop("url", REDIS_URL), prefix=name, **kw)
    if kind == "postgresql":
        return postgresql_checkpointer(dsn=kw.pop("dsn", PG_DSN), table_name=name, **kw)
    return mysql_checkpointer(dsn=kw.pop("dsn", MYSQL_DSN), table_name=name, ssl_disabled=True, **kw)


async def drop(kind: str, name: str) -> None:
    await {"redis": drop_redis_prefix, "postgresql": drop_pg_table, "mysql": drop_mysql_table}[kind](name)


@pytest.fixture(params=sorted(SERVICES))
async def pair(request: Any) -> AsyncIterator[tuple[str, str, Callable[[], StorageBackendAdapter]]]:
    """(kind, store name, a maker of independent clients on the same store)."""
    kind = request.param
    require_service(kind, "127.0.0.1", SERVICES[kind])
    name = f"tnbkv_{uuid.uuid4().hex[:12]}" + (":" if kind == "redis" else "")
    made: list[StorageBackendAdapter] = []

    def maker() -> StorageBackendAdapter:
        made.append(make(kind, name))
        return made[-1]

    try:
        yield kind, name, maker
    finally:
        for cp in made:
            await cp.close()
        await drop(kind, name)


async def test_fifty_concurrent_saves_to_distinct_threads_lose_nothing(pair: Any) -> None:
    _, _, maker = pair
    clients = [maker() for _ in range(5)]
    saved = await asyncio.gather(
        *(clients[i % 5].save(full_state(n_turns=1, marker=f"m{i}"), f"t{i}") for i in range(50))
    )
    reader = maker()
    assert sorted(await reader.list_threads(limit=1000)) == sorted(f"t{i}" for i in range(50))
    for i, cid in enumerate(saved):
        assert await reader.list_checkpoints(f"t{i}") == [cid]
        state = await reader.load(f"t{i}")
        assert state is not None and state.messages[1].content == f"question 0 m{i}"


async def test_two_writers_with_expected_parent_one_conflict(pair: Any) -> None:
    _, _, maker = pair
    a, b = maker(), maker()  # two clients, two connection pools: like two processes
    base = await a.save(full_state(), "shared")
    results = await asyncio.gather(
        a.save(full_state(marker="A"), "shared", expected_parent=base),
        b.save(full_state(marker="B"), "shared", expected_parent=base),
        return_exceptions=True,
    )
    wins = [r for r in results if isinstance(r, str)]
    losses = [r for r in results if isinstance(r, CheckpointConflict)]
    assert len(wins) == 1 and len(losses) == 1
    assert losses[0].actual == wins[0]
    assert await b.list_checkpoints("shared") == [wins[0], base]
    assert await b.latest_checkpoint_id("shared") == wins[0]


async def test_round_trip_keeps_every_key_and_value(pair: Any) -> None:
    _, _, maker = pair
    cp = maker()
    state = full_state()
    await cp.save(state, "rt")
    loaded = await cp.load("rt")
    assert loaded is not None
    assert orjson.loads(loaded.to_json_bytes()) == orjson.loads(state.to_json_bytes())


async def test_layout_latest_is_repointed_and_reserved_ids_refused(pair: Any) -> None:
    _, _, maker = pair
    cp = maker()
    store = cp.backend
    a = await cp.save(full_state(marker="a"), "lay:out")
    b = await cp.save(full_state(marker="b"), "lay:out")
    latest = orjson.loads(await store.get("lay:out:latest") or b"{}")
    assert latest["_checkpoint_id"] == b and latest["_metadata"]["parent_checkpoint_id"] == a
    index = orjson.loads(await store.get("lay:out:_checkpoints") or b"{}")
    assert [e["checkpoint_id"] for e in index["checkpoints"]] == [b, a]
    await cp.delete("lay:out", b)
    latest = orjson.loads(await store.get("lay:out:latest") or b"{}")
    assert latest["_checkpoint_id"] == a
    assert await store.get(f"lay:out:{b}") is None
    assert await cp.list_threads(pattern="lay:*") == ["lay:out"]
    for reserved in ("latest", "_checkpoints", "a:b"):
        with pytest.raises(InvalidThreadId):
            await cp.save(full_state(), "lay:out", checkpoint_id=reserved)


async def test_vacuum_never_leaves_index_pointing_at_nothing(pair: Any) -> None:
    _, _, maker = pair
    cp = maker()
    await cp.save(full_state(), "v")
    assert await cp.vacuum(older_than_days=-1) == 1
    assert await cp.backend.get("v:_checkpoints") is None
    assert await cp.backend.get("v:latest") is None
    assert await cp.list_threads() == []


def test_storage_backends_are_not_checkpointers() -> None:
    from tulip_nb.memory.backends import MySQLBackend, PostgreSQLBackend, RedisBackend

    for cls in (RedisBackend, PostgreSQLBackend, MySQLBackend):
        assert issubclass(cls, KVStore) and not issubclass(cls, BaseCheckpointer)
        assert list(cls.save.__code__.co_varnames[1:3]) == ["thread_id", "data"]


async def test_storage_backend_save_refuses_a_state() -> None:
    require_service("redis", "127.0.0.1", 6379)
    from tulip_nb.memory.backends import RedisBackend

    backend = RedisBackend(url=REDIS_URL, prefix=f"tnbkv_{uuid.uuid4().hex}:")
    try:
        with pytest.raises(TypeError, match="_checkpointer"):
            await backend.save(full_state(), "t")  # type: ignore[arg-type]
    finally:
        await backend.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", sorted(SERVICES))
async def test_unreachable_server_raises_backend_unavailable(kind: str) -> None:
    port = closed_port()
    url = {
        "redis": {"url": f"redis://127.0.0.1:{port}/15", "socket_timeout": 2.0},
        "postgresql": {"dsn": f"postgresql://postgres@127.0.0.1:{port}/test"},
        "mysql": {"dsn": f"mysql://root@127.0.0.1:{port}/test"},
    }[kind]
    cp = make(kind, "tnbkv_down" + (":" if kind == "redis" else ""), **url)
    name = {"redis": "Redis", "postgresql": "PostgreSQL", "mysql": "MySQL"}[kind]
    try:
        with pytest.raises(BackendUnavailable, match=name):
            await cp.load("t")
        with pytest.raises(BackendUnavailable, match=name):
            await cp.save(full_state(), "t")
        with pytest.raises(BackendUnavailable, match=name):
            await cp.list_threads()
    finally:
        with contextlib.suppress(BackendUnavailable):
            await cp.close()
