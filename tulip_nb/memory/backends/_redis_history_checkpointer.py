"""The Redis checkpointer on the history model, with tulip's keys as a projection.

``redis_checkpointer(url)`` returns one: each message is an entry stored once in Redis (shared by
every checkpoint, fork and copy that reaches it), a checkpoint is a small row naming its head
entry, and the state's other fields are stored as a patch against the thread's previous row. So
a save costs what it adds, a copy writes rows only, and a 300-turn thread holds its messages
once (``redis_checkpointer(..., layout="kv")``, tulip's own layout, held every checkpoint's whole
state: ~700 MB for such a thread saved 1,138 times). The store and its keys:
:mod:`._redis_history`.

A tulip agent on the same server and prefix keeps working: the thread's latest turn end is written
as tulip's keys (``<tid>:<cid>``, ``<tid>:latest``, ``<tid>:_checkpoints``) in the same
``MULTI``/``EXEC`` as the save, or every checkpoint with ``layout="tulip"``. The checkpoints tulip
writes itself (index entries naming no row of the history) are checkpoints of the thread here:
the latest is the newest of the rows and those, and the next save chains after it.

>>> from tulip_nb.memory.backends import redis_checkpointer
>>> redis_checkpointer(url="redis://127.0.0.1:6379/15", prefix="docs:")
RedisHistoryCheckpointer(url='redis://127.0.0.1:6379/15', prefix='docs:', layout='history')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, UserError
from tulip_nb.memory.backends._history_common import (
    Choose,
    HistoryCheckpointer,
    PendingSave,
    copied_metadata,
    put_write,
    rewrite_plan,
)
from tulip_nb.memory.backends._kv import check_checkpoint_id
from tulip_nb.memory.backends._redis_history import RedisHistory
from tulip_nb.memory.backends.redis import RedisBackend
from tulip_nb.memory.checkpointer import (
    Checkpoint,
    CheckpointInfo,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)
from tulip_nb.memory.history import Rewrite, StoredCheckpoint

__all__ = ["RedisHistoryCheckpointer"]

Layout = Literal["history", "tulip"]


class RedisHistoryCheckpointer(HistoryCheckpointer):
    """Threads on Redis in the history model (module docstring); tulip's keys kept as a projection.

    Args:
        backend: the :class:`RedisBackend` (its URL, prefix and connection pools). Its
            ``ttl_seconds`` must be None: entries are shared between threads (a fork, a copy), so
            they cannot expire with one thread (``redis_checkpointer(..., layout="kv")`` keeps
            tulip's whole-state layout, where every key of a thread expires together).
        layout: ``"history"`` projects each thread's latest turn end as tulip's keys;
            ``"tulip"`` every checkpoint (tulip lists and loads each one).
        sign: hash-chain every save (:mod:`tulip_nb.memory.integrity`), opt-in as in the file
            store; the content digest of each row is checked on load either way.
    """

    def __init__(self, backend: RedisBackend, *, layout: Layout = "history", sign: bool = False) -> None:
        if layout not in ("history", "tulip"):
            raise UserError(f"RedisHistoryCheckpointer layout must be 'history' or 'tulip', got {layout!r}")
        if backend.ttl_seconds is not None:
            raise UserError(
                f"ttl_seconds={backend.ttl_seconds} cannot apply to layout={layout!r}: a thread's messages are "
                "entries shared with its forks and copies, so they cannot expire with one thread. Use "
                "redis_checkpointer(..., layout='kv') (tulip's layout: every key of a thread expires together), "
                "or drop old threads with vacuum()"
            )
        self.backend = backend
        self.layout = layout
        self.store = RedisHistory(backend, project="every" if layout == "tulip" else "latest")
        self._start(sign=sign)

    def __repr__(self) -> str:
        b = self.backend
        return f"RedisHistoryCheckpointer(url={b.url!r}, prefix={b.prefix!r}, layout={self.layout!r})"

    # -- contract -----------------------------------------------------------------------------
    async def _save_row(self, save: PendingSave) -> None:
        await self.store.save(save.thread_id, save.plan())

    def _check_id(self, checkpoint_id: str, thread_id: str) -> None:
        check_checkpoint_id(checkpoint_id, thread_id)

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        ckpt = validate_checkpoint(checkpoint)
        self._check_id(ckpt.checkpoint_id, ckpt.thread_id)
        write = put_write(ckpt, self._chains)
        await self.store.save(ckpt.thread_id, lambda _latest: write)
        self._chains.stored(ckpt.thread_id, write.chain)

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        validate_thread_id(thread_id)
        if checkpoint_id is None:
            got = await self.store.load_latest(thread_id)
            return self._loaded(got) if isinstance(got, StoredCheckpoint) or got is None else got
        cid = validate_checkpoint_id(checkpoint_id, thread_id)
        try:
            return self._loaded(await self.store.load(thread_id, cid))
        except CheckpointNotFound:
            return await self.store.load_foreign(thread_id, cid)  # one of tulip's own, or NotFound

    async def load_checkpoints(
        self, thread_id: str, checkpoint_ids: Sequence[str]
    ) -> list[Checkpoint | CheckpointCorrupt | CheckpointNotFound]:
        """Several checkpoints in the order asked, each message read and checked once for the batch."""
        validate_thread_id(thread_id)
        cids = [validate_checkpoint_id(c, thread_id) for c in checkpoint_ids]
        got = await self.store.load_many(thread_id, cids)
        return [g.checkpoint if isinstance(g, StoredCheckpoint) else g for g in got]

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        validate_thread_id(thread_id)
        return await self.store.infos(thread_id, limit)

    async def _delete_rows(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        if checkpoint_ids is None:
            return await self.store.delete_thread(thread_id)
        drop = frozenset(checkpoint_ids)
        return await self.store.rewrite(thread_id, lambda _infos: Rewrite(drop=drop))

    # -- capabilities (the scans are derived in InTreeCheckpointer) ---------------------------
    async def _thread_ids(self) -> list[str]:
        return sorted(set(await self.store.threads()) | set(await self.store.foreign_threads()))

    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        out: dict[str, list[CheckpointInfo]] = {}
        for tid in await self._thread_ids():
            infos = await self.store.infos(tid)
            if infos:
                out[tid] = infos
        return out

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        """Copy a thread: its rows point at the same entries (no message is written again); the
        checkpoints tulip wrote itself in the source become rows of the copy."""
        validate_thread_id(source_thread_id)
        validate_thread_id(dest_thread_id)
        infos = await self.store.infos(source_thread_id)
        rows = {r.checkpoint_id for r in await self.store.rows(source_thread_id)}
        tulip = [i for i in infos if i.checkpoint_id not in rows]
        if rows:
            await self.store.copy(source_thread_id, dest_thread_id, copied_metadata(source_thread_id))
        elif not tulip:
            raise CheckpointNotFound("source thread has no checkpoints", thread_id=source_thread_id)
        elif await self.store.infos(dest_thread_id, 1):
            raise CheckpointConflict(
                "destination thread already has checkpoints; delete it first", thread_id=dest_thread_id
            )
        for info in reversed(tulip):  # oldest first, each one a row of the copy
            ckpt = await self.store.load_foreign(source_thread_id, info.checkpoint_id)
            origin = {"thread_id": source_thread_id, "checkpoint_id": ckpt.checkpoint_id}
            meta = {**ckpt.metadata, "copied_from": origin}
            await self.put_checkpoint(Checkpoint(ckpt.checkpoint_id, dest_thread_id, ckpt.created_at, ckpt.state, meta))
        return True

    # -- retention: each a drop and a re-link in one transaction ------------------------------
    async def _rewrite(self, thread_id: str, choose: Choose) -> int:
        plan, _ = rewrite_plan(choose)
        return await self.store.rewrite(thread_id, plan)

    async def check_mirror(self, thread_id: str) -> list[str]:
        """Problems with tulip's keys of the thread, the projection ([]: none); ``tulip-nb verify``
        runs it."""
        validate_thread_id(thread_id)
        return await self.store.check_projection(thread_id)

    async def check_store(self) -> list[str]:
        """The entries' reference counts, every head and parent present ([] when all is well)."""
        return await self.store.integrity()

    async def close(self) -> None:
        await self.store.close()
