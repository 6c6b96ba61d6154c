"""tulip's native PgCheckpointer table (tenant + row-level security) <-> tulip_nb, with real tulip agents.

The tests connect as a role without BYPASSRLS, so PostgreSQL's row-level security is in force.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import require_service
from tulip_nb.lab.export import aexport_threads
from tulip_nb.memory.backends import FileCheckpointer

from ..backends.factories.kv import PG_DSN, drop_pg_table
from .test_export_interop import HISTORY, THREAD, through_tulip, tulip_agent_on, two_tulip_turns

tulip_pg = pytest.importorskip("tulip.memory.backends.pg_checkpointer", reason="tulip-agents is not installed")
tulip_testing = pytest.importorskip("tulip.testing")

pytestmark = pytest.mark.interop


@pytest.fixture
async def rls_dsn() -> AsyncIterator[tuple[str, str]]:
    """(dsn of a fresh non-superuser role, table name); the table is made by tulip's PgCheckpointer."""
    require_service("postgresql", "127.0.0.1", 5432)
    import asyncpg

    role, table = f"tnb_rls_{uuid.uuid4().hex[:10]}", f"tnb_tpg_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(PG_DSN)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS")
        await admin.execute(f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
        yield PG_DSN.replace("postgres@", f"{role}@"), table
    finally:
        await drop_pg_table(table)
        await admin.execute(f"REVOKE ALL ON SCHEMA public FROM {role}")
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()


async def test_tenant_threads_round_trip_through_export_and_tulip_resumes(
    rls_dsn: tuple[str, str], tmp_path: Path
) -> None:
    from tulip_nb.memory.backends.tulip_pg import TulipPgCheckpointer

    dsn, table = rls_dsn
    theirs = tulip_pg.PgCheckpointer(dsn, table=table, tenant="acme")
    other = tulip_pg.PgCheckpointer(dsn, table=table, tenant="globex")
    ours = TulipPgCheckpointer(dsn, table=table, tenant="acme")
    try:
        agent, _ = tulip_agent_on(theirs, two_tulip_turns())
        await agent.arun("Weather in Lisbon?", thread_id=THREAD)
        await agent.arun("And Porto?", thread_id=THREAD)
        intruder, _ = tulip_agent_on(other, [tulip_testing.text("globex only")])
        await intruder.arun("secret", thread_id="globex-thread")

        # we see acme's thread only, every checkpoint and field equal to what tulip loads
        assert await ours.list_threads() == [THREAD]
        ids = await theirs.list_checkpoints(THREAD, limit=100)
        assert await ours.list_checkpoints(THREAD, limit=100) == ids
        for cid in ids:
            mine, tulips = await ours.load(THREAD, cid), await theirs.load(THREAD, cid)
            assert mine is not None and tulips is not None
            assert through_tulip(mine) == tulips.model_dump(mode="json")

        # production -> notebook, verified; notebook -> a new thread in production; tulip resumes it
        notebook = FileCheckpointer(tmp_path / "nb")
        out = await aexport_threads(
            f"tulip-pg://{dsn.split('://', 1)[1]}?tenant=acme&table={table}", notebook, progress=False
        )
        assert out["verified"].all() and list(out["copied"]) == [len(ids)]
        back = await aexport_threads(notebook, ours, map_ids=lambda t: t + "-copy", progress=False)
        assert back["verified"].all(), back.to_dict("records")
        resumer, model = tulip_agent_on(theirs, [tulip_testing.text("Still raining everywhere.")])
        result = await resumer.arun("Anything new?", thread_id=THREAD + "-copy")
        assert [m.content for m in model.received_messages[0]] == [*HISTORY, "Anything new?"]
        assert result.state.messages[-1].content == "Still raining everywhere."
        # globex's thread was never visible and is untouched
        assert await other.list_checkpoints("globex-thread") and await ours.load("globex-thread") is None
    finally:
        await ours.close()
        await theirs.close()
        await other.close()
