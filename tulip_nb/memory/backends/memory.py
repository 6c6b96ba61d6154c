"""MemoryCheckpointer: threads in a dict, for tests and a single-process REPL.

A checkpoint is stored as the JSON of its state *without* the messages plus a reference to its
(immutable) messages: a prefix of an append-only per-thread message log shared by every checkpoint
that extends it. So mutating a state after saving it never changes what was saved, a load returns
an independent state, and neither copies the history: a save costs the per-turn fields and its new
messages, and 937 saves of a 2000-message conversation hold its messages once (plus ~16 bytes per
checkpoint), not 937 lists of up to 2000 references.
"""

from __future__ import annotations

import operator
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tulip_nb.core.errors import CheckpointConflict, CheckpointNotFound
from tulip_nb.core.messages import Message
from tulip_nb.core.state import AgentState
from tulip_nb.memory.backends._base import InTreeCheckpointer, prepare_save_after
from tulip_nb.memory.checkpointer import (
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    new_checkpoint_id,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)

__all__ = ["MemoryCheckpointer"]

_EXCLUDE_MESSAGES = {"messages"}


class _MessageLog:
    """An append-only list of messages; a checkpoint's messages are one of its prefixes."""

    __slots__ = ("items",)

    def __init__(self, items: list[Message]) -> None:
        self.items = items

    def share(self, messages: list[Message]) -> _MessageLog | None:
        """This log (extended with ``messages``' new tail) if ``messages`` continue it, else None.

        ``messages`` continue the log when its first ``min(len)`` items are the log's own objects
        (messages are immutable, so identity is equality); a shorter ``messages`` is a prefix.
        """
        n = min(len(messages), len(self.items))
        if not all(map(operator.is_, messages[:n], self.items[:n])):
            return None
        if len(messages) > len(self.items):
            self.items.extend(messages[len(self.items) :])
        return self


@dataclass(frozen=True)
class _Record:
    """One checkpoint: its info, the state's JSON without messages, and a prefix of a message log."""

    info: CheckpointInfo
    rest: bytes
    log: _MessageLog
    n_messages: int

    @classmethod
    def of(cls, info: CheckpointInfo, state: AgentState, log: _MessageLog | None = None) -> _Record:
        rest = AgentState.__pydantic_serializer__.to_json(state, exclude=_EXCLUDE_MESSAGES)
        shared = log.share(state.messages) if log is not None else None
        return cls(info, rest, shared or _MessageLog(list(state.messages)), len(state.messages))

    @property
    def messages(self) -> list[Message]:
        return self.log.items[: self.n_messages]

    def checkpoint(self) -> Checkpoint:
        state = AgentState.model_validate_json(self.rest)
        state.messages = self.messages
        info = self.info
        return Checkpoint(info.checkpoint_id, info.thread_id, info.created_at, state, dict(info.metadata))


