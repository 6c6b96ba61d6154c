"""The remote section: the issue-26 research thread on PostgreSQL, MySQL, Redis and S3, beside the peers.

The workload (:mod:`bench.research`, the ``conversation`` section's): 300 turns, a save after every
model call (1,138 saves, ~2.98 MB of messages' JSON), replayed from one recording into every case.
``--turns`` scales it down (a smoke run); the default is the whole workload, never shrunk for a
slow store.

Cases, each on a fresh place of its own server (:mod:`bench._servers`: a schema, a database, a key
tag, a bucket), one at a time; a repetition runs every case once, in an order that rotates by one
case per repetition (``--reps``; default 2, ``--quick`` 1), so the machine's drift falls on all:

- **tulip_nb**: ``postgresql_checkpointer``, ``mysql_checkpointer``, ``redis_checkpointer`` and
  ``S3Backend``, with their defaults (``sign=True``). A factory that takes ``layout=`` is run in
  each layout asked for (``--layouts``, default ``history,tulip``); one that does not is run once
  and labelled with the layout it writes (tulip's key-value records / S3 objects: a whole state per
  checkpoint). The agent's way: one set of message objects per case, grown save by save.
- **tulip-agents 2.28**: its own ``postgresql_checkpointer`` / ``redis_checkpointer`` /
  ``mysql_checkpointer`` / ``S3Backend`` on the same servers, handed fresh objects at every save
  (it caches nothing).
- **LangGraph** ``PostgresSaver`` + ``DeltaChannel`` (langgraph-checkpoint-postgres; one graph run,
  a superstep per save, the saver's ``put`` + ``put_writes`` timed) and the **OpenAI Agents SDK**
  ``SQLAlchemySession`` on PostgreSQL (asyncpg; appends each save's new items), both in the peer
  worker (:mod:`bench.peers`, ``--peers-python``): their best configurations.
- **floors**, one per store: one INSERT per new message into a plain table (PostgreSQL ``jsonb``,
  MySQL ``JSON``) in one transaction per save; one ``RPUSH`` of the new messages (Redis); one PUT of
  the new messages' JSON lines (S3).

Per case: the seconds of all saves, their ratio to PostgresSaver + DeltaChannel's in the same
repetition, the last 100 saves ÷ the first 100 (a save that grows with the thread shows here), what
the store holds after the turn ends of turns 100, 200 and 300 (bytes, and ÷ the messages' JSON at
that point), its growth 100→300 (the messages grow 3x), and a fork and a copy of a 100-turn thread
(the first 100 turns, replayed into a second thread of the same store, untimed) and of the
300-turn thread: O(1) shows as the same time at 3x the thread.

    .venv/bin/python -m bench --sections remote --peers-python /tmp/peers-venv/bin/python [--turns 60]
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import _servers as srv
from bench import peers as peer_mod
from bench.research import Research, record

X = "\u00d7"
THREAD = "research"
SHORT = "research-short"
EDGE = 100  # the first / last saves compared
COPY_LIMIT = 1_000_000_000
"""Redis: no copy of a thread whose store holds more than this. tulip_nb's key-value adapter copies
in one MULTI holding every record; at 300 turns in tulip's layout (1.6 GB of records) the bench
process was OOM-killed at 16 GB RSS (2026-12-02). The table says "not measured" with the size."""


# -- cases ---------------------------------------------------------------------------------------
@dataclass
class Case:
    """One store in one repetition. Subclasses: :meth:`open`, :meth:`save`, :meth:`fork`,
    :meth:`copy`, :meth:`close`; the place's bytes are read by :func:`bench._servers.held`."""

    key: str
    label: str
    store: str
    work: Research
    times: list[float] = field(default_factory=list)
    held: dict[int, int] = field(default_factory=dict)  # turns -> bytes
    fork_s: dict[int, float] = field(default_factory=dict)  # turns -> seconds
    copy_s: dict[int, float] = field(default_factory=dict)
    note: str = ""
    notes: list[str] = field(default_factory=list)
    place: srv.Place | None = None

    async def open(self, url: str) -> None:
        self.place = await srv.new_place(self.store, url)

    async def save(self, i: int) -> None:
        raise NotImplementedError

    async def build_short(self, upto: int) -> None:
        """Replay saves ``[0, upto)`` into the thread :data:`SHORT` (untimed)."""
        raise NotImplementedError

    async def fork(self, thread: str, n: int) -> float | None:
        """Seconds of a fork of ``thread`` into a new thread (None: the store has no fork)."""
        return None

    async def copy(self, thread: str, n: int) -> float | None:
        """Seconds of a copy of every checkpoint of ``thread`` (None: the store has no copy)."""
        return None

    async def close(self) -> None:
        if self.place is not None:
            await srv.drop(self.place)


