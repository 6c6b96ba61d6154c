"""SummarizingConversationManager: replace the oldest messages with a model-written summary.

When the context overflows (the model reported it, so the agent called :meth:`reduce_context`; or,
with ``context_length=`` given, the request would pass ``trigger_fraction`` of it), the oldest
``summary_ratio`` of the messages the model sees is summarised, never touching the last
``preserve_recent_messages`` nor splitting a tool call from its result. The model then sees::

    [system prompt] [summary of messages 1..k] [messages k+1 .. now]

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tulip_nb.core.errors import UserError
from tulip_nb.core.messages import Message
from tulip_nb.memory._history import Plan, fingerprint, render, units
from tulip_nb.memory.managers import PlanningManager

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState
    from tulip_nb.tokens import TokenCounter

__all__ = ["DEFAULT_SUMMARY_PROMPT", "SummarizingConversationManager", "complete_summary", "transcript"]

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
        if self._reduce_pending:
            return True
        if self.context_length is None:
            return False
        total = self.counter.count_request(view, tools)
        self.last_view_tokens = total
        return total > self.trigger_fraction * self.context_length

    def _view(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        # Summaries need a model call: only ``aapply`` writes one; ``apply`` shows the current plan.
        return render(self._current_plan(messages), messages)

    def cut_for(self, messages: Sequence[Message]) -> tuple[int, int] | None:
        """The block ``[start, cut)`` the next summary would cover, or ``None`` if none can be."""
        n = len(messages)
        body = 1 if n and messages[0].role == "system" else 0
        plan = self._current_plan(messages)
        start = plan.summarized[-1][1] if plan is not None and plan.summarized else body
        visible = n - start + (1 if plan is not None and plan.summary else 0)
        take = max(1, int(visible * self.summary_ratio))
        limit = n - self.preserve_recent_messages
        starts = [s for s, _ in units(messages, start)]
        # The last unit boundary that covers at most ``take`` messages and leaves the recent ones.
        cut = max((s for s in starts if start < s <= min(start + take, limit)), default=None)
        if cut is None:
            # A single unit longer than ``take``: summarise it whole if the recent ones stay.
            cut = next((s for s in starts if start < s <= limit), None)
        return None if cut is None else (start, cut)

    async def _aview(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        plan = self._current_plan(messages)
        view = render(plan, messages)
        if not self._due(view, tools):
            return view
        trigger = "overflow" if self._reduce_pending else "threshold"
        self._reduce_pending = False
        block = self.cut_for(messages)
        if block is None:
            return view  # nothing old enough to summarise; the caller's retry will fail visibly
        start, cut = block
        summary = await self._summarise(list(messages[start:cut]), self.summary)
        n = len(messages)
        body = 1 if n and messages[0].role == "system" else 0
        new = Plan(
            n=n,
            fp=fingerprint(messages, n),
            kept=[*([(0, body)] if body else []), (cut, n)] if cut < n else [(0, body)] if body else [],
            summarized=[(body, cut)],
            summary=summary,
            summary_at=body,
        )
        out = render(new, messages)
        counter = self.counter
        before, after = counter.count_request(messages, tools), counter.count_request(out, tools)
        self._plan = new
        self.last_view_tokens = after
        self._record(state, trigger, new, messages, before, after)
        return out

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
