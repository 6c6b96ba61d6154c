"""Redis on the history model: storage that grows with the messages, copies that write no entry,
corruption that is an error, TTLs refused where they cannot hold, the projection kept in step."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import examples, require_service
from tulip_nb.core import AgentState, CheckpointCorrupt, Message, UserError
from tulip_nb.memory.backends._kv import decode_record
from tulip_nb.memory.backends.redis import HISTORY_NAMESPACE
from tulip_nb.testing import MessySpec, abuild_messy_thread, messy_specs

from .factories.kv import REDIS_URL, drop_redis_prefix
from .test_load_many import _check_equal as check_equal


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    require_service("redis", "127.0.0.1", 6379)
    name = f"tnbrh:{uuid.uuid4().hex[:12]}:"
    try:
        yield name
    finally:
        await drop_redis_prefix(name)


@pytest.fixture
async def redis(prefix: str) -> AsyncIterator[Any]:
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        await client.aclose()


def make(prefix: str, **kw: Any) -> Any:
    from tulip_nb.memory.backends import redis_checkpointer

    return redis_checkpointer(url=REDIS_URL, prefix=prefix, **kw)


def ns(prefix: str, name: str) -> str:
    return prefix + HISTORY_NAMESPACE + name


async def grow(cp: Any, thread_id: str, turns: int, *, size: int = 1500) -> AgentState:
    """A thread saved as an agent saves it: per turn a user message, a tool round (a result of
    ``size`` characters, as the research workload's 1-3 kB), an answer; an iteration save after
    each model call and a turn end; the metadata grows a log per turn."""
    state = AgentState(agent_id="a", metadata={"log": []})
    for t in range(turns):
        state = state.model_copy()
        state.messages = [*state.messages, Message.user(f"question {t} " + "q" * 100)]
        state.messages = [*state.messages, Message.assistant(f"looking {t}")]
        await cp.save(state, thread_id, metadata={"source": "iteration", "turn": t})
        state.messages = [*state.messages, Message.user(f"tool says {t} " + "r" * size)]
        state.messages = [*state.messages, Message.assistant(f"answer {t} " + "a" * 300)]
        state.metadata = {**state.metadata, "log": [*state.metadata["log"], {"turn": t, "tokens": 100 + t}]}
        await cp.save(state, thread_id, metadata={"source": "iteration", "turn": t})
        await cp.save(state, thread_id, metadata={"source": "final", "turn": t})
    return state


async def memory_of(redis: Any, keys: list[str]) -> int:
    return sum([int(await redis.memory_usage(k, samples=0) or 0) for k in keys])


async def test_storage_grows_with_the_messages_not_the_saves(prefix: str, redis: Any) -> None:
    cp = make(prefix)
    try:
        state = await grow(cp, "long", 100)
    finally:
        await cp.close()
    messages_json = sum(len(m.json_bytes()) for m in state.messages)
    history = [ns(prefix, n) for n in ("e", "n", "r:long", "f:long", "o:long")]
    used = await memory_of(redis, history)
    assert len(state.messages) == 400 and await redis.hlen(ns(prefix, "e")) == 400  # each message once
    assert used < 3 * messages_json, (used, messages_json)
    tulip = [f"{prefix}long:latest", f"{prefix}long:_checkpoints"]
    assert await redis.exists(*tulip) == 2  # and tulip's keys: one record, latest, the index
    raw = make(prefix)
    try:  # the raw backend's listings show tulip's keys only, never the history's namespace
        end = await raw.latest_checkpoint_id("long")
        assert sorted(await raw.backend.list_threads()) == sorted(["long:latest", "long:_checkpoints", f"long:{end}"])
    finally:
        await raw.close()


async def test_a_copy_writes_no_entry_and_a_delete_collects_only_unshared_ones(prefix: str, redis: Any) -> None:
    cp = make(prefix)
    try:
        state = await grow(cp, "src", 3)
        entries = await redis.hgetall(ns(prefix, "e"))
        assert await cp.copy_thread("src", "dst") is True
        assert await redis.hgetall(ns(prefix, "e")) == entries  # not one entry written again
        copied = await cp.load("dst")
        assert copied is not None and copied.messages == state.messages
        fork = state.model_copy()
        fork.messages = [*state.messages, Message.user("fork")]
        await cp.save(fork, "fork", metadata={"source": "fork"})
        assert await redis.hlen(ns(prefix, "e")) == len(entries) + 1
        assert await cp.delete("src") is True
        assert await redis.hlen(ns(prefix, "e")) == len(entries) + 1  # the copy and the fork still reach them
        assert await cp.delete("dst") is True and await cp.delete("fork") is True
        assert await redis.hlen(ns(prefix, "e")) == 0 and await redis.hlen(ns(prefix, "n")) == 0
        assert await cp.check_store() == []
    finally:
        await cp.close()


async def test_a_changed_entry_is_corrupt_never_an_older_state(prefix: str, redis: Any) -> None:
    cp = make(prefix)
    try:
        state = await grow(cp, "t", 2)
        latest = await cp.latest_checkpoint_id("t")
        entries = await redis.hgetall(ns(prefix, "e"))
        target = next(eid for eid, v in entries.items() if b"question 1" in v)
        value = entries[target]
        await redis.hset(ns(prefix, "e"), target, value.replace(b"question 1", b"question 9"))
        fresh = make(prefix)
        try:
            with pytest.raises(CheckpointCorrupt, match="no longer matches its entry id"):
                await fresh.load("t")
            with pytest.raises(CheckpointCorrupt):
                await fresh.load("t", latest)
        finally:
            await fresh.close()
        # a save of the writer's own messages repairs the entry (its id proves the bytes)
        await redis.hset(ns(prefix, "e"), target, value)
        got = await cp.load("t")
        assert got is not None and got.messages == state.messages
    finally:
        await cp.close()


async def test_an_edited_row_or_a_missing_entry_is_corrupt(prefix: str, redis: Any) -> None:
    cp = make(prefix)
    try:
        await grow(cp, "t", 2)
        cid = await cp.latest_checkpoint_id("t")
        row = await redis.hget(ns(prefix, "r:t"), cid)
        await redis.hset(ns(prefix, "r:t"), cid, row.replace(b'"turn":1', b'"turn":7'))
        with pytest.raises(CheckpointCorrupt, match="content digest"):
            await cp.load("t")
        await redis.hset(ns(prefix, "r:t"), cid, row)
        await redis.hdel(ns(prefix, "e"), row[:32])  # the row's head entry
        with pytest.raises(CheckpointCorrupt, match="head entry is missing"):
            await cp.load("t")
    finally:
        await cp.close()


async def test_ttl_is_refused_by_the_history_layouts_and_kept_by_kv(prefix: str, redis: Any) -> None:
    for layout in ("history", "tulip"):
        with pytest.raises(UserError, match="cannot expire with one thread"):
            make(prefix, ttl_seconds=60, layout=layout)
    cp = make(prefix, ttl_seconds=60)  # the seed's call: tulip's layout, every key expiring together
    try:
        assert type(cp).__name__ == "StorageBackendAdapter"
        await cp.save(AgentState(messages=[Message.user("hi")]), "t")
        keys = [k async for k in redis.scan_iter(match=prefix + "*")]
        ttls = [await redis.ttl(k) for k in keys]
        assert keys and all(0 < t <= 60 for t in ttls), ttls
    finally:
        await cp.close()


async def test_the_default_projection_is_the_latest_turn_end(prefix: str, redis: Any) -> None:
    cp = make(prefix)
    try:
        await grow(cp, "t", 2)
        infos = await cp.list_checkpoint_infos("t", None)
        ends = [i.checkpoint_id for i in infos if i.metadata["source"] == "final"]
        index = orjson.loads(await redis.get(f"{prefix}t:_checkpoints"))
        assert [e["checkpoint_id"] for e in index["checkpoints"]] == [ends[0]]
        latest = orjson.loads(await redis.get(f"{prefix}t:latest"))
        assert latest["_checkpoint_id"] == ends[0]
        record = await redis.get(f"{prefix}t:{ends[0]}")
        shown, envelope = decode_record(record, where="test", thread_id="t")
        ours = await cp.load_checkpoint("t", ends[0])
        assert ours is not None and orjson.loads(shown.to_json_bytes()) == orjson.loads(ours.state.to_json_bytes())
        assert envelope["_metadata"] == ours.metadata and record == await redis.get(f"{prefix}t:latest")
        tulip_keys = {k.decode() async for k in redis.scan_iter(match=prefix + "t:*")}
        assert tulip_keys == {f"{prefix}t:{ends[0]}", f"{prefix}t:latest", f"{prefix}t:_checkpoints"}
        assert await cp.check_mirror("t") == []
        await redis.set(f"{prefix}t:latest", b"{}")
        assert await cp.check_mirror("t") == [f"{ends[0]}: tulip's :latest is not the newest record"]
        await redis.set(f"{prefix}t:latest", record)
        # dropping that turn end projects the one before it, in the same transaction
        assert await cp.delete("t", ends[0]) is True
        latest = orjson.loads(await redis.get(f"{prefix}t:latest"))
        assert latest["_checkpoint_id"] == ends[1]
        assert await redis.exists(f"{prefix}t:{ends[0]}") == 0
        # a tulip key removed by hand is written again by the next instance's first save
        await redis.delete(f"{prefix}t:latest", f"{prefix}t:{ends[1]}")
        again = make(prefix)
        try:
            state = await again.load("t")
            assert state is not None
            await again.save(state, "t", metadata={"source": "iteration"})
        finally:
            await again.close()
        assert orjson.loads(await redis.get(f"{prefix}t:latest"))["_checkpoint_id"] == ends[1]
    finally:
        await cp.close()


async def test_layout_tulip_projects_every_checkpoint_and_prune_keeps_it_in_step(prefix: str, redis: Any) -> None:
    cp = make(prefix, layout="tulip")
    try:
        await grow(cp, "t", 3)
        ids = await cp.list_checkpoints("t", None)
        index = orjson.loads(await redis.get(f"{prefix}t:_checkpoints"))
        assert [e["checkpoint_id"] for e in index["checkpoints"]] == ids
        assert await cp.prune("t") == 6
        kept = await cp.list_checkpoints("t", None)
        index = orjson.loads(await redis.get(f"{prefix}t:_checkpoints"))
        assert [e["checkpoint_id"] for e in index["checkpoints"]] == kept
        assert await cp.check_mirror("t") == []
        for cid in kept:  # each record re-linked with the history's metadata
            record = orjson.loads(await redis.get(f"{prefix}t:{cid}"))
            got = await cp.load_checkpoint("t", cid)
            assert got is not None and record["_metadata"] == got.metadata
        assert {k.decode() async for k in redis.scan_iter(match=prefix + "t:*")} == {
            *(f"{prefix}t:{c}" for c in kept),
            f"{prefix}t:latest",
            f"{prefix}t:_checkpoints",
        }
    finally:
        await cp.close()


async def test_loads_read_the_main_line_or_walk_and_agree(prefix: str, redis: Any) -> None:
    """A load reads the thread's main line (LRANGE + HMGET) when it holds the row's history and walks
    the parent links otherwise (a copy, an older branch): the same states either way."""
    cp = make(prefix)
    try:
        state = await grow(cp, "t", 3)
        first = await cp.latest_checkpoint_id("t")
        assert await redis.llen(ns(prefix, "m:t")) == len(state.messages)
        assert await cp.copy_thread("t", "c") is True
        assert await redis.exists(ns(prefix, "m:c")) == 0  # a copy writes rows only: its loads walk
        walked = await cp.load("c")
        assert walked is not None and walked.messages == state.messages
        # a save whose history differs (a message replaced) becomes the main line; the older row walks
        other = state.model_copy()
        other.messages = [*state.messages[:-1], Message.assistant("a different answer")]
        await cp.save(other, "t", metadata={"source": "final"})
        line = await redis.lrange(ns(prefix, "m:t"), 0, -1)
        assert len(line) == len(other.messages) and line[-1] != (await redis.hget(ns(prefix, "r:t"), first))[:32]
        fresh = make(prefix)
        try:
            latest, older = await fresh.load("t"), await fresh.load("t", first)
            assert latest is not None and latest.messages == other.messages
            assert older is not None and older.messages == state.messages
        finally:
            await fresh.close()
        assert await cp.check_store() == []
    finally:
        await cp.close()


async def test_a_damaged_latest_header_is_listed_reported_and_the_thread_stays_writable(
    prefix: str, redis: Any
) -> None:
    cp = make(prefix)
    try:
        state = await grow(cp, "t", 2)
        cid = await cp.latest_checkpoint_id("t")
        await redis.hset(ns(prefix, "r:t"), cid, b"garbage")
        with pytest.raises(CheckpointCorrupt, match="cannot be read"):
            await cp.load("t")
        infos = await cp.list_checkpoint_infos("t", None)
        assert infos[0].checkpoint_id == cid and infos[0].metadata == {}
        after = await cp.save(state, "t", metadata={"source": "final"})
        got = await cp.load("t")
        assert got is not None and got.messages == state.messages
        assert (await cp.list_checkpoint_infos("t", 1))[0].checkpoint_id == after
    finally:
        await cp.close()


async def test_a_batch_load_reads_each_message_once_and_equals_single_loads(prefix: str, redis: Any) -> None:
    from tulip_nb.memory.integrity import verify_thread

    cp = make(prefix, sign=True)
    try:
        await grow(cp, "t", 4)
        other = make(prefix)
        try:
            fork = await other.load("t")
            assert fork is not None
            fork.messages = [*fork.messages, Message.user("an older branch")]
            await cp.copy_thread("t", "c")
        finally:
            await other.close()
        ids = list(reversed(await cp.list_checkpoints("t", None)))
        batch = await cp.load_checkpoints("t", [*ids, "nope"])
        single = make(prefix)
        try:
            for cid, got in zip(ids, batch, strict=False):
                one = await single.load_checkpoint("t", cid)
                assert one is not None and not isinstance(got, Exception)
                assert got.state.messages == one.state.messages and got.metadata == one.metadata
        finally:
            await single.close()
        assert type(batch[-1]).__name__ == "CheckpointNotFound"
        assert (await verify_thread(cp, "t")).ok and (await verify_thread(cp, "c")).counts().get("broken_chain", 0) == 0
        # a changed entry fails the checkpoints that reach it, and only those
        entries = await redis.hgetall(ns(prefix, "e"))
        target = next(eid for eid, v in entries.items() if b"question 2" in v)
        await redis.hset(ns(prefix, "e"), target, entries[target].replace(b"question 2", b"question 8"))
        fresh = make(prefix)
        try:
            batch = await fresh.load_checkpoints("t", ids)
        finally:
            await fresh.close()
        bad = [isinstance(b, CheckpointCorrupt) for b in batch]
        assert bad == [False] * 6 + [True] * 6, bad
    finally:
        await cp.close()


@settings(max_examples=examples(0.03), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=messy_specs(min_turns=4, max_turns=12, max_forks=2))
async def test_batch_equals_one_by_one_on_messy_threads(spec: MessySpec) -> None:
    """Failed turns, tulip turns, forks that change the prompt: a batch load equals single loads."""
    require_service("redis", "127.0.0.1", 6379)
    name = f"tnbrh:{uuid.uuid4().hex[:12]}:"
    cp = make(name)
    try:
        mt = await abuild_messy_thread(cp, "messy", spec)
        assert await check_equal(cp, "messy") > 0
        for fork in mt.forks:
            await check_equal(cp, fork.thread_id)
        assert await cp.check_store() == []
    finally:
        await cp.close()
        await drop_redis_prefix(name)


async def test_a_damaged_row_is_not_shown_to_tulip_and_never_blocks_a_write(prefix: str, redis: Any) -> None:
    cp = make(prefix)
    try:
        state = await grow(cp, "t", 2)
        end = await cp.latest_checkpoint_id("t")
        await redis.hset(ns(prefix, "f:t"), end, b"damaged")
        await redis.delete(f"{prefix}t:{end}")  # its projection must be written again, and cannot be
        fresh = make(prefix)
        try:
            with pytest.raises(CheckpointCorrupt):
                await fresh.load("t")
            saved = await fresh.save(state, "t", metadata={"source": "iteration"})
            assert await redis.exists(f"{prefix}t:{end}") == 0
            assert await fresh.prune("t", keep_last=3) >= 1
            assert saved in await fresh.list_checkpoints("t", None)
        finally:
            await fresh.close()
    finally:
        await cp.close()
