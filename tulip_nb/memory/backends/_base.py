"""The internal base of the in-tree checkpointers: few primitives, the contract derived once.

:class:`~tulip_nb.memory.checkpointer.BaseCheckpointer` is the contract users implement (three
methods). The in-tree backends share more than that: each reads one checkpoint, lists a thread's
checkpoint infos, writes one checkpoint and deletes. From those primitives this base derives the
rest once, as langgraph's ``BaseCheckpointSaver`` derives ``get``/``list`` from ``get_tuple``:

========================  =========================================================================
primitive                 derived from it
========================  =========================================================================
``load_checkpoint``       ``load`` (its ``.state``)
``list_checkpoint_infos`` ``list_checkpoints`` (ids), ``exists``, ``get_metadata``
``_scan_infos``           ``list_threads``, ``list_with_metadata``, ``query_by_metadata``, ``search``
========================  =========================================================================

and :func:`prepare_save` is the one save sequence (compare-and-swap test, a ``created_at`` after
the latest, signed save metadata) every backend runs inside its own lock or transaction.

``limit=None`` means "no limit" everywhere here (no ``10**9`` sentinels).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tulip_nb.core.errors import CheckpointNotFound
from tulip_nb.core.state import AgentState, MessageBlobCache
from tulip_nb.memory._envelope import info_row, matches_pattern, metadata_matches, search_hit, search_state
from tulip_nb.memory.checkpointer import (
    BaseCheckpointer,
    Checkpoint,
    CheckpointInfo,
    check_expected_parent,
    new_checkpoint_id,
    next_created_at,
    save_metadata,
    validate_checkpoint_id,
    validate_thread_id,
)

__all__ = ["InTreeCheckpointer", "SavePlan", "newest_first", "prepare_save"]


@dataclass(frozen=True)
class SavePlan:
    """What a save writes besides the state: its parent, its ``created_at``, its save metadata."""

    parent: str | None
    created_at: datetime
    metadata: dict[str, Any]


def prepare_save(
    thread_id: str,
    state: AgentState,
    metadata: dict[str, Any] | None,
    *,
    expected_parent: str | None,
    latest_id: str | None,
    latest_created_at: datetime | None,
    latest_metadata: Mapping[str, Any] | None,
    cache: MessageBlobCache | None = None,
    sign: bool = True,
) -> SavePlan:
    """The save sequence, run under the backend's lock with the thread's latest as read there.

    :func:`check_expected_parent` (raises :class:`CheckpointConflict`), then
    :func:`next_created_at` after the latest, then :func:`save_metadata` chained to the latest.
    """
    check_expected_parent(expected_parent, latest_id, thread_id)
    created = next_created_at(latest_created_at)
    meta = save_metadata(
        metadata,
        latest_id,
        state=state,
        parent_metadata=latest_metadata,
        thread_id=thread_id,
        cache=cache,
        sign=sign,
        created_at=created,
    )
    return SavePlan(latest_id, created, meta)


def prepare_save_after(
    latest: CheckpointInfo | None,
    thread_id: str,
    state: AgentState,
    metadata: dict[str, Any] | None,
    expected_parent: str | None,
    cache: MessageBlobCache | None = None,
    sign: bool = True,
) -> SavePlan:
    """:func:`prepare_save` with the latest given as a :class:`CheckpointInfo` (or None)."""
    return prepare_save(
        thread_id,
        state,
        metadata,
        expected_parent=expected_parent,
        latest_id=latest.checkpoint_id if latest else None,
        latest_created_at=latest.created_at if latest else None,
        latest_metadata=latest.metadata if latest else None,
        cache=cache,
        sign=sign,
    )


def newest_first(infos: list[CheckpointInfo]) -> list[CheckpointInfo]:
    """``infos`` sorted newest ``created_at`` first (ties by id, so the order is stable)."""
    return sorted(infos, key=lambda i: (i.created_at, i.checkpoint_id), reverse=True)


def _cut(items: list[Any], limit: int | None) -> list[Any]:
    return items if limit is None else items[:limit]


class InTreeCheckpointer(BaseCheckpointer):
    """Base of the in-tree checkpointers: implement the primitives, inherit the rest.

    Primitives: :meth:`load_checkpoint`, :meth:`list_checkpoint_infos`, ``save`` /
    ``put_checkpoint``, ``delete``, and, for the scan-based capabilities, :meth:`_scan_infos`.
    A backend overrides a derived method only where it has a cheaper native way (e.g. S3 lists
    thread ids from keys without reading any object).
    """

    # -- a save's ids -------------------------------------------------------------------------
    def _check_id(self, checkpoint_id: str, thread_id: str) -> None:
        """Refuse a checkpoint id the store cannot hold, before anything is written (a hook)."""

    def _save_id(self, state: AgentState, thread_id: str, checkpoint_id: str | None) -> str:
        """The checked id a ``save(state, thread_id, checkpoint_id)`` writes (a new one when None),
        after refusing a state that is not an :class:`AgentState` and an invalid thread id."""
        if not isinstance(state, AgentState):
            raise TypeError(f"save(state, thread_id) takes an AgentState, got {type(state).__name__}")
        validate_thread_id(thread_id)
        cid = validate_checkpoint_id(checkpoint_id, thread_id) if checkpoint_id else new_checkpoint_id()
        self._check_id(cid, thread_id)
        return cid

    # -- primitives ---------------------------------------------------------------------------
    @abstractmethod
    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        """The latest checkpoint (or one by id) with its envelope; None for no thread.

        Raises :class:`CheckpointNotFound` for an explicit ``checkpoint_id`` that does not exist.
        """

    @abstractmethod
    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        """The thread's checkpoint infos, newest first (all of them for ``limit=None``)."""

    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        """Every readable checkpoint of every thread, per thread, newest first.

        Backs the scan-based capabilities; a backend that offers them implements it.
        """
        raise self._unimplemented("list_threads", "scan")

    async def _thread_ids(self) -> list[str]:
        """Every thread id that has a checkpoint (a backend may list them more cheaply)."""
        return list(await self._scan_infos())

    # -- derived from the primitives ----------------------------------------------------------
    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> AgentState | None:
        ckpt = await self.load_checkpoint(thread_id, checkpoint_id)
        return ckpt.state if ckpt else None

    async def list_checkpoints(self, thread_id: str, limit: int | None = 10) -> list[str]:
        return [i.checkpoint_id for i in await self.list_checkpoint_infos(thread_id, limit)]

    async def latest_checkpoint_id(self, thread_id: str) -> str | None:
        infos = await self.list_checkpoint_infos(thread_id, 1)
        return infos[0].checkpoint_id if infos else None

    async def _checkpoint_info(self, thread_id: str, checkpoint_id: str | None) -> CheckpointInfo | None:
        """One checkpoint's info (the latest for None), or None when there is no such checkpoint."""
        if checkpoint_id is None:
            infos = await self.list_checkpoint_infos(thread_id, 1)
            return infos[0] if infos else None
        for info in await self.list_checkpoint_infos(thread_id, None):
            if info.checkpoint_id == checkpoint_id:
                return info
        return None

    async def exists(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        return await self._checkpoint_info(thread_id, checkpoint_id) is not None

    async def get_metadata(self, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any] | None:
        self._require("metadata_query", "get_metadata")
        info = await self._checkpoint_info(thread_id, checkpoint_id)
        return dict(info.metadata) if info else None

    # -- derived from the scan ----------------------------------------------------------------
    async def list_threads(self, limit: int | None = 100, pattern: str = "*") -> list[str]:
        self._require("list_threads", "list_threads")
        ids = sorted(t for t in await self._thread_ids() if matches_pattern(t, pattern))
        return _cut(ids, limit)

    async def list_with_metadata(self, limit: int | None = 100) -> list[dict[str, Any]]:
        self._require("list_with_metadata", "list_with_metadata")
        latest = [infos[0] for infos in (await self._scan_infos()).values() if infos]
        latest.sort(key=lambda i: i.created_at, reverse=True)
        return [info_row(i) for i in _cut(latest, limit)]

    async def query_by_metadata(self, key: str, value: Any, limit: int | None = 100) -> list[dict[str, Any]]:
        """Checkpoints whose save metadata (else, their state's metadata) has ``key == value``."""
        self._require("metadata_query", "query_by_metadata")
        infos = [i for group in (await self._scan_infos()).values() for i in group]
        infos.sort(key=lambda i: i.created_at, reverse=True)
        out: list[dict[str, Any]] = []
        for info in infos:
            if limit is not None and len(out) >= limit:
                break
            state = None
            if key not in info.metadata:  # not save metadata: look in the state's metadata
                try:
                    state = await self.load(info.thread_id, info.checkpoint_id)
                except CheckpointNotFound:
                    continue  # deleted while scanning
            if metadata_matches(info.metadata, state, key, value):
                out.append(info_row(info))
        return out

    async def search(self, query: str, limit: int | None = 10) -> list[dict[str, Any]]:
        """Case-insensitive all-terms search over each thread's latest state (reads every one)."""
        self._require("search", "search")
        hits = []
        for tid in sorted(await self._thread_ids()):
            ckpt = await self.load_checkpoint(tid)
            if ckpt is None:
                continue
            score, idx, snippet = search_state(ckpt.state, query)
            if score:
                hits.append(search_hit(ckpt, score, idx, snippet))
        hits.sort(key=lambda h: (-h["score"], h["thread_id"]))
        return _cut(hits, limit)
