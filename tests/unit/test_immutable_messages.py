"""Messages are immutable all the way down: nothing loaded can change what a store holds.

The defect this guards against: ``loaded.messages[0].metadata["edited"] = True`` changed the saved
checkpoint in MemoryCheckpointer (which shares message objects), and in FileCheckpointer the edit
was silently left out of the next save (the message's JSON was cached) while verify_thread said ok.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
from pathlib import Path

import orjson
import pytest

from tulip_nb.core import AgentState, Message, ToolCall
from tulip_nb.core._frozen import FrozenDict, FrozenList, ReadOnlyError
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.integrity import verify_thread


def _thread() -> AgentState:
    call = ToolCall(id="call_0", name="lookup", arguments={"order": {"id": "ord-1", "tags": ["a"]}})
    return AgentState(
        messages=[
            Message.user("hi").model_copy(update={"metadata": {"tags": ["x"], "nested": {"k": 1}}}),
            Message.assistant(None, [call]),
            Message.tool("found", tool_call_id="call_0", name="lookup"),
        ]
    )


MUTATIONS = {
    "metadata item": lambda m: m[0].metadata.__setitem__("edited", True),
    "metadata update": lambda m: m[0].metadata.update(edited=True),
    "nested metadata list": lambda m: m[0].metadata["tags"].append("y"),
    "nested metadata dict": lambda m: m[0].metadata["nested"].pop("k"),
    "tool calls": lambda m: m[1].tool_calls.append(m[1].tool_calls[0]),
    "arguments": lambda m: m[1].tool_calls[0].arguments.__setitem__("order", None),
    "nested arguments": lambda m: m[1].tool_calls[0].arguments["order"]["tags"].clear(),
}


@pytest.mark.parametrize("backend", ["memory", "file"])
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_loaded_messages_cannot_change_the_store(backend: str, mutation: str, tmp_path: Path) -> None:
    cp = MemoryCheckpointer() if backend == "memory" else FileCheckpointer(base_dir=str(tmp_path))

    async def go() -> None:
        await cp.save(_thread(), "t")
        before = (await cp.load("t")).to_json_bytes()  # type: ignore[union-attr]
        loaded = await cp.load("t")
        assert loaded is not None
        with pytest.raises(ReadOnlyError, match="read-only"):
            MUTATIONS[mutation](loaded.messages)
        again = await cp.load("t")
        assert again is not None and again.to_json_bytes() == before  # the store is unchanged
        # The way to change a message: a new one. The next save carries it, and verifies.
        edited = loaded.messages[0].model_copy(update={"metadata": {**loaded.messages[0].metadata, "edited": True}})
        loaded.messages[0] = edited
        await cp.save(loaded, "t")
        latest = await cp.load("t")
        assert latest is not None and latest.messages[0].metadata["edited"] is True
        assert (await verify_thread(cp, "t")).ok

    asyncio.run(go())


def test_frozen_containers_behave_as_json_values() -> None:
    m = _thread().messages[0]
    assert type(m.metadata) is FrozenDict and type(m.metadata["tags"]) is FrozenList
    assert m.metadata == {"tags": ["x"], "nested": {"k": 1}}
    assert orjson.loads(m.json_bytes())["metadata"] == {"tags": ["x"], "nested": {"k": 1}}
    copied = m.metadata.copy()
    copied["new"] = 1  # an ordinary copy is mutable
    assert "new" not in m.metadata
    for clone in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m), copy.copy(m)):
        assert clone == m and type(clone.metadata) is FrozenDict
    fresh = Message.model_validate_json(m.json_bytes())
    assert fresh == m and type(fresh.metadata["nested"]) is FrozenDict
    call = ToolCall(id="c", name="f", args={"x": [1]})
    assert type(call.arguments["x"]) is FrozenList
    assert type(call.model_copy(update={"arguments": {"y": {}}}).arguments) is FrozenDict
