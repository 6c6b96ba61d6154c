"""Backend factories for the conformance suite.

Each module in ``tests/backends/factories/`` defines ``FACTORIES: dict[str, Factory]``: a name and
a :class:`tulip_nb.testing.CheckpointerFactory`, which sets up a fresh, empty store and yields an
opener for it (each call a new instance on the same store). A factory for a server backend calls
``tests.conftest.require_service`` first, so it skips when the server is unreachable (or fails
under ``TULIP_NB_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import importlib
import pkgutil

from . import factories
from .factories import Factory

BACKENDS: dict[str, Factory] = {}
for _mod in pkgutil.iter_modules(factories.__path__):
    BACKENDS.update(importlib.import_module(f"{factories.__name__}.{_mod.name}").FACTORIES)
