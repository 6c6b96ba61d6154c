"""The corpus summary from headers: one row per thread, from its newest header's counters.

Every agent save writes the thread's counters into its save metadata
(:mod:`tulip_nb.memory.counts`), so a summary row is the thread's header listing (checkpoints,
first and last update, forked_from, whether every save is tulip_nb's) plus its newest header's
counters: no state is loaded, and the cost does not grow with the thread's turns.

A thread whose newest header has no counters (written by tulip or an older tulip_nb, or a branch's
first checkpoint whose source has none) falls back to its states (``fallback="states"``, the
default: :func:`~tulip_nb.lab._corpus_rows.summary_row`, exact but one state per run) or gets NA
in every counter column (``fallback="na"``). The ``read`` column says which: ``"headers"``,
``"states"`` or ``"partial"`` (NA counters). The state columns (``max_call_tokens``,
``over_window_calls``) rebuild every call's view, so they are read only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tulip_nb.core.errors import CheckpointNotFound, UserError
from tulip_nb.core.keys import FORKED_FROM_KEY
from tulip_nb.lab._corpus_rows import STATE_COLUMNS, end_chunk, segments, summary_row
from tulip_nb.lab._headers import marked_count
from tulip_nb.lab.executors import error_row
from tulip_nb.lab.export import open_checkpointer
from tulip_nb.memory.counts import LINEAGE_COUNTS, STATE_COUNTS, read_counts

if TYPE_CHECKING:
    from tulip_nb.memory.checkpointer import BaseCheckpointer, CheckpointInfo

__all__ = ["FALLBACKS", "header_row", "summary_task"]

FALLBACKS = ("states", "na")
"""What a summary does for a thread without counters: read its states, or give NA counters."""


def _na() -> Any:
    import pandas as pd

    return pd.NA


def _listing_columns(thread_id: str, infos: list[CheckpointInfo]) -> dict[str, Any]:
    forked = infos[-1].metadata.get(FORKED_FROM_KEY)
    return {
        "thread_id": thread_id,
        "forked_from": forked if isinstance(forked, str) else None,
        "first_update": infos[-1].created_at,
        "last_update": infos[0].created_at,
        "checkpoints": len(infos),
        "error": None,
    }


async def header_row(
    cp: BaseCheckpointer,
    thread_id: str,
    *,
    context_window: int | str | None = None,
    state_columns: bool = False,
    fallback: str = "states",
) -> dict[str, Any]:
    """One summary row (module docstring); raises when the thread cannot be read."""
    infos = await cp.list_checkpoint_infos(thread_id, limit=None)
    if not infos:
        raise CheckpointNotFound("thread has no checkpoint (deleted since it was listed?)", thread_id=thread_id)
    counts = read_counts(infos[0].metadata)
    if counts is None or any(counts[k] is None for k in LINEAGE_COUNTS) or state_columns:
        if fallback == "states" or state_columns:
            row = await summary_row(cp, thread_id, context_window=context_window, state_columns=state_columns)
            if counts is not None and all(counts[k] is not None for k in LINEAGE_COUNTS):
                row["read"] = "headers+states"  # the counters were there: only the state columns were read
            return row
        na = _na()
        row = {k: na for k in (*STATE_COUNTS, *LINEAGE_COUNTS, *STATE_COLUMNS)}
        if counts is not None:  # the state counters are there; the lineage ones are unknown
            row.update({k: counts[k] for k in STATE_COUNTS})
        row.update(_listing_columns(thread_id, infos), read="partial")
        return row
    na = _na()
    segs = await segments(cp, thread_id, infos)
    native = segs is not None and all(marked_count(i.metadata) is not None for _, s in segs for i in s)
    row = {k: counts[k] for k in STATE_COUNTS}
    if not (native or counts["has_events"]):
        row["compactions"] = na  # tulip records no events: what its manager did is unknown
    for k in LINEAGE_COUNTS:
        row[k] = counts[k] if native else na
    row.update({k: na for k in STATE_COLUMNS})
    row.update(_listing_columns(thread_id, infos), read="headers")
    return row


async def summary_task(source: Any, chunk: list[str], payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows of ``chunk`` (a :func:`~tulip_nb.lab.executors.map_threads` task).

    ``payload``: ``context_window``, ``state_columns`` (bool), ``fallback`` (:data:`FALLBACKS`)."""
    fallback = payload.get("fallback", "states")
    if fallback not in FALLBACKS:
        raise UserError(f"summary: fallback must be one of {FALLBACKS}, got {fallback!r}")
    cp, opened = open_checkpointer(source)
    rows = []
    try:
        for tid in chunk:
            try:
                row = await header_row(
                    cp,
                    tid,
                    context_window=payload.get("context_window"),
                    state_columns=bool(payload.get("state_columns")),
                    fallback=fallback,
                )
                rows.append(row)
            except Exception as e:
                rows.append(error_row(tid, e))
    finally:
        await end_chunk(cp, opened)
    return rows
