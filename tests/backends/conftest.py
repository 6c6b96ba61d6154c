"""Backend factories for the conformance suite; later backends append theirs to BACKENDS."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer

Factory = Callable[[Path], contextlib.AbstractAsyncContextManager[BaseCheckpointer]]


@contextlib.asynccontextmanager
async def memory_backend(tmp_path: Path) -> AsyncIterator[BaseCheckpointer]:
    yield MemoryCheckpointer()


@contextlib.asynccontextmanager
async def file_backend(tmp_path: Path) -> AsyncIterator[BaseCheckpointer]:
    cp = FileCheckpointer(base_dir=tmp_path / "threads")
    yield cp
    await cp.close()


BACKENDS: dict[str, Factory] = {
    "memory": memory_backend,
    "file": file_backend,
}


@pytest.fixture(params=sorted(BACKENDS))
async def checkpointer(request: Any, tmp_path: Path) -> AsyncIterator[BaseCheckpointer]:
    async with BACKENDS[request.param](tmp_path) as cp:
        yield cp
