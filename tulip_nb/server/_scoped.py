"""ScopedCheckpointer: one principal's view of a shared checkpointer.

The AgentServer mounts the HTTP checkpoint protocol (:func:`~tulip_nb.server.checkpoint_app`) for
every caller, but over this view: thread ids are prefixed on the way in (``"<principal>:"`` in
tulip's layout) and the prefix is removed on the way out, so a caller reads, lists, searches and
copies only its own threads. The storage id never leaves: errors name the caller's id. Operations
that would cross principals are off: ``vacuum`` (capability off, 501). Listing and searching
over-fetch from the shared store and filter, so they may return fewer than ``limit`` rows when
other principals own most of it.

**Lineage stays in the caller's scope.** The save-metadata keys that name a thread,
``forked_from`` (a fork's source) and ``copied_from`` (``{"thread_id", "checkpoint_id"}``, a
copy's original), name a thread *of the caller*, like every other thread id it sends: a save (or a
verbatim put) stores them as the caller's storage ids and every read shows them back as sent, the
way a ``copy_thread`` of the caller's records its source. So a value naming another principal's
thread, by its client id or by its storage id (``"<other principal>:<id>"``), names a thread of
the caller's own that is not there: the store never links to the other principal's storage (the
file store's delta layout shares history only with a fork's source in the caller's scope), and
nothing is looked up, so no answer depends on whether that thread exists. A query by
``forked_from`` / ``copied_from`` takes the caller's ids too. A value that names no thread at all
(not a non-empty string without NUL; for ``copied_from`` not an object with such a
``thread_id``) is refused: :class:`~tulip_nb.core.errors.InvalidThreadId`, 422 naming the key;
``null`` is kept. A stored value outside the caller's scope (written past the server, say by a
notebook on the store) is shown as ``null``: the caller sees that there is lineage, never whose.
With the ``plain`` layout (one principal) the values are stored and shown as sent.

Limit: a signing store hashes ``forked_from`` as stored, so a signed fork's first checkpoint
verifies against the store (``tulip-nb verify`` on it, ``verify_thread`` on the store), not
through this view, which shows the caller's id instead.

>>> import asyncio
>>> from tulip_nb.core import AgentState
>>> from tulip_nb.memory.backends import MemoryCheckpointer
>>> shared = MemoryCheckpointer()
>>> mine = ScopedCheckpointer(shared, "9a437339f869:")
>>> _ = asyncio.run(mine.save(AgentState(), "ticket-1-b", metadata={"forked_from": "ticket-1"}))
>>> asyncio.run(shared.get_metadata("9a437339f869:ticket-1-b"))["forked_from"]
'9a437339f869:ticket-1'
>>> asyncio.run(mine.get_metadata("ticket-1-b"))["forked_from"]
'ticket-1'
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from tulip_nb.core.errors import InvalidThreadId, TulipNBError
from tulip_nb.core.keys import COPIED_FROM_KEY, FORKED_FROM_KEY
from tulip_nb.core.state import AgentState
from tulip_nb.memory.checkpointer import (
    BaseCheckpointer,
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    validate_thread_id,
)

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

    def _lineage_in(self, key: str, value: object, thread_id: str, *, part: str = "") -> str:
        """A lineage value the caller sent (a thread id of its own) as the storage id it names."""
        try:
            if not isinstance(value, str):
                raise InvalidThreadId(f"got {type(value).__name__}")
            validate_thread_id(value)
        except InvalidThreadId as e:
            raise InvalidThreadId(
                f"save metadata {key!r}{part} must name one of your threads (a non-empty string without NUL): "
                f"{e.message}",
                thread_id=thread_id,
            ) from None
        return self._in(value)

    def _meta_in(self, metadata: dict[str, Any] | None, thread_id: str) -> dict[str, Any] | None:
        """Save metadata the caller sent, its lineage turned into storage ids (module docstring)."""
        if not metadata:
            return metadata
        out = metadata
        forked = metadata.get(FORKED_FROM_KEY)
        if forked is not None:
            out = {**out, FORKED_FROM_KEY: self._lineage_in(FORKED_FROM_KEY, forked, thread_id)}
        copied = metadata.get(COPIED_FROM_KEY)
        if copied is not None:
            if not isinstance(copied, dict):
                raise InvalidThreadId(
                    f"save metadata {COPIED_FROM_KEY!r} must be an object with 'thread_id' and 'checkpoint_id', "
                    f"got {type(copied).__name__}",
                    thread_id=thread_id,
                )
            source = self._lineage_in(COPIED_FROM_KEY, copied.get("thread_id"), thread_id, part=" (its 'thread_id')")
            out = {**out, COPIED_FROM_KEY: {**copied, "thread_id": source}}
        return out

    def _lineage_out(self, stored: object) -> object:
        """A stored lineage thread id as the caller sees it: its own id, or None (not its thread)."""
        if not isinstance(stored, str):
            return stored
        return self._out(stored) if self._mine(stored) else None

    def _meta(self, metadata: dict[str, Any] | None) -> dict[str, Any] | None:
        """Stored save metadata as the caller sees it: lineage in its own ids (module docstring)."""
        if not metadata:
            return metadata
        out = metadata
        if isinstance(metadata.get(FORKED_FROM_KEY), str):
            out = {**out, FORKED_FROM_KEY: self._lineage_out(metadata[FORKED_FROM_KEY])}
        copied = metadata.get(COPIED_FROM_KEY)
        if isinstance(copied, dict) and isinstance(copied.get("thread_id"), str):
            out = {**out, COPIED_FROM_KEY: {**copied, "thread_id": self._lineage_out(copied["thread_id"])}}
        return out

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
        metadata = self._meta_in(metadata, thread_id)
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
        if key == FORKED_FROM_KEY and isinstance(value, str):  # the caller's id: its storage id
            value = self._in(value)
        elif key == COPIED_FROM_KEY and isinstance(value, dict) and isinstance(value.get("thread_id"), str):
            value = {**value, "thread_id": self._in(value["thread_id"])}
        with self._errors():
            rows = await self.inner.query_by_metadata(key, value, limit=None if limit is None else limit * _OVERFETCH)
        return self._rows(rows, limit)

    async def vacuum(self, older_than_days: float = 30) -> int:
        raise self._unimplemented("vacuum", "vacuum (it would cross principals)")

    def __repr__(self) -> str:
        return f"ScopedCheckpointer({self.inner!r}, prefix={self.prefix!r})"
