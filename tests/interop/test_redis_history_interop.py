"""tulip-agents and the Redis history layout on one prefix: tulip resumes from the projection (the
latest turn end as tulip's keys), tulip_nb continues after tulip's own turns, tulip's deletes of its
checkpoints never break the thread, and a thread tulip started is continued by tulip_nb."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.conftest import require_service
from tulip_nb.agent import Agent, NullManager
from tulip_nb.memory.checkpointer import caller_metadata
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.models import ScriptedModel, text

from ..backends.factories.kv import REDIS_URL, drop_redis_prefix
from .test_tulip_after_tulip_nb import close_tulip

tulip_agent = pytest.importorskip("tulip.agent", reason="tulip-agents (the interop peer) is not installed")
tulip_testing = pytest.importorskip("tulip.testing")
tulip_backends = pytest.importorskip("tulip.memory.backends")
tulip_conversation = pytest.importorskip("tulip.memory.conversation")

pytestmark = pytest.mark.interop

THREAD = "user/7:history #1"


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    require_service("redis", "127.0.0.1", 6379)
    name = f"tnbrhi:{uuid.uuid4().hex[:12]}:"
    try:
        yield name
    finally:
        await drop_redis_prefix(name)


@pytest.fixture
async def theirs(prefix: str) -> AsyncIterator[Any]:
    cp = tulip_backends.redis_checkpointer(url=REDIS_URL, prefix=prefix)
    try:
        yield cp
    finally:
        await close_tulip(cp)


def ours_on(prefix: str) -> Any:
    from tulip_nb.memory.backends import redis_checkpointer

    return redis_checkpointer(url=REDIS_URL, prefix=prefix)


def our_agent(cp: Any, replies: list[str]) -> Agent:
    return Agent(
        ScriptedModel([text(r) for r in replies]),
        [],
        system_prompt="You are terse.",
        checkpointer=cp,
        conversation_manager=NullManager(),
        checkpoint_every_n_iterations=1,
    )


def their_agent(cp: Any, replies: list[str]) -> Any:
    return tulip_agent.Agent(
        model=tulip_testing.ScriptedModel([tulip_testing.text(r) for r in replies]),
        tools=[],
        system_prompt="You are terse.",
        conversation_manager=tulip_conversation.NullManager(),
        checkpointer=cp,
    )


async def tulip_keys(prefix: str) -> set[str]:
    """tulip's keys of the thread (the history's namespace is not among them)."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL)
    try:
        return {k.decode()[len(prefix) :] async for k in client.scan_iter(match=prefix + "user/7*", count=1000)}
    finally:
        await client.aclose()


async def index_ids(prefix: str) -> list[str]:
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL)
    try:
        raw = await client.get(f"{prefix}{THREAD}:_checkpoints")
    finally:
        await client.aclose()
    return [e["checkpoint_id"] for e in orjson.loads(raw)["checkpoints"]] if raw else []


