"""The window is a hard bound: ContextWindowExceeded, what each manager may drop, exact counts.

The generated-thread properties are in test_manager_invariants.py; these are the named cases, the
agent's handling of the error and one run with the real (tiktoken) counter.
"""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_manager_invariants import (
    TOOLS,
    HistoryMaps,
    assert_valid_view,
    constant_summary,
    drive,
    generate,
    quick,
)
from tulip_nb.agent import Agent
from tulip_nb.core import AgentState, ContextWindowExceeded, Message, ToolCall, TulipNBError
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.compactor import (
    EVENTS_KEY,
    STATE_KEY,
    LLMCompactor,
    SlidingWindowManager,
    SummarizingConversationManager,
    model_views,
)
from tulip_nb.models import ModelHTTPError, ScriptedModel, text
from tulip_nb.models import _base as models_base
from tulip_nb.tokens import REPLY_PRIMING, get_counter


def call(cid: str = "call_0") -> Message:
    return Message.assistant(None, [ToolCall(id=cid, name="search", arguments={"q": cid})])


def one_turn_with_rounds(rounds: int, size: int) -> list[Message]:
    """A system prompt and one user turn whose tool rounds all reuse the id ``call_0``."""
    msgs = [Message.system("sys"), Message.user("find it")]
    for r in range(rounds):
        msgs += [call(), Message.tool(f"{r}:" + "r" * size, tool_call_id="call_0")]
    return msgs


# -- the error -------------------------------------------------------------------------------------


def test_error_tree_and_message() -> None:
    e = ContextWindowExceeded(tokens_needed=1200, window=1000, largest=(4, "tool", 900))
    assert isinstance(e, TulipNBError)
    assert (e.tokens_needed, e.window, e.largest) == (1200, 1000, (4, "tool", 900))
    assert "1,200" in str(e) and "1,000" in str(e) and "#4 (tool, 900 tokens)" in str(e)
    again = pickle.loads(pickle.dumps(e))  # lab executors send errors across processes
    assert type(again) is ContextWindowExceeded and again.largest == e.largest and str(again) == str(e)
    # The provider's report is also a core ContextWindowExceeded (and still a ModelHTTPError) ...
    report = models_base.ContextWindowExceeded("too long", status_code=400)
    assert isinstance(report, ModelHTTPError) and isinstance(report, ContextWindowExceeded)
    assert report.status_code == 400 and report.tokens_needed is None and str(report) == "too long"
    # ... but the manager's is not a provider report: the agent loop does not retry it.
    assert not isinstance(e, models_base.ContextWindowExceeded)
    with pytest.raises(ContextWindowExceeded):
        raise report


@pytest.mark.parametrize("store", ["memory", "file"])
async def test_agent_run_saves_the_error_and_never_calls_the_model(store: str, tmp_path: Path) -> None:
    cp = MemoryCheckpointer() if store == "memory" else FileCheckpointer(tmp_path)
    model = ScriptedModel([text("never sent")])
    manager = LLMCompactor(context_length=200, token_counter=quick)
    agent = Agent(model, system_prompt="be brief", conversation_manager=manager, checkpointer=cp)
    question = "q" * 4000  # ~1000 tokens: the current user message alone is over the window
    with pytest.raises(ContextWindowExceeded) as info:
        await agent.run(question, thread_id="t")
    assert type(info.value) is ContextWindowExceeded  # the manager's, not retried as a provider report
    assert info.value.window == 200 and info.value.largest is not None
    assert info.value.largest[1] == "user" and (info.value.tokens_needed or 0) > 1000
    assert model.requests == []  # raised before the model was called
    saved = await cp.load("t")
    assert saved is not None
    assert saved.messages[-1].role == "user" and saved.messages[-1].content == question
    assert saved.errors and saved.errors[-1].startswith("ContextWindowExceeded: ")


async def test_provider_report_still_reduces_and_retries() -> None:
    sent: list[int] = []

    async def reply(messages: list[Message]) -> Message:
        sent.append(len(messages))
        if len(sent) == 1:
            raise models_base.ContextWindowExceeded("context_length_exceeded", status_code=400)
        return text("fits now")

    msgs: list[Message] = []
    for t in range(30):
        msgs += [Message.user(f"q{t} " * 40), Message.assistant(f"a{t} " * 40)]
    manager = LLMCompactor(context_length=100_000, token_counter=quick)
    agent = Agent(ScriptedModel(reply), system_prompt="s", conversation_manager=manager)
    agent.messages = [Message.system("s"), *msgs]
    result = await agent.run("next")
    assert result.text == "fits now" and len(sent) == 2 and sent[1] < sent[0]


# -- LLMCompactor ------------------------------------------------------------------------------------


def test_a_kept_call_keeps_its_turns_user_message() -> None:
    # The old _fit dropped tail units from the front: the user message of the current turn went
    # while the calls answering it stayed. Now older rounds go first and the user message stays.
    msgs = one_turn_with_rounds(rounds=6, size=400)  # ~100 tokens per round
    c = LLMCompactor(context_length=400, head_turns=0, tail_token_fraction=0.7, token_counter=quick)
    view = c.apply(msgs)
    assert_valid_view(view, msgs)
    assert view[:2] == msgs[:2] and view[-2:] == msgs[-2:]
    assert len(view) < len(msgs)
    counter = c.counter
    assert c.last_view_tokens == counter.count_request(view) <= 400


