"""The import rules of ARCHITECTURE.md ("Layers"), checked on the source (no module is imported).

1. A module whose name starts with ``_`` is private to its package: ``tulip_nb.X._y`` is imported
   only by modules inside ``tulip_nb.X`` (its subpackages included). ``tulip_nb._z`` at the root is
   importable by every module of ours.
2. ``tulip_nb.core`` imports nothing of ours outside ``tulip_nb.core``.
3. Nothing below the line (core, models, memory, agent, tools, tokens) imports ``lab``, ``widgets``,
   ``server``, ``pandas``, ``matplotlib`` or ``ipywidgets`` -- at module level or inside a function
   (a server or a batch job must not pull a UI stack).

4. No import cycles among our modules. Here too every import counts, wherever it is (a cycle hidden
   behind ``TYPE_CHECKING`` or a function-level import is still a cycle of ideas), with one
   exception: the imports between a package and its own descendants (``tulip_nb/lab/__init__.py``
   re-exporting from ``tulip_nb.lab._thread``, or ``tulip_nb.lab._thread`` naming ``tulip_nb.lab``):
   a package ``__init__`` only re-exports its submodules (eagerly, lazily through
   :mod:`tulip_nb._lazy`, or under ``if TYPE_CHECKING:`` for type checkers), so those edges are
   left out of the graph. Lazy-map strings (``".thread"``) are not imports at all. Its imports of
   modules outside the package count as the package's own edges. This is the graph
   ``notes/metrics.py`` measures.

Every ``import`` statement counts, wherever it is (``if TYPE_CHECKING:`` blocks and functions too).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tulip_nb"

BELOW_THE_LINE = (
    "tulip_nb.core",
    "tulip_nb.models",
    "tulip_nb.memory",
    "tulip_nb.agent",
    "tulip_nb.tools",
    "tulip_nb.tokens",
)
ABOVE_THE_LINE = ("tulip_nb.lab", "tulip_nb.widgets", "tulip_nb.server", "pandas", "matplotlib", "ipywidgets")

# Violations still to fix, as (importer, imported) pairs (none left). An entry that is no longer
# needed fails the test too.
ALLOWED: frozenset[tuple[str, str]] = frozenset()


# Import cycles (strongly connected components) still to remove, each as the set of its modules
# (none left since issue 31). An entry that no longer matches a cycle exactly fails the test too.
ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield _module_name(path), path


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    root = PACKAGE.parent
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def _imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """``(line, imported module)`` for every import in ``path`` (relative ones resolved)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # ``from tulip_nb.memory import _history`` imports a module
                if _is_module(f"{target}.{alias.name}"):
                    yield node.lineno, f"{target}.{alias.name}"


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _violations(module: str, imported: str) -> Iterator[str]:
    if _inside(imported, "tulip_nb"):
        parts = imported.split(".")
        private = [i for i, p in enumerate(parts) if p.startswith("_") and i > 0]
        if private:
            owner = ".".join(parts[: private[-1]])
            if not _inside(module, owner):
                yield f"imports the private module {imported} of {owner}"
    if _inside(module, "tulip_nb.core") and _inside(imported, "tulip_nb") and not _inside(imported, "tulip_nb.core"):
        yield f"core imports {imported}"
    if any(_inside(module, low) for low in BELOW_THE_LINE) and any(_inside(imported, up) for up in ABOVE_THE_LINE):
        yield f"below the line, imports {imported}"


def test_every_module_follows_the_import_rules() -> None:
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for module, path in _modules():
        for line, imported in _imports(module, path):
            for why in _violations(module, imported):
                if (module, imported) in ALLOWED:
                    used.add((module, imported))
                else:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module} {why}")
    assert not found, "import rules broken (ARCHITECTURE.md, Layers):\n" + "\n".join(sorted(set(found)))
    assert used == ALLOWED, f"allow-list entries no longer needed: {sorted(ALLOWED - used)}"


def _import_graph() -> dict[str, set[str]]:
    """Our module -> the modules of ours it imports (rule 4: package/descendant edges left out)."""
    graph: dict[str, set[str]] = {}
    for module, path in _modules():
        graph[module] = {
            imported
            for _, imported in _imports(module, path)
            if _inside(imported, "tulip_nb")
            and _is_module(imported)
            and not _inside(imported, module)
            and not _inside(module, imported)
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def _describe(cycles: Iterable[frozenset[str]]) -> str:
    return "\n".join("  " + ", ".join(sorted(c)) for c in sorted(cycles, key=sorted))


def test_no_import_cycles() -> None:
    cycles = _cycles(_import_graph())
    assert cycles <= ALLOWED_CYCLES, "import cycles (ARCHITECTURE.md, Layers, rule 4):\n" + _describe(
        cycles - ALLOWED_CYCLES
    )
    assert cycles == ALLOWED_CYCLES, "allowed cycles no longer there, remove them:\n" + _describe(
        ALLOWED_CYCLES - cycles
    )


def test_the_cycle_finder_sees_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert _cycles(graph) == {frozenset({"a", "b", "c"})}
    assert _cycles({"x": {"y"}, "y": set()}) == set()
    # a package re-exporting its submodule, which names the package back, is no cycle
    graph = _import_graph()
    assert "tulip_nb.lab._thread" not in graph["tulip_nb.lab"]


def test_the_checker_sees_violations() -> None:
    assert list(_violations("tulip_nb.lab._replay", "tulip_nb.agent._loop"))
    assert list(_violations("tulip_nb.core.state", "tulip_nb.tokens"))
    assert list(_violations("tulip_nb.memory.managers", "pandas"))
    assert list(_violations("tulip_nb.tokens", "tulip_nb.widgets._panels"))
    assert not list(_violations("tulip_nb.memory.backends.file", "tulip_nb.memory._signing"))
    assert not list(_violations("tulip_nb.lab._replay", "tulip_nb._sync"))
    assert not list(_violations("tulip_nb.lab._plots", "matplotlib.pyplot"))


def test_seed_import_paths_re_export_the_conversation_package() -> None:
    import tulip_nb.agent.conversation_manager as seed002
    import tulip_nb.memory.compactor as seed000
    import tulip_nb.memory.managers as managers
    from tulip_nb.memory import conversation

    for module in (seed000, managers, seed002):
        for name in module.__all__:
            twin = (
                conversation.default_conversation_manager if name == "default_manager" else getattr(conversation, name)
            )
            assert getattr(module, name) is twin, (module.__name__, name)
    assert managers.default_manager is conversation.default_conversation_manager


def test_persisted_keys_have_one_definition() -> None:
    from tulip_nb.agent import turns
    from tulip_nb.core import calls, keys
    from tulip_nb.memory import _signing, llm_memory
    from tulip_nb.memory.conversation import events

    assert (turns.RUN_KEY, turns.ITER_KEY) == (keys.RUN_KEY, keys.ITER_KEY)
    assert (events.STATE_KEY, events.EVENTS_KEY, calls.POSITION_KEY) == (
        keys.STATE_KEY,
        keys.EVENTS_KEY,
        keys.POSITION_KEY,
    )
    assert (_signing.HASH_KEY, _signing.PARENT_HASH_KEY, _signing.ALG_KEY) == (
        keys.HASH_KEY,
        keys.PARENT_HASH_KEY,
        keys.ALG_KEY,
    )
    assert (llm_memory.MEMORY_EVENTS_KEY, llm_memory.MEMORY_MARK) == (keys.MEMORY_EVENTS_KEY, keys.MEMORY_MARK)
    assert sorted(keys.__all__) == sorted(n for n in vars(keys) if n.isupper() and not n.startswith("_"))
