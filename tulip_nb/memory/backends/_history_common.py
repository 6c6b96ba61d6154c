"""What every checkpointer on the history model (:mod:`tulip_nb.memory.history`) does the same way.

A history checkpointer turns the contract into the store's primitives; these are the pieces that
do not depend on the store: the save plan (compare-and-swap, ``created_at``, signed save metadata,
all decided inside the store's transaction with the thread's latest), the write of an import, the
save metadata of a copied row, the rewrite plan of a prune or vacuum (drop, and re-link the
survivors, in one transaction) and the adoption of a loaded history by the chain cache.

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

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tulip_nb.core.state import AgentState, MessageBlobCache
from tulip_nb.memory.backends._base import newest_first, prepare_save_after
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
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
from tulip_nb.memory.retention import relink

__all__ = [
    "Choose",
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
