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

**Calls a tulip agent made.** A thread tulip_nb saves can be resumed by a tulip agent (the real
SDK), which appends turns of its own. Those calls went through *tulip's* conversation manager, which
records nothing in the thread, so tulip_nb's events say nothing about them: applying the last
tulip_nb plan to them would show a view tulip never sent. A call is **tulip's** when the turn it
belongs to has outcome ``tulip`` in :func:`~tulip_nb.core.turns.split_turns` (a turn tulip_nb's turn
log does not cover, or every turn of a thread that carries no mark of tulip_nb at all). What such a
call saw is, by the ``tulip_view`` argument:

- ``"unknown"`` (the default): NA -- :func:`model_view` raises :class:`~tulip_nb.core.errors.UserError`
  naming the call and the argument, :func:`model_views` gives None for it (``Thread.usage`` shows NA);
- ``"full"``: the whole history before the call, which is what tulip's ``NullManager`` sends. Say
  so only when you know that agent ran the ``NullManager``: tulip's default manager compacts.

Calls no turn can attribute to tulip (a thread saved before tulip_nb kept a turn log, or a history
a manager was applied to outside an agent) are read from the events as always.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from tulip_nb.core import Message
from tulip_nb.core.calls import calls_before, model_call_count, model_call_index, model_calls
from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import EVENTS_KEY as EVENTS_KEY
from tulip_nb.core.keys import RUN_KEY
from tulip_nb.core.keys import STATE_KEY as STATE_KEY
from tulip_nb.core.turns import split_turns, turn_log
from tulip_nb.memory.conversation.plan import STUB_VERSION, Plan, fingerprint, render

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState

__all__ = ["TULIP_VIEWS", "make_event", "tulip_turns"]

TulipView = Literal["unknown", "full"]
"""What a call a tulip agent made is taken to have seen (see the module docstring)."""

TULIP_VIEWS: Final[tuple[str, ...]] = get_args(TulipView)


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


def tulip_turns(messages: Sequence[Message], metadata: Mapping[str, Any] | None) -> list[tuple[int, int]]:
    """Message spans ``(first, last)`` (inclusive) of the turns a tulip agent wrote, oldest first.

    Those are the turns :func:`~tulip_nb.core.turns.split_turns` gives outcome ``tulip``, except on a
    history that carries a tulip_nb manager's record (events or its state) but neither a turn log
    nor a run status: the manager was applied to it outside an agent, and its events are the record
    of every call.

    >>> from tulip_nb.core.keys import TURNS_KEY
    >>> msgs = [Message.user("a"), Message.assistant("b"), Message.user("c"), Message.assistant("d")]
    >>> tulip_turns(msgs, {TURNS_KEY: [{"at": 0, "outcome": "answered"}]})
    [(2, 3)]
    """
    meta = metadata or {}
    if (EVENTS_KEY in meta or STATE_KEY in meta) and turn_log(meta) is None and RUN_KEY not in meta:
        return []
    return [(t.first, t.last) for t in split_turns(messages, meta) if t.outcome == "tulip"]


def _in_spans(spans: list[tuple[int, int]], firsts: list[int], index: int) -> bool:
    k = bisect_right(firsts, index) - 1
    return k >= 0 and index <= spans[k][1]


def _check_tulip_view(tulip_view: str) -> None:
    if tulip_view not in TULIP_VIEWS:
        raise UserError(f"tulip_view must be one of {', '.join(map(repr, TULIP_VIEWS))}, got {tulip_view!r}")


def model_view(
    state: AgentState,
    call: int | None = None,
    *,
    n_messages: int | None = None,
    tulip_view: TulipView = "unknown",
) -> list[Message]:
    """What the model was sent for one call of this thread, rebuilt from the saved state alone.

    ``call=k`` is the call that produced the ``k``-th (0-based; negative counts from the end)
    assistant message (:func:`~tulip_nb.core.calls.model_call_index`; :class:`IndexError` when
    there is no such call); ``n_messages=j`` is the call made on the first ``j`` messages; neither:
    the view for the next call.

    A call a tulip agent made (see the module docstring) has no recorded view: with
    ``tulip_view="unknown"`` (the default) this raises :class:`~tulip_nb.core.errors.UserError`
    naming the call; ``tulip_view="full"`` gives the whole history before it (tulip's
    ``NullManager``).
    """
    _check_tulip_view(tulip_view)
    messages = state.messages
    if call is not None:
        n_messages = model_call_index(messages, call)
    n = len(messages) if n_messages is None else n_messages
    spans = tulip_turns(messages, state.metadata) if n < len(messages) else []
    if spans and _in_spans(spans, [s for s, _ in spans], n):
        if tulip_view == "full":
            return list(messages[:n])
        k = calls_before(messages, n)
        raise UserError(
            f"model call {k} (message {n}) was made by a tulip agent: tulip records no view of its "
            "calls, so what this one was sent is unknown; pass tulip_view='full' if that agent ran "
            "tulip's NullManager (it sends the whole history)"
        )
    return _view_of_prefix(messages, compaction_events(state), n)


def model_views(state: AgentState, *, tulip_view: TulipView = "unknown") -> list[list[Message] | None]:
    """The view of every model call of the thread, in order (one per assistant message).

    A call a tulip agent made is None (unknown) with ``tulip_view="unknown"``, the whole history
    before it with ``"full"`` (see :func:`model_view`). Costs one pass over the turns, then one
    lookup per call.
    """
    _check_tulip_view(tulip_view)
    events = compaction_events(state)
    plans = [Plan.from_json(e["plan"]) for e in events]  # parsed once, not once per call
    msgs = state.messages
    spans = tulip_turns(msgs, state.metadata)
    firsts = [s for s, _ in spans]
    views: list[list[Message] | None] = []
    for j in model_calls(msgs):
        if spans and _in_spans(spans, firsts, j):
            views.append(list(msgs[:j]) if tulip_view == "full" else None)
        else:
            views.append(_view_of_prefix(msgs, events, j, plans))
    return views
