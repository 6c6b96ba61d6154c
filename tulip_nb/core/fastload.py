"""Build messages from parsed JSON through pydantic's public API, keeping the parsed dicts for JSON.

Every message is validated by pydantic (one ``TypeAdapter(list[Message])`` call over the whole
list: the loop runs in pydantic-core, not in Python), so odd input validates — or fails with
pydantic's precise error — exactly as ``Message.model_validate`` would, and a pydantic release
cannot break this module: it touches no private part of pydantic. ``tests/unit/test_fastload``
checks, over generated inputs, that both give equal messages.

Checkpoints written by tulip or tulip_nb almost always have messages in one shape (the six keys,
plain types, tool calls with their four keys). For such a message the parsed dict *is* its JSON, so
it is kept beside the message (not as a field) and its cached JSON bytes come from one
``orjson.dumps`` of that dict, when first needed, instead of pydantic's serialiser.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import InitErrorDetails

from tulip_nb.core._messages import _JSON_RAW, Message

__all__ = ["gc_paused", "messages_from_json"]

_ROLES = frozenset(("system", "user", "assistant", "tool"))
_CALL_FIELDS = frozenset(("id", "name", "arguments", "malformed_arguments"))
_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def _plain_call(raw: Any) -> bool:
    """Whether ``raw`` is a tool call exactly as pydantic writes one: its four keys, plain types."""
    if type(raw) is not dict or len(raw) != 4 or not _CALL_FIELDS.issuperset(raw):
        return False  # a missing key (a default to write), an extra key or the "args" alias
    malformed = raw["malformed_arguments"]
    return (
        type(raw["id"]) is str
        and type(raw["name"]) is str
        and type(raw["arguments"]) is dict
        and (malformed is None or type(malformed) is str)
    )


def _plain(raw: Any) -> bool:
    """Whether ``raw`` is the JSON pydantic would write for the message it validates to."""
    if type(raw) is not dict:
        return False
    try:
        role, content, tool_calls = raw["role"], raw["content"], raw["tool_calls"]
        call_id, name, metadata = raw["tool_call_id"], raw["name"], raw["metadata"]
    except KeyError:
        return False  # a missing field: pydantic writes its default
    return (
        type(role) is str
        and role in _ROLES
        and (content is None or type(content) is str)
        and type(tool_calls) is list
        and (call_id is None or type(call_id) is str)
        and (name is None or type(name) is str)
        and type(metadata) is dict
        and all(_plain_call(call) for call in tool_calls)
    )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects that form no cycles.

    Decoding a 2000-message thread allocates ~15k containers; with the collector on, young
    collections keep re-traversing them (measured: decode 15 ms with it, 9 ms without). Only the
    thread that paused it turns it back on, and only if it was on.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def messages_from_json(items: Any) -> list[Message]:
    """Messages from a parsed JSON list; raises pydantic's ``ValidationError`` on bad input, for
    the first message that has an error, located at ``messages.<index>``."""
    if type(items) is not list:
        _MESSAGES.validate_python(items)  # raises the precise error
        return []  # pragma: no cover - validate_python accepted something that is not a list
    try:
        out = _MESSAGES.validate_python(items)
    except ValidationError as e:
        raise _first_message(e) from None
    for message, raw in zip(out, items, strict=True):
        if _plain(raw):
            message.__dict__[_JSON_RAW] = raw
    return out


def _first_message(error: ValidationError) -> ValidationError:
    """The errors of the first message that has any, with ``messages`` prefixed to each location."""
    errors = error.errors(include_url=False)
    first = min(err["loc"][0] for err in errors)
    line_errors: list[InitErrorDetails] = [
        {"type": err["type"], "loc": ("messages", *err["loc"]), "input": err["input"], "ctx": err.get("ctx", {})}
        for err in errors
        if err["loc"][0] == first
    ]
    return ValidationError.from_exception_data(error.title, line_errors)
