"""The messy-thread generator (``tulip_nb.testing._messy``): its ground truth is the saved thread.

Every claim a :class:`MessyThread` makes is checked against what the checkpointer holds, by reading
the saved states and save metadata directly (not through the lab, which these threads test):
message spans, roles, model and tool calls, tool errors and idempotent hits, each turn's last
checkpoint (run id, ``_tulip_nb_run`` status, save-metadata ``source``), tulip turns (a new run id,
no tulip_nb record of their own), forks (``forked_from``, the cut point, the changed system prompt
or tool). Then determinism, a 300-turn thread with every outcome, and the spec's errors.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import examples
from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import EVENTS_KEY, FORKED_FROM_KEY, ITER_KEY, RUN_KEY, SOURCE_KEY, STATE_KEY
from tulip_nb.core.turns import OUTCOMES
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.testing import (
    MessySpec,
    MessyThread,
    MessyTurn,
    abuild_messy_corpus,
    abuild_messy_thread,
    build_messy_thread,
    keep_facts,
    messy_agent,
    messy_specs,
)


def _span_facts(turn: MessyTurn, messages: list) -> None:  # type: ignore[type-arg]
    span = messages[turn.start : turn.end]
    where = f"turn {turn.index} ({turn.outcome})"
    assert span[0].role == "user" and span[0].content.startswith(f"T{turn.index}: "), where
    assert all(m.role != "user" for m in span[1:]), where
    assert sum(m.role == "assistant" for m in span) == turn.model_calls, where
    assert [c.name for m in span for c in m.tool_calls] == list(turn.tool_calls), where
    metric_errors = [
        m for m in span if m.role == "tool" and m.name == "query_metric" and m.content.startswith("Error:")
    ]
    assert len(metric_errors) == turn.tool_errors, where
    for fact in turn.facts:
        assert fact in span[0].content, where
    if turn.outcome in ("error", "context_exceeded"):
        assert turn.error is not None and span[-1].role in ("user", "tool"), where
    if turn.outcome == "interrupted":
        calls = [c for m in span for c in m.tool_calls]
        assert calls[-1].name == "ask_human", where


async def _check_turn_checkpoint(cp: BaseCheckpointer, turn: MessyTurn) -> None:
    ck = await cp.load_checkpoint(turn.thread_id, turn.checkpoint_id)
    assert ck is not None
    where = f"turn {turn.index} ({turn.outcome}) of {turn.thread_id!r}"
    state = ck.state
    assert state.run_id == turn.run_id, where
    assert len(state.messages) >= turn.start + 1 + (turn.model_calls > 0), where
    record = state.metadata.get(RUN_KEY) or {}
    if turn.outcome == "tulip":
        assert SOURCE_KEY not in ck.metadata, where  # tulip writes no save metadata of its own
        assert record.get("run_id") != turn.run_id, where  # and no tulip_nb turn record
        assert ITER_KEY not in state.metadata, where  # tulip takes the list off at its turn end
        assert state.iteration == turn.model_calls, where
        return
    assert ck.metadata.get(SOURCE_KEY) == turn.saved_source, where
    assert record.get("run_id") == turn.run_id and record.get("status") == turn.saved_status, where
    if turn.outcome == "max_iterations":
        assert record.get("stop_reason") == "max_iterations", where
    if turn.error is not None:
        assert str(record.get("error", "")).startswith(f"{turn.error}: "), where
        assert state.errors and state.errors[-1].startswith(f"{turn.error}: "), where
    lookups = [ex for ex in state.tool_executions if ex.tool_name == "lookup_record"]
    assert sum(ex.idempotent_cache_hit for ex in lookups) == turn.cache_hits, where


async def check_ground_truth(cp: BaseCheckpointer, thread: MessyThread) -> None:
    """Assert that everything ``thread`` says is what ``cp`` holds (main thread and forks)."""
    for th in thread.threads():
        latest = await cp.load_checkpoint(th.thread_id)
        assert latest is not None
        messages = latest.state.messages
        assert len(messages) == th.n_messages
        assert messages[0].role == "system" and messages[0].content == th.system_prompt
        assert [t.index for t in th.turns] == list(range(len(th.turns)))
        assert th.turns[0].start == 1 and th.turns[-1].end == th.n_messages
        assert all(a.end == b.start for a, b in zip(th.turns, th.turns[1:], strict=False))
        for turn in th.turns:
            _span_facts(turn, messages)
            await _check_turn_checkpoint(cp, turn)
        own = [t for t in th.turns if t.thread_id == th.thread_id]
        assert len({t.run_id for t in own}) == len(own), "every turn is its own run"
        if th.forked is not None:
            await _check_fork(cp, th, thread)


async def _check_fork(cp: BaseCheckpointer, fork: MessyThread, source: MessyThread) -> None:
    info = fork.forked
    assert info is not None and info.source_thread_id == source.thread_id
    ids = await cp.list_checkpoints(fork.thread_id, limit=None)
    first = await cp.load_checkpoint(fork.thread_id, ids[-1])
    assert first is not None
    assert first.metadata[FORKED_FROM_KEY] == source.thread_id and first.metadata[SOURCE_KEY] == "fork"
    src = (await cp.load(source.thread_id)).messages  # type: ignore[union-attr]
    mine = (await cp.load(fork.thread_id)).messages  # type: ignore[union-attr]
    assert info.at_message == (
        source.turns[info.before_turn].start - 1 if info.before_turn < len(source.turns) else len(src) - 1
    )
    assert mine[1 : info.at_message + 1] == src[1 : info.at_message + 1], "a fork keeps its source's history"
    assert fork.turns[: info.before_turn] == tuple(
        dataclasses.replace(t, end=fork.turns[info.before_turn].start if k == info.before_turn - 1 else t.end)
        for k, t in enumerate(source.turns[: info.before_turn])
    )
    assert all(t.thread_id == fork.thread_id for t in fork.turns[info.before_turn :])
    assert len(fork.turns) == info.before_turn + fork.spec.fork_turns
    (what, (old, new)), *rest = info.changed.items()
    assert not rest and old != new
    if what == "system_prompt":
        assert src[0].content == old and mine[0].content == new == fork.system_prompt
    else:
        assert what == "tool:query_metric" and mine[0].content == src[0].content
        first_own = fork.turns[info.before_turn]  # calls the changed tool where the old one failed
        results = [m for m in mine[first_own.start : first_own.end] if m.name == "query_metric"]
        assert results and not results[0].content.startswith("Error:") and "(v2)" in results[0].content


# -- properties ---------------------------------------------------------------------------------


@given(spec=messy_specs(min_turns=3, max_turns=30, max_forks=2))
@settings(max_examples=examples(0.25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
async def test_the_ground_truth_is_the_saved_thread(spec: MessySpec) -> None:
    cp = MemoryCheckpointer()
    thread = await abuild_messy_thread(cp, "user/42:chat #1", spec)
    assert len(thread.turns) == spec.turns and len(thread.forks) == spec.forks
    await check_ground_truth(cp, thread)


@given(spec=messy_specs(min_turns=3, max_turns=15, max_forks=1))
@settings(max_examples=examples(0.1), deadline=None)
async def test_same_seed_same_thread(spec: MessySpec) -> None:
    a, b = MemoryCheckpointer(), MemoryCheckpointer()
    ta = await abuild_messy_thread(a, "t", spec)
    tb = await abuild_messy_thread(b, "t", spec)
    for x, y in zip(ta.threads(), tb.threads(), strict=True):
        sa, sb = await a.load(x.thread_id), await b.load(y.thread_id)
        assert sa is not None and sb is not None
        assert [m.model_dump() for m in sa.messages] == [m.model_dump() for m in sb.messages]
        strip = {"run_id": "", "checkpoint_id": ""}
        assert [dataclasses.replace(t, **strip) for t in x.turns] == [dataclasses.replace(t, **strip) for t in y.turns]
        assert x.forked == y.forked


# -- exact cases --------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_300_turn_thread_has_every_outcome_and_compacts() -> None:
    spec = MessySpec(seed=11, turns=300, forks=2, fork_turns=3)
    cp = MemoryCheckpointer()
    thread = await abuild_messy_thread(cp, "long", spec)
    counts = thread.outcome_counts()
    assert list(counts) == list(OUTCOMES) and sum(counts.values()) == 300
    assert all(counts[o] > 0 for o in OUTCOMES), counts
    assert sum(t.resumed for t in thread.turns) > 0 and sum(t.cache_hits for t in thread.turns) > 0
    assert sum(t.tool_errors for t in thread.turns) > 0 and "fetch_report" in {
        c for t in thread.turns for c in t.tool_calls
    }
    await check_ground_truth(cp, thread)
    state = await cp.load("long")
    assert state is not None and state.metadata[EVENTS_KEY], "the compactor ran"
    assert state.metadata[STATE_KEY]["window"] == spec.context_length


async def test_context_overflow_with_either_manager() -> None:
    for manager in ("compactor", "null"):
        spec = MessySpec(seed=2, turns=6, context_rate=1.0, error_rate=0, max_iterations_rate=0, interrupt_rate=0,
                         tulip_rate=0, manager=manager)  # fmt: skip
        cp = MemoryCheckpointer()
        thread = await abuild_messy_thread(cp, "t", spec)
        failed = thread.turns[1:]  # turn 0 always answers
        assert {t.outcome for t in failed} == {"context_exceeded"}
        # the compactor refuses before calling the model; the provider refuses twice (one retry)
        assert {t.requests for t in failed} == {0 if manager == "compactor" else 2}
        await check_ground_truth(cp, thread)


async def test_pending_interrupts_then_tulip_turns() -> None:
    spec = MessySpec(seed=4, turns=30, interrupt_rate=0.5, resume_rate=0.0, tulip_rate=0.5, error_rate=0,
                     context_rate=0, max_iterations_rate=0, tulip_deletes_iteration_saves=True)  # fmt: skip
    cp = MemoryCheckpointer()
    thread = await abuild_messy_thread(cp, "t", spec)
    pairs = [(a, b) for a, b in zip(thread.turns, thread.turns[1:], strict=False) if a.outcome == "interrupted"]
    assert any(b.outcome == "tulip" for _, b in pairs) and any(b.outcome != "tulip" for _, b in pairs)
    state = await cp.load("t")
    assert state is not None
    for a, _ in pairs:  # the next turn answered the open call: "outcome unknown"
        closing = state.messages[a.end - 1]
        assert closing.role == "tool" and closing.name == "ask_human" and closing.content.startswith("Error:")
    await check_ground_truth(cp, thread)
    # tulip_deletes_iteration_saves: a tulip turn deletes the mid-turn saves the state names; an
    # interrupt save names none (tulip clears the list at every run end), so nothing of ours goes
    kept = set(await cp.list_checkpoints("t", limit=None))
    named = []
    for a, b in pairs:
        if b.outcome == "tulip":
            ck = await cp.load_checkpoint("t", a.checkpoint_id)
            named += ck.state.metadata.get(ITER_KEY) or []  # type: ignore[union-attr]
    assert named == []
    assert all(t.checkpoint_id in kept for t in thread.turns)


async def test_a_corpus_has_one_seed_per_thread() -> None:
    cp = MemoryCheckpointer()
    threads = await abuild_messy_corpus(cp, 3, MessySpec(seed=1, turns=4), prefix="c")
    assert [t.thread_id for t in threads] == ["c-0000", "c-0001", "c-0002"]
    assert len({t.spec.seed for t in threads}) == 3
    again = MemoryCheckpointer()
    alone = await abuild_messy_thread(again, "c-0001", threads[1].spec)
    assert [t.outcome for t in alone.turns] == [t.outcome for t in threads[1].turns]
    for t in threads:
        await check_ground_truth(cp, t)


def test_the_sync_twin_works_and_refuses_a_used_thread() -> None:
    cp = MemoryCheckpointer()
    thread = build_messy_thread(cp, "t", MessySpec(turns=2))
    assert len(thread.turns) == 2
    with pytest.raises(UserError, match="needs a new thread"):
        build_messy_thread(cp, "t", MessySpec(turns=2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"error_rate": 1.5}, "error_rate must be a probability"),
        ({"error_rate": 0.6, "tulip_rate": 0.6}, "sum to 1.310, more than 1"),
        ({"turns": 0}, "turns must be an int >= 1"),
        ({"max_iterations": 2}, "max_iterations must be an int >= 3"),
        ({"manager": "sliding"}, "manager must be 'compactor' or 'null'"),
        ({"context_length": 4000}, "cannot show a 30 kB report"),
    ],
)
def test_spec_errors_name_the_field(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(UserError, match=match):
        MessySpec(**kwargs)


def test_keep_facts_keeps_every_fact_once() -> None:
    from tulip_nb.core._messages import Message

    summary = keep_facts([Message.user("fact F1 = 10"), Message.tool("fact F2 = 20", tool_call_id="c")], None)
    assert summary == "Facts: fact F1 = 10; fact F2 = 20."
    assert keep_facts([Message.user("fact F1 = 10, fact F3 = 3")], summary) == (
        "Facts: fact F1 = 10; fact F2 = 20; fact F3 = 3."
    )


async def test_messy_agent_continues_a_thread_as_it_was_written() -> None:
    cp = MemoryCheckpointer()
    thread = await abuild_messy_thread(cp, "t", MessySpec(seed=3, turns=4, forks=2, fork_turns=1))
    main, prompt_fork, tool_fork = thread.threads()
    assert "tool:query_metric" in tool_fork.forked.changed  # type: ignore[union-attr]
    for th, v2 in ((main, False), (prompt_fork, False), (tool_fork, True)):
        agent = messy_agent(cp, th)
        assert agent.system_prompt == th.system_prompt and agent.max_iterations == th.spec.max_iterations
        assert sorted(agent.tools_by_name) == ["ask_human", "fetch_report", "lookup_record", "query_metric"]
        metric = agent.tools_by_name["query_metric"]
        if v2:
            assert "(v2)" in await metric.invoke({"n": 7})
        else:
            with pytest.raises(ValueError, match="metric 7 is unavailable"):
                await metric.invoke({"n": 7})
        result = await agent.run("T99: anything new?", thread_id=th.thread_id)
        assert result.text == "live answer."
    assert messy_agent(None).system_prompt == main.system_prompt
