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
RACING = frozenset({"memory", "file", "file-tulip", "postgresql", "postgresql-tulip", "mysql", "mysql-tulip"})
"""The factories that run the suite's race cases (``CheckpointerSuite.races``): the history model's
stores (a fork or copy is rows on shared entries, never a file of another thread's), these above
and the SQL servers' (``kv.py``)."""
