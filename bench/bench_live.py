"""A 50-branch sweep with a live model against a local OpenAI-compatible server that answers 20 %
of requests with HTTP 429 (issue 29): wall time, requests sent, retries, peak concurrency, and
what a second run of the same sweep sends (0: every branch is reused, every call cached).

The server is tests/models/openai_server.py (starlette + uvicorn on 127.0.0.1, a thread of this
process); the model is ``OpenAIModel`` on the real ``openai`` client with a ``ModelCache`` and
``max_concurrency``. Each branch is one new turn: a tool call, the tool, an answer (2 requests)::

    python -m bench.bench_live                      # 50 branches, 20 % 429s, limit 8
    python -m bench.bench_live --branches 100 --rate-429 0.3 --limit 4
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.models.openai_server import Hostility, OpenAIServer
from tulip_nb.agent import Agent, NullManager, tool
from tulip_nb.core import Message
from tulip_nb.lab import aopen_thread, asweep
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import ModelCache, ScriptedModel, text, tool_call
from tulip_nb.models.openai import OpenAIModel


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order id.
    """
    return f"order {order_id}: shipped"


def _recorded(messages: list[Message]) -> Message:
    if messages[-1].role == "user":
        return tool_call("lookup_order", order_id="ord-1")
    return text("Recorded answer.")


async def _run(tmp: Path, branches: int, rate_429: float, limit: int, latency: float) -> dict[str, Any]:
    cp = FileCheckpointer(str(tmp / "store"))
    recorder = Agent(ScriptedModel(_recorded), [lookup_order], system_prompt="You help.", checkpointer=cp)
    await recorder.run("Where is ord-1?", thread_id="ticket-1")
    thread = await aopen_thread(cp, "ticket-1")
    out: dict[str, Any] = {"branches": branches, "rate_429": rate_429, "limit": limit, "latency_s": latency}
    with OpenAIServer(Hostility(rate_429=rate_429, latency=latency, retry_after_ms=250, seed=29)) as server:
        model = OpenAIModel("gpt-4o-mini", base_url=server.url, api_key="bench", max_concurrency=limit,
                            cache=ModelCache(tmp / "responses.sqlite"), temperature=0)  # fmt: skip
        agent = Agent(model, [lookup_order], system_prompt="You help.", conversation_manager=NullManager())
        variants = {f"style {i}": {"system_prompt": f"You help. Answer in style {i}."} for i in range(branches)}
        kw: dict[str, Any] = {"at": -1, "variants": variants, "agent": agent, "prompt": "And ord-2?"}
        t0 = time.perf_counter()
        first = await asweep(thread, concurrency=2 * limit, **kw)
        out["wall_s"] = time.perf_counter() - t0
        out["rows_ok"] = int(first["error"].isna().sum())
        out["requests"] = server.requests
        out["statuses"] = dict(server.statuses)
        out["retries"] = model.stats.retries
        out["peak"] = server.peak
        out["cost_usd"] = float(first["cost"].sum())
        out["tokens"] = int(first["tokens"].sum())
        server.reset()
        t1 = time.perf_counter()
        second = await asweep(thread, concurrency=2 * limit, **kw)
        out["second_wall_s"] = time.perf_counter() - t1
        out["second_requests"] = server.requests
        out["second_all_cached"] = bool(second["cached"].all())
        out["second_same_answers"] = list(second["final_answer"]) == list(first["final_answer"])
        t2 = time.perf_counter()
        fresh = await asweep(thread, concurrency=2 * limit, resume=False, **kw)
        out["fresh_branches_wall_s"] = time.perf_counter() - t2
        out["fresh_branches_requests"] = server.requests
        out["fresh_same_answers"] = list(fresh["final_answer"]) == list(first["final_answer"])
        await model.aclose()
        model.cache.close()
    await cp.close()
    return out


def measure(branches: int = 50, rate_429: float = 0.2, limit: int = 8, latency: float = 0.05) -> dict[str, Any]:
    """The figures, and the first run's wall time without 429s (same sweep, fresh store and cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        hostile, quiet = Path(tmp) / "hostile", Path(tmp) / "calm"
        hostile.mkdir()
        quiet.mkdir()
        out = asyncio.run(_run(hostile, branches, rate_429, limit, latency))
        calm = asyncio.run(_run(quiet, branches, 0.0, limit, latency))
    out["calm_wall_s"] = calm["wall_s"]
    out["calm_requests"] = calm["requests"]
    return out


def table(r: dict[str, Any]) -> list[str]:
    s = r["statuses"]
    return [
        f"A {r['branches']}-branch `lab.sweep` (each branch: a new turn, 2 model calls) with `OpenAIModel` "
        f"(real `openai` client, `max_concurrency={r['limit']}`, a `ModelCache`) against the local "
        f"OpenAI-compatible server answering {r['rate_429']:.0%} of requests with 429 + `retry-after-ms: 250`, "
        f"{r['latency_s'] * 1000:.0f} ms per answer.",
        "",
        "| run | wall time | requests sent | 200 / 429 | retries | peak concurrency (server) | rows ok |",
        "|---|---|---|---|---|---|---|",
        f"| first | {r['wall_s']:.2f} s | {r['requests']} | {s.get('200', 0)} / {s.get('429', 0)} | {r['retries']} "
        f"| {r['peak']} (limit {r['limit']}) | {r['rows_ok']} / {r['branches']} |",
        f"| first, no 429s (baseline) | {r['calm_wall_s']:.2f} s | {r['calm_requests']} | - | 0 | - | - |",
        f"| second (same cell again) | {r['second_wall_s']:.2f} s | {r['second_requests']} | - | 0 | - "
        f"| all cached: {r['second_all_cached']}, same answers: {r['second_same_answers']} |",
        f"| `resume=False` (new branches) | {r['fresh_branches_wall_s']:.2f} s | {r['fresh_branches_requests']} "
        f"| - | 0 | - | same answers: {r['fresh_same_answers']} |",
        "",
        f"Tokens {r['tokens']:,}, cost ${r['cost_usd']:.5f} at gpt-4o-mini list prices (the server's token counts).",
    ]


def section_live(ctx: Any) -> list[str]:
    """The issue-29 figures (see the module docstring)."""
    return table(measure())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--branches", type=int, default=50)
    parser.add_argument("--rate-429", type=float, default=0.2)
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    print("\n".join(table(measure(args.branches, args.rate_429, args.limit, args.latency))))


if __name__ == "__main__":
    main()
