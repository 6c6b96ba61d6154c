"""The history model on S3 (``_s3_history``): what it stores, what a copy writes, corruption.

Runs against moto's S3 server over real HTTP (started by ``factories/remote.py``).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from tulip_nb.core import AgentState, CheckpointCorrupt, Message, ToolCall
from tulip_nb.memory.integrity import verify_thread

from .factories.remote import S3_CREDENTIALS, moto_endpoint, new_bucket

pytestmark = pytest.mark.service("s3")  # moto's S3 server, started by the tests

HISTORY = "tulip/checkpoints.history/"


def _backend(bucket: str, **kwargs: Any) -> Any:
    from tulip_nb.memory.backends._s3 import S3Backend

    return S3Backend(bucket, endpoint_url=moto_endpoint(), **S3_CREDENTIALS, **kwargs)


@pytest.fixture
async def bucket() -> str:
    return new_bucket()


@pytest.fixture
async def s3(bucket: str) -> AsyncIterator[Any]:
    cp = _backend(bucket)
    yield cp
    await cp.close()


def sizes(cp: Any, prefix: str) -> dict[str, int]:
    """Key -> size of every object under ``prefix``."""
    return {o.key: o.size for o in cp._io.list_keys(prefix)}


def record_puts(cp: Any) -> list[tuple[str, bytes]]:
    """From now on, every PUT of ``cp`` (history and projection): (key, body)."""
    puts: list[tuple[str, bytes]] = []
    put: Callable[..., str] = cp._io.put

    def recording(key: str, body: bytes, *args: Any, **kwargs: Any) -> str:
        puts.append((key, body))
        return put(key, body, *args, **kwargs)

    cp._io.put = recording
    return puts


async def grow(cp: Any, thread_id: str, turns: int, *, seed: int = 0) -> AgentState:
    """An agent-like thread: per turn a question, a tool call, a 1-2 kB result and an answer, a save
    after every model call (``iteration``, then ``final``), and a turn log growing in the metadata."""
    rng = random.Random(seed)
    state = AgentState(agent_id="a", messages=[Message(role="system", content="You research.")])
    for t in range(turns):
        call = ToolCall(id=f"call_{t}", name="fetch", arguments={"url": f"https://example.org/{t}"})
        words = " ".join(rng.choice(("alpha", "beta", "gamma", "delta", "omega")) for _ in range(rng.randint(150, 300)))
        state.messages = [*state.messages, Message.user(f"question {t}: what about item {t}?")]
        state.messages = [*state.messages, Message.assistant(None, [call])]
        state.metadata = {**state.metadata, "turns": [*state.metadata.get("turns", []), {"turn": t, "calls": 1}]}
        await cp.save(state, thread_id, metadata={"source": "iteration", "turn": t})
        state.messages = [*state.messages, Message.tool(words, tool_call_id=call.id, name="fetch")]
        state.messages = [*state.messages, Message.assistant(f"answer {t}: {words[:300]}")]
        await cp.save(state, thread_id, metadata={"source": "final", "turn": t})
    return state


def messages_json(state: AgentState) -> int:
    return sum(len(m.json_bytes()) for m in state.messages)


async def test_storage_is_linear_in_the_messages(s3: Any) -> None:
    """A 100-turn thread (200 saves): every object it has, history and tulip's projection, holds
    less than 3x its messages' JSON (whole-state envelopes per save would be ~100x)."""
    state = await grow(s3, "long", 100)
    history, tulip = sizes(s3, HISTORY), sizes(s3, "tulip/checkpoints/")
    total = sum(history.values()) + sum(tulip.values())
    assert total < 3 * messages_json(state), (total, messages_json(state))
    assert len(tulip) == 3  # the latest turn end's envelope, its .meta.json and _latest
    assert len(history) < 60, sorted(history)  # head, runs merged by level, row segments
    fresh = _backend(s3.bucket)
    try:
        loaded = await fresh.load("long")
        assert loaded is not None and loaded.model_dump() == state.model_dump()
        assert (await verify_thread(fresh, "long")).ok
    finally:
        await fresh.close()


async def test_bytes_written_per_save_do_not_grow_with_the_thread(s3: Any) -> None:
    """The head holds at most a segment's worth of rows: the history's bytes per save (merges
    aside) are about the same at turn 200 as at turn 20."""
    puts = record_puts(s3)
    await grow(s3, "long", 200)
    heads = [len(body) for key, body in puts if key.startswith(f"{HISTORY}h/")]
    early, late = heads[20:60], heads[-40:]
    assert max(late) < 2 * max(early) + 4096, (max(early), max(late))


async def test_copy_and_fork_write_no_message_bytes(s3: Any) -> None:
    """A copy writes rows (re-bound to the destination) and heads, a fork its one new message: the
    history's PUTs hold none of the source's messages (tulip's projection of the copy's latest
    turn end is a whole envelope, as tulip reads it)."""
    state = await grow(s3, "src", 10)
    messages = [m.json_bytes() for m in state.messages]
    puts = record_puts(s3)
    await s3.copy_thread("src", "dst")
    history_puts = [_plain(body) for key, body in puts if key.startswith(HISTORY)]
    assert history_puts and not any(m in body for m in messages for body in history_puts)
    puts.clear()
    fork = state.model_copy()
    fork.messages = [*state.messages, Message.user("what if?")]
    meta = {"source": "fork", "forked_from": "src"}
    await s3.save(fork, "fork", metadata=meta, expected_parent="")
    history_puts = [_plain(body) for key, body in puts if key.startswith(HISTORY)]
    assert not any(m in body for m in messages for body in history_puts)
    assert any(fork.messages[-1].json_bytes() in body for body in history_puts)  # its own message, once
    await s3.delete("src")  # the copy and the fork keep what they share
    fresh = _backend(s3.bucket)
    try:
        assert (await fresh.load("dst")).model_dump() == state.model_dump()  # type: ignore[union-attr]
        assert (await fresh.load("fork")).model_dump() == fork.model_dump()  # type: ignore[union-attr]
        await fresh.delete("dst")
        await fresh.delete("fork")
        assert sizes(fresh, HISTORY) == {}  # the last user gone, the source's objects went with it
    finally:
        await fresh.close()


