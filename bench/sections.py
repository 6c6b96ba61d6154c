"""The sections of ``python -m bench`` beyond the checkpointer ones, over the standalone scripts.

Each section is a function ``(ctx) -> list[str]`` returning Markdown lines (a table and its notes):
medians measured in this run, with ratios to the floor and to each peer measured beside them. The
measuring code lives in the scripts (``bench/bench_*.py``, each still runnable on its own); these
functions call it and lay out the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import itertools
import logging
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.workload import build_conversation, iteration_ends, to_tulip_messages


@dataclass
class Ctx:
    """What every section gets: a scratch directory and how hard to try."""

    tmp: Path
    quick: bool
    reps: int | None = None
    peers_python: str | None = None  # the Python the out-of-process peers run in (bench.peers)
    turns: int | None = None  # remote / export400: scale the workload down (a smoke run); None: full
    layouts: tuple[str, ...] | None = None  # remote / export400: the layouts of stores that take one

    def n(self, full: int, quick: int) -> int:
        """Repetitions: ``--reps`` if given, else ``quick`` under ``--quick``, else ``full``."""
        return self.reps or (quick if self.quick else full)


def environment(tmp: Path) -> str:
    """One line: Python, CPUs, library versions, the temp dir's file system."""

    def ver(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    fs = "?"
    try:
        best = ""
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if str(tmp).startswith(parts[1]) and len(parts[1]) >= len(best):
                    best, fs = parts[1], parts[2]
    except OSError:
        pass
    return (
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, tulip-agents {ver('tulip-agents')}, "
        f"pydantic {ver('pydantic')}, pydantic-core {ver('pydantic_core')}, orjson {ver('orjson')}; "
        f"temp dir on {fs}"
    )


def _up(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _median_ms(fn: Callable[[], object], reps: int, setup: Callable[[], object] | None = None) -> float:
    times = []
    for _ in range(reps):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


# -- tokens -----------------------------------------------------------------------------------------
def section_tokens(ctx: Ctx) -> list[str]:
    """Token accounting per model call at 20, 200 and 2000 messages: should not grow with the thread."""
    from tulip.memory.compactor import LLMCompactor as TulipCompactor

    from bench.bench_tokens import tiktoken_counter
    from tulip_nb.memory.compactor import LLMCompactor
    from tulip_nb.tokens import TokenCounter, get_counter

    reps = ctx.n(15, 5)
    counter = get_counter("gpt-4o")
    enc = counter._encoder
    sizes = (20, 200, 2000)
    conv = build_conversation(2001)
    rows: dict[str, dict[int, float]] = {}
    serial = itertools.count()
    for n in sizes:
        msgs, nxt = conv[:n], conv[n]
        counter.message_counts(msgs)  # the agent counted these on earlier calls
        # Each repetition appends a new copy of the next message (so it is not in the cache yet).
        grown = [*msgs, nxt]

        def renew(grown: list[Any] = grown, nxt: Any = nxt) -> None:
            # new text, so neither cache level (object, JSON bytes) knows it
            grown[-1] = nxt.model_copy(update={"content": f"{nxt.content or ''} #{next(serial)}"})

        rows.setdefault("tulip_nb: count the request (cache warm, 1 new message)", {})[n] = _median_ms(
            lambda grown=grown: counter.count_request(grown), reps, setup=renew
        )
        # The compactor's own accounting between compactions: its index grows by the new message.
        c = LLMCompactor(context_length=10_000_000)

        def renew_index(c: Any = c, msgs: list[Any] = msgs, renew: Callable[[], None] = renew) -> None:
            c.apply(msgs)
            renew()

        rows.setdefault("tulip_nb: LLMCompactor per call (index warm, 1 new message)", {})[n] = _median_ms(
            lambda c=c, grown=grown: c.apply(grown), reps, setup=renew_index
        )
        tm = to_tulip_messages(grown)
        tk = TulipCompactor(context_length=10_000_000, token_counter=tiktoken_counter(enc))
        rows.setdefault("tulip-agents: LLMCompactor per call, tiktoken counter", {})[n] = _median_ms(
            lambda tk=tk, tm=tm: tk.apply(tm), max(3, reps // 3)
        )
        ch = TulipCompactor(context_length=10_000_000)
        rows.setdefault("tulip-agents: LLMCompactor per call, char/4 counter", {})[n] = _median_ms(
            lambda ch=ch, tm=tm: ch.apply(tm), reps
        )
        one = TokenCounter("o200k_base")
        rows.setdefault("floor: tiktoken count of the 1 new message", {})[n] = _median_ms(
            lambda one=one, nxt=nxt: one._count_uncached(nxt), reps
        )
    whole = _median_ms(lambda: sum(counter._count_uncached(m) for m in conv[:2000]), max(3, reps // 3))
    peer = "tulip-agents: LLMCompactor per call, tiktoken counter"
    floor = "floor: tiktoken count of the 1 new message"
    head = " | ".join(f"{n} msgs (ms)" for n in sizes)
    lines = [
        f"| per model call (median of {reps}) | {head} | growth 20→2000 | × floor @2000 | "  # noqa: RUF001
        "tulip-agents (tiktoken) ÷ this @2000 |",
        "|---|" + "---:|" * (len(sizes) + 3),
    ]
    for label, vals in rows.items():
        growth = vals[2000] / vals[20]
        fl = vals[2000] / rows[floor][2000]
        pr = rows[peer][2000] / vals[2000]
        cells = " | ".join(_ms(vals[n]) for n in sizes)
        lines.append(f"| {label} | {cells} | {growth:.1f}× | {fl:.1f}× | {pr:.1f}× |")  # noqa: RUF001
    lines += [
        "",
        f"Counting the whole 2000-message thread from scratch (tiktoken, no cache) takes {whole:.0f} ms "
        f"({counter.count_messages(conv[:2000]):,} o200k tokens); with the per-message cache only new "
        "messages are encoded.",
    ]
    return lines


# -- compactor --------------------------------------------------------------------------------------
def section_compactor(ctx: Ctx) -> list[str]:
    """LLMCompactor per call at 2000 messages, exact counts, beside tulip-agents' LLMCompactor."""
    from tulip.memory.compactor import LLMCompactor as TulipCompactor

    from bench.bench_tokens import tiktoken_counter
    from tulip_nb.core.state import AgentState
    from tulip_nb.memory.compactor import LLMCompactor
    from tulip_nb.tokens import get_counter

    reps = ctx.n(25, 7)
    counter = get_counter("gpt-4o")
    msgs = build_conversation(2000)
    counter.message_counts(msgs)
    rows: list[tuple[str, float]] = []

    warm = LLMCompactor(context_length=128_000)
    warm.apply(msgs)

    def forget_plan() -> None:
        warm._plan = None  # the next call compacts again, on the warm index

    rows.append(
        (
            "**compacting call**, warm (index and counts warm, new plan)",
            _median_ms(lambda: warm.apply(msgs), reps, setup=forget_plan),
        )
    )
    rows.append(("call between compactions (plan kept)", _median_ms(lambda: warm.apply(msgs), reps)))
    rows.append(
        (
            "compacting call, fresh instance (index built, counts warm)",
            _median_ms(lambda: LLMCompactor(context_length=128_000).apply(msgs), reps),
        )
    )

    # a whole conversation through one compactor (32k: a compaction every few calls), as the agent runs it
    async def conversation() -> list[float]:
        c = LLMCompactor(context_length=32_000)
        state = AgentState()  # events and the manager's state are recorded here, as in the agent
        per_call = []
        for j in iteration_ends(msgs):
            hist = msgs[:j]
            t0 = time.perf_counter()
            await c.aapply(hist, state=state)
            per_call.append(time.perf_counter() - t0)
        return per_call

    per_call = asyncio.run(conversation())
    rows.append((f"conversation at 32k: mean per call over all {len(per_call)} calls", statistics.mean(per_call) * 1e3))
    rows.append(("conversation at 32k: mean per call, last 100 calls", statistics.mean(per_call[-100:]) * 1e3))

    tm = to_tulip_messages(msgs)
    enc = counter._encoder
    tk = TulipCompactor(context_length=128_000, token_counter=tiktoken_counter(enc))
    peer_tk = _median_ms(lambda: tk.apply(tm), max(3, reps // 4))
    ch = TulipCompactor(context_length=128_000)
    peer_ch = _median_ms(lambda: ch.apply(tm), reps)
    lines = [
        f"2000 messages, {counter.count_messages(msgs):,} o200k tokens, window 128k unless noted; medians of {reps}.",
        "",
        "| LLMCompactor per call | ms | tulip-agents (tiktoken) ÷ this | tulip-agents (char/4) ÷ this |",
        "|---|---:|---:|---:|",
    ]
    for label, v in rows:
        lines.append(f"| tulip_nb: {label} | {_ms(v)} | {peer_tk / v:.0f}× | {peer_ch / v:.1f}× |")  # noqa: RUF001
    lines.append(f"| tulip-agents 2.28: call (tiktoken counter) | {_ms(peer_tk)} | 1× | |")  # noqa: RUF001
    lines.append(f"| tulip-agents 2.28: call (char/4 counter, not exact) | {_ms(peer_ch)} | | 1× |")  # noqa: RUF001
    lines += ["", "Target: ≤ 5 ms warm at 2000 messages (first row). No floor: nothing cheaper does this job."]
    return lines


# -- kv ---------------------------------------------------------------------------------------------
_KV_PORTS = {"redis": 6379, "postgresql": 5432, "mysql": 3306, "opensearch": None}


def section_kv(ctx: Ctx) -> list[str]:
    """Redis, PostgreSQL, MySQL and the OpenSearch emulator: tulip_nb beside tulip-agents and a raw write."""
    from bench import bench_kv

    reps = ctx.n(9, 3)
    lines = [
        f"Medians of {reps} (after a warm-up), same server, same state bytes. Floor: one raw SET / INSERT / "
        "index request of the state's JSON.",
        "",
        "| backend | messages | KiB | save (ms) | × floor | tulip-agents save | tulip-agents ÷ this | "  # noqa: RUF001
        "load (ms) | tulip-agents load | tulip-agents ÷ this | floor (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []

    async def run() -> None:
        for kind, port in _KV_PORTS.items():
            if port is not None and not _up(port):
                notes.append(f"{kind}: no server on 127.0.0.1:{port}, skipped.")
                continue
            for n in (200, 2000):
                try:
                    r = await bench_kv.measure(kind, n, min(reps, 5) if kind == "opensearch" else reps)
                except Exception as e:  # a missing driver or emulator: say so, go on
                    notes.append(f"{kind} at {n}: not measured ({type(e).__name__}: {e}).")
                    break
                lines.append(
                    f"| {kind} | {n} | {r['KiB']:,.0f} | {_ms(r['save ours'])} | {r['save ours'] / r['floor']:.2f}× "  # noqa: RUF001
                    f"| {_ms(r['save tulip'])} | {r['save tulip'] / r['save ours']:.2f}× | {_ms(r['load ours'])} "  # noqa: RUF001
                    f"| {_ms(r['load tulip'])} | {r['load tulip'] / r['load ours']:.2f}× | {_ms(r['floor'])} |"  # noqa: RUF001
                )
                print(f"  kv: {kind} {n} done", file=sys.stderr)

    asyncio.run(run())
    lines += [
        "",
        "OpenSearch is the osmem-server emulator started for the run: its rows say nothing about a cluster.",
        *notes,
    ]
    return lines


# -- s3http -----------------------------------------------------------------------------------------
def section_s3http(ctx: Ctx) -> list[str]:
    """S3 (moto) and HTTP (checkpoint_app): tulip_nb beside tulip-agents, S3 beside a raw PUT/GET."""
    from bench import bench_remote

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    reps = ctx.n(9, 3)

    async def run() -> list[tuple[str, int, dict[str, float]]]:
        rows = []
        with bench_remote.moto_server() as url:
            rows += await bench_remote.bench_s3(url, reps)
        with bench_remote.checkpoint_server() as url:
            rows += await bench_remote.bench_http(url, reps)
        return rows

    rows = asyncio.run(run())
    lines = [
        f"Both servers run in this process on 127.0.0.1 (moto; uvicorn serving checkpoint_app over a "
        f"MemoryCheckpointer), sharing the GIL with the client. Medians of {reps}, interleaved.",
        "",
        "| operation | messages | tulip_nb (ms) | × floor | tulip-agents (ms) | tulip-agents ÷ this | floor (ms) |",  # noqa: RUF001
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for op, n, r in rows:
        ours, theirs, floor = r["tulip_nb"], r["tulip-agents"], r.get("raw PUT")
        fl = f"{ours / floor:.2f}×" if floor else ""  # noqa: RUF001
        lines.append(
            f"| {op} | {n} | {_ms(ours)} | {fl} | {_ms(theirs)} | {theirs / ours:.2f}× | {_ms(floor)} |"  # noqa: RUF001
        )
    lines += [
        "",
        "S3 floor: one boto3 PUT (save) or GET (load) of the same state bytes. HTTP has no separate "
        "floor row: the server side is tulip_nb's own checkpoint_app for both clients.",
    ]
    return lines


# -- export400 --------------------------------------------------------------------------------------
def section_export400(ctx: Ctx) -> list[str]:
    """One 400-turn thread of 855 checkpoints exported whole into every store (bytes held, seconds)."""
    from bench import bench_export

    return asyncio.run(
        bench_export.measure_400(ctx.tmp, ctx.layouts or ("history", "tulip"), ctx.turns or bench_export.TURNS_400)
    )


# -- lab --------------------------------------------------------------------------------------------
def section_lab(ctx: Ctx) -> list[str]:
    """open_thread, diff_threads, simulate_compaction at 2000 messages against their targets."""
    from bench import bench_lab

    reps = ctx.n(5, 3)
    rows = bench_lab.measure(reps, per_config=not ctx.quick)
    lines = [
        f"2000 messages; medians of {reps}. tulip-agents and LangGraph have no research layer: no peer column.",
        "",
        "| measure | tulip_nb (ms) | target (ms) | status |",
        "|---|---:|---:|---|",
    ]
    for label, ms, target in rows:
        status = ""
        if target.startswith("<="):
            limit = float(target.removeprefix("<=").strip())
            status = "met" if ms <= limit else f"missed ({ms / limit:.2f}× the target)"  # noqa: RUF001
        lines.append(f"| {label} | {ms:.1f} | {target} | {status} |")
    return lines


# -- export -----------------------------------------------------------------------------------------
def section_export(ctx: Ctx) -> list[str]:
    """export_threads from a File checkpointer into each destination (throughput)."""
    from bench import bench_export

    reps = ctx.n(3, 1)
    lines = asyncio.run(bench_export.measure(reps, 10, 20 if not ctx.quick else 5))
    return [
        *lines,
        "",
        "No peer exports threads between backends; the memory destination is the floor "
        "(the exporter's own cost: reading the File source, hashing canonical JSON).",
    ]


# -- server -----------------------------------------------------------------------------------------
def section_server(ctx: Ctx) -> list[str]:
    """AgentServer throughput (POST /invoke) on the file and PostgreSQL checkpointers, 1 and 2 workers."""
    from bench import bench_server

    seconds = 3.0 if ctx.quick else 8.0
    lines = bench_server.measure(seconds, 16, skip_postgres=not _up(5432))
    return [
        *lines,
        "",
        "Floor: the same server answering GET /health (HTTP, uvicorn, the load generator). "
        "tulip-agents' AgentServer needs FastAPI, which is not installed here: no peer row.",
    ]


# -- memory -----------------------------------------------------------------------------------------
def section_memory(ctx: Ctx) -> list[str]:
    """Peak memory loading a 2000-message thread, each implementation in a fresh process."""
    from bench import bench_memory

    return bench_memory.measure(runs=ctx.n(3, 1))


# -- corpus -----------------------------------------------------------------------------------------
def section_corpus(ctx: Ctx) -> list[str]:
    """1,000 threads of 5-200 turns: summary from headers vs the floor, frames, simulate in process
    and on a LocalCluster of 1 and 2, peak memory."""
    from bench import bench_corpus

    if ctx.quick:
        return bench_corpus.table(bench_corpus.measure(60, 30, dask=False))
    return bench_corpus.table(bench_corpus.measure(1_000, 200))


def section_live(ctx: Ctx) -> list[str]:
    """A 50-branch live sweep against a local server with 20 % 429s (issue 29)."""
    from bench import bench_live

    return bench_live.section_live(ctx)
