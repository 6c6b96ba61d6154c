"""How two threads line up for a diff: by lineage, then turn by turn, then message by message.

A thread is a **preamble** (the messages before the first user message: the system prompt) and
its **turns** (:func:`tulip_nb.core.turns.split_turns`). :func:`align` pairs them in that order:

1. The preambles, position by position: a system prompt edited in place is one ``changed`` row.
2. The turns both threads hold by lineage (the ones wholly inside a fork's copied prefix), pair by
   pair: a copy is a copy, whatever its content became.
3. The remaining turns, as whole units (difflib over one key per turn), so a turn inserted or
   removed in one branch is one ``added`` / ``removed`` block, not a shift of everything after it.
   Turns in a replaced run are paired when their user messages are equal, else in order.
4. Inside each pair of turns, the messages (difflib over message keys; a replaced run pairs
   messages of the same role in order).

Two messages are the same when their keys are: :func:`~tulip_nb.core.canonical.message_key` with
``ids=False`` (canonical JSON, default fields dropped, tool-call ids left out) plus, for a tool
result, its place in its block and the position of the call it answers
(:func:`tulip_nb.core.calls.answered_by`) -- a call is its position (ARCHITECTURE decision 10), so
renumbered ids change nothing, while a result that now answers another call does. Two paired
turns whose messages are all the same but that ended differently (an ``error`` against an
``interrupted``) yield one ``changed`` row on the user message, saying so.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tulip_nb.core import Message
from tulip_nb.core.calls import CallRef, answered_by
from tulip_nb.core.canonical import message_key
from tulip_nb.core.turns import FAILED_OUTCOMES, Turn, split_turns

__all__ = ["Row", "Side", "align", "lineage_turns", "side"]


@dataclass(frozen=True, slots=True)
class Side:
    """One thread prepared for alignment: its messages, their keys, its turns."""

    messages: Sequence[Message]
    keys: list[bytes]
    refs: list[CallRef | None]
    turns: list[Turn]
    preamble: int  # messages before the first user message

    def turn_key(self, t: Turn) -> bytes:
        """One key for a whole turn: its messages' keys and, for a failed turn, how it failed."""
        h = hashlib.sha256()
        for k in self.keys[t.first : t.last + 1]:
            h.update(k)
        h.update(_outcome_tag(t).encode())
        return h.digest()


@dataclass(frozen=True, slots=True)
class Row:
    """One aligned position: ``kind`` is ``same``, ``changed``, ``removed`` (only in a) or
    ``added`` (only in b); ``note`` is a turn-outcome difference found on a user message."""

    kind: str
    index_a: int | None
    index_b: int | None
    note: str | None = None


def side(messages: Sequence[Message], metadata: Mapping[str, Any] | None) -> Side:
    """``messages`` (a thread's latest history) and its state ``metadata`` (for the turn log)."""
    refs = answered_by(messages)
    keys = []
    for t, (m, ref) in enumerate(zip(messages, refs, strict=True)):
        k = message_key(m, ids=False)
        if m.role == "tool":  # where it sits in its call's block, and the call it answers (or none)
            where = b"-" if ref is None else f"{t - ref[0]}:{ref[1]}".encode()
            k = hashlib.sha256(k + where).digest()
        keys.append(k)
    turns = split_turns(messages, metadata)
    preamble = turns[0].first if turns else len(messages)
    return Side(messages, keys, refs, turns, preamble)


def _outcome_tag(t: Turn) -> str:
    """How a turn failed (``""`` for an answered, tulip-written or unknown one): part of its key."""
    if t.outcome in FAILED_OUTCOMES:
        return f"{t.outcome}:{t.error_class or ''}"
    return ""


def _outcome_text(t: Turn) -> str:
    tag = t.outcome or "unknown"
    return f"{tag} ({t.error_class})" if t.error_class else tag