def test_the_newest_unit_that_cannot_fit_raises_naming_it() -> None:
    msgs = [*one_turn_with_rounds(rounds=2, size=40), call(), Message.tool("x" * 8000, tool_call_id="call_0")]
    c = LLMCompactor(context_length=1000, token_counter=quick)
    with pytest.raises(ContextWindowExceeded) as info:
        c.apply(msgs)
    e = info.value
    assert e.largest == (len(msgs) - 1, "tool", quick(msgs[-1]))
    need = quick(msgs[0]) + quick(msgs[1]) + quick(msgs[-2]) + quick(msgs[-1]) + REPLY_PRIMING
    assert e.tokens_needed == need and e.window == 1000
    assert c.last_event is None and c.get_state()["plan"] is None  # nothing was committed
    msgs[-1] = Message.tool("x" * 3000, tool_call_id="call_0")  # a smaller result fits
    assert c.counter.count_request(c.apply(msgs)) <= 1000


def test_head_tool_output_is_stubbed_before_raising_and_a_huge_head_raises() -> None:
    head = [Message.user("task"), call(), Message.tool("h" * 20_000, tool_call_id="call_0"), Message.assistant("ok")]
    rest = [Message.user("next"), Message.assistant("fine"), Message.user("now?")]
    msgs = [Message.system("sys"), *head, *rest]
    c = LLMCompactor(context_length=1000, head_turns=1, token_counter=quick)
    view = c.apply(msgs)
    assert_valid_view(view, msgs)
    assert view[3].metadata.get("tulip_compaction_cleared") and view[1] is msgs[1]  # head kept, output cleared
    assert c.counter.count_request(view) <= 1000
    msgs[4] = Message.assistant("a" * 20_000)  # the head's answer: protected, cannot shrink
    with pytest.raises(ContextWindowExceeded) as info:
        LLMCompactor(context_length=1000, head_turns=1, token_counter=quick).apply(msgs)
    assert info.value.largest == (4, "assistant", quick(msgs[4]))
    # head_turns=0 lets it go
    view = LLMCompactor(context_length=1000, head_turns=0, token_counter=quick).apply(msgs)
    assert msgs[4] not in view and view[-1] is msgs[-1]


def test_counts_include_tools_and_match_the_rendered_view() -> None:
    msgs = [Message.system("sys"), Message.user("hello world")]
    c = LLMCompactor()  # exact counter, below the trigger: the history itself
    assert c.apply(msgs, tools=TOOLS) == msgs
    assert c.last_view_tokens == c.counter.count_request(msgs, TOOLS) > c.counter.count_request(msgs)


async def test_a_long_single_turn_summary_compounds_and_keeps_the_user_message() -> None:
    seen: list[tuple[int, str | None]] = []

    def summarise(middle: list[Message], previous: str | None) -> str:
        assert all(m.role != "user" for m in middle)  # the pinned user message is not summarised
        seen.append((len(middle), previous))
        return f"S{len(seen)}"

    def make() -> LLMCompactor:
        return LLMCompactor(context_length=1200, head_turns=1, summarize_fn=summarise, token_counter=quick)

    msgs = one_turn_with_rounds(rounds=40, size=200)
    c, state, maps = make(), AgentState(), HistoryMaps()
    for j in range(3, len(msgs) + 1, 2):  # before each assistant message of the turn
        if j == 41:  # a restart: the summary and its plan come back from the saved state (JSON)
            saved = json.loads(json.dumps(c.get_state()))
            c = make()
            c.restore_from_session(saved)
        history = msgs[:j]
        maps.extend(history)
        view = await c.aapply(history, state=state)
        assert_valid_view(view, history, maps)
        assert view[1] is msgs[1] and c.counter.count_request(view) <= 1200
    assert len(seen) >= 2 and seen[0][1] is None
    assert all(prev == f"S{k}" for k, (_, prev) in enumerate(seen[1:], 1))  # each builds on the last
    state.messages = msgs
    assert model_views(AgentState.model_validate_json(state.to_json_bytes()))  # rebuildable


# -- the other managers ------------------------------------------------------------------------------


async def test_summarizing_summarises_further_until_it_fits() -> None:
    calls: list[int] = []

    def summarise(messages: list[Message], previous: str | None) -> str:
        calls.append(len(messages))
        return "short"

    msgs = [Message.system("sys")]
    for t in range(30):
        msgs += [Message.user(f"q{t} " * 25), Message.assistant(f"a{t} " * 25)]
    m = SummarizingConversationManager(
        summary_ratio=0.1, preserve_recent_messages=2, summarizer=summarise, context_length=500, token_counter=quick
    )
    view = await m.aapply(msgs)
    assert_valid_view(view, msgs)
    assert m.counter.count_request(view) == m.last_view_tokens
    assert m.last_view_tokens <= 500
    assert len(calls) == 2  # the 10 % block was not enough: a second block, chosen to fit
    assert m.last_event is not None and m.last_event["tokens_after"] == m.last_view_tokens


