"""Research across a corpus: summary and simulation of 1,000 threads x 10 configs, in-process and on Dask.

    python -m bench.bench_corpus [--threads 1000] [--quick]

Builds an offline corpus with :func:`tulip_nb.lab.build_corpus` (the real Agent, a scripted model)
in a file store, then measures, in this run:

- ``summary()`` of the corpus (one row per thread) at two corpus sizes, beside the floor: reading
  and parsing every thread's latest tulip envelope (what any summary must at least read);
- ``simulate()`` with 10 compaction configs, in-process and on a ``LocalCluster`` of 1 and 2 worker
  processes (threads/s, the 2-worker / 1-worker scaling ratio);
- the per-thread cost and each worker's peak memory at both corpus sizes (fresh workers per size, warmed up on
  a few threads first, untimed),
  which must not grow with the corpus: work is shipped by thread id, the worker opens the store
  from its URL and keeps one thread at a time.

The 2-worker figure is bounded by the machine: on 2 cores the scheduler, the client and the
workers share them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from tulip_nb.lab import build_corpus, corpus_facts, open_corpus
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.compactor import LLMCompactor, SlidingWindowManager


def configs() -> dict[str, Any]:
    """10 configs a compaction study would compare on this corpus (written with a 2,000 window)."""
    out: dict[str, Any] = {
        f"compact {cl} t{tf}": LLMCompactor(context_length=cl, trigger_fraction=tf)
        for cl in (1_500, 2_000, 3_000)
        for tf in (0.6, 0.8)
    }
    out.update({f"window {w}": SlidingWindowManager(window_size=w) for w in (10, 20, 40, 80)})
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def floor_read(base: Path, *, tokens: bool = False) -> float:
    """Seconds to read and parse every thread's newest tulip envelope (the summary's floor); with
    ``tokens``, also to encode every message's text with tiktoken (what counting tokens costs)."""
    from tulip_nb.tokens import _load_encoder

    enc, _ = _load_encoder("o200k_base")
    t = time.perf_counter()
    for d in base.iterdir():
        if d.is_dir() and not d.name.startswith("."):
            files = sorted(d.glob("*.json"))
            if files:
                env = orjson.loads(files[-1].read_bytes())
                if tokens and enc is not None:
                    for m in env["state"]["messages"]:
                        enc.encode(str(m.get("content") or ""))
    return time.perf_counter() - t


def _worker_peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@contextlib.contextmanager
def cluster(workers: int) -> Iterator[Any]:
    from dask.distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", host="127.0.0.1"
        ) as lc,
        Client(lc) as client,
    ):
        yield client


def build(base: Path, n: int) -> float:
    t, _ = timed(lambda: build_corpus(FileCheckpointer(base, fsync=False), n=n, seed=0))
    return t


def measure(n_large: int = 1_000, n_small: int = 250, *, dask: bool = True) -> dict[str, Any]:
    """Every figure of the corpus table, as a dict (seconds unless the key says otherwise)."""
    out: dict[str, Any] = {"n_large": n_large, "n_small": n_small, "configs": len(configs())}
    with tempfile.TemporaryDirectory() as d:
        base = Path(d) / "corpus"
        base.mkdir()
        out["build"] = build(base, n_large)
        url = f"file://{base}"
        for n in (n_small, n_large):
            corpus = open_corpus(url, limit=n)
            out[f"summary {n}"], frame = timed(corpus.summary)
            assert len(frame) == n, (len(frame), n)
            out[f"floor {n}"] = floor_read(base) * n / n_large
            out[f"floor tokens {n}"] = floor_read(base, tokens=True) * n / n_large
            out[f"simulate inproc {n}"], sim = timed(lambda c=corpus: c.simulate(configs(), probes=corpus_facts))
            out[f"sim rows {n}"] = len(sim)
            out[f"sim errors {n}"] = int(sim["error"].notna().sum())
            corpus.close()
        if dask:
            for workers in (1, 2):
                for n in (n_small, n_large) if workers == 1 else (n_large,):
                    with cluster(workers) as client:
                        corpus = open_corpus(url, limit=n)
                        corpus[: 2 * workers].simulate(configs(), probes=corpus_facts, executor=client, progress=False)
                        out[f"simulate dask{workers} {n}"], sim = timed(
                            lambda c=corpus, cl=client: c.simulate(configs(), probes=corpus_facts, executor=cl)
                        )
                        out[f"sim errors dask{workers} {n}"] = int(sim["error"].notna().sum())
                        peaks = client.run(_worker_peak_kib)
                        out[f"worker peak MiB dask{workers} {n}"] = max(peaks.values()) / 1024
                        corpus.close()
    return out


