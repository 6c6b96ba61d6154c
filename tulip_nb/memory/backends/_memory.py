"""MemoryCheckpointer: threads in this process's memory, on the history model.

The store is :class:`~._dict_history.DictHistory`, the history model (:mod:`tulip_nb.memory.history`)
in dicts, as the file store's is on SQLite: each message is an entry stored once (shared by every
checkpoint, fork and copy that reaches it, collected with the last one), a checkpoint is a row that
names its head, and the state's other fields are stored as a patch against the thread's previous
row (a snapshot every few). So a save costs its new messages and what changed in the other fields:
1,198 saves of a 300-turn thread hold its 2,396 messages once and their other fields in 1.3 MB (not
97 MB of repeated turn logs); a fork or copy is rows on the same entries; a load returns an
independent state whose messages were checked against their entry ids and whose row matched its
digest (a changed entry or row is :class:`~tulip_nb.core.errors.CheckpointCorrupt`).

Each operation is one critical section of the store (a lock, no await inside), so concurrent
coroutines and threads see every save, copy, prune and delete whole or not at all.
"""

from __future__ import annotations

from tulip_nb.memory.backends._dict_history import DictHistory
from tulip_nb.memory.backends._history_common import (
    Choose,
    HistoryCheckpointer,
    PendingSave,
    copied_metadata,
    put_write,
    rewrite_plan,
)
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo, validate_checkpoint, validate_thread_id

__all__: list[str] = []


class MemoryCheckpointer(HistoryCheckpointer):
    """Keeps every checkpoint of every thread in this process's memory.

    A thread is a sequence of checkpoints (one per save); a checkpoint is the whole
    :class:`~tulip_nb.core.AgentState` as it was then. Here the messages are stored once however
    often they are saved, so keeping every checkpoint of a long conversation is cheap; ``sign``
    (on by default, unlike the persisted stores: see docs/signing-and-integrity.md) adds the hash
    chain :func:`~tulip_nb.memory.integrity.verify_thread` checks.

    >>> import asyncio
    >>> from tulip_nb.core import AgentState, Message
    >>> cp = MemoryCheckpointer()
    >>> cid = asyncio.run(cp.save(AgentState(messages=[Message.user("hi")]), "t1"))
    >>> asyncio.run(cp.load("t1")).messages[0].content
    'hi'
    """

    persistent_checkpoint_ids = False

    def __init__(self, *, sign: bool = True) -> None:
        self.store = DictHistory()
        self._start(sign=sign)

    # -- contract -----------------------------------------------------------------------------
    async def _save_row(self, save: PendingSave) -> None:
        self.store.save_sync(save.thread_id, save.plan())

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        write = put_write(validate_checkpoint(checkpoint), self._chains)
        self.store.save_sync(checkpoint.thread_id, lambda _latest: write)
        self._chains.stored(checkpoint.thread_id, write.chain)

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        validate_thread_id(thread_id)
        return self._loaded(self.store.load_sync(thread_id, checkpoint_id))

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        validate_thread_id(thread_id)
        return [r.info for r in self.store.rows_sync(thread_id, limit)]

    async def _delete_rows(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        return self.store.delete_sync(thread_id, None if checkpoint_ids is None else sorted(checkpoint_ids))

    # -- capabilities (the scans are derived in InTreeCheckpointer) ---------------------------
    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        return {t: [r.info for r in rows] for t, rows in self.store.all_rows_sync().items()}

    async def _thread_ids(self) -> list[str]:
        return self.store.threads_sync()

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        validate_thread_id(source_thread_id)
        validate_thread_id(dest_thread_id)
        self.store.copy_sync(source_thread_id, dest_thread_id, copied_metadata(source_thread_id))
        return True

    # -- retention: each a drop and a re-link in one critical section ---------------------------
    async def _rewrite(self, thread_id: str, choose: Choose) -> int:
        plan, _ = rewrite_plan(choose)
        return self.store.rewrite_sync(thread_id, plan)

    def __repr__(self) -> str:
        return f"MemoryCheckpointer(threads={len(self.store)})"
