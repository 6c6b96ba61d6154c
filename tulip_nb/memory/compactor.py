"""LLMCompactor: keep a long thread inside the model's window, token-aware (seed 000).

The compactor runs on the way into Think, and only when the request would exceed
``trigger_fraction * context_length`` tokens (counted exactly, see :mod:`tulip_nb.tokens`). Then it
makes a new plan of what the model sees:

1. **Protect** the system prompt and the first ``head_turns`` turns (a turn is a user message and
   everything up to the next one: tool calls, results, the answer).
2. **Prune stale tool output**: tool results older than ``tool_output_ttl_turns`` turns keep their
   message (so every call still has its result) but their content becomes a short stub.
3. **Keep a tail**: whole units (a call with its results) from the end, while they fit in
   ``tail_token_fraction * context_length`` tokens (at least the last unit).
4. **The middle** between head and tail is summarised with ``summarize_fn(messages,
   previous_summary)`` when given (the previous summary is the thread's, from the saved manager
   state, so a summary compounds across compactions and restarts), else dropped.
5. **Fit**: if the result still exceeds ``context_length``, shrink the tail, prune the head's tool
   output, drop the head, drop the summary, in that order.

The plan is kept (in the thread's manager state) and new messages are appended to it verbatim
until the view crosses the trigger again: between compactions the start of the request does not
move, which keeps the provider's prompt cache warm. Every compaction is recorded as an event
(:mod:`tulip_nb.memory._events`) so :func:`model_view` rebuilds what the model saw.

>>> from tulip_nb.memory.compactor import LLMCompactor
>>> compactor = LLMCompactor(context_length=128_000)   # every argument has a default

This module also gathers every manager under one import path, and provides
:func:`default_conversation_manager` (what an agent gets when it is given none).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tulip_nb.core.errors import UserError
from tulip_nb.core.messages import Message
from tulip_nb.memory._events import EVENTS_KEY, STATE_KEY, model_view, model_views
from tulip_nb.memory._history import HistoryIndex, Plan, Ranges, fingerprint, render, stub, to_ranges
from tulip_nb.memory._summarizing import SummarizingConversationManager
from tulip_nb.memory.managers import (
    ConversationManager,
    NullConversationManager,
    NullManager,
    PlanningManager,
    SlidingWindowConversationManager,
    SlidingWindowManager,
)
from tulip_nb.tokens import REPLY_PRIMING

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState
    from tulip_nb.tokens import TokenCounter

__all__ = [
    "EVENTS_KEY",
    "STATE_KEY",
    "ConversationManager",
    "LLMCompactor",
    "NullConversationManager",
    "NullManager",
    "SlidingWindowConversationManager",
    "SlidingWindowManager",
    "SummarizeFn",
    "SummarizingConversationManager",
    "default_conversation_manager",
    "model_view",
    "model_views",
]

SummarizeFn = Callable[[list[Message], str | None], "Awaitable[str] | str"]
"""``summarize_fn(messages, previous_summary) -> str`` (async or sync)."""


class LLMCompactor(PlanningManager):
    """Token-aware compaction with a protected head and a token-budgeted tail (module docstring).

    Args:
        context_length: the model's window in tokens (an LLMCompactor you build yourself does not
            look it up; :func:`default_conversation_manager` does).
        trigger_fraction: compact when the request exceeds this fraction of ``context_length``.
        head_turns: first user/assistant turns kept verbatim.
        tail_token_fraction: share of ``context_length`` for the most recent units.
        summarize_fn: ``(messages, previous_summary) -> str``; without it the middle is dropped.
        tool_output_ttl_turns: tool results older than this many turns are stubbed (0: never).
        token_counter / model: see :class:`~tulip_nb.memory.managers.PlanningManager`.
    """

    def __init__(
        self,
        context_length: int = 128_000,
        trigger_fraction: float = 0.8,
        head_turns: int = 2,
        tail_token_fraction: float = 0.5,
        summarize_fn: SummarizeFn | None = None,
        *,
        tool_output_ttl_turns: int = 10,
        token_counter: TokenCounter | Callable[[Message], int] | None = None,
        model: str | None = None,
    ) -> None:
        if context_length < 1:
            raise UserError(f"context_length must be positive, got {context_length}")
        if not 0.0 < trigger_fraction <= 1.0:
            raise UserError(f"trigger_fraction must be in (0, 1], got {trigger_fraction}")
        if head_turns < 0:
            raise UserError(f"head_turns must be >= 0, got {head_turns}")
        if not 0.0 < tail_token_fraction < 1.0:
            raise UserError(f"tail_token_fraction must be in (0, 1), got {tail_token_fraction}")
        if tool_output_ttl_turns < 0:
            raise UserError(f"tool_output_ttl_turns must be >= 0, got {tool_output_ttl_turns}")
        super().__init__(token_counter=token_counter, model=model)
        self.context_length = context_length
        self.trigger_fraction = trigger_fraction
        self.head_turns = head_turns
        self.tail_token_fraction = tail_token_fraction
        self.summarize_fn = summarize_fn
        self.tool_output_ttl_turns = tool_output_ttl_turns
        self._scratch: tuple[HistoryIndex, int] = (self._index, 0)
        self._plan_cost: tuple[Plan, int] | None = None

    def __repr__(self) -> str:
        return (
            f"LLMCompactor(context_length={self.context_length}, trigger_fraction={self.trigger_fraction}, "
            f"head_turns={self.head_turns}, tail_token_fraction={self.tail_token_fraction}, "
            f"summarize_fn={getattr(self.summarize_fn, '__name__', self.summarize_fn)!r})"
        )

    # -- budgets (an overflow report caps them for this thread) --------------------------------
    @property
    def effective_context(self) -> int:
        """``context_length``, capped below the size of a request the model rejected."""
        limit = self._overflow_limit
        return self.context_length if limit is None else max(1, min(self.context_length, limit))

    @property
    def trigger_tokens(self) -> int:
        return int(self.trigger_fraction * self.effective_context)

    @property
    def tail_budget(self) -> int:
        return int(self.tail_token_fraction * self.effective_context)

    # -- the view ----------------------------------------------------------------------------
    def _view(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        # The sync path never calls the summariser: the middle is dropped (the previous summary,
        # if any, is still shown).
        decision = self._decide(messages, tools)
        if isinstance(decision, list):
            return decision
        return self._commit(decision[0], messages, tools, state)

    async def _aview(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        decision = self._decide(messages, tools)
        if isinstance(decision, list):
            return decision
        plan, middle, previous = decision
        if middle and self.summarize_fn is not None:
            result = self.summarize_fn(middle, previous)
            summary = await result if inspect.isawaitable(result) else result
            plan = _with_summary(plan, str(summary))
        return self._commit(plan, messages, tools, state)

    def _decide(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None
    ) -> list[Message] | tuple[Plan, list[Message], str | None]:
        """The view when no compaction is due, else ``(plan, middle to summarise, previous summary)``."""
        counter = self.counter
        fixed = counter.count_tools(tools) + REPLY_PRIMING
        plan = self._current_plan(messages)
        idx = self._indexed(messages)
        if not self._reduce_pending:
            if plan is None:
                total = idx.prefix[-1] + fixed
                view = messages
            else:
                total = self._plan_tokens(plan, messages) + idx.span(plan.n, len(messages)) + fixed
                view = render(plan, messages)
            if total <= self.trigger_tokens:
                self.last_view_tokens = total
                return view
        return self._compact(messages, idx, fixed, plan)

    def _plan_tokens(self, plan: Plan, messages: Sequence[Message]) -> int:
        """Tokens of ``plan``'s view of ``messages[:plan.n]`` (counted once per plan)."""
        known = self._plan_cost
        if known is not None and known[0] is plan:
            return known[1]
        tokens = sum(self.counter.message_counts(render(plan, messages[: plan.n])))
        self._plan_cost = (plan, tokens)
        return tokens

    # -- compaction ----------------------------------------------------------------------------
    def _compact(
        self, messages: list[Message], idx: HistoryIndex, fixed: int, previous: Plan | None
    ) -> tuple[Plan, list[Message], str | None]:
        n = len(messages)
        unit_list, turns = idx.units, idx.turns
        # Head: everything before the (head_turns+1)-th turn; a prefix before the first user
        # message belongs to the head too.
        k = turns[self.head_turns] if len(turns) > self.head_turns else len(unit_list)
        head_end = unit_list[k][0] if k < len(unit_list) else n
        # What an earlier compaction summarised stays summarised (the summary compounds).
        prev_summary = previous.summary if previous is not None else None
        floor = head_end
        if previous is not None and previous.summarized and previous.summarized[0][0] == head_end:
            floor = previous.summarized[-1][1]
        else:
            prev_summary = None
        # Stale tool output: results in turns older than the last ``ttl`` turns get a stub.
        ttl = self.tool_output_ttl_turns
        stale_end = unit_list[turns[-ttl]][0] if ttl and len(turns) > ttl else floor
        stale_end = max(stale_end, floor)
        prefix = idx.prefix
        stubbed = idx.stub_prefix() if stale_end > floor else prefix

        def cost(s: int, e: int) -> int:  # tokens of messages[s:e], stale tool output stubbed
            m = min(max(s, stale_end), e)
            return stubbed[m] - stubbed[s] + prefix[e] - prefix[m]

        # Tail: whole units from the end within the tail budget (at least the last one).
        tail_start, used, budget = n, 0, self.tail_budget
        for u in range(len(unit_list) - 1, idx.unit_at(floor) - 1, -1):
            s, e = unit_list[u]
            size = cost(s, e)
            if tail_start < n and used + size > budget:
                break
            tail_start, used = s, used + size
        tail_start = max(tail_start, floor)
        # Shown: the head and the tail; tool results of the tail older than stale_end are pruned.
        kept: Ranges = [(0, head_end)] if head_end else []
        pruned: Ranges = []
        pos = tail_start
        for i in range(tail_start, min(stale_end, n)):
            if messages[i].role == "tool":
                if i > pos:
                    kept.append((pos, i))
                if pruned and pruned[-1][1] == i:
                    pruned[-1] = (pruned[-1][0], i + 1)
                else:
                    pruned.append((i, i + 1))
                pos = i + 1
        if pos < n:
            kept.append((pos, n))
        kept = _merge(kept)
        plan = Plan(
            n=n,
            fp=fingerprint(messages, n),
            kept=kept,
            pruned=pruned,
            summarized=[(head_end, floor)] if prev_summary is not None else [],
            summary=prev_summary,
            summary_at=head_end,
        )
        self._scratch = (idx, fixed)
        return plan, messages[floor:tail_start], prev_summary

    def _commit(
        self,
        plan: Plan,
        messages: list[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        state: AgentState | None,
    ) -> list[Message]:
        trigger = "overflow" if self._reduce_pending else "threshold"
        self._reduce_pending = False
        idx, fixed = self._scratch
        plan, after = _fit(plan, messages, self.counter, idx, fixed, self.effective_context)
        view = render(plan, messages)
        before = idx.prefix[-1] + fixed
        self._plan = plan
        self._plan_cost = (plan, after - fixed)
        self.last_view_tokens = after
        self._record(state, trigger, plan, messages, before, after)
        return view

    def clone_for_spawn(self) -> LLMCompactor:
        return LLMCompactor(
            context_length=self.context_length,
            trigger_fraction=self.trigger_fraction,
            head_turns=self.head_turns,
            tail_token_fraction=self.tail_token_fraction,
            summarize_fn=self.summarize_fn,
            tool_output_ttl_turns=self.tool_output_ttl_turns,
            token_counter=self.token_counter,
            model=self.model,
        )


def _with_summary(plan: Plan, summary: str) -> Plan:
    """``plan`` with the block after the head (earlier summary and the dropped middle) summarised."""
    block = [r for r in plan.dropped() + plan.summarized if r[0] >= plan.summary_at]
    if not block:
        return plan
    plan.summarized = [(plan.summary_at, max(e for _, e in block))]
    plan.summary, plan._summary_msg = summary, None
    return plan


def _fit(
    plan: Plan,
    messages: Sequence[Message],
    counter: TokenCounter,
    idx: HistoryIndex,
    fixed: int,
    limit: int,
) -> tuple[Plan, int]:
    """Cut ``plan`` further until its view fits ``limit`` tokens, when that is possible.

    In order: drop tail units from the front (the last unit stays), stub the head's tool output,
    drop the head, drop the summary. ``fixed`` is what every request costs (tools, reply priming).
    Returns the plan and its view's prompt tokens.
    """
    count = counter.count_message
    summary = plan.summary_msg()
    summary_cost = count(summary) if summary is not None else 0
    total = fixed + summary_cost + sum(idx.span(s, e) for s, e in plan.kept)
    if plan.pruned:  # pruned ranges hold tool results only: their stubbed cost
        stubbed = idx.stub_prefix()
        total += sum(stubbed[e] - stubbed[s] for s, e in plan.pruned)
    if total <= limit:
        return plan, total
    counts, unit_list = idx.counts, idx.units
    n = plan.n
    label = ["d"] * n
    for code, ranges in (("k", plan.kept), ("p", plan.pruned), ("s", plan.summarized)):
        for s, e in ranges:
            label[s:e] = [code] * (e - s)

    def cost(i: int) -> int:
        c = label[i]
        return counts[i] if c == "k" else count(stub(messages[i])) if c == "p" else 0

    body = 1 if n and messages[0].role == "system" else 0
    head_end = plan.summary_at
    tail = [(s, e) for s, e in unit_list if s >= head_end and label[s] in "kp"]
    for s, e in tail[:-1]:
        if total <= limit:
            break
        for i in range(s, e):
            total -= cost(i)
            label[i] = "d"
    for i in range(body, head_end):
        if total <= limit:
            break
        if label[i] == "k" and messages[i].role == "tool":
            total -= cost(i)
            label[i] = "p"
            total += cost(i)
    if total > limit:
        for i in range(body, head_end):
            total -= cost(i)
            label[i] = "d"
    if total > limit and summary is not None:
        label = ["d" if c == "s" else c for c in label]
        total -= summary_cost
    summarized = to_ranges(i for i in range(n) if label[i] == "s")
    return Plan(
        n=n,
        fp=plan.fp,
        kept=to_ranges(i for i in range(n) if label[i] == "k"),
        pruned=to_ranges(i for i in range(n) if label[i] == "p"),
        summarized=summarized,
        summary=plan.summary if summarized else None,
        summary_at=head_end,
    ), total


def _merge(ranges: Ranges) -> Ranges:
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


def default_conversation_manager(context_window: int | None, max_iterations: int = 20) -> ConversationManager:
    """What an agent gets without ``conversation_manager=`` (seed 000).

    A model with a known window (registered metadata) gets ``LLMCompactor(context_length=window)``
    and no summariser; an unknown window gets ``SlidingWindowManager(window_size=max(20,
    max_iterations * 2))`` — built as its seed-002 subclass ``SlidingWindowConversationManager``, so
    both seeds' descriptions of the default hold. ``NullManager()`` turns management off.
    """
    if context_window:
        return LLMCompactor(context_length=int(context_window))
    return SlidingWindowConversationManager(window_size=max(20, max_iterations * 2))
