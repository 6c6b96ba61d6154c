"""Turns are first-class: the agent's turn log, split_turns, Thread.turns, fork(turn=), the corpus
summary's outcome counts — on every way a turn can end."""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd
import pytest

from tulip_nb import Agent, tool
from tulip_nb._sync import run_sync
from tulip_nb.core import Message
from tulip_nb.core.errors import CheckpointNotFound, ContextWindowExceeded, UserError
from tulip_nb.core.keys import RUN_KEY, TURNS_KEY
from tulip_nb.core.turns import split_turns, turn_log_for_prefix
from tulip_nb.lab import fork, open_corpus, open_thread
from tulip_nb.lab.controllers._panels import PlayerController
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.models import ModelError, ScriptedModel, text, tool_call
from tulip_nb.tools import Interrupt


@tool
def ask(question: str) -> str:
    """Ask a human."""
    raise Interrupt(question)


@tool
def look(x: int) -> str:
    """Look something up."""
    return f"seen {x}"


def _reply(messages: list[Message]) -> Any:
    last = messages[-1]
    prompt = next(m.content or "" for m in reversed(messages) if m.role == "user")
    if "fail" in prompt:
        raise ModelError("provider 500")
    if "loop" in prompt:
        return tool_call("look", x=len(messages))
    if "ask" in prompt and last.role == "user":
        return tool_call("ask", question="ok?")
    return text("ok")


def _messy(cp: MemoryCheckpointer) -> Agent:
    """A thread with every outcome: answered, error, context_exceeded, max_iterations,
    interrupted (answered, then one left pending)."""
    agent = Agent(
        model=ScriptedModel(_reply),
        tools=[ask, look],
        checkpointer=cp,
        system_prompt="Be brief.",
        max_iterations=2,
        conversation_manager=LLMCompactor(context_length=400),
    )
    agent.run_sync("one", thread_id="t")
    with pytest.raises(ModelError):
        agent.run_sync("fail please", thread_id="t")
    with pytest.raises(ContextWindowExceeded):
        agent.run_sync("huge " + "word " * 2000, thread_id="t")
    agent.run_sync("loop forever", thread_id="t")
    assert agent.run_sync("ask someone", thread_id="t").stop_reason == "interrupted"
    agent.resume_sync("yes", thread_id="t")
    agent.run_sync("three", thread_id="t")
    assert agent.run_sync("ask again", thread_id="t").stop_reason == "interrupted"
    return agent


EXPECTED = ["answered", "error", "context_exceeded", "max_iterations", "answered", "answered", "interrupted"]


def test_every_outcome_is_recorded_and_read_back() -> None:
    cp = MemoryCheckpointer()
    _messy(cp)
    th = open_thread(cp, "t")
    turns = th.turn_list
    assert [t.outcome for t in turns] == EXPECTED
    assert all(t.recorded for t in turns)
    assert turns[1].error_class == "ModelError" and turns[1].error == "ModelError: provider 500"
    assert turns[2].error_class == "ContextWindowExceeded"
    assert turns[3].model_calls == 2  # it stopped at max_iterations=2
    assert turns[4].interrupts == 1  # went on from one answered interrupt
    # turns partition the messages after the system prompt
    msgs = th.final_messages
    assert turns[0].first == 1 and turns[-1].last == len(msgs) - 1
    assert all(a.last + 1 == b.first for a, b in itertools.pairwise(turns))
    assert all(msgs[t.first].role == "user" for t in turns)


def test_thread_frames_carry_the_turn() -> None:
    cp = MemoryCheckpointer()
    _messy(cp)
    th = open_thread(cp, "t")
    frame = th.turns
    assert list(frame["outcome"]) == EXPECTED
    assert frame["error"].isna().sum() == 5
    assert int(frame["tokens"].sum()) == int(th.messages["tokens"].iloc[1:].sum())
    assert pd.isna(th.messages["turn"].iloc[0])  # the system prompt is in no turn
    for t in th.turn_list:
        assert set(th.messages["turn"].iloc[t.first : t.last + 1]) == {t.turn}
    usage = th.usage
    assert list(usage.groupby("turn").size()) == [t.model_calls for t in th.turn_list if t.model_calls]
    ck = th.checkpoints
    assert ck["turn"].notna().all()
    assert list(ck["turn"]) == sorted(ck["turn"])
    assert "failed={'error': 1, 'context_exceeded': 1, 'max_iterations': 1, 'interrupted': 1}" in repr(th)
    assert "ended without an answer" in th._repr_html_()


