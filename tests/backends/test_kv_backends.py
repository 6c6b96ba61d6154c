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
from tulip_nb.memory.backends import SQLHistoryCheckpointer
from tulip_nb.memory.backends._adapters import StorageBackendAdapter
from tulip_nb.memory.backends._kv import KVStore
from tulip_nb.memory.checkpointer import BaseCheckpointer

from .conformance import full_state
from .factories.kv import MYSQL_DSN, PG_DSN, REDIS_URL, drop_mysql_table, drop_pg_table, drop_redis_prefix

SERVICES = {"redis": 6379, "postgresql": 5432, "mysql": 3306}


def make(kind: str, name: str, **kw: Any) -> StorageBackendAdapter:
    from tulip_nb.memory.backends import mysql_checkpointer, postgresql_checkpointer, redis_checkpointer

    if kind == "redis":
        return redis_checkpointer(url=kw.pop("url", REDIS_URL), prefix=name, **kw)
    # these tests read tulip's whole layout (a record per checkpoint, the full index): layout="tulip"
    kw.setdefault("layout", "tulip")
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
    kind, name, maker = pair
    # tulip's whole layout (every checkpoint in the index): on Redis, the history with every
    # checkpoint projected (the default projects the latest turn end only)
    cp = make(kind, name, layout="tulip") if kind == "redis" else maker()
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


# -- the storage-backend surface (seed 001): list_threads, vacuum and search_data over the rows -----
SURFACE_KINDS = [*sorted(SERVICES), "opensearch"]


@pytest.fixture(params=SURFACE_KINDS)
async def surface(request: Any) -> AsyncIterator[tuple[str, StorageBackendAdapter]]:
    """(kind, an adapter on a fresh store) for every server backend, OpenSearch on its emulator."""
    kind = request.param
    if kind == "opensearch":
        from tulip_nb.memory.backends import opensearch_checkpointer

        from .factories.opensearch import drop_index, new_index, opensearch_url

        url, index = opensearch_url(), new_index()
        cp = opensearch_checkpointer(hosts=[url], index_name=index)
        try:
            yield kind, cp
        finally:
            await cp.close()
            await drop_index(url, index)
        return
    require_service(kind, "127.0.0.1", SERVICES[kind])
    name = f"tnbkv_{uuid.uuid4().hex[:12]}" + (":" if kind == "redis" else "")
    # the raw backend's surface over tulip's own layout: on Redis, layout="kv" (the history layouts
    # keep the thread in the history, so a raw vacuum of tulip's keys removes only their projection)
    cp = make(kind, name, layout="kv") if kind == "redis" else make(kind, name)
    try:
        yield kind, cp
    finally:
        await cp.close()
        await drop(kind, name)


async def test_backend_list_threads_vacuum_and_search_data_work_over_the_rows(surface: Any) -> None:
    kind, cp = surface
    backend = cp.backend
    a1 = await cp.save(full_state(marker="a1"), "case-1")
    a2 = await cp.save(full_state(marker="a2"), "case-1")
    b1 = await cp.save(full_state(marker="b1"), "case-2")
    await backend.save("plain:row", {"agent_id": "x", "n": [1, 2], "nested": {"k": "v"}})
    case1 = sorted([f"case-1:{a1}", f"case-1:{a2}", "case-1:latest", "case-1:_checkpoints"])
    case2 = sorted([f"case-2:{b1}", "case-2:latest", "case-2:_checkpoints"])
    every = sorted([*case1, *case2, "plain:row"])
    # list_threads: the raw keys (rows), sorted, glob-filtered, paged
    assert await backend.list_threads() == every
    assert await backend.list_threads("%") == every  # tulip's SQL default pattern
    assert await backend.list_threads(pattern="case-1:*") == case1
    assert await backend.list_threads(pattern="case-?:latest") == ["case-1:latest", "case-2:latest"]
    assert await backend.list_threads(limit=2, offset=1) == every[1:3]
    # search_data: containment on the JSON data (top-level key), full rows back
    hits = await backend.search_data("agent_id", "agent-7")
    assert {h["thread_id"] for h in hits} == {
        f"case-1:{a1}",
        f"case-1:{a2}",
        "case-1:latest",
        f"case-2:{b1}",
        "case-2:latest",
    }
    assert all(h["data"]["agent_id"] == "agent-7" for h in hits)
    assert [h["thread_id"] for h in await backend.search_data("agent_id", "x")] == ["plain:row"]
    assert [h["thread_id"] for h in await backend.search_data("nested", {"k": "v"})] == ["plain:row"]
    assert [h["thread_id"] for h in await backend.search_data("n", [2])] == ["plain:row"]
    assert len(await backend.search_data("metadata", {"user": "u42"})) == 5
    assert len(await backend.search_data("agent_id", "agent-7", limit=2)) == 2
    assert await backend.search_data("agent_id", "nobody") == []
    row = (await backend.search_data("agent_id", "x"))[0]
    assert row["data"] == {"agent_id": "x", "n": [1, 2], "nested": {"k": "v"}}
    # vacuum: nothing is old yet; then everything is (Redis keeps no write time for plain rows)
    assert await backend.vacuum(older_than_days=30) == 0
    assert await backend.list_threads() == every
    removed = await backend.vacuum(older_than_days=-1)
    # the raw backend's vacuum removes tulip's keys; the SQL stores' threads live on in the history
    history = isinstance(cp, SQLHistoryCheckpointer)
    assert await cp.list_threads() == (["case-1", "case-2"] if history else [])
    if kind == "redis":
        assert removed == 3 and await backend.list_threads() == ["plain:row"]
    else:
        assert removed == 4 and await backend.list_threads() == []


