"""The cut engine: where a conversation manager may cut a history, and how much it keeps to fit.

Both compacting managers configure this one engine; neither re-derives its rules:

- :class:`~tulip_nb.memory.conversation.compactor.LLMCompactor`: a protected head
  (``head_turns``), stale tool output stubbed (``tool_output_ttl_turns``), a tail chosen by token
  budget (:meth:`CutEngine.choose_tail`), the middle summarised or dropped, then :meth:`CutEngine.fit`;
- :class:`~tulip_nb.memory.conversation.summarizing.SummarizingConversationManager`: no head but the
  system prompt, nothing stubbed; its summaries end on :meth:`CutEngine.boundaries` (the recent
  messages stay), at a ratio of the view or at the nearest end whose view fits
  (:meth:`CutEngine.first_fit`).

The rules they share: a history is cut only between units (:mod:`tulip_nb.memory.conversation.plan`:
a call is never shown without its results nor a result without its call); a view that starts
inside a turn shows that turn's user message first (:meth:`CutEngine.pin_for`, counted in every
budget); a summary covers a block minus that user message (:meth:`CutEngine.summarised`); a view's
tokens are its fixed part plus the pinned user message plus what it keeps from the cut to the end
(:meth:`CutEngine.view_tokens`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tulip_nb.core import Message
from tulip_nb.memory.conversation.plan import HistoryIndex, Plan, Ranges, fingerprint, summary_message, to_ranges

if TYPE_CHECKING:
    from tulip_nb.tokens import TokenCounter

__all__ = ["CutEngine", "merge", "subtract"]


class CutEngine:
    """One cut of a history: its structure, what it keeps, and the fit (module docstring).

    Positions are message indices; ``u`` names a unit (an index into ``idx.units``). The view is
    ``[system, head, summary?, pin?, tail]``: the head is ``messages[:head_end]``; the tail is the
    units from ``tail`` to the newest; ``pin`` is the user message of the tail's first turn when the
    tail starts inside that turn (a kept turn keeps its user message).
    """

    def __init__(
        self, messages: Sequence[Message], idx: HistoryIndex, fixed: int, *, head_end: int, stale_end: int = 0
    ) -> None:
        """``fixed``: the tokens every view costs (tool schemas, reply priming); ``head_end``: the
        view always starts with ``messages[:head_end]``; tool output before ``stale_end`` is stubbed
        in what is kept after the head."""
        self.messages, self.idx, self.fixed = messages, idx, fixed
        self.n = len(messages)
        self.last = len(idx.units) - 1
        self.head_end = head_end
        self.stale_end = stale_end
        self._stubbed: list[int] | None = None
        # An earlier summary that still holds: it covers ``prev_summarized`` (inside [head_end, floor)).
        self.floor = self.head_end
        self.prev_summarized: Ranges = []
        self.prev_summary: str | None = None
        self.summarized: Ranges = []
        self.summary: str | None = None
        self.tail = self.last
        self.pin = self.pin_for(self.last) if idx.units else None

    @classmethod
    def with_head(
        cls, messages: Sequence[Message], idx: HistoryIndex, fixed: int, head_turns: int, ttl: int
    ) -> CutEngine:
        """The engine of a history with units, protecting the first ``head_turns`` turns and
        stubbing tool output of turns older than the last ``ttl`` (0: none)."""
        units, turns = idx.units, idx.turns
        newest = units[-1][0]
        # The head: the first ``head_turns`` turns (and any prefix before the first user message),
        # never reaching into the current turn, which follows its own rule (user message + newest
        # unit kept; older rounds may go).
        head = units[turns[head_turns]][0] if len(turns) > head_turns else len(messages)
        head_end = min(head, units[turns[-1]][0] if turns else newest)
        # Tool output in turns older than the last ``ttl`` turns is stale (stubbed in the tail).
        stale_end = units[turns[-ttl]][0] if ttl and len(turns) > ttl else 0
        return cls(messages, idx, fixed, head_end=head_end, stale_end=stale_end)

    # -- costs ---------------------------------------------------------------------------------
    def stubbed(self) -> list[int]:
        if self._stubbed is None:
            self._stubbed = self.idx.stub_prefix()
        return self._stubbed

    def cost(self, s: int, e: int) -> int:
        """Tokens of ``messages[s:e]`` as the tail shows them (stale tool output stubbed)."""
        prefix = self.idx.prefix
        if s >= self.stale_end:
            return prefix[e] - prefix[s]
        m = min(self.stale_end, e)
        stubbed = self.stubbed()
        return stubbed[m] - stubbed[s] + prefix[e] - prefix[m]

    def unit_cost(self, u: int) -> int:
        s, e = self.idx.units[u]
        return self.cost(s, e)

    def pin_for(self, u: int) -> int | None:
        """The user message shown before a view starting at unit ``u`` (``None``: none needed)."""
        if self.messages[self.idx.units[u][0]].role == "user":
            return None
        return self.idx.turn_of(u)

    def pin_at(self, pos: int) -> int | None:
        """:meth:`pin_for` the unit starting at message ``pos``."""
        return self.pin_for(self.idx.unit_at(pos))

    def pin_cost(self, pin: int | None) -> int:
        return self.idx.counts[pin] if pin is not None else 0

    def view_tokens(self, base: int, pos: int) -> int:
        """Tokens of a view that keeps ``messages[pos:]`` after a part costing ``base`` (the
        fixed part, the head, a summary): ``base``, the pinned user message and the kept messages."""
        return base + self.pin_cost(self.pin_at(pos)) + self.cost(pos, self.n)

    # -- where to cut ----------------------------------------------------------------------------
    def boundaries(self, start: int, keep_recent: int) -> list[int]:
        """Unit starts after ``start`` a block beginning at ``start`` may end at, the last
        ``keep_recent`` messages kept (a block that would hold only a pinned user message is none)."""
        idx, messages = self.idx, self.messages
        cuts = idx.starts[idx.unit_at(start + 1) : idx.unit_at(self.n - keep_recent + 1)]
        if cuts and cuts[0] == start + 1 and messages[start].role == "user" and messages[cuts[0]].role != "user":
            del cuts[0]  # it would summarise nothing: the user message before it stays, pinned
        return cuts

    def first_fit(self, starts: Iterable[int], base: int, limit: int) -> tuple[int, int]:
        """The first of ``starts`` (unit starts, oldest first) whose view fits ``limit`` tokens, else
        the last, with its :meth:`view_tokens`; ``starts`` must not be empty."""
        pos, total = -1, 0
        for pos in starts:
            total = self.view_tokens(base, pos)
            if total <= limit:
                break
        return pos, total

    def summarised(self, start: int, end: int, pin: int | None) -> Ranges:
        """The ranges a summary of ``messages[start:end]`` covers: all but the pinned user message."""
        return subtract(start, end, [(pin, pin + 1)] if pin is not None else [])

    def minimal(self, limit: int) -> int:
        """Tokens of the smallest view allowed: system, head (tool output stubbed if need be), the
        current turn's user message, the newest unit, tools and reply priming."""
        newest = self.idx.units[-1][0]
        total = self.view_tokens(self.fixed + self.idx.prefix[self.head_end], newest)
        if total > limit:
            total = self.view_tokens(self.fixed + self.stubbed()[self.head_end], newest)
        return total

    def minimal_sizes(self) -> list[tuple[int, str, int]]:
        """``(index, role, tokens)`` of every message of the smallest view (for the error)."""
        stubbed, counts, msgs = self.stubbed(), self.idx.counts, self.messages
        out: list[tuple[int, str, int]] = [(i, msgs[i].role, stubbed[i + 1] - stubbed[i]) for i in range(self.head_end)]
        pin = self.pin_for(self.last)
        if pin is not None:
            out.append((pin, "user", counts[pin]))
        out += [(i, msgs[i].role, counts[i]) for i in range(self.idx.units[-1][0], self.n)]
        return out

    # -- choices ---------------------------------------------------------------------------------
    def reuse(self, previous: Plan | None) -> None:
        """Keep ``previous``'s summary when it still covers a block right after this head.

        It does when it was placed at this head's end, ends on a unit boundary before the newest
        unit, and does not hold the user message a tail starting there must show.
        """
        if previous is None or previous.summary is None or not previous.summarized:
            return
        ranges = previous.summarized
        floor = ranges[-1][1]
        if previous.summary_at != self.head_end or ranges[0][0] < self.head_end or floor > self.idx.units[-1][0]:
            return
        u = self.idx.unit_at(floor)
        if self.idx.starts[u] != floor:
            return
        pin = self.pin_for(u)
        if pin is not None and any(s <= pin < e for s, e in ranges):
            return
        self.floor, self.prev_summarized, self.prev_summary = floor, ranges, previous.summary
        self.summarized, self.summary = ranges, previous.summary

    def choose_tail(self, budget: int) -> None:
        """The newest units (and their turn's user message) within ``budget``; at least the newest."""
        idx = self.idx
        units, turns, counts, prefix = idx.units, idx.turns, idx.counts, idx.prefix
        stale_end = self.stale_end
        stubbed = self.stubbed() if stale_end > self.floor else prefix
        tail, pin = self.last, self.pin
        used = self.unit_cost(tail)
        t = bisect_right(turns, tail) - 1  # the turn (index into ``turns``) of unit ``u`` below
        # Inlined cost() and pin_for(): this loop walks the whole tail on every compaction.
        for u in range(tail - 1, idx.unit_at(self.floor) - 1, -1):
            s, e = units[u]
            if s < stale_end:
                m = e if e < stale_end else stale_end
                used_u = used + stubbed[m] - stubbed[s] + prefix[e] - prefix[m]
            else:
                used_u = used + prefix[e] - prefix[s]
            while t >= 0 and turns[t] > u:
                t -= 1
            p = None if t < 0 or turns[t] == u else units[turns[t]][0]
            if used_u + (counts[p] if p is not None else 0) > budget:
                break
            used, tail, pin = used_u, u, p
        self.tail, self.pin = tail, pin

    def middle(self) -> list[Message]:
        """The messages between head and tail that no summary holds yet (what a summary would add)."""
        holes = sorted([*self.prev_summarized, *([(self.pin, self.pin + 1)] if self.pin is not None else [])])
        tail_start = self.idx.units[self.tail][0]
        return [m for s, e in subtract(self.head_end, tail_start, holes) for m in self.messages[s:e]]

    def summarise(self, summary: str) -> None:
        """A new summary covers everything between head and tail (the pinned user message stays)."""
        self.summarized = self.summarised(self.head_end, self.idx.units[self.tail][0], self.pin)
        self.summary = summary

    # -- the fit ---------------------------------------------------------------------------------
    def fit(self, counter: TokenCounter, limit: int) -> tuple[Plan, int]:
        """The plan, cut further until its view fits ``limit`` tokens, and its view's prompt tokens.

        In order: drop tail units from the oldest (a turn's user message goes with its last unit;
        the newest unit and the current user message stay), stub the head's tool output, drop the
        summary. :meth:`minimal` was checked to fit, so this always ends within ``limit``.
        """
        idx, msgs, counts = self.idx, self.messages, self.idx.counts
        summary_msg = summary_message(self.summary) if self.summary is not None else None
        summary_cost = counter.count_message(summary_msg) if summary_msg is not None else 0
        base = self.fixed + idx.prefix[self.head_end] + summary_cost
        start, total = self.first_fit(idx.starts[self.tail :], base, limit)
        tail = idx.unit_at(start)
        pin = self.pin_for(tail)
        head_pruned: list[int] = []
        if total > limit:
            stubbed = self.stubbed()
            for i in range(idx.body, self.head_end):
                if msgs[i].role == "tool":
                    head_pruned.append(i)
                    total -= counts[i] - (stubbed[i + 1] - stubbed[i])
                    if total <= limit:
                        break
        if total > limit and summary_msg is not None:
            total -= summary_cost
            summary_msg = None
        if total > limit:  # unreachable: minimal() fits
            raise AssertionError(f"the cut engine's fit left {total} tokens over a window of {limit}")
        return self._plan(tail, pin, head_pruned, summary_msg), total

    def _plan(self, tail: int, pin: int | None, head_pruned: list[int], summary_msg: Message | None) -> Plan:
        msgs, n = self.messages, self.n
        tail_start = self.idx.units[tail][0]
        kept: Ranges = []
        pos = 0
        for i in head_pruned:
            kept.append((pos, i))
            pos = i + 1
        kept.append((pos, self.head_end))
        if pin is not None:
            kept.append((pin, pin + 1))
        stale = [i for i in range(tail_start, min(self.stale_end, n)) if msgs[i].role == "tool"]
        pos = tail_start
        for i in stale:
            kept.append((pos, i))
            pos = i + 1
        kept.append((pos, n))
        return Plan(
            n=n,
            fp=fingerprint(msgs, n),
            kept=merge(kept),
            pruned=to_ranges([*head_pruned, *stale]),
            summarized=self.summarized if summary_msg is not None else [],
            summary=self.summary if summary_msg is not None else None,
            summary_at=self.head_end,
            _summary_msg=summary_msg,
        )


def subtract(start: int, end: int, holes: Ranges) -> Ranges:
    """``[start, end)`` without the sorted, disjoint ``holes``."""
    out: Ranges = []
    pos = start
    for s, e in holes:
        if e <= pos or s >= end:
            continue
        if s > pos:
            out.append((pos, s))
        pos = max(pos, e)
    if pos < end:
        out.append((pos, end))
    return out


def merge(ranges: Ranges) -> Ranges:
    """Join adjacent ranges: ``[(0, 3), (3, 5)]`` -> ``[(0, 5)]``."""
    out: Ranges = []
    for s, e in ranges:
        if s == e:
            continue
        if out and out[-1][1] == s:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out
