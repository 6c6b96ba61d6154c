"""Store conformance: the behaviour every store shares (run once per entry of ``STORES``).

Namespaces start with a tenant element (``"t1"``) because PgMemory isolates on ``namespace[0]``.
Vectors are 8-dimensional because the PgMemory factory creates ``vector(8)``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from tulip_nb.core.errors import CapabilityNotSupported, UserError
from tulip_nb.memory.store import BaseStore, StoreCapabilities, StoreCapabilityError, StoreItem

NS = ("t1", "memory", "cust-4821")
ODD_KEYS = ["a/b", "x:y", "issue #1", "with space", "unicodé-🌷", "..", "it's", 'say "hi"', "100%", "a_b", "k" * 300]
VALUES = [
    {"content": "prefers store credit", "n": 3, "nested": {"list": [1, 2.5, None, True], "ü": "✓"}},
    ["a", 1, {"b": None}],
    "plain text",
    42,
    3.25,
    True,
]


def vec(*head: float) -> list[float]:
    return [*head, *([0.0] * (8 - len(head)))]


async def test_put_get_round_trip(store: BaseStore) -> None:
    for i, value in enumerate(VALUES):
        await store.put(NS, f"k{i}", value)
    for i, value in enumerate(VALUES):
        assert await store.get(NS, f"k{i}") == value
    assert await store.get(NS, "missing") is None
    assert await store.get(("t1", "other"), "k0") is None
    assert await store.exists(NS, "k0") and not await store.exists(NS, "missing")


async def test_items_carry_times_version_and_metadata(store: BaseStore) -> None:
    await store.put(NS, "fact", {"v": 1}, metadata={"source": "thread-1"})
    first = await store.get_item(NS, "fact")
    assert isinstance(first, StoreItem)
    assert first.namespace == NS and first.key == "fact" and first.version == 1
    assert first.metadata == {"source": "thread-1"}
    assert isinstance(first.created_at, datetime) and first.created_at.tzinfo is not None
    assert first.created_at == first.updated_at
    await store.put(NS, "fact", {"v": 2})
    second = await store.get_item(NS, "fact")
    assert second is not None
    assert second.value == {"v": 2} and second.version == 2 and second.metadata == {}
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    assert StoreItem.from_dict(second.to_dict()) == second


async def test_stored_values_are_isolated_from_mutation(store: BaseStore) -> None:
    value = {"tags": ["a"], "content": "x"}
    await store.put(NS, "iso", value)
    value["tags"].append("b")
    got = await store.get(NS, "iso")
    assert got == {"tags": ["a"], "content": "x"}
    got["tags"].append("c")
    assert await store.get(NS, "iso") == {"tags": ["a"], "content": "x"}


async def test_delete(store: BaseStore) -> None:
    await store.put(NS, "gone", {"x": 1})
    assert await store.delete(NS, "gone") is True
    assert await store.delete(NS, "gone") is False
    assert await store.get(NS, "gone") is None
    assert await store.get_item(NS, "gone") is None
    assert "gone" not in await store.list_keys(NS)


async def test_list_keys_is_exact_namespace_recent_first(store: BaseStore) -> None:
    for key in ["a", "b", "c"]:
        await store.put(NS, key, {"k": key})
    await store.put((*NS, "sub"), "deeper", {})
    await store.put(NS[:2], "parent", {})
    await store.put(("t2", *NS[1:]), "other-tenant", {})
    await store.put(NS, "a", {"k": "a2"})  # re-put moves "a" to the front
    assert await store.list_keys(NS) == ["a", "c", "b"]
    assert await store.list_keys(NS, limit=2) == ["a", "c"]
    assert await store.list_keys(NS, limit=None) == ["a", "c", "b"]
    assert await store.list_keys(("t1", "nobody")) == []


async def test_odd_keys(store: BaseStore) -> None:
    for key in ODD_KEYS:
        await store.put(NS, key, {"key": key})
    for key in ODD_KEYS:
        assert await store.get(NS, key) == {"key": key}
    assert sorted(await store.list_keys(NS)) == sorted(ODD_KEYS)


@pytest.mark.parametrize("namespace", [(), "t1", ("t1", ""), ("t1", "a\x1fb"), ("t1", 3), ("t1\x00",)], ids=repr)
async def test_bad_namespaces_are_user_errors(store: BaseStore, namespace: object) -> None:
    with pytest.raises(UserError):
        await store.put(namespace, "k", {})  # type: ignore[arg-type]


async def test_bad_keys_and_values_are_user_errors(store: BaseStore) -> None:
    for key in ["", "a\x00b", 7]:
        with pytest.raises(UserError):
            await store.put(NS, key, {})  # type: ignore[arg-type]
    with pytest.raises(UserError, match="JSON"):
        await store.put(NS, "k", {"when": object()})
    assert await store.get(NS, "k") is None


async def test_search_without_query_lists_recent_first(store: BaseStore) -> None:
    await store.put(NS, "older", {"content": "refunds over $500 need approval"})
    await store.put(NS, "newer", {"content": "prefers store credit"})
    hits = await store.search(NS, query=None, limit=5)
    assert [h.key for h in hits] == ["newer", "older"]
    assert [h.key for h in await store.search(NS, limit=1)] == ["newer"]
    assert [h.key for h in await store.search(NS, query="   ")] == ["newer", "older"]


async def test_search_returns_only_matches_ranked(store: BaseStore) -> None:
    await store.put(NS, "refund", {"content": "Refunds over $500 need manager approval"})
    await store.put(NS, "credit", {"content": "Customer prefers store credit over card refunds"})
    await store.put(NS, "shipping", {"content": "Ships from the Berlin warehouse on Mondays"})
    await store.put(("t1", "elsewhere"), "refund2", {"content": "refund refund refund"})
    hits = await store.search(NS, query="manager approval for refunds")
    assert [h.key for h in hits][:1] == ["refund"]
    assert {h.key for h in hits} == {"refund", "credit"}
    assert all(h.score is not None for h in hits)
    assert [h.score for h in hits] == sorted((h.score or 0.0 for h in hits), reverse=True)
    assert await store.search(NS, query="zeppelin") == []
    assert await store.search(NS, query="the of and") == []
    assert [h.key for h in await store.search(NS, query="warehouse", limit=5)] == ["shipping"]


async def test_search_query_syntax_is_not_interpreted(store: BaseStore) -> None:
    await store.put(NS, "q", {"content": "what's the refund policy"})
    for query in [
        'what\'s the "refund" policy?',
        "refund OR NEAR(x y)",
        "refund* -policy",
        "'; DROP TABLE x; --",
        "a:b",
    ]:
        hits = await store.search(NS, query=query)
        assert all(h.key == "q" for h in hits)
    assert [h.key for h in await store.search(NS, query="refund*")] == ["q"]


async def test_embeddings(store: BaseStore) -> None:
    await store.put_with_embedding(NS, "east", {"content": "east"}, vec(1.0, 0.0), metadata={"kind": "dir"})
    await store.put_with_embedding(NS, "north", {"content": "north"}, vec(0.0, 1.0), metadata={"kind": "dir"})
    await store.put_with_embedding(NS, "ne", {"content": "north-east"}, vec(1.0, 1.0), metadata={"kind": "mix"})
    await store.put(NS, "plain", {"content": "no vector"})
    hits = await store.search_by_embedding(NS, vec(1.0, 0.1), limit=3)
    assert [h.item.key for h in hits] == ["east", "ne", "north"]
    assert hits[0].score == pytest.approx(0.995, abs=0.01)
    assert hits[0].distance == pytest.approx(1 - hits[0].score, abs=1e-6)
    assert hits[0].item.value == {"content": "east"} and hits[0].item.metadata == {"kind": "dir"}
    assert [h.item.key for h in await store.search_by_embedding(NS, vec(1.0, 0.1), threshold=0.5)] == ["east", "ne"]
    only_dir = await store.search_by_embedding(NS, vec(1.0, 1.0), metadata_filter={"kind": "dir"})
    assert {h.item.key for h in only_dir} == {"east", "north"}
    assert await store.search_by_embedding(("t1", "empty"), vec(1.0)) == []
    got = await store.get_embedding(NS, "ne")
    assert got == pytest.approx(vec(1.0, 1.0))
    assert await store.get_embedding(NS, "plain") is None
    await store.put(NS, "ne", {"content": "re-put without a vector"})
    assert await store.get_embedding(NS, "ne") is None
    assert "ne" not in [h.item.key for h in await store.search_by_embedding(NS, vec(1.0, 1.0))]


async def test_embedding_validation(store: BaseStore) -> None:
    await store.put_with_embedding(NS, "a", {}, vec(1.0))
    for bad in [[], vec(0.0), [*vec(1.0), 1.0], ["x"] * 8, [float("nan")] * 8]:
        with pytest.raises(UserError):
            await store.put_with_embedding(NS, "b", {}, bad)
    with pytest.raises(UserError):
        await store.search_by_embedding(NS, [1.0, 2.0, 3.0])


async def test_list_namespaces(store: BaseStore) -> None:
    await store.put(("t1", "a"), "k", {})
    await store.put(("t1", "a", "x"), "k", {})
    await store.put(("t1", "ab"), "k", {})
    await store.put(("t1", "b"), "k", {})
    assert await store.list_namespaces(prefix=("t1", "a")) == [("t1", "a"), ("t1", "a", "x")]
    assert await store.list_namespaces(prefix=("t1",)) == [("t1", "a"), ("t1", "a", "x"), ("t1", "ab"), ("t1", "b")]
    assert await store.list_namespaces(prefix=("t1",), limit=2) == [("t1", "a"), ("t1", "a", "x")]
    await store.delete(("t1", "b"), "k")
    assert ("t1", "b") not in await store.list_namespaces(prefix=("t1",))


async def test_batches_and_clear(store: BaseStore) -> None:
    await store.put_batch([(NS, f"k{i}", {"i": i}, {"m": i}) for i in range(5)])
    got = await store.get_batch([(NS, "k0"), (NS, "k4"), (NS, "nope")])
    assert got == {(NS, "k0"): {"i": 0}, (NS, "k4"): {"i": 4}}
    item = await store.get_item(NS, "k3")
    assert item is not None and item.metadata == {"m": 3}
    with pytest.raises(UserError):
        await store.put_batch([(NS, "ok", {}, None), (NS, "bad", {"x": object()}, None)])
    if store.capabilities.batch_operations:
        assert await store.get(NS, "ok") is None  # all or nothing
    assert await store.clear_namespace(NS) >= 5
    assert await store.list_keys(NS) == []


async def test_concurrent_puts_count_every_version(store: BaseStore) -> None:
    await asyncio.gather(*(store.put(NS, "counter", {"i": i}) for i in range(20)))
    item = await store.get_item(NS, "counter")
    assert item is not None and item.version == 20


async def test_every_advertised_capability_works(store: BaseStore) -> None:
    caps = store.capabilities
    assert isinstance(caps, StoreCapabilities)
    assert {"search", "semantic_search", "list_namespaces"} <= set(caps.enabled())
    await store.put(NS, "x", {"content": "hello world"})
    if caps.search:
        assert [h.key for h in await store.search(NS, query="hello")] == ["x"]
    if caps.semantic_search:
        await store.put_with_embedding(NS, "y", {"content": "v"}, vec(0.5, 0.5))
        assert (await store.search_by_embedding(NS, vec(0.5, 0.5)))[0].item.key == "y"
    if caps.list_namespaces:
        assert NS in await store.list_namespaces(prefix=NS[:1])


class _Bare(BaseStore):
    """A store with only the required operations: every optional one must say so."""

    async def put(self, namespace, key, value, metadata=None):  # type: ignore[no-untyped-def]
        return None

    async def get(self, namespace, key):  # type: ignore[no-untyped-def]
        return None

    async def get_item(self, namespace, key):  # type: ignore[no-untyped-def]
        return None

    async def delete(self, namespace, key):  # type: ignore[no-untyped-def]
        return False

    async def list_keys(self, namespace, limit=100):  # type: ignore[no-untyped-def]
        return []


async def test_missing_capabilities_raise_named_errors() -> None:
    bare = _Bare()
    assert bare.capabilities.enabled() == []
    for call, capability in [
        (bare.search(NS, "q"), "search"),
        (bare.put_with_embedding(NS, "k", {}, [1.0]), "semantic_search"),
        (bare.search_by_embedding(NS, [1.0]), "semantic_search"),
        (bare.get_embedding(NS, "k"), "semantic_search"),
        (bare.list_namespaces(), "list_namespaces"),
    ]:
        with pytest.raises(StoreCapabilityError) as info:
            await call
        assert info.value.capability == capability and info.value.store_class == "_Bare"
        assert capability in str(info.value)
        assert isinstance(info.value, NotImplementedError | CapabilityNotSupported)
