"""Request bodies of the AgentServer: size-limited, parsed, validated, with errors that name the field.

Every problem becomes an :class:`HTTPProblem` carrying the status and a JSON body:

- a body over the limit -> 413 (checked on ``Content-Length`` and while reading);
- bytes that are not JSON -> 400 ``InvalidJSON``;
- a field missing or of the wrong type -> 422 ``{"error": "ValidationError", "field": "prompt",
  "message": ..., "errors": [{"field", "message"}, ...]}``;
- a ``thread_id`` the server will not store -> 422 naming ``thread_id``.

>>> parse_model(InvokeRequest, b'{"prompt": "hi", "thread_id": "t-1"}').thread_id
't-1'
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "MAX_THREAD_ID",
    "HTTPProblem",
    "InvokeRequest",
    "ResumeRequest",
    "check_thread_id",
    "parse_model",
    "read_limited",
]

MAX_THREAD_ID = 256
"""Longest client thread id the server accepts (the checkpointers take more; a service need not)."""

M = TypeVar("M", bound=BaseModel)


class HTTPProblem(Exception):
    """An error response: ``status`` and a JSON ``body`` (never a stack trace)."""

    def __init__(self, status: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"error": error, "message": message, **extra}


def check_thread_id(thread_id: object, field: str = "thread_id") -> str:
    """``thread_id`` if the server accepts it: a non-empty printable str of at most 256 characters."""
    if not isinstance(thread_id, str) or not thread_id:
        raise HTTPProblem(422, "ValidationError", f"{field} must be a non-empty string", field=field)
    if len(thread_id) > MAX_THREAD_ID:
        raise HTTPProblem(422, "ValidationError", f"{field} is longer than {MAX_THREAD_ID} characters", field=field)
    if not thread_id.isprintable():
        raise HTTPProblem(422, "ValidationError", f"{field} must not contain control characters", field=field)
    return thread_id


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("metadata")
    @classmethod
    def _no_reserved_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(k for k in value if k.startswith("_"))
        if reserved:
            raise ValueError(f"keys starting with '_' are reserved for the agent: {reserved}")
        return value

    @field_validator("thread_id", check_fields=False)
    @classmethod
    def _thread_id(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                check_thread_id(value)
            except HTTPProblem as e:
                raise ValueError(str(e)) from None
        return value


class InvokeRequest(_Body):
    """``POST /invoke`` and ``POST /stream``: one turn. No ``thread_id``: a one-off, nothing saved."""

    prompt: str = Field(min_length=1)
    thread_id: str | None = None


class ResumeRequest(_Body):
    """``POST /resume``: continue a paused turn of ``thread_id``; ``response`` answers its question."""

    thread_id: str
    response: Any = None


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "body"


def parse_model(model: type[M], body: bytes) -> M:
    """Parse and validate ``body`` as ``model``, raising :class:`HTTPProblem` (400 / 422)."""
    try:
        return model.model_validate_json(body or b"")
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        if any(err["type"] == "json_invalid" for err in errors):
            raise HTTPProblem(400, "InvalidJSON", "the request body is not valid JSON") from None
        if errors and errors[0]["type"] == "model_type":
            raise HTTPProblem(422, "ValidationError", "the request body must be a JSON object", field="body") from None
        listed = [{"field": _field(err["loc"]), "message": err["msg"]} for err in errors]
        first = listed[0]
        raise HTTPProblem(
            422, "ValidationError", f"{first['field']}: {first['message']}", field=first["field"], errors=listed
        ) from None


async def read_limited(chunks: AsyncIterator[bytes], content_length: str | None, limit: int) -> bytes:
    """Read a request body of at most ``limit`` bytes (413 otherwise, without reading the rest)."""
    too_large = HTTPProblem(413, "PayloadTooLarge", f"the request body is larger than {limit} bytes", limit=limit)
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise HTTPProblem(400, "BadRequest", "invalid Content-Length header") from None
        if declared > limit:
            raise too_large
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large
        parts.append(chunk)
    return b"".join(parts)
