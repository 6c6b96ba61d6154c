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
import sys
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


# -- export400: one long thread, its whole history, into every store --------------------------------
TURNS_400 = 400
CHECKPOINTS_400 = 855


async def build_400(store: Path, turns: int = TURNS_400, checkpoints: int = CHECKPOINTS_400) -> dict[str, Any]:
    """A ``turns``-turn thread of the BENCH.md conversation with ``checkpoints`` checkpoints.

    Every turn end is a checkpoint; the rest are mid-turn saves (after a model call that asked for
    tools), spread evenly over the thread, with the agent's metadata. Built in the history layout
    with ``fsync=False``. Returns the thread's figures (messages, their JSON, checkpoints).
    """
    import orjson

    from bench.workload import iteration_ends, save_sources
    from tulip_nb.core import AgentState
    from tulip_nb.core.keys import ITERATION_KEY, RUN_ID_KEY, SOURCE_KEY

    conv = build_conversation(int(turns * 6.5) + 50)
    users = [i for i, m in enumerate(conv) if m.role == "user"]
    msgs = conv[: users[turns]] if len(users) > turns else conv
    ends = iteration_ends(msgs)
    sources = save_sources(msgs, ends)
    finals = [k for k, s in enumerate(sources) if s != "iteration"]
    mids = [k for k, s in enumerate(sources) if s == "iteration"]
    need = max(0, min(len(mids), checkpoints - len(finals)))
    keep = set(finals) | {mids[j * len(mids) // need] for j in range(need)} if need else set(finals)
    cp = FileCheckpointer(store, fsync=False)
    state = AgentState(agent_id="bench-agent", metadata={"user_id": "u-42"})
    prev, turn = 0, 0
    for k, (end, source) in enumerate(zip(ends, sources, strict=True)):
        if any(m.role == "user" for m in msgs[prev:end]):
            turn += 1
            state.run_id, state.iteration = f"run-{turn:06d}", 0
        state.messages.extend(msgs[prev:end])
        state.iteration += 1
        prev = end
        if k in keep:
            meta = {SOURCE_KEY: source, RUN_ID_KEY: state.run_id, ITERATION_KEY: state.iteration}
            await cp.save(state, "long", metadata=meta)
    await cp.close()
    json_bytes = len(b"[" + b",".join(orjson.dumps(orjson.loads(m.json_bytes())) for m in msgs) + b"]")
    return {"turns": turn, "messages": len(msgs), "json": json_bytes, "checkpoints": len(keep)}


async def measure_400(tmp: Path, layouts: tuple[str, ...], turns: int = TURNS_400) -> list[str]:
    """The export400 table: the thread exported whole into each store (and each layout it takes)."""
    from bench import _servers as srv
    from bench.bench_stores import layout_kwargs, takes_layout
    from tulip_nb.memory.backends import S3Backend, mysql_checkpointer, postgresql_checkpointer, redis_checkpointer

    checkpoints = CHECKPOINTS_400 if turns == TURNS_400 else round(CHECKPOINTS_400 * turns / TURNS_400)
    src_dir = tmp / "export400-src"
    t0 = time.perf_counter()
    facts = await build_400(src_dir, turns, checkpoints)
    print(f"  export400: source built ({time.perf_counter() - t0:.0f} s): {facts}", file=sys.stderr, flush=True)
    src = FileCheckpointer(src_dir)

    def file_dest(layout: str) -> Callable[[srv.Place | None], Any]:
        return lambda place: FileCheckpointer(tmp / f"export400-{layout}", layout=layout)  # type: ignore[arg-type]

    def remote(store: str, layout: str | None) -> Callable[[srv.Place | None], Any]:
        def make(p: srv.Place | None) -> Any:
            assert p is not None
            if store == "PostgreSQL":
                kw = layout_kwargs(postgresql_checkpointer, layout)
                return postgresql_checkpointer(dsn=srv.PG_DSN, schema_name=p.name, table_name="checkpoints", **kw)
            if store == "MySQL":
                kw = layout_kwargs(mysql_checkpointer, layout)
                return mysql_checkpointer(dsn=p.mysql_dsn, table_name="checkpoints", ssl_disabled=True, **kw)
            if store == "Redis":
                return redis_checkpointer(
                    url=srv.REDIS_URL, prefix=f"{p.name}:", **layout_kwargs(redis_checkpointer, layout)
                )
            return S3Backend(p.name, endpoint_url=p.url, **srv.S3_CREDS, **layout_kwargs(S3Backend, layout))

        return make

    factories = {
        "PostgreSQL": postgresql_checkpointer,
        "MySQL": mysql_checkpointer,
        "Redis": redis_checkpointer,
        "S3": S3Backend,
    }
    dests: list[tuple[str, str | None, str, Callable[[srv.Place | None], Any]]] = [
        ("file", None, f'`layout="{layout}"`', file_dest(layout)) for layout in layouts
    ]
    notes: list[str] = []
    for store, factory in factories.items():
        if store in srv.PORTS and not srv.up(srv.PORTS[store]):
            notes.append(f"{store}: no server on 127.0.0.1:{srv.PORTS[store]}, skipped.")
            continue
        if takes_layout(factory):
            dests += [(store, store, f'`layout="{layout}"`', remote(store, layout)) for layout in layouts]
        else:
            dests.append(
                (store, store, "no `layout=` (tulip's layout: a whole state per checkpoint)", remote(store, None))
            )

    rows = []
    with srv.moto_process() as url:
        for name, store, label, make in dests:
            place = await srv.new_place(store, url) if store else None
            dst = make(place)
            try:
                t1 = time.perf_counter()
                dry = await aexport_threads(src, dst, progress=False, dry_run=True)
                dry_s = time.perf_counter() - t1
                t1 = time.perf_counter()
                report = await aexport_threads(src, dst, progress=False, verify=False)
                took = time.perf_counter() - t1
                assert int(report["copied"].sum()) == facts["checkpoints"] and report["error"].isna().all(), report
                await dst.close()
                held = await srv.held(place) if place else srv.file_bytes(dst.base_dir)
                rows.append((name, label, took, held, int(dry["dest_bytes"].sum()), dry_s, dry.attrs["dest_layout"]))
                print(f"  export400: {name} {label} done ({took:.0f} s)", file=sys.stderr, flush=True)
            finally:
                if place is not None:
                    await srv.drop(place)
    await src.close()
    j = facts["json"]
    lines = [
        f"One thread: {facts['turns']} turns of the BENCH.md conversation, {facts['messages']:,} messages "
        f"({j / 1e6:.2f} MB of messages' JSON), {facts['checkpoints']} checkpoints (every turn end and mid-turn "
        "saves spread evenly), in a file store (history layout). Exported with its whole history "
        "(`export_threads(..., verify=False)`) into a fresh place of each store, once each; the dry run "
        "(`dry_run=True`, the estimate `tulip-nb export --dry-run` prints) before it.",
        "",
        "| destination | layout | export (s) | held | ÷ messages' JSON | target ≤ 5× | "  # noqa: RUF001
        "dry-run estimate (÷ held) | dry run (s) |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for name, label, took, held, est, dry_s, _ in rows:
        mult = held / j
        status = "met" if mult <= 5 else f"missed ({mult / 5:.1f}{chr(215)} the target)"
        lines.append(
            f"| {name} | {label} | {took:.1f} | {held / 1e6:,.1f} MB | {mult:.1f}{chr(215)} | {status} | "
            f"{est / 1e6:,.1f} MB ({est / held:.2f}{chr(215)}) | {dry_s:.1f} |"
        )
    lines += [
        "",
        "Held: what the destination holds afterwards (file: every file, SQLite's WAL folded in; the "
        "servers as in the remote section: PostgreSQL `pg_total_relation_size` of the schema's tables, "
        "MariaDB `SUM(LENGTH)`, Redis `MEMORY USAGE`, S3 object sizes). File destinations are written with "
        "`fsync=True` (the default).",
        *[f"- {n}" for n in notes],
    ]
    return lines