def layout_kwargs(factory: Callable[..., Any], layout: str | None) -> dict[str, Any]:
    """``{"layout": layout}`` when ``factory`` takes ``layout=``, else ``{}``."""
    if layout is None:
        return {}
    params = inspect.signature(factory).parameters
    return {"layout": layout} if "layout" in params else {}


def takes_layout(factory: Callable[..., Any]) -> bool:
    return "layout" in inspect.signature(factory).parameters


class NbCase(Case):
    """tulip_nb's checkpointer for ``store`` (``layout``: passed when its factory takes it)."""

    def __init__(self, key: str, label: str, store: str, work: Research, layout: str | None) -> None:
        super().__init__(key, label, store, work)
        self.layout = layout
        self.cp: Any = None
        self.msgs: list[Any] = []

    def _make(self) -> Any:
        from tulip_nb.memory.backends import (
            S3Backend,
            mysql_checkpointer,
            postgresql_checkpointer,
            redis_checkpointer,
        )

        assert self.place is not None
        p = self.place
        if self.store == "PostgreSQL":
            kw = layout_kwargs(postgresql_checkpointer, self.layout)
            return postgresql_checkpointer(dsn=srv.PG_DSN, schema_name=p.name, table_name="checkpoints", **kw)
        if self.store == "MySQL":
            kw = layout_kwargs(mysql_checkpointer, self.layout)
            return mysql_checkpointer(dsn=p.mysql_dsn, table_name="checkpoints", ssl_disabled=True, **kw)
        if self.store == "Redis":
            kw = layout_kwargs(redis_checkpointer, self.layout)
            return redis_checkpointer(url=srv.REDIS_URL, prefix=f"{p.name}:", **kw)
        kw = layout_kwargs(S3Backend, self.layout)
        return S3Backend(p.name, endpoint_url=p.url, **srv.S3_CREDS, **kw)

    async def open(self, url: str) -> None:
        await super().open(url)
        self.cp = self._make()
        self.msgs = self.work.fresh_messages()  # this case's own objects, as the agent holds them

    async def _save(self, i: int, thread: str) -> float:
        s = self.work.saves[i]
        state = s.state(self.msgs[: s.n], s.parse())  # untimed
        gc.collect()
        t0 = time.perf_counter()
        await self.cp.save(state, thread, metadata=s.metadata)
        return time.perf_counter() - t0

    async def save(self, i: int) -> None:
        self.times.append(await self._save(i, THREAD))

    async def build_short(self, upto: int) -> None:
        for i in range(upto):
            await self._save(i, SHORT)

    async def fork(self, thread: str, n: int) -> float | None:
        from tulip_nb.agent import Agent
        from tulip_nb.models import ScriptedModel, text

        agent = Agent(ScriptedModel([text("ok")], repeat_last=True), checkpointer=self.cp)
        t0 = time.perf_counter()
        await agent.fork(thread, new_thread_id=f"fork-{n}")  # loads the latest, saves it as a fork
        return time.perf_counter() - t0

    async def copy(self, thread: str, n: int) -> float | None:
        t0 = time.perf_counter()
        await self.cp.copy_thread(thread, f"copy-{n}")
        return time.perf_counter() - t0

    async def close(self) -> None:
        if self.cp is not None:
            await self.cp.close()
        self.cp, self.msgs = None, []
        await super().close()


