"""Small helpers shared by the lab modules: message rendering, edits, lineage keys.

When two messages are the same is not decided here but in :mod:`tulip_nb.core.canonical`.

Sync calls are not here: every sync twin of the lab is :func:`tulip_nb._sync.sync_twin` of its
``a``-prefixed coroutine function, and the few hand-written ones call :func:`tulip_nb._sync.run_sync`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from tulip_nb._html import esc
from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import FORK_INDEX_KEY

__all__ = [
    "FORK_INDEX_KEY",
    "Edit",
    "apply_edit",
    "call_text",
    "esc",
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
