"""What a call a tulip agent made saw: NA by default, the whole history when said; never our plan.

Issue 25: after a tulip turn on a tulip_nb thread, ``model_view(-1)`` applied the last tulip_nb
plan to tulip's call (9 messages where tulip's NullManager sent 25). And a tulip_nb turn end must
leave no ``_tulip_iteration_checkpoints`` behind, or tulip deletes those saves at its next turn end.
A property test on generated threads (answered and failed turns, tool rounds each saved mid-turn,
a sliding window, tulip-written turns that delete what the list names, as tulip does), plus exact
regressions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.agent import Agent, run_sync, tool
from tulip_nb.core._messages import Message, ToolCall
from tulip_nb.core.calls import model_calls
from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import ITER_KEY, RUN_KEY, SOURCE_KEY, TURNS_KEY
from tulip_nb.core.state import AgentState
from tulip_nb.lab import open_thread
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.memory.conversation import SlidingWindowManager, model_view, model_views
from tulip_nb.memory.conversation.events import tulip_turns
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.models import ModelError, ScriptedModel, text, tool_call

THREAD = "t"


@tool(idempotent=True)
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"18C and raining in {city}"


def weather_agent(cp: BaseCheckpointer, cities: list[str], requests: list[list[Message]]) -> Agent:
    """Two tool rounds and an answer per city; a save after every tool round; records each request."""
    script = [r for c in cities for r in (("call", c), ("call", c + " north"), ("text", c))]

    def reply(messages: list[Message]) -> object:
        requests.append(list(messages))
        kind, value = script[len(requests) - 1]
        return tool_call("get_weather", city=value) if kind == "call" else text(f"{value}: rain")

    return Agent(
        ScriptedModel(reply),
        [get_weather],
        system_prompt="You are a weather bot.",
        checkpointer=cp,
        conversation_manager=SlidingWindowManager(window_size=6),
        checkpoint_every_n_iterations=1,
    )


def tulip_turn(state: AgentState, n_calls: int = 2) -> AgentState:
    """``state`` with a turn appended as a tulip agent writes it: no turn record, no event."""
    extra = [Message.user("Anything new?")]
    for k in range(n_calls - 1):
        extra += [
            Message.assistant(None, [ToolCall(id=f"call_t{k}", name="get_weather", arguments={"city": "X"})]),
            Message.tool("18C and raining in X", tool_call_id=f"call_t{k}"),
        ]
    extra.append(Message.assistant("Still raining."))
    return state.model_copy(update={"messages": [*state.messages, *extra]})


def run_turns(cp: BaseCheckpointer, cities: list[str]) -> list[list[Message]]:
    requests: list[list[Message]] = []
    agent = weather_agent(cp, cities, requests)
    for c in cities:
        agent.run_sync(f"Weather in {c}?", thread_id=THREAD)
    return requests


# -- exact regressions ---------------------------------------------------------------------------


def test_a_tulip_call_is_not_shown_through_our_last_plan() -> None:
    cp = MemoryCheckpointer()
    sent = run_turns(cp, ["Lisbon", "Porto", "Faro", "Braga"])
    ours = run_sync(cp.load(THREAD))
    assert ours is not None
    # our calls: the events give exactly what was sent, and the window did cut
    assert model_views(ours) == sent and any(len(v) < j for v, j in zip(sent, model_calls(ours.messages), strict=True))
    state = tulip_turn(ours)
    n = len(state.messages)
    cp_after = MemoryCheckpointer()
    run_sync(cp_after.save(state, THREAD))
    th = open_thread(cp_after, THREAD)
    assert [t.outcome for t in th.turn_list][-1] == "tulip"
    # the bug: the last tulip_nb plan applied to tulip's call gave a window, tulip sent everything
    with pytest.raises(UserError, match=r"model call 13 \(message 28\) was made by a tulip agent"):
        th.model_view(-1)
    assert th.model_view(-1, tulip_view="full") == list(state.messages[: n - 1])
    assert len(th.model_view(-1, tulip_view="full")) == n - 1 == 28  # tulip's NullManager sent 28
    views = model_views(state)
    assert views[:12] == sent and views[12:] == [None, None]
    assert model_views(state, tulip_view="full")[12:] == [
        list(state.messages[:j]) for j in model_calls(state.messages)[12:]
    ]
    usage = th.usage
    assert usage["context_tokens"].iloc[12:].isna().all() and usage["context_tokens"].iloc[:12].notna().all()
    assert usage["compacted"].iloc[12:].isna().all() and usage["over_window"].iloc[12:].isna().all()
    assert str(usage["context_tokens"].dtype) == "Int64"  # known counts stay integers
    full = th.usage_for(None, tulip_view="full")
    assert (full["context_tokens"].iloc[12:] == full["full_tokens"].iloc[12:]).all()
    assert not full["compacted"].iloc[12:].any()
    # the view for the next call (tulip_nb's manager's record) is not a tulip call
    assert model_view(state) == model_view(state, n_messages=n)


def test_tulip_view_is_checked() -> None:
    state = AgentState(messages=[Message.user("a"), Message.assistant("b")])
    with pytest.raises(UserError, match="tulip_view must be one of 'unknown', 'full', got 'null'"):
        model_view(state, call=0, tulip_view="null")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="tulip_view"):
        model_views(state, tulip_view="all")  # type: ignore[arg-type]


def test_which_calls_are_tulips() -> None:
    msgs = [Message.system("s"), Message.user("a"), Message.assistant("b"), Message.user("c"), Message.assistant("d")]
    # a thread tulip wrote alone (no mark of tulip_nb): every turn is tulip's
    assert tulip_turns(msgs, {}) == [(1, 2), (3, 4)]
    assert model_views(AgentState(messages=msgs)) == [None, None]
    # our turn log covers turn 0: turn 1 is tulip's
    assert tulip_turns(msgs, {TURNS_KEY: [{"at": 1, "outcome": "answered"}]}) == [(3, 4)]
    # an old tulip_nb thread (a run status, no log), or a manager applied outside an agent: none
    assert tulip_turns(msgs, {RUN_KEY: {"status": "complete"}}) == []
    assert tulip_turns(msgs, {"tulip_nb_compaction_events": []}) == []


@pytest.mark.parametrize("store", ["memory", "file", "file-tulip"])
def test_a_turn_end_leaves_no_iteration_list(store: str, tmp_path: Path) -> None:
    cp: BaseCheckpointer = (
        MemoryCheckpointer()
        if store == "memory"
        else FileCheckpointer(tmp_path, layout="tulip" if store == "file-tulip" else "history")
    )
    run_turns(cp, ["Lisbon", "Porto"])
    infos = run_sync(cp.list_checkpoint_infos(THREAD, limit=None))
    by_source: dict[str, list[str]] = {}
    for i in infos:
        by_source.setdefault(str(i.metadata.get(SOURCE_KEY)), []).append(i.checkpoint_id)
    assert len(by_source["final"]) == 2 and len(by_source["iteration"]) == 4
    for cid in by_source["final"]:
        state = run_sync(cp.load(THREAD, cid))
        assert state is not None and ITER_KEY not in state.metadata
    # an iteration save names itself and the turn's earlier ones, as tulip's do (a crash hands
    # them to whatever finishes the turn); what tulip reads is checked in tests/interop
    for cid in by_source["iteration"]:
        state = run_sync(cp.load(THREAD, cid))
        assert state is not None and cid in state.metadata[ITER_KEY]


# -- properties on generated messy threads --------------------------------------------------------

TURN = st.one_of(
    st.tuples(st.just("answered"), st.integers(0, 2)),  # tool rounds, then an answer
    st.tuples(st.just("error"), st.integers(0, 2)),  # tool rounds, then the provider fails
    st.tuples(st.just("tulip"), st.integers(1, 3)),  # a tulip agent's turn of that many calls
)


class Provider:
    """The scripted provider of our agent: each turn's plan, and every request it answered."""

    def __init__(self) -> None:
        self.rounds, self.fail = 0, False
        self.sent: list[list[Message]] = []

    def plan(self, rounds: int, fail: bool) -> None:
        self.rounds, self.fail = rounds, fail

    def __call__(self, messages: list[Message]) -> object:
        if self.rounds == 0 and self.fail:
            raise ModelError("provider 500")
        self.sent.append(list(messages))
        if self.rounds > 0:
            self.rounds -= 1
            return tool_call("get_weather", city=f"c{len(self.sent)}")
        return text("done")


