"""A user's own dict-shaped key-value class, wrapped by StorageBackendAdapter, passes conformance.

The shipped suite (:class:`tulip_nb.testing.CheckpointerSuite`) runs here on a :class:`DictKV`
(tulip's storage-backend shape, nothing of ours) and a :class:`MinimalKV` (no enumeration) in the
adapter.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio

from tulip_nb.memory.backends import StorageBackendAdapter
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.testing import CheckpointerSuite, full_state


class DictKV:
    """A user-written storage backend: async save/load/delete/exists (+ list_threads) on a dict."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.closed = False

    async def save(self, thread_id: str, data: dict[str, Any]) -> None:
        self.rows[thread_id] = data

    async def load(self, thread_id: str) -> dict[str, Any] | None:
        return self.rows.get(thread_id)

    async def delete(self, thread_id: str) -> bool:
        return self.rows.pop(thread_id, None) is not None

    async def exists(self, thread_id: str) -> bool:
        return thread_id in self.rows

    async def list_threads(self, limit: int = 100, offset: int = 0) -> list[str]:
        return sorted(self.rows)[offset : offset + limit]

    async def close(self) -> None:
        self.closed = True


class MinimalKV:
    """Only the four required methods: no enumeration."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    async def save(self, thread_id: str, data: dict[str, Any]) -> None:
        self.rows[thread_id] = data

    async def load(self, thread_id: str) -> dict[str, Any] | None:
        return self.rows.get(thread_id)

    async def delete(self, thread_id: str) -> bool:
        return self.rows.pop(thread_id, None) is not None

    async def exists(self, thread_id: str) -> bool:
        return thread_id in self.rows


def _opener(kind: str) -> Any:
    """One store (a dict of rows) per test; each opening is a new backend and adapter on it."""
    rows: dict[str, dict[str, Any]] = {}

    @contextlib.asynccontextmanager
    async def opener() -> AsyncIterator[BaseCheckpointer]:
        backend = DictKV() if kind == "dict-kv" else MinimalKV()
        backend.rows = rows
        async with StorageBackendAdapter(backend) as cp:
            yield cp

    return opener


KINDS = ["dict-kv", "minimal-kv"]


class TestUserKVConformance(CheckpointerSuite):
    """The shipped conformance suite, on a user's dict-shaped class inside the adapter."""

    @pytest_asyncio.fixture(params=KINDS)
    async def checkpointer_store(self, request: Any, tmp_path: Path) -> AsyncIterator[Any]:
        yield _opener(request.param)


async def test_user_kv_holds_tulips_key_layout() -> None:
    kv = DictKV()
    cp = StorageBackendAdapter(kv)
    assert cp.backend is kv
    a = await cp.save(full_state(marker="a"), "case-1")
    b = await cp.save(full_state(marker="b"), "case-1")
    assert sorted(kv.rows) == sorted([f"case-1:{a}", f"case-1:{b}", "case-1:latest", "case-1:_checkpoints"])
    record = kv.rows[f"case-1:{b}"]
    assert record["_checkpoint_id"] == b and record["_metadata"]["parent_checkpoint_id"] == a
    assert record["messages"][1]["content"] == "question 0 b" and "_checkpoint_timestamp" in record
    assert kv.rows["case-1:latest"] == record and kv.rows["case-1:latest"] is not record
    assert [e["checkpoint_id"] for e in kv.rows["case-1:_checkpoints"]["checkpoints"]] == [b, a]
    # a row tulip's adapter wrote by hand (same layout) loads back
    kv.rows["case-1:latest"] = orjson.loads(orjson.dumps(kv.rows[f"case-1:{a}"]))
    loaded = await cp.load("case-1")
    assert loaded is not None and loaded.messages[1].content == "question 0 a"
    assert await cp.list_threads() == ["case-1"]
    await cp.close()
    assert kv.closed


def test_capabilities_follow_what_the_backend_can_do() -> None:
    full = StorageBackendAdapter(DictKV()).capabilities
    assert full.list_threads and full.vacuum and full.list_with_metadata and full.branching
    assert not full.search and not full.metadata_query and not full.ttl
    minimal = StorageBackendAdapter(MinimalKV()).capabilities
    assert not minimal.list_threads and not minimal.vacuum and minimal.branching


def test_objects_without_the_dict_api_are_refused() -> None:
    class HalfKV:
        async def save(self, thread_id: str, data: dict[str, Any]) -> None: ...

        async def load(self, thread_id: str) -> None: ...

    with pytest.raises(TypeError, match="lacks delete, exists"):
        StorageBackendAdapter(HalfKV())
    from tulip_nb.memory.backends import MemoryCheckpointer

    with pytest.raises(TypeError, match="already a checkpointer"):
        StorageBackendAdapter(MemoryCheckpointer())


class WriteOnlyKV(MinimalKV):
    """A backend that stores writes elsewhere and reads nothing back (a write-through cache, a
    mock): the adapter must not depend on reading its own record back to write ``:latest``."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[str] = []

    async def save(self, thread_id: str, data: dict[str, Any]) -> None:
        self.saved.append(thread_id)

    async def load(self, thread_id: str) -> dict[str, Any] | None:
        return None


async def test_a_save_writes_tulips_latest_key_without_reading_the_record_back() -> None:
    kv = WriteOnlyKV()
    cid = await StorageBackendAdapter(kv).save(full_state(), "t1")
    assert kv.saved == [f"t1:{cid}", "t1:latest", "t1:_checkpoints"]


class VacuumingKV(MinimalKV):
    """A backend with its own ``vacuum(older_than_days)`` (tulip's backends have one)."""

    def __init__(self) -> None:
        super().__init__()
        self.vacuumed: list[float] = []

    async def vacuum(self, older_than_days: float) -> int:
        self.vacuumed.append(older_than_days)
        return 3


async def test_a_backends_own_vacuum_is_the_capability_and_is_called() -> None:
    cp = StorageBackendAdapter(VacuumingKV())
    assert cp.capabilities.vacuum and not cp.capabilities.list_threads
    assert await cp.vacuum(older_than_days=30) == 3
    assert cp.backend.vacuumed == [30]
    assert not StorageBackendAdapter(MinimalKV()).capabilities.vacuum
