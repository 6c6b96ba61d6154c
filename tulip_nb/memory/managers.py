"""Conversation managers: what the model sees of a thread, one request at a time.

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
from typing import TYPE_CHECKING, Any

from tulip_nb.core.messages import Message

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState

__all__ = ["EVENTS_KEY", "STATE_KEY", "ConversationManager", "NullConversationManager", "NullManager"]

STATE_KEY = "tulip_nb_manager_state"
"""``state.metadata`` key holding the manager's own state (``get_state()``) for this thread."""

EVENTS_KEY = "tulip_nb_compaction_events"
"""``state.metadata`` key holding the list of compaction events recorded for this thread."""


class ConversationManager(ABC):  # noqa: B024 - every method has a usable default
    """Base class for conversation managers (seed 002's interface plus tulip's ``apply``)."""

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

    def apply_management(self, agent: Any) -> None:
        """Called after each turn with the agent (``agent.messages`` is the history)."""

    def reduce_context(self, agent: Any, e: BaseException | None = None) -> None:
        """Called when the model reports a context overflow; make the next request smaller."""

    def get_state(self) -> dict[str, Any]:
        """This manager's state for the thread (JSON-serialisable)."""
        return {}

    def restore_from_session(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned, after a thread is loaded."""

    def clone_for_spawn(self) -> ConversationManager:
        """A fresh manager with the same configuration for a spawned worker agent."""
        return type(self)()


class NullManager(ConversationManager):
    """No management: the model sees the whole history."""

    def clone_for_spawn(self) -> NullManager:
        return NullManager()


NullConversationManager = NullManager


def default_manager(context_window: int | None, max_iterations: int = 20) -> ConversationManager:
    """The manager an agent gets when none is given (seed 000).

    A known context window -> ``LLMCompactor(context_length=window)`` without a summariser; an
    unknown one -> ``SlidingWindowManager(window_size=max(20, max_iterations * 2))``.
    """
    from tulip_nb.memory import compactor  # the managers live there; imported lazily

    return compactor.default_conversation_manager(context_window, max_iterations)
