"""PgMemory specifics: row-level security between tenants, pinning, schema checks, the extra hint."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tulip_nb.core.errors import UserError

from . import _pgserver
from .conftest import APP_DB, APP_ROLE, unique_table

ACME = ("acme", "memory", "cust-1")
GLOBEX = ("globex", "memory", "cust-1")


async def test_tenants_never_see_each_others_rows(pg_server: _pgserver.PgServer, pg_dsn: str) -> None:
    import asyncpg

    from tulip_nb.memory.store_backends import PgMemory

    table = unique_table()
    async with PgMemory(pg_dsn, table=table, dim=8) as store:
        await store.put(ACME, "secret", {"content": "acme refund threshold is $500"}, {"t": "acme"})
        await store.put_with_embedding(ACME, "vec", {"content": "acme"}, [1.0] + [0.0] * 7)
        await store.put(GLOBEX, "public", {"content": "globex refund threshold is $50"})
        # Same namespace path and key under the other tenant: separate rows.
        assert await store.get(GLOBEX, "secret") is None
        assert await store.list_keys(GLOBEX) == ["public"]
        assert [h.key for h in await store.search(GLOBEX, query="refund threshold")] == ["public"]
        assert await store.search_by_embedding(GLOBEX, [1.0] + [0.0] * 7) == []
        assert await store.list_namespaces(prefix=("globex",)) == [GLOBEX]
        assert await store.delete(GLOBEX, "secret") is False
        assert await store.get(ACME, "secret") == {"content": "acme refund threshold is $500"}

    # The database itself enforces it, for the ordinary role the application uses.
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert (
            await conn.fetchval("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user") is False
        )
        assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0  # no tenant set: no rows
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', 'globex', true)")
            assert await conn.fetchval(f"SELECT array_agg(DISTINCT tenant) FROM {table}") == ["globex"]
            with pytest.raises(asyncpg.InsufficientPrivilegeError):  # WITH CHECK: cannot write as acme
                await conn.execute(
                    f"INSERT INTO {table} (tenant, ns, key, value) VALUES ('acme', 'acme', 'x', '{{}}'::jsonb)"
                )
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', 'globex', true)")
            await conn.execute(f"UPDATE {table} SET content = 'pwned'")  # touches globex rows only
    finally:
        await conn.close()
    # The superuser sees both tenants (it bypasses RLS), and acme's row was not touched.
    rows = pg_server.psql(f"SELECT tenant || ':' || content FROM {table} ORDER BY 1", database=APP_DB).split()
    assert "acme:acme" in " ".join(rows) and any(r.startswith("globex:pwned") for r in rows)
    assert pg_server.psql(f"SELECT relforcerowsecurity FROM pg_class WHERE relname = '{table}'", APP_DB).strip() == "t"


async def test_a_pinned_store_refuses_other_tenants(pg_dsn: str) -> None:
    from tulip_nb.memory.store_backends import PgMemory

    async with PgMemory(pg_dsn, table=unique_table(), dim=8, tenant="acme") as store:
        await store.put(ACME, "k", {"v": 1})
        assert await store.list_namespaces() == [ACME]
        with pytest.raises(UserError, match="pinned"):
            await store.get(GLOBEX, "k")
    async with PgMemory(pg_dsn, table=unique_table(), dim=8) as unpinned:
        with pytest.raises(UserError, match="prefix"):
            await unpinned.list_namespaces()


async def test_existing_table_width_must_match(pg_dsn: str) -> None:
    from tulip_nb.memory.store_backends import PgMemory

    table = unique_table()
    async with PgMemory(pg_dsn, table=table, dim=8) as store:
        await store.put(ACME, "k", {})
    async with PgMemory(pg_dsn, table=table, dim=16) as other:
        with pytest.raises(UserError, match="dim=8"):
            await other.get(ACME, "k")
    with pytest.raises(UserError):
        PgMemory(pg_dsn, table="bad name; drop")


async def test_unreachable_server_is_backend_unavailable() -> None:
    from tulip_nb.core.errors import BackendUnavailable
    from tulip_nb.memory.store_backends import PgMemory

    port = _pgserver.free_port()
    async with PgMemory(f"postgresql://{APP_ROLE}@127.0.0.1:{port}/x", pool_args={"timeout": 2}) as store:
        with pytest.raises(BackendUnavailable):
            await store.get(ACME, "k")


def test_missing_asyncpg_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['asyncpg'] = None\n"
        "import tulip_nb.memory.store_backends as b\n"
        "try:\n    b.PgMemory\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert "pip install 'tulip_nb[postgres]'" in out.stdout


@pytest.mark.parametrize("order", ["run_sync-then-asyncio.run", "asyncio.run-then-run_sync"])
def test_one_store_works_from_two_event_loops(pg_dsn: str, order: str) -> None:
    """A notebook awaits on its loop, ``run_sync`` runs on tulip_nb's: one PgMemory serves both."""
    import asyncio

    from tulip_nb._sync import run_sync
    from tulip_nb.memory.store_backends import PgMemory

    store = PgMemory(pg_dsn, table=unique_table(), dim=8)

    async def put(key: str) -> list[str]:
        await store.put(ACME, key, {"content": key})
        return await store.list_keys(ACME)

    try:
        if order.startswith("run_sync"):
            assert run_sync(put("one")) == ["one"]
            assert asyncio.run(put("two")) == ["two", "one"]
        else:
            assert asyncio.run(put("one")) == ["one"]
            assert run_sync(put("two")) == ["two", "one"]
        assert run_sync(store.get(ACME, "one")) == {"content": "one"}
        assert asyncio.run(store.get(ACME, "two")) == {"content": "two"}
    finally:
        run_sync(store.close())
