"""The OpenAI adapter: ``"openai:<model>"`` on the official ``openai`` client (chat completions).

::

    from tulip_nb.agent import Agent
    agent = Agent(model="openai:gpt-4o-mini", tools=[...])       # OPENAI_API_KEY from the env

    from tulip_nb.models.openai import OpenAIModel                 # any OpenAI-compatible server
    model = OpenAIModel("llama3", base_url="http://127.0.0.1:8000/v1", api_key="none")

``base_url`` and ``api_key`` come from the arguments, else ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
(the client's own rules). Tool-call arguments that are not valid JSON are kept verbatim in
``ToolCall.malformed_arguments`` (with ``arguments == {}``) so the agent can answer with an error
result instead of crashing. An error status becomes :class:`~tulip_nb.models.base.ModelHTTPError`
(:class:`~tulip_nb.models.base.ContextWindowExceeded` for a context overflow).

Needs the ``openai`` extra: ``pip install 'tulip_nb[openai]'``; importing this module without it
raises an ImportError that says so.
"""

from __future__ import annotations

import json
from typing import Any

from tulip_nb.core.messages import Message, ToolCall
from tulip_nb.models.base import ContextWindowExceeded, ModelError, ModelHTTPError, ModelResponse, Usage

try:
    import openai
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the OpenAI model adapter needs the openai package: pip install 'tulip_nb[openai]'") from e

__all__ = ["OpenAIModel", "to_openai_messages"]

_OVERFLOW_CODES = {"context_length_exceeded", "string_above_max_length"}


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


class OpenAIModel:
    """A chat-completions model behind the official client; see the module docstring.

    Extra keyword arguments (``temperature=0``, ``max_tokens=...``) are sent with every request.
    Pass ``client=`` to reuse an ``openai.AsyncOpenAI`` you configured yourself.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        max_retries: int = 2,
        timeout: float | None = 60.0,
        **params: Any,
    ) -> None:
        self.model = model.split(":", 1)[1] if model.startswith("openai:") else model
        self.name = f"openai:{self.model}"
        self.params = params
        self._client = client
        self._client_args: dict[str, Any] = {"base_url": base_url, "api_key": api_key, "max_retries": max_retries}
        if timeout is not None:
            self._client_args["timeout"] = timeout

    @property
    def client(self) -> Any:
        """The ``openai.AsyncOpenAI`` client, created on first use."""
        if self._client is None:
            try:
                self._client = openai.AsyncOpenAI(**self._client_args)
            except openai.OpenAIError as e:
                raise ModelError(f"cannot create the OpenAI client: {e}", model=self.model) from e
        return self._client

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> ModelResponse:
        request: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = tools
        request.update(self.params)
        request.update(kwargs)
        try:
            raw = await self.client.chat.completions.create(**request)
        except openai.APIStatusError as e:
            text = str(e.message)
            code = _error_code(e.body)
            cls = (
                ContextWindowExceeded if code in _OVERFLOW_CODES or "context length" in text.lower() else ModelHTTPError
            )
            raise cls(
                f"{self.name} returned HTTP {e.status_code}: {text}", status_code=e.status_code, body=e.body
            ) from e
        except openai.APIConnectionError as e:
            raise ModelError(f"cannot reach {self.name}: {e}", base_url=str(self.client.base_url)) from e
        if not raw.choices:
            raise ModelError(f"{self.name} returned no choices", model=self.model)
        msg = raw.choices[0].message
        calls = [_tool_call(c) for c in (msg.tool_calls or []) if getattr(c, "function", None) is not None]
        message = Message.assistant(msg.content, calls)
        return ModelResponse(message, _usage(raw.usage), raw=raw)

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r})"
