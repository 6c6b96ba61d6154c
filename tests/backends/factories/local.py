"""Memory and File (the history layout, and with ``layout="tulip"`` every checkpoint projected): no server needed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer

from . import Factory, Opener, opener, shared


@contextlib.asynccontextmanager
async def memory_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    cp = MemoryCheckpointer()
    yield shared(cp)
    await cp.close()


@contextlib.asynccontextmanager
async def file_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    yield opener(lambda: FileCheckpointer(base_dir=tmp_path / "threads"))


@contextlib.asynccontextmanager
async def file_tulip_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    yield opener(lambda: FileCheckpointer(base_dir=tmp_path / "threads", layout="tulip"))


FACTORIES: dict[str, Factory] = {
    "memory": memory_backend,
    "file": file_backend,
    "file-tulip": file_tulip_backend,
}
RACING = frozenset(
    {
        *("memory", "file", "file-tulip"),
        *("postgresql", "postgresql-tulip", "mysql", "mysql-tulip", "redis", "redis-tulip", "s3", "s3-tulip"),
        *("http", "tulip_pg", "opensearch"),
    }
)
"""The factories that run the suite's race cases (``CheckpointerSuite.races``): every store of the
history model, here and on the servers (a fork or copy is rows on shared entries, so a delete
racing it must never collect an entry a committed row still reaches; on S3, on the source's
objects, kept while a head names the copy among the source's users), the HTTP client (the server's
store decides), tulip's PgCheckpointer table (a copy is one transaction holding both threads'
locks) and OpenSearch's emulator (the adapter's copy reads a snapshot of the source). Only
``redis-kv`` (tulip's whole-state layout kept for a TTL) does not claim them."""
