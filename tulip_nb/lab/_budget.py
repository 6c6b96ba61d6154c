"""What a saved thread's token plot is drawn against: its manager's trigger and window, and where
turns failed.

A token-aware manager saves its state with every checkpoint (``state.metadata[STATE_KEY]``):
``"window"`` is the context window it bounds every view by (:func:`~tulip_nb.lab._window.saved_window`)
and ``"config"`` its settings (:func:`~tulip_nb.lab._recorded.recorded_config`). The trigger is the
size of a view above which it compacts, from those settings: an
:class:`~tulip_nb.memory.compactor.LLMCompactor`'s ``trigger_tokens`` (``trigger_fraction`` of its
window, capped after a context overflow as the saved ``overflow_limit`` says), a
:class:`~tulip_nb.memory.managers.SummarizingConversationManager`'s ``trigger_fraction`` of its
``context_length``. A thread saved without them (a :class:`~tulip_nb.memory.managers.NullManager`,
a sliding window, an older tulip_nb, tulip) has an unknown trigger and window: None here, and
nothing is drawn for them.

A turn that ended without an answer (a model error, :class:`~tulip_nb.core.errors.ContextWindowExceeded`,
``max_iterations``, an interrupt left waiting) is one the thread's turn log records as failed
(:mod:`tulip_nb.core.turns`); :func:`failed_turn_positions` places each after the model calls it made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import STATE_KEY
from tulip_nb.lab._recorded import recorded_config
from tulip_nb.lab._window import saved_window
from tulip_nb.memory.compactor import LLMCompactor

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState
    from tulip_nb.lab._thread import Thread

__all__ = ["Limits", "failed_turn_positions", "recorded_limits"]


@dataclass(frozen=True)
class Limits:
    """A trigger and a window in tokens; None: not known."""

    trigger: int | None = None
    window: int | None = None


def _positive(value: object) -> int | None:
    return value if type(value) is int and value > 0 else None


def recorded_limits(state: AgentState) -> Limits:
    """The trigger and window the thread's manager saved with ``state`` (module docstring).

    >>> from tulip_nb.core.state import AgentState
    >>> ran = {"window": 6000, "config": {"kind": "compactor", "context_length": 6000, "trigger_fraction": 0.8}}
    >>> recorded_limits(AgentState(metadata={"tulip_nb_manager_state": ran}))
    Limits(trigger=4800, window=6000)
    >>> recorded_limits(AgentState())
    Limits(trigger=None, window=None)
    """
    return Limits(trigger=_trigger(state), window=saved_window(state))


def _trigger(state: AgentState) -> int | None:
    saved = state.metadata.get(STATE_KEY)
    config = recorded_config(state)
    if not isinstance(saved, dict) or config is None:
        return None
    length, fraction = _positive(config.get("context_length")), config.get("trigger_fraction")
    if length is None or not isinstance(fraction, int | float) or isinstance(fraction, bool):
        return None
    if config["kind"] == "compactor":
        try:
            ran = LLMCompactor(context_length=length, trigger_fraction=float(fraction))
        except UserError:
            return None  # settings no compactor takes: not a trigger we can state
        ran.restore_from_session(saved)  # an overflow capped its budgets: the saved overflow_limit
        return ran.trigger_tokens
    if config["kind"] == "summarizing" and fraction > 0:
        return int(min(float(fraction), 1.0) * length)  # it summarises above this many tokens
    return None


def failed_turn_positions(thread: Thread) -> list[float]:
    """Where the thread's failed turns sit on a per-call axis: ``k - 0.5`` for a turn that ended
    without an answer (an error, the window, ``max_iterations``, an interrupt left waiting; see
    :mod:`tulip_nb.core.turns`) after ``k`` model calls in all, oldest first, one per turn."""
    before = 0
    out = []
    for turn in thread.turn_list:
        before += turn.model_calls
        if turn.failed:
            out.append(before - 0.5)
    return out