class TulipCase(Case):
    """tulip-agents' own checkpointer for ``store``, fresh message objects at every save."""

    def __init__(self, key: str, label: str, store: str, work: Research) -> None:
        super().__init__(key, label, store, work)
        self.cp: Any = None

    def _make(self) -> Any:
        import tulip.memory.backends as tb

        assert self.place is not None
        p = self.place
        if self.store == "PostgreSQL":
            return tb.postgresql_checkpointer(dsn=srv.PG_DSN, schema_name=p.name, table_name="checkpoints")
        if self.store == "MySQL":
            return tb.mysql_checkpointer(dsn=p.mysql_dsn + "?ssl_disabled=1", table_name="checkpoints")
        if self.store == "Redis":
            return tb.redis_checkpointer(url=srv.REDIS_URL, prefix=f"{p.name}:")
        return tb.S3Backend(bucket=p.name, endpoint_url=p.url, **srv.S3_CREDS)

    async def open(self, url: str) -> None:
        await super().open(url)
        self.cp = self._make()

    def _state(self, i: int) -> Any:
        from tulip.core.state import AgentState as TulipState

        s = self.work.saves[i]
        d = orjson.loads(s.rest)
        d["messages"] = self.work.fresh_tulip_messages(s.n)
        return TulipState.model_validate(d)

    async def _save(self, i: int, thread: str) -> float:
        state = self._state(i)  # untimed
        gc.collect()
        t0 = time.perf_counter()
        await self.cp.save(state, thread, metadata=self.work.saves[i].metadata)
        return time.perf_counter() - t0

    async def save(self, i: int) -> None:
        self.times.append(await self._save(i, THREAD))

    async def build_short(self, upto: int) -> None:
        for i in range(upto):
            await self._save(i, SHORT)

    async def fork(self, thread: str, n: int) -> float | None:
        t0 = time.perf_counter()  # tulip's Agent.fork: load the latest, save it in a new thread
        state = await self.cp.load(thread)
        assert state is not None
        await self.cp.save(state, f"fork-{n}", metadata={"forked_from": thread, "parent_checkpoint_id": None})
        return time.perf_counter() - t0

    async def copy(self, thread: str, n: int) -> float | None:
        t0 = time.perf_counter()
        try:
            await self.cp.copy_thread(thread, f"copy-{n}")
        except NotImplementedError:  # its key-value adapter has no branching
            return None
        return time.perf_counter() - t0

    async def close(self) -> None:
        if self.cp is not None:
            backend = getattr(self.cp, "_backend", None)
            client = getattr(backend, "_client", None)
            if client is not None and hasattr(client, "connection_pool"):  # tulip's Redis client
                await client.aclose()
                await client.connection_pool.disconnect()
                backend._client = None
            await self.cp.close()
        self.cp = None
        await super().close()


