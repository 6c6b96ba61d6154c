"""Lineage across threads: where a branch was cut from, and the common ancestor of two threads.

Every save records ``parent_checkpoint_id``; the first checkpoint of a fork also records
``forked_from`` (the source thread) and its ``parent_checkpoint_id`` is the source checkpoint, as
tulip does. ``copy_thread`` keeps the checkpoint ids and adds ``copied_from``. From these alone
(save metadata, no states) :func:`ancestry` lists the checkpoints a thread's latest state descends
from, newest first, walking into source threads; two threads' first shared entry is their common
ancestor (:func:`common_ancestor`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tulip_nb.core.errors import CapabilityNotSupported, TulipNBError
from tulip_nb.core.keys import COPIED_FROM_KEY

if TYPE_CHECKING:
    from tulip_nb.memory.checkpointer import BaseCheckpointer, CheckpointInfo

__all__ = ["ancestry", "common_ancestor", "lineage_rows", "origin"]


def origin(infos: list[CheckpointInfo]) -> tuple[str, str | None, str] | None:
    """``(source thread, source checkpoint, relation)`` a thread was branched from, from its oldest
    checkpoint's save metadata (``infos`` newest first); None for a thread started from scratch."""
    if not infos:
        return None
    meta = infos[-1].metadata
    src = meta.get("forked_from")
    if isinstance(src, str):
        parent = meta.get("parent_checkpoint_id")
        return src, parent if isinstance(parent, str) else None, "parent"
    copied = meta.get(COPIED_FROM_KEY)
    if isinstance(copied, dict) and isinstance(copied.get("thread_id"), str):
        cid = copied.get("checkpoint_id")
        return copied["thread_id"], cid if isinstance(cid, str) else None, "copied_from"
    return None


async def _infos(cp: BaseCheckpointer, thread_id: str) -> list[CheckpointInfo]:
    try:
        return await cp.list_checkpoint_infos(thread_id, limit=None)
    except TulipNBError:
        return []


async def ancestry(
    cp: BaseCheckpointer, thread_id: str, infos: list[CheckpointInfo] | None = None, depth: int = 16
) -> list[tuple[str, str]]:
    """``(thread_id, checkpoint_id)`` pairs the thread's latest state descends from, newest first:
    its own checkpoints, then (for a branch) the source thread's checkpoints up to the branch point,
    and so on up to ``depth`` threads."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    tid: str | None = thread_id
    cut: str | None = None
    for _ in range(depth):
        if tid is None or tid in seen:
            break
        seen.add(tid)
        rows = infos if (infos is not None and tid == thread_id) else await _infos(cp, tid)
        ids = [i.checkpoint_id for i in rows]
        if cut is not None and cut in ids:
            rows = rows[ids.index(cut) :]
        out.extend((tid, i.checkpoint_id) for i in rows)
        up = origin(rows)
        if up is None:
            break
        tid, cut = up[0], up[1]
    return out


async def common_ancestor(
    cp: BaseCheckpointer,
    a: str,
    b: str,
    infos_a: list[CheckpointInfo] | None = None,
    infos_b: list[CheckpointInfo] | None = None,
    *,
    checkpointer_b: BaseCheckpointer | None = None,
) -> tuple[str, str] | None:
    """The newest checkpoint both threads descend from, as ``(thread_id, checkpoint_id)`` (of ``b``'s side).

    ``checkpointer_b``: where ``b`` lives when not in ``cp`` — a thread exported to another store
    keeps its checkpoint ids, so a copy and its source share them (the copy's latest is the source's).
    """
    anc_a = await ancestry(cp, a, infos_a)
    ids_a = {cid for _, cid in anc_a}
    for tid, cid in await ancestry(checkpointer_b if checkpointer_b is not None else cp, b, infos_b):
        if cid in ids_a:
            return tid, cid
    return None


async def lineage_rows(cp: BaseCheckpointer, thread_id: str, infos: list[CheckpointInfo]) -> list[dict[str, Any]]:
    """Rows for :meth:`Thread.lineage`: ancestors (walking ``forked_from``) and direct branches."""
    rows: list[dict[str, Any]] = []
    up = origin(infos)
    seen = {thread_id}
    relation = None
    while up is not None and up[0] not in seen:
        src, cid, how = up
        relation = how if relation is None else "ancestor"
        first = infos[-1] if infos else None
        rows.append(
            {
                "relation": relation,
                "thread_id": src,
                "checkpoint_id": cid,
                "branch_point": cid,
                "created_at": first.created_at if first else None,
                "source": first.metadata.get("source") if first else None,
            }
        )
        seen.add(src)
        infos = await _infos(cp, src)
        up = origin(infos)
    try:
        others = await cp.list_threads(limit=None)
    except CapabilityNotSupported:
        others = []
    for tid in others:
        if tid == thread_id:
            continue
        theirs = await _infos(cp, tid)
        got = origin(theirs)
        if got is None or got[0] != thread_id:
            continue
        first = theirs[-1]
        rows.append(
            {
                "relation": "fork" if got[2] == "parent" else "copy",
                "thread_id": tid,
                "checkpoint_id": first.checkpoint_id,
                "branch_point": got[1],
                "created_at": first.created_at,
                "source": first.metadata.get("source"),
            }
        )
    return rows
