"""Turns: a user message and everything the agent did for it, including how it ended.

A thread is a list of messages; researchers think in *turns*. A turn starts at a user message and
runs to the message before the next one. How it ended is its **outcome**:

========================  ====================================================================
``answered``              the model answered without asking for tools (or a terminal tool ran)
``error``                 the run raised (a provider error, a bad response, ...): ``error`` has it
``context_exceeded``      what had to be kept did not fit the window (``ContextWindowExceeded``)
``max_iterations``        the agent stopped at its iteration limit, the last calls answered
``interrupted``           a tool asked a human and the turn is waiting for the answer
``tulip``                 written by a tulip agent: tulip_nb has no record of how it ended
========================  ====================================================================

The agent records each turn's end in the state's metadata under :data:`TURNS_KEY` (one small
record per turn, keyed by the index of its user message: ``{"at": 7, "outcome": "error",
"error": "ModelError: provider 500", "run_id": "..."}``), because the messages alone cannot tell a
failed turn from an unanswered one. :func:`split_turns` joins the messages with that log. A turn
the log does not cover is ``tulip`` (the agent writes a ``running`` record when a turn starts, so
every tulip_nb turn has one; tulip keeps unknown metadata keys but writes none). A thread with no
log at all (written before it existed) is read from what can be seen: ``answered`` when a turn ends
with an answer, the last turn from the run status. When nothing tells -- a turn still running or
killed mid-way, an old turn that ended without an answer -- the outcome is ``None``: unknown,
never a guess.

>>> from tulip_nb.core import Message
>>> msgs = [Message.system("Be brief."), Message.user("one"), Message.assistant("ok"),
...         Message.user("fail please"), Message.user("three"), Message.assistant("ok")]
>>> log = [{"at": 1, "outcome": "answered"}, {"at": 3, "outcome": "error", "error": "ModelError: 500"},
...        {"at": 4, "outcome": "answered"}]
>>> [(t.turn, t.first, t.last, t.outcome) for t in split_turns(msgs, {TURNS_KEY: log})]
[(0, 1, 2, 'answered'), (1, 3, 3, 'error'), (2, 4, 5, 'answered')]
>>> split_turns(msgs, {TURNS_KEY: log})[1].error_class
'ModelError'
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from tulip_nb.core._messages import Message
from tulip_nb.core.keys import RUN_KEY
from tulip_nb.core.keys import TURNS_KEY as TURNS_KEY

__all__ = [
    "FAILED_OUTCOMES",
    "OUTCOMES",
    "Outcome",
    "Turn",
    "outcome_for",
    "record_turn",
    "split_turns",
    "turn_index",
    "turn_log",
    "turn_log_for_prefix",
    "turn_starts",
]

Outcome = Literal["answered", "error", "context_exceeded", "max_iterations", "interrupted", "tulip"]

OUTCOMES: Final[tuple[str, ...]] = (
    "answered",
    "error",
    "context_exceeded",
    "max_iterations",
    "interrupted",
    "tulip",
)
"""Every outcome a turn can have, in the order tables show them."""

FAILED_OUTCOMES: Final[tuple[str, ...]] = ("error", "context_exceeded", "max_iterations", "interrupted")
"""Outcomes of a turn that ended without an answer."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a thread: messages ``first..last`` (inclusive) and how it ended.

    ``turn`` is 0-based; ``first`` is the index of its user message. ``outcome`` is None when
    nothing records or shows how the turn ended. ``recorded`` is True when the outcome comes from
    the agent's turn log (not inferred). ``model_calls`` counts the turn's assistant messages (a
    call that failed left none); ``tool_calls`` the calls they asked for.
    """

    turn: int
    first: int
    last: int
    outcome: str | None
    error: str | None
    model_calls: int
    tool_calls: int
    recorded: bool
    interrupts: int = 0

    @property
    def error_class(self) -> str | None:
        """The exception class name of a failed turn's error (``"ModelError"``), else None."""
        if not self.error:
            return None
        head, sep, _ = self.error.partition(":")
        return head.strip() if sep else self.error.strip()

    @property
    def failed(self) -> bool:
        """True when the turn ended without an answer (an error, the window, the limit, waiting)."""
        return self.outcome in FAILED_OUTCOMES


def outcome_for(status: str, *, stop_reason: str | None = None, error: str | None = None) -> str:
    """The outcome of a turn the agent ended with ``status`` (its run status record).

    >>> outcome_for("complete", stop_reason="max_iterations"), outcome_for("error", error="ContextWindowExceeded: x")
    ('max_iterations', 'context_exceeded')
    """
    if status == "interrupted":
        return "interrupted"
    if status == "error":
        head = (error or "").partition(":")[0].strip()
        return "context_exceeded" if head == "ContextWindowExceeded" else "error"
    if stop_reason == "max_iterations":
        return "max_iterations"
    return "answered"


