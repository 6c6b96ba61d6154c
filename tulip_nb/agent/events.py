"""Hook events: frozen snapshots handed to hooks as the agent works.

A hook is any object with some of these methods (sync or async); each gets one event::

    class Printer:
        def on_tool_call(self, event):
            print(event.call.name, "->", event.error or event.result)

    Agent(..., hooks=[Printer()])

===========================  =====================================================================
``on_checkpoint_saved``      :class:`CheckpointSaved` — after every save
``on_checkpoint_loaded``     :class:`CheckpointLoaded` — after a thread is rehydrated
``on_model_call``            :class:`ModelCall` — the request exactly as sent, and the response
``on_tool_call``             :class:`ToolCalled` — one tool call's outcome
``on_iteration``             :class:`IterationDone` — end of one Think -> Execute iteration
``on_interrupt``             :class:`InterruptRaised` — a tool asked a human; the turn stops
``on_interrupt_answered``    :class:`InterruptAnswered` — ``resume(response=...)`` answered it
===========================  =====================================================================

Events are frozen dataclasses holding immutable values (tuples of frozen messages), so a hook
cannot change the run by accident. Application data belongs in ``state.metadata``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tulip_nb.core.messages import Message, ToolCall
from tulip_nb.core.state import ToolExecution
from tulip_nb.models.base import Usage

__all__ = [
    "CheckpointLoaded",
    "CheckpointSaved",
    "InterruptAnswered",
    "InterruptRaised",
    "IterationDone",
    "ModelCall",
    "ToolCalled",
    "emit",
]


@dataclass(frozen=True)
class CheckpointSaved:
    thread_id: str
    checkpoint_id: str
    kind: str
    """Why it was saved: ``iteration``, ``final``, ``interrupt``, ``error``, ``stopped``, ``fork``, ``update``."""
    iteration: int
    message_count: int


@dataclass(frozen=True)
class CheckpointLoaded:
    thread_id: str
    checkpoint_id: str | None
    iteration: int
    message_count: int


@dataclass(frozen=True)
class ModelCall:
    thread_id: str | None
    iteration: int
    request: tuple[Message, ...]
    response: Message
    usage: Usage
    duration_ms: float


@dataclass(frozen=True)
class ToolCalled:
    thread_id: str | None
    iteration: int
    call: ToolCall
    result: Any
    error: str | None
    cache_hit: bool
    duration_ms: float
    position: tuple[int, int] | None = None
    """The call's identity: ``(assistant message index, call index)`` (ids are not unique)."""


@dataclass(frozen=True)
class IterationDone:
    thread_id: str | None
    iteration: int
    response: Message | None
    tool_results: tuple[ToolExecution, ...]
    checkpoint_id: str | None


@dataclass(frozen=True)
class InterruptRaised:
    thread_id: str | None
    iteration: int
    question: str
    tool_name: str
    tool_call_id: str
    arguments: dict[str, Any]
    payload: Any


@dataclass(frozen=True)
class InterruptAnswered:
    thread_id: str | None
    iteration: int
    tool_name: str
    tool_call_id: str
    question: str
    response: Any


async def emit(hooks: Sequence[Any], name: str, event: Any) -> None:
    """Call ``hook.<name>(event)`` on every hook that has it, awaiting async ones."""
    for hook in hooks:
        method = getattr(hook, name, None)
        if method is None:
            continue
        out = method(event)
        if inspect.isawaitable(out):
            await out
