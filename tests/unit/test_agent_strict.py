"""Agent(strict_concurrency=True): saves are compare-and-swap; Agent.clone() isolates callers."""

from __future__ import annotations

import asyncio

import pytest

from tulip_nb.agent import Agent
from tulip_nb.core.errors import CheckpointConflict
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.models import ScriptedModel, text


def _slow_model(gate: asyncio.Event) -> ScriptedModel:
    async def reply(messages: list[object]) -> object:
        await gate.wait()
        return text("ok")

    return ScriptedModel(reply)


async def test_default_is_last_write_wins() -> None:
    cp = MemoryCheckpointer()
    gate = asyncio.Event()
    agent = Agent(_slow_model(gate), checkpointer=cp)
    runs = [asyncio.create_task(agent.clone().run(f"p{i}", thread_id="t")) for i in range(2)]
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(*runs)
    state = await cp.load("t")
    assert state is not None
    # both turns started from an empty thread; the second save replaced the first turn
    assert [m.content for m in state.messages if m.role == "user"] in (["p0"], ["p1"])
    assert len(await cp.list_checkpoints("t")) == 2


async def test_strict_refuses_the_second_writer() -> None:
    cp = MemoryCheckpointer()
    gate = asyncio.Event()
    agent = Agent(_slow_model(gate), checkpointer=cp, strict_concurrency=True)
    gate.set()
    await agent.clone().run("first", thread_id="t")
    gate.clear()
    runs = [asyncio.create_task(agent.clone().run(f"p{i}", thread_id="t")) for i in range(2)]
    await asyncio.sleep(0.01)
    gate.set()
    outcomes = await asyncio.gather(*runs, return_exceptions=True)
    conflicts = [o for o in outcomes if isinstance(o, CheckpointConflict)]
    assert len(conflicts) == 1
    state = await cp.load("t")
    assert state is not None
    users = [m.content for m in state.messages if m.role == "user"]
    assert users[0] == "first" and len(users) == 2  # the winner's turn, nothing lost or mixed
    assert len(await cp.list_checkpoints("t")) == 2  # the loser saved nothing, not even its error


async def test_strict_chains_its_own_saves() -> None:
    """Iteration saves inside one turn each CAS on the previous save of the same turn."""
    from tulip_nb.models import tool_call

    def ping() -> str:
        """Ping."""
        return "pong"

    cp = MemoryCheckpointer()
    model = ScriptedModel([tool_call("ping"), tool_call("ping"), text("done")])
    agent = Agent(model, [ping], checkpointer=cp, checkpoint_every_n_iterations=1, strict_concurrency=True)
    result = await agent.run("go", thread_id="t")
    assert result.stop_reason == "complete" and result.iterations == 3
    assert len(await cp.list_checkpoints("t")) == 3  # two iteration saves + final


async def test_clone_has_its_own_conversations_and_hooks() -> None:
    seen: list[str] = []

    class Hook:
        def on_model_call(self, event: object) -> None:
            seen.append("model")

    agent = Agent(ScriptedModel([text("a")], repeat_last=True), messages=[{"role": "user", "content": "hi"}])
    twin = agent.clone(hooks=[Hook()], strict_concurrency=True)
    assert twin.strict_concurrency and not agent.strict_concurrency
    assert twin.conversation_manager is not agent.conversation_manager
    await twin.run("x")
    assert seen == ["model"]
    assert [m.content for m in agent.messages] == ["hi"]  # the original did not move
    assert len(twin.messages) == 3


@pytest.mark.parametrize("strict", [False, True])
async def test_single_writer_unchanged(strict: bool) -> None:
    cp = MemoryCheckpointer()
    agent = Agent(ScriptedModel([text("a")], repeat_last=True), checkpointer=cp, strict_concurrency=strict)
    for i in range(3):
        await agent.run(f"p{i}", thread_id="t")
    state = await cp.load("t")
    assert state is not None and [m.content for m in state.messages if m.role == "user"] == ["p0", "p1", "p2"]