class FloorCase(Case):
    """The store's physical floor: each save's new messages, one INSERT each / one RPUSH / one PUT."""

    def __init__(self, key: str, label: str, store: str, work: Research) -> None:
        super().__init__(key, label, store, work)
        self.steps = [[orjson.dumps(m) for m in step] for step in work.steps()]
        self.conn: Any = None
        self.seq: dict[str, int] = {}

    async def open(self, url: str) -> None:
        await super().open(url)
        assert self.place is not None
        if self.store == "PostgreSQL":
            import asyncpg

            self.conn = await asyncpg.connect(srv.PG_DSN, server_settings={"search_path": self.place.name})
            await self.conn.execute(
                "CREATE TABLE messages (thread TEXT NOT NULL, seq INT NOT NULL, data JSONB NOT NULL, "
                "PRIMARY KEY (thread, seq))"
            )
        elif self.store == "MySQL":
            from mysql.connector.aio import connect

            self.conn = await connect(**srv.MYSQL_HOST, database=self.place.name, ssl_disabled=True)
            cur = await self.conn.cursor()
            await cur.execute(
                "CREATE TABLE messages (thread VARCHAR(64) NOT NULL, seq INT NOT NULL, data JSON NOT NULL, "
                "PRIMARY KEY (thread, seq)) DEFAULT CHARSET=utf8mb4"
            )
            await cur.close()
            await self.conn.commit()
        elif self.store == "Redis":
            import redis.asyncio as aioredis

            self.conn = aioredis.from_url(srv.REDIS_URL)
        else:
            self.conn = srv._s3_client(url)
            self.conn.create_bucket(Bucket=self.place.name)

    async def _save(self, i: int, thread: str) -> float:
        new = self.steps[i]
        start = self.seq.get(thread, 0)
        self.seq[thread] = start + len(new)
        assert self.place is not None
        t0 = time.perf_counter()
        if not new:
            pass
        elif self.store == "PostgreSQL":
            async with self.conn.transaction():
                await self.conn.executemany(
                    "INSERT INTO messages VALUES ($1, $2, $3::jsonb)",
                    [(thread, start + k, d.decode()) for k, d in enumerate(new)],
                )
        elif self.store == "MySQL":
            cur = await self.conn.cursor()
            await cur.executemany(
                "INSERT INTO messages VALUES (%s, %s, %s)", [(thread, start + k, d.decode()) for k, d in enumerate(new)]
            )
            await cur.close()
            await self.conn.commit()
        elif self.store == "Redis":
            await self.conn.rpush(f"{self.place.name}:{thread}", *new)
        else:
            body = b"\n".join(new)
            key = f"{thread}/{i:06d}.jsonl"
            await asyncio.to_thread(self.conn.put_object, Bucket=self.place.name, Key=key, Body=body)
        return time.perf_counter() - t0

    async def save(self, i: int) -> None:
        self.times.append(await self._save(i, THREAD))

    async def build_short(self, upto: int) -> None:
        for i in range(upto):
            await self._save(i, SHORT)

    async def copy(self, thread: str, n: int) -> float | None:
        assert self.place is not None
        dest = f"copy-{n}"
        t0 = time.perf_counter()
        if self.store == "PostgreSQL":
            await self.conn.execute(
                "INSERT INTO messages SELECT $1, seq, data FROM messages WHERE thread = $2", dest, thread
            )
        elif self.store == "MySQL":
            cur = await self.conn.cursor()
            await cur.execute(
                "INSERT INTO messages SELECT %s, seq, data FROM messages WHERE thread = %s", (dest, thread)
            )
            await cur.close()
            await self.conn.commit()
        elif self.store == "Redis":
            await self.conn.copy(f"{self.place.name}:{thread}", f"{self.place.name}:{dest}")
        else:

            def copy_all() -> None:
                pages = self.conn.get_paginator("list_objects_v2").paginate(Bucket=self.place.name, Prefix=thread + "/")
                for page in pages:
                    for o in page.get("Contents", []):
                        name = o["Key"].rsplit("/", 1)[1]
                        self.conn.copy_object(
                            Bucket=self.place.name,
                            Key=f"{dest}/{name}",
                            CopySource={"Bucket": self.place.name, "Key": o["Key"]},
                        )

            await asyncio.to_thread(copy_all)
        return time.perf_counter() - t0

    async def close(self) -> None:
        if self.conn is not None:
            if self.store == "Redis":
                await self.conn.aclose()
            elif self.store == "S3":
                self.conn.close()
            else:
                await self.conn.close()
        self.conn = None
        await super().close()


class GraphCase(Case):
    """LangGraph ``PostgresSaver`` + ``DeltaChannel`` in the peer worker, one superstep per save."""

    def __init__(self, key: str, label: str, work: Research, worker: peer_mod.PeerWorker) -> None:
        super().__init__(key, label, "PostgreSQL", work)
        self.worker = worker
        self.fork_msg = orjson.loads(_fork_message())

    async def open(self, url: str) -> None:
        await super().open(url)
        assert self.place is not None
        got = self.worker.call("pglg.open", key=self.key, dsn=self.place.pg_dsn, workload="research", thread_id=THREAD)
        self.note = ", ".join(f"{k}={v}" for k, v in got.items())

    async def save(self, i: int) -> None:
        self.worker.call("lg.step", key=self.key, i=i)  # timed inside the worker: put + put_writes

    async def finish(self) -> None:
        got = self.worker.call("lg.finish", key=self.key)
        self.times = list(got["times"])

    async def build_short(self, upto: int) -> None:
        assert self.place is not None
        self.worker.call("pglg.build", dsn=self.place.pg_dsn, workload="research", thread_id=SHORT, upto=upto)

    async def fork(self, thread: str, n: int) -> float | None:
        assert self.place is not None  # update_state at the latest checkpoint: a branch in the thread
        got = self.worker.call("pglg.fork", dsn=self.place.pg_dsn, message=self.fork_msg, thread_id=thread)
        return float(got["s"])


