"""The agent loop: turns, saves, idempotency, interrupts, stepping, thread operations, hooks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.agent import (
    Agent,
    Interrupt,
    NotACheckpointer,
    NothingToResume,
    NullManager,
    ResumeNeedsResponse,
    tool,
)
from tulip_nb.core import AgentState, CheckpointConflict, CheckpointNotFound, Message, UserError
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.managers import STATE_KEY, ConversationManager
from tulip_nb.models import ContextWindowExceeded, ModelError, ModelResponse, ScriptedModel, text, tool_call

RUNS: list[str] = []


@tool(idempotent=True)
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order."""
    RUNS.append(f"lookup:{order_id}")
    return {"order_id": order_id, "status": "delivered"}


@tool
def flaky(x: int) -> int:
    """Fails."""
    raise RuntimeError(f"boom {x}")


@tool
def ask_manager(amount: float) -> str:
    """Needs approval."""
    raise Interrupt(f"Approve a refund of {amount}?", payload={"amount": amount})


@tool
def finish(summary: str) -> str:
    """Terminal tool."""
    return f"finished: {summary}"


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


def make(responses: Any, **kw: Any) -> Agent:
    kw.setdefault("conversation_manager", NullManager())
    kw.setdefault("tools", [lookup_order, flaky, ask_manager, finish])
    return Agent(ScriptedModel(responses), **kw)


async def test_one_turn_with_a_tool() -> None:
    agent = make([tool_call("lookup_order", order_id="ord-1"), text("Eligible.")], system_prompt="You help.")
    result = await agent.run("Refund ord-1?")
    assert result.text == "Eligible." and result.stop_reason == "complete" and result.iterations == 2
    assert [m.role for m in result.state.messages] == ["system", "user", "assistant", "tool", "assistant"]
    [ex] = result.tool_calls
    assert ex.result == '{"order_id":"ord-1","status":"delivered"}' and ex.error is None
    assert result.usage.requests == 2 and result.state.total_tokens_used == result.usage.total_tokens
    assert result.state.reasoning_steps[0].iteration == 1 and result.state.tool_history == ["lookup_order"]
    assert str(result) == "Eligible."


async def test_tool_errors_are_results_not_crashes() -> None:
    agent = make([tool_call("flaky", x=1), tool_call("nope"), tool_call("lookup_order", order_id=5), text("ok")])
    result = await agent.run("go")
    errors = [ex.error for ex in result.tool_calls]
    assert errors[0] == "RuntimeError: boom 1"
    assert errors[1] is not None and errors[1].startswith("ToolNotFound: no tool named 'nope'")
    assert errors[2] is not None and errors[2].startswith("ToolArgumentsInvalid")
    tool_msgs = [m.content for m in result.state.messages if m.role == "tool"]
    assert tool_msgs[0] == "Error: RuntimeError: boom 1"
    assert result.stop_reason == "complete"


async def test_terminal_tool_and_max_iterations() -> None:
    result = await make([tool_call("finish", summary="done"), text("never")]).run("x")
    assert result.stop_reason == "terminal_tool" and result.iterations == 1
    loop = await Agent(
        ScriptedModel([tool_call("flaky", x=1)], repeat_last=True),
        [flaky],
        max_iterations=3,
        conversation_manager=NullManager(),
    ).run("x")
    assert loop.stop_reason == "max_iterations" and loop.iterations == 3


async def test_saves_at_end_only_by_default_and_every_iteration_when_asked() -> None:
    cp = MemoryCheckpointer()
    script = [tool_call("flaky", x=1), tool_call("flaky", x=2), text("done")]
    await make(script, checkpointer=cp).run("a", thread_id="t")
    assert len(await cp.list_checkpoints("t")) == 1
    cp2 = MemoryCheckpointer()
    result = await make(script, checkpointer=cp2, checkpoint_every_n_iterations=1).run("a", thread_id="t")
    infos = await cp2.list_checkpoint_infos("t")
    assert [i.metadata["source"] for i in infos] == ["final", "iteration", "iteration"]
    # lineage: each save's parent is the previous one
    assert infos[0].parent_checkpoint_id == infos[1].checkpoint_id
    assert infos[1].parent_checkpoint_id == infos[2].checkpoint_id and infos[2].parent_checkpoint_id is None
    # mid-turn saves list the turn's iteration saves (tulip's key); the turn end clears it, so a
    # tulip agent resuming the thread does not take them for a crashed turn's saves and delete them
    mid = await cp2.load_checkpoint("t", infos[1].checkpoint_id)
    assert mid is not None
    assert mid.state.metadata["_tulip_iteration_checkpoints"] == [infos[2].checkpoint_id, infos[1].checkpoint_id]
    assert "_tulip_iteration_checkpoints" not in result.state.metadata
    assert result.checkpoint_id == infos[0].checkpoint_id


