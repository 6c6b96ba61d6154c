"""The model protocol: what the agent needs from an LLM.

A model turns a list of :class:`~tulip_nb.core.Message` (the conversation manager's view) plus the
tool schemas into one assistant message and the token usage of the call::

    class EchoModel:
        name = "echo"

        async def complete(self, messages, tools, **kwargs):
            return ModelResponse(Message.assistant(messages[-1].content))

Anything with that shape works (:class:`Model` is a ``Protocol``). In-tree: ``ScriptedModel``
(offline), ``ReplayModel`` (serves a saved thread), ``OpenAIModel`` (``"openai:<model>"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from tulip_nb.core import errors
from tulip_nb.core.errors import TulipNBError
from tulip_nb.core.messages import Message

__all__ = ["ContextWindowExceeded", "Model", "ModelError", "ModelHTTPError", "ModelResponse", "Usage"]


@dataclass(frozen=True)
class Usage:
    """Token usage of one model call (or a sum of calls: ``a + b``)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cached_tokens + other.cached_tokens,
            self.requests + other.requests,
        )


@dataclass(frozen=True)
class ModelResponse:
    """One model answer: an assistant message, its usage and optional provider state."""

    message: Message
    usage: Usage = field(default_factory=Usage)
    provider_state: dict[str, Any] | None = None
    raw: Any = None
    """The provider's raw response object, for inspection; never saved."""


@runtime_checkable
class Model(Protocol):
    """Async: messages + tool schemas -> :class:`ModelResponse`."""

    name: str

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> ModelResponse: ...


class ModelError(TulipNBError):
    """A model call failed (provider error, bad response)."""

    http_status: ClassVar[int] = 502


class ModelHTTPError(ModelError):
    """The provider answered with an error status; ``status_code`` and ``body`` say which."""

    def __init__(self, message: str, *, status_code: int | None = None, body: Any = None, **kw: Any) -> None:
        self.status_code = status_code
        self.body = body
        super().__init__(message, **kw)


class ContextWindowExceeded(ModelHTTPError, errors.ContextWindowExceeded):
    """The provider reported that the request did not fit its context window.

    The agent then asks its manager to reduce (``manager.reduce_context``) and retries once. Also a
    :class:`tulip_nb.core.errors.ContextWindowExceeded` (what a manager raises before calling the
    model when the must-keep part of a request cannot fit): ``except`` on the core class catches
    both, ``except`` on this one only the provider's report.
    """
