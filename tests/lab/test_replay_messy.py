"""Replay follows turns and outcomes (issue 25, item 2).

Exact regressions, one per way a turn can end without an answer (a provider error at the first
call or after a tool round, ``ContextWindowExceeded`` from the provider or the manager,
``max_iterations``, an interrupt left pending / answered by resume / pending at the end, a
tulip-written turn, a fork with another system prompt), then hypothesis properties on generated
messy threads (:mod:`tulip_nb.testing`): an unmodified thread replays with 0 divergences and every
turn ends as recorded; a recorded tool result changed in the store is found at its step; a tool
that now answers differently is reported, and only there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.agent import Agent
from tulip_nb.core._messages import Message, ToolCall
from tulip_nb.core.calls import answered_by, calls_before
from tulip_nb.core.errors import ContextWindowExceeded
from tulip_nb.core.turns import split_turns
from tulip_nb.lab import Replay, Thread, fork, open_thread
from tulip_nb.lab._replay import UNKNOWN_QUESTION, ReplayStep
from tulip_nb.lab.controllers import PlayerController
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.models import ModelError, ScriptedModel, text, tool_call
from tulip_nb.models.replay import ReplayedFailure, ReplayModel
from tulip_nb.testing import MessySpec, MessyThread, build_messy_thread, messy_agent, messy_specs
from tulip_nb.tools import Interrupt, Tool, tool

from .conftest import RaisingModel

T = "t"


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}: " + "x" * 40


@tool
def ask_human(question: str) -> str:
    """Ask a human.

    Args:
        question: What to ask.
    """
    raise Interrupt(question)


def reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
    last = messages[-1]
    prompt = next(m.content or "" for m in reversed(messages) if m.role == "user")
    if "fail" in prompt and last.role == "user":
        raise ModelError("provider 500")
    if "brk" in prompt and last.role == "tool":
        raise ModelError("provider 502")
    if "huge" in prompt:
        raise ContextWindowExceeded("needs 9000 tokens, window 6000")
    if "loop" in prompt:
        return tool_call("lookup", key=f"k{len(messages)}")
    if "ask" in prompt and last.role == "user":
        return tool_call("ask_human", question="which one?")
    if "look" in prompt and last.role == "user":
        return tool_call("lookup", key="a")
    return text(f"ok {len(messages)}")


def recorder(cp: MemoryCheckpointer, **kw: Any) -> Agent:
    return Agent(ScriptedModel(reply), [lookup, ask_human], system_prompt="Be brief.", checkpointer=cp, **kw)


def run(agent: Agent, prompt: str, tid: str = T) -> None:
    with contextlib.suppress(Exception):  # the failure is recorded in the thread: what is replayed
        agent.run_sync(prompt, thread_id=tid)


def tulip_writes_a_turn(cp: MemoryCheckpointer) -> None:
    """A turn as a tulip agent writes it: no turn record, its own JSON rendering of a result."""
    state = asyncio.run(cp.load(T))
    assert state is not None
    call = ToolCall(id="c9", name="lookup", arguments={"key": "a"})
    state.messages += [
        Message.user("tulip asks"),
        Message.assistant(None, [call]),
        Message.tool('{"tulip": "rendered"}', tool_call_id="c9", name="lookup"),
        Message.assistant("tulip done"),
    ]
    asyncio.run(cp.save(state, T))


def k_error(cp: MemoryCheckpointer) -> str:
    a = recorder(cp)
    for p in ("look one", "fail please", "look three", "four"):
        run(a, p)
    return T


def k_error_mid_turn(cp: MemoryCheckpointer) -> str:
    a = recorder(cp)
    for p in ("look one", "look brk", "look three"):
        run(a, p)
    return T


def k_context_provider(cp: MemoryCheckpointer) -> str:
    a = recorder(cp)
    for p in ("look one", "huge", "look three"):
        run(a, p)
    return T


def k_context_manager(cp: MemoryCheckpointer) -> str:
    a = recorder(cp, conversation_manager=LLMCompactor(context_length=2000, head_turns=1))
    for p in ("look one", "look " + "big " * 3000, "look three"):
        run(a, p)
    return T


def k_max_iterations(cp: MemoryCheckpointer) -> str:
    a = recorder(cp, max_iterations=3)
    for p in ("look one", "loop", "look three"):
        run(a, p)
    return T


def k_interrupt_pending(cp: MemoryCheckpointer) -> str:
    a = recorder(cp)
    for p in ("look one", "ask", "look three"):
        run(a, p)
    return T


def k_interrupt_resumed(cp: MemoryCheckpointer) -> str:
    a = recorder(cp)
    run(a, "look one")
    run(a, "ask")
    a.resume_sync("the blue one", thread_id=T)
    run(a, "look three")
    return T


def k_interrupt_at_end(cp: MemoryCheckpointer) -> str:
    a = recorder(cp)
    run(a, "look one")
    run(a, "ask")
    return T


def k_tulip_turn(cp: MemoryCheckpointer) -> str:
    a = recorder(cp)
    run(a, "look one")
    tulip_writes_a_turn(cp)
    run(a, "look three")
    return T


def k_fork(cp: MemoryCheckpointer) -> str:
    a = recorder(cp)
    for p in ("look one", "fail", "look three"):
        run(a, p)
    fork(open_thread(cp, T), at=4, new_thread_id="b")
    b = Agent(ScriptedModel(reply), [lookup, ask_human], system_prompt="Be verbose.", checkpointer=cp)
    for p in ("look again", "fail again", "look end"):
        run(b, p, "b")
    return "b"


KINDS: dict[str, Callable[[MemoryCheckpointer], str]] = {
    "error": k_error,
    "error_mid_turn": k_error_mid_turn,
    "context_provider": k_context_provider,
    "context_manager": k_context_manager,
    "max_iterations": k_max_iterations,
    "interrupt_pending": k_interrupt_pending,
    "interrupt_resumed": k_interrupt_resumed,
    "interrupt_at_end": k_interrupt_at_end,
    "tulip_turn": k_tulip_turn,
    "fork": k_fork,
}

EXPECTED = {  # the outcome of the kind's interesting turn, as the record says
    "error": ["answered", "error", "answered", "answered"],
    "error_mid_turn": ["answered", "error", "answered"],
    "context_provider": ["answered", "context_exceeded", "answered"],
    "context_manager": ["answered", "context_exceeded", "answered"],
    "max_iterations": ["answered", "max_iterations", "answered"],
    "interrupt_pending": ["answered", "interrupted", "answered"],
    "interrupt_resumed": ["answered", "answered", "answered"],
    "interrupt_at_end": ["answered", "interrupted"],
    "tulip_turn": ["answered", "tulip", "answered"],
    "fork": ["answered", "answered", "error", "answered"],
}


def thread_of(kind: str) -> tuple[MemoryCheckpointer, Thread]:
    cp = MemoryCheckpointer()
    return cp, open_thread(cp, KINDS[kind](cp))


def replays(thread: Thread, mode: str) -> Replay:
    if mode == "no agent":
        return Replay(thread)
    agent = Agent(RaisingModel(), [lookup, ask_human])
    return Replay(thread, agent=agent, tools="real" if mode == "real tools" else "recorded")


def assert_faithful(r: Replay, thread: Thread) -> None:
    final = r.run_to()
    assert len(r.divergences) == 0, r.divergences.to_dict("records")
    assert final is not None and [m.json_bytes() for m in final.messages] == [
        m.json_bytes() for m in thread.final_messages
    ]
    turns = r.turns
    assert list(turns["replayed"]) == list(turns["outcome"])
    assert len(r.steps) == r.total_steps and r.done and r.step() is None


# -- exact regressions --------------------------------------------------------------------------
def test_the_issue_reproduction_replays_the_failed_turn_as_its_error() -> None:
    cp = MemoryCheckpointer()

    def provider(messages: list[Message]) -> Message:
        if "fail" in (messages[-1].content or ""):
            raise ModelError("provider 500")
        return text("ok")

    agent = Agent(model=ScriptedModel(provider), checkpointer=cp)
    agent.run_sync("one", thread_id=T)
    with pytest.raises(ModelError):
        agent.run_sync("fail please", thread_id=T)
    agent.run_sync("three", thread_id=T)
    rp = Replay(open_thread(cp, T))
    rp.run_to()
    assert rp.divergences.empty  # was: 1 row, expected 'three', actual 'ok'
    assert [(s.turn, s.call, s.outcome) for s in rp.steps] == [
        (0, 0, "answered"),
        (1, None, "error"),
        (2, 1, "answered"),
    ]
    failed = rp.steps[1]
    assert isinstance(failed, ReplayStep) and failed.failed and failed.response is None
    assert failed.error == "ModelError: provider 500" and failed.stop_reason == "error"
    assert failed.state.messages[-1].content == "fail please"
    row = rp.turns.iloc[1]
    assert (row["outcome"], row["replayed"], row["replayed_error"], row["step"]) == (
        "error",
        "error",
        "ModelError: provider 500",
        1,
    )
    assert failed.state.errors == ["ModelError: provider 500"]  # as the agent recorded it


@pytest.mark.parametrize("mode", ["no agent", "real tools", "recorded tools"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_failure_kind_replays_with_no_divergence(kind: str, mode: str) -> None:
    _, thread = thread_of(kind)
    assert [t.outcome for t in split_turns(thread.final_messages, thread.latest.state.metadata)] == EXPECTED[kind]
    r = replays(thread, mode)
    assert_faithful(r, thread)


def test_the_replay_model_raises_the_recorded_failure_and_never_borrows_the_next_answer() -> None:
    _, thread = thread_of("error")
    turns = split_turns(thread.final_messages, thread.latest.state.metadata)
    model = ReplayModel(thread.final_messages)
    model.begin_turn(turns[1])
    with pytest.raises(ReplayedFailure) as e:
        asyncio.run(model.complete(thread.final_messages[: turns[1].first + 1], []))
    assert type(e.value).__name__ == "ModelError" and str(e.value) == "provider 500"
    assert e.value.recorded == "ModelError: provider 500" and e.value.turn == 1 and model.calls == 0
    model.begin_turn(turns[0])  # an answered turn asked for more than it recorded: said, not borrowed
    for _ in range(turns[0].model_calls):
        asyncio.run(model.complete(thread.final_messages[:1], []))
    with pytest.raises(ModelError, match="model call 3 of turn 0"):
        asyncio.run(model.complete(thread.final_messages[:1], []))


def test_a_max_iterations_turn_stops_where_the_record_stopped() -> None:
    _, thread = thread_of("max_iterations")
    r = Replay(thread, agent=Agent(RaisingModel(), [lookup, ask_human], max_iterations=50))
    r.run_to()
    limited = [s for s in r.steps if s.turn == 1]
    assert len(limited) == 3 and [s.outcome for s in limited] == [None, None, "max_iterations"]
    assert limited[-1].stop_reason == "max_iterations" and r.steps[len(limited) + 2].turn == 2
    assert r.divergences.empty


def test_a_pending_interrupt_stays_pending_and_the_next_turn_starts() -> None:
    _, thread = thread_of("interrupt_pending")
    r = Replay(thread)  # recorded tools: the recorded tool asks again
    r.run_to()
    asked = r.steps[2]
    assert asked.outcome == "interrupted" and asked.interrupt is not None
    assert asked.interrupt.question == UNKNOWN_QUESTION  # only the last pending question is saved
    assert r.steps[3].turn == 2 and r.divergences.empty
    closed = thread.final_messages[asked.interrupt.position[0] + 1]  # type: ignore[index]
    assert closed.content is not None and closed.content.startswith("Error: OutcomeUnknown")
    # pending at the end: the saved question comes back
    _, end = thread_of("interrupt_at_end")
    r2 = Replay(end)
    r2.run_to()
    assert r2.steps[-1].interrupt is not None and r2.steps[-1].interrupt.question == "which one?"
    assert r2.current is not None and r2.current.metadata["_tulip_nb_run"]["status"] == "interrupted"


def test_an_interrupt_answered_by_resume_replays_with_the_recorded_answer() -> None:
    _, thread = thread_of("interrupt_resumed")
    r = replays(thread, "real tools")  # the real ask_human raises Interrupt again
    assert_faithful(r, thread)
    answered = [s for s in r.steps if s.answer is not None]
    assert len(answered) == 1 and answered[0].answer == "the blue one" and answered[0].interrupt is None
    assert [ex.result for ex in answered[0].tool_results] == ["the blue one"]
    assert int(r.turns["interrupts"][1]) == 1


def test_a_tulip_turn_is_copied_not_rerun() -> None:
    _, thread = thread_of("tulip_turn")
    r = replays(thread, "real tools")  # tulip_nb's lookup would answer (and render) otherwise
    assert_faithful(r, thread)
    copied = [s for s in r.steps if s.turn == 1]
    assert [s.outcome for s in copied] == [None, "tulip"] and all(s.request == () for s in copied)


def test_real_divergences_are_still_reported_by_turn() -> None:
    _, thread = thread_of("error")

    @tool(name="lookup")
    def changed(key: str) -> str:
        """Changed.

        Args:
            key: The key.
        """
        return "changed"

    r = Replay(thread, agent=Agent(RaisingModel(), [changed, ask_human]))
    r.run_to()
    d = r.divergences
    assert set(d["kind"]) == {"tool result"} and set(d["actual"]) == {"changed"}
    assert list(d["turn"]) == [0, 2] and list(d["step"]) == [0, 3]  # step 2 is turn 1's failure
    assert all(thread.final_messages[i].role == "tool" for i in d["index"])
    # a human tool that now answers: the turn no longer ends interrupted
    _, pending = thread_of("interrupt_pending")
    answers = Tool(
        lambda question: "no need to ask",
        name="ask_human",
        parameters={"type": "object", "properties": {"question": {"type": "string"}}},
    )
    r2 = Replay(pending, agent=Agent(RaisingModel(), [lookup, answers]))
    r2.run_to()
    d2 = r2.divergences
    assert list(d2["kind"]) == ["tool result", "outcome"] and set(d2["turn"]) == {1}
    assert d2["expected"].iloc[1] == "interrupted" and d2["actual"].iloc[1] == "max_iterations"
    assert r2.steps[-1].turn == 2  # and the replay went on with the next turn, as recorded


def test_a_manager_that_now_overflows_is_an_outcome_divergence() -> None:
    cp = MemoryCheckpointer()
    a = recorder(cp)  # no window: the big prompt was answered
    for p in ("look one", "look " + "big " * 3000, "look three"):
        run(a, p)
    small = LLMCompactor(context_length=2000, head_turns=1)
    r = Replay(open_thread(cp, T), agent=Agent(RaisingModel(), [lookup, ask_human], conversation_manager=small))
    r.run_to()
    d = r.divergences
    assert list(d["kind"]) == ["outcome", "missing message"] and set(d["turn"]) == {1}
    row = d.iloc[0]
    assert row["expected"] == "answered" and row["actual"].startswith("context_exceeded: ContextWindowExceeded")
    assert r.steps[2].outcome == "context_exceeded" and r.steps[2].response is None
    assert list(r.turns["replayed"]) == ["answered", "context_exceeded", "answered"] and r.done


def test_go_live_from_a_failure_step_and_from_the_step_before_it() -> None:
    cp, thread = thread_of("error")
    live = Agent(ScriptedModel(lambda messages: text("live")), [lookup, ask_human], checkpointer=cp)
    r = Replay(thread, agent=live)
    r.run_to(3)  # through turn 1's failure step
    assert r.steps[-1].outcome == "error"
    after = r.go_live(new_thread_id="after-failure")
    msgs = after.thread().final_messages
    assert [m.content for m in msgs if m.role == "user"] == ["look one", "fail please", "look three"]
    assert msgs[-1].content == "live"  # the next recorded prompt, answered live
    assert split_turns(msgs, after.thread().latest.state.metadata)[1].outcome == "error"
    r2 = Replay(thread, agent=live)
    r2.run_to(2)  # before the failure step: the failed turn is run again, live
    before = r2.go_live(new_thread_id="retry")
    msgs2 = before.thread().final_messages
    assert [m.content for m in msgs2 if m.role == "user"][-1] == "fail please" and msgs2[-1].content == "live"
    assert before.result is not None and before.result.stop_reason == "complete"
    # a turn that failed after a tool round: from its open call, the turn goes on live
    cp3, mid = thread_of("error_mid_turn")
    r3 = Replay(mid, agent=Agent(ScriptedModel(lambda messages: text("live")), [lookup, ask_human], checkpointer=cp3))
    r3.run_to(3)
    assert r3.steps[-1].turn == 1 and r3.steps[-1].outcome is None
    resumed = r3.go_live(new_thread_id="resumed")
    msgs3 = resumed.thread().final_messages
    assert [m.role for m in msgs3[-4:]] == ["user", "assistant", "tool", "assistant"] and msgs3[-1].content == "live"
    assert [m.content for m in msgs3 if m.role == "user"][-1] == "look brk"


def test_go_live_after_a_pending_interrupt_and_after_max_iterations() -> None:
    for kind, nth in (("interrupt_pending", 3), ("max_iterations", 5)):
        cp, thread = thread_of(kind)
        live = Agent(ScriptedModel(lambda messages: text("live")), [lookup, ask_human], checkpointer=cp)
        r = Replay(thread, agent=live)
        r.run_to(nth)
        assert r.steps[-1].outcome == EXPECTED[kind][1]
        branch = r.go_live(new_thread_id=f"{kind}-live").thread()
        users = [m.content for m in branch.final_messages if m.role == "user"]
        assert users[-1] == "look three" and branch.final_messages[-1].content == "live", kind


def test_the_player_shows_the_failed_turn_where_it_happened() -> None:
    _, thread = thread_of("error")
    p = PlayerController(thread)
    assert p.turn_notes(1) == ["turn 1 ended: error — ModelError: provider 500"]
    assert p.turn_notes(0) == [] and p.turn_notes(2) == []
    p.seek(1)
    assert "turn 1 ended: error — ModelError: provider 500" in p.html()
    p.seek(2)
    assert "turn 1 ended" not in p.html()
    replaying = PlayerController(thread, agent=Agent(RaisingModel(), [lookup, ask_human]))
    replaying.seek(1)
    assert replaying.replay is not None and len(replaying.replay.steps) == 3  # the failure step too
    assert "identical to the record" in replaying.html() and "turn 1 ended: error" in replaying.html()
    _, limited = thread_of("max_iterations")
    assert PlayerController(limited).turn_notes(4) == [
        "turn 1 ended: max_iterations — stopped at the iteration limit after 3 model calls"
    ]


def test_the_replay_player_widget_shows_the_failed_turn_at_its_step() -> None:
    from tulip_nb.widgets import ReplayPlayer

    _, thread = thread_of("error_mid_turn")
    player = ReplayPlayer(thread, agent=Agent(RaisingModel(), [lookup, ask_human]))
    assert "turn 1 ended" not in player.view.value
    player.slider.value = 2  # turn 1's only call: the provider failed right after it
    assert "turn 1 ended: error — ModelError: provider 502" in player.view.value
    assert "identical to the record so far" in player.view.value and player.status.value == ""
    assert "turn 1 ended: error" in player.fallback_html()
    player.next_button.click()
    assert "turn 1 ended" not in player.view.value


# -- properties on generated messy threads ------------------------------------------------------
def check_thread(cp: MemoryCheckpointer, th: MessyThread) -> None:
    """Replay ``th`` with no agent and (unless its tool changed) with its own real tools."""
    thread = open_thread(cp, th.thread_id)
    truth = [t.outcome for t in th.turns]
    modes: list[Replay] = [Replay(thread)]
    tool_fork = th.forked is not None and any(k.startswith("tool:") for k in th.forked.changed)
    if not tool_fork:
        modes.append(Replay(thread, agent=messy_agent(cp, th), tools="real"))
    for r in modes:
        assert [t.outcome for t in r.record_turns] == truth, th.thread_id
        final = r.run_to()
        assert len(r.divergences) == 0, (th.thread_id, r.divergences.head(3).to_dict("records"))
        assert list(r.turns["replayed"]) == truth, th.thread_id
        assert final is not None and len(final.messages) == th.n_messages
        assert len(r.steps) == r.total_steps
    if tool_fork:
        check_tool_fork(cp, th, thread)


def check_tool_fork(cp: MemoryCheckpointer, th: MessyThread, thread: Thread) -> None:
    """With the fork's changed tool, exactly the inherited (re-run) calls of it diverge."""
    assert th.forked is not None
    msgs = thread.final_messages
    rerun = {t.index for t in th.turns[: th.forked.before_turn] if t.outcome != "tulip"}
    starts = [t.start for t in th.turns]
    expected = {
        i
        for i, ref in enumerate(answered_by(msgs))
        if ref is not None
        and msgs[ref[0]].tool_calls[ref[1]].name == "query_metric"
        and max(k for k, s in enumerate(starts) if s <= i) in rerun
    }
    r = Replay(thread, agent=messy_agent(cp, th), tools="real")
    r.run_to()
    d = r.divergences
    assert set(d["kind"]) <= {"tool result"} and set(d["index"]) == expected, th.thread_id


