"""What an export will write into its destination, estimated without writing anything.

An export copies every checkpoint of a thread. What that costs depends on how the destination
stores a checkpoint, not on the state's size alone:

- the **history layout** (decision 9: ``FileCheckpointer``, ``MemoryCheckpointer``, and every
  store built with ``layout="history"``) stores each message once, as an entry shared by every
  checkpoint that reaches it, and a small row per checkpoint (its other fields as a patch against
  the thread's previous row, :mod:`tulip_nb.memory.rest_delta`), plus tulip's envelope of the
  thread's latest state (the projection tulip reads);
- **tulip's layout** (``layout="tulip"``, and the key-value / S3 / PgCheckpointer stores written
  before the history model) holds a whole copy of the state for every checkpoint: a thread of
  ``n`` checkpoints of growing states costs about ``n²/2`` messages.

:class:`CostModel` is fed each checkpoint the export reads (oldest first, as it copies them) and
adds what the destination's layout stores for it: entry ids are computed as the history model
computes them (:func:`~tulip_nb.memory.history.entry_id`), so a message shared by two checkpoints
or two threads is counted once, and rows are encoded with the same
:func:`~tulip_nb.memory.rest_delta.encode` the stores use. Per-record overheads (ids, timestamps,
digests, index entries) are fixed constants; the estimate is meant to be within a small factor of
the bytes the destination ends up holding (``tests/unit/test_export_cost.py`` measures it on the
file store in both layouts; ``python -m bench --sections export400`` on every store), not exact.
It counts what stays, not the traffic: tulip's key-value layout also rewrites ``:latest`` (a whole
state) and its index at every checkpoint it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from tulip_nb.memory.history import entry_id, state_rest
from tulip_nb.memory.rest_delta import Parts, encode

if TYPE_CHECKING:
    from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint

__all__ = ["CostModel", "DestLayout", "dest_layout"]

ENTRY_OVERHEAD = 80
"""Bytes a stored entry costs beyond its message's JSON: its 32-byte id (and the id's index), a
parent link, a reference count, the record's framing."""
ROW_OVERHEAD = 320
"""Bytes a checkpoint row costs beyond its patch and save metadata: checkpoint, parent and base
ids, head, created_at, order key, digest and fields hash, its indexes (the thread id is added)."""
ENVELOPE_OVERHEAD = 200
"""tulip's envelope around a state: checkpoint and thread ids, created_at, the key names."""
INDEX_ENTRY_OVERHEAD = 110
"""One checkpoint's entry in tulip's key-value index (id, timestamp, key names) or S3 meta object."""


@dataclass(frozen=True)
class DestLayout:
    """How a destination stores the checkpoints it is given.

    ``history``: messages once + a row per checkpoint. ``envelopes``: tulip's whole envelope for
    ``"every"`` checkpoint, the thread's ``"latest"`` only, or ``"none"``. ``copies``: envelopes
    written per projected checkpoint beyond the first that stay stored (the key-value layout keeps
    ``:latest``, a second whole copy of the newest). ``index``: a per-checkpoint index entry or
    meta object (key-value, S3).
    """

    label: str
    history: bool
    envelopes: str
    latest_copies: int = 0
    index: bool = False


def _names(dest: BaseCheckpointer) -> set[str]:
    return {c.__name__ for c in type(dest).__mro__}


