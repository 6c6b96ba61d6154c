"""What a run returns (:class:`AgentResult`) and what stepping yields (:class:`Step`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tulip_nb.core import Message
from tulip_nb.core.state import AgentState, ToolExecution
from tulip_nb.models import Usage

__all__: list[str] = []

StopReason = Literal["complete", "terminal_tool", "max_iterations", "interrupted", "error"]


def _position(raw: Any) -> tuple[int, int] | None:
    if isinstance(raw, list | tuple) and len(raw) == 2 and all(type(x) is int for x in raw):
        return (raw[0], raw[1])
    return None


@dataclass(frozen=True)
class PendingInterrupt:
    """A tool's question waiting for a human; answer it with ``agent.resume(answer, thread_id=...)``."""

    question: str
    tool_name: str
    tool_call_id: str
    arguments: dict[str, Any] = field(default_factory=dict)
    payload: Any = None
    position: tuple[int, int] | None = None
    """The interrupted call's identity: ``(assistant message index, call index)``."""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "question": self.question,
            "tool_name": self.tool_name,
            "tool_call_id": self.tool_call_id,
            "arguments": self.arguments,
            "payload": self.payload,
        }
        if self.position is not None:
            out["position"] = list(self.position)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingInterrupt:
        return cls(
            str(data.get("question", "")),
            str(data.get("tool_name", "")),
            str(data.get("tool_call_id", "")),
            dict(data.get("arguments") or {}),
            data.get("payload"),
            _position(data.get("position")),
        )


@dataclass(frozen=True)
class Step:
    """One Think -> Execute iteration, as :meth:`Agent.iterate` yields it.

    ``request`` is exactly what the model was sent (the conversation manager's view), ``tools`` the
    schemas offered, ``response`` the assistant message, ``tool_results`` this iteration's
    executions, ``state`` a snapshot after the iteration, ``checkpoint_id`` the save made at its end
    (None if none), ``stop_reason`` set on the last step of a run.
    """

    iteration: int
    request: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    response: Message | None
    usage: Usage
    tool_results: tuple[ToolExecution, ...]
    state: AgentState
    checkpoint_id: str | None = None
    stop_reason: StopReason | None = None
    interrupt: PendingInterrupt | None = None


@dataclass
class AgentResult:
    """The outcome of one run (or resume).

    ``message`` is the final assistant message (``text`` its content), ``stop_reason`` why the loop
    stopped, ``iterations`` the turn's iteration count, ``tool_calls`` the tool executions of this
    run, ``usage`` the tokens this run used, ``checkpoint_id`` the last save. When
    ``stop_reason == "interrupted"``, ``interrupt`` holds the pending question.
    """

    message: Message | None
    state: AgentState
    stop_reason: StopReason
    iterations: int
    tool_calls: list[ToolExecution]
    usage: Usage
    thread_id: str | None = None
    checkpoint_id: str | None = None
    interrupt: PendingInterrupt | None = None

    @property
    def text(self) -> str:
        return self.message.text if self.message is not None else ""

    @property
    def messages(self) -> list[Message]:
        return list(self.state.messages)

    def __str__(self) -> str:
        return self.text
