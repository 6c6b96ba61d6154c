"""The OpenAI adapter, with the real ``openai`` client, against a hostile local server.

The server (tests/models/openai_server.py) answers 429 storms with Retry-After, 500s, slow and
truncated bodies, tool calls and usage with cached prompt tokens, and counts what it saw.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.models.conftest import MakeModel
from tests.models.openai_server import Hostility, OpenAIServer
from tulip_nb.agent import Agent, NullManager, tool
from tulip_nb.core import Message
from tulip_nb.models import ModelCache, ModelError, ModelHTTPError, Price, RetriesExhausted, RetryPolicy


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order id.
    """
    return f"order {order_id}: shipped"


def ask(i: int) -> list[Message]:
    return [Message.system("You are a support agent."), Message.user(f"Where is order ord-{i}?")]


async def test_a_storm_of_429s_and_500s_finishes_under_the_limit(server: OpenAIServer, make_model: MakeModel) -> None:
    server.reset(Hostility(storm=6, storm_500=3, rate_429=0.2, rate_500=0.1, latency=0.01, seed=3))
    model = make_model(max_concurrency=3, retry=RetryPolicy(max_retries=30, base_delay=0.01, max_delay=0.05))
    answers = await asyncio.gather(*(model.complete(ask(i), []) for i in range(20)))
    assert all(a.message.content and f"ord-{i}" in a.message.content for i, a in enumerate(answers))
    statuses = server.statuses
    assert statuses["200"] == 20 and statuses["429"] >= 6 and statuses["500"] >= 3
    assert server.requests == sum(statuses.values()) == model.stats.requests
    assert model.stats.retries == server.requests - 20
    assert 1 <= server.peak <= 3


async def test_the_limit_is_shared_by_every_adapter_of_the_model(server: OpenAIServer, make_model: MakeModel) -> None:
    server.reset(Hostility(latency=0.03))
    a = make_model("shared-gpt", max_concurrency=2)
    b = make_model(a.model, unique=False)  # same base URL + name: the same limit, whatever it was given
    await asyncio.gather(*(m.complete(ask(i), []) for i in range(6) for m in (a, b)))
    assert server.requests == 12 and server.peak == 2 and a.limit is b.limit


async def test_slow_and_truncated_answers_are_retried(server: OpenAIServer, make_model: MakeModel) -> None:
    server.reset(Hostility(rate_truncated=0.2, rate_slow=0.2, slow_seconds=0.2, seed=5))
    model = make_model(
        max_concurrency=4, timeout=0.1, retry=RetryPolicy(max_retries=20, base_delay=0.01, max_delay=0.1)
    )  # slow answers time out, then succeed later
    answers = await asyncio.gather(*(model.complete(ask(i), []) for i in range(10)))
    assert len(answers) == 10 and server.statuses["truncated"] >= 1 and server.statuses["200"] >= 10
    assert model.stats.retries == server.requests - 10 >= 1


async def test_retry_after_is_honoured(server: OpenAIServer, make_model: MakeModel) -> None:
    server.reset(Hostility(storm=2, retry_after_ms=150))
    model = make_model()
    t0 = time.monotonic()
    await model.complete(ask(1), [])
    assert time.monotonic() - t0 >= 0.29  # two waits of at least Retry-After, not the backoff's jitter
    assert server.requests == 3


async def test_the_deadline_ends_a_call_that_keeps_failing(server: OpenAIServer, make_model: MakeModel) -> None:
    server.reset(Hostility(storm=10_000, retry_after_ms=200))
    model = make_model(deadline=0.7, max_retries=50)
    with pytest.raises(RetriesExhausted, match="deadline") as info:
        await model.complete(ask(1), [])
    assert info.value.attempts == server.requests <= 5
    server.reset(Hostility(storm=10_000, retry_after_ms=1))
    capped = make_model(max_retries=2)
    with pytest.raises(ModelHTTPError, match="HTTP 429") as err:
        await capped.complete(ask(1), [])
    assert err.value.status_code == 429 and server.requests == 3


async def test_tool_calls_usage_and_cost(server: OpenAIServer, make_model: MakeModel) -> None:
    price = Price(input=1.0, output=4.0, cached_input=0.5)
    model = make_model(price=price)
    agent = Agent(model, [lookup_order], system_prompt="Be brief. " * 40, conversation_manager=NullManager())
    result = await agent.run("Where is ord-7?")
    assert [ex.tool_name for ex in result.tool_calls] == ["lookup_order"]
    assert result.text is not None and "order Where is ord-7?: shipped" in result.text
    assert result.usage.requests == 2 and result.usage.cached_tokens > 0
    u = result.usage
    expected = ((u.prompt_tokens - u.cached_tokens) * 1.0 + u.cached_tokens * 0.5 + u.completion_tokens * 4.0) / 1e6
    assert u.cost == pytest.approx(expected)
    unknown = make_model("my-local-llama")
    assert (await unknown.complete(ask(1), [])).usage.cost is None


async def test_the_cache_makes_a_rerun_free_and_identical(
    server: OpenAIServer, make_model: MakeModel, tmp_path: Path
) -> None:
    server.reset(Hostility(rate_429=0.3, seed=11))
    cache = ModelCache(tmp_path / "c.sqlite")
    model = make_model(cache=cache, temperature=0)
    first = await asyncio.gather(*(model.complete(ask(i), []) for i in range(8)))
    sent = server.requests
    again = await asyncio.gather(*(model.complete(ask(i), []) for i in range(8)))
    assert server.requests == sent and model.stats.cache_hits == 8
    assert [a.message.json_bytes() for a in again] == [f.message.json_bytes() for f in first]
    assert all(a.usage.cached and a.usage.cost == f.usage.cost for a, f in zip(again, first, strict=True))
    other = make_model(model.model, unique=False, cache=cache, temperature=1)  # another request: a miss
    await other.complete(ask(0), [])
    assert server.requests > sent
    cache.close()


async def test_errors_that_are_final_are_not_retried(server: OpenAIServer, make_model: MakeModel) -> None:
    model = make_model(base_url=server.url.replace("/v1", "/nowhere"))
    with pytest.raises(ModelError, match="404"):
        await model.complete(ask(1), [])
    assert model.stats.requests == 1 and model.stats.retries == 0
