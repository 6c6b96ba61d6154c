"""Small helpers shared by the lab modules: message rendering, edits, lineage keys.

Sync calls are not here: every sync twin of the lab is :func:`tulip_nb._sync.sync_twin` of its
``a``-prefixed coroutine function, and the few hand-written ones call :func:`tulip_nb._sync.run_sync`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from tulip_nb._html import esc
from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import FORK_INDEX_KEY
from tulip_nb.core.messages import Message

__all__ = [
    "FORK_INDEX_KEY",
    "Edit",
    "apply_edit",
    "call_text",
    "canonical_json",
    "esc",
    "message_key",
    "message_value",
    "short",
]

Edit = str | Message | Callable[[Message], Message] | Mapping[int, "str | Message | Callable[[Message], Message]"]
"""How a fork or a live branch changes a message: new text, a whole message, a function of the
message, or ``{index: one of those}`` for explicit positions."""


def short(text: str | None, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def call_text(msg: Message) -> str:
    """``name(args)`` of each tool call of ``msg``, joined with ``; ``."""
    parts = []
    for c in msg.tool_calls:
        args = c.malformed_arguments if c.malformed_arguments is not None else orjson.dumps(c.arguments).decode()
        parts.append(f"{c.name}({args})")
    return "; ".join(parts)


_BIG = 2**63


def _normal(value: Any) -> Any:
    """``value`` with numbers as parsed values: an integral float is its int, an int beyond 64 bits
    a float (what a JSON parser without big ints makes of it), so ``1.0 == 1`` as in Python."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_BIG < value < _BIG else value
    if isinstance(value, int):
        return value if -_BIG < value < _BIG else float(value)
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """The canonical JSON of a JSON value: keys sorted at every level, numbers as parsed values
    (see :func:`_normal`). Two values are equal for the lab (diff, export verification) when these
    bytes are: a copy whose store reordered keys (PostgreSQL ``jsonb``) or respelled numbers
    equals its source."""
    data = _normal(value)
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS, default=str)
    except (orjson.JSONEncodeError, TypeError):  # e.g. a NaN/inf spelled by another serialiser
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


_FIELD_DEFAULTS: dict[str, Any] = {
    "content": None,
    "tool_calls": [],
    "tool_call_id": None,
    "name": None,
    "metadata": {},
}
"""Message fields whose default value means "not there": ``{}`` and a missing key are the same."""

_CALL_DEFAULTS: dict[str, Any] = {"arguments": {}, "malformed_arguments": None}


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # an int beyond 64 bits
        return json.loads(raw)


def message_value(msg: Message, *, ids: bool = True) -> dict[str, Any]:
    """A message as a plain JSON value, the form :func:`message_key` hashes.

    Fields at their default (``content`` None, no ``tool_calls``, no ``tool_call_id``, no ``name``,
    empty ``metadata``) are left out, so a message a store saved without ``"metadata": {}`` equals
    one saved with it. ``ids=False`` also leaves out every tool-call id and ``tool_call_id``: a call
    is its position (ARCHITECTURE decision 10), so a diff never reports an id-only difference.
    Extra fields (``extra="allow"``: what another SDK added) are kept.

    >>> from tulip_nb.core.messages import ToolCall
    >>> m = Message.assistant(None, [ToolCall(id="call_7", name="get", arguments={"n": 1.0})])
    >>> message_value(m, ids=False)
    {'role': 'assistant', 'tool_calls': [{'name': 'get', 'arguments': {'n': 1.0}}]}
    """
    value = _loads(msg.json_bytes())
    if not isinstance(value, dict):  # pragma: no cover - a Message always dumps an object
        return {"value": value}
    out = {k: v for k, v in value.items() if not (k in _FIELD_DEFAULTS and v == _FIELD_DEFAULTS[k])}
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_call_value(c, ids) for c in calls]
    if not ids:
        out.pop("tool_call_id", None)
    return out


def _call_value(call: Any, ids: bool) -> Any:
    if not isinstance(call, dict):
        return call
    return {
        k: v for k, v in call.items() if not (k in _CALL_DEFAULTS and v == _CALL_DEFAULTS[k]) and (ids or k != "id")
    }


def message_key(msg: Message, *, ids: bool = True) -> bytes:
    """What makes two messages "the same" for the lab: the sha256 of the canonical JSON
    (:func:`canonical_json`: keys sorted, integral floats as ints) of :func:`message_value`.

    The key does not depend on the key order or number spelling of the store, nor on whether a
    default field (``"metadata": {}``) was written out. With ``ids=False`` (what
    :func:`~tulip_nb.lab.diff_threads` uses) tool-call ids do not count either; the default
    ``ids=True`` keeps them, for callers that compare a record with its own replay.

    >>> from tulip_nb.core.messages import ToolCall
    >>> one = Message.assistant(None, [ToolCall(id="call_1", name="get", arguments={"b": 1.0})])
    >>> two = Message.assistant(None, [ToolCall(id="call_9", name="get", arguments={"b": 1})])
    >>> message_key(one) == message_key(two), message_key(one, ids=False) == message_key(two, ids=False)
    (False, True)
    """
    return hashlib.sha256(canonical_json(message_value(msg, ids=ids))).digest()


def _edited(msg: Message, how: Any, where: str) -> Message:
    if isinstance(how, str):
        return msg.model_copy(update={"content": how})
    if isinstance(how, Message):
        return how
    if callable(how):
        out = how(msg)
        if not isinstance(out, Message):
            raise UserError(f"edit function for {where} must return a Message, got {type(out).__name__}")
        return out
    raise UserError(f"edit for {where} must be text, a Message or a function, got {type(how).__name__}")


def apply_edit(
    messages: Sequence[Message], edit: Edit | None, default_index: int, where: str
) -> tuple[list[Message], int | None]:
    """``messages`` with ``edit`` applied, cut after the last edited message.

    What followed an edited message was a consequence of the old one, so it is dropped: the branch
    regenerates it. Returns the new list and the index of the first edited message (None: no edit).
    """
    msgs = list(messages)
    if edit is None:
        return msgs, None
    items: dict[int, Any]
    if isinstance(edit, Mapping):
        items = {}
        for k, v in edit.items():
            if not isinstance(k, int):
                raise UserError(f"edit keys must be message indices (int), got {k!r} in {where}")
            items[k if k >= 0 else len(msgs) + k] = v
    else:
        items = {default_index: edit}
    for i in items:
        if not 0 <= i < len(msgs):
            raise UserError(f"edit index {i} is outside the {len(msgs)} messages of {where}")
    for i, how in items.items():
        msgs[i] = _edited(msgs[i], how, f"{where}, message {i}")
    return msgs[: max(items) + 1], min(items)
