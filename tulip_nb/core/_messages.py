"""Messages and tool calls: the immutable units a thread is made of.

A :class:`Message` never changes once appended to a thread, so tulip_nb serialises each one once
and reuses the bytes on every later save (see :meth:`Message.json_bytes`). Messages are frozen
pydantic models, immutable all the way down: ``metadata``, ``tool_calls`` and each call's
``arguments`` are read-only containers (:mod:`tulip_nb.core._frozen`). To change one, make a new
one with ``msg.model_copy(update={...})``.

The JSON shape is tulip's (six keys: ``role``, ``content``, ``tool_calls``, ``tool_call_id``,
``name``, ``metadata``); unknown keys are kept and written back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from tulip_nb.core._frozen import EMPTY, FrozenList, freeze

__all__: list[str] = []

Role = Literal["system", "user", "assistant", "tool"]

_JSON_CACHE = "_tulip_nb_json"
_JSON_RAW = "_tulip_nb_raw"  # the parsed JSON dict a fast-loaded message came from
DIGEST_CACHE = "_tulip_nb_digest"  # core.state.message_digest, kept like the JSON bytes


class ToolCall(BaseModel):
    """One tool invocation requested by the model.

    ``arguments`` is the decoded JSON object; when the provider sent text that is not valid JSON,
    ``arguments`` is ``{}`` and the raw text is kept in ``malformed_arguments``. ``args`` is
    accepted as an alias of ``arguments`` on input.
    """

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict, validation_alias=AliasChoices("arguments", "args"))
    malformed_arguments: str | None = None

    @field_validator("arguments", mode="after")
    @classmethod
    def _freeze_arguments(cls, value: dict[str, Any]) -> dict[str, Any]:
        return freeze(value)  # type: ignore[no-any-return]

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ToolCall:
        """A copy; updated ``arguments`` are made read-only like the original's."""
        if update and "arguments" in update:
            update = {**update, "arguments": freeze(update["arguments"])}
        return super().model_copy(update=update, deep=deep)


class Message(BaseModel):
    """One message of a conversation, in tulip's format.

    >>> Message(role="user", content="hi").content
    'hi'

    ``msg["role"]`` / ``msg["content"]`` give the block view some SDKs use
    (``[{"text": ...}]`` for content), so code written against ``agent.messages`` as dicts runs.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=lambda: EMPTY)

    @field_validator("metadata", mode="after")
    @classmethod
    def _freeze_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        return freeze(value)  # type: ignore[no-any-return]

    @field_validator("tool_calls", mode="after")
    @classmethod
    def _freeze_calls(cls, value: list[ToolCall]) -> list[ToolCall]:
        return value if type(value) is FrozenList else FrozenList(value)

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def system(cls, content: str) -> Message:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str | None = None, tool_calls: list[ToolCall] | None = None) -> Message:
        return cls(role="assistant", content=content, tool_calls=tool_calls or [])

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str, name: str | None = None) -> Message:
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)

    # -- serialisation ------------------------------------------------------------------------
    def json_bytes(self) -> bytes:
        """Compact JSON of this message, computed once and reused (messages are immutable).

        The bytes live in the instance ``__dict__`` under a key that is not a field, so equality,
        ``model_dump`` and the serialiser ignore them; a pydantic private attribute would cost a
        Python-level hook per message on every validation (loading a 2000-message thread 4x slower).
        """
        state = self.__dict__
        cached: bytes | None = state.get(_JSON_CACHE)
        if cached is None:
            raw = state.pop(_JSON_RAW, None)
            cached = orjson.dumps(raw) if raw is not None else self.__pydantic_serializer__.to_json(self)
            state[_JSON_CACHE] = cached
        return cached

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Message:
        """A copy; with ``update`` it is a different message, so its cached bytes are dropped."""
        if update:
            update = _frozen_update(update)
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy.__dict__.pop(_JSON_CACHE, None)
            copy.__dict__.pop(_JSON_RAW, None)
            copy.__dict__.pop(DIGEST_CACHE, None)
        return copy

    # -- block view (seed 002: ``msg["role"]``, ``msg["content"]`` as text blocks) -------------
    @property
    def text(self) -> str:
        """The text content, ``""`` when there is none."""
        return self.content or ""

    def content_blocks(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if self.content:
            blocks.append({"text": self.content})
        for call in self.tool_calls:
            blocks.append({"toolUse": {"toolUseId": call.id, "name": call.name, "input": call.arguments}})
        return blocks

    def __getitem__(self, key: str) -> Any:
        if key == "content":
            return self.content_blocks()
        if key in type(self).model_fields:
            return getattr(self, key)
        extra = self.__pydantic_extra__ or {}
        if key in extra:
            return extra[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


def _frozen_update(update: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` for :meth:`Message.model_copy` with its nested fields made read-only."""
    out = dict(update)
    if "metadata" in out:
        out["metadata"] = freeze(out["metadata"])
    if "tool_calls" in out:
        calls = [c if isinstance(c, ToolCall) else ToolCall.model_validate(c) for c in out["tool_calls"]]
        out["tool_calls"] = FrozenList(calls)
    return out
