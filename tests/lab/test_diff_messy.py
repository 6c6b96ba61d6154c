"""diff_threads on messy threads: a fork that changes one thing shows that one thing, and nothing else.

Threads are generated (hypothesis) with every turn outcome -- answered, error, context_exceeded,
max_iterations, interrupted, written by tulip -- tool errors, providers that reuse call ids, and
message metadata. Each branch is a real fork (``tulip_nb.lab.fork``: lineage in its save metadata)
that is then "continued identically": the rest of the source's history is saved after the fork
point, with the tool-call ids renumbered and numbers respelled (``3`` as ``3.0``), as a second run
of the same scripted replies through another provider would give.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core._messages import Message, ToolCall
from tulip_nb.core.calls import answered_by
from tulip_nb.core.canonical import message_key
from tulip_nb.core.fastload import messages_from_json
from tulip_nb.core.state import AgentState
from tulip_nb.core.turns import TURNS_KEY, split_turns
from tulip_nb.lab import ThreadDiff, diff_threads, fork, open_thread
from tulip_nb.memory.backends._memory import MemoryCheckpointer

SYSTEM = "You are an analyst. Keep every fact."
OUTCOMES = ("answered", "error", "context_exceeded", "max_iterations", "interrupted", "tulip")


# -- a messy thread, built as the agent (and tulip) would have saved it -----------------------------
@dataclass(frozen=True)
class TurnSpec:
    outcome: str
    rounds: int  # rounds of tool calls before the answer (or the stop)
    fan: int  # calls per round
    reuse_ids: bool  # the provider numbers each response's calls from call_0
    tool_error: bool
    meta: bool  # the answer carries usage metadata
    tag: int  # makes the turn's text its own


turn_specs = st.builds(
    TurnSpec,
    outcome=st.sampled_from(OUTCOMES),
    rounds=st.integers(0, 2),
    fan=st.integers(1, 2),
    reuse_ids=st.booleans(),
    tool_error=st.booleans(),
    meta=st.booleans(),
    tag=st.integers(0, 10_000),
)


def _round(k: int, r: int, spec: TurnSpec) -> list[Message]:
    calls = [
        ToolCall(
            id=f"call_{c}" if spec.reuse_ids else f"c{k}-{r}-{c}-{spec.tag}",
            name="query_metric" if c else "lookup_record",
            arguments={"n": spec.tag * 10 + r + c, "key": f"K{spec.tag}"},
        )
        for c in range(spec.fan)
    ]
    out = [Message.assistant(None, calls)]
    for c, call in enumerate(calls):
        failed = spec.tool_error and c == spec.fan - 1
        body = (
            f"Error: ValueError: metric {call.arguments['n']} unavailable" if failed else f"{call.name}={spec.tag}.{r}"
        )
        out.append(Message.tool(body, tool_call_id=call.id, name=call.name))
    return out


def build(specs: list[TurnSpec], system: str = SYSTEM) -> AgentState:
    """Messages and turn log of a thread whose turns ended as ``specs`` say (a turn's text depends
    on its spec, not on its position, so a turn inserted before it leaves it the same)."""
    msgs: list[Message] = [Message.system(system)]
    log: list[dict[str, Any]] = []
    for k, spec in enumerate(specs):
        at = len(msgs)
        msgs.append(Message.user(f"what is metric {spec.tag}? fact F{spec.tag} = {spec.tag * 7}"))
        record: dict[str, Any] = {"at": at, "outcome": spec.outcome, "run_id": f"run-{k}"}
        if spec.outcome in ("answered", "tulip", "max_iterations"):
            for r in range(spec.rounds + (spec.outcome == "max_iterations")):
                msgs += _round(k, r, spec)
            if spec.outcome != "max_iterations":
                answer = Message.assistant(f"metric {spec.tag} is {spec.tag % 13}.")
                if spec.meta:
                    answer = answer.model_copy(update={"metadata": {"usage": {"input": spec.tag, "cost": 0.5}}})
                msgs.append(answer)
        elif spec.outcome == "interrupted":
            ask = ToolCall(id="call_0" if spec.reuse_ids else f"ask-{k}", name="ask_human", arguments={"q": "ok?"})
            msgs.append(Message.assistant(None, [ask]))
        elif spec.outcome == "error":
            record["error"] = "ModelError: provider 500"
        else:
            record["error"] = "ContextWindowExceeded: 9000 tokens > 8000"
        if spec.outcome != "tulip":
            log.append(record)
    return AgentState(messages=msgs, metadata={TURNS_KEY: log})


def respelled(msgs: list[Message]) -> list[Message]:
    """The same conversation from another run: every call id renumbered (results follow the call
    they answer by position) and integral numbers spelled as floats."""
    refs = answered_by(msgs)
    out = list(msgs)
    for i, m in enumerate(msgs):
        if m.tool_calls:
            calls = [
                c.model_copy(update={"id": f"rerun_{i}_{k}", "arguments": _floats(c.arguments)})
                for k, c in enumerate(m.tool_calls)
            ]
            out[i] = m.model_copy(update={"tool_calls": calls})
        elif m.role == "tool":
            ref = refs[i]
            out[i] = m.model_copy(update={"tool_call_id": f"rerun_{ref[0]}_{ref[1]}" if ref else "orphan"})
    return out


def _floats(args: Any) -> dict[str, Any]:
    return {k: float(v) if isinstance(v, int) else v for k, v in args.items()}


# -- forks that change one thing -----------------------------------------------------------------
def save_source(cp: MemoryCheckpointer, state: AgentState, tid: str = "src") -> None:
    """The source thread, saved turn by turn (a checkpoint at each turn end) like the agent does."""
    users = [i for i, m in enumerate(state.messages) if m.role == "user"]
    for end in [*users[1:], len(state.messages)]:
        part = AgentState(messages=state.messages[:end], metadata=state.metadata)
        asyncio.run(cp.save(part, tid))


def branch(
    cp: MemoryCheckpointer,
    at: int,
    tail: list[Message],
    edit: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> str:
    """Fork ``src`` at message ``at`` (optionally editing it), then save ``tail`` after it."""
    b = fork(open_thread(cp, "src"), at=at, edit=edit, new_thread_id="what-if")
    msgs = [*b.final_messages, *tail]
    meta = metadata if metadata is not None else open_thread(cp, "src").latest.state.metadata
    asyncio.run(cp.save(AgentState(messages=msgs, metadata=dict(meta)), "what-if"))
    return "what-if"


def diff_of(cp: MemoryCheckpointer) -> ThreadDiff:
    return diff_threads(open_thread(cp, "src"), open_thread(cp, "what-if"))


def only_change(d: ThreadDiff) -> Any:
    assert len(d.changes) == 1, [(c.kind, c.index_a, c.index_b, c.details) for c in d.changes]
    return d.changes[0]


messy = st.lists(turn_specs, min_size=2, max_size=14, unique_by=lambda s: s.tag)


def messy_specs_or_skip(**kw: Any) -> Any:
    from tulip_nb.testing import messy_specs

    return messy_specs(**kw)


SETTINGS = settings(max_examples=examples(0.3), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(messy)
def test_a_swapped_system_prompt_is_one_row_and_moves_no_divergence(specs: list[TurnSpec]) -> None:
    cp = MemoryCheckpointer()
    src = build(specs)
    save_source(cp, src)
    branch(cp, 0, respelled(src.messages)[1:], edit="You are a careful analyst.")
    d = diff_of(cp)
    c = only_change(d)
    assert (c.kind, c.index_a, c.index_b, c.details) == ("changed", 0, 0, ["system prompt changed"])
    assert d.system_changed and d.divergence_turn is None and d.divergence_index == d.n_a
    assert d.counts()["same"] == len(src.messages) - 1 and d.fork_index == 0
    assert "system prompt changed" in d.summary() and "no change after the system prompt" in d.summary()
    assert [len(h.rows) for h in d.hunks(context=0)] == [1]


@SETTINGS
@given(messy, st.data())
def test_one_changed_tool_result_is_exactly_one_row(specs: list[TurnSpec], data: st.DataObject) -> None:
    src = build(specs)
    tools = [i for i, m in enumerate(src.messages) if m.role == "tool"]
    if not tools:
        return
    k = data.draw(st.sampled_from(tools))
    cp = MemoryCheckpointer()
    save_source(cp, src)
    branch(cp, k, respelled(src.messages)[k + 1 :], edit="lookup_record=offline")
    d = diff_of(cp)
    c = only_change(d)
    assert (c.kind, c.index_a, c.index_b, c.details) == ("changed", k, k, ["tool result changed"])
    turns = split_turns(src.messages, src.metadata)
    turn = next(t.turn for t in turns if t.first <= k <= t.last)
    assert not d.system_changed and (d.divergence_index, d.divergence_turn) == (k, turn)
    assert c.turn_a == c.turn_b == turn


@SETTINGS
@given(messy, st.data())
def test_one_changed_user_message_is_exactly_one_row(specs: list[TurnSpec], data: st.DataObject) -> None:
    src = build(specs)
    users = [i for i, m in enumerate(src.messages) if m.role == "user"]
    k = data.draw(st.sampled_from(users))
    cp = MemoryCheckpointer()
    save_source(cp, src)
    branch(cp, k, respelled(src.messages)[k + 1 :], edit="turn ?: a different question")
    c = only_change(diff_of(cp))
    assert (c.kind, c.index_a, c.index_b, c.details) == ("changed", k, k, ["text changed"])


@SETTINGS
@given(messy, st.data())
def test_renumbered_ids_and_respelled_numbers_are_no_change(specs: list[TurnSpec], data: st.DataObject) -> None:
    src = build(specs)
    at = data.draw(st.integers(0, len(src.messages) - 1))
    cp = MemoryCheckpointer()
    save_source(cp, src)
    branch(cp, at, respelled(src.messages)[at + 1 :])
    d = diff_of(cp)
    assert d.identical and d.changes == [] and d.counts()["same"] == len(src.messages), d.summary()
    assert d.hunks() == [] and "identical" in d.summary()


@SETTINGS
@given(messy, st.data())
def test_an_inserted_or_removed_turn_is_one_block(specs: list[TurnSpec], data: st.DataObject) -> None:
    """A turn only one branch has is one added (removed) block; every other turn pairs as the same."""
    t = data.draw(st.integers(0, len(specs)))
    extra = replace(data.draw(turn_specs), tag=max(s.tag for s in specs) + 1)
    longer, shorter = build([*specs[:t], extra, *specs[t:]]), build(specs)
    remove = data.draw(st.booleans())
    a, b = (longer, shorter) if remove else (shorter, longer)
    turn = split_turns(longer.messages, longer.metadata)[t]
    span = list(range(turn.first, turn.last + 1))
    cp = MemoryCheckpointer()
    save_source(cp, a)
    at = span[0] - 1  # a fork after the turns both keep (lineage pairs those)
    branch(cp, at, respelled(b.messages)[at + 1 :], metadata=b.metadata)
    d = diff_of(cp)
    kind = "removed" if remove else "added"
    got = [(c.kind, c.index_a if remove else c.index_b) for c in d.changes]
    assert got == [(kind, i) for i in span], d.summary()
    assert d.divergence_index == span[0] and d.divergence_turn == t


def test_metadata_changed_only_when_it_differs() -> None:
    src = build([TurnSpec("answered", 1, 1, True, False, True, 7), TurnSpec("answered", 0, 1, False, False, False, 8)])
    cp = MemoryCheckpointer()
    save_source(cp, src)
    k = max(i for i, m in enumerate(src.messages) if m.metadata)
    msgs = respelled(src.messages)
    msgs[k] = msgs[k].model_copy(update={"metadata": {"usage": {"input": 999, "cost": 0.5}}})
    branch(cp, 0, msgs[1:])
    c = only_change(diff_of(cp))
    assert (c.index_a, c.details) == (k, ["metadata changed: usage"])


def test_respelled_json_is_the_same_message() -> None:
    """Issue 31's remark: ``{"b": 1.0}`` and ``{"b": 1}`` (and reordered keys) are one message for
    the diff -- the canonical JSON of decision 10 -- while ``{"b": 1.5}`` is not."""
    made = [Message.user("x"), Message.assistant("y").model_copy(update={"metadata": {"b": 1, "a": [2, {"c": 3}]}})]
    raw = messages_from_json(
        [
            {"role": "user", "content": "x", "tool_calls": [], "tool_call_id": None, "name": None, "metadata": {}},
            {"role": "assistant", "content": "y", "metadata": {"a": [2.0, {"c": 3.0}], "b": 1.0}},
        ]
    )
    assert raw[1].json_bytes() != made[1].json_bytes()  # really spelled differently
    assert [message_key(m) for m in raw] == [message_key(m) for m in made]
    cp = MemoryCheckpointer()
    asyncio.run(cp.save(AgentState(messages=raw), "src"))
    asyncio.run(cp.save(AgentState(messages=made), "what-if"))
    assert diff_of(cp).identical
    other = [made[0], made[1].model_copy(update={"metadata": {"b": 1.5, "a": [2, {"c": 3}]}})]
    asyncio.run(cp.save(AgentState(messages=other), "what-if"))
    assert only_change(diff_of(cp)).details == ["metadata changed: b"]


def test_a_result_answering_another_call_is_a_change_even_with_equal_text() -> None:
    """Ids break ties inside a block: results that swap which call they answer are a change."""
    calls = [ToolCall(id="x", name="get", arguments={"n": 1}), ToolCall(id="y", name="get", arguments={"n": 2})]
    head = [Message.user("go"), Message.assistant(None, calls)]
    a = [*head, Message.tool("same", tool_call_id="y"), Message.tool("same", tool_call_id="x")]
    b = [*head, Message.tool("same", tool_call_id="x"), Message.tool("same", tool_call_id="y")]
    cp = MemoryCheckpointer()
    asyncio.run(cp.save(AgentState(messages=a), "src"))
    asyncio.run(cp.save(AgentState(messages=b), "what-if"))
    d = diff_of(cp)
    assert [(c.index_a, c.details) for c in d.changes] == [(2, ["answers another call"]), (3, ["answers another call"])]


def test_a_turn_that_ended_differently_is_one_row_on_its_user_message() -> None:
    spec = TurnSpec("error", 0, 1, True, False, False, 3)
    src = build([replace(spec, outcome="answered"), spec])
    other = build([replace(spec, outcome="answered"), replace(spec, outcome="context_exceeded")])
    cp = MemoryCheckpointer()
    save_source(cp, src)
    branch(cp, 0, other.messages[1:], metadata=other.metadata)
    c = only_change(diff_of(cp))
    user = max(i for i, m in enumerate(src.messages) if m.role == "user")
    assert c.index_a == user and c.details == [
        "turn outcome error (ModelError) -> context_exceeded (ContextWindowExceeded)"
    ]


@SETTINGS
@given(messy, st.integers(0, 5))
def test_hunks_hold_every_change_once_with_bounded_context(specs: list[TurnSpec], context: int) -> None:
    """Whatever differs, hunks show each change exactly once, in order, with at most ``context``
    same rows between a hunk's edge and its nearest change, and their headers count their rows."""
    a = build(specs)
    b_specs = [replace(s, tag=s.tag + 1) if k % 3 == 1 else s for k, s in enumerate(specs)][:-1]
    cp = MemoryCheckpointer()
    save_source(cp, a)
    b = build(b_specs, system="Another prompt.")
    branch(cp, 0, b.messages[1:], edit="Another prompt.", metadata=b.metadata)
    d = diff_of(cp)
    hunks = d.hunks(context)
    shown = [r for h in hunks for r in h.rows if r.kind != "same"]
    assert shown == d.changes
    for h in hunks:
        kinds = [r.kind != "same" for r in h.rows]
        assert kinds.index(True) <= context and kinds[::-1].index(True) <= context
        assert h.count_a == sum(r.index_a is not None for r in h.rows)
        assert h.count_b == sum(r.index_b is not None for r in h.rows)
        first_a = next((r.index_a for r in h.rows if r.index_a is not None), None)
        assert first_a is None or first_a == h.start_a
    every_a = [r.index_a for r in d.rows if r.index_a is not None]
    every_b = [r.index_b for r in d.rows if r.index_b is not None]
    assert every_a == list(range(d.n_a)) and every_b == list(range(d.n_b))  # each message once, in order


