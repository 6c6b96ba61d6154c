"""Threads cross between tulip-agents' redis/postgresql/mysql checkpointers and ours, both ways.

Both sides run against the same server and the same key prefix / table; nothing may be dropped.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.conftest import require_service
from tulip_nb.core import AgentState

from ..backends.conformance import full_state
from ..backends.factories.kv import (
    MYSQL_DSN,
    PG_DSN,
    REDIS_URL,
    drop_mysql_table,
    drop_pg_table,
    drop_redis_prefix,
)

tulip_backends = pytest.importorskip("tulip.memory.backends", reason="tulip-agents (the interop peer) is not installed")
tulip_state = pytest.importorskip("tulip.core.state")

pytestmark = pytest.mark.interop
PORTS = {"redis": 6379, "postgresql": 5432, "mysql": 3306}


def as_tulip(state: AgentState) -> Any:
    return tulip_state.AgentState.model_validate_json(state.to_json_bytes())


async def close_tulip(checkpointer: Any) -> None:
    """Close the peer; tulip's RedisBackend.close leaves its pool's connections open, so do it here."""
    client = getattr(checkpointer._backend, "_client", None)
    if client is not None and hasattr(client, "connection_pool"):
        await client.aclose()
        await client.connection_pool.disconnect()
        checkpointer._backend._client = None
    await checkpointer.close()


@pytest.fixture(params=sorted(PORTS))
async def both(request: Any) -> AsyncIterator[tuple[Any, Any]]:
    """(ours, tulip's) checkpointer on the same server and the same prefix / table."""
    from tulip_nb.memory.backends import mysql_checkpointer, postgresql_checkpointer, redis_checkpointer

    kind = request.param
    require_service(kind, "127.0.0.1", PORTS[kind])
    name = f"tnbinterop_{uuid.uuid4().hex[:12]}"
    if kind == "redis":
        name += ":"
        # tulip lists and loads every checkpoint we write here: the history with every checkpoint
        # projected (the default layout shows tulip the latest turn end: test_redis_history.py)
        ours = redis_checkpointer(url=REDIS_URL, prefix=name, layout="tulip")
        theirs = tulip_backends.redis_checkpointer(url=REDIS_URL, prefix=name)
    elif kind == "postgresql":
        ours = postgresql_checkpointer(dsn=PG_DSN, table_name=name, layout="tulip")
        theirs = tulip_backends.postgresql_checkpointer(dsn=PG_DSN, table_name=name)
    else:
        ours = mysql_checkpointer(dsn=MYSQL_DSN, table_name=name, ssl_disabled=True, layout="tulip")
        theirs = tulip_backends.mysql_checkpointer(dsn=MYSQL_DSN + "?ssl_disabled=1", table_name=name)
    try:
        yield ours, theirs
    finally:
        await ours.close()
        await close_tulip(theirs)
        await {"redis": drop_redis_prefix, "postgresql": drop_pg_table, "mysql": drop_mysql_table}[kind](name)


async def test_we_read_what_tulip_writes(both: tuple[Any, Any]) -> None:
    ours, theirs = both
    state = full_state()
    first = await theirs.save(as_tulip(state), "user/42:chat #1", metadata={"step": 1})
    second = await theirs.save(as_tulip(full_state(marker="z")), "user/42:chat #1")
    assert await ours.list_checkpoints("user/42:chat #1") == [second, first]
    assert await ours.list_threads() == ["user/42:chat #1"]
    older = await ours.load_checkpoint("user/42:chat #1", first)
    assert older is not None and older.metadata == {"step": 1}
    # everything tulip wrote arrives: compare against the raw JSON tulip put in the store
    written = as_tulip(state).to_checkpoint()
    assert orjson.loads(older.state.to_json_bytes()) == orjson.loads(AgentState.model_validate(written).to_json_bytes())
    latest = await ours.load("user/42:chat #1")
    assert latest is not None and latest.messages[1].content == "question 0 z"
    # and we can continue the thread tulip started
    third = await ours.save(latest, "user/42:chat #1")
    assert await theirs.list_checkpoints("user/42:chat #1") == [third, second, first]


async def test_tulip_reads_what_we_write(both: tuple[Any, Any]) -> None:
    ours, theirs = both
    state = full_state()
    first = await ours.save(state, "user/42:chat #1", metadata={"step": 1})
    second = await ours.save(full_state(marker="z"), "user/42:chat #1")
    assert await theirs.list_checkpoints("user/42:chat #1") == [second, first]
    loaded = await theirs.load("user/42:chat #1", first)
    assert loaded is not None
    assert loaded.model_dump(mode="json") == as_tulip(state).model_dump(mode="json")
    latest = await theirs.load("user/42:chat #1")
    assert latest is not None and latest.messages[1].content == "question 0 z"
    # tulip continues the thread we started, and we see its save as the latest
    third = await theirs.save(latest, "user/42:chat #1")
    assert await ours.latest_checkpoint_id("user/42:chat #1") == third
    assert await ours.list_checkpoints("user/42:chat #1") == [third, second, first]
