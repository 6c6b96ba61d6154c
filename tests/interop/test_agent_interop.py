"""A thread crosses between our Agent and a real tulip agent, both ways, on one FileCheckpointer dir."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tulip_nb.agent import Agent, NullManager, tool
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call

tulip_agent = pytest.importorskip("tulip.agent", reason="tulip-agents (the interop peer) is not installed")
tulip_testing = pytest.importorskip("tulip.testing")
tulip_file = pytest.importorskip("tulip.memory.backends.file")
tulip_conversation = pytest.importorskip("tulip.memory.conversation")
tulip_tools = pytest.importorskip("tulip.tools")

pytestmark = pytest.mark.interop

THREAD = "user/42:chat #1"


@tool(idempotent=True)
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"18C and raining in {city}"


def _tulip_agent(base: Path, responses: list[object]):  # type: ignore[no-untyped-def]
    @tulip_tools.tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"18C and raining in {city}"

    return tulip_agent.Agent(
        model=tulip_testing.ScriptedModel(responses),
        tools=[get_weather],
        system_prompt="You are a weather bot.",
        conversation_manager=tulip_conversation.NullManager(),
        checkpointer=tulip_file.FileCheckpointer(base_dir=str(base)),
    )


def _ours(base: Path, responses: list[object]) -> Agent:
    return Agent(
        ScriptedModel(responses),  # type: ignore[arg-type]
        [get_weather],
        system_prompt="You are a weather bot.",
        checkpointer=FileCheckpointer(base),
        conversation_manager=NullManager(),
    )


async def test_tulip_continues_our_thread_and_we_continue_theirs(tmp_path: Path) -> None:
    ours = _ours(tmp_path, [tool_call("get_weather", city="Lisbon"), text("Lisbon: 18C and raining.")])
    first = await ours.run("Weather in Lisbon?", thread_id=THREAD, metadata={"user": "u42"})
    assert first.text == "Lisbon: 18C and raining."

    theirs = _tulip_agent(
        tmp_path,
        [tulip_testing.tool_call("get_weather", city="Porto", call_id="call_w2"), tulip_testing.text("Porto too.")],
    )
    # tulip's run_sync, from a worker thread (this test's loop is running)
    second = await asyncio.to_thread(theirs.run_sync, "And Porto?", thread_id=THREAD)
    assert second.stop_reason == "complete"
    contents = [m.content for m in second.state.messages]
    assert contents[:5] == [
        "You are a weather bot.",
        "Weather in Lisbon?",
        None,
        "18C and raining in Lisbon",
        "Lisbon: 18C and raining.",
    ]
    assert contents[5:] == ["And Porto?", None, "18C and raining in Porto", "Porto too."]
    assert second.state.metadata["user"] == "u42"

    third = await _ours(tmp_path, [tool_call("get_weather", city="Lisbon"), text("Still raining.")]).run(
        "Lisbon again?", thread_id=THREAD
    )
    assert third.text == "Still raining."
    assert len(third.state.messages) == 13 and third.state.metadata["user"] == "u42"
    # the repeated Lisbon lookup is answered from the history tulip carried forward (idempotent tool)
    assert [e.idempotent_cache_hit for e in third.tool_calls] == [True]
    cp = FileCheckpointer(tmp_path)
    infos = await cp.list_checkpoint_infos(THREAD)
    assert len(infos) == 3 and infos[0].parent_checkpoint_id == infos[1].checkpoint_id
    # tulip still lists and loads the thread after our last save
    tulip_cp = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    assert (await tulip_cp.list_checkpoints(THREAD))[0] == third.checkpoint_id
    loaded = await tulip_cp.load(THREAD)
    assert loaded is not None and loaded.messages[-1].content == "Still raining."
