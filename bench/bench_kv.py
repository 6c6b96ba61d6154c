"""Save/load of a 200- and a 2000-message thread on Redis, PostgreSQL and MySQL.

Beside tulip_nb's checkpointer, in the same run on the same server: tulip-agents' own factory and
the floor, one raw SET / INSERT of the same state bytes. Prints a Markdown table of medians (ms).

    .venv/bin/python -m bench.bench_kv [--repeats 7]

Servers: redis://127.0.0.1:6379/15, postgresql://postgres@127.0.0.1:5432/test, MariaDB root@test;
OpenSearch is an osmem-server emulator started for the run (its numbers say nothing about a cluster).
Everything it creates (key prefix, tables) carries a random suffix and is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench.workload import build_state, to_tulip_state
from tulip_nb.core import state_json_bytes

REDIS_URL = "redis://127.0.0.1:6379/15"
_OPENSEARCH: list[str] = []


def opensearch_url() -> str:
    """An osmem-server emulator for this run (stopped at exit), started on first use."""
    if not _OPENSEARCH:
        from tests.backends.factories.opensearch import start_emulator, stop_emulator

        proc, url = start_emulator()
        atexit.register(stop_emulator, proc)
        _OPENSEARCH.append(url)
    return _OPENSEARCH[0]


PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
MYSQL_DSN = "mysql://root@127.0.0.1:3306/test"


async def timed(fn: Callable[[], Awaitable[Any]], repeats: int) -> float:
    await fn()  # warm-up (connection, table creation)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


async def raw_floor(kind: str, name: str, payload: bytes, repeats: int) -> float:
    if kind == "opensearch":  # one index request carrying the state as the document
        from opensearchpy import AsyncOpenSearch

        client = AsyncOpenSearch(hosts=[opensearch_url()])
        try:
            body = b'{"data":' + payload + b"}"
            return await timed(lambda: client.index(index=name + "-raw", id="k", body=body), repeats)
        finally:
            await client.indices.delete(index=name + "-raw", params={"ignore_unavailable": "true"})
            await client.close()
    if kind == "redis":
        import redis.asyncio as aioredis

        client = aioredis.from_url(REDIS_URL)
        try:
            return await timed(lambda: client.set(f"{name}raw", payload), repeats)
        finally:
            await client.delete(f"{name}raw")
            await client.aclose()
    if kind == "postgresql":
        import asyncpg

        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f"CREATE TABLE {name}_raw (k TEXT PRIMARY KEY, data JSONB)")
            text = payload.decode()
            return await timed(
                lambda: conn.execute(
                    f"INSERT INTO {name}_raw VALUES ($1, $2::jsonb) ON CONFLICT (k) DO UPDATE SET data = EXCLUDED.data",
                    "k",
                    text,
                ),
                repeats,
            )
        finally:
            await conn.execute(f"DROP TABLE IF EXISTS {name}_raw")
            await conn.close()
    from mysql.connector.aio import connect

    conn = await connect(host="127.0.0.1", user="root", database="test", ssl_disabled=True, autocommit=True)
    cur = await conn.cursor()
    try:
        await cur.execute(f"CREATE TABLE {name}_raw (k VARCHAR(64) PRIMARY KEY, data JSON) DEFAULT CHARSET=utf8mb4")
        text = payload.decode()
        return await timed(
            lambda: cur.execute(
                f"INSERT INTO {name}_raw VALUES (%s, %s) ON DUPLICATE KEY UPDATE data = VALUES(data)", ("k", text)
            ),
            repeats,
        )
    finally:
        await cur.execute(f"DROP TABLE IF EXISTS {name}_raw")
        await cur.close()
        await conn.close()


def checkpointers(kind: str, name: str) -> tuple[Any, Any]:
    import tulip.memory.backends as tb

    from tulip_nb.memory.backends import mysql_checkpointer, postgresql_checkpointer, redis_checkpointer

    if kind == "opensearch":
        from tulip_nb.memory.backends import opensearch_checkpointer

        url = opensearch_url()
        return (
            opensearch_checkpointer(hosts=[url], index_name=name),
            tb.opensearch_checkpointer(hosts=[url], index_name=name + "-t", use_ssl=False),
        )
    if kind == "redis":
        return (
            redis_checkpointer(url=REDIS_URL, prefix=name + ":"),
            tb.redis_checkpointer(url=REDIS_URL, prefix=name + "t:"),
        )
    if kind == "postgresql":
        return (
            postgresql_checkpointer(dsn=PG_DSN, table_name=name),
            tb.postgresql_checkpointer(dsn=PG_DSN, table_name=name + "_t"),
        )
    return (
        mysql_checkpointer(dsn=MYSQL_DSN, table_name=name, ssl_disabled=True),
        tb.mysql_checkpointer(dsn=MYSQL_DSN + "?ssl_disabled=1", table_name=name + "_t"),
    )


async def cleanup(kind: str, name: str) -> None:
    from tests.backends.factories.kv import drop_mysql_table, drop_pg_table, drop_redis_prefix

    if kind == "opensearch":
        from tests.backends.factories.opensearch import drop_index

        await drop_index(opensearch_url(), name)
        await drop_index(opensearch_url(), name + "-t")
    elif kind == "redis":
        await drop_redis_prefix(name)
    elif kind == "postgresql":
        await drop_pg_table(name)
        await drop_pg_table(name + "_t")
    else:
        await drop_mysql_table(name)
        await drop_mysql_table(name + "_t")


async def measure(kind: str, n: int, repeats: int) -> dict[str, float]:
    """Medians (ms) of ``save ours``, ``save tulip``, ``floor``, ``load ours``, ``load tulip`` and the ``KiB``."""
    name = f"tnbbench_{uuid.uuid4().hex[:10]}"  # lower case: also a valid OpenSearch index name
    state = build_state(n)
    theirs_state = to_tulip_state(state)
    ours, theirs = checkpointers(kind, name)
    try:
        o_save = await timed(lambda: ours.save(state, "bench"), repeats)
        o_load = await timed(lambda: ours.load("bench"), repeats)
        t_save = await timed(lambda: theirs.save(theirs_state, "bench"), repeats)
        t_load = await timed(lambda: theirs.load("bench"), repeats)
        floor = await raw_floor(kind, name, state_json_bytes(state), repeats)
    finally:
        await ours.close()
        client = getattr(theirs._backend, "_client", None)
        if client is not None and hasattr(client, "connection_pool"):
            await client.aclose()
            await client.connection_pool.disconnect()
            theirs._backend._client = None
        await theirs.close()
        await cleanup(kind, name)
    return {
        "save ours": o_save,
        "save tulip": t_save,
        "floor": floor,
        "load ours": o_load,
        "load tulip": t_load,
        "KiB": len(state_json_bytes(state)) / 1024,
    }


async def bench(kind: str, n: int, repeats: int) -> list[str]:
    r = await measure(kind, n, repeats)
    return [
        f"| {kind} | {n} | {r['KiB']:,.0f} | {r['save ours']:.2f} | {r['save tulip']:.2f} | {r['floor']:.2f} "
        f"| {r['save ours'] / r['floor']:.1f}x | {r['load ours']:.2f} | {r['load tulip']:.2f} |"
    ]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print("| backend | messages | KiB | save ours | save tulip | raw floor | ours/floor | load ours | load tulip |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind in ("redis", "postgresql", "mysql", "opensearch"):
        for n in (200, 2000):
            for line in await bench(kind, n, args.repeats):
                print(line, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