async def test_a_failed_run_is_saved_with_the_error() -> None:
    cp = MemoryCheckpointer()
    agent = make([tool_call("flaky", x=1)], checkpointer=cp)  # the script runs out on call 2
    with pytest.raises(ModelError, match="ran out"):
        await agent.run("a", thread_id="t")
    state = await cp.load("t")
    assert state is not None and state.errors and state.errors[0].startswith("ModelError: ScriptedModel ran out")
    assert state.metadata["_tulip_nb_run"]["status"] == "error"
    with pytest.raises(NothingToResume):
        await agent.resume(thread_id="t")


async def test_second_turn_resets_per_turn_fields_and_keeps_the_rest() -> None:
    cp = MemoryCheckpointer()
    agent = make(
        [tool_call("lookup_order", order_id="ord-1"), text("one"), text("two")], checkpointer=cp, system_prompt="v1"
    )
    await agent.run("first", thread_id="t", metadata={"user": "u42"})
    agent.system_prompt = "v2"
    second = await agent.run("second", thread_id="t", metadata={"ticket": 8912})
    s = second.state
    assert s.iteration == 1 and s.tool_executions == [] and s.reasoning_steps == [] and s.errors == []
    assert s.metadata["user"] == "u42" and s.metadata["ticket"] == 8912
    assert s.messages[0].content == "v2" and [m.content for m in s.messages[-2:]] == ["second", "two"]
    assert len(s.messages) == 7


async def test_dangling_tool_calls_are_answered_before_a_new_turn() -> None:
    cp = MemoryCheckpointer()
    dangling = AgentState(messages=[Message.user("q"), tool_call("lookup_order", order_id="1", call_id="call_x")])
    await cp.save(dangling, "t")
    result = await make([text("fine")], checkpointer=cp).run("next", thread_id="t")
    m = result.state.messages
    assert m[2].role == "tool" and m[2].tool_call_id == "call_x" and m[2].content.startswith("Error: OutcomeUnknown")  # type: ignore[union-attr]
    assert m[3].content == "next"


async def test_idempotent_tool_runs_once_per_thread() -> None:
    cp = MemoryCheckpointer()
    script = [
        tool_call("lookup_order", order_id="ord-1"),
        tool_call("lookup_order", order_id="ord-1"),
        text("a"),
        tool_call("lookup_order", order_id="ord-1"),
        tool_call("lookup_order", order_id="ord-2"),
        text("b"),
    ]
    agent = make(script, checkpointer=cp)
    first = await agent.run("x", thread_id="t")
    assert [e.idempotent_cache_hit for e in first.tool_calls] == [False, True]
    second = await agent.run("y", thread_id="t")
    assert [e.idempotent_cache_hit for e in second.tool_calls] == [True, False]
    assert second.tool_calls[0].result == '{"order_id":"ord-1","status":"delivered"}'
    assert RUNS == ["lookup:ord-1", "lookup:ord-2"]


async def test_interrupt_and_resume_in_process() -> None:
    cp = MemoryCheckpointer()
    script = [tool_call("ask_manager", amount=120), text("Refund sent.")]
    agent = make(script, checkpointer=cp)
    paused = await agent.run("refund", thread_id="t")
    assert paused.stop_reason == "interrupted" and paused.interrupt is not None
    assert paused.interrupt.question == "Approve a refund of 120.0?"
    assert paused.interrupt is not None and paused.interrupt.payload == {"amount": 120.0}
    assert (await cp.load_checkpoint("t")).metadata["source"] == "interrupt"  # type: ignore[union-attr]
    with pytest.raises(ResumeNeedsResponse, match="Approve a refund"):
        await agent.resume(thread_id="t")
    done = await agent.resume("approved", thread_id="t")
    assert done.stop_reason == "complete" and done.text == "Refund sent."
    assert [m.content for m in done.state.messages if m.role == "tool"] == ["approved"]
    assert done.state.reasoning_steps[0].tool_results[0].result == "approved"
    with pytest.raises(NothingToResume):
        await agent.resume("again", thread_id="t")


