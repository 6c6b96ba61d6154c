"""What tulip reads from a history store on a key-value server: its keys, as a projection.

A history store on Redis (or a SQL table) keeps the thread in the history model
(:mod:`tulip_nb.memory.history`); tulip's agents read tulip's key-value layout
(:mod:`._kv`): ``<tid>:<cid>`` records, ``<tid>:latest`` and the ``<tid>:_checkpoints`` index.
The projection is that layout, written in the same transaction as the history:

- the checkpoints projected are the thread's latest turn end (:func:`~._history_dir.is_turn_end`),
  or every checkpoint (``layout="tulip"``): :func:`wanted`;
- the index lists them **and tulip's own checkpoints** (index entries whose id is no row of the
  history: a tulip agent's turns), newest first; ``:latest`` is a copy of the newest entry's record:
  :func:`changes` decides what moves, :func:`ops` turns it into the writes of one transaction.

Pure functions of what the transaction read, so every store (Redis, SQL) projects alike.

>>> from datetime import UTC, datetime
>>> at = lambda h: datetime(2026, 1, 1, h, tzinfo=UTC)
>>> index = [IndexEntry("tulip-2", at(3)), IndexEntry("c1", at(1), {"source": "final"})]
>>> want = wanted([IndexEntry("c2", at(2), {"source": "final"}), IndexEntry("c1", at(1))], every=False)
>>> change = changes(index, ours={"c1", "c2"}, want=want)
>>> [e.checkpoint_id for e in change.index], change.write, change.remove
(['tulip-2', 'c2'], ['c2'], ['c1'])

Both writers use these three: the Redis store, and the SQL stores (which tell tulip's own
checkpoints from the projections by a mark in the record, :mod:`._history_kv`).

>>> [type(op).__name__ for op in ops("t", change, {"c2": b"{}"}, index)]  # :latest stays tulip-2
['Delete', 'Put', 'Put']
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import orjson

from tulip_nb.memory.backends._history_dir import is_turn_end
from tulip_nb.memory.backends._kv import (
    Copy,
    Delete,
    IndexEntry,
    Op,
    Put,
    encode_index,
    index_key,
    latest_key,
    record_key,
)

__all__ = ["Change", "changes", "foreign", "newest_first", "ops", "wanted"]


def newest_first(entries: Sequence[IndexEntry]) -> list[IndexEntry]:
    """``entries`` newest ``created_at`` first, ties by the greater id (the history's order)."""
    return sorted(entries, key=lambda e: (e.created_at, e.checkpoint_id), reverse=True)


def wanted(rows: Sequence[IndexEntry], *, every: bool) -> list[IndexEntry]:
    """The rows to project (any order in): all of them (``every``), else the newest turn end."""
    if every:
        return newest_first(rows)
    ends = [r for r in rows if is_turn_end(r.metadata)]
    return newest_first(ends)[:1]


def foreign(index: Sequence[IndexEntry], ours: Collection[str]) -> list[IndexEntry]:
    """tulip's own checkpoints: the index entries that name no row of the history (``ours``)."""
    return [e for e in index if e.checkpoint_id not in ours]


@dataclass(frozen=True)
class Change:
    """How the projection moves: the new index (newest first), the records to write and to remove."""

    index: list[IndexEntry]
    write: list[str]
    """Projected checkpoints whose record must be written (new, or their entry changed)."""
    remove: list[str]
    """Records of checkpoints projected before and not any more (or dropped from the thread)."""
    latest: str | None
    """The checkpoint ``:latest`` must copy (None: the thread has no index left)."""
    relatest: bool
    """Whether ``:latest`` must be written (its checkpoint or that checkpoint's record changed)."""


def changes(
    index: Sequence[IndexEntry],
    *,
    ours: Collection[str],
    want: Sequence[IndexEntry],
    drop_foreign: Collection[str] = (),
    foreign_metadata: Mapping[str, IndexEntry] | None = None,
    rewrite: Collection[str] = (),
    refresh_latest: bool = False,
) -> Change:
    """The projection after a write, from tulip's index as read in the write's transaction.

    Args:
        index: the index as read (newest first).
        ours: ids of the thread's history rows, before and after the write (so a row dropped by
            the write is never mistaken for one of tulip's).
        want: the projected rows after the write (:func:`wanted`).
        drop_foreign: tulip's checkpoints the write removes (a prune, a delete).
        foreign_metadata: tulip's checkpoints whose entry the write changes (a prune re-links them).
        rewrite: ids whose record must be written even when the index shows them as they are
            (a row saved again, a record found missing: a repair).
        refresh_latest: write ``:latest`` even when its checkpoint and record are unchanged (a
            writer that does not check it, and so always repairs it).
    """
    kept = [
        (foreign_metadata or {}).get(e.checkpoint_id, e)
        for e in foreign(index, ours)
        if e.checkpoint_id not in drop_foreign
    ]
    shown = {e.checkpoint_id: e for e in index if e.checkpoint_id in ours}
    want_ids = {e.checkpoint_id for e in want}
    write = [e.checkpoint_id for e in want if e.checkpoint_id in rewrite or shown.get(e.checkpoint_id) != e]
    remove = sorted({c for c in shown if c not in want_ids} | set(drop_foreign))
    new = newest_first([*kept, *want])
    latest = new[0].checkpoint_id if new else None
    before = index[0].checkpoint_id if index else None
    rewritten = set(write) | set(foreign_metadata or ())
    return Change(new, write, remove, latest, refresh_latest or latest != before or latest in rewritten)


def ops(thread_id: str, change: Change, records: Mapping[str, bytes], old_index: Sequence[IndexEntry]) -> list[Op]:
    """The writes of ``change``: ``records`` holds the bytes of every record in ``change.write``
    (and of tulip's re-linked ones), written before ``:latest`` copies the newest; each record's
    save metadata goes with it (SQL's ``metadata`` column)."""
    entries = {e.checkpoint_id: e for e in change.index}
    out: list[Op] = [Delete(record_key(thread_id, cid)) for cid in change.remove]
    for cid, data in records.items():
        entry = entries.get(cid)
        meta = orjson.dumps(entry.metadata, option=orjson.OPT_NON_STR_KEYS) if entry is not None else b"{}"
        out.append(Put(record_key(thread_id, cid), data, meta))
    if change.latest is None:
        out += [Delete(latest_key(thread_id)), Delete(index_key(thread_id))]
        return out
    if change.relatest:
        out.append(Copy(record_key(thread_id, change.latest), latest_key(thread_id)))
    if list(change.index) != list(old_index):
        out.append(Put(index_key(thread_id), encode_index(change.index)))
    return out
