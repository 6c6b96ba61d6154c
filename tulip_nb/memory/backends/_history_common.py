"""What every checkpointer on the history model (:mod:`tulip_nb.memory.history`) does the same way.

A history checkpointer turns the contract into the store's primitives; these are the pieces that
do not depend on the store: the save plan (compare-and-swap, ``created_at``, signed save metadata,
all decided inside the store's transaction with the thread's latest), the write of an import, the
save metadata of a copied row, the rewrite plan of a prune or vacuum (drop, and re-link the
survivors, in one transaction) and the adoption of a loaded history by the chain cache; and the
base every such checkpointer is built on, :class:`HistoryCheckpointer` (with
:class:`BlockingHistoryCheckpointer` for those whose transactions block: file, PostgreSQL, MySQL),
whose docstring holds the vacuum contract.

>>> from datetime import UTC, datetime
>>> from tulip_nb.memory.checkpointer import CheckpointInfo
>>> at = datetime(2026, 1, 1, tzinfo=UTC)
>>> infos = [CheckpointInfo("c2", "t", at.replace(hour=2), {"parent_checkpoint_id": "c1"}),
...          CheckpointInfo("c1", "t", at.replace(hour=1), {"parent_checkpoint_id": None})]
>>> plan, _ = rewrite_plan(lambda infos: {"c1"})
>>> change = plan(infos)
>>> sorted(change.drop), change.metadata["c2"]["parent_checkpoint_id"]
(['c1'], None)
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from tulip_nb.core.errors import CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.state import AgentState, MessageBlobCache
from tulip_nb.memory.backends._base import InTreeCheckpointer, newest_first, prepare_save_after
from tulip_nb.memory.backends._sql_history import SQLHistory
from tulip_nb.memory.checkpointer import (
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)
from tulip_nb.memory.history import (
    ChainCache,
    MessageChain,
    Rewrite,
    RewritePlanFn,
    Row,
    RowWrite,
    SavePlanFn,
    StoredCheckpoint,
    state_rest,
)
from tulip_nb.memory.rest_delta import Parts
from tulip_nb.memory.retention import plan_prune, relink

__all__ = [
    "BlockingHistoryCheckpointer",
    "Choose",
    "HistoryCheckpointer",
    "PendingSave",
    "copied_metadata",
    "loaded",
    "newest",
    "older_than",
    "put_write",
    "rewrite_plan",
    "save_plan",
]

Choose = Callable[[list[CheckpointInfo]], set[str]]
"""Given a thread's checkpoints (newest first), the ids to drop."""


def newest(a: CheckpointInfo | None, b: CheckpointInfo | None) -> CheckpointInfo | None:
    """The newer of two checkpoints (``created_at``, ties by id); either may be None."""
    if a is None or b is None:
        return a or b
    return max(a, b, key=lambda i: (i.created_at, i.checkpoint_id))


def save_plan(
    thread_id: str,
    checkpoint_id: str,
    state: AgentState,
    metadata: dict[str, Any] | None,
    expected_parent: str | None,
    chain: MessageChain,
    rest: Parts,
    *,
    blobs: MessageBlobCache | None,
    sign: bool,
    after: CheckpointInfo | None = None,
) -> SavePlanFn:
    """The plan of one save: run inside the store's transaction with the thread's latest row.

    ``after``: a checkpoint the store does not hold that the save must also follow (a tulip
    envelope newer than the history, say); the newer of it and the latest row is the parent.
    Raises :class:`~tulip_nb.core.errors.CheckpointConflict` (aborting the transaction) when
    ``expected_parent`` is not that parent.
    """

    def plan(latest: CheckpointInfo | None) -> RowWrite:
        parent = newest(latest, after)
        p = prepare_save_after(parent, thread_id, state, metadata, expected_parent, blobs, sign=sign)
        return RowWrite(checkpoint_id, p.created_at, p.metadata, rest, chain)

    return plan


def put_write(checkpoint: Checkpoint, chains: ChainCache) -> RowWrite:
    """The write of an import (``put_checkpoint``): the checkpoint verbatim, its chain from ``chains``."""
    chain = chains.chain(checkpoint.thread_id, checkpoint.state.messages)
    meta = dict(checkpoint.metadata)
    return RowWrite(checkpoint.checkpoint_id, checkpoint.created_at, meta, state_rest(checkpoint.state), chain)


def copied_metadata(source: str) -> Callable[[Row], dict[str, Any]]:
    """The save metadata of a copied row: the source's, plus where it was copied from."""

    def copied(row: Row) -> dict[str, Any]:
        return {**row.metadata, "copied_from": {"thread_id": source, "checkpoint_id": row.checkpoint_id}}

    return copied