async def test_tulip_resumes_our_thread_and_we_continue_after_tulip(prefix: str, theirs: Any) -> None:
    cp = ours_on(prefix)
    try:
        ours = our_agent(cp, ["one", "two", "three"])
        results = []
        for q in ("q1", "q2", "q3"):
            results.append(await ours.run(q, thread_id=THREAD))
            assert await index_ids(prefix) == [results[-1].checkpoint_id]  # the projection moves each turn end
        end = results[-1].checkpoint_id
        assert await tulip_keys(prefix) == {f"{THREAD}:{end}", f"{THREAD}:latest", f"{THREAD}:_checkpoints"}
        logged = await cp.list_checkpoints(THREAD, None)
        assert len(logged) >= 3

        # tulip sees the projection, and its agent continues the thread from it
        assert await theirs.list_checkpoints(THREAD) == [end]
        t_result = await their_agent(theirs, ["four"]).arun("q4", thread_id=THREAD)
        assert [m.content for m in t_result.state.messages][-4:] == ["q3", "three", "q4", "four"]
        tulip_ids = [c for c in await index_ids(prefix) if c not in logged]
        assert tulip_ids

        # we see tulip's checkpoint as the latest, and our next turn chains after it
        fresh = ours_on(prefix)
        try:
            tulip_latest = tulip_ids[0]
            assert await fresh.latest_checkpoint_id(THREAD) == tulip_latest
            latest = await fresh.load(THREAD)
            assert latest is not None and latest.messages[-1].content == "four"
            fifth = await our_agent(fresh, ["five"]).run("q5", thread_id=THREAD)
            assert [m.content for m in fifth.state.messages][-4:] == ["q4", "four", "q5", "five"]
            infos = await fresh.list_checkpoint_infos(THREAD, None)
            ids = [i.checkpoint_id for i in infos]
            assert len(ids) == len(set(ids)) and ids[0] == fifth.checkpoint_id
            assert set(tulip_ids) <= set(ids) and set(logged) <= set(ids)
            after = [i for i in infos if i.parent_checkpoint_id == tulip_latest]
            assert len(after) == 1 and caller_metadata(after[0].metadata)["parent_checkpoint_id"] == tulip_latest
            # tulip's index: our new turn end and tulip's own; the old projection is gone
            assert (await index_ids(prefix))[0] == fifth.checkpoint_id
            assert set(await index_ids(prefix)) == {fifth.checkpoint_id, *tulip_ids}
            assert f"{THREAD}:{end}" not in await tulip_keys(prefix)
            assert (await verify_thread(fresh, THREAD)).counts().get("broken_chain", 0) == 0
            assert await fresh.check_mirror(THREAD) == []
            again = await theirs.load(THREAD)
            assert again is not None and again.messages[-1].content == "five"

            # tulip deleting its own checkpoints (its interrupted-turn clean-up) never breaks ours
            for cid in tulip_ids:
                await theirs.delete(THREAD, cid)
            assert not set(tulip_ids) & set(await fresh.list_checkpoints(THREAD, None))
            got = await fresh.load(THREAD)
            assert got is not None and got.messages[-1].content == "five"
            assert await fresh.load(THREAD, end) is not None  # our rows are all there
            # and tulip deleting the whole thread removes only what it sees: the history keeps it
            await theirs.delete(THREAD)
            got = await fresh.load(THREAD)
            assert got is not None and got.messages[-1].content == "five"
            await fresh.save(got, THREAD, metadata={"source": "final"})
            assert len(await index_ids(prefix)) == 1  # projected again
            assert await fresh.check_store() == []
        finally:
            await fresh.close()
    finally:
        await cp.close()


async def test_a_thread_tulip_started_is_continued_and_resumed_by_tulip(prefix: str, theirs: Any) -> None:
    first = await their_agent(theirs, ["one"]).arun("q1", thread_id=THREAD)
    started = await theirs.list_checkpoints(THREAD)
    cp = ours_on(prefix)
    try:
        assert await cp.list_threads() == [THREAD]
        assert await cp.list_checkpoints(THREAD, None) == started
        loaded = await cp.load(THREAD)
        assert loaded is not None and [m.content for m in loaded.messages][-2:] == ["q1", "one"]
        assert first.state.messages[-1].content == "one"
        second = await our_agent(cp, ["two"]).run("q2", thread_id=THREAD)
        infos = await cp.list_checkpoint_infos(THREAD, None)
        assert infos[0].checkpoint_id == second.checkpoint_id
        assert [i.checkpoint_id for i in infos][-len(started) :] == started
        chained = [i for i in infos if i.parent_checkpoint_id == started[0]]
        assert len(chained) == 1  # our first save follows tulip's latest
        assert (await theirs.list_checkpoints(THREAD))[0] == second.checkpoint_id
        resumed = await theirs.load(THREAD)
        assert resumed is not None and [m.content for m in resumed.messages][-4:] == ["q1", "one", "q2", "two"]
        # a copy takes tulip's checkpoints along as rows of the copy
        assert await cp.copy_thread(THREAD, "copy") is True
        assert set(await cp.list_checkpoints("copy", None)) == {i.checkpoint_id for i in infos}
        assert (await verify_thread(cp, "copy")).counts().get("broken_chain", 0) == 0
    finally:
        await cp.close()
