"""Compaction events: a saved thread says exactly what the model saw at every call.

Whenever a manager changes the model's view it appends one event (a JSON object) to
``state.metadata[EVENTS_KEY]``::

    {"v": 1, "manager": "LLMCompactor", "trigger": "threshold",   # or "overflow", "window"
     "iteration": 3, "call": 41, "n_messages": 118,                # history length given to it
     "tokens_before": 104233, "tokens_after": 61877, "encoding": "o200k_base", "exact": true,
     "plan": {"n": 118, "fp": ..., "kept": [[0, 9], [80, 118]], "pruned": [[85, 86]],
              "summarized": [[9, 80]], "summary": "...", "summary_at": 9},
     "dropped": [], "stub": 1}

Index ranges are half-open ``[start, end)`` into the thread's ``messages``. A plan covers the
first ``n`` messages; messages appended later are shown verbatim until the next event. A manager
records an event only when the view changes otherwise: the sliding window, which re-cuts on every
call, records one each time its cut point moves (a call whose view is the previous plan's plus the
new messages needs none).

The model call that produced the ``k``-th assistant message of a thread saw the history before
that message; :func:`model_view` rebuilds that view from the saved state alone::

    view = model_view(state, call=k)          # list[Message], as sent to the model
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tulip_nb.core.calls import model_call_count, model_call_index, model_calls
from tulip_nb.core.keys import EVENTS_KEY, STATE_KEY
from tulip_nb.core.messages import Message
from tulip_nb.memory.conversation.plan import STUB_VERSION, Plan, fingerprint, render

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState

__all__ = ["EVENTS_KEY", "STATE_KEY", "compaction_events", "make_event", "model_view", "model_views"]


def make_event(
    *,
    manager: str,
    trigger: str,
    plan: Plan,
    messages: Sequence[Message],
    tokens_before: int,
    tokens_after: int,
    encoding: str,
    exact: bool,
    iteration: int | None,
    call: int | None = None,
) -> dict[str, Any]:
    """One event (see the module docstring) for ``plan`` made on ``messages``.

    ``call`` (the number of assistant messages in ``messages``) is counted when not given.
    """
    if call is None:
        call = model_call_count(messages)
    return {
        "v": 1,
        "manager": manager,
        "trigger": trigger,
        "iteration": iteration,
        "call": call,
        "n_messages": len(messages),
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "encoding": encoding,
        "exact": exact,
        "plan": plan.to_json(),
        "dropped": [list(r) for r in plan.dropped()],
        "stub": STUB_VERSION,
    }


def compaction_events(state: AgentState) -> list[dict[str, Any]]:
    """The events recorded in ``state`` (oldest first)."""
    events = state.metadata.get(EVENTS_KEY) or []
    return list(events)


def _view_of_prefix(
    messages: Sequence[Message], events: list[dict[str, Any]], n: int, plans: list[Plan] | None = None
) -> list[Message]:
    # The newest event made on a prefix of messages[:n] that is still part of this history.
    for k in range(len(events) - 1, -1, -1):
        plan = plans[k] if plans is not None else Plan.from_json(events[k]["plan"])
        if plan.n <= n and plan.fp == fingerprint(messages, plan.n):
            return render(plan, messages[:n])
    return list(messages[:n])


def model_view(state: AgentState, call: int | None = None, *, n_messages: int | None = None) -> list[Message]:
    """What the model was sent for one call of this thread, rebuilt from the saved state alone.

    ``call=k`` is the call that produced the ``k``-th (0-based; negative counts from the end)
    assistant message (:func:`~tulip_nb.core.calls.model_call_index`; :class:`IndexError` when
    there is no such call); ``n_messages=j`` is the call made on the first ``j`` messages; neither:
    the view for the next call.
    """
    messages = state.messages
    if call is not None:
        n_messages = model_call_index(messages, call)
    n = len(messages) if n_messages is None else n_messages
    return _view_of_prefix(messages, compaction_events(state), n)


def model_views(state: AgentState) -> list[list[Message]]:
    """The view of every model call of the thread, in order (one per assistant message)."""
    events = compaction_events(state)
    plans = [Plan.from_json(e["plan"]) for e in events]  # parsed once, not once per call
    msgs = state.messages
    return [_view_of_prefix(msgs, events, j, plans) for j in model_calls(msgs)]
