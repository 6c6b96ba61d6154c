"""Threads cross between tulip-agents' S3Backend and ours on one moto bucket, both ways."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tulip_nb.memory.checkpointer import caller_metadata

from ..backends.conformance import full_state
from ..backends.factories.remote import S3_CREDENTIALS, moto_endpoint, new_bucket

tulip_s3 = pytest.importorskip("tulip.memory.backends.s3", reason="tulip-agents (the interop peer) is not installed")
tulip_state = pytest.importorskip("tulip.core.state")

pytestmark = pytest.mark.interop

TID = "user/42:chat #1"


@pytest.fixture
async def pair(request: Any) -> AsyncIterator[tuple[Any, Any, Any]]:
    """(ours, tulip's, a raw client) on one bucket; ours in the layout the test names (history by default)."""
    from tulip_nb.memory.backends import S3Backend

    bucket, url = new_bucket(), moto_endpoint()
    ours = S3Backend(bucket, endpoint_url=url, layout=getattr(request, "param", "history"), **S3_CREDENTIALS)
    theirs = tulip_s3.S3Backend(bucket=bucket, endpoint_url=url, **S3_CREDENTIALS)
    yield ours, theirs, ours._io.client
    await theirs.close()
    await ours.close()


def tulip_view(state_json: bytes) -> dict[str, Any]:
    """What tulip keeps of a state (it drops keys it does not know)."""
    return dict(tulip_state.AgentState.model_validate_json(state_json).model_dump(mode="json"))


def tulip_source() -> Any:
    source = orjson.loads(full_state().to_json_bytes())
    source.pop("unknown_top_level")
    return tulip_state.AgentState.model_validate(source)


def objects(raw: Any, bucket: str, tid: str) -> dict[str, tuple[str, list[str] | bytes]]:
    """name -> (content type, JSON keys or the raw body) for every object of a thread."""
    out: dict[str, tuple[str, list[str] | bytes]] = {}
    prefix = f"tulip/checkpoints/{tid}/"
    for obj in raw.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]:
        got = raw.get_object(Bucket=bucket, Key=obj["Key"])
        body = got["Body"].read()
        name = obj["Key"][len(prefix) :]
        shape: list[str] | bytes = list(orjson.loads(body)) if name.endswith(".json") else body
        out[name] = (got["ContentType"], shape)
    return out


async def test_same_objects_same_shapes(pair: tuple[Any, Any, Any]) -> None:
    ours, theirs, raw = pair
    state = tulip_source()
    theirs_cid = await theirs.save(state, "by-tulip", metadata={"m": 1})
    ours_cid = await ours.save(full_state(), "by-us", metadata={"m": 1})
    a, b = objects(raw, ours.bucket, "by-tulip"), objects(raw, ours.bucket, "by-us")
    assert set(a) == {f"{theirs_cid}.json", f"{theirs_cid}.meta.json", "_latest"}
    assert set(b) == {f"{ours_cid}.json", f"{ours_cid}.meta.json", "_latest"}
    assert a[f"{theirs_cid}.json"] == b[f"{ours_cid}.json"]
    assert a[f"{theirs_cid}.meta.json"] == b[f"{ours_cid}.meta.json"]
    assert a["_latest"] == ("text/plain", theirs_cid.encode()) and b["_latest"] == ("text/plain", ours_cid.encode())


@pytest.mark.parametrize("pair", ["history", "tulip"], indirect=True)
async def test_tulip_resumes_what_we_write(pair: tuple[Any, Any, Any]) -> None:
    """tulip is shown the latest turn end (layout="history") or every checkpoint (layout="tulip")."""
    ours, theirs, _ = pair
    state = full_state()
    first = await ours.save(state, TID, metadata={"who": "us"})
    mid = await ours.save(state, TID, metadata={"source": "iteration"})
    second = await ours.save(state, TID)
    loaded = await theirs.load(TID)
    assert loaded is not None
    assert loaded.model_dump(mode="json") == tulip_view(state.to_json_bytes())
    listed = set(await theirs.list_checkpoints(TID))
    if ours.layout == "history":
        assert listed == {second}
        assert (await ours.list_checkpoints(TID)) == [second, mid, first]
        return
    assert listed == {first, mid, second}
    assert caller_metadata(await theirs.get_metadata(TID, first)) == {"who": "us", "parent_checkpoint_id": None}
    assert (await theirs.load(TID, first)) is not None


