"""A user's own store: implementing the seed's put / get / delete / list_keys is enough."""

from __future__ import annotations

from typing import Any

import pytest

from tulip_nb.memory.store import BaseStore, Namespace, StoreCapabilityError


class DictStore(BaseStore):
    """Only the four documented operations, on a plain dict."""

    def __init__(self) -> None:
        self.data: dict[tuple[Namespace, str], Any] = {}

    async def put(self, namespace: Namespace, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
        self.data.pop((tuple(namespace), key), None)
        self.data[(tuple(namespace), key)] = value

    async def get(self, namespace: Namespace, key: str) -> Any | None:
        return self.data.get((tuple(namespace), key))

    async def delete(self, namespace: Namespace, key: str) -> bool:
        return self.data.pop((tuple(namespace), key), None) is not None

    async def list_keys(self, namespace: Namespace, limit: int | None = 100) -> list[str]:
        return [k for (ns, k) in reversed(self.data) if ns == tuple(namespace)][:limit]


async def test_four_methods_make_a_working_store() -> None:
    ns = ("tulip_memory", "support")
    async with DictStore() as store:
        await store.put(ns, "refund_policy", {"content": "Refunds over $500 need manager approval"})
        assert await store.get(ns, "refund_policy") == {"content": "Refunds over $500 need manager approval"}
        item = await store.get_item(ns, "refund_policy")
        assert item is not None and item.namespace == ns and item.key == "refund_policy"
        assert item.value == {"content": "Refunds over $500 need manager approval"}
        assert item.metadata == {} and item.version == 1 and item.created_at.tzinfo is not None
        assert await store.get_item(ns, "missing") is None
        assert await store.exists(ns, "refund_policy") and not await store.exists(ns, "missing")
        await store.put_batch([(ns, "a", 1, None), (ns, "b", [2], None)])
        assert await store.get_batch([(ns, "a"), (ns, "b"), (ns, "zz")]) == {(ns, "a"): 1, (ns, "b"): [2]}
        assert await store.list_keys(ns) == ["b", "a", "refund_policy"]
        assert await store.clear_namespace(ns) == 3
        assert await store.list_keys(ns) == []


async def test_optional_operations_say_which_capability_is_missing() -> None:
    store = DictStore()
    assert store.capabilities.enabled() == []
    with pytest.raises(StoreCapabilityError, match="search"):
        await store.search(("n",), query="x")
    with pytest.raises(NotImplementedError, match="semantic_search"):
        await store.search_by_embedding(("n",), [1.0])
    with pytest.raises(NotImplementedError, match="list_namespaces"):
        await store.list_namespaces()


def test_a_store_missing_a_documented_method_is_still_refused() -> None:
    class NoDelete(BaseStore):
        async def put(self, namespace: Namespace, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
            pass

        async def get(self, namespace: Namespace, key: str) -> Any | None:
            return None

        async def list_keys(self, namespace: Namespace, limit: int | None = 100) -> list[str]:
            return []

    with pytest.raises(TypeError, match="delete"):
        NoDelete()  # type: ignore[abstract]
