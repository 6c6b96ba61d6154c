"""LLMCompactor: keep a long thread inside the model's window, token-aware (seed 000).

The compactor runs on the way into Think, and only when the request would exceed
``trigger_fraction * context_length`` tokens (counted exactly, see :mod:`tulip_nb.tokens`; a
request is its messages plus the tool schemas plus the reply priming). Then it makes a new plan of
what the model sees:

1. **Protect** the system prompt and the **head**: the first ``head_turns`` turns (a turn is a user
   message and everything up to the next one: tool calls, results, the answer), and any prefix
   before the first user message. The head never reaches into the current (last) turn.
2. **Prune stale tool output**: tool results older than ``tool_output_ttl_turns`` turns keep their
   message (so every call still has its result) but their content becomes a short stub.
3. **Keep a tail**: whole units (a call with its results) from the end, while they fit in
   ``tail_token_fraction * context_length`` tokens (at least the newest unit). A tail that starts
   inside a turn also shows that turn's user message, first (counted in the budget).
4. **The middle** between head and tail is summarised with ``summarize_fn(messages,
   previous_summary)`` when given (the previous summary is the thread's, from the saved manager
   state, so a summary compounds across compactions and restarts), else dropped.
5. **Fit**: while the view exceeds the window, drop tail units from the oldest, then stub the
   head's tool output, then drop the summary.

**The window is a hard bound** (``effective_context``: ``context_length``, or less once the model
reported an overflow). Every view is a valid conversation within it, and what may go is fixed:

- never dropped nor changed: the system prompt; the current turn's user message; the newest unit
  (the tool results the model must now answer, with their call — or the user message itself);
- never dropped: the head (its tool output may be stubbed, as a last resort);
- may be stubbed: tool output of stale turns and of the head;
- may be summarised or dropped: whole older turns, and older units of a kept turn (the current one
  included) — a kept turn always keeps its user message, so units are never shown after a user
  message of another turn than theirs; the summary itself may be dropped;
- a call is never shown without its results nor a result without its call: a unit is kept or cut
  whole, and calls and results pair by position (:mod:`tulip_nb.core.calls`), never by id.

When even the must-keep part (system prompt + head with tool output stubbed + the current user
message + the newest unit, plus tools and reply priming) exceeds the window,
:class:`~tulip_nb.core.errors.ContextWindowExceeded` is raised before the model (or the summariser)
is called, naming the tokens needed, the window and the largest message of that part. The view's
count is exact: ``counter.count_request(view, tools)`` equals ``last_view_tokens`` and the event's
``tokens_after``.

Where to cut and how much fits are the cut engine's (:class:`~tulip_nb.memory.conversation._cut.CutEngine`,
which :class:`~tulip_nb.memory.conversation.summarizing.SummarizingConversationManager` configures
too); this manager configures it with the head, the stale-output rule and the tail budget.

The plan is kept (in the thread's manager state) and new messages are appended to it verbatim
until the view crosses the trigger again: between compactions the start of the request does not
move, which keeps the provider's prompt cache warm. Every compaction is recorded as an event
(:mod:`tulip_nb.memory.conversation.events`) so :func:`~tulip_nb.memory.conversation.events.model_view`
rebuilds what the model saw.

>>> from tulip_nb.memory.compactor import LLMCompactor
>>> compactor = LLMCompactor(context_length=128_000)   # every argument has a default

This module also provides :func:`default_conversation_manager`, what an agent gets when it is
given no manager (seed 000). Seed code imports all of this from :mod:`tulip_nb.memory.compactor`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tulip_nb.core import Message
from tulip_nb.core.errors import ContextWindowExceeded, UserError
from tulip_nb.memory.conversation._cut import CutEngine
from tulip_nb.memory.conversation.base import ConversationManager, PlanningManager
from tulip_nb.memory.conversation.plan import Plan, render
from tulip_nb.memory.conversation.window import SlidingWindowConversationManager
from tulip_nb.tokens import REPLY_PRIMING

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState
    from tulip_nb.tokens import TokenCounter

__all__ = ["summarizer_ref"]

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
        token_counter / model: see :class:`~tulip_nb.memory.conversation.base.PlanningManager`.

    Raises:
        ContextWindowExceeded: from :meth:`apply` / :meth:`aapply`, when the system prompt, the
            head (tool output stubbed), the current user message and the newest unit cannot fit
            ``effective_context`` with the tool schemas (see the module docstring).
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
        self._plan_cost: tuple[Plan, int] | None = None

    def __repr__(self) -> str:
        return (
            f"LLMCompactor(context_length={self.context_length}, trigger_fraction={self.trigger_fraction}, "
            f"head_turns={self.head_turns}, tail_token_fraction={self.tail_token_fraction}, "
            f"summarize_fn={getattr(self.summarize_fn, '__name__', self.summarize_fn)!r})"
        )

    def window_tokens(self) -> int | None:
        return self.context_length

    def get_state(self) -> dict[str, Any]:
        """The planning state plus what this compactor is: ``"config"`` (its settings, the keys of
        a lab config dict) and ``"summarizer"`` (the summariser's import path, see
        :func:`summarizer_ref`), so a saved thread says what it ran with."""
        out = super().get_state()
        out["config"] = {
            "kind": "compactor",
            "context_length": self.context_length,
            "trigger_fraction": self.trigger_fraction,
            "head_turns": self.head_turns,
            "tail_token_fraction": self.tail_token_fraction,
            "tool_output_ttl_turns": self.tool_output_ttl_turns,
            **({"model": self.model} if self.model is not None else {}),
        }
        ref = summarizer_ref(self.summarize_fn)
        if ref is not None:
            out["summarizer"] = ref
        return out

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
        return self._commit(decision, messages, state)

    async def _aview(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        decision = self._decide(messages, tools)
        if isinstance(decision, list):
            return decision
        middle = decision.middle()
        if middle and self.summarize_fn is not None:
            result = self.summarize_fn(middle, decision.prev_summary)
            summary = await result if inspect.isawaitable(result) else result
            decision.summarise(str(summary))
        return self._commit(decision, messages, state)

    def _decide(self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None) -> list[Message] | CutEngine:
        """The view when no compaction is due, else the compaction to make (summary still to write).

        Raises :class:`ContextWindowExceeded` when what must be kept cannot fit (module docstring).
        """
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
            if total <= self.trigger_tokens:  # <= effective_context: the view fits
                self.last_view_tokens = total
                return view
        limit = self.effective_context
        if not idx.units:  # a system prompt alone: nothing can be cut
            total = idx.prefix[-1] + fixed
            if total > limit:
                sizes = [(i, m.role, idx.counts[i]) for i, m in enumerate(messages)]
                raise self._exceeded(total, limit, sizes)
            self._reduce_pending = False
            self.last_view_tokens = total
            return messages
        cut = CutEngine.with_head(messages, idx, fixed, self.head_turns, self.tool_output_ttl_turns)
        needed = cut.minimal(limit)
        if needed > limit:
            raise self._exceeded(needed, limit, cut.minimal_sizes())
        cut.reuse(plan)
        cut.choose_tail(self.tail_budget)
        return cut

    def _exceeded(self, needed: int, limit: int, sizes: Sequence[tuple[int, str, int]]) -> ContextWindowExceeded:
        window = f"window of {limit:,} tokens"
        if limit != self.context_length:
            window += f" (context_length {self.context_length:,}, capped after an overflow report)"
        return ContextWindowExceeded(
            f"LLMCompactor cannot fit what it must keep into the {window} - the system prompt, the first "
            f"{self.head_turns} turn(s) (head_turns, tool output cleared), the current turn's user message "
            "and its newest tool round, plus the tool schemas",
            tokens_needed=needed,
            window=limit,
            largest=max(sizes, key=lambda size: size[2]),
        )

    def _plan_tokens(self, plan: Plan, messages: Sequence[Message]) -> int:
        """Tokens of ``plan``'s view of ``messages[:plan.n]`` (counted once per plan)."""
        known = self._plan_cost
        if known is not None and known[0] is plan:
            return known[1]
        tokens = sum(self.counter.message_counts(render(plan, messages[: plan.n])))
        self._plan_cost = (plan, tokens)
        return tokens

    def _commit(self, cut: CutEngine, messages: list[Message], state: AgentState | None) -> list[Message]:
        trigger = "overflow" if self._reduce_pending else "threshold"
        self._reduce_pending = False
        plan, after = cut.fit(self.counter, self.effective_context)
        view = render(plan, messages)
        before = cut.idx.prefix[-1] + cut.fixed
        self._plan = plan
        self._plan_cost = (plan, after - cut.fixed)
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


def summarizer_ref(fn: Any) -> dict[str, str] | None:
    """Where a summariser can be imported from: ``{"module": ..., "qualname": ...}`` (None without
    one, or for an object without those names). Recorded in the manager state so a notebook can
    re-import the function the thread ran with; a lambda or a nested function is recorded too
    (its qualname holds ``<lambda>`` / ``<locals>``) and the lab then says it cannot import it."""
    if fn is None:
        return None
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    return {"module": module, "qualname": qualname}


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