class SessionCase(Case):
    """The Agents SDK's ``SQLAlchemySession`` on PostgreSQL in the peer worker: appends new items."""

    URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"

    def __init__(self, key: str, label: str, work: Research, worker: peer_mod.PeerWorker) -> None:
        super().__init__(key, label, "PostgreSQL", work)
        self.worker = worker

    async def open(self, url: str) -> None:
        await super().open(url)
        assert self.place is not None
        self.worker.call(
            "sa.open", key=self.key, url=self.URL, schema=self.place.name, workload="research", session_id=THREAD
        )

    async def save(self, i: int) -> None:
        self.times.append(float(self.worker.call("sa.add", key=self.key, i=i)["s"]))

    async def finish(self) -> None:
        self.worker.call("sa.close", key=self.key)

    async def build_short(self, upto: int) -> None:
        assert self.place is not None
        self.worker.call(
            "sa.build", url=self.URL, schema=self.place.name, workload="research", session_id=SHORT, upto=upto
        )

    async def copy(self, thread: str, n: int) -> float | None:
        assert self.place is not None  # no fork or copy API: get_items + add_items into a new session
        got = self.worker.call("sa.copy", url=self.URL, schema=self.place.name, source=thread, dest=f"copy-{n}")
        return float(got["s"])


def _fork_message() -> bytes:
    from tulip_nb.core import Message

    return Message.user("What if we had asked the other way round?").json_bytes()


# -- the run -------------------------------------------------------------------------------------
STORES = ("PostgreSQL", "MySQL", "Redis", "S3")
GRAPH = "LangGraph PostgresSaver + DeltaChannel"
SESSION = "OpenAI Agents SQLAlchemySession (PostgreSQL)"


def nb_label(store: str, layout: str | None) -> tuple[str, str]:
    """(key, label) of tulip_nb's case on ``store`` in ``layout`` (None: the factory takes none)."""
    if layout is not None:
        return f"tulip_nb {store} {layout}", f'**tulip_nb** `layout="{layout}"`'
    what = "S3 objects" if store == "S3" else "key-value records"
    return f"tulip_nb {store}", f"**tulip_nb** (no `layout=`: tulip's {what}, a whole state per checkpoint)"


def make_cases(
    work: Research, layouts: tuple[str, ...], worker: peer_mod.PeerWorker | None, notes: list[str]
) -> list[Case]:
    from tulip_nb.memory.backends import (
        S3Backend,
        mysql_checkpointer,
        postgresql_checkpointer,
        redis_checkpointer,
    )

    factories = {
        "PostgreSQL": postgresql_checkpointer,
        "MySQL": mysql_checkpointer,
        "Redis": redis_checkpointer,
        "S3": S3Backend,
    }
    cases: list[Case] = []
    for store in STORES:
        if store in srv.PORTS and not srv.up(srv.PORTS[store]):
            notes.append(f"{store}: no server on 127.0.0.1:{srv.PORTS[store]}, skipped.")
            continue
        for layout in layouts if takes_layout(factories[store]) else (None,):
            key, label = nb_label(store, layout)
            cases.append(NbCase(key, label, store, work, layout))
        cases.append(TulipCase(f"tulip-agents {store}", "tulip-agents 2.28 (its own factory)", store, work))
        cases.append(FloorCase(f"floor {store}", _FLOOR_LABELS[store], store, work))
        if store == "PostgreSQL" and worker is not None:
            if worker.langgraph_pg:
                cases.append(GraphCase(GRAPH, "LangGraph `PostgresSaver` + `DeltaChannel` ({})", work, worker))
            if worker.alchemy:
                cases.append(SessionCase(SESSION, "OpenAI Agents `SQLAlchemySession` (asyncpg)", work, worker))
    return cases


_FLOOR_LABELS = {
    "PostgreSQL": "floor: one INSERT per new message (`jsonb`), one transaction per save",
    "MySQL": "floor: one INSERT per new message (`JSON`), one commit per save",
    "Redis": "floor: one RPUSH of the new messages per save",
    "S3": "floor: one PUT of the new messages' JSON lines per save",
}


