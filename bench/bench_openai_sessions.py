"""The OpenAI Agents SDK's ``SQLiteSession`` as a peer for the conversation section.

A session stores a conversation as *items* (the Responses API input format) and appends: a
save is ``await session.add_items(new_items)`` with only the items the step added, a load is
``await session.get_items()`` (every item, as dicts). Each of our messages becomes the items an
Agents SDK run would hold for it: a user/system/assistant text message, one ``function_call``
per tool call, one ``function_call_output`` per tool result (converted once, untimed). The
database is a file (SQLite's defaults: rollback journal, ``synchronous=FULL``).

Nothing here is imported unless ``openai-agents`` is installed (``pip install 'tulip_nb[bench]'``);
:func:`available` says whether it is.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import orjson

from tulip_nb.core import Message


def available() -> bool:
    """Whether ``openai-agents`` (import name ``agents``) is importable."""
    return importlib.util.find_spec("agents") is not None


def to_items(message: Message) -> list[dict[str, Any]]:
    """The session items an Agents SDK run would store for ``message``."""
    if message.role == "tool":
        return [{"type": "function_call_output", "call_id": message.tool_call_id or "", "output": message.content}]
    items: list[dict[str, Any]] = []
    if message.content or not message.tool_calls:
        items.append({"role": message.role, "content": message.content or ""})
    for call in message.tool_calls:
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": orjson.dumps(call.arguments).decode(),
            }
        )
    return items


async def _run(path: Path, messages: list[Message], ends: list[int], load_reps: int) -> dict[str, Any]:
    from agents import SQLiteSession

    items = [to_items(m) for m in messages]
    session = SQLiteSession("conv", path)
    times: list[float] = []
    prev = 0
    try:
        for end in ends:
            new = [it for per in items[prev:end] for it in per]  # untimed: the step's new items
            prev = end
            t0 = time.perf_counter()
            await session.add_items(new)
            times.append(time.perf_counter() - t0)
    finally:
        session.close()
    loads = []
    for _ in range(load_reps):
        fresh = SQLiteSession("conv", path)
        try:
            t0 = time.perf_counter()
            got = await fresh.get_items()
            loads.append(time.perf_counter() - t0)
        finally:
            fresh.close()
    assert len(got) == sum(len(per) for per in items)
    loads.sort()
    return {"times": times, "load_ms": loads[len(loads) // 2] * 1e3}


async def conversation(directory: Path, messages: list[Message], ends: list[int], load_reps: int) -> dict[str, Any]:
    """``SQLiteSession`` appending the conversation after every iteration: per-save seconds, disk, load."""
    _mkdir(directory)
    got = await _run(directory / "sessions.db", messages, ends, load_reps)
    got["disk"] = _disk(directory)
    return got


def _mkdir(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)


def _disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
