"""What tulip reads of a history kept beside its key-value layout: the projection, as key writes.

A store that keeps the history model (:mod:`tulip_nb.memory.history`) beside tulip's key-value
layout (:mod:`._kv`: ``<tid>:<cid>`` records, ``<tid>:latest``, the ``<tid>:_checkpoints`` index)
shows tulip some of its checkpoints as tulip's own keys: the latest turn end, or every checkpoint.
Each record it writes carries :data:`~tulip_nb.memory.history.PROJECTION_KEY` naming its own
checkpoint id (tulip's state model ignores unknown keys, and a tulip save never carries it over).
A tulip agent that resumes the thread writes records of its own into the same index; those are
checkpoints of the thread too. This module is the pure part, shared by every such store: which
index entries are tulip's own, and which key writes make tulip's keys show a set of projected
checkpoints beside them.

>>> from datetime import UTC, datetime
>>> at = datetime(2026, 1, 1, tzinfo=UTC)
>>> ours, theirs = IndexEntry("c1", at), IndexEntry("t1", at.replace(hour=1))
>>> [e.checkpoint_id for e in tulips_own("t", [theirs, ours], rows={"c1"}, marks={"t:t1": None})]
['t1']
>>> ops = projection_ops("t", [theirs, ours], [theirs], [IndexEntry("c2", at.replace(hour=2))], {"c2": b"{}"})
>>> [type(op).__name__ for op in ops]
['Put', 'Delete', 'Copy', 'Put']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

import orjson

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
from tulip_nb.memory.history import PROJECTION_KEY

__all__ = ["mark_record", "newest_entries", "projection_ops", "tulips_own"]


def mark_record(record: bytes, checkpoint_id: str) -> bytes:
    """A flattened record (:func:`~._kv.encode_record`) marked as the projection of ``checkpoint_id``."""
    return record[:-1] + b',"' + PROJECTION_KEY.encode() + b'":' + orjson.dumps(checkpoint_id) + b"}"


def tulips_own(
    thread_id: str, entries: Sequence[IndexEntry], rows: Set[str], marks: Mapping[str, str | None]
) -> list[IndexEntry]:
    """The index entries a tulip agent wrote: not a row of the history, and a record that exists
    and is not marked as the projection of its own id (``marks``: record key -> its mark, for the
    records that exist). An entry whose record tulip already deleted is nobody's checkpoint."""
    out = []
    for e in entries:
        if e.checkpoint_id in rows:
            continue
        key = record_key(thread_id, e.checkpoint_id)
        if key in marks and marks[key] != e.checkpoint_id:
            out.append(e)
    return out


def newest_entries(entries: Sequence[IndexEntry]) -> list[IndexEntry]:
    """Newest first (``created_at``, ties by id), as the history orders its rows."""
    return sorted(entries, key=lambda e: (e.created_at, e.checkpoint_id), reverse=True)


def projection_ops(
    thread_id: str,
    current: Sequence[IndexEntry],
    tulip: Sequence[IndexEntry],
    want: Sequence[IndexEntry],
    records: Mapping[str, bytes],
    drop: Set[str] = frozenset(),
) -> list[Op]:
    """The key writes that make tulip's keys of ``thread_id`` show ``want`` beside ``tulip``'s own.

    ``current``: the index as it is; ``want``: the projected checkpoints (index entries);
    ``records``: checkpoint id -> the marked record to (re)write (the others of ``want`` are in
    place); ``drop``: ids of projections known to be gone that the index may no longer list.
    The index becomes ``want`` + ``tulip``, newest first; the records of projections no longer
    wanted are deleted; ``:latest`` is a copy of the newest record (removed with the index when
    nothing is left).
    """
    keep = {e.checkpoint_id for e in want} | {e.checkpoint_id for e in tulip}
    index = newest_entries([*want, *(e for e in tulip if e.checkpoint_id not in {w.checkpoint_id for w in want})])
    ops: list[Op] = []
    for e in want:
        if e.checkpoint_id in records:
            meta = orjson.dumps(e.metadata, option=orjson.OPT_NON_STR_KEYS)
            ops.append(Put(record_key(thread_id, e.checkpoint_id), records[e.checkpoint_id], meta))
    stale = ({e.checkpoint_id for e in current} | set(drop)) - keep
    ops.extend(Delete(record_key(thread_id, cid)) for cid in sorted(stale))
    if not index:
        ops += [Delete(latest_key(thread_id)), Delete(index_key(thread_id))]
        return ops
    ops.append(Copy(record_key(thread_id, index[0].checkpoint_id), latest_key(thread_id)))
    ops.append(Put(index_key(thread_id), encode_index(index)))
    return ops
