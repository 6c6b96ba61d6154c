"""Research across a corpus of real-sized threads: summary from headers, frames, simulate, memory.

    python -m bench.bench_corpus [--threads 1000] [--sim-threads 200] [--quick]

Builds an offline corpus with :func:`tulip_nb.lab.build_corpus` (the real Agent, a scripted model)
in a file store, each thread 5 to 200 turns long (not only short ones), then measures, in this run:

- ``summary()`` per thread beside the floor: reading and parsing one header row per thread
  (``list_checkpoint_infos(thread, limit=1)``), at the corpus size and on single threads of 10,
  100 and 400 turns (the summary reads the newest header's counters: flat in the length);
- the state summary (``summary(columns="all")``, the old path: it rebuilds every call's view) for
  comparison;
- the tidy frames (``turns``, ``calls``, ``messages``, ``events``) per thread: they read states;
- ``simulate()`` in process and on a ``LocalCluster`` of 1 and 2 worker processes (threads/s, the
  2-worker / 1-worker ratio), on the first ``--sim-threads`` threads;
- peak memory: the in-process simulate in a fresh Python process (its ``ru_maxrss``), and each
  Dask worker's peak.

The 2-worker figure is bounded by the machine: on 2 cores the scheduler, the client and the
workers share them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tulip_nb.lab import build_corpus, corpus_facts, open_corpus
from tulip_nb.lab._corpus_summary import header_row
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.compactor import LLMCompactor, SlidingWindowManager

TURNS = (5, 200)
LENGTHS = (10, 100, 400)


def configs() -> dict[str, Any]:
    """Three configs a compaction study would compare (the threads were written with a 2,000 window)."""
    return {
        "compact 1.5k": LLMCompactor(context_length=1_500),
        "compact 3k": LLMCompactor(context_length=3_000),
        "window 40": SlidingWindowManager(window_size=40),
    }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def floor_read(cp: FileCheckpointer, ids: list[str]) -> float:
    """Seconds to read and parse the newest header row of every thread of ``ids``."""

    async def go() -> None:
        for t in ids:
            await cp.list_checkpoint_infos(t, limit=1)

    return timed(lambda: asyncio.run(go()))[0]


def per_length(base: Path) -> dict[str, float]:
    """Milliseconds per thread (median of 15) of the header summary and the floor, at 10, 100, 400 turns."""
    cp = FileCheckpointer(base, fsync=False)
    out: dict[str, float] = {}
    for n in LENGTHS:
        tid = build_corpus(cp, n=1, seed=n, turns=(n, n), prefix=f"len{n}")[0]

        async def row(tid: str = tid) -> None:
            await header_row(cp, tid)

        async def floor(tid: str = tid) -> None:
            await cp.list_checkpoint_infos(tid, limit=1)

        for name, fn in (("summary", row), ("floor", floor)):
            asyncio.run(fn())
            runs = [timed(lambda fn=fn: asyncio.run(fn()))[0] for _ in range(15)]
            out[f"{name} len{n}"] = 1e3 * statistics.median(runs)
        out[f"checkpoints len{n}"] = len(asyncio.run(cp.list_checkpoints(tid, limit=None)))
    return out


def _worker_peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@contextlib.contextmanager
def cluster(workers: int) -> Iterator[Any]:
    from dask.distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
        ) as lc,
        Client(lc) as client,
    ):
        yield client


_CHILD = """
import json, resource, sys, time
from bench.bench_corpus import configs
from tulip_nb.lab import corpus_facts, open_corpus
url, n = sys.argv[1], int(sys.argv[2])
with open_corpus(url, "case-*", limit=n) as corpus:
    t = time.perf_counter()
    sim = corpus.simulate(configs(), probes=corpus_facts, progress=False)
    s = time.perf_counter() - t
print(json.dumps({"seconds": s, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "errors": int(sim["error"].notna().sum()), "rows": len(sim)}))
"""


def simulate_in_fresh_process(url: str, n: int) -> dict[str, Any]:
    """The in-process simulate of ``n`` threads in a fresh Python: its time and peak RSS."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, url, str(n)], check=True, capture_output=True, text=True, cwd=root
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure(n: int = 1_000, sim_n: int = 200, *, dask: bool = True) -> dict[str, Any]:
    """Every figure of the corpus table, as a dict (seconds unless the key says otherwise)."""
    out: dict[str, Any] = {"n": n, "sim_n": sim_n, "configs": len(configs())}
    with tempfile.TemporaryDirectory() as d:
        base = Path(d) / "corpus"
        base.mkdir()
        out["build"], _ = timed(lambda: build_corpus(FileCheckpointer(base, fsync=False), n=n, seed=0, turns=TURNS))
        url = f"file://{base}"
        cp = FileCheckpointer(base)
        with open_corpus(url, "case-*") as corpus:
            out["summary"], frame = timed(lambda: corpus.summary(progress=False))
            out["turns mean"], out["turns max"] = float(frame["turns"].mean()), int(frame["turns"].max())
            out["read"] = frame["read"].value_counts().to_dict()
            out["errors"] = int(frame["error"].notna().sum())
        out["floor"] = floor_read(cp, corpus.thread_ids)
        with open_corpus(url, "case-*", limit=sim_n) as sub:
            out["summary all"], _ = timed(lambda: sub.summary(columns="all", progress=False))
            for kind in ("turns", "calls", "messages", "events"):
                out[f"frame {kind}"], f = timed(lambda k=kind, s=sub: s.frame(k, progress=False))
                out[f"frame rows {kind}"] = len(f)
        out.update(per_length(Path(d) / "lengths"))
        fresh = simulate_in_fresh_process(url, sim_n)
        out["simulate inproc"], out["peak MiB inproc"] = fresh["seconds"], fresh["peak_mib"]
        out["sim errors inproc"] = fresh["errors"]
        if dask:
            for workers in (1, 2):
                with cluster(workers) as client, open_corpus(url, "case-*", limit=sim_n) as c:
                    c[: 2 * workers].simulate(configs(), probes=corpus_facts, executor=client, progress=False)
                    out[f"simulate dask{workers}"], sim = timed(
                        lambda c=c, cl=client: c.simulate(configs(), probes=corpus_facts, executor=cl, progress=False)
                    )
                    out[f"sim errors dask{workers}"] = int(sim["error"].notna().sum())
                    out[f"peak MiB dask{workers}"] = max(client.run(_worker_peak_kib).values()) / 1024
    return out


