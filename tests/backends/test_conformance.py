"""Checkpointer conformance: the shipped suite (:mod:`tulip_nb.testing`) over every backend."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tulip_nb.core import AgentState, CheckpointNotFound
from tulip_nb.memory.checkpointer import BaseCheckpointer, new_checkpoint_id, validate_thread_id
from tulip_nb.testing import CheckpointerSuite, Opener, full_state

from .conftest import BACKENDS, backend_params
from .factories.local import RACING


class TestConformance(CheckpointerSuite):
    """The whole suite, once per registered backend factory (the race cases on those in ``RACING``)."""

    @pytest_asyncio.fixture(params=backend_params())
    async def checkpointer_store(self, request: Any, tmp_path: Path) -> AsyncIterator[Opener]:
        self.races = request.param in RACING  # the fixture runs on the test's own instance
        async with BACKENDS[request.param](tmp_path) as opener:
            yield opener


class DictCheckpointer(BaseCheckpointer):
    """What a user writes from "Building your own": a dict, and only the three required methods."""

    def __init__(self, data: dict[str, list[tuple[str, AgentState]]] | None = None) -> None:
        self.data = {} if data is None else data

    async def save(self, state, thread_id, checkpoint_id=None, metadata=None, **kw):  # type: ignore[no-untyped-def]
        cid = checkpoint_id or new_checkpoint_id()
        rows = self.data.setdefault(validate_thread_id(thread_id), [])
        rows[:] = [(c, s) for c, s in rows if c != cid]
        rows.insert(0, (cid, state.model_copy(deep=True)))
        return cid

    async def load(self, thread_id, checkpoint_id=None):  # type: ignore[no-untyped-def]
        for cid, state in self.data.get(validate_thread_id(thread_id), []):
            if checkpoint_id in (None, cid):
                return state.model_copy(deep=True)
        if checkpoint_id is not None:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        return None

    async def list_checkpoints(self, thread_id, limit=10):  # type: ignore[no-untyped-def]
        return [cid for cid, _ in self.data.get(validate_thread_id(thread_id), [])][:limit]


@contextlib.asynccontextmanager
async def dict_store(tmp_path: Path) -> AsyncIterator[Opener]:
    data: dict[str, list[tuple[str, AgentState]]] = {}

    @contextlib.asynccontextmanager
    async def opener() -> AsyncIterator[BaseCheckpointer]:
        yield DictCheckpointer(data)

    yield opener


class TestMinimalUserCheckpointer(CheckpointerSuite):
    """A user's three-method checkpointer passes the shipped suite (the parts it claims)."""

    factory = staticmethod(dict_store)
    supports_delete = False
    supports_compare_and_swap = False
    keeps_save_metadata = False


async def test_minimal_user_subclass_works() -> None:
    cp = DictCheckpointer()
    cid = await cp.save(full_state(), "t")
    assert await cp.exists("t") and not await cp.exists("u")
    assert await cp.latest_checkpoint_id("t") == cid
    ckpt = await cp.load_checkpoint("t")
    assert ckpt is not None and ckpt.checkpoint_id == cid
    with pytest.raises(NotImplementedError, match="list_threads"):
        await cp.list_threads()
    with pytest.raises(NotImplementedError, match="branching"):
        await cp.copy_thread("t", "u")