def tulip_writes_a_turn(cp: BaseCheckpointer, n_calls: int) -> None:
    """What tulip does on resuming the thread: append its turn, save, delete the listed saves."""
    latest = run_sync(cp.load(THREAD))
    assert latest is not None
    superseded = list(latest.metadata.get(ITER_KEY) or [])
    state = tulip_turn(latest, n_calls)
    state.metadata.pop(ITER_KEY, None)
    run_sync(cp.save(state, THREAD))
    for cid in superseded:
        run_sync(cp.delete(THREAD, cid))


@settings(max_examples=examples(0.25), deadline=None)
@given(turns=st.lists(TURN, min_size=1, max_size=12), window=st.integers(3, 10))
def test_tulip_calls_are_na_ours_are_what_was_sent(turns: list[tuple[str, int]], window: int) -> None:
    cp = MemoryCheckpointer()
    provider = Provider()
    agent = Agent(
        ScriptedModel(provider),
        [get_weather],
        system_prompt="You are a weather bot.",
        checkpointer=cp,
        conversation_manager=SlidingWindowManager(window_size=window),
        checkpoint_every_n_iterations=1,
    )
    ours: list[bool] = []  # per model call (assistant message): made by our agent
    saves = 0
    for k, (kind, n) in enumerate(turns):
        if kind == "tulip" and saves:
            tulip_writes_a_turn(cp, n)
            ours += [False] * n
            saves += 1
            continue
        provider.plan(n, fail=kind == "error")
        try:
            agent.run_sync(f"question {k}", thread_id=THREAD)
        except ModelError:
            assert kind == "error"
        ours += [True] * (n + (kind != "error"))
        saves += n + 1  # an iteration save per tool round, and the turn's end
    state = run_sync(cp.load(THREAD))
    assert state is not None
    ends = model_calls(state.messages)
    assert len(ends) == len(ours)
    # nothing of ours was deleted (a turn end never names its mid-turn saves) and the chain holds
    assert len(run_sync(cp.list_checkpoints(THREAD, limit=None))) == saves
    verdict = run_sync(verify_thread(cp, THREAD))
    assert verdict.ok, str(verdict)
    views, full = model_views(state), model_views(state, tulip_view="full")
    sent = iter(provider.sent)
    for k, (j, mine) in enumerate(zip(ends, ours, strict=True)):
        if mine:  # exactly what our agent sent, tulip turns before it or not
            assert views[k] == full[k] == next(sent) == model_view(state, call=k)
        else:
            assert views[k] is None and full[k] == list(state.messages[:j])
            assert model_view(state, call=k, tulip_view="full") == full[k]
            with pytest.raises(UserError, match=f"model call {k} "):
                model_view(state, call=k)
    assert next(sent, None) is None
    usage = open_thread(cp, THREAD).usage
    assert [not v for v in usage["context_tokens"].isna()] == ours
