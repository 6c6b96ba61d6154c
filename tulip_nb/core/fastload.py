"""Build messages from parsed JSON without a validation hook per message, exactly as pydantic would.

Loading a 2000-message thread through ``Message.model_validate`` costs about three times the JSON
parse itself. Checkpoints written by tulip or tulip_nb almost always have messages in one shape
(the six keys, plain types), which can be checked and turned into model instances far faster.
Anything else takes the full pydantic path, so odd input still validates — or fails with
pydantic's precise error — exactly as it would without this module. ``tests/unit/test_fastload``
checks, over generated inputs, that both paths give equal messages.

Only pydantic's public API is used: a checked message is built with ``Model.model_construct``
(trusted data, fields set as given, extra keys kept as pydantic's extra), so a pydantic release
cannot break this module through its private slots. The parsed dict is kept beside the message (not
as a field) so its cached JSON bytes come from one ``orjson.dumps`` of that dict, when first needed.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any, cast

from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from tulip_nb.core.frozen import EMPTY, FrozenList, freeze
from tulip_nb.core.messages import _JSON_RAW, Message, Role, ToolCall

__all__ = ["gc_paused", "messages_from_json"]

_ROLES = frozenset(("system", "user", "assistant", "tool"))
_MESSAGE_FIELDS = frozenset(("role", "content", "tool_calls", "tool_call_id", "name", "metadata"))
_CALL_FIELDS = frozenset(("id", "name", "arguments", "malformed_arguments"))
_new_call = ToolCall.model_construct
_new_message = Message.model_construct


def _tool_call(raw: Any) -> ToolCall | None:
    if type(raw) is not dict or len(raw) > 4 or not _CALL_FIELDS.issuperset(raw):
        return None  # extra keys or the "args" alias: pydantic's job
    try:
        call_id, name, arguments = raw["id"], raw["name"], raw["arguments"]
    except KeyError:
        return None  # a missing field: pydantic's job (defaults or the error)
    malformed = raw.get("malformed_arguments")
    if type(call_id) is not str or type(name) is not str or type(arguments) is not dict:
        return None
    if malformed is not None and type(malformed) is not str:
        return None
    return _new_call(set(raw), id=call_id, name=name, arguments=freeze(arguments), malformed_arguments=malformed)


def _message(raw: Any) -> Message | None:
    if type(raw) is not dict:
        return None
    try:
        role, content, tool_calls = raw["role"], raw["content"], raw["tool_calls"]
        call_id, name, metadata = raw["tool_call_id"], raw["name"], raw["metadata"]
    except KeyError:
        return None  # a missing field: defaults are pydantic's job
    if (
        role not in _ROLES
        or type(role) is not str
        or (content is not None and type(content) is not str)
        or type(tool_calls) is not list
        or (call_id is not None and type(call_id) is not str)
        or (name is not None and type(name) is not str)
        or type(metadata) is not dict
    ):
        return None
    calls = []
    complete = True  # every tool call has all four keys: the parsed dict is the message's JSON
    for item in tool_calls:
        call = _tool_call(item)
        if call is None:
            return None
        calls.append(call)
        complete = complete and len(item) == 4
    extra = {k: v for k, v in raw.items() if k not in _MESSAGE_FIELDS} if len(raw) > 6 else {}
    if "_fields_set" in extra:
        return None  # model_construct's own argument name: pydantic's job
    message = _new_message(
        set(raw),
        role=cast(Role, role),  # checked against _ROLES above
        content=content,
        tool_calls=FrozenList(calls),
        tool_call_id=call_id,
        name=name,
        metadata=freeze(metadata) if metadata else EMPTY,
        **extra,
    )
    if complete:  # else a default (malformed_arguments) is missing: pydantic serialises it
        message.__dict__[_JSON_RAW] = raw
    return message


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
    """Messages from a parsed JSON list; raises pydantic's ``ValidationError`` on bad input."""
    if type(items) is not list:
        from pydantic import TypeAdapter

        TypeAdapter(list[Message]).validate_python(items)  # raises the precise error
        return []  # pragma: no cover - validate_python accepted something that is not a list
    out = []
    for index, raw in enumerate(items):
        message = _message(raw)
        if message is None:
            try:
                message = Message.model_validate(raw)
            except ValidationError as e:
                raise _at_index(e, index) from None
        out.append(message)
    return out


def _at_index(error: ValidationError, index: int) -> ValidationError:
    """The same error with ``messages.<index>`` prefixed to each location."""
    line_errors: list[InitErrorDetails] = [
        {"type": err["type"], "loc": ("messages", index, *err["loc"]), "input": err["input"], "ctx": err.get("ctx", {})}
        for err in error.errors(include_url=False)
    ]
    return ValidationError.from_exception_data(error.title, line_errors)
