"""A tool call is its position: the lab replays, forks and diffs long threads whose provider reuses
call ids (``call_0`` in every response) or sends empty ones, and treats a copy whose store reordered
keys (PostgreSQL ``jsonb``) as identical to its source."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tulip_nb.agent import Agent
from tulip_nb.core._messages import Message, ToolCall
from tulip_nb.core.calls import answered_by, execution_position
from tulip_nb.core.canonical import message_key
from tulip_nb.core.state import AgentState
from tulip_nb.lab import Replay, diff_threads, export_threads, fork, open_thread
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint
from tulip_nb.models import ReplayModel, ScriptedModel, text, tool_call, tool_calls
from tulip_nb.models._base import ModelResponse, Usage
from tulip_nb.tools import Tool, tool

from .conftest import RaisingModel

TURNS = 120
TID = "reused-ids"


def make_tools() -> list[Tool]:
    """``lookup`` answers the same order differently each time; ``fail`` always raises;
    ``status`` is idempotent (a repeated call gets the recorded answer of the same arguments)."""
    seen = {"n": 0}

    @tool
    def lookup(order_id: str) -> str:
        """Look an order up.

        Args:
            order_id: The order id.
        """
        seen["n"] += 1
        return f"{order_id}: version {seen['n']}"

    @tool
    def fail(why: str) -> str:
        """Always fails.

        Args:
            why: What to fail at.
        """
        raise ValueError(f"cannot {why}")

    @tool(idempotent=True)
    def status(order_id: str) -> str:
        """The order's status (idempotent).

        Args:
            order_id: The order id.
        """
        seen["n"] += 1
        return f"{order_id}: status at {seen['n']}"

    return [lookup, fail, status]


def _turn_of(messages: list[Message]) -> tuple[int, int]:
    """(turn number from the last user prompt, model calls already made in this turn)."""
    made = 0
    for m in reversed(messages):
        if m.role == "user":
            found = re.search(r"question (\d+)", m.content or "")
            return (int(found.group(1)) if found else 0), made
        made += m.role == "assistant"
    return 0, made


def reusing_reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
    """A provider that numbers the calls of every response from ``call_0``."""
    n, made = _turn_of(messages)
    oid = f"ord-{n % 4}"
    kind = n % 6
    if made == 0:
        if kind == 0:  # the same call twice in one response, same id
            return tool_calls(
                ToolCall(id="call_0", name="lookup", arguments={"order_id": oid}),
                ToolCall(id="call_0", name="lookup", arguments={"order_id": oid}),
            )
        if kind == 1:  # parallel calls, one of them an error
            return tool_calls(
                ToolCall(id="call_0", name="lookup", arguments={"order_id": oid}),
                ToolCall(id="call_1", name="fail", arguments={"why": oid}),
            )
        if kind == 2:
            return tool_call("fail", call_id="call_0", why=oid)
        if kind == 3:
            return tool_call("lookup", call_id="call_0", order_id=oid)
        if kind == 4:
            return tool_call("status", call_id="call_0", order_id=oid)
        return text(f"turn {n}: nothing to look up")
    if kind == 3 and made == 1:  # the identical call again in the same turn: another answer
        return tool_call("lookup", call_id="call_0", order_id=oid)
    return text(f"turn {n}: {messages[-1].content}")


class EmptyIdModel:
    """A provider that sends no tool-call ids at all (ScriptedModel would fill them in)."""

    name = "empty-ids"

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kw: Any) -> ModelResponse:
        reply = reusing_reply(messages, tools)
        calls = [c.model_copy(update={"id": ""}) for c in reply.tool_calls]
        return ModelResponse(reply.model_copy(update={"tool_calls": calls}), Usage(requests=1))


def record(cp: BaseCheckpointer, model: Any, tid: str = TID, turns: int = TURNS) -> Agent:
    agent = Agent(model, make_tools(), system_prompt="You look orders up.", checkpointer=cp)
    for i in range(turns):
        agent.run_sync(f"question {i}: where is my order?", thread_id=tid)
    return agent


def assert_hard_thread(msgs: list[Message]) -> None:
    """The record really has what makes id-pairing fail: reused ids, parallel calls, errors,
    and the same tool + arguments answered differently."""
    ids = [c.id for m in msgs for c in m.tool_calls]
    assert len(ids) >= 130 and len(set(ids)) <= 2
    assert any(len(m.tool_calls) == 2 for m in msgs)
    assert sum((m.content or "").startswith("Error:") for m in msgs if m.role == "tool") > 30
    answers: dict[str, set[str]] = {}
    for t, ref in enumerate(answered_by(msgs)):
        if ref is not None:
            call = msgs[ref[0]].tool_calls[ref[1]]
            if call.name == "lookup":
                answers.setdefault(call.arguments["order_id"], set()).add(msgs[t].content or "")
    assert all(len(v) > 10 for v in answers.values())


@pytest.fixture(scope="module")
def reused() -> Iterator[tuple[MemoryCheckpointer, Agent]]:
    cp = MemoryCheckpointer()
    yield cp, record(cp, ScriptedModel(reusing_reply))


# -- replay -------------------------------------------------------------------------------------
def test_replay_without_an_agent_is_faithful_on_a_long_thread_with_reused_ids(
    reused: tuple[MemoryCheckpointer, Agent],
) -> None:
    cp, _ = reused
    t = open_thread(cp, TID)
    msgs = t.final_messages
    assert t.n_calls >= 240
    assert_hard_thread(msgs)
    r = Replay(t)
    state = r.run_to()
    assert len(r.divergences) == 0, r.divergences.head().to_dict("records")
    assert len(r.steps) == r.total_steps == t.n_calls
    assert state is not None and len(state.messages) == len(msgs)
    assert all(message_key(a) == message_key(b) for a, b in zip(state.messages, msgs, strict=True))


@pytest.mark.slow
def test_replay_with_an_agent_and_recorded_tools_never_calls_anything(
    reused: tuple[MemoryCheckpointer, Agent], tmp_path: Path
) -> None:
    cp, _ = reused
    # through a file store: the thread as loaded from disk
    fcp = FileCheckpointer(tmp_path / "threads", fsync=False)
    report = export_threads(cp, fcp, [TID], progress=False)
    assert report["verified"].all()
    t = open_thread(fcp, TID)
    calls = {"n": 0}

    def counted(name: str) -> Tool:
        def never(**kw: Any) -> str:
            calls["n"] += 1
            raise AssertionError(f"{name} ran")

        return Tool(never, name=name, parameters={"type": "object", "properties": {}})

    agent = Agent(RaisingModel(), [counted("lookup"), counted("fail"), counted("status")])
    r = Replay(t, agent=agent, tools="recorded")
    r.run_to()
    assert len(r.divergences) == 0 and len(r.steps) == t.n_calls and calls["n"] == 0
    # the real (fresh) tools reproduce the record too: same answers in the same order
    r2 = Replay(t, agent=Agent(RaisingModel(), make_tools()))
    r2.run_to()
    assert len(r2.divergences) == 0


def test_replay_of_a_thread_with_empty_ids() -> None:
    cp = MemoryCheckpointer()
    record(cp, EmptyIdModel(), "empty-ids", turns=100)
    t = open_thread(cp, "empty-ids")
    assert {c.id for m in t.final_messages for c in m.tool_calls} == {""}
    assert_hard_thread(t.final_messages)
    r = Replay(t)
    r.run_to()
    assert len(r.divergences) == 0 and len(r.steps) == t.n_calls


def test_replay_model_compares_tool_results_by_position(reused: tuple[MemoryCheckpointer, Agent]) -> None:
    cp, _ = reused
    t = open_thread(cp, TID)
    r = Replay(t)
    r.run_to()
    assert r.model.divergences == []
    # a strict ReplayModel over the same record, fed a copy whose ids were rewritten: still the same input
    msgs = t.final_messages
    strict = ReplayModel(t, strict=True)
    ends = [i for i, m in enumerate(msgs) if m.role == "assistant"]
    import asyncio

    for i in ends[:60]:
        renamed = [m.model_copy(update={"tool_call_id": "x"}) if m.role == "tool" else m for m in msgs[:i]]
        asyncio.run(strict.complete(renamed, []))
    assert strict.divergences == []


def test_replay_still_reports_a_different_tool_result(reused: tuple[MemoryCheckpointer, Agent]) -> None:
    cp, _ = reused
    t = open_thread(cp, TID)
    tools = make_tools()

    @tool
    def lookup(order_id: str) -> str:
        """Changed.

        Args:
            order_id: The order id.
        """
        return "changed"

    r = Replay(t, agent=Agent(RaisingModel(), [lookup, *tools[1:]]))
    r.run_to(12)
    d = r.divergences
    assert len(d) and set(d["kind"]) == {"tool result"} and "changed" in set(d["actual"])
    first = int(d["index"].iloc[0])
    assert t.final_messages[first].role == "tool"


# -- fork: the executions kept are those of the calls in the branch, by position -------------------
def test_fork_mid_turn_keeps_the_executions_of_its_calls_only() -> None:
    cp = MemoryCheckpointer()
    record(cp, ScriptedModel(reusing_reply), "mid", turns=10)  # the last turn (9) looks up twice
    t = open_thread(cp, "mid")
    msgs = t.final_messages
    last_user = max(i for i, m in enumerate(msgs) if m.role == "user")
    results = [i for i in range(last_user, len(msgs)) if msgs[i].role == "tool"]
    assert len(results) == 2 and {msgs[i].tool_call_id for i in results} == {"call_0"}
    full = t.latest.state.tool_executions
    assert [execution_position(ex) for ex in full] == [(results[0] - 1, 0), (results[1] - 1, 0)]
    b = fork(t, at=results[0], new_thread_id="mid-fork")
    kept = b.latest.state.tool_executions
    assert len(kept) == 1 and execution_position(kept[0]) == (results[0] - 1, 0)
    assert kept[0].result == msgs[results[0]].content
    # forking at an earlier turn keeps none of the last turn's executions
    assert fork(t, at=results[0] - 8, new_thread_id="early-fork").latest.state.tool_executions == []
    # the branch resumes the turn and records the second call at its own position
    agent = Agent(ScriptedModel(reusing_reply), make_tools(), system_prompt="You look orders up.", checkpointer=cp)
    agent.resume_sync(thread_id="mid-fork")
    after = open_thread(cp, "mid-fork").latest.state
    positions = [execution_position(ex) for ex in after.tool_executions]
    assert positions == [(results[0] - 1, 0), (results[1] - 1, 0)]


# -- one notion of equality ------------------------------------------------------------------------
def args_reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
    n, made = _turn_of(messages)
    if made == 0:
        return tool_call(
            "lookup", call_id="call_0", z=1, a={"y": 2, "b": 3}, m=[{"q": 1.5, "c": None}], order_id=f"o{n}"
        )
    return text(f"done {n}")


def record_args_thread(cp: BaseCheckpointer, tid: str = "args", turns: int = 23) -> None:
    @tool
    def lookup(order_id: str, z: int = 0, a: dict[str, int] | None = None, m: list[Any] | None = None) -> str:
        """Look up.

        Args:
            order_id: The order.
            z: A number.
            a: A mapping.
            m: A list.
        """
        return f"{order_id}: {z} {a} {m}"

    agent = Agent(ScriptedModel(args_reply), [lookup], system_prompt="sys", checkpointer=cp)
    for i in range(turns):
        agent.run_sync(f"question {i}", thread_id=tid)


def _reorder(value: Any) -> Any:
    """What a jsonb store does to a JSON value: other key order (here: reversed), and integral
    floats spelled as ints."""
    if isinstance(value, dict):
        return {k: _reorder(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reorder(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class JsonbLikeCheckpointer(MemoryCheckpointer):
    """Hands back every state with its keys reordered, as PostgreSQL's ``jsonb`` does."""

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        ck = await super().load_checkpoint(thread_id, checkpoint_id)
        if ck is None:
            return None
        data = _reorder(orjson.loads(orjson.dumps(ck.state.model_dump(mode="json"))))
        state = AgentState.model_validate(data)
        return Checkpoint(ck.checkpoint_id, ck.thread_id, ck.created_at, state, ck.metadata, ck.extra)


