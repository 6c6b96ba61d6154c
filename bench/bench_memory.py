"""Peak memory of loading a 2000-message thread, tulip_nb beside tulip-agents and LangGraph.

Each measurement runs in a fresh subprocess, so one library's caches and allocator state cannot
leak into another's numbers. The child imports its library and loads a 20-message thread first
(imports, lazy modules and first-use caches are not part of the figure), then loads the
2000-message thread once and reports:

- ``tracemalloc peak``: the most memory Python allocations held at once during the load (a
  separate child with tracemalloc on, since tracing costs memory and time itself);
- ``peak RSS growth``: the process's peak resident set during the load minus its resident set
  before, in a child without tracemalloc (the kernel's ``VmHWM``, reset just before the load via
  ``/proc/self/clear_refs``; where that is missing, the ``ru_maxrss`` difference). It counts what
  the allocator took from the OS, which tracemalloc does not see (e.g. orjson's own buffers);
- ``kept``: what the loaded state still holds when the load returns (tracemalloc current).

The floor is ``orjson.loads`` of the checkpoint file's bytes (the dicts and strings alone).

    .venv/bin/python -m bench.bench_memory [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.workload import build_state, to_tulip_state

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import gc, json, resource, sys, tracemalloc
kind, base, trace = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def loader():
    if kind == "floor":
        import orjson, pathlib
        path = pathlib.Path(base) / "floor.json"
        small = pathlib.Path(base) / "floor-small.json"
        orjson.loads(small.read_bytes())
        return lambda: orjson.loads(path.read_bytes())
    import asyncio
    if kind == "tulip_nb":
        from tulip_nb.memory.backends import FileCheckpointer
        cp = FileCheckpointer(base + "/nb")
    elif kind == "tulip-agents":
        from tulip.memory.backends.file import FileCheckpointer
        cp = FileCheckpointer(base + "/tulip")
    elif kind == "langgraph-sqlite":
        import sqlite3
        from langgraph.checkpoint.sqlite import SqliteSaver
        saver = SqliteSaver(sqlite3.connect(base + "/lg.db", check_same_thread=False))
        def get(t):
            c = saver.get_tuple({"configurable": {"thread_id": t, "checkpoint_ns": ""}})
            return c.checkpoint["channel_values"]["messages"]
        get("small")
        return lambda: get("big")
    else:
        raise SystemExit(f"unknown kind {kind}")
    asyncio.run(cp.load("small"))
    return lambda: asyncio.run(cp.load("big"))

load = loader()
gc.collect()
if trace:
    tracemalloc.start()
    obj = load()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({"peak": peak, "kept": current}))
else:
    def status():
        out = {}
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "VmRSS"):
                    out[key] = int(value.split()[0]) * 1024
        return out
    try:  # reset the peak-RSS mark (Linux >= 4.0), so VmHWM is this load's peak
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = status()["VmRSS"]
        obj = load()
        print(json.dumps({"rss_growth": status()["VmHWM"] - before}))
    except OSError:  # no procfs: ru_maxrss, which also counts the imports' peak
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        obj = load()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"rss_growth": (after - before) * 1024}))
"""

KINDS = ("floor", "tulip_nb", "tulip-agents", "langgraph-sqlite")


async def _prepare(base: Path, n: int) -> list[str]:
    """Write the 20- and ``n``-message threads for every implementation; the kinds available."""
    from tulip.memory.backends.file import FileCheckpointer as TulipFile

    from tulip_nb.memory.backends import FileCheckpointer

    big, small = build_state(n), build_state(20)
    nb = FileCheckpointer(base / "nb", fsync=False)
    await nb.save(small, "small")
    await nb.save(big, "big")
    # the floor: the same states' envelopes as JSON files (layout="tulip" projects one per save)
    probe = FileCheckpointer(base / "probe", fsync=False, layout="tulip")
    big_id, small_id = await probe.save(big, "big"), await probe.save(small, "small")
    shutil.copy(probe.thread_dir("big") / f"{big_id}.json", base / "floor.json")
    shutil.copy(probe.thread_dir("small") / f"{small_id}.json", base / "floor-small.json")
    tf = TulipFile(base / "tulip")
    await tf.save(to_tulip_state(small), "small")
    await tf.save(to_tulip_state(big), "big")
    kinds = ["floor", "tulip_nb", "tulip-agents"]
    from bench import bench_langgraph as lg

    if lg.available():
        h = lg.SqliteHandle(base / "lg.db")
        try:
            lg.LGThread(h.saver, "small").save(lg.to_channel(small.messages))
            lg.LGThread(h.saver, "big").save(lg.to_channel(big.messages))
        finally:
            h.close()
        kinds.append("langgraph-sqlite")
    return kinds


def _child(kind: str, base: Path, trace: bool) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, str(base), "1" if trace else "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def measure(runs: int = 3, n: int = 2000) -> list[str]:
    """The memory table (Markdown lines): medians of ``runs`` children per implementation."""
    base = Path(tempfile.mkdtemp(prefix="tulip_nb_bench_memory_"))
    try:
        kinds = asyncio.run(_prepare(base, n))
        size = (base / "floor.json").stat().st_size
        res: dict[str, dict[str, float]] = {}
        for kind in kinds:
            traced = [_child(kind, base, True) for _ in range(runs)]
            rss = [_child(kind, base, False) for _ in range(runs)]
            res[kind] = {
                "peak": statistics.median(t["peak"] for t in traced),
                "kept": statistics.median(t["kept"] for t in traced),
                "rss": statistics.median(r["rss_growth"] for r in rss),
            }
            print(f"  memory: {kind} done", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    floor, tulip = res["floor"], res["tulip-agents"]
    labels = {
        "floor": "floor: read + orjson.loads (dicts)",
        "tulip_nb": "**tulip_nb** FileCheckpointer.load",
        "tulip-agents": "tulip-agents FileCheckpointer.load",
        "langgraph-sqlite": "LangGraph SqliteSaver.get_tuple (dicts)",
    }
    mb = 1e6
    lines = [
        f"Loading one {n}-message thread ({size / mb:.2f} MB checkpoint file) in a fresh process; "
        f"medians of {runs} children each.",
        "",
        "| load | tracemalloc peak (MB) | × floor | tulip-agents ÷ this | kept after load (MB) "  # noqa: RUF001
        "| peak RSS growth (MB) | × floor |",  # noqa: RUF001
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in res.items():
        lines.append(
            f"| {labels[kind]} | {r['peak'] / mb:.1f} | {r['peak'] / floor['peak']:.2f}× | "  # noqa: RUF001
            f"{tulip['peak'] / r['peak']:.2f}× | {r['kept'] / mb:.1f} | {r['rss'] / mb:.1f} | "  # noqa: RUF001
            f"{r['rss'] / floor['rss']:.2f}× |"  # noqa: RUF001
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("\n".join(measure(args.runs)))


if __name__ == "__main__":
    main()
