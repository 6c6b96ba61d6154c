"""SummarizingConversationManager: replace the oldest messages with a model-written summary.

When the context overflows (the model reported it, so the agent called :meth:`reduce_context`; or,
with ``context_length=`` given, the request would pass ``trigger_fraction`` of it), the oldest
``summary_ratio`` of the messages the model sees is summarised, never touching the last
``preserve_recent_messages`` nor splitting a tool call from its result. The model then sees::

    [system prompt] [summary of messages 1..k] [messages k+1 .. now]

A kept turn keeps its user message: when the cut falls inside a turn, that turn's user message is
not summarised but shown verbatim right after the summary (``[system] [summary] [user message of
the turn] [the rest of the turn ..]``). Where a block may end and what a view costs are the cut
engine's (:mod:`tulip_nb.memory.conversation._cut`), configured with no head but the system
prompt; this manager chooses the block (a ratio, or the nearest end that fits) and writes the summary.

With ``context_length=`` the manager is **token-aware** and the window is a hard bound: when the
view is still over ``context_length`` after that summary, it summarises further (a block chosen so
the view fits), and when nothing more may be summarised (everything but the system prompt, the
recent messages and their turn's user message already is), it raises
:class:`~tulip_nb.core.errors.ContextWindowExceeded` before the model is called — before the
summariser is called, too, when even summarising all that may be could not fit. The sync
:meth:`apply` never writes a summary: over the window it raises. Without ``context_length`` it
counts no tokens: it summarises only when the model reports an overflow, and never raises.

The summary (and how far it reaches) is the manager's state for the thread: saved in the thread's
metadata and restored on load, so it survives a restart; the next summary is written from the
previous one plus the newly summarised messages.

Who writes the summary: ``summarizer=`` — an ``(messages, previous_summary) -> str`` function
(async or not) or a model object — else the agent's own model (``agent.model``, picked up when the
agent calls :meth:`apply_management` or :meth:`reduce_context`). A model object is called through
:func:`complete_summary` (``await model.complete(messages, tools=None)`` returning an object with
``.message.content``); that function is the one place that knows the model protocol.
"""

from __future__ import annotations

import inspect
from bisect import bisect_right
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tulip_nb.core import Message
from tulip_nb.core.errors import ContextWindowExceeded, UserError
from tulip_nb.memory.conversation._cut import CutEngine
from tulip_nb.memory.conversation.base import PlanningManager
from tulip_nb.memory.conversation.compactor import summarizer_ref
from tulip_nb.memory.conversation.plan import HistoryIndex, Plan, fingerprint, render
from tulip_nb.tokens import REPLY_PRIMING

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState
    from tulip_nb.tokens import TokenCounter

__all__ = ["DEFAULT_SUMMARY_PROMPT", "complete_summary", "transcript"]

DEFAULT_SUMMARY_PROMPT = (
    "You compress conversations. Summarise the conversation below so an assistant can continue it: "
    "keep the user's goals and constraints, decisions made, facts and identifiers found (names, ids, "
    "numbers, file paths), tool results that still matter, and open questions. Write plain prose or "
    "terse bullets, no preamble."
)

Summarizer = Callable[[list[Message], str | None], "Awaitable[str] | str"]


def transcript(messages: Sequence[Message], previous_summary: str | None = None) -> str:
    """Plain-text rendering of ``messages`` handed to a summarising model."""
    parts = []
    if previous_summary:
        parts.append(f"Summary so far:\n{previous_summary}\n\nConversation since:")
    for m in messages:
        line = f"{m.role}: {m.content or ''}"
        for call in m.tool_calls:
            line += f"\n  -> {call.name}({call.arguments})"
        parts.append(line)
    return "\n\n".join(parts)


async def complete_summary(
    model: Any, messages: Sequence[Message], previous_summary: str | None, prompt: str = DEFAULT_SUMMARY_PROMPT
) -> str:
    """Ask ``model`` for a summary (duck-typed: ``await model.complete(msgs, tools=None)``).

    The reply must have ``.message.content`` (a tulip_nb model response) or ``.content``.
    """
    request = [Message.system(prompt), Message.user(transcript(messages, previous_summary))]
    result = model.complete(request, tools=None)
    if inspect.isawaitable(result):
        result = await result
    message = getattr(result, "message", result)
    content = getattr(message, "content", None)
    if not isinstance(content, str):
        raise UserError(f"summariser model {model!r} returned no text content: {result!r}")
    return content


