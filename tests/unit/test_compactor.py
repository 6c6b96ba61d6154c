"""LLMCompactor: property tests over generated threads, exact counts, events and model_view."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, ContextWindowExceeded, Message, ToolCall
from tulip_nb.memory.compactor import EVENTS_KEY, STATE_KEY, LLMCompactor, model_view, model_views
from tulip_nb.memory.conversation.plan import stub, units
from tulip_nb.tokens import REPLY_PRIMING


def cost(msg: Message) -> int:
    return 3 + len(msg.content or "") // 4 + 5 * len(msg.tool_calls)


@st.composite
def threads(draw: st.DrawFn) -> list[Message]:
    msgs = [Message.system("s" * draw(st.integers(0, 400)))] if draw(st.booleans()) else []
    for t in range(draw(st.integers(1, 25))):
        msgs.append(Message.user("u" * draw(st.integers(1, 400))))
        for r in range(draw(st.integers(0, 3))):
            ids = [f"c{t}_{r}_{k}" for k in range(draw(st.integers(1, 2)))]
            msgs.append(Message.assistant(None, [ToolCall(id=i, name="tool", arguments={"k": i}) for i in ids]))
            msgs += [Message.tool("r" * draw(st.integers(1, 1600)), tool_call_id=i) for i in ids]
        msgs.append(Message.assistant("a" * draw(st.integers(1, 800))))
    return msgs


params = st.fixed_dictionaries(
    {
        "context_length": st.integers(300, 6000),
        "trigger_fraction": st.sampled_from([0.5, 0.8, 1.0]),
        "head_turns": st.integers(0, 3),
        "tail_token_fraction": st.sampled_from([0.2, 0.4, 0.5, 0.7]),
        "tool_output_ttl_turns": st.integers(0, 4),
    }
)


def paired(view: list[Message]) -> bool:
    calls = {c.id for m in view for c in m.tool_calls}
    return calls == {m.tool_call_id for m in view if m.role == "tool"}


def total(view: list[Message]) -> int:
    return sum(cost(m) for m in view) + REPLY_PRIMING


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=threads(), kw=params)
def test_properties(msgs: list[Message], kw: dict) -> None:
    c = LLMCompactor(token_counter=cost, **kw)
    try:
        view = c.apply(msgs)
    except ContextWindowExceeded as e:  # the must-keep part cannot fit (test_manager_invariants checks which)
        assert e.tokens_needed is not None and e.tokens_needed > kw["context_length"] == e.window
        return
    trigger = int(kw["trigger_fraction"] * kw["context_length"])
    if total(msgs) <= trigger:  # nothing happens below the trigger
        assert view == msgs and c.last_event is None
        return
    event = c.last_event
    assert event is not None and event["tokens_before"] == total(msgs)
    assert event["tokens_after"] == total(view)
    if msgs[0].role == "system":  # the system prompt is always first
        assert view[0] is msgs[0]
    assert paired(view)  # no orphaned tool call or result
    body = 1 if msgs[0].role == "system" else 0
    assert total(view) <= kw["context_length"]  # the window is a hard bound
    plan = event["plan"]
    users = [i for i, m in enumerate(msgs) if m.role == "user"]
    head_end = min(users[kw["head_turns"]] if len(users) > kw["head_turns"] else len(msgs), users[-1])
    shown = {i for s, e in plan["kept"] + plan["pruned"] for i in range(s, e)}
    assert set(range(head_end)) <= shown  # the head (the turns before the current one) is protected
    tail = [i for i in sorted(shown) if i >= head_end]
    if tail:
        tail_units = [u for u in units(msgs, body) if u[0] >= head_end and u[0] in shown]
        in_tail = [stub(msgs[i]) if any(s <= i < e for s, e in plan["pruned"]) else msgs[i] for i in tail]
        budget = int(kw["tail_token_fraction"] * kw["context_length"])
        # over the budget only when it is the minimal tail: the newest unit and its turn's user message
        assert sum(cost(m) for m in in_tail) <= budget or len(tail_units) <= 2


@settings(max_examples=examples(0.4), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=threads(), kw=params, summarise=st.booleans())
async def test_model_view_rebuilds_every_call(msgs: list[Message], kw: dict, summarise: bool) -> None:
    async def summarize_fn(middle: list[Message], previous: str | None) -> str:
        return f"{len(middle)} messages; before: {previous}"

    c = LLMCompactor(token_counter=cost, summarize_fn=summarize_fn if summarise else None, **kw)
    state = AgentState(messages=[])
    live: list[list[Message] | None] = []
    for j, m in enumerate(msgs):
        if m.role == "assistant":
            state.messages = msgs[:j]
            try:
                live.append(await c.aapply(msgs[:j], state=state))
            except ContextWindowExceeded:
                live.append(None)  # nothing was sent for this call
    state.messages = msgs
    saved = AgentState.model_validate_json(state.to_json_bytes())  # only what a checkpoint keeps
    rebuilt = model_views(saved)
    for k, v in enumerate(live):
        if v is None:
            continue
        assert [m.json_bytes() for m in rebuilt[k]] == [m.json_bytes() for m in v]
        assert [m.json_bytes() for m in model_view(saved, call=k)] == [m.json_bytes() for m in v]


async def test_summary_compounds_and_survives_restart() -> None:
    seen: list[str | None] = []

    async def summarize_fn(middle: list[Message], previous: str | None) -> str:
        seen.append(previous)
        return f"S{len(seen)}"

    msgs = [Message.system("sys")]
    for t in range(40):
        msgs += [Message.user(f"q{t} " * 50), Message.assistant(f"a{t} " * 50)]
    c = LLMCompactor(context_length=2000, summarize_fn=summarize_fn, token_counter=cost)
    state = AgentState(messages=msgs[:41])
    await c.aapply(msgs[:41], state=state)
    assert seen == [None]
    restored = LLMCompactor(context_length=2000, summarize_fn=summarize_fn, token_counter=cost)
    restored.restore_from_session(json.loads(json.dumps(state.metadata[STATE_KEY])))
    view = await restored.aapply(msgs, state=state)
    assert seen == [None, "S1"]
    assert view[0] is msgs[0] and view[5].metadata.get("tulip_compaction_summary")
    assert [e["trigger"] for e in state.metadata[EVENTS_KEY]] == ["threshold", "threshold"]


async def test_stale_tool_output_is_pruned_first() -> None:
    msgs = [Message.system("sys")]
    for t in range(12):
        cid = f"c{t}"
        msgs += [
            Message.user(f"q{t}"),
            Message.assistant(None, [ToolCall(id=cid, name="read_file", arguments={})]),
            Message.tool("x" * 2000, tool_call_id=cid),
            Message.assistant(f"a{t}"),
        ]
    c = LLMCompactor(context_length=7000, head_turns=1, tool_output_ttl_turns=3, token_counter=cost)
    view = c.apply(msgs)
    assert len(view) == len(msgs)  # pruning alone was enough: nothing dropped
    cleared = [m for m in view if m.metadata.get("tulip_compaction_cleared")]
    assert len(cleared) == 12 - 1 - 3
    assert c.last_event is not None and c.last_event["dropped"] == []


def test_below_trigger_with_exact_counts_is_identity() -> None:
    msgs = [Message.system("sys"), Message.user("hello world")]
    c = LLMCompactor()
    assert c.apply(msgs) == msgs and c.last_view_tokens == c.counter.count_request(msgs)
    assert c.counter.exact


def test_overflow_report_forces_a_tighter_view() -> None:
    msgs = [Message.system("sys")]
    for t in range(30):
        msgs += [Message.user(f"q{t} " * 30), Message.assistant(f"a{t} " * 30)]
    c = LLMCompactor(context_length=100_000, token_counter=cost)
    assert c.apply(msgs) == msgs
    c.reduce_context(object(), RuntimeError("context_length_exceeded"))
    view = c.apply(msgs)
    assert len(view) < len(msgs) and c.last_event is not None and c.last_event["trigger"] == "overflow"
    assert c.clone_for_spawn().get_state()["plan"] is None