def lineage_turns(a: Side, b: Side, shared: int | None, a_is_source: bool = True) -> int:
    """How many leading turns lie wholly inside the ``shared`` messages a fork copied.

    ``shared`` counts in the source's indexes (``fork_message_index + 1``); the branch's are moved by
    the difference of the preambles (a sweep variant that inserted a system prompt).
    """
    if shared is None:
        return 0
    src, branch = (a, b) if a_is_source else (b, a)
    limit_src, limit_branch = shared, shared + branch.preamble - src.preamble
    n = 0
    for x, y in zip(src.turns, branch.turns, strict=False):
        if x.last >= limit_src or y.last >= limit_branch:
            break
        n += 1
    return n


def align(a: Side, b: Side, paired_turns: int = 0) -> tuple[list[Row], int]:
    """Rows for every message of ``a`` and ``b`` in order, and how many of them are the preamble's.

    ``paired_turns``: leading turns paired one to one because lineage says they are copies
    (:func:`lineage_turns`).
    """
    rows = _messages(a, b, range(a.preamble), range(b.preamble))
    n_pre = len(rows)
    k0 = min(paired_turns, len(a.turns), len(b.turns))
    for x, y in zip(a.turns[:k0], b.turns[:k0], strict=True):
        rows += _turn_pair(a, b, x, y)
    ta, tb = a.turns[k0:], b.turns[k0:]
    sm = difflib.SequenceMatcher(None, [a.turn_key(t) for t in ta], [b.turn_key(t) for t in tb], autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            for x, y in zip(ta[i1:i2], tb[j1:j2], strict=True):
                rows += [Row("same", i, j) for i, j in zip(_span(x), _span(y), strict=True)]
        else:
            rows += _replaced_turns(a, b, ta[i1:i2], tb[j1:j2])
    return rows, n_pre


def _span(t: Turn) -> range:
    return range(t.first, t.last + 1)


def _replaced_turns(a: Side, b: Side, ta: list[Turn], tb: list[Turn]) -> list[Row]:
    """Rows for a run of turns that differ: pair turns whose user messages are equal, the rest in
    order; a turn left without a partner is removed (a) or added (b) whole."""
    rows: list[Row] = []
    users = difflib.SequenceMatcher(None, [a.keys[t.first] for t in ta], [b.keys[t.first] for t in tb], autojunk=False)
    for _, i1, i2, j1, j2 in users.get_opcodes():
        xs, ys = ta[i1:i2], tb[j1:j2]
        for x, y in zip(xs, ys, strict=False):
            rows += _turn_pair(a, b, x, y)
        for x in xs[len(ys) :]:
            rows += [Row("removed", i, None) for i in _span(x)]
        for y in ys[len(xs) :]:
            rows += [Row("added", None, j) for j in _span(y)]
    return rows


def _turn_pair(a: Side, b: Side, x: Turn, y: Turn) -> list[Row]:
    rows = _messages(a, b, _span(x), _span(y))
    if _outcome_tag(x) != _outcome_tag(y):
        note = f"turn outcome {_outcome_text(x)} -> {_outcome_text(y)}"
        k = next((n for n, r in enumerate(rows) if r.index_a == x.first), None)
        if k is not None and rows[k].index_b == y.first:
            rows[k] = Row("changed", x.first, y.first, note)
    return rows


def _messages(a: Side, b: Side, ra: range, rb: range) -> list[Row]:
    """Rows for messages ``ra`` of a against ``rb`` of b (difflib over their keys)."""
    rows: list[Row] = []
    sm = difflib.SequenceMatcher(None, a.keys[ra.start : ra.stop], b.keys[rb.start : rb.stop], autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        i, j, ie, je = ra.start + i1, rb.start + j1, ra.start + i2, rb.start + j2
        if tag == "equal":
            rows += [Row("same", i + k, j + k) for k in range(ie - i)]
            continue
        while i < ie and j < je and a.messages[i].role == b.messages[j].role:
            rows.append(Row("changed", i, j))
            i, j = i + 1, j + 1
        rows += [Row("removed", x, None) for x in range(i, ie)]
        rows += [Row("added", None, y) for y in range(j, je)]
    return rows
