"""ReplayModel: serve the assistant messages recorded in a saved thread, and notice divergence.

Replaying a thread cell by cell means running the agent again with a model that answers exactly
what the original model answered. ``ReplayModel(state)`` does that; before each answer it compares
the new input since the previous assistant message (user and tool messages: role, text, and for a
tool result the call it answers, by position, never by id) with what was recorded at that point. A
difference (a tool now returns something else, a prompt was edited) is recorded in
:attr:`ReplayModel.divergences` (or raised with ``strict=True``) — that is where a replay stops
being a faithful copy of the original run::

    model = ReplayModel(await checkpointer.load("ticket-8912-refund"))
    ...
    model.divergences   # [] when the replay matches

**By turn.** A thread is a list of turns, and not every turn ends with an answer (a provider
error, ``ContextWindowExceeded``, ``max_iterations``, an interrupt; :mod:`tulip_nb.core.turns`).
Served strictly in order, the answer after a failed turn would be the *next* turn's. A driver that
knows the turns (:class:`tulip_nb.lab.Replay`) calls :meth:`ReplayModel.begin_turn` at each
turn's start: the model then serves only that turn's recorded answers, and when the turn's
answers are used up it raises what the record says happened next — for a turn that failed with
an error, a :class:`ReplayedFailure` named and worded as the recorded error (``type(e).__name__``
and ``str(e)`` give back ``"ModelError: provider 500"``); otherwise a :class:`ModelError` saying
that the record has no such call. Without :meth:`begin_turn` it serves the answers in order.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from tulip_nb.core import Message
from tulip_nb.core.calls import last_model_call, model_calls, pair_block
from tulip_nb.core.state import AgentState
from tulip_nb.core.turns import Turn
from tulip_nb.models._base import ModelError, ModelResponse, Usage

__all__ = ["Recording", "ReplayedFailure"]


class _HasFinalMessages(Protocol):
    """A handle on a saved thread (:class:`tulip_nb.lab.Thread`): its latest messages."""

    @property
    def final_messages(self) -> list[Message]: ...


Recording = AgentState | Sequence[Message] | _HasFinalMessages
"""What a :class:`ReplayModel` serves: a saved state, its messages, or a thread handle
(anything with ``final_messages``, as :class:`tulip_nb.lab.Thread` has)."""


@dataclass(frozen=True)
class Divergence:
    """Call ``call_index`` saw ``actual`` where the recording had ``expected`` (input messages)."""

    call_index: int
    expected: list[Message]
    actual: list[Message]


class ReplayDiverged(ModelError):
    """A strict replay met input that differs from the recording."""


class ReplayedFailure(ModelError):
    """A recorded turn failure raised again where the record failed (not a real model call).

    :meth:`ReplayedFailure.of` builds one from the recorded error text (``"ModelError: provider
    500"``): an instance of a subclass *named* as the recorded class, so the agent records it as
    ``f"{type(e).__name__}: {e}"`` -- the recorded text, byte for byte. ``recorded`` keeps that
    text, ``outcome`` the turn's recorded outcome (``error`` or ``context_exceeded``), ``turn``
    its number. It is never a :class:`~tulip_nb.models._base.ContextWindowExceeded`, so the agent
    does not retry it.

    >>> e = ReplayedFailure.of("ModelError: provider 500", outcome="error", turn=1)
    >>> type(e).__name__, str(e), isinstance(e, ReplayedFailure), e.recorded
    ('ModelError', 'provider 500', True, 'ModelError: provider 500')
    """

    _named: ClassVar[dict[str, type[ReplayedFailure]]] = {}

    def __init__(self, message: str, *, recorded: str, outcome: str, turn: int | None) -> None:
        super().__init__(message)
        self.recorded = recorded
        self.outcome = outcome
        self.turn = turn

    @classmethod
    def of(cls, error: str | None, *, outcome: str, turn: int | None) -> ReplayedFailure:
        """The failure recorded as ``error`` (None: the record says the turn failed, not how)."""
        if not error:
            where = f"turn {turn}" if turn is not None else "this turn"
            text = f"the record says {where} ended with {outcome!r} but not with which error"
            return cls(text, recorded=f"{cls.__name__}: {text}", outcome=outcome, turn=turn)
        head, sep, rest = error.partition(": ")
        name = head.strip() if sep and head.strip() and " " not in head.strip() else cls.__name__
        message = rest if name == head.strip() else error
        sub = cls._named.get(name)
        if sub is None:
            sub = cls if name == cls.__name__ else type(name, (cls,), {"__module__": cls.__module__})
            cls._named[name] = sub
        return sub(message, recorded=error, outcome=outcome, turn=turn)


def _tail(messages: Sequence[Message], end: int | None = None) -> list[Message]:
    """The messages of ``messages[:end]`` after its last assistant message (the new input of one
    request; all but the system prompt when there is none)."""
    stop = len(messages) if end is None else end
    i = last_model_call(messages, stop)
    if i is not None:
        return list(messages[i + 1 : stop])
    return [m for m in messages[:stop] if m.role != "system"]


def _model_input(messages: Sequence[Message], end: int | None = None) -> list[tuple[Any, ...]]:
    """What is compared of the new input: role and content of each message, and for a tool result
    the index of the call it answers, by position (:mod:`tulip_nb.core.calls`) — not its id, which
    a provider may reuse or leave empty. This is not "the same message"
    (:func:`tulip_nb.core.canonical.same_message`, what a :class:`~tulip_nb.lab.Replay` compares its
    new messages with): it is what the recorded model was asked, so a message's ``metadata`` and
    ``name`` (the agent's bookkeeping, which a replay writes its own way) do not count."""
    stop = len(messages) if end is None else end
    i = last_model_call(messages, stop)
    if i is None:
        return [(m.role, m.content, None) for m in messages[:stop] if m.role != "system"]
    calls = messages[i].tool_calls
    block = i + 1
    while block < stop and messages[block].role == "tool":
        block += 1
    answers = pair_block([c.id for c in calls], [messages[t].tool_call_id for t in range(i + 1, block)])
    out: list[tuple[Any, ...]] = [
        (m.role, m.content, answers[t - i - 1] if t < block else None)
        for t, m in enumerate(messages[i + 1 : stop], i + 1)
    ]
    return out


class ReplayModel:
    """Answers with a recorded thread's assistant messages, in order or turn by turn (see the
    module docstring). ``recording``: a saved :class:`AgentState`, its messages, or a lab
    :class:`~tulip_nb.lab.Thread` (its final messages). ``calls`` counts the answers served,
    ``last_served`` is the record's index of the last one (None before the first)."""

    def __init__(self, recording: Recording, *, strict: bool = False, name: str = "replay") -> None:
        if isinstance(recording, AgentState):
            messages = list(recording.messages)
        elif isinstance(recording, Sequence):
            messages = list(recording)
        else:
            messages = list(recording.final_messages)
        self.name = name
        self.strict = strict
        self._messages = messages
        self._answers: list[tuple[int, Message]] = [(i, messages[i]) for i in model_calls(messages)]
        self._at = [i for i, _ in self._answers]
        self._next = 0
        self._stop: int | None = None
        self._turn: Turn | None = None
        self.calls = 0
        self.last_served: int | None = None
        self.divergences: list[Divergence] = []

    @property
    def remaining(self) -> int:
        """Recorded answers not served yet."""
        return len(self._answers) - self.calls

    def begin_turn(self, turn: Turn) -> None:
        """Serve ``turn``'s recorded answers next, and only those (module docstring)."""
        self._next = bisect_left(self._at, turn.first)
        self._stop = bisect_left(self._at, turn.last + 1)
        self._turn = turn

    def _exhausted(self, index: int) -> ModelError:
        turn = self._turn
        if turn is None:
            return ModelError(
                f"ReplayModel has no recorded answer for call {index + 1} ({len(self._answers)} recorded)"
            )
        if turn.outcome in ("error", "context_exceeded"):
            return ReplayedFailure.of(turn.error, outcome=turn.outcome, turn=turn.turn)
        made = turn.model_calls
        return ModelError(
            f"ReplayModel has no recorded answer for model call {made + 1} of turn {turn.turn} "
            f"(the record made {made}, and the turn ended {turn.outcome or 'without a recorded outcome'})"
        )

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> ModelResponse:
        index = self._next
        if index >= len(self._answers) or (self._stop is not None and index >= self._stop):
            raise self._exhausted(index)
        self._next += 1
        self.calls += 1
        at, answer = self._answers[index]
        self.last_served = at
        if _model_input(self._messages, at) != _model_input(messages):
            div = Divergence(index, _tail(self._messages, at), _tail(messages))
            self.divergences.append(div)
            if self.strict:
                raise ReplayDiverged(f"replay diverged at model call {index + 1}", call_index=index)
        return ModelResponse(answer, Usage(requests=1))
