"""The history model on PostgreSQL and MySQL: what a save stores, what a copy or fork writes, the projection.

The conformance suite (``test_conformance.py -k "postgresql or mysql"``) checks the contract and the
races; these check the storage itself, through the store's own connection: the side tables hold
each message once, a copy or a fork writes rows only, and tulip's keys show the latest turn end,
written in the save's transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.conftest import require_service
from tulip_nb.core import AgentState, BackendUnavailable, Message
from tulip_nb.core.keys import SOURCE_KEY
from tulip_nb.memory.backends import SQLHistoryCheckpointer, mysql_checkpointer, postgresql_checkpointer

from .factories.kv import MYSQL_DSN, PG_DSN, drop_mysql_table, drop_pg_table

KINDS = ["postgresql", "mysql"]


@pytest.fixture(params=KINDS)
async def sql(request: Any) -> AsyncIterator[tuple[str, str]]:
    kind = request.param
    require_service(kind, "127.0.0.1", 5432 if kind == "postgresql" else 3306)
    table = f"tnbhist_{uuid.uuid4().hex[:12]}"
    try:
        yield kind, table
    finally:
        await (drop_pg_table if kind == "postgresql" else drop_mysql_table)(table)


def make(kind: str, table: str, **kw: Any) -> SQLHistoryCheckpointer:
    if kind == "postgresql":
        return postgresql_checkpointer(dsn=PG_DSN, table_name=table, **kw)
    return mysql_checkpointer(dsn=MYSQL_DSN, table_name=table, ssl_disabled=True, **kw)


def entries(cp: SQLHistoryCheckpointer) -> tuple[int, int]:
    """(how many entries, their bytes) in the store's entries table."""
    n, size = cp.store.read_sync(
        lambda conn: conn.execute("SELECT COUNT(*), SUM(LENGTH(data)) FROM entries").fetchone()
    )
    return int(n), int(size or 0)


def kv_keys(cp: SQLHistoryCheckpointer, thread_id: str) -> dict[str, Any]:
    """tulip's keys of ``thread_id`` in its table (key -> parsed value)."""

    def read(conn: Any) -> dict[str, Any]:
        keys = [r[0] for r in conn.native(f"SELECT thread_id FROM {cp.dialect.kv_table}")]  # type: ignore[attr-defined]
        mine = [k for k in keys if k.rpartition(":")[0] == thread_id]
        return {k: orjson.loads(v) for k, v in cp.dialect.kv_get_many(conn, mine).items()}

    return cp.store.read_sync(read)


async def save_turns(cp: SQLHistoryCheckpointer, thread_id: str, turns: int) -> AgentState:
    """``turns`` turns of a user question, a tool round and an answer: a mid-turn save and a turn end each."""
    messages = [Message.system("You answer questions.")]
    state = AgentState(messages=messages)
    for t in range(turns):
        messages = [*messages, Message.user(f"question {t}: " + "x" * 200), Message.assistant(f"looking {t}")]
        state = AgentState(messages=messages, metadata={"turn": t})
        await cp.save(state, thread_id, metadata={SOURCE_KEY: "iteration"})
        messages = [*messages, Message.assistant(f"answer {t}: " + "y" * 300)]
        state = AgentState(messages=messages, metadata={"turn": t})
        await cp.save(state, thread_id, metadata={SOURCE_KEY: "final"})
    return state


async def test_a_long_thread_stores_each_message_once(sql: tuple[str, str]) -> None:
    cp = make(*sql)
    try:
        state = await save_turns(cp, "long", 100)
        n, size = entries(cp)
        payload = sum(len(m.json_bytes()) for m in state.messages)
        assert n == len(state.messages) == 301
        assert size < 2 * payload  # each message once (200 saves of whole states would be ~100x)
        rows = cp.store.read_sync(lambda conn: conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0])
        assert int(rows) == 200
        # tulip's keys: the latest turn end only, its record, :latest and a one-entry index
        keys = kv_keys(cp, "long")
        latest = await cp.latest_checkpoint_id("long")
        assert set(keys) == {f"long:{latest}", "long:latest", "long:_checkpoints"}
        assert [e["checkpoint_id"] for e in keys["long:_checkpoints"]["checkpoints"]] == [latest]
        assert keys["long:latest"]["_checkpoint_id"] == latest
        assert len(keys["long:latest"]["messages"]) == 301
        loaded = await cp.load("long")
        assert loaded is not None and loaded.to_json_bytes() == state.to_json_bytes()
    finally:
        await cp.close()