@pytest.mark.parametrize("change", ["system", "ids"])
def test_a_long_agent_thread_forked_with_another_system_prompt(change: str) -> None:
    """Issue 25's reproduction in small: a real agent, its fork rerun with the same scripted
    replies (call ids derive from the request, so they differ): one row, no divergence."""
    from tulip_nb.agent import Agent
    from tulip_nb.models import ScriptedModel, text, tool_call
    from tulip_nb.models._base import ModelError
    from tulip_nb.tools import tool

    @tool
    def lookup(key: str) -> str:
        """Look a record up.

        Args:
            key: The record key.
        """
        return f"record {key}"

    def make_reply(ids: str) -> Callable[[list[Message], list[dict[str, Any]]], Message]:
        def reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
            last = messages[-1]
            if last.role == "user":
                if "fail" in (last.content or ""):
                    raise ModelError("provider 500")
                n = len(messages)
                return tool_call("lookup", call_id=f"{ids}-{n}" if ids else None, key=(last.content or "")[:8])
            return text(f"done: {last.content}")

        return reply

    cp = MemoryCheckpointer()
    prompts = [f"turn {i}" + (" fail" if i % 7 == 3 else "") for i in range(30)]

    def run(tid: str, system: str, ids: str) -> None:
        agent = Agent(ScriptedModel(make_reply(ids)), [lookup], system_prompt=system, checkpointer=cp)
        for p in prompts:
            with pytest.raises(ModelError) if "fail" in p else contextlib.nullcontext():
                agent.run_sync(p, thread_id=tid)

    run("src", SYSTEM, "")
    other = "You are a careful analyst." if change == "system" else SYSTEM
    fork(open_thread(cp, "src"), at=0, edit=other, new_thread_id="what-if")
    run("what-if", other, "" if change == "system" else "rerun")  # "": ids derive from the request
    d = diff_of(cp)
    if change == "ids":
        assert d.identical, d.summary()
        return
    c = only_change(d)
    assert c.index_a == 0 and d.system_changed and d.divergence_turn is None
    assert sum(1 for m in open_thread(cp, "src").final_messages if m.role == "user") == 30


