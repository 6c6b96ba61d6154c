"""Backend factories for the conformance suite.

Each module in ``tests/backends/factories/`` defines ``FACTORIES: dict[str, Factory]``: a name and
a :class:`tulip_nb.testing.CheckpointerFactory`, which sets up a fresh, empty store and yields an
opener for it (each call a new instance on the same store). A factory for a server backend calls
``tests.conftest.require_service`` first, so it skips when the server is unreachable (or fails
under ``TULIP_NB_REQUIRE_SERVICES=1``). :func:`backend_params` marks every factory but the local
ones (``factories/local.py``: memory and file) ``service``, so ``make quick`` runs the conformance
suite on those two alone.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest

from . import factories
from .factories import Factory, local

BACKENDS: dict[str, Factory] = {}
for _mod in pkgutil.iter_modules(factories.__path__):
    BACKENDS.update(importlib.import_module(f"{factories.__name__}.{_mod.name}").FACTORIES)

LOCAL = frozenset(local.FACTORIES)
"""The factories that need no server: memory and file (both layouts)."""


def backend_params() -> list[Any]:
    """Every factory's name as a pytest param; those that need a server (or start one) marked ``service``."""
    return [n if n in LOCAL else pytest.param(n, marks=pytest.mark.service(n)) for n in sorted(BACKENDS)]
