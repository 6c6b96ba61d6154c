"""The conversation-manager contract: what the model sees of a thread, one request at a time.

The checkpoint keeps the full history; a manager computes the *view* sent to the model
(:meth:`ConversationManager.apply`). Managers that compact record each compaction as an event in
the state's metadata (see :data:`EVENTS_KEY`) so a notebook can show "what the model saw", and keep
their own state (e.g. a running summary) in the thread via :meth:`get_state` /
:meth:`restore_from_session`, never only in the instance.

How the agent drives a manager:

- before each model call: ``view = await manager.aapply(state.messages, tools=schemas, state=state)``
  (``aapply`` may call a summariser; the sync :meth:`apply` never does);
- after each turn: ``manager.apply_management(agent)``;
- when the model reports a context overflow: ``manager.reduce_context(agent, error)``, then one retry;
- before each save: ``state.metadata[STATE_KEY] = manager.get_state()``; after each load:
  ``manager.restore_from_session(state.metadata.get(STATE_KEY, {}))``;
- ``as_tool(mode="spawn")`` workers get ``manager.clone_for_spawn()``.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.memory.conversation.events import EVENTS_KEY as EVENTS_KEY
from tulip_nb.memory.conversation.events import STATE_KEY as STATE_KEY
from tulip_nb.memory.conversation.events import make_event
from tulip_nb.memory.conversation.plan import HistoryIndex, Plan, known_counts

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState
    from tulip_nb.tokens import TokenCounter

__all__: list[str] = []


class ConversationManager(ABC):  # noqa: B024 - every method has a usable default
    """Base class for conversation managers (seed 002's interface plus tulip's ``apply``).

    A manager decides what the model sees of a thread for one request; the thread itself keeps
    every message (module docstring: how the agent drives it). Subclass it for your own policy and
    implement :meth:`clone_for_spawn` when it takes arguments.
    """

    def apply(self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None) -> list[Message]:
        """The messages the model should see for one request (default: all of them)."""
        return list(messages)

    async def aapply(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        state: AgentState | None = None,
    ) -> list[Message]:
        """Async :meth:`apply`; may call a summariser and record events in ``state.metadata``."""
        return self.apply(messages, tools=tools)

    def apply_management(self, agent: Any) -> None:  # noqa: B027
        """Called after each turn with the agent (``agent.messages`` is the history)."""

    def reduce_context(self, agent: Any, e: BaseException | None = None) -> None:  # noqa: B027
        """Called when the model reports a context overflow; make the next request smaller."""

    def get_state(self) -> dict[str, Any]:
        """This manager's state for the thread (JSON-serialisable)."""
        return {}

    def window_tokens(self) -> int | None:
        """The context window (tokens) this manager bounds every view by; None when it does not
        count tokens (a sliding window counts messages). Saved with the thread as ``"window"``."""
        return None

    def restore_from_session(self, state: dict[str, Any]) -> None:  # noqa: B027
        """Restore what :meth:`get_state` returned, after a thread is loaded."""

    def clone_for_spawn(self) -> ConversationManager:
        """A fresh manager with the same configuration for a spawned worker agent."""
        return type(self)()


class NullManager(ConversationManager):
    """No management: the model sees the whole history."""

    def clone_for_spawn(self) -> NullManager:
        return NullManager()


NullConversationManager = NullManager