def table(r: dict[str, Any]) -> list[str]:
    """Markdown lines for bench/README.md (and ``python -m bench --section corpus``)."""
    n, sim_n, k = r["n"], r["sim_n"], r["configs"]
    ms = 1e3 * r["summary"] / n
    floor_ms = 1e3 * r["floor"] / n
    lines = [
        f"A corpus of {n:,} offline threads of {TURNS[0]} to {TURNS[1]} turns (`build_corpus`, mean "
        f"{r['turns mean']:.0f} turns, max {r['turns max']}; {r['build']:.0f} s to write), file store. "
        f"Rows read from: {r['read']}; error rows: {r['errors']}. One run; seconds.",
        "",
        "| what | threads | seconds | threads/s | ms per thread | vs floor |",
        "|---|---:|---:|---:|---:|---:|",
        f"| summary() (headers) | {n:,} | {r['summary']:.2f} | {n / r['summary']:,.0f} | {ms:.2f} | "
        f"{ms / floor_ms:.1f}× |",  # noqa: RUF001
        f"| floor: read + parse one header row | {n:,} | {r['floor']:.2f} | {n / r['floor']:,.0f} | "
        f"{floor_ms:.2f} | 1× |",  # noqa: RUF001
    ]
    s_all = 1e3 * r["summary all"] / sim_n
    lines.append(
        f"| summary(columns='all') (+ every call's view, from states) | {sim_n:,} | {r['summary all']:.2f} | "
        f"{sim_n / r['summary all']:,.0f} | {s_all:.1f} | {s_all / floor_ms:.0f}× |"  # noqa: RUF001
    )
    for kind in ("turns", "calls", "messages", "events"):
        s = r[f"frame {kind}"]
        lines.append(
            f"| {kind}() ({r[f'frame rows {kind}']:,} rows) | {sim_n:,} | {s:.2f} | {sim_n / s:,.0f} | "
            f"{1e3 * s / sim_n:.1f} | {1e3 * s / sim_n / floor_ms:.0f}× |"  # noqa: RUF001
        )
    for label, key in (
        ("in process (fresh Python)", "inproc"),
        ("LocalCluster, 1 worker", "dask1"),
        ("2 workers", "dask2"),
    ):
        name = f"simulate {key}"
        if name in r:
            s = r[name]
            rate, each = sim_n / s, 1e3 * s / sim_n
            lines.append(f"| simulate × {k} configs, {label} | {sim_n:,} | {s:.1f} | {rate:,.1f} | {each:.0f} | — |")  # noqa: RUF001
    lines += [
        "",
        "Per thread by length (median of 15, ms; one thread each, checkpoints in brackets):",
        "",
        "| turns | checkpoints | summary (headers) | floor: one header row | ratio |",
        "|---:|---:|---:|---:|---:|",
    ]
    for length in LENGTHS:
        a, b = r[f"summary len{length}"], r[f"floor len{length}"]
        lines.append(f"| {length} | {r[f'checkpoints len{length}']:,} | {a:.2f} | {b:.2f} | {a / b:.2f}× |")  # noqa: RUF001
    lines.append("")
    if "simulate dask2" in r:
        ratio = r["simulate dask1"] / r["simulate dask2"]
        lines.append(f"Scaling, 2 workers ÷ 1 worker at {sim_n:,} threads: **{ratio:.2f}×** (2 cores in all).")  # noqa: RUF001
        lines.append(
            f"Peak memory: in-process simulate {r['peak MiB inproc']:.0f} MiB (the whole Python process); "
            f"per worker {r['peak MiB dask1']:.0f} MiB (1 worker), {r['peak MiB dask2']:.0f} MiB (2 workers)."
        )
    else:
        lines.append(f"Peak memory: in-process simulate {r['peak MiB inproc']:.0f} MiB (the whole Python process).")
    errors = {key: v for key, v in r.items() if key.startswith("sim errors") and v}
    lines.append(f"Simulation error rows: {errors or 'none'}.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1_000)
    parser.add_argument("--sim-threads", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="60 threads, simulate 30, no cluster")
    args = parser.parse_args()
    r = measure(60, 30, dask=False) if args.quick else measure(args.threads, min(args.sim_threads, args.threads))
    print("\n".join(table(r)))
    print(json.dumps(r, default=str), file=sys.stderr)


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