def table(r: dict[str, Any]) -> list[str]:
    """Markdown lines for bench/README.md (and ``python -m bench --section corpus``)."""
    big, small, k = r["n_large"], r["n_small"], r["configs"]

    def per_thread_ms(key: str, n: int) -> str:
        return f"{1e3 * r[key] / n:.1f}" if key in r else "—"

    lines = [
        f"A corpus of {big:,} offline threads (`build_corpus`, {r['build']:.0f} s to write), {k} configs "
        "(LLMCompactor at 3 windows × 2 triggers, SlidingWindow at 4 sizes), file store. One run; seconds.",  # noqa: RUF001
        "",
        "| what | threads | seconds | threads/s | ms per thread | vs floor |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n in (small, big):
        s, fl = r[f"summary {n}"], r[f"floor {n}"]
        ft = r[f"floor tokens {n}"]
        lines.append(
            f"| summary() | {n:,} | {s:.2f} | {n / s:,.0f} | {1e3 * s / n:.1f} | "
            f"{s / fl:.0f}× ({s / ft:.1f}× with tokens) |"  # noqa: RUF001
        )
    for n in (small, big):
        lines.append(
            f"| floor: read + parse each latest envelope | {n:,} | {r[f'floor {n}']:.2f} | "
            f"{n / r[f'floor {n}']:,.0f} | {1e3 * r[f'floor {n}'] / n:.2f} | 1× |"  # noqa: RUF001
        )
        ft = r[f"floor tokens {n}"]
        lines.append(
            f"| floor + tiktoken over every message | {n:,} | {ft:.2f} | {n / ft:,.0f} | {1e3 * ft / n:.2f} | "
            f"{ft / r[f'floor {n}']:.0f}× |"  # noqa: RUF001
        )
    for label, key in (("in-process", "inproc"), ("LocalCluster, 1 worker", "dask1"), ("2 workers", "dask2")):
        for n in (small, big):
            name = f"simulate {key} {n}"
            if name in r:
                s = r[name]
                lines.append(
                    f"| simulate × {k} configs, {label} | {n:,} | {s:.1f} | {n / s:,.1f} | "  # noqa: RUF001
                    f"{per_thread_ms(name, n)} | — |"
                )
    if "simulate dask1 " + str(big) in r and "simulate dask2 " + str(big) in r:
        ratio = r[f"simulate dask1 {big}"] / r[f"simulate dask2 {big}"]
        lines += ["", f"Scaling, 2 workers ÷ 1 worker at {big:,} threads: **{ratio:.2f}×** (2 cores in all)."]  # noqa: RUF001
    if f"worker peak MiB dask1 {small}" in r:
        a, b = r[f"worker peak MiB dask1 {small}"], r[f"worker peak MiB dask1 {big}"]
        ta = 1e3 * r[f"simulate dask1 {small}"] / small
        tb = 1e3 * r[f"simulate dask1 {big}"] / big
        lines.append(
            f"Per worker, {small:,} → {big:,} threads: peak memory {a:.0f} → {b:.0f} MiB, "
            f"{ta:.1f} → {tb:.1f} ms per thread (fresh workers per size)."
        )
    errors = {key: v for key, v in r.items() if key.startswith("sim errors") and v}
    lines.append(f"Error rows: {errors or 'none'}.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1_000)
    parser.add_argument("--quick", action="store_true", help="200 threads, no cluster")
    args = parser.parse_args()
    big = 200 if args.quick else args.threads
    r = measure(big, max(1, big // 4), dask=not args.quick)
    print("\n".join(table(r)))


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
