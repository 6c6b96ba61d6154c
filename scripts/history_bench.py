"""Figures for issue 26: the history layout beside the current file store and SQLiteSession.

The workload is the issue's, never shrunk: the offline research agent of ``storage_growth.py``
(300 turns, 2-3 tool rounds of 1-3 kB each, a save after every model call), recorded once as the
sequence of saves it makes, then replayed into each store with fresh message objects (so no store
reuses another's serialised JSON). Cases run interleaved, in rotating order, ``--rounds`` times:

- ``history``: ``FileCheckpointer(base, layout="history")`` (SQLite WAL, synchronous=FULL);
- ``delta``: ``FileCheckpointer(base)`` (the current default, fsync on);
- ``SQLiteSession``: OpenAI Agents, appending each step's new items (run in ``--peers-python``,
  a separate venv, when given; each message converted to items as in bench/bench_openai_sessions).

Reported per case: the durable conversation (sum of the save calls), disk after close divided by
the messages' JSON, load latest from a fresh instance, and (file stores) copy and fork of the
thread (~2,100 messages)::

    python scripts/history_bench.py --peers-python /tmp/peers-venv/bin/python
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
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage_growth import _reply, _result

from bench.bench_openai_sessions import to_items
from tulip_nb import Agent, tool
from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer

Save = tuple[int, bytes, dict[str, Any]]  # (number of messages, the state's other fields as JSON, metadata)


class Recorder(MemoryCheckpointer):
    """Records every save the agent makes: its message count, the rest of its state, its metadata."""

    def __init__(self) -> None:
        super().__init__(sign=False)
        self.saves: list[Save] = []

    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        **kw: Any,
    ) -> str:
        rest = AgentState.__pydantic_serializer__.to_json(state, exclude={"messages"})
        self.saves.append((len(state.messages), rest, dict(metadata or {})))
        return await super().save(state, thread_id, checkpoint_id, metadata, **kw)


def record(turns: int) -> tuple[list[dict[str, Any]], list[Save]]:
    @tool
    def fetch(item: int, page: int, size: int) -> str:
        """Fetch one page of an item's logs."""
        return _result(f"{item}:{page}", size)

    rec = Recorder()
    agent = Agent(_model(), [fetch], checkpointer=rec, checkpoint_every_n_iterations=1)
    for t in range(turns):
        agent.run_sync(f"question {t}: what do the logs of item {t} say?", thread_id="research")
    latest = asyncio.run(rec.load("research"))
    assert latest is not None
    return [orjson.loads(m.json_bytes()) for m in latest.messages], rec.saves


def _model() -> Any:
    from tulip_nb.models import ScriptedModel

    return ScriptedModel(_reply)


def _disk(base: Path) -> int:
    return sum(p.stat().st_size for p in base.rglob("*") if p.is_file())


async def run_file(base: Path, layout: str, messages: list[dict[str, Any]], saves: list[Save]) -> dict[str, Any]:
    msgs = [Message.model_validate(d) for d in messages]  # fresh objects: no cached JSON
    kw: dict[str, Any] = {"layout": "history"} if layout == "history" else {}
    cp = FileCheckpointer(base, **kw)
    total = 0.0
    for n, rest, meta in saves:
        state = AgentState.model_validate_json(rest)
        state.messages = msgs[:n]
        t0 = time.perf_counter()
        await cp.save(state, "research", metadata=meta)
        total += time.perf_counter() - t0
    await cp.close()
    disk = _disk(base)
    loads = []
    for _ in range(5):
        fresh = FileCheckpointer(base, **kw)
        t0 = time.perf_counter()
        got = await fresh.load("research")
        loads.append(time.perf_counter() - t0)
        assert got is not None and len(got.messages) == len(msgs)
        await fresh.close()
    fresh = FileCheckpointer(base, **kw)
    t0 = time.perf_counter()
    await fresh.copy_thread("research", "copy")
    copy_s = time.perf_counter() - t0
    latest = await fresh.load("research")
    assert latest is not None
    latest.messages = [*latest.messages, Message.user("what if?")]
    t0 = time.perf_counter()
    await fresh.save(latest, "fork", metadata={"forked_from": "research", "source": "fork"})
    fork_s = time.perf_counter() - t0
    await fresh.close()
    return {
        "save_s": total,
        "disk": disk,
        "load_ms": statistics.median(loads) * 1e3,
        "copy_ms": copy_s * 1e3,
        "fork_ms": fork_s * 1e3,
    }