def marks(work: Research) -> dict[int, int]:
    """Turns (a third, two thirds, all) -> the index of that turn's last save (its turn end)."""
    ends = [i for i, s in enumerate(work.saves) if s.metadata.get("source") != "iteration"]
    t = len(ends)
    return {k: ends[k - 1] for k in (t // 3, 2 * t // 3, t) if k}


async def run_case(case: Case, url: str, work: Research, at: dict[int, int]) -> None:
    """Every save into ``case``, the store's bytes at each mark, then fork and copy at both sizes."""
    await case.open(url)
    try:
        stop = {i: turns for turns, i in at.items()}
        t0 = time.perf_counter()
        for i in range(len(work.saves)):
            await case.save(i)
            if i in stop:
                case.held[stop[i]] = await srv.held(case.place) if case.place else 0
        finish = getattr(case, "finish", None)
        if finish is not None:
            await finish()
        took = time.perf_counter() - t0
        small, big = min(at), max(at)
        await case.build_short(at[small] + 1)
        for turns, thread in ((small, SHORT), (big, THREAD)):
            fork = await case.fork(thread, turns)
            if fork is not None:
                case.fork_s[turns] = fork
            if case.store == "Redis" and case.held.get(turns, 0) > COPY_LIMIT:
                case.notes.append(f"copy @{turns} turns not measured (the store holds {case.held[turns] / 1e9:.1f} GB)")
                continue
            copy = await case.copy(thread, turns)
            if copy is not None:
                case.copy_s[turns] = copy
        print(f"  remote: {case.key} done ({took:.0f} s of saves)", file=sys.stderr, flush=True)
    finally:
        await case.close()


@dataclass
class Outcome:
    work: Research
    rounds: list[dict[str, Case]]
    marks: dict[int, int]
    msgs_json: dict[int, int]
    peers_note: str
    notes: list[str]
    layouts: tuple[str, ...]
    seconds: float


def measure(
    tmp: Path, reps: int, peers_python: str | None, turns: int = 300, layouts: tuple[str, ...] = ("history", "tulip")
) -> Outcome:
    t_start = time.perf_counter()
    work = record(turns)
    print(f"  remote: workload recorded ({work.describe()})", file=sys.stderr, flush=True)
    at = marks(work)
    msgs_json = {
        k: len(b"[" + b",".join(orjson.dumps(m) for m in work.messages[: work.saves[i].n]) + b"]")
        for k, i in at.items()
    }
    worker, note = peer_mod.start(peers_python)
    notes: list[str] = []
    rounds: list[dict[str, Case]] = []
    try:
        if worker is not None:
            path = tmp / "remote-workload.json"
            path.write_text(json.dumps({"steps": work.steps()}))
            worker.call("workload", name="research", path=str(path))
            path.unlink()
        with srv.moto_process() as url:
            for r in range(reps):
                cases = make_cases(work, layouts, worker, notes if r == 0 else [])
                k = r % len(cases)
                for case in cases[k:] + cases[:k]:
                    asyncio.run(run_case(case, url, work, at))
                rounds.append({c.key: c for c in cases})
                print(f"  remote: repetition {r + 1} of {reps} done", file=sys.stderr, flush=True)
    finally:
        if worker is not None:
            worker.close()
    return Outcome(work, rounds, at, msgs_json, note, notes, layouts, time.perf_counter() - t_start)


# -- the tables ----------------------------------------------------------------------------------
def _med(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def _mb(n: float | None) -> str:
    if n is None:
        return "—"
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.1f} kB"


def _ms(s: float | None) -> str:
    if s is None:
        return "—"
    ms = s * 1e3
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 100 else f"{ms:,.0f}"


def per_round(o: Outcome, key: str, fn: Callable[[Case], float | None]) -> list[float]:
    out = []
    for rnd in o.rounds:
        c = rnd.get(key)
        if c is not None and len(c.times) == len(o.work.saves):
            v = fn(c)
            if v is not None:
                out.append(v)
    return out


def tables(o: Outcome) -> list[str]:
    small, mid, big = sorted(o.marks)
    keys = list(o.rounds[0]) if o.rounds else []
    order = sorted(keys, key=lambda k: (STORES.index(o.rounds[0][k].store), _rank(k)))
    lines = [
        f"Workload (bench/research.py): {o.work.describe()}. {len(o.rounds)} repetition(s); in each, every "
        "case runs the whole workload on a fresh place of its server (schema, database, key tag, bucket), "
        "one case after another in an order rotating by one per repetition. Cells: medians over the "
        f"repetitions. Marks: the turn ends of turns {small}, {mid} and {big}.",
        "",
        f"Peers: {o.peers_note.rstrip('.')}.",
        "",
        f"| store | case | all saves (s) | ÷ PostgresSaver + DeltaChannel | last {EDGE} ÷ first {EDGE} saves | "
        f"held @{small} / @{mid} / @{big} turns | ÷ messages' JSON @{small} / @{mid} / @{big} | growth "
        f"{small}→{big} | fork @{small} / @{big} turns (ms) | copy @{small} / @{big} turns (ms) |",
        "|---|---|---:|---:|---:|---|---|---:|---|---|",
    ]
    for key in order:
        c = o.rounds[0][key]
        total = per_round(o, key, lambda c: sum(c.times))
        graph = per_round(o, GRAPH, lambda c: sum(c.times))
        ratio = [a / b for a, b in zip(total, graph, strict=False) if b] if len(total) == len(graph) else []
        edge = per_round(o, key, lambda c: sum(c.times[-EDGE:]) / sum(c.times[:EDGE]) if sum(c.times[:EDGE]) else None)
        held = {t: _med(per_round(o, key, lambda c, t=t: c.held.get(t))) for t in o.marks}
        mult = " / ".join(f"{h / o.msgs_json[t]:.1f}{X}" if h else "—" for t, h in held.items())
        growth = f"{held[big] / held[small]:.1f}{X}" if held[big] and held[small] else "—"
        fork = [_med(per_round(o, key, lambda c, t=t: c.fork_s.get(t))) for t in (small, big)]
        copy = [_med(per_round(o, key, lambda c, t=t: c.copy_s.get(t))) for t in (small, big)]
        label = c.label.replace("({})", f"({c.note})" if c.note else "").replace(" ()", "")
        lines.append(
            f"| {c.store} | {label} | {_fmt(_med(total), '{:.2f}')} | {_fmt(_med(ratio), '{:.2f}' + X)} | "
            f"{_fmt(_med(edge), '{:.1f}' + X)} | {' / '.join(_mb(h) for h in held.values())} | {mult} | {growth} | "
            f"{_pair(fork)} | {_pair(copy)} |"
        )
    lines += [
        "",
        f"Messages' JSON at the marks: {' / '.join(_mb(v) for v in o.msgs_json.values())}. What a store holds: "
        "PostgreSQL `pg_total_relation_size` of every table in the case's schema (TOAST and indexes, dead "
        "row versions not yet vacuumed included), MariaDB `SUM(LENGTH(col))` over every column of every table "
        "in the case's database, Redis `MEMORY USAGE` of every key carrying the case's tag, S3 the sum of "
        "the bucket's object sizes. A fork: tulip_nb `Agent.fork` (loads the latest, saves it as a new "
        "thread); tulip-agents load + save (its `Agent.fork`); LangGraph `update_state` at the latest "
        "checkpoint (a branch of the thread). A copy: `copy_thread` (every checkpoint); the Agents SDK has "
        "neither (its copy is `get_items` + `add_items` into a new session); PostgresSaver has no "
        "`copy_thread` and tulip-agents' key-value adapter no branching (`copy_thread` raises "
        "`NotImplementedError`): —. The thread of the first mark is the workload's first saves replayed into a "
        "second thread of the same store (untimed), after the last mark was measured. O(1) reads as the "
        "same time at both marks.",
        "",
        "tulip_nb's cases use the factories' defaults (`sign=True`); a factory that takes `layout=` is run in "
        f"each of {', '.join(o.layouts)}, one that does not once, labelled with what it writes. tulip-agents is "
        "handed fresh message objects at every save (it caches nothing); tulip_nb the agent's objects (each "
        "message serialised once). LangGraph's save is its saver's `put` + `put_writes` (timed in the "
        "worker); the Agents SDK's `add_items`. "
        f"({o.seconds:.0f} s, the recording included.)",
    ]
    lines += [f"- {n}" for n in o.notes]
    for key in order:
        for rnd in o.rounds:
            lines += [f"- {key}: {n}" for n in rnd[key].notes]
    return lines


def _rank(key: str) -> int:
    for i, p in enumerate(("tulip_nb", "tulip-agents", GRAPH, SESSION, "floor")):
        if key.startswith(p):
            return i
    return 9


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else spec.format(v)


def _pair(vals: list[float | None]) -> str:
    a, b = vals
    if a is None and b is None:
        return "—"
    cell = f"{_ms(a)} / {_ms(b)}"
    return cell + (f" ({b / a:.1f}{X})" if a and b else "")


def section_remote(ctx: Any) -> list[str]:
    """The ``remote`` section of ``python -m bench``."""
    reps = ctx.reps or (1 if ctx.quick else 2)
    turns = getattr(ctx, "turns", None) or 300
    layouts = getattr(ctx, "layouts", None) or ("history", "tulip")
    o = measure(ctx.tmp, reps, getattr(ctx, "peers_python", None), turns, tuple(layouts))
    return tables(o)
