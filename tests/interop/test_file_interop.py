"""Threads cross between tulip-agents' FileCheckpointer and ours, both ways, nothing dropped."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tulip_nb.memory.backends.file import FileCheckpointer

from ..backends.conformance import full_state

tulip_file = pytest.importorskip(
    "tulip.memory.backends.file", reason="tulip-agents (the interop peer) is not installed"
)
tulip_state = pytest.importorskip("tulip.core.state")

pytestmark = pytest.mark.interop


def as_tulip(state_json: bytes):  # type: ignore[no-untyped-def]
    return tulip_state.AgentState.model_validate_json(state_json)


@pytest.mark.parametrize("layout", ["history", "tulip"])
async def test_tulip_reads_what_we_write(tmp_path: Path, layout: str) -> None:
    """tulip lists every checkpoint of the tulip layout, and the latest turn end of the default one."""
    ours = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    state = full_state()
    first = await ours.save(state, "user/42:chat #1")
    second = await ours.save(state, "user/42:chat #1")
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    expected = [second, first] if layout == "tulip" else [second]
    assert await theirs.list_checkpoints("user/42:chat #1") == expected
    loaded = await theirs.load("user/42:chat #1")
    assert loaded is not None
    # tulip drops keys it does not know; everything it knows arrives intact
    assert loaded.model_dump(mode="json") == as_tulip(state.to_json_bytes()).model_dump(mode="json")
    assert [m.content for m in loaded.messages] == [m.content for m in state.messages]
    assert loaded.metadata == state.metadata and loaded.iteration == state.iteration


async def test_we_read_what_tulip_writes_and_keep_it_all(tmp_path: Path) -> None:
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    source = orjson.loads(full_state().to_json_bytes())
    source.pop("unknown_top_level")
    t_state = tulip_state.AgentState.model_validate(source)
    cid = await theirs.save(t_state, "a/b c#1", metadata={"who": "tulip"})
    ours = FileCheckpointer(tmp_path)
    assert await ours.list_threads() == ["a/b c#1"]
    ckpt = await ours.load_checkpoint("a/b c#1")
    assert ckpt is not None and ckpt.checkpoint_id == cid
    assert ckpt.metadata == {"who": "tulip"}
    assert await ours.get_metadata("a/b c#1") == {"who": "tulip"}
    written = orjson.loads(t_state.model_dump_json())
    assert orjson.loads(ckpt.state.to_json_bytes()) == written
    # tulip resumes from the checkpoint we add on top
    new = await ours.save(ckpt.state, "a/b c#1")
    assert (await theirs.list_checkpoints("a/b c#1"))[0] == new