_PEER = r"""
import asyncio, json, sys, time, os
from agents import SQLiteSession
work = json.load(open(sys.argv[1]))
path = sys.argv[2]
async def main():
    s = SQLiteSession("conv", path)
    total = 0.0
    for new in work:
        t0 = time.perf_counter(); await s.add_items(new); total += time.perf_counter() - t0
    s.close()
    loads = []
    for _ in range(5):
        f = SQLiteSession("conv", path)
        t0 = time.perf_counter(); got = await f.get_items(); loads.append(time.perf_counter() - t0)
        f.close()
    loads.sort()
    d = os.path.dirname(path)
    disk = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))
    print(json.dumps({"save_s": total, "disk": disk, "load_ms": loads[2] * 1e3, "items": len(got)}))
asyncio.run(main())
"""


def run_session(python: str, base: Path, messages: list[dict[str, Any]], saves: list[Save]) -> dict[str, Any]:
    items = [to_items(Message.model_validate(d)) for d in messages]
    steps, prev = [], 0
    for n, _, _ in saves:
        steps.append([it for per in items[prev:n] for it in per])
        prev = max(prev, n)
    base.mkdir(parents=True)
    work = base.parent / f"{base.name}.json"
    work.write_text(json.dumps(steps))
    out = subprocess.run(
        [python, "-c", _PEER, str(work), str(base / "sessions.db")], capture_output=True, text=True, check=True
    )
    work.unlink()
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers-python", default="", help="a python with openai-agents installed")
    args = parser.parse_args()
    messages, saves = record(args.turns)
    json_bytes = len(b"[" + b",".join(orjson.dumps(m) for m in messages) + b"]")
    print(
        f"workload: {args.turns} turns, {len(saves)} saves, {len(messages)} messages,"
        f" {json_bytes / 1e6:.2f} MB of messages' JSON"
    )
    cases = ["history", "delta"] + (["SQLiteSession"] if args.peers_python else [])
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    root = Path(tempfile.mkdtemp(prefix="history_bench_"))
    try:
        for r in range(args.rounds):
            order = cases[r % len(cases) :] + cases[: r % len(cases)]
            for case in order:
                base = root / f"{case}-{r}"
                if case == "SQLiteSession":
                    got = run_session(args.peers_python, base, messages, saves)
                else:
                    got = asyncio.run(run_file(base, case, messages, saves))
                results[case].append(got)
                shutil.rmtree(base, ignore_errors=True)
                print(f"round {r} {case}: " + ", ".join(f"{k}={v:.4g}" for k, v in got.items()), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        "| case | durable conversation (s) | disk / messages' JSON | load latest, fresh (ms)"
        " | copy (ms) | fork save (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for case, rows in results.items():

        def span(key: str, scale: float = 1.0, rows: list[dict[str, Any]] = rows) -> str:
            vals = sorted(r[key] * scale for r in rows if key in r)
            return f"{statistics.median(vals):.3g} ({vals[0]:.3g}-{vals[-1]:.3g})" if vals else "—"

        disk = statistics.median(r["disk"] for r in rows) / json_bytes
        print(
            f"| {case} | {span('save_s')} | {disk:.2f}x | {span('load_ms')} | {span('copy_ms')} | {span('fork_ms')} |"
        )
    if "SQLiteSession" in results:
        ours = statistics.median(r["save_s"] for r in results["history"])
        peer = statistics.median(r["save_s"] for r in results["SQLiteSession"])
        print(f"\nhistory / SQLiteSession, durable conversation: {ours / peer:.2f}x")


if __name__ == "__main__":
    main()