async def test_interrupt_without_checkpointer_and_remaining_calls_run_on_resume() -> None:
    from tulip_nb.models import tool_calls

    agent = make([tool_calls(("ask_manager", {"amount": 1}), ("lookup_order", {"order_id": "o"})), text("ok")])
    paused = await agent.run("x")
    assert paused.stop_reason == "interrupted" and RUNS == []
    done = await agent.resume("yes")
    assert done.text == "ok" and RUNS == ["lookup:o"]
    assert [e.tool_name for e in done.tool_calls] == ["ask_manager", "lookup_order"]


async def test_iterate_steps_and_stop_then_resume(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    script = [tool_call("lookup_order", order_id="a"), tool_call("lookup_order", order_id="b"), text("done")]
    agent = make(script, checkpointer=cp, system_prompt="sys")
    steps = agent.iterate("go", thread_id="t")
    first = await anext(steps)
    assert first.iteration == 1 and [m.role for m in first.request] == ["system", "user"]
    assert first.response is not None and first.response.tool_calls[0].name == "lookup_order"
    assert first.tool_results[0].tool_name == "lookup_order" and first.stop_reason is None
    assert first.tools[0]["function"]["name"] == "lookup_order" and len(first.state.messages) == 4
    await steps.aclose()  # stop after one step: saved as an unfinished turn
    saved = await cp.load_checkpoint("t")
    assert saved is not None and saved.metadata["source"] == "stopped" and saved.state.iteration == 1
    rest = [s async for s in agent.iterate_resume(thread_id="t")]
    assert [s.iteration for s in rest] == [2, 3] and rest[-1].stop_reason == "complete"
    assert rest[-1].checkpoint_id == (await cp.list_checkpoints("t"))[0]


async def test_model_sees_the_manager_view_and_state_keeps_everything() -> None:
    class LastTwo(ConversationManager):
        def __init__(self) -> None:
            self.turns = 0

        def apply(self, messages: list[Message], *, tools: Any = None) -> list[Message]:
            return messages[-2:]

        def apply_management(self, agent: Any) -> None:
            self.turns += 1

        def get_state(self) -> dict[str, Any]:
            return {"turns": self.turns}

        def restore_from_session(self, state: dict[str, Any]) -> None:
            self.turns = state.get("turns", 0)

    cp = MemoryCheckpointer()
    manager = LastTwo()
    model = ScriptedModel([text("a"), text("b")])
    agent = Agent(model, system_prompt="s", conversation_manager=manager, checkpointer=cp)
    await agent.run("one", thread_id="t")
    result = await agent.run("two", thread_id="t")
    assert [m.content for m in model.requests[-1][0]] == ["a", "two"]
    assert len(result.state.messages) == 5
    assert manager.turns == 2
    assert (await cp.load("t")).metadata[STATE_KEY] == {"turns": 2}  # type: ignore[union-attr]


async def test_context_overflow_reduces_and_retries_once() -> None:
    calls: list[int] = []

    class Reducer(ConversationManager):
        reduced = 0

        def reduce_context(self, agent: Any, e: BaseException | None = None) -> None:
            self.reduced += 1

    async def reply(messages: list[Message]) -> Message:
        calls.append(len(messages))
        if len(calls) == 1:
            raise ContextWindowExceeded("too long", status_code=400)
        return text("fits now")

    manager = Reducer()
    result = await Agent(ScriptedModel(reply), conversation_manager=manager).run("x")
    assert result.text == "fits now" and manager.reduced == 1 and len(calls) == 2


async def test_hooks_get_frozen_events() -> None:
    seen: list[tuple[str, Any]] = []

    class Recorder:
        def on_model_call(self, e: Any) -> None:
            seen.append(("model", e))

        async def on_tool_call(self, e: Any) -> None:
            seen.append(("tool", e))

        def on_iteration(self, e: Any) -> None:
            seen.append(("iteration", e))

        def on_checkpoint_saved(self, e: Any) -> None:
            seen.append(("saved", e))

        def on_checkpoint_loaded(self, e: Any) -> None:
            seen.append(("loaded", e))

    cp = MemoryCheckpointer()
    agent = make([tool_call("flaky", x=1), text("a"), text("b")], checkpointer=cp, hooks=[Recorder()])
    await agent.run("x", thread_id="t")
    await agent.run("y", thread_id="t")
    kinds = [k for k, _ in seen]
    assert kinds == [
        "model",
        "tool",
        "iteration",
        "model",
        "saved",
        "iteration",
        "loaded",
        "model",
        "saved",
        "iteration",
    ]
    tool_event = seen[1][1]
    assert tool_event.call.name == "flaky" and tool_event.error == "RuntimeError: boom 1"
    with pytest.raises(AttributeError):
        tool_event.error = None
    assert isinstance(seen[0][1].request, tuple)


async def test_thread_operations() -> None:
    cp = MemoryCheckpointer()
    agent = make([text("a"), text("b"), text("c")], checkpointer=cp)
    await agent.run("one", thread_id="t")
    await agent.run("two", thread_id="t")
    history = await agent.get_state_history("t")
    assert len(history) == 2 and history[0].parent_checkpoint_id == history[1].checkpoint_id
    first_id = history[1].checkpoint_id
    assert [m.content for m in (await agent.get_state("t", first_id)).messages] == ["one", "a"]
    fork = await agent.fork("t", first_id, new_thread_id="t-what-if")
    ckpt = await cp.load_checkpoint(fork)
    assert (
        ckpt is not None and ckpt.metadata["forked_from"] == "t" and ckpt.metadata["parent_checkpoint_id"] == first_id
    )
    with pytest.raises(CheckpointConflict):
        await agent.fork("t", new_thread_id="t-what-if")
    result = await agent.run("three", thread_id=fork)
    assert [m.content for m in result.state.messages] == ["one", "a", "three", "c"]
    cid = await agent.update_state(
        "t", messages=[{"role": "user", "content": [{"text": "rewritten"}]}], metadata={"note": 1}
    )
    updated = await cp.load_checkpoint("t")
    assert updated is not None and updated.checkpoint_id == cid
    assert updated.parent_checkpoint_id == history[0].checkpoint_id and updated.state.metadata["note"] == 1
    assert [m.content for m in updated.state.messages] == ["rewritten"]
    with pytest.raises(CheckpointNotFound):
        await agent.get_state("missing")
    with pytest.raises(UserError):
        await make(["x"]).fork("t")


async def test_seed_002_messages_surface() -> None:
    agent = Agent(
        ScriptedModel(lambda messages: text(f"I see {len(messages)} messages")),
        messages=[
            {"role": "user", "content": [{"text": "My name is Alice."}]},
            {"role": "assistant", "content": "Nice to meet you, Alice!"},
        ],
    )
    assert [m["role"] for m in agent.messages] == ["user", "assistant"]
    assert agent("What is my name?").text == "I see 3 messages"
    assert len(agent.messages) == 4 and agent.messages[0]["content"] == [{"text": "My name is Alice."}]
    agent.messages = []
    agent.system_prompt = "New instructions here."
    assert agent("Fresh start!").text == "I see 2 messages"
    assert [m.role for m in agent.messages] == ["system", "user", "assistant"]


async def test_messages_reset_applies_to_a_checkpointed_thread() -> None:
    cp = MemoryCheckpointer()
    agent = make([text("a"), text("b")], checkpointer=cp)
    await agent.run("one", thread_id="t")
    agent.messages = []
    result = await agent.run("two", thread_id="t")
    assert [m.content for m in result.state.messages] == ["two", "b"]
    assert len(await cp.list_checkpoints("t")) == 2  # the old history stays in the earlier checkpoint


async def test_as_tool_spawn_isolates_workers_and_shared_accumulates() -> None:
    class Counting(NullManager):
        clones = 0

        def clone_for_spawn(self) -> NullManager:
            Counting.clones += 1
            return NullManager()

    worker_model = ScriptedModel(lambda messages: text(f"worker saw {len(messages)}"))
    worker = Agent(worker_model, conversation_manager=Counting(), agent_id="researcher")
    as_tool = worker.as_tool(description="Research a question.")
    assert as_tool.name == "ask_researcher" and as_tool.parameters["required"] == ["prompt"]
    boss = Agent(
        ScriptedModel([tool_call("ask_researcher", prompt="q1"), tool_call("ask_researcher", prompt="q2"), text("ok")]),
        [as_tool],
        conversation_manager=NullManager(),
    )
    result = await boss.run("go")
    assert [e.result for e in result.tool_calls] == ["worker saw 1", "worker saw 1"]
    assert Counting.clones == 2 and worker.messages == []
    results = await asyncio.gather(*(as_tool.invoke({"prompt": f"p{i}"}) for i in range(3)))
    assert results == ["worker saw 1"] * 3
    shared = worker.as_tool(name="shared", mode="shared")
    assert await shared.invoke({"prompt": "a"}) == "worker saw 1"
    assert await shared.invoke({"prompt": "b"}) == "worker saw 3"
    with pytest.raises(UserError):
        worker.as_tool(mode="queue")  # type: ignore[arg-type]


def test_storage_backend_as_checkpointer_names_the_factory() -> None:
    class RedisBackend:
        async def save(self, thread_id: str, data: dict[str, Any]) -> None: ...

    with pytest.raises(TypeError, match=r"redis_checkpointer\(") as info:
        Agent(ScriptedModel(["x"]), checkpointer=RedisBackend())
    assert isinstance(info.value, NotACheckpointer)
    with pytest.raises(NotACheckpointer):
        Agent(ScriptedModel(["x"]), checkpointer=object())


def test_argument_checks() -> None:
    with pytest.raises(UserError):
        Agent(ScriptedModel(["x"]), max_iterations=0)
    with pytest.raises(UserError):
        Agent(ScriptedModel(["x"]), checkpoint_every_n_iterations=0)
    with pytest.raises(UserError, match="two tools"):
        Agent(ScriptedModel(["x"]), [lookup_order, lookup_order])
    with pytest.raises(UserError):
        Agent()


async def test_run_sync_inside_a_running_loop() -> None:
    agent = make([text("from a worker thread")], checkpointer=MemoryCheckpointer())
    assert asyncio.get_running_loop().is_running()
    result = agent.run_sync("hi", thread_id="t")  # would raise "asyncio.run() cannot be called" if naive
    assert result.text == "from a worker thread"
    assert (await agent.get_state("t")).messages[-1].content == "from a worker thread"


def test_run_sync_in_a_plain_script() -> None:
    assert make([text("plain")])("hi").text == "plain"


async def test_model_response_provider_state_is_kept() -> None:
    model = ScriptedModel([ModelResponse(Message.assistant("x"), provider_state={"resp": "r1"}), text("y")])
    cp = MemoryCheckpointer()
    agent = Agent(model, conversation_manager=NullManager(), checkpointer=cp)
    await agent.run("a", thread_id="t")
    second = await agent.run("b", thread_id="t")
    assert second.state.provider_state == {"resp": "r1"}


def test_default_conversation_manager() -> None:
    from tulip_nb.memory.compactor import SlidingWindowConversationManager, SlidingWindowManager
    from tulip_nb.models import register_metadata

    sliding = Agent(ScriptedModel(["x"]), max_iterations=15).conversation_manager
    assert isinstance(sliding, SlidingWindowManager)  # seed 000's name
    assert isinstance(sliding, SlidingWindowConversationManager)  # seed 002's name
    assert sliding.window_size == 30
    register_metadata("windowed-test-model", context_window=50_000)
    compactor = Agent(ScriptedModel(["x"], name="windowed-test-model")).conversation_manager
    assert type(compactor).__name__ == "LLMCompactor"
    assert getattr(compactor, "context_length", 50_000) == 50_000


def test_a_hook_method_no_event_calls_is_refused_at_registration() -> None:
    from tulip_nb.agent import Hooks
    from tulip_nb.core.errors import UserError
    from tulip_nb.models import ScriptedModel, text

    class Typo:
        def on_tool_calls(self, event: object) -> None:  # the event is on_tool_call
            raise AssertionError("never called")

    with pytest.raises(UserError, match=r"on_tool_calls.*which no event calls"):
        Agent(ScriptedModel([text("hi")]), hooks=[Typo()])

    seen: list[str] = []

    class Printer(Hooks):
        def on_model_call(self, event: object) -> None:
            seen.append("model")

    agent = Agent(ScriptedModel([text("hi")]), hooks=[Printer()])
    agent.run_sync("hello")
    assert seen == ["model"]
    with pytest.raises(UserError):
        agent.clone(hooks=[Typo()])
