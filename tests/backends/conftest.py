"""Backend factories for the conformance suite.

Each module in ``tests/backends/factories/`` defines ``FACTORIES: dict[str, Factory]``: a name and
an async context manager that yields a fresh, empty checkpointer (and cleans up after it). A
factory for a server backend calls ``tests.conftest.require_service`` first, so it skips when the
server is unreachable (or fails under ``TULIP_NB_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.memory.checkpointer import BaseCheckpointer

from . import factories
from .factories import Factory

BACKENDS: dict[str, Factory] = {}
for _mod in pkgutil.iter_modules(factories.__path__):
    BACKENDS.update(importlib.import_module(f"{factories.__name__}.{_mod.name}").FACTORIES)


@pytest.fixture(params=sorted(BACKENDS))
async def checkpointer(request: Any, tmp_path: Path) -> AsyncIterator[BaseCheckpointer]:
    async with BACKENDS[request.param](tmp_path) as cp:
        yield cp