def dest_layout(dest: BaseCheckpointer) -> DestLayout:
    """The layout ``dest`` writes, read off its ``layout`` attribute and its class.

    A store that takes ``layout=`` (``"history"`` or ``"tulip"``) says which it uses; a store
    without one writes what it wrote before the history model: tulip's key-value records, S3
    objects or PgCheckpointer rows, one whole state per checkpoint.

    >>> from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
    >>> dest_layout(MemoryCheckpointer()).label
    'history (in memory)'
    >>> dest_layout(FileCheckpointer("/tmp/x", layout="tulip")).envelopes
    'every'
    """
    names = _names(dest)
    layout = getattr(dest, "layout", None)
    kv = "StorageBackendAdapter" in names
    s3 = "S3Backend" in names
    if "MemoryCheckpointer" in names:
        return DestLayout("history (in memory)", True, "none")
    if layout == "history":
        return DestLayout(
            'history (layout="history": messages once, a row per checkpoint, the latest envelope)',
            True,
            "latest",
            latest_copies=1 if kv else 0,
            index=kv,
        )
    if layout == "tulip":
        return DestLayout(
            'tulip (layout="tulip": the history, and a whole envelope per checkpoint)',
            True,
            "every",
            latest_copies=1 if kv else 0,
            index=kv or s3,
        )
    if kv:
        return DestLayout(
            "tulip key-value (a whole record per checkpoint, :latest, the index)", False, "every", 1, True
        )
    if s3:
        return DestLayout("tulip S3 (a whole envelope and a meta object per checkpoint)", False, "every", 0, True)
    if "HTTPCheckpointer" in names:
        return DestLayout("over HTTP (a whole envelope per checkpoint sent; the server decides)", False, "every")
    if "TulipPgCheckpointer" in names:
        return DestLayout("tulip PgCheckpointer (a whole state per row)", False, "every")
    return DestLayout(f"{type(dest).__name__} (layout unknown: a whole state per checkpoint assumed)", False, "every")


@dataclass
class _ThreadCost:
    messages: list[bytes] = field(default_factory=list)
    ids: list[bytes] = field(default_factory=list)
    base: Parts | None = None
    depth: int = 0
    chain: int = 0
    last_envelope: int = 0
    bytes: int = 0


class CostModel:
    """Bytes a destination of layout ``layout`` will hold for the checkpoints :meth:`add`-ed.

    One model per export: entries are shared across its threads (a message that two exported
    threads share is stored once in a history store). Feed each thread's checkpoints oldest first,
    then :meth:`finish` it.
    """

    def __init__(self, layout: DestLayout) -> None:
        self.layout = layout
        self._seen: set[bytes] = set()
        self._threads: dict[str, _ThreadCost] = {}

    def add(self, thread_id: str, ckpt: Checkpoint, state_bytes: int) -> int:
        """Count one checkpoint (``state_bytes``: its state's JSON size); the bytes it adds."""
        t = self._threads.setdefault(thread_id, _ThreadCost())
        meta = len(orjson.dumps(ckpt.metadata, option=orjson.OPT_NON_STR_KEYS))
        envelope = state_bytes + meta + ENVELOPE_OVERHEAD + len(thread_id)
        t.last_envelope = envelope
        added = 0
        if self.layout.history:
            added += self._entries(t, [m.json_bytes() for m in ckpt.state.messages])
            enc, t.base, _ = encode(state_rest(ckpt.state), t.base, t.depth, t.chain)
            t.depth, t.chain = enc.depth, enc.chain
            added += len(enc.blob) + meta + ROW_OVERHEAD + 3 * len(thread_id.encode())
        if self.layout.envelopes == "every":
            added += envelope
        if self.layout.index:
            added += meta + INDEX_ENTRY_OVERHEAD + len(thread_id.encode())
        t.bytes += added
        return added

    def finish(self, thread_id: str) -> int:
        """The thread's total, with what is written once per thread (the latest envelope, ``:latest``)."""
        t = self._threads.get(thread_id)
        if t is None:
            return 0
        if self.layout.envelopes == "latest":
            t.bytes += t.last_envelope
        t.bytes += self.layout.latest_copies * t.last_envelope
        t.last_envelope = 0
        t.messages, t.ids, t.base = [], [], None  # the thread is done: let its bytes go
        return t.bytes

    def _entries(self, t: _ThreadCost, data: list[bytes]) -> int:
        """New entries of a message list, against the previous checkpoint's list and every entry seen."""
        same = 0
        for a, b in zip(t.messages, data, strict=False):
            if a != b:
                break
            same += 1
        ids = t.ids[:same]
        added = 0
        parent = ids[-1] if ids else None
        for d in data[same:]:
            parent = entry_id(parent, d)
            ids.append(parent)
            if parent not in self._seen:
                self._seen.add(parent)
                added += len(d) + ENTRY_OVERHEAD
        t.messages, t.ids = data, ids
        return added
