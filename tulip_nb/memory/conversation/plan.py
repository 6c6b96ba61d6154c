"""The shape of a message history, and the plans managers make of it.

Managers never cut a history at an arbitrary message: an assistant message that calls tools and
the tool results answering it form one **unit** (cutting inside it would leave a call without its
result or a result without its call, which the API rejects). A **turn** starts at each user message
and runs to the next one.

A :class:`Plan` says what the model sees of the first ``n`` messages of a history: each index is
kept verbatim, *pruned* (a tool result whose content is replaced by a short stub), *summarised*
(replaced, as a block, by one summary message) or dropped. Messages after ``n`` (appended since the
plan was made) are shown verbatim. :func:`render` turns a plan and a history into the view; the same
function rebuilds a past view from a saved thread (see :mod:`tulip_nb.memory.conversation.events`).
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tulip_nb.core import IdentityCache, Message
from tulip_nb.core.calls import block_end
from tulip_nb.core.keys import CLEARED_KEY, SUMMARY_KEY

if TYPE_CHECKING:
    from tulip_nb.tokens import TokenCounter

__all__ = [
    "STUB_VERSION",
    "known_counts",
    "Ranges",
    "fingerprint",
    "render",
    "stub",
    "summary_message",
    "to_ranges",
    "units",
]

Ranges = list[tuple[int, int]]
"""Sorted, disjoint, half-open index ranges ``[(start, end), ...]``."""

STUB_VERSION = 1
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"


# -- structure -----------------------------------------------------------------------------------


def units(messages: Sequence[Message], start: int = 0) -> Ranges:
    """Split ``messages[start:]`` into units that may be kept or cut as a whole.

    A unit is one message, or an assistant message with tool calls together with the tool results
    directly after it (its block: calls and results pair by position, never by id — see
    :mod:`tulip_nb.core.calls`). O(n).
    """
    out: Ranges = []
    i, n = start, len(messages)
    while i < n:
        m = messages[i]
        end = block_end(messages, i) if m.role == "assistant" and m.tool_calls else i + 1
        out.append((i, end))
        i = end
    return out


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
    """A stable check that ``messages`` still has the history a plan of length ``n`` was made on.

    A cache check, not an equality of messages (that is :mod:`tulip_nb.core.canonical`): the crc32
    of the last planned message's bytes as written. Plans are saved with the thread carrying it, so
    its value must not change; a copy whose store respelled that message only costs a re-plan.
    """
    return zlib.crc32(messages[n - 1].json_bytes()) if n > 0 else 0


# -- the incremental index -------------------------------------------------------------------------


class HistoryIndex:
    """The structure of one growing history, kept up to date one call at a time.

    A manager sees the same thread again before every model call, a few messages longer each time.
    Recomputing its units, turns and token totals from scratch costs O(n) per call (O(n²) over a
    conversation); this index does the work once per message instead. :meth:`update` takes the
    history of the current call: when it extends the one seen before (the same messages: identical
    objects, or equal ones), only the new messages are processed, otherwise everything is rebuilt.

    After ``update(messages, counter)``:

    - ``counts[i]``: tokens of message ``i``; ``prefix[j]``: tokens of ``messages[:j]``;
    - ``units`` / ``starts``: :func:`units` of the body (after a leading system prompt);
    - ``turns``: the indices of those units that open a turn (start with a user message);
    - ``calls_before(j)``: assistant messages in ``messages[:j]``; ``turn_of(u)``: the user message
      opening unit ``u``'s turn;
    - ``stub_prefix()``: like ``prefix`` with every tool result counted as its :func:`stub`.

    >>> from tulip_nb.tokens import FunctionCounter
    >>> idx, chars = HistoryIndex(), FunctionCounter(lambda m: len(m.content or ""))
    >>> idx.update([Message.system("s"), Message.user("hi"), Message.assistant("yo")], chars)
    >>> idx.units, idx.turns, idx.prefix[-1]
    ([(1, 2), (2, 3)], [0], 5)
    """

    def __init__(self) -> None:
        self._clear(None)

    def _clear(self, counter: TokenCounter | None) -> None:
        self.counter: TokenCounter | None = counter
        self.messages: list[Message] = []
        self.counts: list[int] = []
        self.prefix: list[int] = [0]
        self.body = 0
        self.units: Ranges = []
        self.starts: list[int] = []
        self.turns: list[int] = []
        self._assistant: list[int] = [0]
        self._stub: list[int] = [0]
        self._saved: dict[str, Any] | None = None
        self._crc = (0, 0)  # crc32 of the JSON bytes of the first k messages: (k, crc), extended lazily

    def __len__(self) -> int:
        return len(self.messages)

    def update(self, messages: Sequence[Message], counter: TokenCounter) -> None:
        """Bring the index up to ``messages`` (an extension of the last history is incremental)."""
        old = self.messages
        n0 = len(old)
        # List equality compares identity first, in C; equal-but-distinct messages count the same.
        if counter is not self.counter or len(messages) < n0 or old != messages[:n0]:
            self._clear(counter)
            old, n0 = self.messages, 0
        n = len(messages)
        if n == n0:
            return
        if n0 == 0:
            self.body = 1 if messages[0].role == "system" else 0
        new = messages[n0:]
        old.extend(new)
        counts = counter.message_counts(new)
        self.counts.extend(counts)
        prefix, acc = self.prefix, self.prefix[-1]
        asst, a = self._assistant, self._assistant[-1]
        for m, c in zip(new, counts, strict=True):
            acc += c
            prefix.append(acc)
            if m.role == "assistant":
                a += 1
            asst.append(a)
        # New tool results can only extend the last unit (a block is the run of results right after
        # its call): re-split from the start of that unit.
        k = len(self.starts) - 1
        restart = self.starts[k] if k >= 0 else self.body
        keep = max(k, 0)
        del self.units[keep:]
        del self.starts[keep:]
        del self.turns[bisect_left(self.turns, keep) :]
        for s, e in units(old, max(restart, self.body)):
            if old[s].role == "user":
                self.turns.append(len(self.units))
            self.units.append((s, e))
            self.starts.append(s)

    def calls_before(self, j: int) -> int:
        """Assistant messages (model calls made) in ``messages[:j]``: an O(1)
        :func:`~tulip_nb.core.calls.calls_before`, from the prefix counts kept by :meth:`update`."""
        return self._assistant[j]

    def unit_at(self, s: int) -> int:
        """Index of the first unit starting at or after message ``s`` (``len(units)`` if none)."""
        return bisect_left(self.starts, s)

    def turn_of(self, u: int) -> int | None:
        """Index of the user message opening the turn of unit ``u`` (``None``: before the first turn)."""
        t = bisect_right(self.turns, u) - 1
        return self.units[self.turns[t]][0] if t >= 0 else None

    def stub_prefix(self) -> list[int]:
        """Prefix sums of the tokens each message costs with tool output stubbed (lazy, incremental)."""
        out, msgs = self._stub, self.messages
        if len(out) <= len(msgs):
            assert self.counter is not None
            count = self.counter.count_message
            acc = out[-1]
            for i in range(len(out) - 1, len(msgs)):
                m = msgs[i]
                acc += count(stub(m)) if m.role == "tool" else self.counts[i]
                out.append(acc)
        return out

    def span(self, s: int, e: int) -> int:
        """Tokens of ``messages[s:e]``."""
        return self.prefix[e] - self.prefix[s]

    def saved_counts(self) -> dict[str, Any] | None:
        """The per-message counts as saved with the thread (``None`` unless they are exact).

        ``{"encoding": "o200k_base", "n": 118, "crc": ..., "counts": [...]}``: the counts of the
        first ``n`` messages, whose JSON bytes have crc32 ``crc``. Whoever opens the thread later
        (a notebook, :func:`tulip_nb.lab.open_thread`) checks the crc and reuses the counts instead
        of encoding the whole thread again (see :func:`known_counts`).
        """
        counter = self.counter
        if counter is None or not counter.exact or not self.counts:
            return None
        saved = self._saved
        if saved is None or saved["n"] != len(self.counts):
            k, crc = self._crc
            for m in self.messages[k:]:
                crc = zlib.crc32(m.json_bytes(), crc)
            self._crc = (len(self.messages), crc)
            # a new dict and list per change (never mutated afterwards: a saved state may hold them)
            saved = {"encoding": counter.encoding, "n": len(self.counts), "crc": crc, "counts": list(self.counts)}
            self._saved = saved
        return saved


def known_counts(saved: Any, messages: Sequence[Message], counter: TokenCounter) -> list[int] | None:
    """Counts of ``messages[:n]`` from :meth:`HistoryIndex.saved_counts`, if they still hold.

    They hold when they were made in ``counter``'s encoding by an exact counter and the first
    ``n`` messages have the same JSON bytes (crc32) as when they were counted; otherwise ``None``.
    """
    if not isinstance(saved, dict) or not counter.exact or saved.get("encoding") != counter.encoding:
        return None
    counts, n = saved.get("counts"), saved.get("n")
    if not isinstance(counts, list) or not isinstance(n, int) or len(counts) != n or n > len(messages):
        return None
    crc = 0
    for i in range(n):
        crc = zlib.crc32(messages[i].json_bytes(), crc)
    if crc != saved.get("crc") or not all(isinstance(c, int) for c in counts):
        return None
    return counts


# -- synthetic messages ----------------------------------------------------------------------------

_stubs: IdentityCache[Message, Message] = IdentityCache()


def _make_stub(msg: Message) -> Message:
    size = len(msg.content or "")
    return msg.model_copy(
        update={
            "content": f"[tool output cleared to save context: {size} characters]",
            "metadata": {**msg.metadata, CLEARED_KEY: True},
        }
    )


def stub(msg: Message) -> Message:
    """``msg`` with its (tool output) content cleared; deterministic, so views can be rebuilt.

    Marked ``metadata["tulip_compaction_cleared"] = True`` as tulip does. Cached per message.
    """
    return _stubs.get_or_compute(msg, _make_stub)


def summary_message(summary: str) -> Message:
    """The user message that stands for a summarised block in the model's view."""
    return Message(role="user", content=SUMMARY_PREFIX + summary, metadata={SUMMARY_KEY: True})


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