# -- on tulip_nb.testing's messy threads: real agent runs with every failure -----------------------
def assert_one_change_each(cp: MemoryCheckpointer, state: AgentState, pick: Callable[[list[int]], int]) -> None:
    """On the messy thread ``src`` (latest ``state``): a fork that swaps the system prompt, one
    that edits a tool result, one that edits a user message, one that only renumbers ids -- each
    continued identically -- shows exactly that change."""
    msgs = state.messages
    tail = respelled(msgs)
    cases: list[tuple[int, str | None, list[str] | None]] = [(0, "You are someone else.", ["system prompt changed"])]
    tools = [i for i, m in enumerate(msgs) if m.role == "tool"]
    if tools:
        cases.append((pick(tools), "Error: edited result", ["tool result changed"]))
    cases.append((pick([i for i, m in enumerate(msgs) if m.role == "user"]), "another question", ["text changed"]))
    cases.append((pick(list(range(len(msgs)))), None, None))
    for k, edit, details in cases:
        asyncio.run(cp.delete("what-if"))
        branch(cp, k, tail[k + 1 :], edit=edit, metadata=state.metadata)
        d = diff_of(cp)
        if details is None:
            assert d.identical, d.summary()
            continue
        c = only_change(d)
        assert (c.kind, c.index_a, c.index_b, c.details) == ("changed", k, k, details)
        assert d.system_changed == (k == 0)
        assert d.divergence_index == (d.n_a if k == 0 else k)


