"""Threads cross between tulip-agents' opensearch_checkpointer and ours, both ways (emulator).

Both sides use the same osmem-server emulator and the same index. Whoever saves first creates the
index, so each direction also runs on the other side's mapping.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tulip_nb.core import AgentState

from ..backends.conformance import full_state
from ..backends.factories.opensearch import drop_index, new_index, opensearch_url

tulip_backends = pytest.importorskip("tulip.memory.backends", reason="tulip-agents (the interop peer) is not installed")
tulip_state = pytest.importorskip("tulip.core.state")

pytestmark = [pytest.mark.interop, pytest.mark.service("opensearch")]
TID = "user/42:chat #1"


def as_tulip(state: AgentState) -> Any:
    return tulip_state.AgentState.model_validate_json(state.to_json_bytes())


@pytest.fixture
async def both() -> AsyncIterator[tuple[Any, Any]]:
    """(ours, tulip's) checkpointer on the same emulator and index."""
    from tulip_nb.memory.backends import opensearch_checkpointer

    url, index = opensearch_url(), new_index()
    ours = opensearch_checkpointer(hosts=[url], index_name=index)
    theirs = tulip_backends.opensearch_checkpointer(hosts=[url], index_name=index, use_ssl=False)
    try:
        yield ours, theirs
    finally:
        await ours.close()
        await theirs.close()
        await drop_index(url, index)


async def test_we_read_what_tulip_writes(both: tuple[Any, Any]) -> None:
    ours, theirs = both
    state = full_state()
    first = await theirs.save(as_tulip(state), TID, metadata={"step": 1})
    second = await theirs.save(as_tulip(full_state(marker="z")), TID)
    assert await ours.list_checkpoints(TID) == [second, first]
    assert await ours.list_threads() == [TID]
    older = await ours.load_checkpoint(TID, first)
    assert older is not None and older.metadata == {"step": 1}
    written = as_tulip(state).to_checkpoint()
    assert orjson.loads(older.state.to_json_bytes()) == orjson.loads(AgentState.model_validate(written).to_json_bytes())
    latest = await ours.load(TID)
    assert latest is not None and latest.messages[1].content == "question 0 z"
    # our queries reach tulip's documents too (data_json / metadata fall-backs)
    assert [h["thread_id"] for h in await ours.search("question z")] == [TID]
    assert [r["checkpoint_id"] for r in await ours.query_by_metadata("step", 1)] == [first]
    # and we continue the thread tulip started
    third = await ours.save(latest, TID)
    assert await theirs.list_checkpoints(TID) == [third, second, first]
    resumed = await theirs.load(TID)
    assert resumed is not None and resumed.messages[1].content == "question 0 z"


async def test_tulip_reads_what_we_write(both: tuple[Any, Any]) -> None:
    ours, theirs = both
    state = full_state()
    first = await ours.save(state, TID, metadata={"step": 1})
    second = await ours.save(full_state(marker="z"), TID)
    assert await theirs.list_checkpoints(TID) == [second, first]
    loaded = await theirs.load(TID, first)
    assert loaded is not None
    assert loaded.model_dump(mode="json") == as_tulip(state).model_dump(mode="json")
    latest = await theirs.load(TID)
    assert latest is not None and latest.messages[1].content == "question 0 z"
    hits = await theirs.search("question")  # tulip's own search runs on our data_json
    assert any(str(h["thread_id"]).startswith(TID) for h in hits)
    # tulip continues the thread we started, and we see its save as the latest
    third = await theirs.save(latest, TID)
    assert await ours.latest_checkpoint_id(TID) == third
    assert await ours.list_checkpoints(TID) == [third, second, first]
