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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tulip_nb.core.calls import last_model_call, model_calls, pair_block
from tulip_nb.core.messages import Message
from tulip_nb.core.state import AgentState
from tulip_nb.models.base import ModelError, ModelResponse, Usage

__all__ = ["Divergence", "ReplayDiverged", "ReplayModel"]


@dataclass(frozen=True)
class Divergence:
    """Call ``call_index`` saw ``actual`` where the recording had ``expected`` (input messages)."""

    call_index: int
    expected: list[Message]
    actual: list[Message]


class ReplayDiverged(ModelError):
    """A strict replay met input that differs from the recording."""


def _tail(messages: Sequence[Message], end: int | None = None) -> list[Message]:
    """The messages of ``messages[:end]`` after its last assistant message (the new input of one
    request; all but the system prompt when there is none)."""
    stop = len(messages) if end is None else end
    i = last_model_call(messages, stop)
    if i is not None:
        return list(messages[i + 1 : stop])
    return [m for m in messages[:stop] if m.role != "system"]


def _keys(messages: Sequence[Message], end: int | None = None) -> list[tuple[Any, ...]]:
    """What is compared of the new input: role and content of each message, and for a tool result
    the index of the call it answers, by position (:mod:`tulip_nb.core.calls`) — not its id, which
    a provider may reuse or leave empty."""
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
    """Answers with a recorded thread's assistant messages, in order (see the module docstring)."""

    def __init__(
        self, recording: AgentState | Sequence[Message], *, strict: bool = False, name: str = "replay"
    ) -> None:
        messages = list(recording.messages if isinstance(recording, AgentState) else recording)
        self.name = name
        self.strict = strict
        self._messages = messages
        self._answers: list[tuple[int, Message]] = [(i, messages[i]) for i in model_calls(messages)]
        self.calls = 0
        self.divergences: list[Divergence] = []

    @property
    def remaining(self) -> int:
        return len(self._answers) - self.calls

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> ModelResponse:
        index = self.calls
        if index >= len(self._answers):
            raise ModelError(f"ReplayModel has no recorded answer for call {index + 1} ({len(self._answers)} recorded)")
        self.calls += 1
        at, answer = self._answers[index]
        if _keys(self._messages, at) != _keys(messages):
            div = Divergence(index, _tail(self._messages, at), _tail(messages))
            self.divergences.append(div)
            if self.strict:
                raise ReplayDiverged(f"replay diverged at model call {index + 1}", call_index=index)
        return ModelResponse(answer, Usage(requests=1))