@settings(max_examples=examples(0.06), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=messy_specs_or_skip(min_turns=5, max_turns=25, max_forks=2), data=st.data())
def test_messy_threads_one_change_each(spec: Any, data: st.DataObject) -> None:
    from tulip_nb.testing import build_messy_thread

    cp = MemoryCheckpointer()
    mt = build_messy_thread(cp, "src", spec)
    state = open_thread(cp, "src").latest.state
    assert_one_change_each(cp, state, lambda xs: data.draw(st.sampled_from(xs)))
    # the generator's own forks: nothing before the fork point differs but the system prompt
    a = open_thread(cp, "src")
    for f in mt.forks:
        assert f.forked is not None
        d = diff_threads(a, open_thread(cp, f.thread_id))
        assert d.system_changed == ("system_prompt" in f.forked.changed), d.summary()
        cut = f.forked.at_message + 1
        early = [c for c in d.changes if c.index_a is not None and c.index_a < cut and c.index_a > 0]
        assert early == [] and d.divergence_index >= cut, d.summary()
        assert d.fork_index == f.forked.at_message


@pytest.mark.slow
def test_a_300_turn_messy_thread_one_change_each() -> None:
    """The issue's scale: 300+ turns with every failure kind, a tool that errs, big outputs."""
    from tulip_nb.testing import MessySpec, build_messy_thread

    spec = MessySpec(seed=25, turns=300, forks=2, error_rate=0.05, interrupt_rate=0.05, tulip_rate=0.05)
    cp = MemoryCheckpointer()
    mt = build_messy_thread(cp, "src", spec)
    assert len(mt.turns) >= 300 and sum(n for o, n in mt.outcome_counts().items() if o != "answered") > 10
    state = open_thread(cp, "src").latest.state
    picks = iter(range(7, 10_000, 97))
    assert_one_change_each(cp, state, lambda xs: xs[next(picks) % len(xs)])


