"""Thread handles, forks, sweeps and diffs over a recorded thread."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tulip_nb.core._messages import Message
from tulip_nb.core.errors import CheckpointNotFound, UserError
from tulip_nb.core.state import AgentState
from tulip_nb.lab import diff_threads, fork, open_thread, sweep, threads
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import model_view
from tulip_nb.models import ScriptedModel
from tulip_nb.tokens import get_counter

from .conftest import THREAD, TURNS, RaisingModel, Recorded, make_agent, make_reply


def test_thread_frames(recorded: Recorded) -> None:
    t = recorded.thread
    msgs = t.final_messages
    df = t.messages
    assert len(df) == len(msgs) == 1 + 4 * TURNS
    assert list(df["role"][:3]) == ["system", "user", "assistant"]
    assert list(df["tokens"]) == get_counter().message_counts(msgs)
    assert df["tool_calls"][2].startswith("lookup_order(")
    ck = t.checkpoints
    assert len(ck) == TURNS and list(ck["messages"]) == [1 + 4 * (i + 1) for i in range(TURNS)]
    assert list(ck["parent"][1:]) == list(ck["id"][:-1])  # lineage within the thread
    # each message first appears in the checkpoint of its turn
    assert df["checkpoint"][4] == ck["id"][0] and df["checkpoint"][5] == ck["id"][1]
    assert df["checkpoint"].iloc[-1] == ck["id"].iloc[-1]
    assert t.model_view(5) == model_view(t.state(), call=5)
    assert len(t.events) >= 1  # compaction fired in the recording
    rows = threads(recorded.cp)
    assert list(rows["thread_id"]) == [THREAD] and rows["messages"][0] == len(msgs)


def test_repr_html_escapes_content() -> None:
    import asyncio

    cp = MemoryCheckpointer()
    state = AgentState(messages=[Message.user("<script>alert('x')</script> & co")])
    asyncio.run(cp.save(state, "<t>"))
    html = open_thread(cp, "<t>")._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html and "&amp; co" in html
    assert "&lt;t&gt;" in html


def test_errors_name_thread_and_point(recorded: Recorded) -> None:
    with pytest.raises(CheckpointNotFound, match="no-such-thread"):
        open_thread(recorded.cp, "no-such-thread")
    t = recorded.thread
    with pytest.raises(CheckpointNotFound, match=f"{THREAD}.*not-a-checkpoint"):
        t.state("not-a-checkpoint")
    with pytest.raises(CheckpointNotFound, match=f"past the end.*{THREAD}.*at 9999"):
        fork(t, at=9999)
    with pytest.raises(CheckpointNotFound, match="not-a-checkpoint"):
        fork(t, at="not-a-checkpoint")
    with pytest.raises(UserError, match="at="):
        fork(t, at=1.5)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match=THREAD):
        t.model_view(10_000)


def test_fork_then_diff_reports_the_edit_and_what_followed(recorded: Recorded) -> None:
    t = recorded.thread
    users = [i for i, m in enumerate(t.final_messages) if m.role == "user"]
    at = users[4]
    b = fork(t, at=at, edit="Please check ord-9999 <urgently> & now.", new_thread_id="what-if")
    assert b.thread_id == "what-if" and len(b.final_messages) == at + 1
    first = b.infos[-1].metadata
    assert first["forked_from"] == THREAD and first["fork_message_index"] == at
    assert first["parent_checkpoint_id"] == t.checkpoints["id"][3]  # the end of turn 4
    agent = make_agent(recorded.cp, ScriptedModel(make_reply("Live")))
    agent.resume_sync(thread_id="what-if")
    b = open_thread(recorded.cp, "what-if")
    d = diff_threads(t, b)
    assert d.method == "lineage" and d.ancestor == (THREAD, first["parent_checkpoint_id"])
    assert d.divergence_index == at and d.divergence_call == 8
    assert d.changes[0].kind == "changed" and d.changes[0].index_a == at == d.changes[0].index_b
    assert "text changed" in d.changes[0].details
    assert {c.index_b for c in d.changes if c.index_b is not None} == set(range(at, len(b.final_messages)))
    assert {c.index_a for c in d.changes if c.index_a is not None} == set(range(at, len(t.final_messages)))
    assert any("arguments changed: order_id" in x for c in d.changes for x in c.details)
    assert any("tool result changed" in c.details for c in d.changes)
    assert "ord-9999" in d.final_answer_diff()
    assert "diverge at message" in d.summary()
    frame = d.to_frame(text_diff=True)
    assert len(frame) == len(d.changes) and frame["kind"][0] == "changed"
    html = d._repr_html_()
    assert "&lt;urgently&gt; &amp; now" in html and "<urgently>" not in html
    lineage = t.lineage
    assert list(lineage["thread_id"]) == ["what-if"] and lineage["relation"][0] == "fork"
    assert b.lineage["relation"][0] == "parent"


def test_diff_without_lineage_aligns_by_content() -> None:
    import asyncio

    cp = MemoryCheckpointer()
    shared = [Message.system("s"), Message.user("u1"), Message.assistant("a1")]
    asyncio.run(cp.save(AgentState(messages=[*shared, Message.user("x")]), "a"))
    asyncio.run(cp.save(AgentState(messages=[*shared, Message.user("y"), Message.assistant("z")]), "b"))
    d = diff_threads(open_thread(cp, "a"), open_thread(cp, "b"))
    assert d.method == "content" and d.ancestor is None and d.divergence_index == 3
    assert [(c.kind, c.index_a, c.index_b) for c in d.changes] == [("changed", 3, 3), ("added", None, 4)]
    same = diff_threads(open_thread(cp, "a"), open_thread(cp, "a"))
    assert same.identical and "identical" in same.summary()


def test_sweep_runs_one_branch_per_variant(recorded: Recorded) -> None:
    t = recorded.thread
    at = [i for i, m in enumerate(t.final_messages) if m.role == "user"][2]
    frame = sweep(
        t,
        at=at,
        agent=recorded.agent,
        variants={
            "live": {"model": ScriptedModel(make_reply("Live"))},
            "edited": {"model": ScriptedModel(make_reply("E")), "edit": "Please check ord-7777."},
            "offline db": {
                "model": ScriptedModel(make_reply("O")),
                "tool_override": {"lookup_order": lambda order_id: "db offline"},
            },
            "broken": {"model": RaisingModel()},
        },
    )
    rows = frame.set_index("variant")
    assert rows.loc["live", "final_answer"] == "Live: ord-4802 has shipped."
    assert rows.loc["edited", "final_answer"] == "E: ord-7777 has shipped."
    assert rows.loc["offline db", "tool_trajectory"] == ["lookup_order"]
    assert rows.loc["live", "iterations"] == 2 and not isinstance(rows.loc["live", "error"], str)
    assert "AssertionError" in rows.loc["broken", "error"]
    for tid in rows["thread_id"]:
        assert open_thread(recorded.cp, tid).infos[-1].metadata["forked_from"] == THREAD
    with pytest.raises(UserError, match="unknown keys"):
        sweep(t, at=at, agent=recorded.agent, variants={"x": {"temperature": 0}})


def test_lab_never_imports_ipywidgets() -> None:
    code = (
        "import sys, tulip_nb.lab as lab\n"
        "[getattr(lab, n) for n in lab.__all__]\n"
        "assert 'ipywidgets' not in sys.modules, 'ipywidgets imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