def messy(min_turns: int, max_turns: int, max_forks: int) -> st.SearchStrategy[MessySpec]:
    """:func:`messy_specs` with every kind of failure likely (at least 8 % of turns each)."""
    floor = {k: 0.08 for k in ("error_rate", "context_rate", "max_iterations_rate", "interrupt_rate", "tulip_rate")}
    return messy_specs(min_turns=min_turns, max_turns=max_turns, max_forks=max_forks).map(
        lambda spec: dataclasses.replace(spec, **{k: max(v, getattr(spec, k)) for k, v in floor.items()})
    )


@given(spec=messy(min_turns=8, max_turns=30, max_forks=2))
@settings(max_examples=examples(0.12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_unmodified_messy_threads_replay_with_no_divergence(spec: MessySpec) -> None:
    cp = MemoryCheckpointer()
    main = build_messy_thread(cp, "messy", spec)
    assert any(t.outcome not in ("answered", "tulip") for t in main.turns) or spec.turns < 12
    for th in main.threads():
        check_thread(cp, th)


@given(spec=messy(min_turns=8, max_turns=25, max_forks=0), data=st.data())
@settings(max_examples=examples(0.15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_changed_recorded_tool_result_is_found_at_its_step(spec: MessySpec, data: st.DataObject) -> None:
    cp = MemoryCheckpointer()
    th = build_messy_thread(cp, "messy", spec)
    state = asyncio.run(cp.load("messy"))
    assert state is not None
    msgs = state.messages
    rerun = [t for t in th.turns if t.outcome != "tulip"]  # a tulip turn is copied, never re-run
    candidates = [
        i
        for i, ref in enumerate(answered_by(msgs))
        if ref is not None
        and msgs[ref[0]].tool_calls[ref[1]].name != "ask_human"  # a human's answer is input, as a prompt
        and not (msgs[i].content or "").startswith("Error: OutcomeUnknown")
        and any(t.start < i < t.end for t in rerun)
    ]
    if not candidates:
        return
    i = data.draw(st.sampled_from(candidates), label="changed message")
    original = msgs[i].content
    state.messages = [*msgs[:i], msgs[i].model_copy(update={"content": "CHANGED"}), *msgs[i + 1 :]]
    asyncio.run(cp.save(state, "changed"))
    r = Replay(open_thread(cp, "changed"), agent=messy_agent(cp, th), tools="real")
    r.run_to()
    d = r.divergences
    assert len(d) == 1, d.to_dict("records")
    row = d.iloc[0]
    call = calls_before(msgs, i) - 1  # the model call whose tool ran
    step = next(n for n, s in enumerate(r.steps) if s.call == call)
    turn = next(t.index for t in th.turns if t.start < i < t.end)
    assert (row["kind"], row["index"], row["turn"], row["step"]) == ("tool result", i, turn, step)
    assert (row["expected"], row["actual"]) == ("CHANGED", original)


@pytest.mark.slow
@given(spec=messy(min_turns=300, max_turns=320, max_forks=1))
@settings(max_examples=examples(0.02), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_300_turn_messy_thread_replays_with_no_divergence(spec: MessySpec) -> None:
    cp = MemoryCheckpointer()
    for th in build_messy_thread(cp, "long", spec).threads():
        check_thread(cp, th)
