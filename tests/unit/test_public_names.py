"""Every package's public names: ``__all__`` is sorted, lists every lazy export, and each resolves.

Lazy exports (``_LAZY`` + ``__getattr__``) keep ``import tulip_nb.lab`` cheap; a name that is
listed but does not resolve, or exported but not listed, is a broken promise to users and IDEs.
"""

from __future__ import annotations

import importlib

import pytest

PACKAGES = [
    "tulip_nb",
    "tulip_nb.core",
    "tulip_nb.agent",
    "tulip_nb.models",
    "tulip_nb.memory",
    "tulip_nb.memory.backends",
    "tulip_nb.lab",
    "tulip_nb.widgets",
    "tulip_nb.testing",
    "tulip_nb.server",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_complete_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(set(exported)), f"{name}.__all__ is not sorted or repeats a name"
    lazy = set(getattr(module, "_LAZY", {}))
    assert lazy <= set(exported), f"{name}: lazy names missing from __all__: {sorted(lazy - set(exported))}"
    for attr in exported:
        assert getattr(module, attr) is not None, f"{name}.{attr} does not resolve"
    assert set(exported) <= set(dir(module)), f"{name}: dir() misses {sorted(set(exported) - set(dir(module)))}"


@pytest.mark.parametrize("name", PACKAGES)
def test_star_import_works(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    assert set(importlib.import_module(name).__all__) <= set(namespace)
