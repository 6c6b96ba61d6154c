"""The servers the remote benches write to, fresh places on them, and what each place holds.

Every store gets a place of its own, so "what it holds" is measured without anything else on the
server: a PostgreSQL **schema** (every table the store creates in it: ``pg_total_relation_size``,
TOAST and indexes included), a MariaDB **database** (``SUM(LENGTH(col))`` over every column of
every table in it), a Redis **key pattern** containing a random tag (``MEMORY USAGE`` of every key
that contains it, in a database the tests never flush), an S3 **bucket** on a moto server run as
its own process (the sum of the objects' sizes). :func:`drop` removes the place.

Servers: PostgreSQL 127.0.0.1:5432 (postgres, db test), MariaDB 127.0.0.1:3306 (root, db test),
Redis 127.0.0.1:6379 (db 12), moto (``moto_server``, started here on a free port).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
MYSQL_HOST = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}
REDIS_URL = "redis://127.0.0.1:6379/12"
S3_CREDS = {"region_name": "us-east-1", "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
PORTS = {"PostgreSQL": 5432, "MySQL": 3306, "Redis": 6379}


def up(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_process() -> Iterator[str]:
    """``moto_server`` in its own process (not sharing the bench's GIL); its URL."""
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if exe is None:
        raise RuntimeError("moto_server not found (pip install 'moto[server]')")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while not up(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not start on port {port}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Place:
    """A fresh place on one store's server: ``name`` (schema, database, key tag or bucket)."""

    store: str
    name: str
    url: str = ""  # S3: the moto server

    @property
    def pg_dsn(self) -> str:
        """A DSN whose connections put new tables in this schema (libpq ``options``)."""
        return f"{PG_DSN}?options=-csearch_path%3D{self.name}"

    @property
    def mysql_dsn(self) -> str:
        return f"mysql://root@127.0.0.1:3306/{self.name}"


async def new_place(store: str, url: str = "") -> Place:
    """Create a fresh schema / database / key tag / bucket name for ``store``."""
    name = f"tnbb{uuid.uuid4().hex[:10]}"
    if store == "PostgreSQL":
        import asyncpg

        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f'CREATE SCHEMA "{name}"')
        finally:
            await conn.close()
    elif store == "MySQL":
        await _mysql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    return Place(store, name, url)


async def drop(place: Place) -> None:
    if place.store == "PostgreSQL":
        import asyncpg

        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{place.name}" CASCADE')
        finally:
            await conn.close()
    elif place.store == "MySQL":
        await _mysql(f"DROP DATABASE IF EXISTS `{place.name}`")
    elif place.store == "Redis":
        import redis.asyncio as aioredis

        client = aioredis.from_url(REDIS_URL)
        try:
            keys = [k async for k in client.scan_iter(match=f"*{place.name}*", count=1000)]
            for i in range(0, len(keys), 500):
                await client.delete(*keys[i : i + 500])
        finally:
            await client.aclose()
    elif place.store == "S3":
        _s3_empty(place)


async def held(place: Place) -> int:
    """Bytes the place holds now (see the module docstring for what is counted on each store)."""
    if place.store == "PostgreSQL":
        import asyncpg

        conn = await asyncpg.connect(PG_DSN)
        try:
            got = await conn.fetchval(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'm')",
                place.name,
            )
        finally:
            await conn.close()
        return int(got)
    if place.store == "MySQL":
        return await _mysql_bytes(place.name)
    if place.store == "Redis":
        import redis.asyncio as aioredis

        client = aioredis.from_url(REDIS_URL)
        try:
            total = 0
            async for key in client.scan_iter(match=f"*{place.name}*", count=1000):
                total += int(await client.memory_usage(key, samples=0) or 0)
            return total
        finally:
            await client.aclose()
    if place.store == "S3":
        client = _s3_client(place.url)
        total = 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=place.name):
            total += sum(int(o["Size"]) for o in page.get("Contents", []))
        client.close()
        return total
    raise ValueError(place.store)


def file_bytes(base: Path) -> int:
    """Bytes under ``base`` once SQLite's WAL is folded into the database (what stays on disk)."""
    import sqlite3

    for db in base.rglob("*.sqlite3"):
        conn = sqlite3.connect(db, timeout=60)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    return sum(p.stat().st_size for p in base.rglob("*") if p.is_file())


async def _mysql(sql: str, database: str | None = None) -> list[Any]:
    from mysql.connector.aio import connect

    conn = await connect(**MYSQL_HOST, database=database or "test", ssl_disabled=True, autocommit=True)
    try:
        cur = await conn.cursor()
        await cur.execute(sql)
        rows = list(await cur.fetchall()) if cur.with_rows else []
        await cur.close()
        return rows
    finally:
        await conn.close()


async def _mysql_bytes(database: str) -> int:
    cols = await _mysql(
        "SELECT table_name, column_name FROM information_schema.columns "
        f"WHERE table_schema = '{database}' ORDER BY table_name, ordinal_position"
    )
    tables: dict[str, list[str]] = {}
    for table, col in cols:
        tables.setdefault(str(table), []).append(str(col))
    total = 0
    for table, names in tables.items():
        expr = " + ".join(f"COALESCE(LENGTH(`{c}`), 0)" for c in names)
        rows = await _mysql(f"SELECT COALESCE(SUM({expr}), 0) FROM `{table}`", database)
        total += int(rows[0][0])
    return total


def _s3_client(url: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=url, **S3_CREDS)  # type: ignore[call-overload]


def _s3_empty(place: Place) -> None:
    client = _s3_client(place.url)
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=place.name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=place.name, Delete={"Objects": keys})
        client.delete_bucket(Bucket=place.name)
    except client.exceptions.NoSuchBucket:
        pass
    finally:
        client.close()
