"""Key-value stores keep ids byte-exact and prefixes apart.

- MySQL / MariaDB: ``c1`` and ``c1 `` (trailing space), ``t`` and ``t ``, ``A`` and ``a`` are
  different keys: new tables use a NO PAD binary collation, and tables made before (tulip's
  case-insensitive one, an older tulip_nb's PAD SPACE ``utf8mb4_bin``) are checked byte for byte and
  can be migrated in place.
- Redis: ``prefix="trial:"`` never sees the threads of ``prefix="trialx:"``, and ``prefix="trial"``
  (whose keys tulip would mix with ``"trialx"``'s) is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.factories.kv import FACTORIES, MYSQL_DSN, REDIS_URL, drop_mysql_table, drop_redis_prefix
from tests.conftest import require_service
from tulip_nb.core import AgentState, CheckpointNotFound, InvalidThreadId, Message
from tulip_nb.memory.checkpointer import BaseCheckpointer

# (thread a, checkpoint a), (thread b, checkpoint b): two keys that PAD SPACE / _ci collations merge
PAIRS = {
    "checkpoint-trailing-space": (("t", "c1"), ("t", "c1 ")),
    "thread-trailing-space": (("t", "c1"), ("t ", "c1")),
    "checkpoint-case": (("t", "A"), ("t", "a")),
    "thread-case": (("A", "c1"), ("a", "c1")),
}


def said(text: str) -> AgentState:
    return AgentState(messages=[Message.user(text)])


def content(state: AgentState | None) -> str | None:
    assert state is not None
    return state.messages[0].content


@pytest.fixture(params=sorted(FACTORIES))
async def kv(request: Any, tmp_path: Path) -> AsyncIterator[BaseCheckpointer]:
    async with FACTORIES[request.param](tmp_path) as open_cp, open_cp() as cp:
        yield cp


@pytest.mark.parametrize("pair", sorted(PAIRS))
async def test_ids_differing_in_trailing_space_or_case_are_two_keys(kv: BaseCheckpointer, pair: str) -> None:
    (ta, ca), (tb, cb) = PAIRS[pair]
    assert await kv.save(said("first"), ta, checkpoint_id=ca) == ca
    assert await kv.save(said("second"), tb, checkpoint_id=cb) == cb
    assert content(await kv.load(ta, ca)) == "first"
    assert content(await kv.load(tb, cb)) == "second"
    if ta == tb:
        assert sorted(await kv.list_checkpoints(ta)) == sorted([ca, cb])
    else:
        assert await kv.list_checkpoints(ta) == [ca] and await kv.list_checkpoints(tb) == [cb]
        assert sorted(await kv.list_threads()) == sorted([ta, tb])
        assert content(await kv.load(ta)) == "first" and content(await kv.load(tb)) == "second"
    # deleting one leaves the other
    assert await kv.delete(tb, cb)
    assert content(await kv.load(ta, ca)) == "first"
    with pytest.raises(CheckpointNotFound):
        await kv.load(tb, cb)


# -- MySQL: the key column, new and old tables ------------------------------------------------------

OLD_TULIP_NB_KEY = "VARCHAR(768) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY"  # PAD SPACE
TULIP_KEY = "VARCHAR(512) PRIMARY KEY"  # tulip's: the table collation, utf8mb4_unicode_ci


async def _mysql(sql: str, *params: Any) -> list[Any]:
    from mysql.connector.aio import connect

    conn = await connect(
        host="127.0.0.1", port=3306, user="root", password="", database="test", ssl_disabled=True, charset="utf8mb4"
    )
    try:
        cur = await conn.cursor()
        await cur.execute(sql, params or None)
        rows = list(await cur.fetchall()) if cur.with_rows else []
        await cur.close()
        await conn.commit()
        return rows
    finally:
        await conn.close()


async def _create_old_table(table: str, key_column: str) -> None:
    await _mysql(
        f"""CREATE TABLE `{table}` (
            thread_id {key_column},
            checkpoint_id VARCHAR(128),
            data JSON NOT NULL,
            created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
            updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
            metadata JSON NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"""
    )


@pytest.fixture
async def mysql_table() -> AsyncIterator[str]:
    require_service("mysql", "127.0.0.1", 3306)
    table = f"tnb_ids_{uuid.uuid4().hex[:12]}"
    try:
        yield table
    finally:
        await drop_mysql_table(table)


def _mysql_cp(table: str) -> Any:
    from tulip_nb.memory.backends import mysql_checkpointer

    return mysql_checkpointer(dsn=MYSQL_DSN, table_name=table, ssl_disabled=True)


async def test_new_mysql_table_key_is_no_pad_binary(mysql_table: str) -> None:
    cp = _mysql_cp(mysql_table)
    try:
        await cp.backend.setup()
        assert cp.backend.byte_exact_keys
        [(collation,)] = await _mysql(
            "SELECT COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND COLUMN_NAME = 'thread_id'",
            mysql_table,
        )
        assert collation in ("utf8mb4_nopad_bin", "utf8mb4_0900_bin")
        assert not await cp.backend.migrate_key_column()  # nothing to do
    finally:
        await cp.close()


@pytest.mark.parametrize("key_column", [OLD_TULIP_NB_KEY, TULIP_KEY], ids=["old-tulip_nb", "tulip"])
async def test_old_mysql_table_is_checked_byte_for_byte_then_migrated(mysql_table: str, key_column: str) -> None:
    await _create_old_table(mysql_table, key_column)
    cp = _mysql_cp(mysql_table)
    try:
        await cp.backend.setup()
        assert not cp.backend.byte_exact_keys
        await cp.save(said("first"), "t", checkpoint_id="c1")
        # the column equates "c1 " with "c1": refused, and "c1" is untouched
        with pytest.raises(InvalidThreadId, match="migrate_key_column"):
            await cp.save(said("second"), "t", checkpoint_id="c1 ")
        assert await cp.list_checkpoints("t") == ["c1"]
        assert content(await cp.load("t", "c1")) == "first" and content(await cp.load("t")) == "first"
        # reads and deletes of "c1 " never reach the row of "c1"
        with pytest.raises(CheckpointNotFound):
            await cp.load("t", "c1 ")
        assert not await cp.delete("t", "c1 ")
        assert content(await cp.load("t", "c1")) == "first"
        if key_column == TULIP_KEY:  # case-insensitive: the thread "T" is refused, "t" is kept
            assert await cp.load("T") is None
            with pytest.raises(InvalidThreadId):
                await cp.save(said("upper"), "T")
            assert content(await cp.load("t")) == "first" and await cp.list_threads() == ["t"]
        # migrate in place: the same data, now byte-exact
        assert await cp.backend.migrate_key_column()
        assert cp.backend.byte_exact_keys
        await cp.save(said("second"), "t", checkpoint_id="c1 ")
        assert sorted(await cp.list_checkpoints("t")) == ["c1", "c1 "]
        assert content(await cp.load("t", "c1")) == "first" and content(await cp.load("t", "c1 ")) == "second"
        await cp.save(said("upper"), "T")
        assert sorted(await cp.list_threads()) == ["T", "t"]
    finally:
        await cp.close()
    again = _mysql_cp(mysql_table)  # a new process sees the migrated column
    try:
        await again.backend.setup()
        assert again.backend.byte_exact_keys
        assert content(await again.load("t", "c1 ")) == "second"
    finally:
        await again.close()


# -- Redis: prefixes ---------------------------------------------------------------------------------


@pytest.fixture
async def redis_pair() -> AsyncIterator[tuple[Any, Any, str]]:
    require_service("redis", "127.0.0.1", 6379)
    from tulip_nb.memory.backends import redis_checkpointer

    base = f"tnbids{uuid.uuid4().hex[:10]}trial"
    short = redis_checkpointer(url=REDIS_URL, prefix=base + ":")
    longer = redis_checkpointer(url=REDIS_URL, prefix=base + "x:")
    try:
        yield short, longer, base
    finally:
        await short.close()
        await longer.close()
        await drop_redis_prefix(base)


async def test_redis_prefix_is_never_a_prefix_of_another_prefixs_keys(redis_pair: tuple[Any, Any, str]) -> None:
    short, longer, base = redis_pair
    assert short.backend.prefix == base + ":" and longer.backend.prefix == base + "x:"
    tag = {"tag": "needle"}
    await short.save(said("in short"), "s1", metadata=tag)
    await longer.save(said("in longer"), "l1", metadata=tag)
    await longer.save(said("in longer"), "1", metadata=tag)  # read back as thread "x1" under a bare "trial"
    assert await short.list_threads() == ["s1"]
    assert await longer.list_threads() == ["1", "l1"]
    assert await short.list_threads(pattern="*1") == ["s1"]
    assert await short.load("x1") is None and await short.load("xl1") is None

    def threads(hits: list[dict[str, Any]]) -> set[str]:
        return {h["thread_id"].rsplit(":", 1)[0] for h in hits}

    assert threads(await short.backend.search_data("_metadata", tag)) == {"s1"}
    assert threads(await longer.backend.search_data("_metadata", tag)) == {"1", "l1"}
    assert await short.vacuum(older_than_days=0) == 1
    assert content(await longer.load("l1")) == "in longer"  # untouched by the other's vacuum
    assert content(await longer.load("1")) == "in longer"
    assert await longer.vacuum(older_than_days=0) == 2
    assert await short.list_checkpoints("s1") == [] and await longer.list_checkpoints("l1") == []


async def test_redis_default_and_separated_prefixes_are_unchanged() -> None:
    from tulip_nb.memory.backends import redis_checkpointer
    from tulip_nb.memory.backends.redis import RedisBackend

    assert RedisBackend().prefix == "tulip:state:"  # tulip's: a tulip agent shares these keys
    assert redis_checkpointer().backend.prefix == "tulip:state:"
    assert RedisBackend(prefix="mine:").prefix == "mine:"
    assert RedisBackend(prefix="").prefix == ""  # no namespace: the whole database
    with pytest.raises(ValueError, match=r"prefix='trial' must end in ':'.*write prefix='trial:'"):
        RedisBackend(prefix="trial")  # tulip's "trial" keys would hold "trialx"'s threads too


async def test_redis_default_prefix_is_the_key_tulip_reads() -> None:
    require_service("redis", "127.0.0.1", 6379)
    import redis.asyncio as aioredis

    from tulip_nb.memory.backends import redis_checkpointer

    tid = f"tnbids-default-{uuid.uuid4().hex[:10]}"
    cp = redis_checkpointer(url=REDIS_URL)
    client = aioredis.from_url(REDIS_URL)
    try:
        cid = await cp.save(said("hello"), tid)
        assert await client.exists(f"tulip:state:{tid}:_checkpoints", f"tulip:state:{tid}:{cid}") == 2
        assert await client.exists(f"tulip:state:{tid}:latest") == 1
    finally:
        await cp.delete(tid)
        await cp.close()
        await client.aclose()
