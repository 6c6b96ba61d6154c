"""The shape of a message history, and the plans managers make of it.

Managers never cut a history at an arbitrary message: an assistant message that calls tools and
the tool results answering it form one **unit** (cutting inside it would leave a call without its
result or a result without its call, which the API rejects). A **turn** starts at each user message
and runs to the next one.

A :class:`Plan` says what the model sees of the first ``n`` messages of a history: each index is
kept verbatim, *pruned* (a tool result whose content is replaced by a short stub), *summarised*
(replaced, as a block, by one summary message) or dropped. Messages after ``n`` (appended since the
plan was made) are shown verbatim. :func:`render` turns a plan and a history into the view; the same
function rebuilds a past view from a saved thread (see :mod:`tulip_nb.memory._events`).
"""

from __future__ import annotations

import weakref
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tulip_nb.core.messages import Message

__all__ = [
    "STUB_VERSION",
    "Plan",
    "Ranges",
    "fingerprint",
    "render",
    "stub",
    "summary_message",
    "to_ranges",
    "turn_starts",
    "units",
]

Ranges = list[tuple[int, int]]
"""Sorted, disjoint, half-open index ranges ``[(start, end), ...]``."""

STUB_VERSION = 1
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"


# -- structure -----------------------------------------------------------------------------------


def units(messages: Sequence[Message], start: int = 0) -> Ranges:
    """Split ``messages[start:]`` into units that may be kept or cut as a whole.

    A unit is one message, or an assistant message with tool calls together with everything up to
    the last tool result answering one of its calls. O(n).
    """
    last_answer: dict[str, int] = {}
    for i in range(start, len(messages)):
        m = messages[i]
        if m.role == "tool" and m.tool_call_id:
            last_answer[m.tool_call_id] = i
    out: Ranges = []
    i, n = start, len(messages)
    while i < n:
        end, j = i + 1, i
        while j < end:
            for call in messages[j].tool_calls:
                k = last_answer.get(call.id)
                if k is not None and k >= end:
                    end = k + 1
            j += 1
        out.append((i, end))
        i = end
    return out


def turn_starts(messages: Sequence[Message], unit_list: Ranges) -> list[int]:
    """Indices of the units that open a turn (those starting with a user message)."""
    return [k for k, (s, _) in enumerate(unit_list) if messages[s].role == "user"]


def to_ranges(indices: Iterable[int]) -> Ranges:
    """Compress sorted indices into ranges: ``[1, 2, 3, 7]`` -> ``[(1, 4), (7, 8)]``."""
    out: Ranges = []
    for i in indices:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def fingerprint(messages: Sequence[Message], n: int) -> int:
    """A stable check that ``messages`` still has the history a plan of length ``n`` was made on."""
    return zlib.crc32(messages[n - 1].json_bytes()) if n > 0 else 0


# -- synthetic messages ----------------------------------------------------------------------------

_stubs: dict[int, tuple[weakref.ref[Message], Message]] = {}


def stub(msg: Message) -> Message:
    """``msg`` with its (tool output) content cleared; deterministic, so views can be rebuilt.

    Marked ``metadata["tulip_compaction_cleared"] = True`` as tulip does. Cached per message.
    """
    hit = _stubs.get(id(msg))
    if hit is not None and hit[0]() is msg:
        return hit[1]
    size = len(msg.content or "")
    new = msg.model_copy(
        update={
            "content": f"[tool output cleared to save context: {size} characters]",
            "metadata": {**msg.metadata, "tulip_compaction_cleared": True},
        }
    )
    ident = id(msg)

    def _forget(ref: weakref.ref[Message], ident: int = ident) -> None:
        entry = _stubs.get(ident)
        if entry is not None and entry[0] is ref:
            _stubs.pop(ident, None)

    _stubs[ident] = (weakref.ref(msg, _forget), new)
    return new


def summary_message(summary: str) -> Message:
    """The user message that stands for a summarised block in the model's view."""
    return Message(role="user", content=SUMMARY_PREFIX + summary, metadata={"tulip_compaction_summary": True})


# -- plans -----------------------------------------------------------------------------------------


@dataclass
class Plan:
    """What the model sees of ``messages[:n]`` (see the module docstring)."""

    n: int
    fp: int
    kept: Ranges
    pruned: Ranges = field(default_factory=list)
    summarized: Ranges = field(default_factory=list)
    summary: str | None = None
    summary_at: int = 0
    _summary_msg: Message | None = field(default=None, repr=False, compare=False)

    def dropped(self) -> Ranges:
        shown = sorted(self.kept + self.pruned + self.summarized)
        out: Ranges = []
        pos = 0
        for s, e in shown:
            if s > pos:
                out.append((pos, s))
            pos = max(pos, e)
        if pos < self.n:
            out.append((pos, self.n))
        return out

    def summary_msg(self) -> Message | None:
        if self.summary is None:
            return None
        if self._summary_msg is None:
            self._summary_msg = summary_message(self.summary)
        return self._summary_msg

    def matches(self, messages: Sequence[Message]) -> bool:
        """Whether ``messages`` extends the history this plan was made on."""
        return len(messages) >= self.n and fingerprint(messages, self.n) == self.fp

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "fp": self.fp,
            "kept": [list(r) for r in self.kept],
            "pruned": [list(r) for r in self.pruned],
            "summarized": [list(r) for r in self.summarized],
            "summary": self.summary,
            "summary_at": self.summary_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        def rng(key: str) -> Ranges:
            return [(int(a), int(b)) for a, b in data.get(key) or []]

        return cls(
            n=int(data["n"]),
            fp=int(data["fp"]),
            kept=rng("kept"),
            pruned=rng("pruned"),
            summarized=rng("summarized"),
            summary=data.get("summary"),
            summary_at=int(data.get("summary_at", 0)),
        )


def render(plan: Plan | None, messages: Sequence[Message]) -> list[Message]:
    """The model's view of ``messages`` under ``plan`` (``None``: everything, unchanged)."""
    if plan is None:
        return list(messages)
    segments: list[tuple[int, int, str]] = [(s, e, "k") for s, e in plan.kept]
    segments += [(s, e, "p") for s, e in plan.pruned]
    segments.sort()
    out: list[Message] = []
    summary = plan.summary_msg()
    for s, e, kind in segments:
        if summary is not None and plan.summary_at <= s:
            out.append(summary)
            summary = None
        if kind == "k":
            out.extend(messages[s:e])
        else:
            out.extend(stub(m) if m.role == "tool" else m for m in messages[s:e])
    if summary is not None:
        out.append(summary)
    out.extend(messages[plan.n :])
    return out
