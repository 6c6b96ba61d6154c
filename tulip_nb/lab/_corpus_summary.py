"""The corpus summary from headers: one row per thread, from its newest header's counters.

Every agent save writes the thread's counters into its save metadata
(:mod:`tulip_nb.memory.counts`), so a summary row is the thread's newest header's counters plus
its span (:meth:`~tulip_nb.memory.checkpointer.BaseCheckpointer.thread_span`: how many
checkpoints, the oldest header for ``forked_from`` and ``first_update``): no state is loaded, and
with a backend that answers the span from an index the cost does not grow with the thread.

A thread whose newest header has no counters (written by tulip or an older tulip_nb, or a branch's
first checkpoint whose source has none) falls back to its states (``fallback="states"``, the
default: :func:`~tulip_nb.lab._corpus_rows.summary_row`, exact but one state per run) or gets NA
in every counter column (``fallback="na"``). The ``read`` column says which: ``"headers"``,
``"states"`` or ``"partial"`` (NA counters). The state columns (``max_call_tokens``,
``over_window_calls``) rebuild every call's view, so they are read only when asked for (then the
whole row is read from states: ``"states"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tulip_nb.core.errors import CheckpointNotFound, UserError
from tulip_nb.core.keys import FORKED_FROM_KEY
from tulip_nb.lab._corpus_rows import STATE_COLUMNS, end_chunk, summary_row
from tulip_nb.lab._executors import error_row
from tulip_nb.lab._headers import marked_count
from tulip_nb.lab._stores import open_checkpointer
from tulip_nb.memory.counts import LINEAGE_COUNTS, STATE_COUNTS, read_counts

if TYPE_CHECKING:
    from tulip_nb.memory.checkpointer import BaseCheckpointer, ThreadSpan

__all__ = ["FALLBACKS", "header_row", "summary_task"]

FALLBACKS = ("states", "na")
"""What a summary does for a thread without counters: read its states, or give NA counters."""


def _na() -> Any:
    import pandas as pd

    return pd.NA


def _listing_columns(thread_id: str, span: ThreadSpan) -> dict[str, Any]:
    forked = span.first.metadata.get(FORKED_FROM_KEY)
    return {
        "thread_id": thread_id,
        "forked_from": forked if isinstance(forked, str) else None,
        "first_update": span.first.created_at,
        "last_update": span.latest.created_at,
        "checkpoints": span.checkpoints,
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
    span = await cp.thread_span(thread_id)
    if span is None:
        raise CheckpointNotFound("thread has no checkpoint (deleted since it was listed?)", thread_id=thread_id)
    counts = read_counts(span.latest.metadata)
    if counts is None or any(counts[k] is None for k in LINEAGE_COUNTS) or state_columns:
        if fallback == "states" or state_columns:
            return await summary_row(cp, thread_id, context_window=context_window, state_columns=state_columns)
        na = _na()
        row = {k: na for k in (*STATE_COUNTS, *LINEAGE_COUNTS, *STATE_COLUMNS)}
        if counts is not None:  # the state counters are there; the lineage ones are unknown
            row.update({k: counts[k] for k in STATE_COUNTS})
        row.update(_listing_columns(thread_id, span), read="partial")
        return row
    na = _na()
    # every save of the lineage is tulip_nb's: the counters say so for the saves before the newest
    native = bool(counts["native"]) and marked_count(span.latest.metadata) is not None
    row = {k: counts[k] for k in STATE_COUNTS}
    if not (native or counts["has_events"]):
        row["compactions"] = na  # tulip records no events: what its manager did is unknown
    for k in LINEAGE_COUNTS:
        row[k] = counts[k] if native else na
    row.update({k: na for k in STATE_COLUMNS})
    row.update(_listing_columns(thread_id, span), read="headers")
    return row


async def summary_task(source: Any, chunk: list[str], payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows of ``chunk`` (a :func:`~tulip_nb.lab._executors.map_threads` task).

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
