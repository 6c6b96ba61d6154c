"""Every package's public names: ``__all__`` is sorted, lists every lazy export, and each resolves.

Lazy exports (``_LAZY`` + ``__getattr__``) keep ``import tulip_nb.lab`` cheap; a name that is
listed but does not resolve, or exported but not listed, is a broken promise to users and IDEs.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

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


# --- every name has one home ----------------------------------------------------------------------
# A public module is one whose dotted path has no ``_`` part. A name is listed in the ``__all__`` of
# one public module, its home; other modules may import it (``from m import X as X``) but not list it.

PACKAGE = Path(__file__).resolve().parents[2] / "tulip_nb"

# Same name, different objects, one home each. Issue 31 item 1 merges or renames them: an entry no
# longer needed fails the test. (No entry is needed for the seed paths: a seed import such as
# ``from tulip_nb.agent.conversation_manager import NullConversationManager`` works through the
# explicit re-export, whatever module lists the name.)
DISTINCT_NAMES: dict[str, frozenset[str]] = {
    # the model-side error subclasses core's (a manager raises core's before calling the model)
    "ContextWindowExceeded": frozenset({"tulip_nb.core", "tulip_nb.models"}),
}


def _public_alls() -> dict[str, list[str]]:
    """Public module -> its ``__all__`` (read from the source; every public module has one)."""
    out: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(part.startswith("_") for part in parts[1:]):
            continue
        module = ".".join(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        values = [
            node.value
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            and isinstance(target := node.targets[0] if isinstance(node, ast.Assign) else node.target, ast.Name)
            and target.id == "__all__"
        ]
        assert values and values[0] is not None, f"public module {module} has no __all__"
        out[module] = list(ast.literal_eval(values[0]))
    return out


def _homes(alls: dict[str, list[str]]) -> dict[str, set[str]]:
    homes: dict[str, set[str]] = {}
    for module, names in alls.items():
        for name in names:
            homes.setdefault(name, set()).add(module)
    return homes


def test_every_public_name_has_one_home() -> None:
    homes = _homes(_public_alls())
    several = {name: sorted(ms) for name, ms in homes.items() if len(ms) > 1 and ms != DISTINCT_NAMES.get(name)}
    assert not several, "names listed in the __all__ of several public modules (keep one home):\n" + "\n".join(
        f"  {name}: {ms}" for name, ms in sorted(several.items())
    )
    stale = {name for name, ms in DISTINCT_NAMES.items() if homes.get(name) != ms}
    assert not stale, f"DISTINCT_NAMES entries no longer needed (or changed): {sorted(stale)}"


def test_the_home_check_sees_a_second_home() -> None:
    homes = _homes({"tulip_nb.a": ["X", "Y"], "tulip_nb.b": ["X"]})
    assert homes == {"X": {"tulip_nb.a", "tulip_nb.b"}, "Y": {"tulip_nb.a"}}


def test_seed_import_paths_still_work() -> None:
    """The seed pages' imports (``tulip`` -> ``tulip_nb``; seed 002's ``elsai`` -> ``tulip_nb``)."""
    seeds = {
        "tulip_nb": ["Agent"],
        "tulip_nb.agent": ["Agent", "AgentBase", "ConversationManager"],
        "tulip_nb.agent.conversation_manager": [
            "NullConversationManager",
            "SlidingWindowConversationManager",
            "SummarizingConversationManager",
        ],
        "tulip_nb.memory.backends": [
            "S3Backend",
            "StorageBackendAdapter",
            "mysql_checkpointer",
            "opensearch_checkpointer",
            "postgresql_checkpointer",
            "redis_checkpointer",
            "s3_checkpointer",
        ],
        "tulip_nb.memory.backends.file": ["FileCheckpointer"],
        "tulip_nb.memory.backends.redis": ["RedisBackend"],
        "tulip_nb.memory.compactor": ["LLMCompactor"],
        "tulip_nb.memory.store": ["InMemoryStore"],
        "tulip_nb.memory.store_backends": ["HolographicStore", "PgMemory"],
        "tulip_nb.models.metadata": ["register_metadata"],
    }
    for module, names in seeds.items():
        namespace: dict[str, object] = {}
        exec(f"from {module} import {', '.join(names)}", namespace)
        assert all(namespace[name] is not None for name in names), module
