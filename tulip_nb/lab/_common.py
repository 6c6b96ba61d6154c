"""Small helpers shared by the lab modules: sync calls, message rendering, edits, lineage keys."""

from __future__ import annotations

import html
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from tulip_nb.agent._sync import run_sync
from tulip_nb.core.errors import UserError
from tulip_nb.core.messages import Message

__all__ = [
    "FORK_INDEX_KEY",
    "Edit",
    "apply_edit",
    "call_text",
    "esc",
    "message_key",
    "run",
    "short",
]

T = TypeVar("T")

FORK_INDEX_KEY = "fork_message_index"
"""Save-metadata key of a branch's first checkpoint: the source message index it was cut at."""

Edit = str | Message | Callable[[Message], Message] | Mapping[int, "str | Message | Callable[[Message], Message]"]
"""How a fork or a live branch changes a message: new text, a whole message, a function of the
message, or ``{index: one of those}`` for explicit positions."""


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` from sync code (a script or a notebook cell with a running loop)."""
    return run_sync(coro)


def esc(value: object) -> str:
    """HTML-escaped text of ``value`` (``None`` -> empty)."""
    return html.escape("" if value is None else str(value), quote=True)


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


def message_key(msg: Message) -> bytes:
    """What makes two messages "the same" in a diff: their JSON (cached on the message)."""
    return msg.json_bytes()


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