def test_fork_by_turn_cuts_before_the_user_message_and_keeps_whole_turns_records() -> None:
    cp = MemoryCheckpointer()
    agent = _messy(cp)
    th = open_thread(cp, "t")
    b = fork(th, turn=3, new_thread_id="b")
    assert b.final_messages == th.final_messages[: th.turn_list[3].first]
    assert [t.outcome for t in b.turn_list] == EXPECTED[:3]
    agent.run_sync("three", thread_id="b")
    assert [t.outcome for t in open_thread(cp, "b").turn_list] == [*EXPECTED[:3], "answered"]
    assert fork(th, turn=-1, new_thread_id="c").final_messages == th.final_messages[: th.turn_list[-1].first]
    with pytest.raises(CheckpointNotFound, match="no turn 99"):
        fork(th, turn=99)
    with pytest.raises(UserError, match="exactly one"):
        fork(th, at=3, turn=1)
    with pytest.raises(UserError, match="exactly one"):
        fork(th)


def test_a_fork_inside_a_turn_marks_it_running_not_tulip() -> None:
    cp = MemoryCheckpointer()
    _messy(cp)
    th = open_thread(cp, "t")
    loop = th.turn_list[3]  # max_iterations: user, call, result, call, result
    b = fork(th, at=loop.first + 2, new_thread_id="b")
    assert [t.outcome for t in b.turn_list] == [*EXPECTED[:3], None]
    assert b.latest.state.metadata[RUN_KEY]["status"] == "running"


def test_turns_written_by_tulip_and_threads_without_a_log() -> None:
    msgs = [Message.system("s"), Message.user("a"), Message.assistant("b"), Message.user("c"), Message.assistant("d")]
    # tulip wrote the whole thread: no tulip_nb keys at all
    assert [t.outcome for t in split_turns(msgs, {})] == ["tulip", "tulip"]
    # tulip_nb ran turn 0, a tulip agent turn 1 (it keeps unknown keys, writes no record)
    meta = {TURNS_KEY: [{"at": 1, "outcome": "answered"}], RUN_KEY: {"status": "complete"}}
    assert [t.outcome for t in split_turns(msgs, meta)] == ["answered", "tulip"]
    # an old tulip_nb thread (run status, no log): answers are read off, the last from the status
    old = {RUN_KEY: {"status": "error", "error": "ModelError: boom"}}
    turns = split_turns([*msgs, Message.user("e")], old)
    assert [t.outcome for t in turns] == ["answered", "answered", "error"] and not turns[2].recorded
    # a middle turn that ended without an answer in an old thread: unknown, never a guess
    gap = [Message.user("a"), Message.user("b"), Message.assistant("c")]
    assert [t.outcome for t in split_turns(gap, {RUN_KEY: {"status": "complete"}})] == [None, "answered"]


def test_turn_log_for_prefix_drops_a_cut_turn() -> None:
    msgs = [Message.user("a"), Message.assistant("b"), Message.user("c"), Message.assistant("d")]
    meta = {TURNS_KEY: [{"at": 0, "outcome": "answered"}, {"at": 2, "outcome": "answered"}]}
    assert [r["at"] for r in turn_log_for_prefix(meta, msgs, 4) or []] == [0, 2]
    assert [r["at"] for r in turn_log_for_prefix(meta, msgs, 3) or []] == [0]
    assert [r["at"] for r in turn_log_for_prefix(meta, msgs, 2) or []] == [0]
    assert turn_log_for_prefix({}, msgs, 2) is None


def test_corpus_summary_counts_turns_by_outcome() -> None:
    cp = MemoryCheckpointer()
    _messy(cp)
    Agent(model=ScriptedModel(_reply), checkpointer=cp).run_sync("one", thread_id="u")
    row = open_corpus(cp).summary().set_index("thread_id").loc["t"]
    assert row["turns"] == 7 and row["failed_turns"] == 4
    assert (row["turns_answered"], row["turns_error"], row["turns_context_exceeded"]) == (3, 1, 1)
    assert (row["turns_max_iterations"], row["turns_interrupted"], row["turns_tulip"], row["turns_unknown"]) == (
        1,
        1,
        0,
        0,
    )


def test_the_player_says_a_tulip_call_is_unknown() -> None:
    cp = MemoryCheckpointer()
    agent = Agent(model=ScriptedModel(_reply), checkpointer=cp)
    agent.run_sync("one", thread_id="t")
    state = run_sync(cp.load("t"))
    assert state is not None
    # a tulip agent's turn: messages appended, no record of its own (it keeps the log as it found it)
    state.messages = [*state.messages, Message.user("two"), Message.assistant("tulip says hi")]
    run_sync(cp.save(state, "t"))
    player = PlayerController(open_thread(cp, "t"))
    assert [player.tulip_call(k) for k in range(2)] == [False, True]
    history, marks, view = player.marks(1)
    assert set(marks) == {"unknown"} and view == [] and len(history) == 3
    player.position = 1
    assert "made by a tulip agent" in player.html()
    assert player.marks(0)[1] == ["kept"]
