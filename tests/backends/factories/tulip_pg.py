"""tulip's native PgCheckpointer table (tenant + row-level security), through TulipPgCheckpointer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from tests.conftest import require_service

from . import Factory, Opener, opener
from .kv import PG_DSN, drop_pg_table, unique


@contextlib.asynccontextmanager
async def tulip_pg_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    require_service("postgresql", "127.0.0.1", 5432)
    from tulip_nb.memory.backends.tulip_pg import TulipPgCheckpointer

    table = unique("tnb_tpg_")
    try:
        yield opener(lambda: TulipPgCheckpointer(PG_DSN, table=table, tenant="acme"))
    finally:
        await drop_pg_table(table)


FACTORIES: dict[str, Factory] = {"tulip_pg": tulip_pg_backend}