class MemoryCheckpointer(InTreeCheckpointer):
    """Keeps every checkpoint of every thread in this process's memory.

    >>> import asyncio
    >>> from tulip_nb.core import AgentState, Message
    >>> cp = MemoryCheckpointer()
    >>> cid = asyncio.run(cp.save(AgentState(messages=[Message.user("hi")]), "t1"))
    >>> asyncio.run(cp.load("t1")).messages[0].content
    'hi'
    """

    def __init__(self, *, sign: bool = True) -> None:
        self.sign = sign
        # thread_id -> checkpoint_id -> record; insertion order == save order
        self._threads: dict[str, dict[str, _Record]] = {}
        self._lock = threading.RLock()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            search=True,
            metadata_query=True,
            vacuum=True,
            branching=True,
            list_threads=True,
            list_with_metadata=True,
        )

    # -- helpers ------------------------------------------------------------------------------
    def _ordered(self, thread_id: str) -> list[CheckpointInfo]:
        records = self._threads.get(thread_id, {})
        return sorted((info for info in (r.info for r in records.values())), key=lambda i: i.created_at, reverse=True)

    def _latest(self, thread_id: str) -> CheckpointInfo | None:
        records = self._threads.get(thread_id)
        if not records:
            return None
        return max((info for info in (r.info for r in records.values())), key=lambda i: i.created_at)

    def _record(self, thread_id: str, checkpoint_id: str) -> _Record:
        rec = self._threads.get(thread_id, {}).get(checkpoint_id)
        if rec is None:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        return rec

    # -- contract -----------------------------------------------------------------------------
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        validate_thread_id(thread_id)
        cid = validate_checkpoint_id(checkpoint_id, thread_id) if checkpoint_id else new_checkpoint_id()
        with self._lock:
            plan = prepare_save_after(
                self._latest(thread_id), thread_id, state, metadata, expected_parent, sign=self.sign
            )
            records = self._threads.setdefault(thread_id, {})
            last = next(reversed(records.values()), None)
            info = CheckpointInfo(cid, thread_id, plan.created_at, plan.metadata)
            record = _Record.of(info, state, last.log if last else None)
            records.pop(cid, None)
            records[cid] = record
        return cid

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        ckpt = validate_checkpoint(checkpoint)
        info = CheckpointInfo(ckpt.checkpoint_id, ckpt.thread_id, ckpt.created_at, dict(ckpt.metadata))
        with self._lock:
            records = self._threads.setdefault(ckpt.thread_id, {})
            last = next(reversed(records.values()), None)
            record = _Record.of(info, ckpt.state, last.log if last else None)
            records.pop(ckpt.checkpoint_id, None)
            records[ckpt.checkpoint_id] = record

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        validate_thread_id(thread_id)
        with self._lock:
            if checkpoint_id is None:
                latest = self._latest(thread_id)
                if latest is None:
                    return None
                checkpoint_id = latest.checkpoint_id
            record = self._record(thread_id, checkpoint_id)
        return record.checkpoint()

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        validate_thread_id(thread_id)
        with self._lock:
            infos = self._ordered(thread_id)
        return infos if limit is None else infos[:limit]

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        validate_thread_id(thread_id)
        with self._lock:
            if checkpoint_id is None:
                return self._threads.pop(thread_id, None) is not None
            records = self._threads.get(thread_id, {})
            found = records.pop(checkpoint_id, None) is not None
            if not records:
                self._threads.pop(thread_id, None)
            return found

    # -- capabilities (the scans are derived in InTreeCheckpointer) ---------------------------
    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        with self._lock:
            return {t: self._ordered(t) for t in self._threads}

    async def _thread_ids(self) -> list[str]:
        with self._lock:
            return list(self._threads)

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        validate_thread_id(source_thread_id)
        validate_thread_id(dest_thread_id)
        with self._lock:
            source = self._threads.get(source_thread_id)
            if not source:
                raise CheckpointNotFound("source thread has no checkpoints", thread_id=source_thread_id)
            if self._threads.get(dest_thread_id):
                raise CheckpointConflict(
                    "destination thread already has checkpoints; delete it first",
                    thread_id=dest_thread_id,
                )
            copied: dict[str, _Record] = {}
            for cid, rec in source.items():
                info = rec.info
                meta = {**info.metadata, "copied_from": {"thread_id": source_thread_id, "checkpoint_id": cid}}
                new_info = CheckpointInfo(cid, dest_thread_id, info.created_at, meta)
                copied[cid] = _Record(new_info, rec.rest, rec.log, rec.n_messages)  # shares the history
            self._threads[dest_thread_id] = copied
        return True

    async def vacuum(self, older_than_days: float = 30) -> int:
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        removed = 0
        with self._lock:
            threads = {tid: [r.info for r in records.values()] for tid, records in self._threads.items()}
        for tid, infos in threads.items():
            removed += await self._drop(tid, infos, {i.checkpoint_id for i in infos if i.created_at < cutoff})
        return removed

    def __repr__(self) -> str:
        return f"MemoryCheckpointer(threads={len(self._threads)})"
