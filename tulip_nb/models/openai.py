"""The OpenAI adapter: ``"openai:<model>"`` on the official ``openai`` client (chat completions).

::

    from tulip_nb.agent import Agent
    agent = Agent(model="openai:gpt-4o-mini", tools=[...])       # OPENAI_API_KEY from the env

    from tulip_nb.models.openai import OpenAIModel                 # any OpenAI-compatible server
    model = OpenAIModel("llama3", base_url="http://127.0.0.1:8000/v1", api_key="none")

``base_url`` and ``api_key`` come from the arguments, else ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
(the client's own rules). Tool-call arguments that are not valid JSON are kept verbatim in
``ToolCall.malformed_arguments`` (with ``arguments == {}``) so the agent can answer with an error
result instead of crashing. An error status becomes :class:`~tulip_nb.models._base.ModelHTTPError`
(:class:`~tulip_nb.models._base.ContextWindowExceeded` for a context overflow).

**Live experiments.** Every request goes through one concurrency limit per model and base URL,
shared by the whole process (``max_concurrency``; :mod:`tulip_nb.models._limits`), and is retried on
429, 5xx, timeouts and dropped or truncated responses, honouring ``Retry-After``, within a total
``deadline`` per call (the client's own retries are off: ours see the limit). ``cache=`` (a
:class:`~tulip_nb.models._cache.ModelCache`) answers a request already made from disk, bit for bit
and for free. Usage carries the call's cost from :mod:`tulip_nb.models.pricing` (``price=``
overrides the table; unknown model: None). ``model.stats`` counts requests sent, retries and cache
hits::

    cache = ModelCache("responses.sqlite")
    model = OpenAIModel("gpt-4o-mini", cache=cache, max_concurrency=4, temperature=0)

Needs the ``openai`` extra: ``pip install 'tulip_nb[openai]'``; importing this module without it
raises an ImportError that says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

from tulip_nb.core import Message, ToolCall
from tulip_nb.models._base import ContextWindowExceeded, ModelError, ModelHTTPError, ModelResponse, Usage
from tulip_nb.models._cache import ModelCache, request_key
from tulip_nb.models._limits import CallStats, RetryPolicy, call_with_retries, retry_after_seconds, shared_limit
from tulip_nb.models.pricing import Price, cost_of

try:
    import openai
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the OpenAI model adapter needs the openai package: pip install 'tulip_nb[openai]'") from e

__all__ = ["OpenAIModel", "to_openai_messages"]

_OVERFLOW_CODES = {"context_length_exceeded", "string_above_max_length"}
_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUS = frozenset({408, 409, 429})


def to_openai_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """tulip messages -> chat-completions ``messages`` (tool calls as JSON-string arguments)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.role == "assistant" and m.tool_calls:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.malformed_arguments
                        if c.malformed_arguments is not None
                        else json.dumps(c.arguments),
                    },
                }
                for c in m.tool_calls
            ]
        if m.role == "tool":
            item["tool_call_id"] = m.tool_call_id
            item["content"] = m.content or ""
        out.append(item)
    return out


