"""Export throughput: ``export_threads`` from a File checkpointer to each destination.

Workload: THREADS threads x CHECKPOINTS checkpoints; checkpoint k of a thread is the BENCH.md
conversation prefix of 10*(k+1) messages (so the last is 200 messages, ~0.15 MB), as a thread
that is saved once per turn looks. Each repetition exports into a fresh, empty destination (new
directory, bucket, key prefix or table), once without and once with verification (the verified
export also reads every checkpoint back). Prints a Markdown table of medians: checkpoints/s and
MB/s (MB = the report's ``bytes``, the canonical JSON exported).

    .venv/bin/python -m bench.bench_export [--repeats 3] [--threads 10] [--checkpoints 20]

Servers: Redis, PostgreSQL and MariaDB on 127.0.0.1 (services.md); S3 is moto's in-process
ThreadedMotoServer, which shares the GIL with the exporter (read its row as a lower bound).
A destination whose server is unreachable is skipped with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from bench.workload import build_conversation, build_state
from tulip_nb.lab.export import aexport_threads
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
MYSQL_DSN = "mysql://root@127.0.0.1:3306/test"
REDIS_URL = "redis://127.0.0.1:6379/15"
S3_CREDS = {"region_name": "us-east-1", "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}


def _up(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_MOTO: dict[str, Any] = {}


def _moto_url() -> str:
    if "url" not in _MOTO:
        from moto.server import ThreadedMotoServer

        port = _free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        _MOTO.update(server=server, url=f"http://127.0.0.1:{port}")
    return str(_MOTO["url"])


Dest = Callable[[Path], contextlib.AbstractAsyncContextManager[BaseCheckpointer]]


@contextlib.asynccontextmanager
async def _memory(tmp: Path) -> AsyncIterator[BaseCheckpointer]:
    yield MemoryCheckpointer()


@contextlib.asynccontextmanager
async def _file(tmp: Path) -> AsyncIterator[BaseCheckpointer]:
    yield FileCheckpointer(tmp / f"dst-{uuid.uuid4().hex[:8]}")


@contextlib.asynccontextmanager
async def _s3(tmp: Path) -> AsyncIterator[BaseCheckpointer]:
    from tulip_nb.memory.backends import S3Backend

    cp = S3Backend(f"bench-{uuid.uuid4().hex[:16]}", endpoint_url=_moto_url(), **S3_CREDS)
    try:
        yield cp
    finally:
        await cp.close()


@contextlib.asynccontextmanager
async def _redis(tmp: Path) -> AsyncIterator[BaseCheckpointer]:
    import redis.asyncio as aioredis

    from tulip_nb.memory.backends import redis_checkpointer

    prefix = f"tnbbench:{uuid.uuid4().hex[:10]}:"
    cp = redis_checkpointer(url=REDIS_URL, prefix=prefix)
    try:
        yield cp
    finally:
        await cp.close()
        client = aioredis.from_url(REDIS_URL)
        keys = [k async for k in client.scan_iter(match=prefix + "*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@contextlib.asynccontextmanager
async def _postgresql(tmp: Path) -> AsyncIterator[BaseCheckpointer]:
    import asyncpg

    from tulip_nb.memory.backends import postgresql_checkpointer

    table = f"tnb_bench_{uuid.uuid4().hex[:10]}"
    cp = postgresql_checkpointer(dsn=PG_DSN, table_name=table)
    try:
        yield cp
    finally:
        await cp.close()
        conn = await asyncpg.connect(PG_DSN)
        await conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        await conn.close()


@contextlib.asynccontextmanager
async def _mysql(tmp: Path) -> AsyncIterator[BaseCheckpointer]:
    from mysql.connector.aio import connect

    from tulip_nb.memory.backends import mysql_checkpointer

    table = f"tnb_bench_{uuid.uuid4().hex[:10]}"
    cp = mysql_checkpointer(dsn=MYSQL_DSN, table_name=table, ssl_disabled=True)
    try:
        yield cp
    finally:
        await cp.close()
        conn = await connect(host="127.0.0.1", port=3306, user="root", password="", database="test", ssl_disabled=True)
        cur = await conn.cursor()
        await cur.execute(f"DROP TABLE IF EXISTS `{table}`")
        await cur.close()
        await conn.commit()
        await conn.close()


DESTS: dict[str, tuple[Dest, int | None]] = {
    "memory": (_memory, None),
    "file": (_file, None),
    "s3 (moto)": (_s3, None),
    "redis": (_redis, 6379),
    "postgresql": (_postgresql, 5432),
    "mysql": (_mysql, 3306),
}


async def _source(tmp: Path, threads: int, checkpoints: int) -> FileCheckpointer:
    src = FileCheckpointer(tmp / "src", fsync=False)
    conversation = build_conversation(10 * checkpoints)
    for t in range(threads):
        for k in range(checkpoints):
            state = build_state(10 * (k + 1), messages=conversation[: 10 * (k + 1)])
            await src.save(state, f"thread-{t:03d}", metadata={"turn": k})
    return src


async def run(repeats: int, threads: int, checkpoints: int) -> None:
    print("\n".join(await measure(repeats, threads, checkpoints)))


async def measure(repeats: int, threads: int, checkpoints: int) -> list[str]:
    """The export table (Markdown lines)."""
    out: list[str] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = await _source(tmp, threads, checkpoints)
        n = threads * checkpoints
        out.append(f"{threads} threads x {checkpoints} checkpoints (File source), medians of {repeats}\n")
        out.append(
            "| destination | copy: checkpoints/s | copy: MB/s | copy + verify: checkpoints/s | copy + verify: MB/s |"
        )
        out.append("|---|---|---|---|---|")
        for name, (factory, port) in DESTS.items():
            if port is not None and not _up(port):
                out.append(f"| {name} | (server not reachable on :{port}) | | | |")
                continue
            times: dict[bool, list[float]] = {False: [], True: []}
            size = 0
            for _ in range(repeats):
                for verify in (False, True):
                    async with factory(tmp) as dst:
                        t0 = time.perf_counter()
                        report = await aexport_threads(src, dst, progress=False, verify=verify)
                        times[verify].append(time.perf_counter() - t0)
                        assert int(report["copied"].sum()) == n and report["error"].isna().all(), report
                        size = int(report["bytes"].sum())
            cells = []
            for verify in (False, True):
                med = statistics.median(times[verify])
                cells += [f"{n / med:,.0f}", f"{size / med / 1e6:,.1f}"]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        out.append(f"\n{size / 1e6:.1f} MB exported per run ({size / n / 1e3:.0f} kB per checkpoint on average)")
    if "server" in _MOTO:
        _MOTO.pop("server").stop()
        _MOTO.clear()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--checkpoints", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(run(args.repeats, args.threads, args.checkpoints))


if __name__ == "__main__":
    main()
