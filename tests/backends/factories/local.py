"""Memory and File: no server needed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer

from . import Factory


@contextlib.asynccontextmanager
async def memory_backend(tmp_path: Path) -> AsyncIterator[BaseCheckpointer]:
    yield MemoryCheckpointer()


@contextlib.asynccontextmanager
async def file_backend(tmp_path: Path) -> AsyncIterator[BaseCheckpointer]:
    cp = FileCheckpointer(base_dir=tmp_path / "threads")
    yield cp
    await cp.close()


FACTORIES: dict[str, Factory] = {"memory": memory_backend, "file": file_backend}
