"""One Redis ``prefix=`` string names the same keys in tulip-agents and in tulip_nb (issue 25, item 8).

tulip joins its prefix and the key as they are. tulip_nb used to append a ``:`` to a prefix without
one, so ``prefix="trial"`` put a tulip agent and tulip_nb in different keyspaces (``trialt:…`` and
``trial:t:…``) and neither saw the other's threads. Now the string is used as given, and a prefix
whose keys tulip would mix with another prefix's (no trailing ``:``) is refused with the fix.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import require_service
from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends import checkpointer_from_url

from ..backends.factories.kv import REDIS_URL, drop_redis_prefix
from .test_kv_interop import as_tulip, close_tulip

tulip_backends = pytest.importorskip("tulip.memory.backends", reason="tulip-agents (the interop peer) is not installed")

pytestmark = pytest.mark.interop
THREAD = "user/42:chat #1"


def said(text: str) -> AgentState:
    return AgentState(messages=[Message.user(text)])


async def raw_keys(prefix: str) -> set[str]:
    """tulip's keys under ``prefix`` (the history store's own namespace, ``<prefix>\\x00h:``, left out)."""
    import redis.asyncio as aioredis

    from tulip_nb.memory.backends.redis import HISTORY_NAMESPACE

    client = aioredis.from_url(REDIS_URL)
    try:
        found = {k.decode() async for k in client.scan_iter(match=prefix + "*", count=1000)}
        return {k for k in found if not k.startswith(prefix + HISTORY_NAMESPACE)}
    finally:
        await client.aclose()


@pytest.fixture(params=["keyword", "url"])
async def same_prefix(request: Any) -> AsyncIterator[tuple[Any, Any, str]]:
    """(ours, tulip's) checkpointer given the one prefix string (ours as a keyword or in a URL)."""
    require_service("redis", "127.0.0.1", 6379)
    from tulip_nb.memory.backends import redis_checkpointer

    prefix = f"tnbprefix:{uuid.uuid4().hex[:10]}:"
    if request.param == "keyword":
        ours = redis_checkpointer(url=REDIS_URL, prefix=prefix)
    else:
        ours = checkpointer_from_url(f"{REDIS_URL}?prefix={prefix}")
    theirs = tulip_backends.redis_checkpointer(url=REDIS_URL, prefix=prefix)
    try:
        yield ours, theirs, prefix
    finally:
        await ours.close()
        await close_tulip(theirs)
        await drop_redis_prefix(prefix)


async def test_tulip_writes_we_read_under_the_same_prefix(same_prefix: tuple[Any, Any, str]) -> None:
    ours, theirs, prefix = same_prefix
    first = await theirs.save(as_tulip(said("from tulip")), THREAD)
    keys = await raw_keys(prefix)
    assert keys == {f"{prefix}{THREAD}:{first}", f"{prefix}{THREAD}:latest", f"{prefix}{THREAD}:_checkpoints"}
    assert await ours.list_threads() == [THREAD]
    assert await ours.list_checkpoints(THREAD) == [first]
    loaded = await ours.load(THREAD)
    assert loaded is not None and loaded.messages[0].content == "from tulip"
    second = await ours.save(loaded, THREAD)  # and we continue it where tulip looks
    assert await theirs.list_checkpoints(THREAD) == [second, first]
    assert await raw_keys(prefix) == keys | {f"{prefix}{THREAD}:{second}"}


async def test_we_write_tulip_reads_under_the_same_prefix(same_prefix: tuple[Any, Any, str]) -> None:
    ours, theirs, prefix = same_prefix
    first = await ours.save(said("from tulip_nb"), THREAD)
    assert await raw_keys(prefix) == {
        f"{prefix}{THREAD}:{first}",
        f"{prefix}{THREAD}:latest",
        f"{prefix}{THREAD}:_checkpoints",
    }
    assert await theirs.list_checkpoints(THREAD) == [first]
    loaded = await theirs.load(THREAD)
    assert loaded is not None and loaded.messages[0].content == "from tulip_nb"
    second = await theirs.save(loaded, THREAD)
    assert await ours.list_checkpoints(THREAD) == [second, first]
    assert await ours.list_threads() == [THREAD]


async def test_a_prefix_tulip_would_mix_with_another_is_refused_with_the_fix() -> None:
    """Why ``"trial"`` cannot be honoured: in tulip, thread ``x1`` under ``"trial"`` *is* thread
    ``1`` under ``"trialx"``. tulip_nb refuses it (keyword or URL), naming the prefix to write."""
    require_service("redis", "127.0.0.1", 6379)
    from tulip_nb.memory.backends import redis_checkpointer

    base = f"tnbprefix{uuid.uuid4().hex[:10]}trial"
    short = tulip_backends.redis_checkpointer(url=REDIS_URL, prefix=base)
    longer = tulip_backends.redis_checkpointer(url=REDIS_URL, prefix=base + "x")
    try:
        cid = await longer.save(as_tulip(said("under trialx")), "1")
        mixed = await short.load("x1", cid)  # tulip: the other prefix's thread, read as its own
        assert mixed is not None and mixed.messages[0].content == "under trialx"
    finally:
        await close_tulip(short)
        await close_tulip(longer)
        await drop_redis_prefix(base)
    for make in (
        lambda: redis_checkpointer(url=REDIS_URL, prefix=base),
        lambda: checkpointer_from_url(f"{REDIS_URL}?prefix={base}"),
    ):
        with pytest.raises(ValueError, match=rf"prefix='{base}' must end in ':'.*write prefix='{base}:'"):
            make()