def rewrite_plan(choose: Choose, extra: Sequence[CheckpointInfo] = ()) -> tuple[RewritePlanFn, list[CheckpointInfo]]:
    """The plan of a drop (prune, vacuum, a delete of several): drop ``choose(infos)``, re-link the rest.

    Run inside the store's transaction, so what is dropped and how the survivors are re-linked
    (:func:`~tulip_nb.memory.retention.relink`) are decided on the rows as they are then.
    ``extra``: checkpoints of the thread the store does not hold (tulip's envelopes), chosen and
    re-linked around with the rows; the returned list is filled, when the plan runs, with those of
    them ``choose`` dropped (for the caller to remove after the commit).
    """
    dropped_extra: list[CheckpointInfo] = []

    def plan(rows: list[CheckpointInfo]) -> Rewrite:
        ids = {i.checkpoint_id for i in rows}
        others = [i for i in extra if i.checkpoint_id not in ids]
        infos = newest_first(rows + others) if others else rows
        dropped = choose(infos)
        dropped_extra[:] = [i for i in others if i.checkpoint_id in dropped]
        meta = {cid: m for cid, m in relink(infos, dropped).items() if cid in ids} if dropped else {}
        return Rewrite(meta, frozenset(dropped & ids))

    return plan, dropped_extra


def older_than(days: float, now: datetime | None = None) -> Choose:
    """What a vacuum drops: every checkpoint created more than ``days`` days before ``now``."""
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    return lambda infos: {i.checkpoint_id for i in infos if i.created_at < cutoff}


def loaded(chains: ChainCache, stored: StoredCheckpoint | None) -> Checkpoint | None:
    """The loaded checkpoint, its verified history adopted by ``chains`` (the next save hashes only new messages)."""
    if stored is None:
        return None
    ckpt = stored.checkpoint
    chains.remember(ckpt.thread_id, ckpt.state.messages, stored.ids)
    return ckpt


@dataclass(frozen=True)
class PendingSave:
    """One save, checked and hashed, on its way into a store's transaction."""

    thread_id: str
    checkpoint_id: str
    state: AgentState
    metadata: dict[str, Any] | None
    expected_parent: str | None
    chain: MessageChain
    given_id: bool
    """Whether the caller named the checkpoint id (else it is new)."""
    blobs: MessageBlobCache
    sign: bool

    def plan(self, after: CheckpointInfo | None = None) -> SavePlanFn:
        """The save's plan (:func:`save_plan`); ``after``: a checkpoint of tulip's it must follow too."""
        return save_plan(
            self.thread_id,
            self.checkpoint_id,
            self.state,
            self.metadata,
            self.expected_parent,
            self.chain,
            state_rest(self.state),
            blobs=self.blobs,
            sign=self.sign,
            after=after,
        )

    def checkpoint(self, write: RowWrite) -> Checkpoint:
        """The checkpoint ``write`` (this save's row write) stored."""
        return Checkpoint(self.checkpoint_id, self.thread_id, write.created_at, self.state, write.metadata)


