"""The tool results of a recorded thread, served by call position (the replay's recorded tools).

:class:`RecordedResults` answers a replayed tool call with the result recorded *at that call's
position* (:mod:`tulip_nb.core.calls`); :func:`pending_interrupts` finds the calls a record left
waiting for a human, so a recorded tool asks again where the record asked and got no answer.
Used by :class:`~tulip_nb.lab.Replay` (``tools="recorded"``) and the corpus sweep.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from tulip_nb.agent.turns import RUN_KEY, canonical_args
from tulip_nb.core import Message
from tulip_nb.core.calls import CallRef, answered_by, last_model_call, results_of
from tulip_nb.core.state import AgentState
from tulip_nb.core.turns import Turn
from tulip_nb.tools import Interrupt, Tool

__all__ = ["OUTCOME_UNKNOWN_PREFIX", "UNKNOWN_QUESTION", "RecordedResults", "pending_interrupts"]

OUTCOME_UNKNOWN_PREFIX: Final = "Error: OutcomeUnknown:"
"""How the result the agent writes for a call left unanswered (a pending interrupt, a killed run)
starts when the next turn closes it."""

UNKNOWN_QUESTION: Final = "(the recorded question is not kept: tulip_nb saves only the pending one)"


class RecordedResults:
    """The tool results of a record, by call position, for tools that answer from the record.

    :meth:`answer` serves the result recorded at the position ``where()`` names (the record's
    ``(assistant message index, call index)`` of the call being replayed) when the recorded call
    there is the same tool with canonically equal arguments. Otherwise (a call the record never
    answered there) it serves the latest result recorded for the same tool and arguments before
    that point, else the first after it; without a position (a live branch past the record) the
    latest one. A call the record never made raises :class:`LookupError`. A call the record
    left waiting for a human (``pending``: position -> question, a turn that ended
    ``interrupted``) raises :class:`~tulip_nb.tools.Interrupt` with its question again.
    """

    def __init__(self, record: Sequence[Message], pending: Mapping[CallRef, str] | None = None) -> None:
        self.record = list(record)
        self.pending = dict(pending or {})
        self.results: dict[CallRef, int] = {}
        self.by_call: dict[tuple[str, bytes], list[tuple[CallRef, int]]] = defaultdict(list)
        self.names: set[str] = set()
        for t, ref in enumerate(answered_by(self.record)):
            if ref is None:
                continue
            self.results[ref] = t
            call = self.record[ref[0]].tool_calls[ref[1]]
            self.by_call[(call.name, canonical_args(call.arguments))].append((ref, t))
        for m in self.record:
            self.names.update(c.name for c in m.tool_calls)

    def answer(self, name: str, arguments: dict[str, Any], at: CallRef | None) -> str:
        key = canonical_args(arguments)
        if at is not None and at in self.pending:
            raise Interrupt(self.pending[at])
        if at is not None:
            t = self.results.get(at)
            i, k = at
            calls = self.record[i].tool_calls if 0 <= i < len(self.record) else []
            if t is not None and k < len(calls) and calls[k].name == name and canonical_args(calls[k].arguments) == key:
                return self.record[t].content or ""
        hits = self.by_call.get((name, key))
        if not hits:
            where = f" at message {at[0]}, call {at[1]}" if at is not None else ""
            raise LookupError(f"no recorded result for {name}({arguments}){where}")
        if at is None:
            return self.record[hits[-1][1]].content or ""
        before = bisect_right([ref for ref, _ in hits], at)
        return self.record[hits[max(0, before - 1)][1]].content or ""

    def tools(self, like: dict[str, Tool], where: Callable[[], CallRef | None]) -> list[Tool]:
        """One tool per recorded (or ``like``) name, answering from the record at ``where()``."""
        tools = []
        for name in sorted(self.names | set(like)):

            async def recorded(_name: str = name, **arguments: Any) -> str:
                return self.answer(_name, arguments, where())

            real = like.get(name)
            params = real.parameters if real is not None else {"type": "object", "properties": {}}
            desc = real.description if real is not None else f"recorded results of {name}"
            tools.append(Tool(recorded, name=name, description=desc, parameters=params))
        return tools


def pending_interrupts(record: Sequence[Message], turns: Sequence[Turn], latest: AgentState) -> dict[CallRef, str]:
    """The calls the record left waiting for a human, by position, with their question: in each
    turn that ended ``interrupted``, the first call of its last model call without a real result
    (none yet, or the "outcome unknown" the next turn's start wrote)."""
    run = latest.metadata.get(RUN_KEY)
    pending = run.get("pending") if isinstance(run, dict) and run.get("status") == "interrupted" else None
    out: dict[CallRef, str] = {}
    for turn in turns:
        if turn.outcome != "interrupted":
            continue
        i = last_model_call(record, turn.last + 1)
        if i is None or i < turn.first:
            continue
        for k, t in enumerate(results_of(record, i)):
            if t is None or (record[t].content or "").startswith(OUTCOME_UNKNOWN_PREFIX):
                question = UNKNOWN_QUESTION
                if isinstance(pending, dict) and pending.get("position") in ([i, k], (i, k)):
                    question = str(pending.get("question", question))
                out[(i, k)] = question
                break
    return out