class PlanningManager(ConversationManager):
    """Base of the built-in managers: a plan kept per thread, token accounting, events, overflow.

    A subclass decides, for a history, a :class:`~tulip_nb.memory.conversation.plan.Plan` (what the model
    sees of it) in :meth:`_view` / :meth:`_aview`; this class keeps the current plan in the
    manager's state (so it is saved with the thread and survives a restart), counts tokens with a
    shared per-message cache, and records an event each time the view is changed.

    ``token_counter`` is a :class:`~tulip_nb.tokens.TokenCounter`, or any ``Message -> int``
    function (tulip's ``token_counter=``); by default the shared exact counter for ``model``'s
    encoding (``o200k_base`` when no model is given).
    """

    def __init__(
        self,
        *,
        token_counter: TokenCounter | Callable[[Message], int] | None = None,
        model: str | None = None,
    ) -> None:
        self.token_counter = token_counter
        self.model = model
        self._counter: TokenCounter | None = None
        self._plan: Plan | None = None
        self._overflows = 0
        self._overflow_limit: int | None = None
        self._reduce_pending = False
        self._pending_events: list[dict[str, Any]] = []
        self._index = HistoryIndex()
        self.last_event: dict[str, Any] | None = None
        """The newest event this instance recorded (also in the thread's metadata)."""
        self.last_view_tokens: int | None = None
        """Prompt tokens of the last view returned (when it was counted)."""
        self._tools: list[dict[str, Any]] | None = None

    # -- tokens ------------------------------------------------------------------------------
    @property
    def counter(self) -> TokenCounter:
        """The token counter in use (resolved on first use; tiktoken loads lazily)."""
        if self._counter is None:
            from tulip_nb import tokens

            arg = self.token_counter
            if arg is None:
                self._counter = tokens.get_counter(self.model)
            elif isinstance(arg, tokens.TokenCounter):
                self._counter = arg
            elif callable(arg):
                self._counter = tokens.FunctionCounter(arg)
            else:
                raise UserError(f"token_counter must be a TokenCounter or a function, not {arg!r}")
        return self._counter

    def _indexed(self, messages: Sequence[Message]) -> HistoryIndex:
        """The thread's :class:`~tulip_nb.memory.conversation.plan.HistoryIndex`, brought up to ``messages``.

        Counts, units and turns are computed once per message over the thread's life, so a call
        costs what is new since the last one, not the thread's length.
        """
        self._index.update(messages, self.counter)
        return self._index

    # -- plan & events -----------------------------------------------------------------------
    def _current_plan(self, messages: Sequence[Message]) -> Plan | None:
        plan = self._plan
        if plan is not None and not plan.matches(messages):
            # The history is not the one the plan was made on (reset, another thread): start over.
            self._plan = plan = None
        return plan

    def _record(
        self,
        state: AgentState | None,
        trigger: str,
        plan: Plan,
        messages: Sequence[Message],
        tokens_before: int,
        tokens_after: int,
    ) -> None:
        counter = self.counter
        idx = self._index
        n = len(messages)
        call = idx.calls_before(n) if n and len(idx) == n and idx.messages[-1] is messages[-1] else None
        event = make_event(
            manager=type(self).__name__,
            trigger=trigger,
            plan=plan,
            messages=messages,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            encoding=counter.encoding,
            exact=counter.exact,
            iteration=state.iteration if state is not None else None,
            call=call,
        )
        self.last_event = event
        self._pending_events.append(event)
        self._flush(state)

    def _flush(self, state: AgentState | None) -> None:
        """Write events recorded without a state (sync :meth:`apply`) and our state into ``state``."""
        if state is None:
            return
        if self._pending_events:
            state.metadata.setdefault(EVENTS_KEY, []).extend(self._pending_events)
            self._pending_events = []
        state.metadata[STATE_KEY] = self.get_state()

    # -- the contract ------------------------------------------------------------------------
    def _view(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        raise NotImplementedError

    async def _aview(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        return self._view(messages, tools, state)

    def apply(self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None) -> list[Message]:
        """The view for one request (never calls a summariser; events wait for the next ``aapply``)."""
        return self._view(list(messages), tools, None)

    async def aapply(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        state: AgentState | None = None,
    ) -> list[Message]:
        """The view for one request; records events and this manager's state in ``state.metadata``."""
        self._flush(state)
        if state is not None:  # an agent's request: its tool schemas count in every view
            self._tools = list(tools) if tools else None
        return await self._aview(list(messages), tools, state)

    def reduce_context(self, agent: Any, e: BaseException | None = None) -> None:
        """The model reported a context overflow: the next view is cut harder (history is kept).

        The last view's size is a known upper bound of the real window: token budgets are capped
        at 70 % of it for this thread (``overflow_limit`` in the manager's state).
        """
        self._overflows += 1
        self._reduce_pending = True
        if self.last_view_tokens:
            limit = int(self.last_view_tokens * 0.7)
            self._overflow_limit = min(limit, self._overflow_limit or limit)

    def get_state(self) -> dict[str, Any]:
        out = {
            "v": 1,
            "manager": type(self).__name__,
            "plan": self._plan.to_json() if self._plan is not None else None,
            "overflows": self._overflows,
            "overflow_limit": self._overflow_limit,
        }
        window = self.window_tokens()
        if window is not None:
            out["window"] = window
        if self._tools:
            # The schemas the agent sent with its requests (they count in every view), so a
            # simulation of this thread counts what the agent counted without being handed them.
            out["tools"] = self._tools
        tokens = self._index.saved_counts()
        if tokens is not None:
            # Exact per-message counts, saved with the thread so it opens without encoding it all
            # again (tulip_nb.lab.open_thread checks them against the messages' bytes).
            out["tokens"] = tokens
        return out

    def restore_from_session(self, state: dict[str, Any]) -> None:
        plan = (state or {}).get("plan")
        self._plan = Plan.from_json(plan) if plan else None
        self._overflows = int((state or {}).get("overflows", 0))
        limit = (state or {}).get("overflow_limit")
        self._overflow_limit = int(limit) if limit else None
        self._reduce_pending = False
        tools = (state or {}).get("tools")
        self._tools = [dict(t) for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None


def saved_token_counts(state: AgentState, counter: TokenCounter) -> list[int] | None:
    """The exact token counts a manager saved with ``state`` for its first messages, if they hold.

    A :class:`PlanningManager` keeps each message's count in its state (``"tokens"``), which the
    agent saves with every checkpoint; they are reused only for ``counter``'s encoding and only
    while the messages they were made on are byte-for-byte the same. ``None`` otherwise.
    """
    saved = state.metadata.get(STATE_KEY)
    return known_counts(saved.get("tokens"), state.messages, counter) if isinstance(saved, dict) else None
