"""Sweeps with a live model (the real openai client, a hostile local server): rows for every
branch, the cost / tokens / cached columns, a second run that sends nothing, budgets that stop
cleanly, and re-runs that finish only what is missing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.models.conftest import MakeModel
from tests.models.openai_server import Hostility, OpenAIServer
from tulip_nb.agent import Agent, NullManager, tool
from tulip_nb.core import Message
from tulip_nb.lab import Thread, aopen_thread, asweep, open_corpus
from tulip_nb.lab._corpus_sweep import asweep_corpus
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import Budget, ModelCache, Price, ScriptedModel, text, tool_call

PRICE = Price(input=0.15, output=0.60, cached_input=0.075)


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order id.
    """
    return f"order {order_id}: shipped"


def recorded_reply(messages: list[Message]) -> Message:
    last = messages[-1]
    if last.role == "user":
        found = re.search(r"ord-\d+", last.content or "")
        return tool_call("lookup_order", order_id=found.group(0) if found else "ord-0")
    return text(f"Recorded: {last.content}")


async def recorded_thread(cp: Any, thread_id: str = "ticket-1") -> Thread:
    agent = Agent(ScriptedModel(recorded_reply), [lookup_order], system_prompt="You help.", checkpointer=cp)
    await agent.run("Where is ord-1?", thread_id=thread_id)
    await agent.run("And ord-2?", thread_id=thread_id)
    return await aopen_thread(cp, thread_id)


def variants(model: Any, n: int) -> dict[str, dict[str, Any]]:
    return {f"v{i}": {"model": model, "system_prompt": f"You help. Style {i}."} for i in range(n)}


def same_but_cached(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=["cached"]), b.drop(columns=["cached"]))


async def test_a_sweep_under_429s_then_a_free_identical_rerun(
    server: OpenAIServer, make_model: MakeModel, tmp_path: Path
) -> None:
    server.reset(Hostility(storm=2, rate_429=0.2, latency=0.01, seed=2))
    cache = ModelCache(tmp_path / "c.sqlite")
    model = make_model(cache=cache, max_concurrency=3, price=PRICE, temperature=0)
    thread = await recorded_thread(MemoryCheckpointer())
    base = Agent(model, [lookup_order], system_prompt="You help.", conversation_manager=NullManager())
    first = await asweep(thread, at=-1, variants=variants(model, 12), agent=base, prompt="And ord-3?", concurrency=6)
    assert first["error"].isna().all(), first["error"].tolist()
    assert first["final_answer"].str.contains("order And ord-3\\?: shipped").all()
    assert (first["tool_trajectory"].map(tuple) == ("lookup_order",)).all()
    assert (first["tokens"] > 0).all() and (first["cost"] > 0).all() and not first["cached"].any()
    assert server.statuses["200"] == 24 and server.statuses["429"] >= 1 and server.peak <= 3
    sent = server.requests

    again = await asweep(thread, at=-1, variants=variants(model, 12), agent=base, prompt="And ord-3?", concurrency=6)
    assert server.requests == sent  # the second run sends 0 requests
    assert again["cached"].all()
    same_but_cached(again, first)

    fresh = await asweep(
        thread, at=-1, variants=variants(model, 12), agent=base, prompt="And ord-3?", concurrency=6, resume=False
    )
    assert server.requests == sent and fresh["cached"].all()  # new branches, every call from the cache
    assert set(fresh["thread_id"]).isdisjoint(first["thread_id"])
    assert list(fresh["final_answer"]) == list(first["final_answer"])
    assert list(fresh["tokens"]) == list(first["tokens"]) and list(fresh["cost"]) == list(first["cost"])
    cache.close()


