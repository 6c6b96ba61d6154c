"""ScopedCheckpointer: one principal's view of a shared checkpointer.

The AgentServer mounts the HTTP checkpoint protocol (:func:`~tulip_nb.server.checkpoint_app`) for
every caller, but over this view: thread ids are prefixed on the way in (``"<principal>:"`` in
tulip's layout) and the prefix is removed on the way out, so a caller reads, lists, searches and
copies only its own threads. The storage id never leaves: errors name the caller's id, and so
does the ``copied_from`` of a copy's save metadata. Operations that would cross principals are
off: ``vacuum`` (capability off, 501). Listing and searching over-fetch from the shared store and
filter, so they may return fewer than ``limit`` rows when other principals own most of it.

>>> from tulip_nb.memory.backends.memory import MemoryCheckpointer
>>> mine = ScopedCheckpointer(MemoryCheckpointer(), "9a437339f869:")
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from tulip_nb.core.errors import TulipNBError
from tulip_nb.core.keys import COPIED_FROM_KEY
from tulip_nb.core.state import AgentState
from tulip_nb.memory.checkpointer import BaseCheckpointer, Capabilities, Checkpoint, CheckpointInfo

__all__ = ["ScopedCheckpointer"]

_OVERFETCH = 20


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in text)


class ScopedCheckpointer(BaseCheckpointer):
    """``inner`` seen through ``prefix`` (see the module docstring). Closing it closes nothing."""

    def __init__(self, inner: BaseCheckpointer, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix

    def _in(self, thread_id: str) -> str:
        return self.prefix + thread_id

    def _out(self, stored: str) -> str:
        return stored[len(self.prefix) :]

    def _mine(self, stored: object) -> bool:
        return isinstance(stored, str) and stored.startswith(self.prefix)

    def _meta(self, metadata: dict[str, Any] | None) -> dict[str, Any] | None:
        """Save metadata with the storage id in ``copied_from`` turned back into the caller's.

        (``forked_from`` is part of the checkpoint's hash, so it is shown as stored: the server
        itself never forks, so only a thread written elsewhere can carry a storage id there.)
        """
        if not metadata:
            return metadata
        copied = metadata.get(COPIED_FROM_KEY)
        if isinstance(copied, dict) and self._mine(copied.get("thread_id")):
            return {**metadata, COPIED_FROM_KEY: {**copied, "thread_id": self._out(copied["thread_id"])}}
        return metadata

    def _rows(self, rows: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
        out = []
        for row in rows:
            if self._mine(row.get("thread_id")):
                scoped = {**row, "thread_id": self._out(row["thread_id"])}
                if isinstance(row.get("metadata"), dict):
                    scoped["metadata"] = self._meta(row["metadata"])
                out.append(scoped)
        return out[:limit]

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Errors of ``inner`` name the caller's thread id, not the storage id."""
        try:
            yield
        except TulipNBError as e:
            stored = e.thread_id
            if isinstance(stored, str) and stored.startswith(self.prefix):
                e.thread_id = self._out(stored)
                e.message = e.message.replace(stored, e.thread_id)
                e.args = (e._render(), *e.args[1:])
            raise

    @property
    def capabilities(self) -> Capabilities:
        return dataclasses.replace(self.inner.capabilities, vacuum=False)

    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        with self._errors():
            return await self.inner.save(
                state, self._in(thread_id), checkpoint_id, metadata, expected_parent=expected_parent
            )

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> AgentState | None:
        with self._errors():
            return await self.inner.load(self._in(thread_id), checkpoint_id)

    async def list_checkpoints(self, thread_id: str, limit: int | None = 10) -> list[str]:
        with self._errors():
            return await self.inner.list_checkpoints(self._in(thread_id), limit)

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        with self._errors():
            return await self.inner.delete(self._in(thread_id), checkpoint_id)

    async def exists(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        with self._errors():
            return await self.inner.exists(self._in(thread_id), checkpoint_id)

    async def latest_checkpoint_id(self, thread_id: str) -> str | None:
        with self._errors():
            return await self.inner.latest_checkpoint_id(self._in(thread_id))

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        with self._errors():
            ckpt = await self.inner.load_checkpoint(self._in(thread_id), checkpoint_id)
        if ckpt is None:
            return None
        return dataclasses.replace(ckpt, thread_id=thread_id, metadata=self._meta(ckpt.metadata) or {})

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        with self._errors():
            infos = await self.inner.list_checkpoint_infos(self._in(thread_id), limit)
        return [dataclasses.replace(i, thread_id=thread_id, metadata=self._meta(i.metadata) or {}) for i in infos]

    async def get_metadata(self, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any] | None:
        with self._errors():
            return self._meta(await self.inner.get_metadata(self._in(thread_id), checkpoint_id))

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        with self._errors():
            return await self.inner.copy_thread(self._in(source_thread_id), self._in(dest_thread_id))

    async def list_threads(self, limit: int | None = 100, pattern: str = "*") -> list[str]:
        with self._errors():
            stored = await self.inner.list_threads(limit=limit, pattern=_glob_escape(self.prefix) + (pattern or "*"))
        return [self._out(t) for t in stored if self._mine(t)]

    async def list_with_metadata(self, limit: int | None = 100) -> list[dict[str, Any]]:
        with self._errors():
            rows = await self.inner.list_with_metadata(limit=None if limit is None else limit * _OVERFETCH)
        return self._rows(rows, limit)

    async def search(self, query: str, limit: int | None = 10) -> list[dict[str, Any]]:
        with self._errors():
            rows = await self.inner.search(query, limit=None if limit is None else limit * _OVERFETCH)
        return self._rows(rows, limit)

    async def query_by_metadata(self, key: str, value: Any, limit: int | None = 100) -> list[dict[str, Any]]:
        with self._errors():
            rows = await self.inner.query_by_metadata(key, value, limit=None if limit is None else limit * _OVERFETCH)
        return self._rows(rows, limit)

    async def vacuum(self, older_than_days: float = 30) -> int:
        raise self._unimplemented("vacuum", "vacuum (it would cross principals)")

    def __repr__(self) -> str:
        return f"ScopedCheckpointer({self.inner!r}, prefix={self.prefix!r})"
