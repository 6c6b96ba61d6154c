"""The wire side of :class:`~tulip_nb.memory.backends.http.HTTPCheckpointer`: decoding bodies,
describing what came back, path segments, importing httpx."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import quote

import orjson

__all__ = ["DEADLINE", "INVALID", "answer", "bounded", "has_state", "import_httpx", "listing_entry", "loads", "segment"]

_EXCERPT = 160


def loads(body: bytes) -> Any:
    """The JSON value of ``body``, or ``INVALID`` when it is not JSON (an empty body included)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return INVALID


INVALID = object()


def answer(resp: Any) -> str:
    """What came back, for an error message: status, content type and the start of the body."""
    ctype = resp.headers.get("content-type") or "no content-type"
    body: bytes = resp.content
    if not body:
        shown = "an empty body"
    else:
        text = body[:_EXCERPT].decode("utf-8", "replace")
        shown = repr(text) + (f" ... ({len(body)} bytes)" if len(body) > _EXCERPT else "")
    return f"HTTP {resp.status_code} ({ctype}) {shown}"


def listing_entry(entry: Any) -> bool:
    """An id, or an object with a string ``checkpoint_id``."""
    return isinstance(entry, str) or (isinstance(entry, dict) and isinstance(entry.get("checkpoint_id"), str))


def has_state(obj: dict[str, Any]) -> bool:
    """Whether a JSON object is an envelope or a bare state: a ``messages`` list, at the top level
    or under ``state`` (tulip always writes it; ``{}`` or ``{"error": ...}`` has none)."""
    raw = obj.get("state", obj)
    return isinstance(raw, dict) and isinstance(raw.get("messages"), list)


def segment(value: str) -> str:
    """``value`` percent-encoded as one URL path segment (``/``, ``?``, ``#``, ``%`` and dot-only
    segments included, which clients would otherwise normalise away)."""
    seg = quote(value, safe="")
    return seg.replace(".", "%2E") if seg in (".", "..") else seg


def import_httpx() -> Any:
    try:
        import httpx
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("HTTPCheckpointer needs httpx. Install it with: pip install 'tulip_nb[server]'") from e
    return httpx


P = ParamSpec("P")
R = TypeVar("R")
# (checkpointer, loop time by which the running call must finish): one deadline per public call
DEADLINE: contextvars.ContextVar[tuple[object, float] | None] = contextvars.ContextVar(
    "tulip_nb_http_deadline", default=None
)


def bounded(
    fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """Give the call one deadline, ``timeout`` seconds from now, shared by every request it makes
    (a call made inside another call of the same checkpointer keeps the outer deadline)."""

    @functools.wraps(fn)
    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        outer = DEADLINE.get()
        if self.timeout is None or (outer is not None and outer[0] is self):
            return await fn(self, *args, **kwargs)
        token = DEADLINE.set((self, asyncio.get_running_loop().time() + self.timeout))
        try:
            return await fn(self, *args, **kwargs)
        finally:
            DEADLINE.reset(token)

    return call