def test_a_reordered_copy_is_identical_and_verifies() -> None:
    src = MemoryCheckpointer()
    record_args_thread(src)
    dst = JsonbLikeCheckpointer()
    report = export_threads(src, dst, ["args"], progress=False)
    assert report["verified"].all() and report["error"].isna().all(), report.to_dict("records")
    a, b = open_thread(src, "args"), open_thread(dst, "args")
    ma, mb = a.final_messages, b.final_messages
    assert any(x.json_bytes() != y.json_bytes() for x, y in zip(ma, mb, strict=True))  # really reordered
    d = diff_threads(a, b)
    assert d.identical and d.changes == [] and "identical" in d.summary(), d.summary()
    assert d.ancestor is not None and d.method == "lineage"  # the copy keeps the checkpoint ids
    # the same content in a thread of its own (no shared checkpoints): identical by content
    other = MemoryCheckpointer()
    asyncio_run(other.save(b.latest.state, "fresh"))
    d2 = diff_threads(a, open_thread(other, "fresh"))
    assert d2.identical and d2.ancestor is None
    # a real change is still one change, with the argument named
    changed = [*mb]
    k = next(i for i, m in enumerate(mb) if m.tool_calls)
    call = mb[k].tool_calls[0]
    changed[k] = mb[k].model_copy(
        update={"tool_calls": [call.model_copy(update={"arguments": {**call.arguments, "z": 2}})]}
    )
    asyncio_run(other.save(AgentState(messages=changed), "changed"))
    d3 = diff_threads(a, open_thread(other, "changed"))
    assert [c.kind for c in d3.changes] == ["changed"] and d3.changes[0].details == ["lookup arguments changed: z"]


