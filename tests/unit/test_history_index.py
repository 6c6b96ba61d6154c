"""HistoryIndex (incremental units, turns, token sums) agrees with the from-scratch functions."""

from __future__ import annotations

import asyncio
import random

import pytest

from tulip_nb.core._messages import Message, ToolCall
from tulip_nb.core.state import AgentState
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.memory.conversation.events import EVENTS_KEY, model_view
from tulip_nb.memory.conversation.plan import HistoryIndex, stub, units
from tulip_nb.memory.managers import SlidingWindowManager
from tulip_nb.tokens import FunctionCounter


def chars(m: Message) -> int:
    return len(m.content or "") + 1


def random_history(rnd: random.Random, size: int) -> list[Message]:
    """User turns, assistant calls (some reusing an old call id), results that may answer late."""
    hist = [Message.system("s")] if rnd.random() < 0.5 else []
    ids: list[str] = []
    for _ in range(size):
        r = rnd.random()
        if r < 0.2:
            hist.append(Message.user("u" * rnd.randint(1, 9)))
        elif r < 0.45:
            calls = []
            for _ in range(rnd.randint(0, 2)):
                cid = rnd.choice(ids) if ids and rnd.random() < 0.2 else f"c{len(ids)}"
                ids.append(cid)
                calls.append(ToolCall(id=cid, name="f", arguments={}))
            hist.append(Message(role="assistant", content="a", tool_calls=calls))
        elif ids:
            cid = rnd.choice(ids) if rnd.random() < 0.3 else ids[-1]
            hist.append(Message(role="tool", content="t" * rnd.randint(1, 30), tool_call_id=cid, name="f"))
    return hist


@pytest.mark.parametrize("seed", range(40))
def test_index_matches_scratch_on_every_prefix(seed: int) -> None:
    rnd = random.Random(seed)
    hist = random_history(rnd, rnd.randint(0, 80))
    counter = FunctionCounter(chars)
    idx = HistoryIndex()
    j = 0
    while j <= len(hist):
        prefix = hist[:j]
        idx.update(prefix, counter)
        body = 1 if prefix and prefix[0].role == "system" else 0
        expected = units(prefix, body)
        assert idx.units == expected
        assert idx.starts == [s for s, _ in expected]
        assert idx.turns == [k for k, (s, _) in enumerate(expected) if prefix[s].role == "user"]
        assert idx.prefix == [sum(chars(m) for m in prefix[:k]) for k in range(j + 1)]
        assert idx.calls_before(j) == sum(m.role == "assistant" for m in prefix)
        stubbed = idx.stub_prefix()
        assert stubbed[-1] == sum(chars(stub(m)) if m.role == "tool" else chars(m) for m in prefix)
        j += rnd.randint(1, 5)


def test_index_rebuilds_when_the_history_is_not_an_extension() -> None:
    counter = FunctionCounter(chars)
    a = [Message.user("a"), Message.assistant("b"), Message.user("c")]
    idx = HistoryIndex()
    idx.update(a, counter)
    b = [Message.user("x" * 5), Message.assistant("b")]  # shorter and different
    idx.update(b, counter)
    assert idx.prefix == [0, 6, 2 + 6]
    assert idx.units == units(b)
    other = FunctionCounter(lambda m: 1)
    idx.update(b, other)  # another counter: counts again
    assert idx.prefix == [0, 1, 2]


def test_window_skips_events_when_the_cut_holds_and_views_stay_exact() -> None:
    # A 10-message unit (one call answered by 9 results), then short turns: while the nominal cut
    # falls inside the big unit the window's cut stays at its end, so no event is needed.
    calls = [ToolCall(id=f"c{i}", name="f", arguments={}) for i in range(9)]
    msgs = [Message.system("s"), Message.user("go"), Message(role="assistant", content="", tool_calls=calls)]
    msgs += [Message(role="tool", content=f"r{i}", tool_call_id=f"c{i}", name="f") for i in range(9)]
    for t in range(12):
        msgs += [Message.user(f"q{t}"), Message.assistant(f"a{t}")]
    state = AgentState()
    m = SlidingWindowManager(window_size=10, token_counter=lambda _: 1)
    views: dict[int, list[str | None]] = {}

    async def drive() -> None:
        for j, msg in enumerate(msgs):
            if msg.role == "assistant":
                views[j] = [x.content for x in await m.aapply(msgs[:j], state=state)]

    asyncio.run(drive())
    state.messages = msgs
    events = state.metadata[EVENTS_KEY]
    cut_calls = [j for j in views if j - 1 > 10]  # calls where the window cuts
    assert 0 < len(events) < len(cut_calls)
    for j, seen in views.items():
        assert [x.content for x in model_view(state, n_messages=j)] == seen


def test_saved_counts_are_reused_only_while_they_hold() -> None:
    from tulip_nb.memory.managers import STATE_KEY, saved_token_counts
    from tulip_nb.tokens import get_counter

    counter = get_counter()
    msgs = [Message.system("be brief"), Message.user("hello there"), Message.assistant("hi")]
    state = AgentState(messages=list(msgs))
    m = LLMCompactor(context_length=10_000)  # indexes every call: its state carries the counts

    async def call() -> None:
        await m.aapply(msgs[:2], state=state)

    asyncio.run(call())
    state.metadata[STATE_KEY] = m.get_state()  # what the agent does before each save
    saved = state.metadata[STATE_KEY]["tokens"]
    assert saved["encoding"] == counter.encoding and saved["n"] == 2
    assert saved_token_counts(state, counter) == counter.message_counts(msgs[:2])
    # an edited message (same length, different bytes): the counts no longer hold
    edited = AgentState(messages=[msgs[0], Message.user("hello THERE"), msgs[2]], metadata=dict(state.metadata))
    assert saved_token_counts(edited, counter) is None
    # another encoding, or an inexact counter: not reused
    assert saved_token_counts(state, FunctionCounter(chars)) is None


def test_open_thread_reuses_the_counts_saved_with_the_thread() -> None:
    from tulip_nb.lab import open_thread
    from tulip_nb.memory.backends import MemoryCheckpointer
    from tulip_nb.memory.managers import STATE_KEY
    from tulip_nb.tokens import TokenCounter

    msgs = [Message.system("be brief"), Message.user("hello there"), Message.assistant("hi")]
    state = AgentState(messages=list(msgs))
    m = LLMCompactor(context_length=10_000)

    async def save() -> MemoryCheckpointer:
        await m.aapply(msgs[:2], state=state)
        manager_state = m.get_state()
        # marked counts (with a valid crc) show whether open_thread read them or encoded again
        manager_state["tokens"] = {**manager_state["tokens"], "counts": [101, 102]}
        state.metadata[STATE_KEY] = manager_state
        cp = MemoryCheckpointer()
        await cp.save(state, "t")
        return cp

    cp = asyncio.run(save())
    counter = TokenCounter("o200k_base")
    tokens = list(open_thread(cp, "t", counter=counter).messages["tokens"])
    assert tokens[:2] == [101, 102]
    assert tokens[2] == TokenCounter("o200k_base").count_message(msgs[2])  # not covered: counted