async def test_summarizing_raises_before_summarising_when_the_recent_messages_cannot_fit() -> None:
    calls: list[int] = []

    def summarise(messages: list[Message], previous: str | None) -> str:
        calls.append(len(messages))
        return "short"

    msgs = [Message.system("sys")]
    for t in range(10):
        msgs += [Message.user(f"q{t} " * 60), Message.assistant(f"a{t} " * 60)]  # ~48 tokens each
    m = SummarizingConversationManager(
        preserve_recent_messages=10, summarizer=summarise, context_length=300, token_counter=quick
    )
    with pytest.raises(ContextWindowExceeded) as info:
        await m.aapply(msgs)
    assert calls == [] and info.value.window == 300
    with pytest.raises(ContextWindowExceeded):
        m.apply(msgs)  # the sync path shows the current plan: over the window, it raises too
    # Without context_length it is not token-aware: no raise, the history as it is.
    plain = SummarizingConversationManager(preserve_recent_messages=10, summarizer=summarise, token_counter=quick)
    assert await plain.aapply(msgs) == msgs


async def test_summarizing_mid_turn_cut_pins_the_user_message() -> None:
    msgs = one_turn_with_rounds(rounds=12, size=40)
    m = SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=4, summarizer=constant_summary)
    m.reduce_context(object())
    view = await m.aapply(msgs)
    assert_valid_view(view, msgs)
    assert view[0] is msgs[0] and view[1].metadata.get("tulip_compaction_summary") and view[2] is msgs[1]
    m.reduce_context(object())
    view = await m.aapply(msgs)  # the next block: the pin stays
    assert_valid_view(view, msgs)
    assert view[2] is msgs[1] and len(view) > 4


def test_sliding_window_never_raises() -> None:
    msgs = [Message.system("sys"), Message.user("u" * 1_000_000), Message.assistant("a")]
    m = SlidingWindowManager(window_size=1, token_counter=quick)
    view = m.apply(msgs)
    assert view == msgs  # message count, not tokens: the window holds both (the user message stays)


# -- the real counter --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["compactor", "compactor+summary", "summarizing"])
async def test_exact_counter_bound_on_a_generated_thread(kind: str) -> None:
    counter = get_counter()
    assert counter.exact
    thread = generate(random.Random(11), 25, "call_0", 400, None)

    def make() -> Any:
        if kind == "summarizing":
            return SummarizingConversationManager(summarizer=constant_summary, context_length=6000)
        fn = constant_summary if kind == "compactor+summary" else None
        return LLMCompactor(context_length=6000, head_turns=1, summarize_fn=fn)

    stats = await drive(make, thread, overflow_at=30, restart_at=45)
    assert stats["events"] > 0 and stats["views"] > stats["raised"]


def test_state_round_trip_keeps_the_plan() -> None:
    msgs = one_turn_with_rounds(rounds=10, size=400)
    c = LLMCompactor(context_length=600, head_turns=0, token_counter=quick)
    view = c.apply(msgs)
    state = AgentState(messages=msgs, metadata={STATE_KEY: c.get_state(), EVENTS_KEY: [c.last_event]})
    again = LLMCompactor(context_length=600, head_turns=0, token_counter=quick)
    again.restore_from_session(json.loads(json.dumps(state.metadata[STATE_KEY])))
    assert again.apply(msgs) == view  # the same plan, below the trigger: no new compaction needed


@pytest.mark.parametrize("seed", range(6))
def test_inlined_tail_choice_equals_the_plain_rule(seed: int) -> None:
    """CutEngine.choose_tail inlines cost() and pin_for() for speed: it picks what the plain loop picks."""
    from tulip_nb.memory.conversation._cut import CutEngine
    from tulip_nb.memory.conversation.plan import HistoryIndex
    from tulip_nb.tokens import FunctionCounter

    rnd = random.Random(seed)
    thread = generate(rnd, rnd.choice([3, 40, 260]), "unique", 100, None)
    idx, counter = HistoryIndex(), FunctionCounter(quick)
    for j in thread.calls[:: max(1, len(thread.calls) // 25)]:
        history = thread.messages[:j]
        idx.update(history, counter)
        for budget in (0, 500, 5000, 50_000):
            cut = CutEngine.with_head(history, idx, 10, rnd.randint(0, 2), rnd.choice([0, 2, 10]))
            cut.floor = rnd.choice([cut.head_end, cut.idx.units[-1][0]])
            cut.choose_tail(budget)
            tail, used = cut.last, cut.unit_cost(cut.last)
            pin = cut.pin_for(tail)
            for u in range(cut.last - 1, idx.unit_at(cut.floor) - 1, -1):
                p = cut.pin_for(u)
                if used + cut.unit_cost(u) + cut.pin_cost(p) > budget:
                    break
                used, tail, pin = used + cut.unit_cost(u), u, p
            assert (cut.tail, cut.pin) == (tail, pin)
