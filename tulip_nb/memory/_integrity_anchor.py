"""Anchors: what a thread looked like, kept outside its store, so a rollback of it can be seen.

A thread's hash chain shows edits, but not that its newest checkpoints were deleted: what remains
is a consistent, older thread. An :class:`Anchor` is a record taken when the thread was known good
(after a clean ``tulip-nb verify``, or save by save in an :class:`~tulip_nb.memory.audit.AuditTrail`):

- ``hash`` and ``checkpoint_id``: the newest signed save's ``tulip_nb_hash`` and id: the thread
  must still hold a checkpoint with that hash (or a prune record naming it);
- ``seq``: the thread's highest ``tulip_nb_seq``: the thread must still reach it;
- ``saves``: ``{checkpoint id: tulip_nb_hash}`` of every save it knows: a checkpoint still in the
  thread under one of those ids must still have that hash (an id whose content was replaced and
  re-signed is caught, which no chain can show).

It is JSON (``to_json`` / ``from_json``), one object marked ``"tulip_nb_anchor": 1``::

    {"tulip_nb_anchor": 1, "thread_id": "t", "checkpoint_id": "c5", "hash": "9f…", "seq": 5,
     "saves": {"c1": "…", "c5": "9f…"}}

The checks themselves are :func:`check_anchor`; :mod:`tulip_nb.memory.integrity` reports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import HASH_KEY, PRUNED_KEY, SEQ_KEY
from tulip_nb.memory.checkpointer import CheckpointInfo

__all__ = ["ANCHOR_MARK", "Anchor", "as_anchor", "check_anchor", "head_anchor"]

ANCHOR_MARK = "tulip_nb_anchor"
"""The key (value 1) that marks a JSON object as an anchor."""


def _seq(meta: Mapping[str, Any] | None) -> int | None:
    seq = meta.get(SEQ_KEY) if meta is not None else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


@dataclass(frozen=True)
class Anchor:
    """A thread's state kept outside its store; see the module docstring.

    >>> a = Anchor(thread_id="t", checkpoint_id="c2", hash="ab" * 32, seq=2, saves={"c2": "ab" * 32})
    >>> Anchor.from_json(a.to_json()) == a
    True
    """

    thread_id: str | None = None
    checkpoint_id: str | None = None
    hash: str | None = None
    seq: int | None = None
    saves: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.hash is not None and not isinstance(self.hash, str):
            raise UserError(f"an anchor's hash must be a str, got {type(self.hash).__name__}")
        if self.seq is not None and (not isinstance(self.seq, int) or isinstance(self.seq, bool) or self.seq < 1):
            raise UserError(f"an anchor's seq must be an int >= 1, got {self.seq!r}")
        if not isinstance(self.saves, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.saves.items()
        ):
            raise UserError("an anchor's saves must map checkpoint ids (str) to hashes (str)")
        if self.hash is None and self.seq is None and not self.saves:
            raise UserError("an anchor needs a hash, a seq or saves: this one holds nothing to check")

    def to_dict(self) -> dict[str, Any]:
        return {
            ANCHOR_MARK: 1,
            "thread_id": self.thread_id,
            "checkpoint_id": self.checkpoint_id,
            "hash": self.hash,
            "seq": self.seq,
            "saves": dict(self.saves),
        }

    def to_json(self) -> str:
        """One line of JSON (what ``tulip-nb verify --anchor`` prints)."""
        return orjson.dumps(self.to_dict(), option=orjson.OPT_SORT_KEYS).decode()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "anchor") -> Anchor:
        if not isinstance(data, Mapping) or data.get(ANCHOR_MARK) != 1:
            raise UserError(f"{where} is not a tulip_nb anchor (no {ANCHOR_MARK!r}: 1)")
        saves = data.get("saves") or {}
        return cls(data.get("thread_id"), data.get("checkpoint_id"), data.get("hash"), data.get("seq"), saves)

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str = "anchor") -> Anchor:
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            raise UserError(f"{where} is not JSON: {e}") from e
        return cls.from_dict(data, where=where)

    @classmethod
    def load(cls, path: str | Path) -> Anchor:
        """Read an anchor file (what ``tulip-nb verify --anchor > FILE`` wrote)."""
        try:
            text = Path(path).read_bytes()
        except OSError as e:
            raise UserError(f"anchor file cannot be read: {e.strerror or e}", path=str(path)) from e
        return cls.from_json(text, where=f"anchor file {str(path)!r}")

    def describe(self) -> str:
        parts = [f"{HASH_KEY} {self.hash}" if self.hash else "", f"{SEQ_KEY} {self.seq}" if self.seq else ""]
        if self.saves:
            parts.append(f"{len(self.saves)} saves")
        return ", ".join(p for p in parts if p)


def as_anchor(expect: str | int | Anchor) -> Anchor:
    """``verify_thread(expect=)`` as an :class:`Anchor`: a hash (str), a seq (int) or an anchor."""
    if isinstance(expect, Anchor):
        return expect
    if isinstance(expect, int) and not isinstance(expect, bool):
        return Anchor(seq=expect)
    if isinstance(expect, str):
        return Anchor(hash=expect)
    raise TypeError(
        f"expect must be a tulip_nb_hash (str), a tulip_nb_seq (int) or an Anchor, got {type(expect).__name__}"
    )


def head_anchor(
    thread_id: str, infos: Sequence[CheckpointInfo], metas: Mapping[str, Mapping[str, Any]]
) -> Anchor | None:
    """The anchor of a thread as read (``infos`` oldest first): None when no checkpoint is signed."""
    saves = {i.checkpoint_id: h for i in infos if isinstance(h := metas.get(i.checkpoint_id, {}).get(HASH_KEY), str)}
    if not saves:
        return None
    newest = next(i.checkpoint_id for i in reversed(infos) if i.checkpoint_id in saves)
    top = max((s for s in (_seq(metas.get(i.checkpoint_id)) for i in infos) if s is not None), default=None)
    return Anchor(thread_id, newest, saves[newest], top if top is not None and top >= 1 else None, saves)


def check_anchor(
    anchor: Anchor, infos: Sequence[CheckpointInfo], metas: Mapping[str, Mapping[str, Any]]
) -> tuple[list[str], dict[str, str]]:
    """(why the thread no longer reaches the anchor, ``{checkpoint id: why it is not the anchored one}``).

    Empty both when the thread reaches it. A checkpoint that is gone from the thread is not
    judged here (the chain, the seq and the anchored hash are); only one still present under an
    anchored id whose hash changed.
    """
    rolled: list[str] = []
    if anchor.hash is not None and not _holds(anchor.hash, metas):
        rolled.append(f"no checkpoint has the anchored hash {anchor.hash}")
    if anchor.seq is not None:
        top = max((s for s in (_seq(m) for m in metas.values()) if s is not None), default=None)
        if top is None:
            rolled.append(f"anchored {SEQ_KEY} {anchor.seq}, no checkpoint has one")
        elif top < anchor.seq:
            gone = anchor.seq - top
            rolled.append(f"newest {SEQ_KEY} is {top}, anchored {anchor.seq}: {gone} newest saves removed")
    replaced: dict[str, str] = {}
    for info in infos:
        cid = info.checkpoint_id
        want = anchor.saves.get(cid)
        meta = metas.get(cid)
        if want is None or meta is None or meta.get(HASH_KEY) == want:
            continue
        replaced[cid] = f"{HASH_KEY} is {meta.get(HASH_KEY)}, anchored {want}: replaced after it was anchored"
    return rolled, replaced


def _holds(digest: str, metas: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether a checkpoint has ``digest``, or a prune record names it (a prune cut it legitimately)."""
    for m in metas.values():
        if m.get(HASH_KEY) == digest:
            return True
        rec = m.get(PRUNED_KEY)
        if isinstance(rec, Mapping) and digest in (rec.get("parent_hash"), rec.get("base_hash")):
            return True
    return False
