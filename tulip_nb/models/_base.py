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

from tulip_nb.core import Message, errors
from tulip_nb.core.errors import TulipNBError

__all__: list[str] = []


@dataclass(frozen=True)
class Usage:
    """Token usage of one model call (or a sum of calls: ``a + b``).

    ``cached_tokens``: prompt tokens the *provider* served from its prompt cache (billed cheaper).
    ``cache_hits``: how many of the ``requests`` were answered by a tulip_nb
    :class:`~tulip_nb.models._cache.ModelCache` instead of the provider (free, nothing sent);
    :attr:`cached` is True when all of them were. ``cost``: what the calls cost when they were made,
    in USD, from the price table (:mod:`tulip_nb.models.pricing`); None when a price is unknown
    (never 0 for "unknown"); an offline model costs 0.

    >>> a = Usage(10, 2, 12, requests=1, cost=0.5)
    >>> b = Usage(5, 1, 6, requests=1, cache_hits=1, cost=None)
    >>> (a + b).total_tokens, (a + b).cost, b.cached, (a + b).cached
    (18, None, True, False)
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0
    cache_hits: int = 0
    cost: float | None = 0.0

    @property
    def cached(self) -> bool:
        """True when every request was served by the response cache (a re-run: nothing billed)."""
        return self.requests > 0 and self.cache_hits == self.requests

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cached_tokens + other.cached_tokens,
            self.requests + other.requests,
            self.cache_hits + other.cache_hits,
            cost,
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
