"""The OpenAI Agents SDK's ``SQLiteSession`` as a peer (conversation and forks sections).

A session stores a conversation as *items* (the Responses API input format) and appends: a
save is ``await session.add_items(new_items)`` with only the items the step added, a load is
``await session.get_items()`` (every item, as dicts). Each of our messages becomes the items an
Agents SDK run would hold for it: a user/system/assistant text message, one ``function_call``
per tool call, one ``function_call_output`` per tool result (converted once, untimed).

Configuration, as the SDK sets it (0.24): each connection switches the database to WAL
(``PRAGMA journal_mode=WAL``) and keeps SQLite's default ``synchronous=FULL``, so every
``add_items`` commit is one fdatasync of the WAL; :meth:`Session.pragmas` reads both back from
the session's own connection. There is no fork or copy: :func:`copy_session` is what a user
does instead (read every item, append them to a new session).

This module imports neither tulip_nb nor the SDK at import time: it runs inside the peer worker
(:mod:`bench.peers`, any Python with ``openai-agents``), on message JSON dicts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any


def available() -> bool:
    """Whether ``openai-agents`` (import name ``agents``) is importable here."""
    return importlib.util.find_spec("agents") is not None


def to_items(message: Any) -> list[dict[str, Any]]:
    """The session items an Agents SDK run would store for ``message`` (a Message or its JSON dict)."""
    m = message if isinstance(message, dict) else json.loads(message.json_bytes())
    if m["role"] == "tool":
        return [{"type": "function_call_output", "call_id": m.get("tool_call_id") or "", "output": m["content"]}]
    items: list[dict[str, Any]] = []
    calls = m.get("tool_calls") or []
    if m.get("content") or not calls:
        items.append({"role": m["role"], "content": m.get("content") or ""})
    for call in calls:
        items.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": call["name"],
                "arguments": json.dumps(call["arguments"], separators=(",", ":")),
            }
        )
    return items


def disk(directory: Path) -> int:
    """Bytes of every file in ``directory`` (the database, and its WAL while open)."""
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


class Session:
    """One ``SQLiteSession`` saving a conversation step by step (``add`` times one ``add_items``)."""

    def __init__(self, path: Path, session_id: str = "conv") -> None:
        from agents import SQLiteSession

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.session_id = session_id
        self.session = SQLiteSession(session_id, path)

    async def add(self, items: list[dict[str, Any]]) -> float:
        t0 = time.perf_counter()
        await self.session.add_items(items)
        return time.perf_counter() - t0

    def pragmas(self) -> dict[str, Any]:
        """``journal_mode`` and ``synchronous`` of the session's own connection."""
        conn = self.session._get_connection()
        return {
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(
                conn.execute("PRAGMA synchronous").fetchone()[0], "?"
            ),
        }

    def close(self) -> None:
        self.session.close()


async def load(path: Path, session_id: str = "conv") -> tuple[float, int]:
    """A fresh session's ``get_items()``: seconds, and how many items came back."""
    from agents import SQLiteSession

    fresh = SQLiteSession(session_id, path)
    try:
        t0 = time.perf_counter()
        got = await fresh.get_items()
        return time.perf_counter() - t0, len(got)
    finally:
        fresh.close()


async def copy_session(path: Path, source: str, dest: str) -> tuple[float, int]:
    """No fork or copy in the SDK: read every item of ``source``, append them to ``dest`` (timed)."""
    from agents import SQLiteSession

    src, dst = SQLiteSession(source, path), SQLiteSession(dest, path)
    try:
        t0 = time.perf_counter()
        items = await src.get_items()
        await dst.add_items(items)
        return time.perf_counter() - t0, len(items)
    finally:
        src.close()
        dst.close()


def versions() -> dict[str, str]:
    import importlib.metadata
    import sqlite3

    try:
        sdk = importlib.metadata.version("openai-agents")
    except importlib.metadata.PackageNotFoundError:
        sdk = "absent"
    out = {"openai-agents": sdk, "sqlite": sqlite3.sqlite_version, "pid": str(os.getpid())}
    for dist in ("sqlalchemy", "asyncpg"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


# -- SQLAlchemySession on PostgreSQL (the remote section) -------------------------------------------
def alchemy_available() -> bool:
    """Whether the SDK's ``SQLAlchemySession`` and the asyncpg driver are importable here."""
    return (
        available()
        and importlib.util.find_spec("sqlalchemy") is not None
        and importlib.util.find_spec("asyncpg") is not None
        and importlib.util.find_spec("greenlet") is not None
    )


class AlchemySession:
    """One ``SQLAlchemySession`` on PostgreSQL (``postgresql+asyncpg``), its tables in ``schema``.

    The engine is the SDK's own (``create_async_engine``, its default pool); ``search_path`` puts
    the SDK's two tables (``agent_sessions``, ``agent_messages``) in the bench's schema, so their
    size is measured apart from anything else on the server. Tables are created before the first
    timed ``add_items``.
    """

    def __init__(self, url: str, schema: str, session_id: str = "conv") -> None:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(url, connect_args={"server_settings": {"search_path": schema}})
        self.session_id = session_id
        self.session = SQLAlchemySession(session_id, engine=self.engine, create_tables=True)

    async def open(self) -> None:
        await self.session.get_items()  # creates the tables (untimed)

    async def add(self, items: list[dict[str, Any]]) -> float:
        t0 = time.perf_counter()
        await self.session.add_items(items)  # type: ignore[arg-type]
        return time.perf_counter() - t0

    async def load(self) -> tuple[float, int]:
        t0 = time.perf_counter()
        got = await self.session.get_items()
        return time.perf_counter() - t0, len(got)

    async def copy_to(self, dest: str) -> tuple[float, int]:
        """No fork or copy in the SDK: read every item, append them to a new session (timed)."""
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        other = SQLAlchemySession(dest, engine=self.engine, create_tables=True)
        t0 = time.perf_counter()
        items = await self.session.get_items()
        await other.add_items(items)
        return time.perf_counter() - t0, len(items)

    async def close(self) -> None:
        await self.engine.dispose()
