"""Save/load of a 200- and a 2000-message thread on S3 (moto) and over HTTP (checkpoint_app).

Beside tulip_nb's S3Backend and HTTPCheckpointer, in the same run against the same servers:
tulip-agents' S3Backend and HTTPCheckpointer, and for S3 the floor: one raw PUT / GET of the same
state bytes with boto3. Prints a Markdown table of medians (ms).

    .venv/bin/python -m bench.bench_remote [--repeats 7]

Both servers run in this process on 127.0.0.1 (moto's ThreadedMotoServer; uvicorn serving
``checkpoint_app(MemoryCheckpointer())`` in a thread), so absolute numbers include the server's
work and share the GIL with the client; the ratios within one row are what to read. Repetitions
are interleaved (ours, tulip's, floor, ours, ...) after a warm-up, so drift hits all alike.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.workload import build_state, to_tulip_state
from tulip_nb.core import state_json_bytes

CREDS = {"region_name": "us-east-1", "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
SIZES = (200, 2000)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def moto_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@contextmanager
def checkpoint_server() -> Iterator[str]:
    import uvicorn

    from tulip_nb.memory.backends import MemoryCheckpointer
    from tulip_nb.server import checkpoint_app

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            checkpoint_app(MemoryCheckpointer()), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


async def interleaved(fns: dict[str, Callable[[], Awaitable[Any]]], repeats: int) -> dict[str, float]:
    for fn in fns.values():
        await fn()  # warm-up: connections, bucket creation, first pointer read
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            await fn()
            samples[name].append((time.perf_counter() - t0) * 1000)
    return {k: statistics.median(v) for k, v in samples.items()}


async def bench_s3(url: str, repeats: int) -> list[tuple[str, int, dict[str, float]]]:
    import boto3
    from tulip.memory.backends.s3 import S3Backend as TulipS3

    from tulip_nb.memory.backends import S3Backend

    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    ours = S3Backend(bucket, endpoint_url=url, **CREDS)
    theirs = TulipS3(bucket=bucket, endpoint_url=url, **CREDS)
    raw = boto3.client("s3", endpoint_url=url, **CREDS)
    rows = []
    try:
        for n in SIZES:
            state = build_state(n)
            t_state = to_tulip_state(state)
            payload = state_json_bytes(state)
            ours_t, theirs_t, raw_key = f"ours-{n}", f"tulip-{n}", f"raw/{n}"

            def put_raw(key: str = raw_key, body: bytes = payload) -> Awaitable[Any]:
                return asyncio.to_thread(raw.put_object, Bucket=bucket, Key=key, Body=body)

            def get_raw(key: str = raw_key) -> Awaitable[Any]:
                return asyncio.to_thread(lambda: raw.get_object(Bucket=bucket, Key=key)["Body"].read())

            saves = await interleaved(
                {
                    "tulip_nb": lambda s=state, t=ours_t: ours.save(s, t),
                    "tulip-agents": lambda s=t_state, t=theirs_t: theirs.save(s, t),
                    "raw PUT": put_raw,
                },
                repeats,
            )
            rows.append(("S3 save", n, saves))
            loads = await interleaved(
                {
                    "tulip_nb": lambda t=ours_t: ours.load(t),
                    "tulip-agents": lambda t=theirs_t: theirs.load(t),
                    "raw PUT": get_raw,
                },
                repeats,
            )
            rows.append(("S3 load", n, loads))
    finally:
        await ours.close()
        await theirs.close()
        raw.close()
    return rows


async def bench_http(url: str, repeats: int) -> list[tuple[str, int, dict[str, float]]]:
    from tulip.memory.backends.http import HTTPCheckpointer as TulipHTTP

    from tulip_nb.memory.backends import HTTPCheckpointer

    rows = []
    theirs = TulipHTTP(base_url=url)
    async with HTTPCheckpointer(url) as ours:
        try:
            for n in SIZES:
                state = build_state(n)
                t_state = to_tulip_state(state)
                saves = await interleaved(
                    {
                        "tulip_nb": lambda s=state, n=n: ours.save(s, f"ours-{n}"),
                        "tulip-agents": lambda s=t_state, n=n: theirs.save(s, f"tulip-{n}"),
                    },
                    repeats,
                )
                rows.append(("HTTP save", n, saves))
                loads = await interleaved(
                    {
                        "tulip_nb": lambda n=n: ours.load(f"ours-{n}"),
                        "tulip-agents": lambda n=n: theirs.load(f"tulip-{n}"),
                    },
                    repeats,
                )
                rows.append(("HTTP load", n, loads))
        finally:
            await theirs.close()
    return rows


def table(rows: list[tuple[str, int, dict[str, float]]]) -> str:
    out = [
        "| operation | messages | tulip_nb (ms) | tulip-agents (ms) | ratio | raw floor (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for op, n, r in rows:
        floor = r.get("raw PUT")
        ratio = r["tulip_nb"] / r["tulip-agents"]
        out.append(
            f"| {op} | {n} | {r['tulip_nb']:.1f} | {r['tulip-agents']:.1f} | {ratio:.2f}x | "
            f"{f'{floor:.1f}' if floor is not None else '-'} |"
        )
    return "\n".join(out)


async def main(repeats: int) -> None:
    rows = []
    with moto_server() as url:
        rows += await bench_s3(url, repeats)
    with checkpoint_server() as url:
        rows += await bench_http(url, repeats)
    print(table(rows))
    print("\nratio = tulip_nb / tulip-agents (below 1 is faster). S3 raw floor: one PUT (save) or GET (load).")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    asyncio.run(main(parser.parse_args().repeats))
