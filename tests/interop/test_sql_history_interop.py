"""A tulip agent and a tulip_nb agent taking turns on one PostgreSQL / MySQL table (the history layout).

tulip reads and writes its key-value layout; tulip_nb keeps the history in side tables and projects
its latest turn end into tulip's keys in the same transaction. Either agent may go first: tulip_nb
loads tulip's own records as checkpoints of the thread (and chains its next save after them), and
tulip resumes from the projection. Both orders run here, on both servers.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import require_service
from tulip_nb.core.keys import PARENT_KEY
from tulip_nb.memory.backends import SQLHistoryCheckpointer, mysql_checkpointer, postgresql_checkpointer
from tulip_nb.memory.integrity import verify_thread

from ..backends.factories.kv import MYSQL_DSN, PG_DSN, drop_mysql_table, drop_pg_table
from .test_tulip_after_tulip_nb import close_tulip, our_agent, pairs, tulip_agent_on

tulip_backends = pytest.importorskip("tulip.memory.backends", reason="tulip-agents (the interop peer) is not installed")

pytestmark = pytest.mark.interop

THREAD = "user/7:sql #1"


@pytest.fixture(params=["postgresql", "mysql"])
async def peers(request: Any) -> AsyncIterator[tuple[SQLHistoryCheckpointer, Any]]:
    kind = request.param
    require_service(kind, "127.0.0.1", 5432 if kind == "postgresql" else 3306)
    name = f"tnbsqlh_{uuid.uuid4().hex[:12]}"
    if kind == "postgresql":
        ours = postgresql_checkpointer(dsn=PG_DSN, table_name=name)
        theirs = tulip_backends.postgresql_checkpointer(dsn=PG_DSN, table_name=name)
    else:
        ours = mysql_checkpointer(dsn=MYSQL_DSN, table_name=name, ssl_disabled=True)
        theirs = tulip_backends.mysql_checkpointer(dsn=MYSQL_DSN + "?ssl_disabled=1", table_name=name)
    try:
        yield ours, theirs
    finally:
        await ours.close()
        await close_tulip(theirs)
        await (drop_pg_table if kind == "postgresql" else drop_mysql_table)(name)


async def test_tulip_first_then_ours_then_tulip(peers: tuple[SQLHistoryCheckpointer, Any]) -> None:
    ours, theirs = peers
    tulip, _ = tulip_agent_on(theirs)
    await tulip.arun("Anything new?", thread_id=THREAD)
    tulip_latest = (await theirs.list_checkpoints(THREAD, limit=1))[0]

    # tulip_nb sees tulip's turn as the thread (nothing of its own stored yet) and continues it
    loaded = await ours.load(THREAD)
    assert loaded is not None and [c for _, c in pairs(loaded.messages)][-1] == "Still raining."
    assert (await ours.list_checkpoints(THREAD, limit=1)) == [tulip_latest]
    agent = our_agent(ours, ["Lisbon"])
    await agent.run("Weather in Lisbon?", thread_id=THREAD)
    infos = await ours.list_checkpoint_infos(THREAD, limit=None)
    assert infos[-1].checkpoint_id == tulip_latest  # tulip's turn is the thread's first checkpoint
    assert infos[-2].metadata[PARENT_KEY] == tulip_latest  # and our first save chained after it

    # tulip resumes from the projection: it sees both turns
    state = await theirs.load(THREAD)
    contents = [m.content for m in state.messages]
    assert "Still raining." in contents and "Lisbon: rain" in contents
    tulip2, _ = tulip_agent_on(theirs)
    await tulip2.arun("And tomorrow?", thread_id=THREAD)
    again = await ours.load(THREAD)
    assert again is not None
    assert [c for _, c in pairs(again.messages)][-1] == "Still raining."
    assert "Lisbon: rain" in [m.content for m in again.messages]
    assert (await verify_thread(ours, THREAD)).ok


async def test_ours_then_tulip_then_ours_keeps_every_turn(peers: tuple[SQLHistoryCheckpointer, Any]) -> None:
    ours, theirs = peers
    await our_agent(ours, ["Lisbon"]).run("Weather in Lisbon?", thread_id=THREAD)
    mine = set(await ours.list_checkpoints(THREAD, limit=None))
    tulip, _ = tulip_agent_on(theirs)
    await tulip.arun("Anything new?", thread_id=THREAD)
    # tulip deleted its own mid-turn saves; every checkpoint of ours is still there
    after = set(await ours.list_checkpoints(THREAD, limit=None))
    assert mine <= after
    await our_agent(ours, ["Porto"]).run("And Porto?", thread_id=THREAD)
    state = await ours.load(THREAD)
    assert state is not None
    said = [m.content for m in state.messages if m.role == "assistant" and m.content]
    assert said == ["Lisbon: rain", "Still raining.", "Porto: rain"]
    theirs_view = await theirs.load(THREAD)
    assert [m.content for m in theirs_view.messages if m.role == "assistant" and m.content] == said
    assert (await verify_thread(ours, THREAD)).ok