async def test_we_read_what_tulip_writes_and_keep_it_all(pair: tuple[Any, Any, Any]) -> None:
    ours, theirs, _ = pair
    t_state = tulip_source()
    cid = await theirs.save(t_state, TID, metadata={"who": "tulip"})
    assert await ours.list_threads() == [TID]  # the whole id (tulip's own listing says "user")
    ckpt = await ours.load_checkpoint(TID)
    assert ckpt is not None and ckpt.checkpoint_id == cid and ckpt.thread_id == TID
    assert ckpt.metadata == {"who": "tulip"}
    assert orjson.loads(ckpt.state.to_json_bytes()) == orjson.loads(t_state.model_dump_json())
    # we continue the thread; tulip resumes from our checkpoint and sees the lineage
    new = await ours.save(ckpt.state, TID, expected_parent=cid)
    loaded = await theirs.load(TID)
    assert loaded is not None and loaded.model_dump(mode="json") == tulip_view(ckpt.state.to_json_bytes())
    assert (await ours.list_checkpoint_infos(TID))[0].parent_checkpoint_id == cid
    assert set(await theirs.list_checkpoints(TID)) == {cid, new}


async def test_tulip_copy_is_read_under_the_destination(pair: tuple[Any, Any, Any]) -> None:
    """tulip copies envelopes without rewriting thread_id; the key decides whose they are."""
    ours, theirs, _ = pair
    await theirs.save(tulip_source(), "src")
    await theirs.copy_thread("src", "dst")
    ckpt = await ours.load_checkpoint("dst")
    assert ckpt is not None and ckpt.thread_id == "dst"


async def test_turns_alternate_and_tulip_deleting_its_interrupted_saves_keeps_ours(
    pair: tuple[Any, Any, Any],
) -> None:
    """Ours, then a tulip turn (an interrupted save it later deletes, then its turn end), then ours:
    each side resumes the other's latest, and tulip's delete removes only its own checkpoint."""
    ours, theirs, _ = pair
    state = full_state()
    first = await ours.save(state, TID, metadata={"source": "final"})
    resumed = await theirs.load(TID)
    assert resumed is not None and resumed.model_dump(mode="json") == tulip_view(state.to_json_bytes())
    interrupted = await theirs.save(resumed, TID, metadata={"source": "iteration"})
    extra = type(resumed.messages[0])(role="user", content="tulip's turn")
    resumed = resumed.model_copy(update={"messages": (*resumed.messages, extra)})
    tulip_end = await theirs.save(resumed, TID, metadata={"source": "final"})
    assert await theirs.delete(TID, interrupted)  # what tulip does with a crashed turn's saves
    ckpt = await ours.load_checkpoint(TID)
    assert ckpt is not None and ckpt.checkpoint_id == tulip_end
    assert ckpt.state.messages[-1].content == "tulip's turn"
    ckpt.state.messages = [*ckpt.state.messages, ckpt.state.messages[-1].model_copy(update={"content": "ours again"})]
    again = await ours.save(ckpt.state, TID, metadata={"source": "final"}, expected_parent=tulip_end)
    assert [i.checkpoint_id for i in await ours.list_checkpoint_infos(TID, None)] == [again, tulip_end, first]
    loaded = await theirs.load(TID)
    assert loaded is not None and loaded.messages[-1].content == "ours again"
    assert await theirs.delete(TID, tulip_end)  # tulip removing even its turn end leaves our history whole
    fresh = type(ours)(ours.bucket, endpoint_url=ours.endpoint_url, **S3_CREDENTIALS)
    try:
        latest = await fresh.load_checkpoint(TID)
        assert latest is not None and latest.checkpoint_id == again
        assert latest.state.to_json_bytes() == ckpt.state.to_json_bytes()
        assert (await fresh.load(TID, first)) is not None
    finally:
        await fresh.close()
