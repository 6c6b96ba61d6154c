"""Retention: which checkpoints a prune drops, and how the survivors stay a verifiable chain.

A research thread saved after every iteration (``checkpoint_every_n_iterations=1``) keeps every
mid-turn save forever. tulip itself drops a turn's iteration checkpoints once the turn has ended;
:func:`prune_plan` decides the same from the checkpoint headers alone (no state is read):

- an **iteration checkpoint** is one whose save metadata has ``source == "iteration"`` (what the
  agent writes for a mid-turn save); every other checkpoint is a **turn end** (finish, error,
  interrupt, stop) or a save made outside a turn (fork, update, import);
- an iteration checkpoint is **finished** when a turn end was saved after it;
- ``keep_last=N`` keeps the N newest checkpoints whatever they are; ``keep_turn_ends=True`` keeps
  every turn end; the newest checkpoint and the iteration checkpoints of an unfinished last turn
  (what ``resume()`` continues from) are always kept when ``keep_last`` is None.

Dropping a checkpoint cuts its children's link to it. :func:`relink` gives the new save metadata
of every survivor whose parent goes: ``parent_checkpoint_id`` becomes the nearest surviving
ancestor (or None) and :data:`~tulip_nb.core.keys.PRUNED_KEY` records the cut, so lineage stays
walkable and :func:`~tulip_nb.memory.integrity.verify_thread` checks the survivor against its new
parent's hash instead of reporting ``broken_chain``. Backends write the relinked metadata *before*
deleting, so a prune interrupted by a crash leaves a thread that verifies and can be pruned again.

>>> from datetime import UTC, datetime, timedelta
>>> from tulip_nb.memory.checkpointer import CheckpointInfo
>>> t0 = datetime(2026, 1, 1, tzinfo=UTC)
>>> def info(cid, n, source, parent):
...     return CheckpointInfo(cid, "t", t0 + timedelta(seconds=n), {"source": source, "parent_checkpoint_id": parent})
>>> infos = [info("i1", 1, "iteration", None), info("i2", 2, "iteration", "i1"), info("f1", 3, "final", "i2"),
...          info("i3", 4, "iteration", "f1")]
>>> sorted(plan_prune(infos))
['i1', 'i2']
>>> relink(infos, {"i1", "i2"})["f1"]["parent_checkpoint_id"] is None
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from tulip_nb.core.keys import HASH_KEY, PARENT_HASH_KEY, PARENT_KEY, PRUNED_KEY, SOURCE_KEY

__all__ = [
    "ITERATION_SOURCE",
    "Header",
    "PrunePlan",
    "is_iteration",
    "oldest_first",
    "plan_prune",
    "prune_plan",
    "relink",
]


class Header(Protocol):
    """What the rules read of a checkpoint: its id, when it was saved, its save metadata.

    :class:`~tulip_nb.memory.checkpointer.CheckpointInfo` is one. The rules sit below the
    checkpointer contract (which applies them in ``prune``), so they name no class of it.
    """

    @property
    def checkpoint_id(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...


_H = TypeVar("_H", bound=Header)

ITERATION_SOURCE = "iteration"
"""The ``source`` the agent writes in the save metadata of a mid-turn save."""


def is_iteration(info: Header) -> bool:
    """Whether ``info`` is a mid-turn (iteration) checkpoint."""
    return info.metadata.get(SOURCE_KEY) == ITERATION_SOURCE


def oldest_first(infos: Iterable[_H]) -> list[_H]:
    """``infos`` in save order (``created_at``, ties by id)."""
    return sorted(infos, key=lambda i: (i.created_at, i.checkpoint_id))


@dataclass(frozen=True)
class PrunePlan:
    """What a prune of one thread drops and keeps, each oldest first (ids of the listing it read).

    :meth:`BaseCheckpointer.prune <tulip_nb.memory.checkpointer.BaseCheckpointer.prune>` drops
    :attr:`dropped` (through :func:`plan_prune`) and ``tulip-nb prune --dry-run`` reports this very
    plan, so a dry run and the real prune of the same thread agree by construction.
    """

    dropped: tuple[str, ...]
    kept: tuple[str, ...]

    @property
    def before(self) -> int:
        """How many checkpoints the thread had."""
        return len(self.dropped) + len(self.kept)


def prune_plan(infos: Sequence[Header], keep_last: int | None = None, keep_turn_ends: bool = True) -> PrunePlan:
    """Which checkpoints a prune drops and which it keeps (see the module docstring); reads headers only.

    >>> from datetime import UTC, datetime
    >>> from tulip_nb.memory.checkpointer import CheckpointInfo
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> infos = [CheckpointInfo("f1", "t", at, {"source": "final"}),
    ...          CheckpointInfo("i1", "t", at, {"source": "iteration"})]
    >>> prune_plan(infos, keep_last=1, keep_turn_ends=False)
    PrunePlan(dropped=('f1',), kept=('i1',))
    """
    if keep_last is not None and keep_last < 0:
        raise ValueError(f"keep_last must be >= 0 or None, got {keep_last}")
    ordered = oldest_first(infos)
    keep: set[str] = set()
    if keep_last is None and ordered:
        keep.add(ordered[-1].checkpoint_id)
        for info in reversed(ordered):  # the unfinished last turn's iteration saves
            if not is_iteration(info):
                break
            keep.add(info.checkpoint_id)
    elif keep_last:
        keep.update(i.checkpoint_id for i in ordered[-keep_last:])
    if keep_turn_ends:
        keep.update(i.checkpoint_id for i in ordered if not is_iteration(i))
    ids = [i.checkpoint_id for i in ordered]
    return PrunePlan(tuple(c for c in ids if c not in keep), tuple(c for c in ids if c in keep))


def plan_prune(infos: Sequence[Header], keep_last: int | None = None, keep_turn_ends: bool = True) -> set[str]:
    """The ids of the checkpoints a prune drops: :func:`prune_plan`'s :attr:`~PrunePlan.dropped`."""
    return set(prune_plan(infos, keep_last, keep_turn_ends).dropped)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def relink(infos: Sequence[Header], dropped: set[str]) -> dict[str, dict[str, Any]]:
    """New save metadata for each surviving checkpoint whose parent is in ``dropped``.

    Parents are followed through ``dropped`` to the nearest surviving ancestor. A survivor pruned
    before keeps its first record's ``parent`` and ``parent_hash`` (the link its own hash binds);
    ``dropped`` counts every checkpoint cut between it and its new parent.
    """
    by_id: dict[str, Mapping[str, Any]] = {i.checkpoint_id: i.metadata for i in infos}
    out: dict[str, dict[str, Any]] = {}
    for info in infos:
        cid, meta = info.checkpoint_id, info.metadata
        parent = meta.get(PARENT_KEY)
        if cid in dropped or not isinstance(parent, str) or parent not in dropped:
            continue
        cut, seen = 0, {cid}
        walk: Any = parent
        while isinstance(walk, str) and walk in dropped and walk not in seen:
            seen.add(walk)
            cut += 1
            walk = by_id.get(walk, {}).get(PARENT_KEY)
        base = walk if isinstance(walk, str) and walk not in dropped and walk in by_id else None
        before = meta.get(PRUNED_KEY)
        first = before if isinstance(before, Mapping) else {"parent": parent, "parent_hash": meta.get(PARENT_HASH_KEY)}
        base_hash = by_id[base].get(HASH_KEY) if base is not None else None
        record = {
            "parent": first.get("parent"),
            "parent_hash": first.get("parent_hash"),
            "base_hash": base_hash if isinstance(base_hash, str) else None,
            "dropped": cut + _count(first.get("dropped")),
        }
        out[cid] = {**meta, PARENT_KEY: base, PRUNED_KEY: record}
    return out