def asyncio_run(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)


@pytest.mark.service("postgresql")
def test_file_to_postgresql_copy_is_identical_and_verifies(tmp_path: Path) -> None:
    from tests.backends.factories.kv import PG_DSN, drop_pg_table, unique
    from tests.conftest import require_service

    require_service("postgresql", "127.0.0.1", 5432)
    from tulip_nb.memory.backends import PostgreSQLBackend, StorageBackendAdapter

    src = FileCheckpointer(tmp_path / "threads", fsync=False)
    record_args_thread(src, "pg-args", turns=35)
    table = unique("tnb_pos_")
    # tulip's key-value layout itself (JSONB, keys reordered), not the history (which keeps the bytes)
    pg = StorageBackendAdapter(PostgreSQLBackend(dsn=PG_DSN, table_name=table))
    try:
        report = export_threads(src, pg, ["pg-args"], progress=False)
        assert report["verified"].all() and report["error"].isna().all(), report.to_dict("records")
        a, b = open_thread(src, "pg-args"), open_thread(pg, "pg-args")
        assert len(a.final_messages) == len(b.final_messages) > 69
        assert any(x.json_bytes() != y.json_bytes() for x, y in zip(a.final_messages, b.final_messages, strict=True))
        d = diff_threads(a, b)
        assert d.identical and "identical" in d.summary(), d.summary()
        assert d.ancestor is not None
        # exporting again: everything is already there, and it still verifies
        again = export_threads(src, pg, ["pg-args"], progress=False)
        assert again["verified"].all() and int(again["copied"].sum()) == 0
    finally:
        asyncio_run(pg.close())
        asyncio_run(drop_pg_table(table))