class SummarizingConversationManager(PlanningManager):
    """Summarise the oldest messages when the context overflows (seed 002; module docstring)."""

    def __init__(
        self,
        summary_ratio: float = 0.3,
        preserve_recent_messages: int = 10,
        summarizer: Summarizer | Any | None = None,
        summarization_system_prompt: str | None = None,
        *,
        context_length: int | None = None,
        trigger_fraction: float = 0.8,
        token_counter: TokenCounter | Callable[[Message], int] | None = None,
        model: str | None = None,
    ) -> None:
        if not 0.0 < summary_ratio <= 1.0:
            raise UserError(f"summary_ratio must be in (0, 1], got {summary_ratio}")
        if preserve_recent_messages < 0:
            raise UserError(f"preserve_recent_messages must be >= 0, got {preserve_recent_messages}")
        super().__init__(token_counter=token_counter, model=model)
        self.summary_ratio = summary_ratio
        self.preserve_recent_messages = preserve_recent_messages
        self.summarizer = summarizer
        self.summarization_system_prompt = summarization_system_prompt
        self.context_length = context_length
        self.trigger_fraction = trigger_fraction
        self._agent_model: Any = None

    def __repr__(self) -> str:
        return (
            f"SummarizingConversationManager(summary_ratio={self.summary_ratio}, "
            f"preserve_recent_messages={self.preserve_recent_messages})"
        )

    def window_tokens(self) -> int | None:
        return self.context_length

    def get_state(self) -> dict[str, Any]:
        """The planning state plus ``"config"`` (its settings) and ``"summarizer"`` (a summariser
        function's import path; a model object is not recorded)."""
        out = super().get_state()
        out["config"] = {
            "kind": "summarizing",
            "summary_ratio": self.summary_ratio,
            "preserve_recent_messages": self.preserve_recent_messages,
            "context_length": self.context_length,
            "trigger_fraction": self.trigger_fraction,
            **({"model": self.model} if self.model is not None else {}),
        }
        fn = self.summarizer
        ref = summarizer_ref(fn) if fn is not None and not hasattr(fn, "complete") else None
        if ref is not None:
            out["summarizer"] = ref
        return out

    @property
    def summary(self) -> str | None:
        """The thread's current summary (``None`` before the first one)."""
        return self._plan.summary if self._plan is not None else None

    # -- agent hooks -----------------------------------------------------------------------------
    def apply_management(self, agent: Any) -> None:
        """Remember the agent's model as the default summariser; history is never trimmed."""
        self._agent_model = getattr(agent, "model", None) or self._agent_model

    def reduce_context(self, agent: Any, e: BaseException | None = None) -> None:
        """Summarise before the retry: the next ``aapply`` writes a summary."""
        self.apply_management(agent)
        self._reduce_pending = True

    # -- the view --------------------------------------------------------------------------------
    def _due(self, view: list[Message], tools: Sequence[Mapping[str, Any]] | None) -> bool:
        if self.context_length is None:
            return self._reduce_pending
        total = self.counter.count_request(view, tools)
        self.last_view_tokens = total
        return self._reduce_pending or total > min(self.trigger_fraction, 1.0) * self.context_length

    def _view(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        # Summaries need a model call: only ``aapply`` writes one; ``apply`` shows the current plan
        # (and, token-aware, raises when that is over the window).
        view = render(self._current_plan(messages), messages)
        if self.context_length is not None:
            total = self.counter.count_request(view, tools)
            self.last_view_tokens = total
            if total > self.context_length:
                raise self._exceeded(total, view, messages, "apply() writes no summary; aapply() would")
        return view

    def _covered(self, plan: Plan | None, body: int) -> tuple[int, int | None]:
        """Where the summarised part of ``plan`` ends, and the user message it keeps (if any)."""
        if plan is None or not plan.summarized:
            return body, None
        # kept: [system?] [pinned user message?] [messages[cut:]]
        inner = [s for s, _ in plan.kept[:-1] if s >= body]
        pin = inner[-1] if inner else None
        return max(plan.summarized[-1][1], pin + 1 if pin is not None else 0), pin

    def _engine(self, messages: Sequence[Message], idx: HistoryIndex, fixed: int = 0) -> CutEngine:
        """The cut engine as this manager configures it: no head but the system prompt, no stubs."""
        return CutEngine(messages, idx, fixed, head_end=idx.body)

    def _ratio_cut(self, cuts: CutEngine, plan: Plan | None) -> int | None:
        """The end of the next block: about ``summary_ratio`` of the messages the model sees."""
        start, _ = self._covered(plan, cuts.idx.body)
        ends = cuts.boundaries(start, self.preserve_recent_messages)
        if not ends:
            return None
        visible = cuts.n - start + (1 if plan is not None and plan.summary else 0)
        take = max(1, int(visible * self.summary_ratio))
        # The last unit boundary that covers at most ``take`` messages; else (a single unit longer
        # than ``take``) the first one.
        k = bisect_right(ends, start + take) - 1
        return ends[max(k, 0)]

    def _fit_cut(self, cuts: CutEngine, plan: Plan | None, rounds: int) -> int | None:
        """The nearest block end whose view would fit the window (with a summary as long as the
        current one), else the farthest; ``None`` when nothing more may be summarised."""
        assert self.context_length is not None
        start, _ = self._covered(plan, cuts.idx.body)
        ends = cuts.boundaries(start, self.preserve_recent_messages)
        if not ends:
            return None
        if rounds >= 3:  # the summary keeps growing: summarise all that may be
            return ends[-1]
        msg = plan.summary_msg() if plan is not None else None
        base = cuts.fixed + cuts.idx.prefix[cuts.head_end] + (self.counter.count_message(msg) if msg is not None else 0)
        return cuts.first_fit(ends, base, self.context_length)[0]

    def _floor_tokens(self, cuts: CutEngine, plan: Plan | None) -> int:
        """A lower bound of the smallest view: everything that may be summarised, summarised (the
        new summary not counted; the current one when nothing more may be)."""
        start, pin = self._covered(plan, cuts.idx.body)
        ends = cuts.boundaries(start, self.preserve_recent_messages)
        base = cuts.fixed + cuts.idx.prefix[cuts.head_end]
        if ends:
            return cuts.view_tokens(base, ends[-1])
        msg = plan.summary_msg() if plan is not None else None
        base += self.counter.count_message(msg) if msg is not None else 0
        return base + cuts.pin_cost(pin) + cuts.cost(start, cuts.n)

    async def _aview(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        plan = self._current_plan(messages)
        view = render(plan, messages)
        if not self._due(view, tools):
            return view
        trigger = "overflow" if self._reduce_pending else "threshold"
        self._reduce_pending = False
        window = self.context_length
        counter = self.counter
        cuts = self._engine(messages, self._indexed(messages), counter.count_tools(tools) + REPLY_PRIMING)
        if window is not None:
            floor = self._floor_tokens(cuts, plan)
            if floor > window:  # even summarising all that may be cannot fit: no summariser call
                raise self._exceeded(floor, view, messages, "everything that may be summarised is")
        new, out = plan, view
        after = counter.count_request(out, tools)
        cut = self._ratio_cut(cuts, plan)
        rounds = 0
        while cut is not None:
            new = await self._summarised(cuts, new, cut)
            out = render(new, messages)
            after = counter.count_request(out, tools)
            rounds += 1
            if window is None or after <= window:
                break
            cut = self._fit_cut(cuts, new, rounds)
        if window is not None and after > window:
            raise self._exceeded(after, out, messages, "everything that may be summarised is")
        if new is plan:
            return view  # nothing old enough to summarise; the caller's retry will fail visibly
        assert new is not None
        self._plan = new
        self.last_view_tokens = after
        self._record(state, trigger, new, messages, counter.count_request(messages, tools), after)
        return out

    async def _summarised(self, cuts: CutEngine, plan: Plan | None, cut: int) -> Plan:
        """``plan`` with the block up to ``cut`` summarised (the previous summary compounds)."""
        messages, n, body = cuts.messages, cuts.n, cuts.head_end
        start, old_pin = self._covered(plan, body)
        pin = cuts.pin_at(cut)
        block = [messages[old_pin]] if old_pin is not None and old_pin != pin else []
        block += [m for i, m in enumerate(messages[start:cut], start) if i != pin]
        summary = await self._summarise(block, plan.summary if plan is not None else None)
        kept = [(0, body)] if body else []
        if pin is not None:
            kept.append((pin, pin + 1))
        kept.append((cut, n))
        return Plan(
            n=n,
            fp=fingerprint(messages, n),
            kept=kept,
            summarized=cuts.summarised(body, cut, pin),
            summary=summary,
            summary_at=body,
        )

    def _exceeded(
        self, needed: int, view: list[Message], messages: Sequence[Message], why: str
    ) -> ContextWindowExceeded:
        assert self.context_length is not None
        where = {id(m): i for i, m in enumerate(messages)}
        counts = self.counter.message_counts(view)
        k = max(range(len(view)), key=counts.__getitem__) if view else 0
        largest = (where.get(id(view[k]), -1), view[k].role, counts[k]) if view else (-1, "none", 0)
        return ContextWindowExceeded(
            f"SummarizingConversationManager cannot fit the view into context_length={self.context_length:,} "
            f"({why}; the last {self.preserve_recent_messages} messages, preserve_recent_messages, stay)",
            tokens_needed=needed,
            window=self.context_length,
            largest=largest,
        )

    async def _summarise(self, messages: list[Message], previous: str | None) -> str:
        fn = self.summarizer if self.summarizer is not None else self._agent_model
        if fn is None:
            raise UserError(
                "SummarizingConversationManager has no summariser: pass summarizer= or run it in an "
                "agent whose .model can complete()"
            )
        if hasattr(fn, "complete"):
            prompt = self.summarization_system_prompt or DEFAULT_SUMMARY_PROMPT
            return await complete_summary(fn, messages, previous, prompt)
        result = fn(messages, previous)
        if inspect.isawaitable(result):
            result = await result
        return str(result)

    def clone_for_spawn(self) -> SummarizingConversationManager:
        return SummarizingConversationManager(
            summary_ratio=self.summary_ratio,
            preserve_recent_messages=self.preserve_recent_messages,
            summarizer=self.summarizer,
            summarization_system_prompt=self.summarization_system_prompt,
            context_length=self.context_length,
            trigger_fraction=self.trigger_fraction,
            token_counter=self.token_counter,
            model=self.model,
        )