def turn_starts(messages: Sequence[Message]) -> list[int]:
    """Indexes of the user messages: where each turn starts."""
    return [i for i, m in enumerate(messages) if m.role == "user"]


def turn_index(starts: Sequence[int], message_index: int) -> int | None:
    """The 0-based turn message ``message_index`` belongs to (None before the first user message)."""
    k = bisect_right(starts, message_index) - 1
    return k if k >= 0 else None


def turn_log(metadata: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """The turn records saved in ``metadata`` (None when the thread has no turn log at all)."""
    log = (metadata or {}).get(TURNS_KEY)
    if not isinstance(log, list):
        return None
    return [r for r in log if isinstance(r, dict) and isinstance(r.get("at"), int)]


def record_turn(metadata: dict[str, Any], messages: Sequence[Message], record: Mapping[str, Any]) -> None:
    """Append ``record`` (an outcome, an error, a run id) to ``metadata``'s turn log for the current turn.

    The current turn is the one of the last user message in ``messages``. The log only grows: a
    turn has its ``running`` record from its start and its outcome record after it (and one per
    interrupt it went on from); the newest record of a turn is its outcome. Appending keeps a save
    that stores what changed (the file store's delta log) at the cost of the new record. The list
    is replaced, never mutated, so a state snapshot that shares it keeps its own records.
    """
    at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
    if at is None:
        return
    log = list(turn_log(metadata) or [])
    while log and log[-1]["at"] > at:  # records of turns a branch cut away
        log.pop()
    log.append({"at": at, **{k: v for k, v in record.items() if v is not None}})
    metadata[TURNS_KEY] = log


def turn_log_for_prefix(metadata: Mapping[str, Any] | None, messages: Sequence[Message], n: int) -> list[Any] | None:
    """The turn log of a branch that keeps ``messages[:n]``: records of the turns it keeps whole.

    A turn cut in the middle loses its record (its outcome is no longer the recorded one). None
    when there was no log.
    """
    log = turn_log(metadata)
    if log is None:
        return None
    starts = turn_starts(messages)
    whole = {s for k, s in enumerate(starts) if (starts[k + 1] if k + 1 < len(starts) else len(messages)) <= n}
    return [r for r in log if r["at"] in whole]


def _inferred(messages: Sequence[Message], first: int, last: int) -> str | None:
    tail = messages[last]
    if tail.role == "assistant" and not tail.tool_calls and last > first:
        return "answered"
    return None


def split_turns(messages: Sequence[Message], metadata: Mapping[str, Any] | None = None) -> list[Turn]:
    """The turns of a thread whose latest state has ``messages`` and ``metadata``.

    Outcomes come from the turn log (:data:`TURNS_KEY`) where it covers a turn; see the module
    docstring for the rest.
    """
    starts = turn_starts(messages)
    log = turn_log(metadata)
    by_at = {r["at"]: r for r in log or ()}  # a turn's newest record is its outcome
    went_on: dict[int, int] = {}  # interrupts each turn was resumed from
    for r in log or ():
        if r.get("outcome") == "interrupted":
            went_on[r["at"]] = went_on.get(r["at"], 0) + 1
    first_logged = min(by_at) if by_at else None
    ours = log is not None or RUN_KEY in (metadata or {})
    run = (metadata or {}).get(RUN_KEY)
    run = run if isinstance(run, dict) else {}
    turns: list[Turn] = []
    for k, first in enumerate(starts):
        last = (starts[k + 1] if k + 1 < len(starts) else len(messages)) - 1
        calls = [m for m in messages[first : last + 1] if m.role == "assistant"]
        record = by_at.get(first)
        error: str | None = None
        interrupts = 0
        if record is not None:
            outcome: str | None = str(record.get("outcome")) if record.get("outcome") in OUTCOMES else None
            error = record.get("error") if isinstance(record.get("error"), str) else None
            interrupts = went_on.get(first, 0) - (outcome == "interrupted")
        elif not ours or (first_logged is not None and first > first_logged):
            outcome = "tulip"  # tulip_nb records every turn it starts: tulip wrote this one
        elif k == len(starts) - 1 and run.get("status") not in (None, "running"):
            outcome = outcome_for(str(run["status"]), stop_reason=run.get("stop_reason"), error=run.get("error"))
            error = run.get("error") if outcome in ("error", "context_exceeded") else None
        else:
            outcome = _inferred(messages, first, last)
        turns.append(
            Turn(
                turn=k,
                first=first,
                last=last,
                outcome=outcome,
                error=error,
                model_calls=len(calls),
                tool_calls=sum(len(m.tool_calls) for m in calls),
                recorded=record is not None,
                interrupts=interrupts,
            )
        )
    return turns