def _plain(body: bytes) -> bytes:
    """An object's bytes, decompressed when it is packed (``rest_delta.pack``)."""
    if body[:1] == b"\x01":
        return zlib.decompress(body[1:])
    return body[1:] if body[:1] == b"\x00" else body


async def test_a_corrupted_batch_is_checkpoint_corrupt(s3: Any, bucket: str) -> None:
    await grow(s3, "t", 3)
    raw = s3._io.client
    batch = next(k for k in sizes(s3, HISTORY) if "/o/" in k and k.rsplit("/", 1)[-1].startswith("b"))
    body = _plain(raw.get_object(Bucket=bucket, Key=batch)["Body"].read())
    flipped = body.replace(b"question", b"questiom", 1)
    assert flipped != body
    raw.put_object(Bucket=bucket, Key=batch, Body=b"\x00" + flipped)
    fresh = _backend(bucket)
    try:
        with pytest.raises(CheckpointCorrupt, match="entry ids"):
            await fresh.load("t")
        raw.delete_object(Bucket=bucket, Key=batch)
        with pytest.raises(CheckpointCorrupt, match="missing"):
            await _backend(bucket).load("t")
    finally:
        await fresh.close()


async def test_an_edited_row_is_checkpoint_corrupt(s3: Any, bucket: str) -> None:
    """A row whose save metadata was edited in the head no longer matches its digest."""
    await grow(s3, "t", 1)
    raw = s3._io.client
    key = next(k for k in sizes(s3, HISTORY) if "/h/" in k)
    head = orjson.loads(_plain(raw.get_object(Bucket=bucket, Key=key)["Body"].read()))
    head["tail"][-1]["m"] = head["tail"][-1]["m"].replace('"final"', '"answer"')
    raw.put_object(Bucket=bucket, Key=key, Body=b"\x00" + orjson.dumps(head))
    fresh = _backend(bucket)
    try:
        with pytest.raises(CheckpointCorrupt, match="digest"):
            await fresh.load("t")
    finally:
        await fresh.close()


async def test_sharing_and_collection_keep_the_books(s3: Any, bucket: str) -> None:
    """Copies, forks, prunes and deletes in turn: after each, every object a head names is there,
    nothing is left unnamed, and each sharing is recorded on both heads; at the end nothing is left."""
    state = await grow(s3, "a", 12)
    assert await s3.check_store() == []
    await s3.copy_thread("a", "b")
    await s3.copy_thread("b", "c")  # c reaches a's objects through b
    fork = state.model_copy()
    fork.messages = [*state.messages, Message.user("fork")]
    await s3.save(fork, "f", metadata={"source": "fork", "forked_from": "b"}, expected_parent="")
    assert await s3.check_store() == []
    assert await s3.prune("a", keep_last=3) > 0
    await grow(s3, "a", 2, seed=1)  # a's history grows again after the prune
    await s3.delete("a")
    await s3.delete("b")  # both tombstones now: c and f still reach their objects
    assert await s3.check_store() == []
    assert await s3.list_threads() == ["c", "f"]
    fresh = _backend(bucket)
    try:
        assert (await fresh.load("c")).model_dump() == state.model_dump()  # type: ignore[union-attr]
        assert (await fresh.load("f")).model_dump() == fork.model_dump()  # type: ignore[union-attr]
        assert (await verify_thread(fresh, "c")).ok
        await fresh.delete("c")
        await fresh.delete("f")
        assert await fresh.check_store() == []
        assert sizes(fresh, HISTORY) == {}
        s3._io.client.put_object(Bucket=bucket, Key=f"{HISTORY}o/x/bdead", Body=b"left by a killed writer")
        assert await fresh.check_store() == [
            f"unreferenced object {HISTORY}o/x/bdead (a writer stopped before its commit)"
        ]
        await fresh.save(state, "live")
        assert await fresh.collect() == 0  # younger than an hour: it may be a save about to commit
        assert await fresh.collect(older_than_hours=0) == 1
        assert await fresh.check_store() == []
        assert (await fresh.load("live")).model_dump() == state.model_dump()  # type: ignore[union-attr]
    finally:
        await fresh.close()


async def test_tulip_layout_projects_every_checkpoint_through_a_prune(bucket: str) -> None:
    """``layout="tulip"``: an envelope per checkpoint; a prune removes the dropped ones' and rewrites
    the survivors whose parent it re-linked, so tulip's copy matches the history after it."""
    cp = _backend(bucket, layout="tulip")
    try:
        await grow(cp, "t", 4)
        assert len(sizes(cp, "tulip/checkpoints/t/")) == 8 * 2 + 1
        assert await cp.prune("t") == 4  # the iteration saves of the ended turns
        assert len(sizes(cp, "tulip/checkpoints/t/")) == 4 * 2 + 1
        assert await cp.check_mirror("t") == []
        assert await cp.check_store() == []
    finally:
        await cp.close()