async def test_backend_vacuum_keeps_a_live_threads_layout_consistent(surface: Any) -> None:
    _, cp = surface
    backend = cp.backend
    from datetime import UTC, datetime, timedelta

    from tulip_nb.memory.checkpointer import Checkpoint

    old = datetime.now(UTC) - timedelta(days=90)
    await cp.put_checkpoint(Checkpoint("c-old", "live", old, full_state(marker="old"), {}))
    new = await cp.save(full_state(marker="new"), "live")
    assert await backend.vacuum(older_than_days=30) == 1
    assert await backend.get("live:c-old") is None
    if isinstance(cp, SQLHistoryCheckpointer):  # tulip's keys went; the history keeps it until its own vacuum
        assert await cp.list_checkpoints("live") == [new, "c-old"]
        assert await cp.vacuum(older_than_days=30) == 1
    assert await cp.list_checkpoints("live") == [new]
    loaded = await cp.load("live")
    assert loaded is not None and loaded.messages[1].content == "question 0 new"


# -- one object, two event loops: run_sync (tulip_nb's background loop) and asyncio.run ----------
TWO_LOOP_KINDS = [*SURFACE_KINDS, "tulip_pg"]


def _two_loop_checkpointer(kind: str) -> tuple[BaseCheckpointer, Callable[[], Any]]:
    """A fresh checkpointer of ``kind`` and a coroutine function that drops its storage."""
    if kind == "opensearch":
        from tulip_nb.memory.backends import opensearch_checkpointer

        from .factories.opensearch import drop_index, new_index, opensearch_url

        url, index = opensearch_url(), new_index()
        return opensearch_checkpointer(hosts=[url], index_name=index), lambda: drop_index(url, index)
    require_service(kind, "127.0.0.1", 5432 if kind == "tulip_pg" else SERVICES[kind])
    if kind == "tulip_pg":
        from tulip_nb.memory.backends.tulip_pg import TulipPgCheckpointer

        table = f"tnb_tpg_{uuid.uuid4().hex[:12]}"
        return TulipPgCheckpointer(PG_DSN, table=table, tenant="acme"), lambda: drop_pg_table(table)
    name = f"tnbkv_{uuid.uuid4().hex[:12]}" + (":" if kind == "redis" else "")
    return make(kind, name), lambda: drop(kind, name)


@pytest.mark.parametrize("order", ["run_sync-then-asyncio.run", "asyncio.run-then-run_sync"])
@pytest.mark.parametrize("kind", TWO_LOOP_KINDS)
def test_one_checkpointer_works_from_two_event_loops(kind: str, order: str) -> None:
    from tulip_nb._sync import run_sync

    cp, dropper = _two_loop_checkpointer(kind)

    async def save(marker: str) -> str:
        return await cp.save(full_state(marker=marker), "two-loops")

    async def load_and_save(marker: str) -> tuple[str | None, str]:
        state = await cp.load("two-loops")
        return (state.messages[1].content if state else None), await save(marker)

    async def finish_here(marker: str) -> tuple[str | None, str]:
        try:
            return await load_and_save(marker)
        finally:
            await cp.close()  # this loop's pool here, the background loop's on that loop

    try:
        if order.startswith("run_sync"):
            first = run_sync(save("one"))
            content, second = asyncio.run(finish_here("two"))
        else:
            first = asyncio.run(load_and_save("one"))[1]  # its pool dies with its loop
            content, second = run_sync(load_and_save("two"))
            assert run_sync(cp.latest_checkpoint_id("two-loops")) == second
        assert content == "question 0 one"
        assert run_sync(cp.list_checkpoints("two-loops")) == [second, first]
    finally:
        run_sync(cp.close())
        run_sync(dropper())
