"""LangGraph peers: InMemorySaver / SqliteSaver (checkpoint section), SqliteSaver + DeltaChannel.

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

**LangGraph in its best configuration** (conversation and forks sections, :class:`DeltaRun`): a
real compiled ``StateGraph`` whose ``messages`` channel is a ``DeltaChannel`` (beta in 1.2: a
checkpoint stores only the step's new messages as writes, plus a whole snapshot every 100
updates), on ``SqliteSaver``, run with ``durability="sync"``. One graph run holds the whole
conversation: a node per model call appends that call's new messages (one superstep, so one
checkpoint and one ``put_writes``, each its own SQLite commit). What is timed is the saver's own
``put`` and ``put_writes`` (serialising and committing), not the graph runtime around them. A load
is ``graph.get_state(config)`` on a fresh connection: the latest checkpoint, its snapshot and the
writes since, replayed through the reducer. Messages are langchain-core message objects
(``HumanMessage``, ``AIMessage`` with its tool calls, ``ToolMessage``; :func:`to_langchain`, built
untimed): with a ``DeltaChannel`` LangGraph turns message dicts into them itself before it saves
a write, so they are what such an agent holds and what a load returns. SqliteSaver turns WAL on and leaves SQLite's
default ``synchronous=FULL`` (read back by :meth:`DeltaRun.pragmas`): durable, one fdatasync per
commit. SqliteSaver has no ``copy_thread`` (the base class raises ``NotImplementedError``); its
fork is ``graph.update_state`` at a checkpoint (a branch in the same thread, :meth:`DeltaGraph.fork`).

This module imports neither tulip_nb nor LangGraph at import time, so the peer worker
(:mod:`bench.peers`) runs it in any Python that has LangGraph.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tulip_nb.core import Message


def available() -> bool:
    """Whether ``langgraph`` and ``langgraph-checkpoint-sqlite`` are importable."""
    return importlib.util.find_spec("langgraph") is not None and (
        importlib.util.find_spec("langgraph.checkpoint.sqlite") is not None
    )


def to_channel(messages: list[Message]) -> list[dict[str, Any]]:
    """The history as LangGraph's ``messages`` channel value: one dict per message."""
    import orjson

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


# -- LangGraph's best configuration: SqliteSaver + DeltaChannel -----------------------------------
_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _extend(state: list[Any], writes: Sequence[list[Any]]) -> list[Any]:
    """The messages reducer: each write is a list of new messages (batching-invariant, as required)."""
    out = list(state)
    for w in writes:
        out.extend(w)
    return out


def to_langchain(message: dict[str, Any], index: int) -> Any:
    """One message's JSON dict as the langchain-core message a LangGraph agent holds (id ``m<index>``)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    mid, content = f"m{index}", message.get("content") or ""
    role = message["role"]
    if role == "system":
        return SystemMessage(content, id=mid)
    if role == "user":
        return HumanMessage(content, id=mid)
    if role == "tool":
        return ToolMessage(content, tool_call_id=message.get("tool_call_id") or "", name=message.get("name"), id=mid)
    calls = [
        {"name": c["name"], "args": c["arguments"], "id": c["id"], "type": "tool_call"}
        for c in message.get("tool_calls") or []
    ]
    return AIMessage(content, tool_calls=calls, id=mid)


def langchain_steps(steps: list[list[dict[str, Any]]]) -> list[list[Any]]:
    """Each save's new messages as langchain-core messages, numbered through the conversation."""
    out, k = [], 0
    for step in steps:
        out.append([to_langchain(m, k + j) for j, m in enumerate(step)])
        k += len(step)
    return out


