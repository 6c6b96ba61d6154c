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


def message_key(msg: Message) -> bytes:
    """What makes two messages "the same" in a diff: the sha256 of their canonical JSON
    (:func:`canonical_json`), independent of the key order and number spelling of the store."""
    raw = msg.json_bytes()
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = json.loads(raw)
    return hashlib.sha256(canonical_json(value)).digest()


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