async def test_a_budget_stops_cleanly_and_a_rerun_finishes_only_what_is_missing(
    server: OpenAIServer, make_model: MakeModel, tmp_path: Path
) -> None:
    cache = ModelCache(tmp_path / "c.sqlite")
    model = make_model(cache=cache, price=PRICE)
    thread = await recorded_thread(MemoryCheckpointer())
    base = Agent(model, [lookup_order], system_prompt="You help.", conversation_manager=NullManager())
    kw: dict[str, Any] = {"at": -1, "agent": base, "prompt": "And ord-3?", "concurrency": 1}

    # what the whole sweep costs, measured on a copy with its own cache and store
    ref_model = make_model(model.model, unique=False, cache=ModelCache(tmp_path / "ref.sqlite"), price=PRICE)
    ref_thread = await recorded_thread(MemoryCheckpointer())
    ref_agent = Agent(ref_model, [lookup_order], system_prompt="You help.", conversation_manager=NullManager())
    ref = await asweep(ref_thread, variants=variants(ref_model, 6), **{**kw, "agent": ref_agent})
    per_branch = int(ref["tokens"].max())
    total_requests = server.requests
    server.reset()

    budget = Budget(tokens=int(ref["tokens"].sum() * 0.45))
    stopped = await asweep(thread, variants=variants(model, 6), budget=budget, **kw)
    info = stopped.attrs["budget"]
    done = stopped["error"].isna()
    assert info["stopped"] and 0 < done.sum() < 6 and info["branches_finished"] == done.sum()
    assert info["spent_tokens"] <= budget.tokens + per_branch  # at most one call's misestimate past it
    errors = stopped.loc[~done, "error"].tolist()
    assert errors[0].startswith("BudgetExceeded: budget of") and all("not run" in e for e in errors[1:])
    assert stopped.loc[~done, "tokens"].isna().all()
    assert str(done.sum()) + " of 6 branches finished" in info["summary"]
    first_requests = server.requests

    finished = await asweep(thread, variants=variants(model, 6), **kw)
    assert finished["error"].isna().all()
    assert finished.loc[done, "cached"].all() and not finished.loc[~done, "cached"].any()
    same_but_cached(finished.loc[done], stopped.loc[done])
    # nothing was asked twice: both runs together sent what one whole run sends
    assert first_requests + (server.requests - first_requests) == total_requests
    assert list(finished["final_answer"]) == list(ref["final_answer"])
    cache.close()


async def test_a_money_budget_needs_a_known_price(make_model: MakeModel) -> None:
    model = make_model("unpriced-model")
    thread = await recorded_thread(MemoryCheckpointer())
    frame = await asweep(thread, at=-1, variants=variants(model, 2), prompt="hi", budget=Budget(cost=1.0))
    assert frame["error"].str.startswith("BudgetExceeded").all() and frame.attrs["budget"]["spent_tokens"] == 0


async def test_a_corpus_sweep_live_then_from_the_cache(
    server: OpenAIServer, make_model: MakeModel, tmp_path: Path
) -> None:
    server.reset(Hostility(rate_429=0.2, rate_500=0.05, seed=4))
    store = tmp_path / "store"
    cp = FileCheckpointer(str(store))
    for i in range(3):
        await recorded_thread(cp, f"case-{i}")
    await cp.close()
    cache = ModelCache(tmp_path / "c.sqlite")
    model = make_model(cache=cache, max_concurrency=2, price=PRICE)
    named = {"terse": {"model": model, "system_prompt": "Be terse."}, "kind": {"model": model}}
    corpus = open_corpus(f"file:{store}", "case-*")
    agent = Agent(model, [lookup_order], system_prompt="You help.", conversation_manager=NullManager())
    first = await asweep_corpus(corpus, named, agent=agent, progress=False)
    assert first["error"].isna().all(), first["error"].tolist()
    assert len(first) == 6 and (first["cost"] > 0).all() and not first["cached"].any() and server.peak <= 2
    assert (first["live_tool_calls"] + first["recorded_tool_answers"] == first["tool_calls"]).all()
    sent = server.requests
    again = await asweep_corpus(corpus, named, agent=agent, progress=False)
    assert server.requests == sent and again["cached"].all()
    same_but_cached(again, first)
    budget = await asweep_corpus(
        corpus, named, agent=agent, progress=False, resume=False, budget=Budget(tokens=10), max_concurrency=1
    )
    assert budget["error"].isna().all() and server.requests == sent  # cache hits are free: no budget spent
    assert budget.attrs["budget"]["spent_tokens"] == 0
    cache.close()


def test_budget_needs_a_budget() -> None:
    from tulip_nb.core.errors import UserError

    with pytest.raises(UserError, match="tokens= and/or cost="):
        Budget()
    with pytest.raises(UserError, match="int >= 0"):
        Budget(tokens=-1)
