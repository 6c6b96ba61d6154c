"""Redis on the history model: the issue-26 research thread (:mod:`bench.research`, 300 turns, a save
after every model call) saved into ``redis_checkpointer`` (``layout="history"``, its default: the
latest turn end projected as tulip's keys in the same ``MULTI``/``EXEC``), on a fresh key prefix.

Reported: every save's time (all, first 100, last 100 and their ratio), ``MEMORY USAGE`` (``SAMPLES
0``) of the thread's keys (the history's and tulip's) after 100 and 300 turns, against the messages'
JSON, and a load of the latest from a fresh instance. One run, once: a figure, not a pass/fail::

    PYTHONPATH=. .venv/bin/python -m bench.bench_redis_history [redis://127.0.0.1:6379/15]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from typing import Any

from bench.research import Research, record
from tulip_nb.memory.backends import redis_checkpointer
from tulip_nb.memory.backends.redis import HISTORY_NAMESPACE

THREAD = "research"


async def memory(client: Any, prefix: str) -> dict[str, int]:
    """Bytes Redis uses for the history's keys and for tulip's keys under ``prefix``."""
    out = {"history": 0, "tulip": 0}
    async for key in client.scan_iter(match=prefix + "*", count=1000):
        used = int(await client.memory_usage(key, samples=0) or 0)
        out["history" if key.decode().startswith(prefix + HISTORY_NAMESPACE) else "tulip"] += used
    return out


async def run(url: str, work: Research) -> None:
    import redis.asyncio as aioredis

    print(work.describe())
    turn_ends = [i for i, s in enumerate(work.saves) if s.metadata.get("source") == "final"]
    at_100 = turn_ends[99]
    msgs = work.fresh_messages()
    rests = [s.parse() for s in work.saves]
    prefix = f"tnbbench:{uuid.uuid4().hex[:10]}:"
    client = aioredis.from_url(url)
    cp = redis_checkpointer(url=url, prefix=prefix)
    times: list[float] = []
    mem100: dict[str, int] = {}
    try:
        for i, s in enumerate(work.saves):
            state = s.state(msgs[: s.n], rests[i])
            t0 = time.perf_counter()
            await cp.save(state, THREAD, metadata=s.metadata)
            times.append(time.perf_counter() - t0)
            if i == at_100:
                mem100 = await memory(client, prefix)
                json100 = len(b"[" + b",".join(m.json_bytes() for m in msgs[: s.n]) + b"]")
        await cp.close()
        mem300 = await memory(client, prefix)
        fresh = redis_checkpointer(url=url, prefix=prefix)
        t0 = time.perf_counter()
        got = await fresh.load(THREAD)
        load = time.perf_counter() - t0
        from tulip_nb.memory.integrity import verify_thread

        t0 = time.perf_counter()
        report = await verify_thread(fresh, THREAD)
        verify = time.perf_counter() - t0
        await fresh.close()
        assert got is not None and len(got.messages) == len(work.messages)
        assert report.ok, str(report)
    finally:
        keys = [k async for k in client.scan_iter(match=prefix + "*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    first, last = times[:100], times[-100:]
    print(f"saves: {len(times):,}, total {sum(times):.2f} s, median {statistics.median(times) * 1e3:.2f} ms")
    print(
        f"first 100: mean {statistics.mean(first) * 1e3:.2f} ms; last 100: mean {statistics.mean(last) * 1e3:.2f} ms;"
        f" last/first {statistics.mean(last) / statistics.mean(first):.2f}"
    )
    ends = set(turn_ends)
    for label, pick in (("mid-turn", lambda i: i not in ends), ("turn end", lambda i: i in ends)):
        f100 = [t for i, t in enumerate(times) if pick(i) and i < 100]
        l100 = [t for i, t in enumerate(times) if pick(i) and i >= len(times) - 100]
        print(
            f"  {label} saves: first 100 mean {statistics.mean(f100) * 1e3:.2f} ms,"
            f" last 100 mean {statistics.mean(l100) * 1e3:.2f} ms"
        )
    print(
        f"MEMORY USAGE at 100 turns: history {mem100['history'] / 1e6:.2f} MB + tulip's keys"
        f" {mem100['tulip'] / 1e6:.2f} MB; messages' JSON {json100 / 1e6:.2f} MB"
    )
    print(
        f"MEMORY USAGE at 300 turns: history {mem300['history'] / 1e6:.2f} MB + tulip's keys"
        f" {mem300['tulip'] / 1e6:.2f} MB; messages' JSON {work.json_bytes / 1e6:.2f} MB"
    )
    print(f"load latest ({len(got.messages):,} messages) from a fresh instance: {load * 1e3:.1f} ms")
    print(f"verify_thread (every checkpoint loaded and checked, one batch): {verify:.2f} s")


if __name__ == "__main__":
    recorded = record()  # runs the agent (its own event loop), before ours
    asyncio.run(run(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/15", recorded))
