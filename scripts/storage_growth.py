"""Storage growth of a research thread: disk and save time against the thread's length.

The reproduction of the storage issue, as a new user would run it: an offline agent (a function
``ScriptedModel``) with ``checkpoint_every_n_iterations=1`` on the default ``FileCheckpointer``,
each turn a user question, two or three tool rounds with 1-3 kB results, and an answer. For each
length it prints the thread's disk use, that divided by the conversation itself (the latest
state's JSON), and the median save, for the default (history) layout and for ``layout="tulip"``
(every checkpoint also projected as a whole tulip envelope)::

    python scripts/storage_growth.py                  # 25, 150 and 300 turns (~1 min on 2 cores)
    python scripts/storage_growth.py --turns 25 300 --layouts history
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tulip_nb import Agent, tool
from tulip_nb.core import Message
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call


def _result(seed: str, size: int) -> str:
    unit = hashlib.sha256(seed.encode()).hexdigest()
    return (unit * (size // len(unit) + 1))[:size]


class TimedFile(FileCheckpointer):
    """FileCheckpointer that records how long each save takes."""

    times: list[float]
    mid_turn: list[float]

    async def save(self, *args: Any, **kwargs: Any) -> str:
        t0 = time.perf_counter()
        cid = await super().save(*args, **kwargs)
        took = time.perf_counter() - t0
        self.times.append(took)
        metadata = kwargs.get("metadata") if "metadata" in kwargs else (args[3] if len(args) > 3 else None)
        if (metadata or {}).get("source") == "iteration":
            self.mid_turn.append(took)
        return cid


def _reply(messages: list[Message], tools: Any) -> Message:
    """Two or three rounds of ``fetch`` per turn, then an answer."""
    turn = sum(1 for m in messages if m.role == "user")
    rounds = 2 + turn % 2
    done = 0
    for m in reversed(messages):
        if m.role == "user":
            break
        done += m.role == "assistant"
    if done < rounds:
        return tool_call("fetch", item=turn, page=done, size=1000 + 700 * ((turn + done) % 3))
    return text(f"Turn {turn}: the pages agree; " + _result(f"answer {turn}", 400))


def run(turns: int, layout: str) -> dict[str, Any]:
    @tool
    def fetch(item: int, page: int, size: int) -> str:
        """Fetch one page of an item's logs."""
        return _result(f"{item}:{page}", size)

    base = Path(tempfile.mkdtemp(prefix="tulip_nb_growth_"))
    cp = TimedFile(base, layout=layout)  # type: ignore[arg-type]
    cp.times, cp.mid_turn = [], []
    agent = Agent(ScriptedModel(_reply), [fetch], checkpointer=cp, checkpoint_every_n_iterations=1)
    for t in range(turns):
        agent.run_sync(f"question {t}: what do the logs of item {t} say?", thread_id="research")
    latest = asyncio.run(cp.load("research"))
    assert latest is not None
    disk = sum(p.stat().st_size for p in base.rglob("*") if p.is_file())
    conversation = len(latest.to_json_bytes())
    return {
        "turns": turns,
        "layout": layout,
        "saves": len(cp.times),
        "disk_mb": disk / 1e6,
        "ratio": disk / conversation,
        "median_save_ms": statistics.median(cp.times) * 1e3,
        "last_50_ms": statistics.mean(cp.times[-50:]) * 1e3,
        "mid_turn_ms": statistics.median(cp.mid_turn[-50:]) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, nargs="+", default=[25, 150, 300])
    parser.add_argument("--layouts", nargs="+", default=["history", "tulip"], choices=["history", "tulip"])
    args = parser.parse_args()
    print(
        "| layout | turns | saves | disk | disk / the conversation | median save | mean of the last 50 "
        "| median of the last 50 mid-turn saves |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for layout in args.layouts:
        for turns in args.turns:
            r = run(turns, layout)
            print(
                f"| {r['layout']} | {r['turns']} | {r['saves']} | {r['disk_mb']:.1f} MB | {r['ratio']:.1f}x | "
                f"{r['median_save_ms']:.1f} ms | {r['last_50_ms']:.1f} ms | {r['mid_turn_ms']:.1f} ms |",
                flush=True,
            )


if __name__ == "__main__":
    main()