def test_diff_controller_shows_the_same_rows_as_the_cli() -> None:
    """ThreadDiffView's controller: the changed rows highlighted in hunks with context, the same
    messages between hunks collapsed, and the hunk headers ``tulip-nb diff`` prints."""
    from tulip_nb.lab.controllers import DiffController

    specs = [TurnSpec("answered", 1, 1, False, False, False, t) for t in range(12)]
    src = build(specs)
    cp = MemoryCheckpointer()
    save_source(cp, src)
    k = max(i for i, m in enumerate(src.messages) if m.role == "tool")
    msgs = respelled(src.messages)
    msgs[k] = Message.tool("edited", tool_call_id=msgs[k].tool_call_id or "", name=msgs[k].name)
    branch(cp, 0, msgs[1:], edit="Another prompt.")
    c = DiffController(open_thread(cp, "src"), open_thread(cp, "what-if"), context=2)
    html = c.html()
    d = c.result
    assert d is not None and [x.index_a for x in d.changes] == [0, k]
    assert html.count("<tr style=") == 2  # the two changed rows, highlighted
    assert (
        html.count("class='tnb-ctx'") == sum(h.counts()["same"] for h in d.hunks(2)) == 2 + 2 + 1
    )  # the answer is last
    headers = [h.header() for h in d.hunks(2)]
    assert all(esc_header in html for esc_header in headers) and len(headers) == 2
    gap = k - 2 - 3  # between the hunks: everything but 2 rows of context on each side
    assert f"… {gap:,} same messages …" in html
