"""Redis, PostgreSQL, MySQL and OpenSearch (emulator): tulip's key-value layout on real servers.

Each factory uses a fresh key prefix / table / index (uuid) so tests can run again and again
against the shared servers, and removes it afterwards.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from tests.conftest import require_service

from . import Factory, Opener, opener

REDIS_URL = "redis://127.0.0.1:6379/15"
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
MYSQL_DSN = "mysql://root@127.0.0.1:3306/test"


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


async def drop_redis_prefix(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=prefix + "*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


HISTORY_TABLES = ("", "_h_entries", "_h_rows", "_h_lock")
"""tulip's table and the history's side tables beside it (``<table>_h_*``)."""


async def drop_pg_table(table: str, schema: str = "public") -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_DSN)
    try:
        for suffix in HISTORY_TABLES:
            await conn.execute(f'DROP TABLE IF EXISTS "{schema}"."{table}{suffix}"')
    finally:
        await conn.close()


async def drop_mysql_table(table: str) -> None:
    from mysql.connector.aio import connect

    conn = await connect(host="127.0.0.1", port=3306, user="root", password="", database="test", ssl_disabled=True)
    try:
        cur = await conn.cursor()
        for suffix in HISTORY_TABLES:
            await cur.execute(f"DROP TABLE IF EXISTS `{table}{suffix}`")
        await cur.close()
        await conn.commit()
    finally:
        await conn.close()


def redis_factory(layout: str) -> Factory:
    """Redis in ``layout``: the history model (``"history"``, ``"tulip"``: every checkpoint
    projected as tulip's keys) or tulip's own whole-state layout (``"kv"``)."""

    @contextlib.asynccontextmanager
    async def redis_backend(tmp_path: Path) -> AsyncIterator[Opener]:
        require_service("redis", "127.0.0.1", 6379)
        from tulip_nb.memory.backends import redis_checkpointer

        prefix = unique("tnbtest:") + ":"
        try:
            yield opener(lambda: redis_checkpointer(url=REDIS_URL, prefix=prefix, layout=layout))  # type: ignore[arg-type]
        finally:
            await drop_redis_prefix(prefix)

    return redis_backend


@contextlib.asynccontextmanager
async def postgresql_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    require_service("postgresql", "127.0.0.1", 5432)
    from tulip_nb.memory.backends import postgresql_checkpointer

    table = unique("tnb_test_")
    try:
        yield opener(lambda: postgresql_checkpointer(dsn=PG_DSN, table_name=table))
    finally:
        await drop_pg_table(table)


@contextlib.asynccontextmanager
async def postgresql_tulip_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    require_service("postgresql", "127.0.0.1", 5432)
    from tulip_nb.memory.backends import postgresql_checkpointer

    table = unique("tnb_test_")
    try:
        yield opener(lambda: postgresql_checkpointer(dsn=PG_DSN, table_name=table, layout="tulip"))
    finally:
        await drop_pg_table(table)


@contextlib.asynccontextmanager
async def mysql_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    require_service("mysql", "127.0.0.1", 3306)
    from tulip_nb.memory.backends import mysql_checkpointer

    table = unique("tnb_test_")
    try:
        yield opener(lambda: mysql_checkpointer(dsn=MYSQL_DSN, table_name=table, ssl_disabled=True))
    finally:
        await drop_mysql_table(table)


@contextlib.asynccontextmanager
async def mysql_tulip_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    require_service("mysql", "127.0.0.1", 3306)
    from tulip_nb.memory.backends import mysql_checkpointer

    table = unique("tnb_test_")
    try:
        yield opener(lambda: mysql_checkpointer(dsn=MYSQL_DSN, table_name=table, ssl_disabled=True, layout="tulip"))
    finally:
        await drop_mysql_table(table)


FACTORIES: dict[str, Factory] = {
    "redis": redis_factory("history"),
    "redis-tulip": redis_factory("tulip"),
    "redis-kv": redis_factory("kv"),
    "postgresql": postgresql_backend,
    "postgresql-tulip": postgresql_tulip_backend,
    "mysql": mysql_backend,
    "mysql-tulip": mysql_tulip_backend,
}
