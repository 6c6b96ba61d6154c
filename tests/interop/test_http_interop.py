"""tulip-agents' HTTPCheckpointer and ours against one checkpoint_app: each reads the other's threads."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

from tulip_nb.memory.checkpointer import caller_metadata

from ..backends.conformance import full_state
from ..backends.factories.remote import serve_app

tulip_http = pytest.importorskip(
    "tulip.memory.backends.http", reason="tulip-agents (the interop peer) is not installed"
)
tulip_state = pytest.importorskip("tulip.core.state")

pytestmark = pytest.mark.interop

TID = "user/42:chat #1"


@pytest.fixture
def url() -> Iterator[str]:
    from tulip_nb.memory.backends import MemoryCheckpointer
    from tulip_nb.server import checkpoint_app

    with serve_app(checkpoint_app(MemoryCheckpointer())) as base:
        yield base


@pytest.fixture
async def pair(url: str) -> AsyncIterator[tuple[Any, Any]]:
    from tulip_nb.memory.backends import HTTPCheckpointer

    theirs = tulip_http.HTTPCheckpointer(base_url=url)
    async with HTTPCheckpointer(url) as ours:
        yield ours, theirs
    await theirs.close()


def tulip_view(state_json: bytes) -> dict[str, Any]:
    return dict(tulip_state.AgentState.model_validate_json(state_json).model_dump(mode="json"))


async def test_tulip_reads_what_we_write(pair: tuple[Any, Any]) -> None:
    ours, theirs = pair
    state = full_state()
    first = await ours.save(state, TID, metadata={"who": "us"})
    second = await ours.save(state, TID)
    assert await theirs.list_checkpoints(TID) == [second, first]
    loaded = await theirs.load(TID)
    assert loaded is not None and loaded.model_dump(mode="json") == tulip_view(state.to_json_bytes())
    assert await theirs.health_check()


async def test_we_read_what_tulip_writes(pair: tuple[Any, Any]) -> None:
    ours, theirs = pair
    source = orjson.loads(full_state().to_json_bytes())
    source.pop("unknown_top_level")
    t_state = tulip_state.AgentState.model_validate(source)
    cid = await theirs.save(t_state, TID, metadata={"who": "tulip"})
    ckpt = await ours.load_checkpoint(TID)
    assert ckpt is not None and ckpt.checkpoint_id == cid
    assert caller_metadata(ckpt.metadata) == {"who": "tulip", "parent_checkpoint_id": None}
    assert orjson.loads(ckpt.state.to_json_bytes()) == orjson.loads(t_state.model_dump_json())
    new = await ours.save(ckpt.state, TID, expected_parent=cid)
    assert await theirs.list_checkpoints(TID) == [new, cid]
    assert await theirs.delete(TID, new)
    assert await ours.list_checkpoints(TID) == [cid]
