"""ReplayModel: serve the assistant messages recorded in a saved thread, and notice divergence.

Replaying a thread cell by cell means running the agent again with a model that answers exactly
what the original model answered. ``ReplayModel(state)`` does that; before each answer it compares
the new input since the previous assistant message (user and tool messages) with what was recorded
at that point. A difference (a tool now returns something else, a prompt was edited) is recorded in
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


def _tail(messages: Sequence[Message]) -> list[Message]:
    """The messages after the last assistant message (the new input of one request)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            return list(messages[i + 1 :])
    return [m for m in messages if m.role != "system"]


def _key(m: Message) -> tuple[Any, ...]:
    return (m.role, m.content, m.tool_call_id)


class ReplayModel:
    """Answers with a recorded thread's assistant messages, in order (see the module docstring)."""

    def __init__(
        self, recording: AgentState | Sequence[Message], *, strict: bool = False, name: str = "replay"
    ) -> None:
        messages = list(recording.messages if isinstance(recording, AgentState) else recording)
        self.name = name
        self.strict = strict
        self._answers: list[tuple[list[Message], Message]] = []
        for i, m in enumerate(messages):
            if m.role == "assistant":
                self._answers.append((_tail(messages[:i]), m))
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
        expected, answer = self._answers[index]
        actual = _tail(messages)
        if [_key(m) for m in expected] != [_key(m) for m in actual]:
            div = Divergence(index, expected, actual)
            self.divergences.append(div)
            if self.strict:
                raise ReplayDiverged(f"replay diverged at model call {index + 1}", call_index=index)
        return ModelResponse(answer, Usage(requests=1))
