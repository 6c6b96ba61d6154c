"""What signing saves (the hash chain of ``tulip_nb.memory.integrity``) costs, with vs without.

Same run, same process, interleaved repetitions (``bench.run.measure``), at 2000 messages
(BENCH.md workload): FileCheckpointer (fsync off and on) and MemoryCheckpointer saves, each once
with signing and once built with ``sign=False``. Two save shapes:

- *same messages*: the checkpoint section's case, the same 2000 messages saved again;
- *+2 messages*: each save appends two new messages first (a turn), the steady state of an agent;
- *cold*: 2000 fresh message objects (a new process's first save: every message is hashed).

Verification (from scratch) is timed too.

    .venv/bin/python -m bench.bench_integrity [--reps 25] [--size 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.run import Case, measure
from bench.workload import build_state
from tulip_nb.core import AgentState, Message, state_json_bytes
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.integrity import verify_thread


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


async def run(size: int, reps: int) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="tulip_nb_bench_integrity_"))
    try:
        warm = build_state(size)
        state_json_bytes(warm)  # message bytes cached, as after the agent's earlier saves
        cps = {
            (kind, signed): FileCheckpointer(tmp / f"{kind}-{signed}", fsync=kind == "fsync", sign=signed)
            for kind in ("nofsync", "fsync")
            for signed in (True, False)
        }
        growing = {key: AgentState(messages=list(warm.messages)) for key in cps}
        counter = [0]

        def grow(state: AgentState) -> AgentState:
            counter[0] += 1
            state.messages.append(Message.user(f"turn {counter[0]}: " + "x" * 200))
            state.messages.append(Message.assistant(f"answer {counter[0]}: " + "y" * 400))
            return state

        async def cold(cp: FileCheckpointer) -> float:
            fresh = build_state(size)  # untimed: new message objects, nothing cached
            state_json_bytes(fresh)  # ... except their bytes (the agent serialised them before)
            return await _timed(lambda: cp.save(fresh, "cold"))

        cases: dict[str, Case] = {}
        for (kind, signed), cp in cps.items():
            tag = f"{kind} {'signed' if signed else 'unsigned'}"
            cases[f"file {tag} same"] = lambda cp=cp: _timed(lambda: cp.save(warm, "same"))
            cases[f"file {tag} +2"] = lambda cp=cp, k=(kind, signed): _timed(lambda: cp.save(grow(growing[k]), "grow"))
            if kind == "nofsync":
                cases[f"file {tag} cold"] = lambda cp=cp: cold(cp)
        for signed in (True, False):
            tag = "signed" if signed else "unsigned"
            cases[f"memory {tag} same"] = lambda s=signed: _timed(lambda: MemoryCheckpointer(sign=s).save(warm, "m"))
        res = await measure(cases, reps)
        verify_cp = FileCheckpointer(tmp / "verify", fsync=False)
        await verify_cp.save(warm, "v")
        t0 = time.perf_counter()
        report = await verify_thread(FileCheckpointer(tmp / "verify"), "v")
        verify_ms = (time.perf_counter() - t0) * 1e3
        assert report.ok, report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    lines = [
        f"### signing overhead at {size} messages (medians of {reps} interleaved repetitions, ms)",
        "",
        "| save | unsigned | signed | overhead |",
        "|---|---:|---:|---:|",
    ]
    for name in cases:
        if " signed " not in f" {name} ":
            continue
        base = name.replace(" signed", " unsigned")
        s, u = res.median_ms(name), res.median_ms(base)
        if s is None or u is None:
            continue
        label = name.replace(" signed", "")
        lines.append(f"| {label} | {u:.3f} | {s:.3f} | {100 * (s / u - 1):+.1f} % |")
    lines += ["", f"verify_thread of one {size}-message checkpoint from a fresh instance: {verify_ms:.1f} ms"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_integrity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--size", type=int, default=2000)
    args = parser.parse_args(argv)
    print("\n".join(asyncio.run(run(args.size, args.reps))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