def _tool_call(raw: Any) -> ToolCall:
    fn = raw.function
    text = fn.arguments or ""
    try:
        args = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return ToolCall(id=raw.id, name=fn.name, arguments={}, malformed_arguments=text)
    if not isinstance(args, dict):
        return ToolCall(id=raw.id, name=fn.name, arguments={}, malformed_arguments=text)
    return ToolCall(id=raw.id, name=fn.name, arguments=args)


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage(requests=1)
    details = getattr(raw, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    prompt = raw.prompt_tokens or 0
    completion = raw.completion_tokens or 0
    return Usage(prompt, completion, raw.total_tokens or prompt + completion, cached, 1)


def _error_code(body: Any) -> Any:
    if not isinstance(body, dict):
        return None
    inner = body.get("error")
    return (inner if isinstance(inner, dict) else body).get("code")


def _retryable(e: BaseException) -> tuple[bool, float | None]:
    """429 / 408 / 409 / 5xx (with the response's Retry-After), timeouts, dropped connections and
    bodies that are not a whole response are worth another try; anything else is final."""
    if isinstance(e, openai.APIStatusError):
        if e.status_code in _RETRY_STATUS or e.status_code >= 500:
            return True, retry_after_seconds(e.response.headers)
        return False, None
    if isinstance(e, (openai.APIConnectionError, openai.APIResponseValidationError, json.JSONDecodeError)):
        return True, None  # APITimeoutError is an APIConnectionError
    return False, None


class OpenAIModel:
    """A chat-completions model behind the official client; see the module docstring.

    Extra keyword arguments (``temperature=0``, ``max_tokens=...``) are sent with every request.
    Pass ``client=`` to reuse an ``openai.AsyncOpenAI`` you configured yourself.

    Args:
        cache: a :class:`~tulip_nb.models._cache.ModelCache` answering requests already made.
        epoch: the sample number in the cache key (``epoch=1``: a second, independent sample).
        max_concurrency: requests in flight to this model (base URL + name) in the process;
            None keeps the shared limit's current value (8 when first created).
        max_retries, deadline, timeout: retries after the first attempt, seconds for a whole
            call, seconds for one attempt (see :class:`~tulip_nb.models._limits.RetryPolicy`).
        price: USD per 1M tokens for this adapter (default: :func:`~tulip_nb.models.pricing.price_for`).
        retry: a whole :class:`~tulip_nb.models._limits.RetryPolicy` (backoff, caps), instead of
            ``max_retries`` and ``deadline``.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        cache: ModelCache | None = None,
        epoch: int = 0,
        max_concurrency: int | None = None,
        max_retries: int = 6,
        deadline: float | None = 600.0,
        timeout: float | None = 60.0,
        price: Price | None = None,
        retry: RetryPolicy | None = None,
        **params: Any,
    ) -> None:
        self.model = model.split(":", 1)[1] if model.startswith("openai:") else model
        self.name = f"openai:{self.model}"
        self.params = params
        self.cache = cache
        self.epoch = epoch
        self.price = price
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy(max_retries=max_retries, deadline=deadline)
        self.stats = CallStats()
        self._client = client
        self._own_client = client is None
        self._client_args: dict[str, Any] = {"base_url": base_url, "api_key": api_key, "max_retries": 0}
        if timeout is not None:
            self._client_args["timeout"] = timeout
        self.limit = shared_limit(f"{self.base_url}|{self.model}", max_concurrency)

    @property
    def base_url(self) -> str:
        """The endpoint (argument, else ``OPENAI_BASE_URL``, else OpenAI's), as keyed in the cache."""
        if self._client is not None:
            return str(self._client.base_url).rstrip("/")
        url = self._client_args["base_url"] or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE_URL
        return str(url).rstrip("/")

    @property
    def client(self) -> Any:
        """The ``openai.AsyncOpenAI`` client, created on first use."""
        if self._client is None:
            try:
                self._client = openai.AsyncOpenAI(**self._client_args)
            except openai.OpenAIError as e:
                raise ModelError(f"cannot create the OpenAI client: {e}", model=self.model) from e
        return self._client

    def cache_request(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """The exact chat-completions request for ``messages`` (what is sent, and the cache key)."""
        request: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = tools
        request.update(self.params)
        request.update(kwargs)
        return request

    def has_cached(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> bool:
        """Whether this request would be answered from ``cache`` (nothing sent)."""
        if self.cache is None:
            return False
        request = self.cache_request(messages, tools, **kwargs)
        return self.cache.contains(request_key(self.name, self.base_url, request, self.epoch))

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> ModelResponse:
        request = self.cache_request(messages, tools, **kwargs)
        if self.cache is None:
            return await self._live(request)
        response = await self.cache.fetch(
            model=self.name, base_url=self.base_url, request=request, epoch=self.epoch, call=lambda: self._live(request)
        )
        if response.usage.cached:
            self.stats.add(cache_hits=1)
        return response

    async def _live(self, request: dict[str, Any]) -> ModelResponse:
        async def attempt(left: float | None) -> Any:
            timeout = self.timeout if left is None else min(self.timeout or left, max(left, 0.001))
            return await self.client.chat.completions.create(**request, timeout=timeout)

        try:
            raw = await call_with_retries(
                attempt, limit=self.limit, policy=self.retry, classify=_retryable, stats=self.stats, what=self.name
            )
        except openai.APIStatusError as e:
            text = str(e.message)
            code = _error_code(e.body)
            cls = (
                ContextWindowExceeded if code in _OVERFLOW_CODES or "context length" in text.lower() else ModelHTTPError
            )
            raise cls(
                f"{self.name} returned HTTP {e.status_code}: {text}", status_code=e.status_code, body=e.body
            ) from e
        except (openai.APIConnectionError, openai.APIResponseValidationError, json.JSONDecodeError) as e:
            raise ModelError(f"cannot reach {self.name}: {e}", base_url=self.base_url) from e
        if not raw.choices:
            raise ModelError(f"{self.name} returned no choices", model=self.model)
        msg = raw.choices[0].message
        calls = [_tool_call(c) for c in (msg.tool_calls or []) if getattr(c, "function", None) is not None]
        message = Message.assistant(msg.content, calls)
        usage = _usage(raw.usage)
        usage = replace(usage, cost=None if raw.usage is None else cost_of(self.model, usage, self.price))
        return ModelResponse(message, usage, raw=raw)

    async def aclose(self) -> None:
        """Close the client's connections (a new client is made if the model is used again)."""
        if not self._own_client:
            return  # the caller's client: theirs to close
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without its client, limit and counters: a worker process makes its own and
        shares its own process's limit for this model."""
        if self._client is not None and self._client_args["base_url"] is None:
            self._client_args["base_url"] = self.base_url
        state = dict(self.__dict__)
        state.update(_client=None, limit=None, stats=None)
        state["_max_concurrency"] = self.limit.limit
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        n = state.pop("_max_concurrency")
        self.__dict__.update(state)
        self.stats = CallStats()
        self.limit = shared_limit(f"{self.base_url}|{self.model}", n)

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r})"