def _timed_saver(conn: Any, base: Any = None) -> Any:
    """A saver (SqliteSaver unless ``base`` is given) that logs how long each ``put`` /
    ``put_writes`` took (in whichever thread)."""
    if base is None:
        from langgraph.checkpoint.sqlite import SqliteSaver as base

    class TimedSaver(base):  # type: ignore[misc, valid-type]
        log: list[tuple[str, float]]

        def put(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            got = super().put(*args, **kwargs)
            self.log.append(("put", time.perf_counter() - t0))
            return got

        def put_writes(self, *args: Any, **kwargs: Any) -> None:
            t0 = time.perf_counter()
            super().put_writes(*args, **kwargs)
            self.log.append(("writes", time.perf_counter() - t0))

    saver = TimedSaver(conn)
    saver.log = []
    return saver


def pg_available() -> bool:
    """Whether ``langgraph-checkpoint-postgres`` (and psycopg) are importable."""
    return importlib.util.find_spec("langgraph") is not None and (
        importlib.util.find_spec("langgraph.checkpoint.postgres") is not None
    )


class DeltaGraph:
    """A compiled graph (one node, ``step``) whose ``messages`` channel is a ``DeltaChannel``, on a
    SqliteSaver at ``path`` (or, with ``pg_dsn``, a ``PostgresSaver`` on that database: its
    ``from_conn_string`` connection settings, tables created by ``setup()``). The node's k-th call
    appends ``steps[k]`` (k ≥ 1; ``steps[0]`` is the run's input); it loops while steps remain."""

    def __init__(
        self,
        path: Path | None,
        steps: list[list[Any]] | None = None,
        *,
        timed: bool = False,
        pg_dsn: str | None = None,
        thread_id: str = "conv",
    ) -> None:
        from typing import Annotated, TypedDict

        from langgraph.channels import DeltaChannel
        from langgraph.graph import END, START, StateGraph

        self.steps = steps or []
        self.pos = 1
        # the functional form evaluates the annotation here (the class form would be a string under
        # ``from __future__ import annotations``, which LangGraph cannot resolve in this scope)
        state = TypedDict("state", {"messages": Annotated[list[Any], DeltaChannel(_extend)]})  # noqa: UP013

        def step(_: Any) -> dict[str, Any]:
            new = self.steps[self.pos]
            self.pos += 1
            return {"messages": new}

        def route(_: Any) -> str:
            return "step" if self.pos < len(self.steps) else END

        builder = StateGraph(state)
        builder.add_node("step", step)
        builder.add_conditional_edges(START, route, ["step", END])
        builder.add_conditional_edges("step", route, ["step", END])
        self.thread_id = thread_id
        self.pg = pg_dsn is not None
        if pg_dsn is not None:
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg import Connection
            from psycopg.rows import dict_row

            self.conn = Connection.connect(pg_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
            self.saver = _timed_saver(self.conn, PostgresSaver) if timed else PostgresSaver(self.conn)
            self.saver.setup()
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.conn = sqlite3.connect(str(path), check_same_thread=False)
            self.saver = _timed_saver(self.conn) if timed else SqliteSaver(self.conn)
        self.app = builder.compile(checkpointer=self.saver)

    def config(self, thread_id: str | None = None, checkpoint_id: str | None = None) -> dict[str, Any]:
        conf: dict[str, Any] = {"thread_id": thread_id or self.thread_id}
        if checkpoint_id is not None:
            conf["checkpoint_ns"], conf["checkpoint_id"] = "", checkpoint_id
        return {"configurable": conf, "recursion_limit": 10**7}

    def pragmas(self) -> dict[str, Any]:
        self.saver.setup()
        if self.pg:
            row = self.conn.execute("SHOW synchronous_commit").fetchone()
            return {"synchronous_commit": next(iter(row.values())) if row else "?"}
        return {
            "journal_mode": self.conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": _SYNC_NAMES.get(self.conn.execute("PRAGMA synchronous").fetchone()[0], "?"),
        }

    def load(self, thread_id: str | None = None) -> tuple[float, int]:
        """``get_state`` of the thread's latest checkpoint (timed); how many messages it holds."""
        t0 = time.perf_counter()
        got = self.app.get_state(self.config(thread_id))
        dt = time.perf_counter() - t0
        return dt, len(got.values.get("messages", []))

    def fork(self, message: Any, thread_id: str | None = None) -> tuple[float, int]:
        """LangGraph's fork: ``update_state`` at the latest checkpoint's id (a new branch of the
        thread holding one more message). Finding that id is untimed; the update reconstructs the
        channel (snapshot + writes since), then puts the new checkpoint and its write."""
        latest = self.app.get_state(self.config(thread_id)).config["configurable"]["checkpoint_id"]
        t0 = time.perf_counter()
        new = self.app.update_state(self.config(thread_id, latest), {"messages": [message]}, as_node="step")
        dt = time.perf_counter() - t0
        got = self.app.get_state(new)
        return dt, len(got.values["messages"])

    def close(self) -> None:
        self.conn.close()


class DeltaRun:
    """The conversation as one LangGraph run (``durability="sync"``), one superstep per save.

    :meth:`step` advances the run until the node has taken save ``i``'s messages, so the graph
    keeps pace with the other cases of the conversation section; :meth:`finish` runs it out and
    returns the seconds the saver spent per save (each ``put`` with the ``put_writes`` before it;
    the run's first two checkpoints, its input and the step after it, count as save 0).
    """

    def __init__(
        self, path: Path | None, steps: list[list[Any]], *, pg_dsn: str | None = None, thread_id: str = "conv"
    ) -> None:
        self.graph = DeltaGraph(path, steps, timed=True, pg_dsn=pg_dsn, thread_id=thread_id)
        self.gen: Iterator[Any] | None = None
        self.done = False

    def step(self, i: int) -> None:
        if self.gen is None:
            self.gen = iter(
                self.graph.app.stream(
                    {"messages": self.graph.steps[0]}, self.graph.config(), durability="sync", stream_mode="updates"
                )
            )
            self._next()
        while not self.done and self.graph.pos <= i:
            self._next()

    def _next(self) -> None:
        assert self.gen is not None
        try:
            next(self.gen)
        except StopIteration:
            self.done = True

    def finish(self) -> dict[str, Any]:
        self.step(len(self.graph.steps))
        while not self.done:
            self._next()
        groups, acc = [], 0.0
        for kind, dt in self.graph.saver.log:
            acc += dt
            if kind == "put":
                groups.append(acc)
                acc = 0.0
        n = len(self.graph.steps)
        if len(groups) < n:
            raise RuntimeError(f"LangGraph wrote {len(groups)} checkpoints for {n} saves")
        extra = len(groups) - n
        times = [sum(groups[: extra + 1]), *groups[extra + 1 :]]
        calls = len(self.graph.saver.log)
        self.graph.close()
        return {"times": times, "checkpoints": len(groups), "saver_calls": calls}


def versions() -> dict[str, str]:
    import importlib.metadata

    out = {}
    for dist in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out