class HistoryCheckpointer(InTreeCheckpointer):
    """Base of the checkpointers on the history model: the store's primitives in, the contract out.

    A history store (memory, file, SQL, Redis, S3) keeps rows on shared message entries
    (:mod:`tulip_nb.memory.history`); its checkpointer implements the primitives of
    :class:`~._base.InTreeCheckpointer` (``put_checkpoint``, ``load_checkpoint``,
    ``list_checkpoint_infos``, the scan) and three more, each one transaction of the store:

    ======================  =====================================================================
    primitive               derived from it
    ======================  =====================================================================
    :meth:`_rewrite`        ``prune``, ``vacuum``, the base class's drop
    :meth:`_delete_rows`    ``delete`` (a thread, or one checkpoint), the delete of several
    :meth:`_save_row`       ``save`` (the argument checks, the checkpoint id, the message chain;
                            the chain cache told once the row is stored)
    ======================  =====================================================================

    and the chain and blob caches every save shares (``_chains``, ``_blobs``).

    **The vacuum contract** (every checkpointer of the package keeps it; the conformance suite
    checks it): ``vacuum(older_than_days)`` drops, in every thread, each checkpoint created more
    than ``older_than_days`` days ago (tulip's own checkpoints of a thread included), and returns
    how many checkpoints it dropped. It is a prune by age: each thread's drop is one transaction
    that re-links the survivors first (:func:`~tulip_nb.memory.retention.relink`), so a thread
    left with checkpoints still verifies (:func:`~tulip_nb.memory.integrity.verify_thread`), and
    a thread left with none is gone (``load`` returns None).
    """

    persistent_checkpoint_ids: ClassVar[bool] = True
    """Whether checkpoint ids outlive the process (every store but the in-memory one)."""

    sign: bool
    _chains: ChainCache
    _blobs: MessageBlobCache

    def _start(self, *, sign: bool) -> None:
        """Set up what every history checkpointer holds (call it from ``__init__``)."""
        self.sign = sign
        self._chains = ChainCache()
        self._blobs = MessageBlobCache()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            search=True,
            metadata_query=True,
            vacuum=True,
            branching=True,
            list_threads=True,
            list_with_metadata=True,
            persistent_checkpoint_ids=self.persistent_checkpoint_ids,
        )

    # -- saves ------------------------------------------------------------------------------
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        cid = self._save_id(state, thread_id, checkpoint_id)
        chain = self._chains.chain(thread_id, state.messages)
        pending = PendingSave(
            thread_id, cid, state, metadata, expected_parent, chain, bool(checkpoint_id), self._blobs, self.sign
        )
        await self._save_row(pending)
        self._chains.stored(thread_id, chain)
        return cid

    def _loaded(self, stored: StoredCheckpoint | None) -> Checkpoint | None:
        return loaded(self._chains, stored)

    # -- primitives ---------------------------------------------------------------------------
    @abstractmethod
    async def _save_row(self, save: PendingSave) -> None:
        """Write ``save`` as the thread's new row: run :meth:`PendingSave.plan` in one transaction
        with the thread's latest (raises :class:`~tulip_nb.core.errors.CheckpointConflict` there)."""

    @abstractmethod
    async def _rewrite(self, thread_id: str, choose: Choose) -> int:
        """Drop ``choose(infos)`` of the thread (its rows and tulip's own checkpoints), re-linking
        the survivors, in one transaction; how many checkpoints went."""

    @abstractmethod
    async def _delete_rows(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        """Delete the thread (``None``) or some of its checkpoints, with tulip's; how many went."""

    # -- derived ------------------------------------------------------------------------------
    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        validate_thread_id(thread_id)
        if checkpoint_id is None:
            gone = await self._delete_rows(thread_id, None)
            self._chains.forget(thread_id)
            return gone > 0
        return await self._delete_rows(thread_id, {validate_checkpoint_id(checkpoint_id, thread_id)}) > 0

    async def _delete_checkpoints(self, thread_id: str, checkpoint_ids: set[str]) -> int:
        return await self._delete_rows(thread_id, set(checkpoint_ids))

    async def prune(self, thread_id: str, keep_last: int | None = None, keep_turn_ends: bool = True) -> int:
        validate_thread_id(thread_id)
        return await self._rewrite(thread_id, lambda infos: plan_prune(infos, keep_last, keep_turn_ends))

    async def _drop(self, thread_id: str, infos: list[CheckpointInfo], dropped: set[str]) -> int:
        return await self._rewrite(thread_id, lambda _infos: set(dropped)) if dropped else 0

    async def vacuum(self, older_than_days: float = 30) -> int:
        """Drop every checkpoint older than ``older_than_days`` days (the class docstring's contract)."""
        choose = older_than(older_than_days)
        gone = 0
        for thread_id in sorted(await self._thread_ids()):
            gone += await self._rewrite(thread_id, choose)
        return gone


class BlockingHistoryCheckpointer(HistoryCheckpointer):
    """A history checkpointer whose primitives are blocking transactions on a :class:`SQLHistory`
    (SQLite, PostgreSQL, MySQL): it writes them as ``_*_sync`` methods, and each async
    primitive runs its ``_*_sync`` on the store's worker (:meth:`SQLHistory.run`)."""

    store: SQLHistory

    @abstractmethod
    def _save_sync(self, save: PendingSave) -> None: ...

    @abstractmethod
    def _put_sync(self, ckpt: Checkpoint) -> None: ...

    @abstractmethod
    def _load_sync(self, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None: ...

    @abstractmethod
    def _load_many_sync(
        self, thread_id: str, checkpoint_ids: list[str]
    ) -> list[Checkpoint | CheckpointCorrupt | CheckpointNotFound]: ...

    @abstractmethod
    def _infos_sync(self, thread_id: str, limit: int | None) -> list[CheckpointInfo]: ...

    @abstractmethod
    def _all_infos_sync(self) -> dict[str, list[CheckpointInfo]]: ...

    @abstractmethod
    def _delete_sync(self, thread_id: str, checkpoint_ids: set[str] | None) -> int: ...

    @abstractmethod
    def _copy_sync(self, source: str, dest: str) -> bool: ...

    @abstractmethod
    def _rewrite_sync(self, thread_id: str, choose: Choose) -> int: ...

    async def _save_row(self, save: PendingSave) -> None:
        await self.store.run(self._save_sync, save)

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self.store.run(self._put_sync, validate_checkpoint(checkpoint))

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        return await self.store.run(self._load_sync, thread_id, checkpoint_id)

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        return await self.store.run(self._infos_sync, thread_id, limit)

    async def load_checkpoints(
        self, thread_id: str, checkpoint_ids: Sequence[str]
    ) -> list[Checkpoint | CheckpointCorrupt | CheckpointNotFound]:
        """Several checkpoints in the order asked (each one, or the error that one raised)."""
        return await self.store.run(self._load_many_sync, thread_id, list(checkpoint_ids))

    async def _delete_rows(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        return await self.store.run(self._delete_sync, thread_id, checkpoint_ids)

    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        return await self.store.run(self._all_infos_sync)

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        return await self.store.run(self._copy_sync, source_thread_id, dest_thread_id)

    async def _rewrite(self, thread_id: str, choose: Choose) -> int:
        return await self.store.run(self._rewrite_sync, thread_id, choose)

    def check_store(self) -> list[str]:
        """The store's own integrity checks ([] when all is well)."""
        return self.store.integrity_sync()
