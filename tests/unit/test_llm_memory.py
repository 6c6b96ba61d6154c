"""LLMMemoryManager: facts learnt in one thread are recalled in another, and the recall is recorded."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.agent import Agent
from tulip_nb.core import Message, UserError
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.memory.llm_memory import (
    MEMORY_EVENTS_KEY,
    HashingEmbedder,
    LLMMemoryManager,
    fact_key,
    model_view_with_memory,
    parse_facts,
    recall_events,
)
from tulip_nb.memory.managers import STATE_KEY, SlidingWindowManager
from tulip_nb.memory.store import InMemoryStore
from tulip_nb.models import ScriptedModel, text

NS = ("acme", "cust-4821")
FACTS = '{"facts": ["cust-4821 prefers store credit over card refunds", "cust-4821 is on the Gold plan"]}'


def extractor(*answers: str) -> ScriptedModel:
    return ScriptedModel(list(answers) or [FACTS], repeat_last=True, name="extractor")


def agent_with(memory: LLMMemoryManager, model: ScriptedModel, **kw: Any) -> Agent:
    return Agent(model=model, conversation_manager=memory, hooks=[memory], checkpointer=MemoryCheckpointer(), **kw)


async def test_facts_extracted_after_a_turn_land_in_the_store() -> None:
    store = InMemoryStore()
    ex = extractor()
    memory = LLMMemoryManager(store, model=ex, namespace=NS)
    agent = agent_with(memory, ScriptedModel([text("Noted: store credit it is.")]))
    await agent.run("I'd rather get store credit than a card refund. I'm on Gold.", thread_id="case-1")

    assert ex.calls == 1  # one extraction call per turn
    request, tools = ex.requests[0]
    assert tools == [] and request[0].role == "system"
    assert "store credit than a card refund" in (request[1].content or "")
    assert "Noted: store credit" in (request[1].content or "")
    keys = await store.list_keys(NS)
    assert sorted(keys) == sorted(fact_key(f) for f in parse_facts(FACTS))
    item = await store.get_item(NS, fact_key("cust-4821 prefers store credit over card refunds"))
    assert item is not None and item.value == {"content": "cust-4821 prefers store credit over card refunds"}
    assert item.metadata["thread_id"] == "case-1" and item.metadata["checkpoint_id"]
    assert memory.last_extraction is not None and memory.last_extraction["thread_id"] == "case-1"


async def test_a_later_turn_on_another_thread_recalls_them_and_records_it() -> None:
    store = InMemoryStore()
    memory = LLMMemoryManager(store, model=extractor(), namespace=NS)
    model = ScriptedModel([text("Noted."), text("Store credit, as you prefer.")])
    agent = agent_with(memory, model, system_prompt="You are a support agent.")
    await agent.run("I prefer store credit. I'm on the Gold plan.", thread_id="case-1")

    result = await agent.run("How will my refund be paid: card or store credit?", thread_id="case-2")

    seen = model.requests[-1][0]
    memory_msgs = [m for m in seen if m.role == "system" and "Long-term memory" in (m.content or "")]
    assert len(memory_msgs) == 1
    assert "prefers store credit" in (memory_msgs[0].content or "")
    # Shown just before the user's message, after the system prompt.
    assert [m.role for m in seen] == ["system", "system", "user"]
    assert seen[-1].content == "How will my refund be paid: card or store credit?"
    # The saved thread keeps the real history only ...
    state = await agent.get_state("case-2")
    assert all("Long-term memory" not in (m.content or "") for m in state.messages)
    # ... and records the recall, so a notebook can show it.
    [event] = recall_events(state)
    assert event["kind"] == "recall" and event["method"] == "search" and event["at"] == 1
    assert event["query"] == "How will my refund be paid: card or store credit?"
    assert event["namespace"] == list(NS)
    assert event["items"][0]["content"] == "cust-4821 prefers store credit over card refunds"
    assert event["items"][0]["score"] > 0
    assert state.metadata[STATE_KEY]["memory"]["method"] == "search"
    assert model_view_with_memory(state, call=0) == seen
    assert result.text == "Store credit, as you prefer."


async def test_recall_happens_once_per_turn_and_nothing_found_is_recorded(tmp_path: Path) -> None:
    store = InMemoryStore()
    memory = LLMMemoryManager(store, model=extractor('{"facts": []}'), namespace=NS, inner=SlidingWindowManager(50))

    def reply(messages: list[Message]) -> Message:
        from tulip_nb.models import tool_call

        return text("done") if messages[-1].role == "tool" else tool_call("noop")

    from tulip_nb.tools import tool

    @tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    agent = Agent(
        model=ScriptedModel(reply),
        tools=[noop],
        conversation_manager=memory,
        hooks=[memory],
        checkpointer=MemoryCheckpointer(),
    )
    await agent.run("zeppelin schedules?", thread_id="t")
    state = await agent.get_state("t")
    events = state.metadata[MEMORY_EVENTS_KEY]
    assert len(events) == 1 and events[0]["items"] == [] and events[0]["message"] is None
    assert await store.list_keys(NS) == []  # the extractor found nothing to keep


async def test_embedding_recall_with_the_offline_embedder() -> None:
    store = InMemoryStore()
    memory = LLMMemoryManager(store, model=extractor(), namespace=NS, embedder=HashingEmbedder(128))
    await memory.remember([Message.user("I like store credit"), Message.assistant("ok")], thread_id="a")
    assert await store.get_embedding(NS, fact_key("cust-4821 is on the Gold plan")) is not None
    hits = await memory.recall("which plan is cust-4821 on? gold?")
    assert hits[0].value["content"] == "cust-4821 is on the Gold plan"
    assert memory.method == "embedding"


def test_hashing_embedder_is_deterministic_normalised_and_lexical() -> None:
    e = HashingEmbedder(64)
    a, b, c, empty = e.embed_sync(["Refunds need approval", "refund needs approval", "ships from Berlin", "the of"])
    assert a == HashingEmbedder(64).embed_sync(["Refunds need approval"])[0]
    assert math.isclose(sum(x * x for x in a), 1.0)
    sim = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert sim(a, b) > 0.6 > sim(a, c)
    assert any(empty)


@pytest.mark.parametrize(
    ("answer", "facts"),
    [
        (FACTS, ["cust-4821 prefers store credit over card refunds", "cust-4821 is on the Gold plan"]),
        ('```json\n{"facts": ["A", "a", " B  b "]}\n```', ["A", "B b"]),
        ('Sure! ["x", {"content": "y"}, 3]', ["x", "y"]),
        ("- one\n* two\nnot a bullet", ["one", "two"]),
        ("", []),
        ('{"facts": []}', []),
    ],
)
def test_parse_facts(answer: str, facts: list[str]) -> None:
    assert parse_facts(answer) == facts


async def test_extraction_failure_never_fails_the_run(caplog: pytest.LogCaptureFixture) -> None:
    memory = LLMMemoryManager(InMemoryStore(), model=ScriptedModel([]), namespace=NS)
    agent = agent_with(memory, ScriptedModel([text("hi")]))
    result = await agent.run("hello there", thread_id="x")
    assert result.text == "hi"
    assert memory.errors and "ran out of responses" in memory.errors[0]


def test_bad_configuration_is_a_user_error() -> None:
    with pytest.raises(UserError, match="BaseStore"):
        LLMMemoryManager({}, model=extractor())  # type: ignore[arg-type]
    with pytest.raises(UserError):
        LLMMemoryManager(InMemoryStore(), model=extractor(), namespace=())


def test_spawned_workers_share_the_store_not_the_turn() -> None:
    store = InMemoryStore()
    memory = LLMMemoryManager(store, model=extractor(), namespace=NS, inner=SlidingWindowManager(10))
    clone = memory.clone_for_spawn()
    assert clone.store is store and clone.namespace == NS and clone.inner is not memory.inner
