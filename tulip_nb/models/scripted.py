"""ScriptedModel: an offline model for tests, notebooks and Binder.

Give it the answers in order, built with :func:`text` and :func:`tool_call`::

    from tulip_nb.models import ScriptedModel, text, tool_call

    model = ScriptedModel([
        tool_call("lookup_order", order_id="ord-4821"),   # iteration 1: call a tool
        text("The return on ord-4821 is eligible."),      # iteration 2: answer
    ])

or a function of the request (sync or async), which keeps working across processes because it
decides from the conversation, not from a counter::

    def reply(messages, tools):
        return text("done") if messages[-1].role == "tool" else tool_call("lookup_order", order_id="1")

    model = ScriptedModel(reply)

Tool-call ids left empty are derived from the request (``call_`` + 12 hex of a digest of every
message it was sent, plus the call's index), so they are unique within a thread even when a
conversation manager sends views of equal length, and a replayed or resumed conversation gets the
same ids in every process. (Ids are only labels for the provider: tulip_nb pairs a call with its
result by position, :mod:`tulip_nb.core.calls`.) Usage is a
deterministic estimate (4 characters per token), labelled with ``estimated=True`` in the raw field.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from tulip_nb.core import Message, ToolCall
from tulip_nb.models._base import ModelError, ModelResponse, Usage

__all__ = ["Reply"]

Reply = ModelResponse | Message | str
"""What a script entry or a reply function may give: a response, an assistant message, or text."""


def text(content: str) -> Message:
    """An assistant answer without tool calls."""
    return Message.assistant(content)


def tool_call(name: str, *, call_id: str | None = None, content: str | None = None, **arguments: Any) -> Message:
    """An assistant message calling one tool with keyword ``arguments``."""
    return Message.assistant(content, [ToolCall(id=call_id or "", name=name, arguments=arguments)])


def tool_calls(*calls: tuple[str, dict[str, Any]] | ToolCall, content: str | None = None) -> Message:
    """An assistant message calling several tools: ``tool_calls(("a", {...}), ("b", {...}))``."""
    built = [c if isinstance(c, ToolCall) else ToolCall(id="", name=c[0], arguments=c[1]) for c in calls]
    return Message.assistant(content, built)


def _estimate_tokens(chars: int) -> int:
    return (chars + 3) // 4


def _request_chars(messages: list[Message]) -> int:
    return sum(len(m.json_bytes()) for m in messages)


class ScriptedModel:
    """Replies from a script (a list) or a function; see the module docstring.

    ``requests`` records every ``(messages, tools)`` the model was sent, so a test or a notebook can
    show exactly what the agent asked. ``repeat_last=True`` keeps answering with the last entry
    when the list runs out (otherwise :class:`ModelError`).
    """

    def __init__(
        self,
        responses: Sequence[Reply] | Callable[..., Any],
        *,
        name: str = "scripted",
        repeat_last: bool = False,
    ) -> None:
        self.name = name
        self.repeat_last = repeat_last
        self._fn: Callable[..., Any] | None = None
        self._script: list[Reply] = []
        if callable(responses):
            self._fn = responses
        else:
            self._script = list(responses)
        self.calls = 0
        self.requests: list[tuple[list[Message], list[dict[str, Any]]]] = []

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> ModelResponse:
        self.requests.append((list(messages), list(tools)))
        index = self.calls
        self.calls += 1
        reply = await self._next(index, messages, tools)
        response = self._coerce(reply)
        message = self._with_ids(response.message, messages)
        usage = response.usage
        if usage == Usage():
            prompt = _estimate_tokens(_request_chars(messages))
            completion = _estimate_tokens(len(message.json_bytes()))
            usage = Usage(prompt, completion, prompt + completion, 0, 1)
        return ModelResponse(message, usage, response.provider_state, {"estimated": True})

    async def _next(self, index: int, messages: list[Message], tools: list[dict[str, Any]]) -> Reply:
        if self._fn is not None:
            n_params = len(inspect.signature(self._fn).parameters)
            out = self._fn(messages, tools) if n_params >= 2 else self._fn(messages)
            if inspect.isawaitable(out):
                out = await out
            return out  # type: ignore[no-any-return]
        if index < len(self._script):
            return self._script[index]
        if self.repeat_last and self._script:
            return self._script[-1]
        raise ModelError(f"ScriptedModel ran out of responses: call {index + 1} of a {len(self._script)}-entry script")

    @staticmethod
    def _coerce(reply: Any) -> ModelResponse:
        if isinstance(reply, ModelResponse):
            return reply
        if isinstance(reply, Message):
            if reply.role != "assistant":
                raise ModelError(f"ScriptedModel reply must be an assistant message, got role {reply.role!r}")
            return ModelResponse(reply)
        if isinstance(reply, str):
            return ModelResponse(Message.assistant(reply))
        raise ModelError(f"ScriptedModel cannot use a reply of type {type(reply).__name__}")

    @staticmethod
    def _with_ids(message: Message, request: list[Message]) -> Message:
        if all(c.id for c in message.tool_calls):
            return message
        # The id is a digest of the whole request, not of its length: a compacted view has the
        # same length again and again, while no two calls of a thread see the same request.
        h = hashlib.sha256(b"tulip_nb scripted call ids\n")
        for m in request:
            h.update(hashlib.sha256(m.json_bytes()).digest())
        seen = {c.id for m in request for c in m.tool_calls}
        calls = []
        for i, call in enumerate(message.tool_calls):
            if not call.id:
                k = h.copy()
                k.update(f"{i}:{call.name}".encode())
                new_id = "call_" + k.hexdigest()[:12]
                while new_id in seen:  # never repeat an id the model can still see
                    k.update(b"+")
                    new_id = "call_" + k.hexdigest()[:12]
                seen.add(new_id)
                call = call.model_copy(update={"id": new_id})
            calls.append(call)
        return message.model_copy(update={"tool_calls": calls})

    def __repr__(self) -> str:
        source = "function" if self._fn is not None else f"{len(self._script)} responses"
        return f"ScriptedModel({source}, calls={self.calls})"