def test_a_result_of_a_changed_call_is_labelled_as_such_not_as_another_call() -> None:
    """Two threads that part at a call with other arguments: the result row says it answers the
    changed call; only another position or tool is "another call"."""
    import asyncio

    from tulip_nb.core import AgentState, Message, ToolCall
    from tulip_nb.lab import diff_threads
    from tulip_nb.memory.backends._memory import MemoryCheckpointer

    def thread(order: str, tool: str = "lookup") -> AgentState:
        return AgentState(
            messages=[
                Message.user("where is it?"),
                Message.assistant(None, [ToolCall(id="call_0", name=tool, arguments={"order": order})]),
                Message.tool(f"{order}: shipped", tool_call_id="call_0", name=tool),
            ]
        )

    cp = MemoryCheckpointer()
    asyncio.run(cp.save(thread("ord-1"), "a"))
    asyncio.run(cp.save(thread("ord-2"), "b"))
    asyncio.run(cp.save(thread("ord-1", tool="track"), "c"))
    rows = diff_threads("a", "b", checkpointer=cp).to_frame()
    result = rows[rows["index_a"] == 2].iloc[0]
    assert "answers the changed call" in result["details"] and "answers another call" not in result["details"]
    other = diff_threads("a", "c", checkpointer=cp).to_frame()
    assert "answers another call" in other[other["index_a"] == 2].iloc[0]["details"]