async def test_a_history_longer_than_the_servers_recursion_default_loads(sql: tuple[str, str]) -> None:
    """MySQL and MariaDB stop a recursive query after 1,000 rounds unless told otherwise."""
    cp = make(*sql)
    try:
        state = AgentState(messages=[Message.user(f"m{i}") for i in range(1500)])
        cid = await cp.save(state, "long")
        for checkpoint_id in (None, cid):
            loaded = await cp.load("long", checkpoint_id)
            assert loaded is not None and loaded.to_json_bytes() == state.to_json_bytes()
        [got] = await cp.load_checkpoints("long", [cid])
        assert not isinstance(got, Exception) and len(got.state.messages) == 1500
    finally:
        await cp.close()


async def test_copy_and_fork_write_rows_not_entries(sql: tuple[str, str]) -> None:
    cp = make(*sql)
    try:
        await save_turns(cp, "src", 5)
        before = entries(cp)
        assert await cp.copy_thread("src", "copy")
        assert entries(cp) == before
        infos = await cp.list_checkpoint_infos("src", limit=None)
        middle = await cp.load("src", infos[4].checkpoint_id)
        assert middle is not None
        await cp.save(middle, "fork", metadata={SOURCE_KEY: "final"})  # a branch from an older checkpoint
        assert entries(cp) == before
        assert len(await cp.list_checkpoints("copy", limit=None)) == 10
        # dropping the source keeps the entries the copy and the fork still reach
        assert await cp.delete("src")
        assert entries(cp) == before
        again = await cp.load("copy")
        assert again is not None and len(again.messages) == 16
        await cp.delete("copy")
        await cp.delete("fork")
        assert entries(cp) == (0, 0)
    finally:
        await cp.close()


async def test_a_mid_turn_save_leaves_tulips_keys_alone(sql: tuple[str, str]) -> None:
    cp = make(*sql)
    try:
        await save_turns(cp, "t", 2)
        end = kv_keys(cp, "t")
        state = AgentState(messages=[Message.user("more"), Message.assistant("thinking")])
        await cp.save(state, "t", metadata={SOURCE_KEY: "iteration"})
        assert kv_keys(cp, "t") == end  # tulip is shown turn ends only
        await cp.save(state, "t", metadata={SOURCE_KEY: "final"})
        assert kv_keys(cp, "t")["t:latest"]["messages"][-1]["content"] == "thinking"
    finally:
        await cp.close()


async def test_tulips_keys_removed_by_hand_come_back_and_take_nothing_from_the_history(sql: tuple[str, str]) -> None:
    cp = make(*sql)
    try:
        state = await save_turns(cp, "t", 2)
        assert cp.backend is not None
        for key in list(kv_keys(cp, "t")):  # what tulip's delete(thread) does: its keys go
            await cp.backend.delete(key)
        assert kv_keys(cp, "t") == {}
        loaded = await cp.load("t")
        assert loaded is not None and loaded.to_json_bytes() == state.to_json_bytes()
        assert len(await cp.list_checkpoints("t", limit=None)) == 4
        await cp.save(loaded, "t", metadata={SOURCE_KEY: "final"})
        keys = kv_keys(cp, "t")
        assert keys["t:latest"]["_checkpoint_id"] == await cp.latest_checkpoint_id("t")
    finally:
        await cp.close()


async def test_layout_tulip_projects_every_checkpoint(sql: tuple[str, str]) -> None:
    cp = make(*sql, layout="tulip")
    try:
        await save_turns(cp, "t", 3)
        ids = await cp.list_checkpoints("t", limit=None)
        keys = kv_keys(cp, "t")
        assert [e["checkpoint_id"] for e in keys["t:_checkpoints"]["checkpoints"]] == ids
        assert {f"t:{c}" for c in ids} <= set(keys)
        assert await cp.prune("t", keep_last=1, keep_turn_ends=False) == 5
        keys = kv_keys(cp, "t")
        assert set(keys) == {f"t:{ids[0]}", "t:latest", "t:_checkpoints"}
    finally:
        await cp.close()


async def test_an_unreachable_server_is_backend_unavailable_never_an_empty_thread() -> None:
    cps = [
        postgresql_checkpointer(dsn="postgresql://postgres@127.0.0.1:1/test", table_name="nowhere", connect_timeout=2),
        mysql_checkpointer(dsn="mysql://root@127.0.0.1:1/test", table_name="nowhere", ssl_disabled=True),
    ]
    for cp in cps:
        try:
            with pytest.raises(BackendUnavailable):
                await cp.load("t")
            with pytest.raises(BackendUnavailable):
                await cp.list_checkpoints("t")
        finally:
            await cp.close()
