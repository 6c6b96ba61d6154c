"""LangGraph peers for the checkpoint and conversation sections (InMemorySaver, SqliteSaver).

LangGraph keeps a graph's state as *channel values*; an agent's history is the ``messages``
channel. The workload is converted once (untimed) to what a LangGraph agent would hold: each
message as a plain dict (the same JSON as tulip_nb writes), all of them in
``checkpoint["channel_values"]["messages"]``. A save is ``saver.put(config, checkpoint, metadata,
new_versions)`` with a new version of the ``messages`` channel (as after every LangGraph step: the
channel is serialised whole, with msgpack); a load is ``saver.get_tuple(config)`` (latest). A load
returns dicts, not message objects: LangGraph's own message classes (langchain-core) would cost
more.

Also the SQLite floor: one ``INSERT OR REPLACE`` of the orjson bytes and a commit, on a WAL
database with SqliteSaver's pragmas. Nothing here is imported unless LangGraph is installed
(``pip install 'tulip_nb[bench]'``); :func:`available` says whether it is.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from tulip_nb.core import Message


def available() -> bool:
    """Whether ``langgraph`` and ``langgraph-checkpoint-sqlite`` are importable."""
    return importlib.util.find_spec("langgraph") is not None and (
        importlib.util.find_spec("langgraph.checkpoint.sqlite") is not None
    )


def to_channel(messages: list[Message]) -> list[dict[str, Any]]:
    """The history as LangGraph's ``messages`` channel value: one dict per message."""
    return [orjson.loads(m.json_bytes()) for m in messages]


class LGThread:
    """One LangGraph thread on ``saver``: ``save(messages)`` puts a new checkpoint, ``load()`` the latest."""

    def __init__(self, saver: Any, thread_id: str) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.version: Any = None
        self.step = 0

    def save(self, messages: list[dict[str, Any]]) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        self.version = self.saver.get_next_version(self.version, None)
        self.step += 1
        ckpt = empty_checkpoint()
        ckpt["channel_values"] = {"messages": messages}
        ckpt["channel_versions"] = {"messages": self.version}
        meta = {"source": "loop", "step": self.step, "parents": {}}
        self.config = self.saver.put(self.config, ckpt, meta, {"messages": self.version})

    def load(self) -> list[dict[str, Any]]:
        got = self.saver.get_tuple({"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ""}})
        assert got is not None
        return list(got.checkpoint["channel_values"]["messages"])


def memory_saver() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


class SqliteHandle:
    """A SqliteSaver on its own database file (``close()`` when done)."""

    def __init__(self, path: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(str(path), check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()

    def close(self) -> None:
        self.conn.close()


class SqliteFloor:
    """The SQLite floor: one upsert of the state's bytes per save, WAL journal, commit each time."""

    def __init__(self, path: Path, payload: bytes) -> None:
        self.conn = sqlite3.connect(str(path), check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS ckpt (k TEXT PRIMARY KEY, data BLOB)")
        self.payload = payload
        self.n = 0

    def save(self) -> None:
        self.n += 1
        self.conn.execute("INSERT OR REPLACE INTO ckpt VALUES (?, ?)", (f"k{self.n}", self.payload))
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- the checkpoint section's cases ---------------------------------------------------------------
def checkpoint_cases(
    root: Path, messages: list[Message], payload: bytes
) -> tuple[dict[str, Callable[[], Awaitable[float]]], Callable[[], None]]:
    """Save/load cases for ``bench.run``'s checkpoint section, and a function that closes them.

    ``payload`` is the tulip_nb checkpoint's bytes (for the SQLite insert floor).
    """
    channel = to_channel(messages)
    mem_saver = memory_saver()
    mem_load = LGThread(mem_saver, "load")
    mem_load.save(channel)
    sql = SqliteHandle(root / "lg.db")
    sql_save = LGThread(sql.saver, "save")
    sql_load = LGThread(sql.saver, "load")
    sql_load.save(channel)
    floor = SqliteFloor(root / "floor.db", payload)

    def fresh_memory_save() -> None:
        LGThread(memory_saver(), "s").save(channel)  # a fresh saver: no pile-up on the heap

    async def case(fn: Callable[[], Any]) -> float:
        return timed(fn)

    cases: dict[str, Callable[[], Awaitable[float]]] = {
        "lg memory save": lambda: case(fresh_memory_save),
        "lg sqlite save": lambda: case(lambda: sql_save.save(channel)),
        "floor sqlite insert": lambda: case(floor.save),
        "lg memory load": lambda: case(mem_load.load),
        "lg sqlite load": lambda: case(sql_load.load),
    }

    def close() -> None:
        sql.close()
        floor.close()

    return cases, close


# -- the conversation section ---------------------------------------------------------------------
def conversation(directory: Path, messages: list[Message], ends: list[int], load_reps: int) -> dict[str, Any]:
    """SqliteSaver saving the conversation after every iteration: per-save seconds, disk, load."""
    directory.mkdir(parents=True, exist_ok=True)
    channel = to_channel(messages)
    h = SqliteHandle(directory / "lg.db")
    try:
        thread = LGThread(h.saver, "conv")
        times = []
        for end in ends:
            part = channel[:end]  # the channel value after this step (untimed)
            times.append(timed(lambda part=part: thread.save(part)))
        loads = sorted(timed(thread.load) for _ in range(load_reps))
    finally:
        h.close()
    disk = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    return {"times": times, "disk": disk, "load_ms": loads[len(loads) // 2] * 1e3}
