"""AgentServer throughput: requests/s and p50/p99 of POST /invoke over loopback.

For 1 and 2 uvicorn workers (``tulip-nb serve --workers N``, real processes) on the file and the
PostgreSQL checkpointer, a load generator in this process (httpx AsyncClient, ``--concurrency``
clients, each cycling over 10 threads of its own, so threads grow during the run) posts turns for
``--seconds`` after a 1 s warm-up. The model is an instant ScriptedModel, so what is measured is
the server: HTTP, auth, load + save of the thread, JSON. The checkpointer's share is the sum of
the ``Server-Timing: checkpoint`` durations over the sum of the ``run`` durations the server
reported for the measured requests.

    .venv/bin/python -m bench.bench_server [--seconds 10] [--concurrency 16] [--skip-postgres]

The machine has 2 shared cores and the load generator runs on them too: compare rows of one run,
not absolute numbers across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PG = "postgresql://postgres@127.0.0.1:5432/test"
_TIMING = re.compile(r"(\w+);dur=([0-9.]+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _serve(checkpointer: str, workers: int) -> Iterator[str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "tulip_nb.cli", "serve", "--app", "bench._server_agent:agent"]
    cmd += ["--checkpointer", checkpointer, "--workers", str(workers), "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k != "TULIP_NB_SERVER_API_KEY"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start ({cmd})")
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def _load(url: str, seconds: float, concurrency: int, *, health: bool = False) -> dict[str, Any]:
    """Drive the server for ``seconds``; ``health``: GET /health instead (the HTTP floor)."""
    latencies: list[float] = []
    cp_ms = run_ms = 0.0
    errors = 0
    tag = uuid.uuid4().hex[:6]
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as http:

        async def client(i: int, until: float, record: bool) -> None:
            nonlocal cp_ms, run_ms, errors
            n = 0
            while time.perf_counter() < until:
                thread = f"{tag}-c{i}-t{n % 10}"
                t0 = time.perf_counter()
                if health:
                    r = await http.get("/health")
                else:
                    r = await http.post("/invoke", json={"prompt": f"turn {n} of {thread}", "thread_id": thread})
                dt = time.perf_counter() - t0
                n += 1
                if not record:
                    continue
                if r.status_code != 200:
                    errors += 1
                    continue
                latencies.append(dt)
                timing = dict(_TIMING.findall(r.headers.get("server-timing", "")))
                cp_ms += float(timing.get("checkpoint", 0))
                run_ms += float(timing.get("run", 0))

        warm = time.perf_counter() + 1.0
        await asyncio.gather(*(client(i, warm, False) for i in range(concurrency)))
        t0 = time.perf_counter()
        await asyncio.gather(*(client(i, t0 + seconds, True) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
    return {
        "requests": len(latencies),
        "errors": errors,
        "rps": len(latencies) / elapsed,
        "p50_ms": q[49] * 1000,
        "p99_ms": q[98] * 1000,
        "cp_share": cp_ms / run_ms if run_ms else float("nan"),
        "cp_ms": cp_ms / max(len(latencies), 1),
        "run_ms": run_ms / max(len(latencies), 1),
    }


def _drop_table(table: str) -> None:
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(PG)
        try:
            await conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        finally:
            await conn.close()

    asyncio.run(drop())


def _prepare_pg(url: str) -> None:
    from tulip_nb.core.state import AgentState
    from tulip_nb.memory.backends import checkpointer_from_url

    async def warm() -> None:
        cp = checkpointer_from_url(url)
        try:
            await cp.save(AgentState(), "warmup")
            await cp.delete("warmup")
        finally:
            await cp.close()

    asyncio.run(warm())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args(argv)
    print("\n".join(measure(args.seconds, args.concurrency, args.skip_postgres)))
    return 0


def measure(seconds: float, concurrency: int, skip_postgres: bool = False) -> list[str]:
    """The throughput table (Markdown lines): each checkpointer x 1 and 2 workers."""
    tmp = Path(tempfile.mkdtemp(prefix="tulip_nb_bench_server_"))
    tables: list[str] = []
    rows: list[tuple[str, int, dict[str, Any]]] = []
    try:

        def file_url() -> str:
            return f"file:{tmp / uuid.uuid4().hex[:8]}"

        backends: list[tuple[str, Callable[[], str]]] = [("file", file_url)]
        if not skip_postgres:

            def pg() -> str:
                table = f"tnb_bench_srv_{uuid.uuid4().hex[:10]}"
                tables.append(table)
                url = f"{PG}?table_name={table}"
                _prepare_pg(url)
                return url

            backends.append(("postgresql", pg))
        for name, make_url in backends:
            for workers in (1, 2):
                with _serve(make_url(), workers) as url:
                    result = asyncio.run(_load(url, seconds, concurrency))
                    if name == "file":  # the floor: the same server answering GET /health
                        floor = asyncio.run(_load(url, seconds, concurrency, health=True))
                        rows.append((f"floor: GET /health (no agent, no checkpointer), x{workers}", workers, floor))
                rows.append((name, workers, result))
                print(f"{name} x{workers}: {result}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for table in tables:
            _drop_table(table)
    out = [f"POST /invoke, {concurrency} concurrent clients, {seconds:g} s per row, ScriptedModel", ""]
    out.append(
        "| checkpointer | workers | requests | req/s | ÷ floor req/s | p50 ms | p99 ms | checkpointer ms/req "
        "| share of run |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    floors = {w: r["rps"] for name, w, r in rows if name.startswith("floor")}
    for name, workers, r in rows:
        fl = floors.get(workers)
        share = "" if name.startswith("floor") else f"{r['cp_share']:.0%}"
        cp = "" if name.startswith("floor") else f"{r['cp_ms']:.2f}"
        out.append(
            f"| {name} | {workers} | {r['requests']} | {r['rps']:.0f} | {r['rps'] / fl:.2f} | {r['p50_ms']:.1f} "
            f"| {r['p99_ms']:.1f} | {cp} | {share} |" + (f" ({r['errors']} errors)" if r["errors"] else "")
            if fl
            else f"| {name} | {workers} | {r['requests']} | {r['rps']:.0f} | | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
            f"| {cp} | {share} |"
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
