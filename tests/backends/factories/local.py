"""Memory and File (the history layout, the default; the old engine's delta and tulip layouts): no server needed."""

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
async def file_delta_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    yield opener(lambda: FileCheckpointer(base_dir=tmp_path / "threads", layout="delta"))


@contextlib.asynccontextmanager
async def file_tulip_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    yield opener(lambda: FileCheckpointer(base_dir=tmp_path / "threads", layout="tulip"))


FACTORIES: dict[str, Factory] = {
    "memory": memory_backend,
    "file": file_backend,
    "file-delta": file_delta_backend,
    "file-tulip": file_tulip_backend,
}
RACING = frozenset({"memory", "file"})
"""The factories above that run the suite's race cases (``CheckpointerSuite.races``): the history
model's stores. The old engine's delta and tulip layouts lose writes where one thread's storage
points into another's (issue 26), so they stay off."""
