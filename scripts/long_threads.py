"""Long-thread checks: the reproductions of the "correct on long threads" issue, as numbers.

Runs offline agents (function ``ScriptedModel``s) for a few hundred turns and prints, per scenario,
what a researcher would check by hand:

- ``idempotent``: 60 turns of "look up ord-N" with an idempotent tool; how many answers carry
  another order's record (ids minted by ScriptedModel, and a provider that reuses ``call_0``);
- ``window``: the most tokens sent in one call and the calls over the window, for LLMCompactor
  over 80 short turns (window 3000) and over a 300-turn thread with tool rounds (window 24000),
  and for a sliding window of 60 messages on that thread;
- ``replay``: divergences reported by ``Replay(thread).run_to()`` (no agent) on the 300-turn thread.

    python scripts/long_threads.py            # ~1 min on 2 cores
    python scripts/long_threads.py --turns 100

A manager that cannot fit what must be kept raises ``ContextWindowExceeded``; the scenario then
reports the turn where it did instead of a number of tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import tempfile
import time
from typing import Any

from tulip_nb import Agent, tool
from tulip_nb.core import Message
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tokens import get_counter

FILLER = (
    "The service logged a retry after the cache miss, then the worker resumed the batch from the "
    "last committed offset and wrote the rows again. "
)


def filler(n: int, seed: str) -> str:
    head = hashlib.sha256(seed.encode()).hexdigest()[:16]
    body = (FILLER * (n // len(FILLER) + 1))[: max(0, n - 17)]
    return f"{head} {body}"


class Meter:
    """Wraps a model; records the exact tokens of every request it is sent."""

    def __init__(self, model: Any, window: int | None) -> None:
        self.model, self.name, self.window = model, model.name, window
        self.counter = get_counter()
        self.sent: list[int] = []

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kw: Any) -> Any:
        self.sent.append(self.counter.count_request(messages, tools))
        return await self.model.complete(messages, tools, **kw)

    def report(self) -> dict[str, Any]:
        over = sum(1 for t in self.sent if self.window and t > self.window)
        return {"calls": len(self.sent), "max_sent": max(self.sent, default=0), "over_window": over}


# -- 1. idempotent tool, 60 turns -------------------------------------------------------------------


def idempotent_case(turns: int, reuse_ids: bool) -> dict[str, Any]:
    @tool(idempotent=True)
    def lookup(order_id: str) -> str:
        """Look up an order."""
        return f"record of {order_id}"

    def reply(messages: list[Message], tools: Any) -> Message:
        last = messages[-1]
        if last.role == "user":
            order = last.content.split()[-1] if last.content else "?"
            return tool_call("lookup", call_id="call_0" if reuse_ids else None, order_id=order)
        return text(f"ok: {last.content}")

    agent = Agent(ScriptedModel(reply), [lookup], checkpointer=None)
    wrong = []
    for n in range(1, turns + 1):
        answer = agent.run_sync(f"look up ord-{n}", thread_id=None).text
        if answer != f"ok: record of ord-{n}":
            wrong.append(f"turn {n}: asked ord-{n}, got {answer!r}")
    return {"turns": turns, "wrong": len(wrong), "first_wrong": wrong[:2]}


# -- 2. the window, and 3. replay -------------------------------------------------------------------

ROUND = re.compile(r"round (\d+) of (\d+)")


def research_tools() -> list[Any]:
    @tool
    def fetch(item: int, round: int, of: int, size: int) -> str:
        """Fetch one page of an item's logs."""
        return f"item-{item} round {round} of {of}: " + filler(size, f"{item}:{round}")

    return [fetch]


def research_model(max_size: int, reuse_ids: bool = False) -> ScriptedModel:
    cid = "call_0" if reuse_ids else None

    def reply(messages: list[Message], tools: Any) -> Message:
        last = messages[-1]
        if last.role == "user":
            m = re.search(r"item-(\d+) in (\d+) rounds", last.content or "")
            item, rounds = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
            if rounds == 0:
                return text(f"Item {item}: nothing to fetch. " + filler(300, f"a{item}"))
            size = 100 + (item * 7919) % max_size
            return tool_call("fetch", call_id=cid, item=item, round=1, of=rounds, size=size)
        got = ROUND.search(last.content or "")
        head = (last.content or "").split(":")[0]
        if got and int(got.group(1)) < int(got.group(2)):
            item = int(head.split("-")[1].split()[0])
            r, of = int(got.group(1)), int(got.group(2))
            return tool_call(
                "fetch", call_id=cid, item=item, round=r + 1, of=of, size=100 + (item * r * 104729) % max_size
            )
        return text(f"Done with {head}. " + filler(400, head))

    return ScriptedModel(reply)


def prompts(turns: int, short: bool) -> list[str]:
    out = []
    for t in range(1, turns + 1):
        rounds = 1 if short else t % 4
        out.append(f"Turn {t}: look into item-{t} in {rounds} rounds. " + filler(40 if short else 300, f"u{t}"))
    return out


def window_case(
    turns: int, manager: Any, window: int | None, short: bool, base: str, reuse_ids: bool = False
) -> dict[str, Any]:
    meter = Meter(research_model(300 if short else 3900, reuse_ids), window)
    cp = FileCheckpointer(base_dir=base)
    agent = Agent(
        meter,
        research_tools(),
        system_prompt="You investigate items. " + filler(300 if short else 2000, "sys"),
        checkpointer=cp,
        conversation_manager=manager,
        max_iterations=10,
    )
    tid = f"{type(manager).__name__}-{turns}-{window}-{reuse_ids}"
    raised = None
    t0 = time.perf_counter()
    for n, p in enumerate(prompts(turns, short), 1):
        try:
            agent.run_sync(p, thread_id=tid)
        except Exception as e:  # the hard bound: ContextWindowExceeded before the model is called
            raised = f"turn {n}: {type(e).__name__}: {str(e)[:160]}"
            break
    out = {"manager": repr(manager), "turns": turns, **meter.report(), "raised": raised}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["thread"] = (cp, tid)
    return out


def replay_divergences(cp: Any, tid: str) -> int:
    from tulip_nb.lab import Replay, open_thread

    r = Replay(open_thread(cp, tid))
    r.run_to()
    return len(r.divergences)


def main() -> None:
    from tulip_nb.memory.compactor import LLMCompactor, SlidingWindowManager

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=300)
    args = ap.parse_args()
    for reuse in (False, True):
        print("idempotent", "reused ids" if reuse else "minted ids", idempotent_case(60, reuse))
    with tempfile.TemporaryDirectory() as base:
        short = window_case(80, LLMCompactor(context_length=3000), 3000, True, base)
        short.pop("thread")
        print("window short turns", short)
        long = window_case(args.turns, LLMCompactor(context_length=24000), 24000, False, base)
        cp, tid = long.pop("thread")
        print("window long thread", long)
        sliding = window_case(args.turns, SlidingWindowManager(window_size=60), None, False, base)
        sliding.pop("thread")
        print("sliding window 60", sliding)
        print("replay divergences (no agent)", replay_divergences(cp, tid))
        reused = window_case(args.turns, LLMCompactor(context_length=24000), 24000, False, base, reuse_ids=True)
        cp, tid = reused.pop("thread")
        print("window long thread, provider reuses call_0", reused)
        print("replay divergences (no agent), call_0 ids", replay_divergences(cp, tid))


if __name__ == "__main__":
    main()
