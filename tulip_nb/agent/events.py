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

Subclass :class:`Hooks` for typed no-op defaults. An ``on_*`` method that no event calls (a typo
such as ``on_tool_calls``) is refused when the hook is registered, not silently never called.

Events are frozen dataclasses holding immutable values (tuples of frozen messages), so a hook
cannot change the run by accident. Application data belongs in ``state.metadata``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from tulip_nb.core import Message, ToolCall
from tulip_nb.core.errors import UserError
from tulip_nb.core.state import ToolExecution
from tulip_nb.models import Usage

__all__ = ["HOOK_NAMES", "HookName", "InterruptAnswered", "InterruptRaised", "check_hooks", "emit"]


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


HookName = Literal[
    "on_checkpoint_saved",
    "on_checkpoint_loaded",
    "on_model_call",
    "on_tool_call",
    "on_iteration",
    "on_interrupt",
    "on_interrupt_answered",
]
"""The events an agent emits (the table in the module docstring)."""

HOOK_NAMES: frozenset[str] = frozenset(get_args(HookName))


class Hooks:
    """A base for hooks: every event method, as a no-op. Subclass it and override what you need
    (any object with some of these methods works too; the names are checked either way)::

        class Printer(Hooks):
            def on_tool_call(self, event: ToolCalled) -> None:
                print(event.call.name, "->", event.error or event.result)
    """

    def on_checkpoint_saved(self, event: CheckpointSaved) -> Any:
        """After every save."""

    def on_checkpoint_loaded(self, event: CheckpointLoaded) -> Any:
        """After a thread is rehydrated."""

    def on_model_call(self, event: ModelCall) -> Any:
        """The request exactly as sent, and the response."""

    def on_tool_call(self, event: ToolCalled) -> Any:
        """One tool call's outcome."""

    def on_iteration(self, event: IterationDone) -> Any:
        """The end of one Think -> Execute iteration."""

    def on_interrupt(self, event: InterruptRaised) -> Any:
        """A tool asked a human; the turn stops."""

    def on_interrupt_answered(self, event: InterruptAnswered) -> Any:
        """``resume(response=...)`` answered the pending question."""


def check_hooks(hooks: Sequence[Any]) -> tuple[Any, ...]:
    """``hooks`` as a tuple, refusing a hook with an ``on_*`` method no event has (a typo such
    as ``on_tool_calls`` would otherwise never fire)."""
    out = tuple(hooks)
    for hook in out:
        names = [n for n in dir(hook) if n.startswith("on_") and callable(getattr(hook, n, None))]
        unknown = sorted(set(names) - HOOK_NAMES - set(getattr(hook, "extra_hook_methods", ())))
        if unknown:
            raise UserError(
                f"hook {hook!r} has {', '.join(unknown)}, which no event calls; the events are "
                f"{', '.join(sorted(HOOK_NAMES))} (name other methods without the on_ prefix)"
            )
    return out


async def emit(hooks: Sequence[Any], name: HookName, event: Any) -> None:
    """Call ``hook.<name>(event)`` on every hook that has it, awaiting async ones."""
    for hook in hooks:
        method = getattr(hook, name, None)
        if method is None:
            continue
        out = method(event)
        if inspect.isawaitable(out):
            await out
