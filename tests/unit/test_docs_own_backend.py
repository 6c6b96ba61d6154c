"""The examples of ``docs/own-backend.md``, run as written: the doc's code is the test.

Each ``python`` block that follows a ``<!-- test: NAME -->`` line is read from the markdown file
and executed here; the ``Test*`` classes it defines (conformance suites) are collected by pytest
from this module, so an example that stops passing the suite fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "own-backend.md"
_BLOCK = re.compile(r"^<!-- test: (?P<name>[\w-]+) -->\n```python\n(?P<code>.*?)^```$", re.M | re.S)


def doc_examples(path: Path = DOC) -> dict[str, str]:
    """``{name: code}`` of the marked python blocks of ``path``."""
    return {m["name"]: m["code"] for m in _BLOCK.finditer(path.read_text(encoding="utf-8"))}


def run_example(name: str) -> dict[str, Any]:
    """Execute one example in a namespace of its own (named like this module) and return it."""
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(compile(doc_examples()[name], f"{DOC}:{name}", "exec"), namespace)
    return namespace


EXAMPLES = {name: run_example(name) for name in ("storage-backend", "checkpointer", "store")}

# the suites the examples define, collected by pytest as classes of this module
TestDictStorage = EXAMPLES["storage-backend"]["TestDictStorage"]
TestListCheckpointer = EXAMPLES["checkpointer"]["TestListCheckpointer"]


def test_the_doc_marks_exactly_these_examples() -> None:
    assert sorted(doc_examples()) == sorted(EXAMPLES)


async def test_the_storage_backend_holds_tulips_three_keys() -> None:
    ns = EXAMPLES["storage-backend"]
    from tulip_nb.memory.backends import StorageBackendAdapter
    from tulip_nb.testing import full_state

    storage = ns["DictStorage"]()
    async with StorageBackendAdapter(storage) as cp:
        cid = await cp.save(full_state(), "ticket-42")
        assert sorted(storage.rows) == sorted([f"ticket-42:{cid}", "ticket-42:latest", "ticket-42:_checkpoints"])
        assert cp.capabilities.list_threads and await cp.list_threads() == ["ticket-42"]


async def test_the_store_example_works() -> None:
    store = EXAMPLES["store"]["DictStore"]()
    ns = ("acme", "memory")
    await store.put(ns, "fact-1", {"content": "prefers store credit"})
    await store.put(ns, "fact-2", {"content": "VIP"})
    assert await store.get(ns, "fact-1") == {"content": "prefers store credit"}
    assert await store.list_keys(ns) == ["fact-2", "fact-1"] == await store.list_keys(ns, limit=None)
    assert await store.list_keys(ns, limit=1) == ["fact-2"]
    item = await store.get_item(ns, "fact-1")
    assert item is not None and item.version == 1 and item.metadata == {}
    assert await store.delete(ns, "fact-1") and not await store.exists(ns, "fact-1")
    assert store.capabilities.enabled() == []
