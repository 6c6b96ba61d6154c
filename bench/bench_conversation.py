"""The conversation section: the issue-26 research thread saved after every model call, every store
side by side, interleaved save by save.

The workload (:mod:`bench.research`): 300 turns, a save after every model call, replayed from one
recording into every case, never shrunk. A round is two passes (:data:`GROUPS`); each opens its
cases on new directories and walks the saves in order, every case making each save in an order that
rotates by one case per save and per round, so the machine's drift falls on all cases alike. Then
each case is closed (disk counted after close) and "load latest" runs from a fresh instance of each,
interleaved the same way (one warm-up load each, discarded). Rounds: 3 (``--quick``: 1; ``--reps``
overrides).

Cases:

- tulip_nb ``FileCheckpointer(base, layout="history")`` (SQLite WAL, ``synchronous=FULL``; its
  default ``sign=False``), fsync on and off. (The delta layout's cases went with its engine,
  issue 26: its last figures are in ``bench/README.md``.) The agent's way: one set of message objects
  per case, grown save by save (as the agent holds them), so each message is serialised once.
- tulip_nb history, fsync off, **fresh message objects at every save** (no serialisation or
  chain cache can help), beside tulip-agents' ``FileCheckpointer`` (pretty JSON, never fsyncs,
  has no serialisation cache), also handed fresh objects at every save: the "faster than
  tulip-agents" ratio, with what the cache buys as a ratio of its own.
- OpenAI Agents ``SQLiteSession`` (appends each save's new items; WAL, ``synchronous=FULL``) and
  LangGraph ``SqliteSaver`` + ``DeltaChannel`` (one graph run, a superstep per save; the saver's
  ``put`` + ``put_writes`` timed), in the peer worker (:mod:`bench.peers`).
- The floor: the save's new messages' JSON appended to one file + ``fdatasync``; its load is reading
  and parsing the latest state's JSON.

What each stores differs, and the tables say so: tulip_nb rows keep the whole agent state (tool
executions, counters, events, save metadata, a content digest) and, at each turn end, tulip's
envelope of that state (the projection tulip reads); SQLiteSession keeps the items; LangGraph the
messages channel (and its own bookkeeping channels).

    .venv/bin/python -m bench --sections conversation --peers-python /tmp/peers-venv/bin/python
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import peers as peer_mod
from bench.research import Research, record
from tulip_nb.memory.backends import FileCheckpointer

X = "\u00d7"  # the multiplication sign of the ratios
DASH = "\u2013"  # the en dash of the ranges
THREAD = "research"
MID_LAST = 100  # the mid-turn saves whose median is "a save at the end of the thread"


# -- the cases -----------------------------------------------------------------------------------
@dataclass
class Case:
    """One store in one round: :meth:`save` makes save ``i`` and records its seconds."""

    key: str
    label: str
    directory: Path
    times: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    disk_bytes: int = 0
    disk_note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    async def open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    async def save(self, i: int, rest: Any = None) -> None:
        """Make save ``i``; ``rest``: that save's other fields, parsed once for every tulip_nb case."""
        raise NotImplementedError

    async def close(self) -> None:
        self.disk_bytes = _disk(self.directory)

    async def load(self) -> float:
        raise NotImplementedError


def _read_parse(path: Path) -> float:
    gc.collect()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        orjson.loads(f.read())
    return time.perf_counter() - t0


def _disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


class NbCase(Case):
    """tulip_nb's FileCheckpointer in ``layout``; ``fresh``: new message objects at every save."""

    def __init__(self, key: str, label: str, directory: Path, work: Research, layout: str, fsync: bool, fresh: bool):
        super().__init__(key, label, directory)
        self.work, self.layout, self.fsync, self.fresh = work, layout, fsync, fresh
        self.cp: Any = None
        self.msgs: list[Any] = []

    def _make(self) -> Any:
        return FileCheckpointer(self.directory, layout=self.layout, fsync=self.fsync)  # type: ignore[arg-type]

    async def open(self) -> None:
        await super().open()
        self.cp = self._make()
        if not self.fresh:
            self.msgs = self.work.fresh_messages()  # this case's own objects, each serialised on its first save

    async def save(self, i: int, rest: Any = None) -> None:
        s = self.work.saves[i]
        state = s.state(self.work.fresh_messages(s.n) if self.fresh else self.msgs[: s.n], rest)  # untimed
        t0 = time.perf_counter()
        await self.cp.save(state, THREAD, metadata=s.metadata)
        self.times.append(time.perf_counter() - t0)

    async def close(self) -> None:
        await self.cp.close()
        self.cp, self.msgs = None, []
        await super().close()
        files = [p for p in self.directory.rglob("*") if p.is_file()]
        if self.layout == "history":
            db = sum(p.stat().st_size for p in files if p.parent.name == ".tulip_nb")
            env = sum(p.stat().st_size for p in files if p.suffix == ".json")
            self.disk_note = f"SQLite {db / 1e6:.2f} MB + tulip envelope {env / 1e6:.2f} MB"
        else:
            log = sum(p.stat().st_size for p in files if p.name.startswith(".tulip_nb_log"))
            env = sum(p.stat().st_size for p in files if p.suffix == ".json")
            self.disk_note = f"log {log / 1e6:.2f} MB + tulip envelope {env / 1e6:.2f} MB"

    async def load(self) -> float:
        cp = self._make()
        try:
            gc.collect()
            t0 = time.perf_counter()
            got = await cp.load(THREAD)
            dt = time.perf_counter() - t0
        finally:
            await cp.close()
        assert got is not None and len(got.messages) == len(self.work.messages)
        return dt


class TulipCase(Case):
    """tulip-agents' FileCheckpointer (its defaults: pretty JSON, no fsync), fresh objects each save."""

    def __init__(self, key: str, label: str, directory: Path, work: Research):
        super().__init__(key, label, directory)
        self.work = work

    async def open(self) -> None:
        from tulip.memory.backends.file import FileCheckpointer as TulipFile

        await super().open()
        self.cp = TulipFile(self.directory)

    def _state(self, i: int) -> Any:
        from tulip.core.state import AgentState as TulipState

        s = self.work.saves[i]
        d = orjson.loads(s.rest)
        d["messages"] = self.work.fresh_tulip_messages(s.n)
        return TulipState.model_validate(d)

    async def save(self, i: int, rest: Any = None) -> None:
        state = self._state(i)  # untimed: tulip's frozen state, new objects (it caches nothing anyway)
        t0 = time.perf_counter()
        await self.cp.save(state, THREAD, metadata=self.work.saves[i].metadata)
        self.times.append(time.perf_counter() - t0)

    async def load(self) -> float:
        from tulip.memory.backends.file import FileCheckpointer as TulipFile

        cp = TulipFile(self.directory)
        gc.collect()
        t0 = time.perf_counter()
        got = await cp.load(THREAD)
        dt = time.perf_counter() - t0
        assert got is not None and len(got.messages) == len(self.work.messages)
        return dt


class FloorCase(Case):
    """The physical floor: append the save's new messages' JSON to one file, ``fdatasync``."""

    def __init__(self, key: str, label: str, directory: Path, work: Research):
        super().__init__(key, label, directory)
        self.steps = work.steps()
        self.work = work

    async def open(self) -> None:
        await super().open()
        self.fd = os.open(self.directory / "thread.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    async def save(self, i: int, rest: Any = None) -> None:
        new = self.steps[i]
        t0 = time.perf_counter()
        os.write(self.fd, b"".join(orjson.dumps(d) + b"\n" for d in new))
        os.fdatasync(self.fd)
        self.times.append(time.perf_counter() - t0)

    async def close(self) -> None:
        os.close(self.fd)
        await super().close()
        # the load floor: the latest state's JSON, read and parsed (written here, untimed, not counted)
        last = self.work.saves[-1]
        state = last.state(self.work.fresh_messages(last.n))
        (self.directory.parent / f"{self.directory.name}-latest.json").write_bytes(state.to_json_bytes())

    async def load(self) -> float:
        path = self.directory.parent / f"{self.directory.name}-latest.json"
        return _read_parse(path)


class SessionCase(Case):
    """OpenAI Agents ``SQLiteSession`` in the peer worker: each save appends its new items."""

    def __init__(self, key: str, label: str, directory: Path, worker: peer_mod.PeerWorker, items: int):
        super().__init__(key, label, directory)
        self.worker, self.items = worker, items
        self.db = directory / "sessions.db"

    async def open(self) -> None:
        await super().open()
        self.extra.update(self.worker.call("oa.open", key=self.key, path=str(self.db), workload="research"))

    async def save(self, i: int, rest: Any = None) -> None:
        self.times.append(self.worker.call("oa.add", key=self.key, i=i)["s"])

    async def close(self) -> None:
        self.worker.call("oa.close", key=self.key)
        await super().close()

    async def load(self) -> float:
        got = self.worker.call("oa.load", path=str(self.db))
        assert got["items"] == self.items, (got["items"], self.items)
        return float(got["s"])


class GraphCase(Case):
    """LangGraph ``SqliteSaver`` + ``DeltaChannel`` in the peer worker, one superstep per save."""

    def __init__(self, key: str, label: str, directory: Path, worker: peer_mod.PeerWorker, messages: int):
        super().__init__(key, label, directory)
        self.worker, self.messages = worker, messages
        self.db = directory / "lg.db"

    async def open(self) -> None:
        await super().open()
        self.extra.update(self.worker.call("lg.open", key=self.key, path=str(self.db), workload="research"))

    async def save(self, i: int, rest: Any = None) -> None:
        self.worker.call("lg.step", key=self.key, i=i)  # timed inside: the saver's calls, per checkpoint

    async def close(self) -> None:
        got = self.worker.call("lg.finish", key=self.key)
        self.times = list(got["times"])
        self.extra["checkpoints"] = got["checkpoints"]
        await super().close()

    async def load(self) -> float:
        got = self.worker.call("lg.load", path=str(self.db))
        assert got["messages"] == self.messages, (got["messages"], self.messages)
        return float(got["s"])


# -- the run -------------------------------------------------------------------------------------
HISTORY = "history"
HISTORY_OFF = "history fsync off"
HISTORY_FRESH = "history fresh"
TULIP = "tulip-agents"
SESSION = "SQLiteSession"
GRAPH = "LangGraph"
FLOOR = "floor"

LABELS = {
    HISTORY: '**tulip_nb `layout="history"`, fsync=True** (SQLite WAL, synchronous=FULL)',
    HISTORY_OFF: 'tulip_nb `layout="history"`, fsync=False (synchronous=OFF)',
    HISTORY_FRESH: 'tulip_nb `layout="history"`, fsync=False, **fresh message objects at every save**',
    TULIP: "tulip-agents FileCheckpointer (pretty JSON, never fsyncs), fresh objects at every save",
    SESSION: "OpenAI Agents SQLiteSession (appends new items)",
    GRAPH: "LangGraph SqliteSaver + DeltaChannel (langchain-core messages)",
    FLOOR: "floor: append the new messages' JSON + fdatasync",
}


@dataclass
class Outcome:
    work: Research
    rounds: list[dict[str, Case]]
    load_reps: int
    peers_note: str
    seconds: float


def _cases(root: Path, work: Research, worker: peer_mod.PeerWorker | None) -> dict[str, Case]:
    steps = work.steps()
    n_items = 0
    if worker is not None and worker.sessions:
        from bench.bench_openai_sessions import to_items

        n_items = sum(len(to_items(m)) for step in steps for m in step)
    out: dict[str, Case] = {
        HISTORY: NbCase(HISTORY, LABELS[HISTORY], root / "history", work, "history", True, False),
        HISTORY_OFF: NbCase(HISTORY_OFF, LABELS[HISTORY_OFF], root / "history_off", work, "history", False, False),
        HISTORY_FRESH: NbCase(
            HISTORY_FRESH, LABELS[HISTORY_FRESH], root / "history_fresh", work, "history", False, True
        ),
        TULIP: TulipCase(TULIP, LABELS[TULIP], root / "tulip", work),
    }
    if worker is not None and worker.sessions:
        out[SESSION] = SessionCase(SESSION, LABELS[SESSION], root / "session", worker, n_items)
    if worker is not None and worker.langgraph:
        out[GRAPH] = GraphCase(GRAPH, LABELS[GRAPH], root / "langgraph", worker, len(work.messages))
    out[FLOOR] = FloorCase(FLOOR, LABELS[FLOOR], root / "floor", work)
    return out


def _rotated(names: list[str], k: int) -> list[str]:
    k %= len(names)
    return names[k:] + names[:k]


GROUPS: tuple[tuple[str, ...], ...] = (
    (HISTORY, HISTORY_OFF, SESSION, GRAPH, FLOOR),
    (HISTORY_FRESH, TULIP),
)
"""The passes of a round: the cases interleaved with each other. tulip-agents (never fsyncs, 1.6 GB
of whole checkpoints) runs in a pass of its own with the no-cache history case: on ext4's ordered
journal an fsync waits for other files' dirty data, so its writes would land on the durable cases'
fsyncs, whichever of them came next."""


async def _pass(cases: dict[str, Case], names: list[str], r: int, work: Research, load_reps: int) -> None:
    """Every save of the workload in the cases ``names``, interleaved; then their loads."""
    os.sync()  # start with no one's dirty data in the page cache (untimed)
    gc.collect()
    for name in names:
        await cases[name].open()
    t0 = time.perf_counter()
    for i in range(len(work.saves)):
        rest = work.saves[i].parse()  # untimed, once per save for every tulip_nb case
        for name in _rotated(names, i + r):
            await cases[name].save(i, rest)
        if i and i % 300 == 0:
            print(
                f"  conversation: round {r + 1}, {'/'.join(names)}: {i} saves ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
            )
    for name in names:
        await cases[name].close()
    for rep in range(load_reps + 1):  # the first rep warms each case up (imports, first-use caches)
        for name in _rotated(names, rep + r):
            dt = await cases[name].load()
            if rep:
                cases[name].loads.append(dt)


async def _round(
    root: Path, r: int, work: Research, worker: peer_mod.PeerWorker | None, load_reps: int
) -> dict[str, Case]:
    """One round: each pass of :data:`GROUPS` (their order alternating by round), directories
    removed as soon as a pass is done."""
    cases = _cases(root, work, worker)
    groups = [[k for k in g if k in cases] for g in GROUPS]
    if r % 2:
        groups.reverse()
    for names in groups:
        try:
            await _pass(cases, names, r, work, load_reps)
        finally:
            for name in names:
                shutil.rmtree(cases[name].directory, ignore_errors=True)
    return cases


def measure(
    tmp: Path, rounds: int, load_reps: int, peers_python: str | None, turns: int = 300, work: Research | None = None
) -> Outcome:
    """Record the workload (unless given), run ``rounds`` interleaved rounds, return every case."""
    t_start = time.perf_counter()
    work = work or record(turns)
    print(f"  conversation: workload recorded ({work.describe()})", file=sys.stderr)
    worker, note = peer_mod.start(peers_python)
    out: list[dict[str, Case]] = []
    try:
        if worker is not None:
            path = tmp / "conversation-workload.json"
            path.write_text(json.dumps({"steps": work.steps()}))
            worker.call("workload", name="research", path=str(path))
            path.unlink()
        for r in range(rounds):
            root = tmp / f"conversation-{r}"
            try:
                got = asyncio.run(_round(root, r, work, worker, load_reps))
            finally:
                shutil.rmtree(root, ignore_errors=True)
            out.append(got)
            print(f"  conversation: round {r + 1} of {rounds} done", file=sys.stderr)
    finally:
        if worker is not None:
            worker.close()
    return Outcome(work, out, load_reps, note, time.perf_counter() - t_start)


# -- the tables ----------------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def _span(vals: list[float], fmt: Callable[[float], str]) -> str:
    if not vals:
        return "—"
    med = statistics.median(vals)
    return fmt(med) if len(vals) == 1 else f"{fmt(med)} ({fmt(min(vals))}{DASH}{fmt(max(vals))})"


def status(ratio: float | None, target: float) -> str:
    """``met`` when ``ratio`` ≤ ``target``, else by how much it is missed."""
    if ratio is None:
        return "not measured"
    if ratio <= target:
        return "met"
    over = ratio / target
    return f"missed by {(over - 1) * 100:.0f} %" if over < 1.1 else f"missed ({over:.1f}{X} the target)"


def _mid_picks(work: Research) -> tuple[list[int], list[int]]:
    mids = [i for i, s in enumerate(work.saves) if s.metadata.get("source") == "iteration"]
    ends = [i for i, s in enumerate(work.saves) if s.metadata.get("source") != "iteration"]
    return mids[-MID_LAST:], ends


def per_round(o: Outcome, key: str, what: str) -> list[float]:
    """One value per round for case ``key``: ``total`` seconds, ``disk`` bytes, ``load`` seconds
    (the median of that round's loads), ``mid`` (median of the last mid-turn saves), ``end``."""
    mids, ends = _mid_picks(o.work)
    vals = []
    for rnd in o.rounds:
        c = rnd.get(key)
        if c is None or len(c.times) != len(o.work.saves):
            continue
        if what == "total":
            vals.append(sum(c.times))
        elif what == "disk":
            vals.append(float(c.disk_bytes))
        elif what == "load" and c.loads:
            vals.append(statistics.median(c.loads))
        elif what == "mid":
            vals.append(statistics.median(c.times[i] for i in mids))
        elif what == "end":
            vals.append(statistics.median(c.times[i] for i in ends))
    return vals


def ratios(o: Outcome, a: str, b: str, what: str) -> list[float]:
    """``a ÷ b`` of ``what`` in each round where both ran (same-run ratios)."""
    av, bv = per_round(o, a, what), per_round(o, b, what)
    return [x / y for x, y in zip(av, bv, strict=False) if y] if len(av) == len(bv) else []


def tables(o: Outcome) -> list[str]:
    work = o.work
    msgs_json = work.json_bytes
    keys = [k for k in o.rounds[0]] if o.rounds else []
    mids, ends = _mid_picks(work)
    lines = [
        f"Workload (bench/research.py, the issue's): {work.describe()}. "
        f"{len(o.rounds)} round(s); each round two passes, the cases of a pass interleaved save by save in "
        "rotating order (tulip-agents and the fresh-objects history row in a pass of their own, away from the "
        f"durable cases' fsyncs); load latest: median of {o.load_reps} fresh-instance loads per round after "
        "one warm-up. Cells: median over the rounds (range).",
        "",
        f"Peers: {o.peers_note.rstrip('.')}.",
        "",
        "| case (one save per model call) | durable conversation, all saves (s) | mid-turn save, median of "
        f"the last {len(mids)} (ms) | turn-end save, median of {len(ends)} (ms) | disk after close | "
        "disk ÷ messages' JSON | load latest, fresh instance (ms) |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for key in keys:
        c = o.rounds[0][key]
        disk = per_round(o, key, "disk")
        note = f" ({c.disk_note})" if c.disk_note else ""
        if key == GRAPH:
            note = f" ({c.extra.get('checkpoints', '?')} checkpoints)"
        load = per_round(o, key, "load")
        lines.append(
            f"| {c.label} | {_span(per_round(o, key, 'total'), lambda v: f'{v:.2f}')} | "
            f"{_span(per_round(o, key, 'mid'), _ms)} | {_span(per_round(o, key, 'end'), _ms)} | "
            f"{statistics.median(disk) / 1e6:.2f} MB{note} | {statistics.median(disk) / msgs_json:.2f}{X} | "
            f"{_span(load, _ms)} |"
        )
    pragmas = []
    for key in (SESSION, GRAPH):
        peer = o.rounds[0].get(key) if o.rounds else None
        if peer is not None and peer.extra:
            pragmas.append(
                f"{key}: journal_mode={peer.extra.get('journal_mode')}, synchronous={peer.extra.get('synchronous')}"
            )
    lines += [
        "",
        "Read back from the peers' own connections: " + ("; ".join(pragmas) if pragmas else "—") + ". "
        "tulip_nb rows keep the whole agent state (tool executions, counters, events), the save metadata "
        "and a content digest per checkpoint, and tulip's envelope of the latest turn end (what tulip "
        "reads); SQLiteSession keeps the items, LangGraph its messages channel. Disk counts every file "
        "after close (SQLite folds its WAL into the database on the last close). LangGraph's save is "
        "the saver's `put` + `put_writes` of that superstep (the graph runtime around them is not counted); "
        "its load is `graph.get_state` (snapshot + writes since, replayed). The floor's load: read + "
        "`orjson.loads` of the latest state's JSON.",
        "",
        "Same-run ratios (each round's figures divided, then the median over rounds, and the range):",
        "",
        "| ratio (same run) | median | range | target | status |",
        "|---|---:|---|---|---|",
    ]

    def row(label: str, a: str, b: str, what: str, target: float | None = None, faster: bool = False) -> None:
        rs = ratios(o, a, b, what)
        if not rs:
            lines.append(
                f"| {label} | — | {b} not measured | {'' if target is None else f'≤ {target:.1f}{X}'} | "
                f"{'not measured' if target is not None else ''} |"
            )
            return
        med = statistics.median(rs)
        rng = f"{min(rs):.2f}{DASH}{max(rs):.2f}" if len(rs) > 1 else "one round"
        cell = f"{med:.2f}{X}" + (f" ({1 / med:.1f}{X} faster)" if faster and med < 1 else "")
        tgt = "" if target is None else f"≤ {target:.1f}{X}"
        st = "" if target is None else status(med, target)
        lines.append(f"| {label} | {cell} | {rng} | {tgt} | {st} |")

    row("durable conversation: history ÷ SQLiteSession", HISTORY, SESSION, "total", 1.0)
    row("durable conversation: history ÷ LangGraph + DeltaChannel", HISTORY, GRAPH, "total")
    row("durable conversation: history ÷ floor (append + fdatasync)", HISTORY, FLOOR, "total")
    row("disk: history ÷ SQLiteSession", HISTORY, SESSION, "disk", 1.5)
    row("disk: history ÷ LangGraph + DeltaChannel", HISTORY, GRAPH, "disk")
    row("load latest: history ÷ LangGraph + DeltaChannel", HISTORY, GRAPH, "load", 1.5)
    row("load latest: history ÷ SQLiteSession", HISTORY, SESSION, "load")
    row("load latest: history ÷ read + parse of the state (floor)", HISTORY, FLOOR, "load")
    row(
        "**vs tulip-agents, fresh objects at every save** (no cache; fsync off): history ÷ tulip-agents",
        HISTORY_FRESH,
        TULIP,
        "total",
        faster=True,
    )
    row(
        "vs tulip-agents, the agent's way (objects reused, caches warm; fsync off)",
        HISTORY_OFF,
        TULIP,
        "total",
        faster=True,
    )
    row(
        "what the caches buy: history with fresh objects ÷ the agent's way (fsync off)",
        HISTORY_FRESH,
        HISTORY_OFF,
        "total",
    )
    row("load latest: history ÷ tulip-agents", HISTORY, TULIP, "load", faster=True)
    lines += [
        "",
        f"Targets (issue 26; same-run ratios, never assertions): durable conversation ≤ 1.0{X} SQLiteSession, "
        f"disk ≤ 1.5{X} SQLiteSession's, load latest ≤ 1.5{X} LangGraph's. The fresh-objects rows hand every "
        "save new `Message` objects (built untimed), so neither tulip_nb's per-message JSON cache nor its "
        "per-thread chain cache can help; tulip-agents re-serialises its whole state at every save either "
        "way. The agent's way is what an agent does (the same objects, grown), so its ratio over the fresh "
        f"row is what the caches buy. ({o.seconds:.0f} s, the recording included.)",
    ]
    if o.rounds and SESSION not in o.rounds[0] and GRAPH not in o.rounds[0]:
        lines += ["", "No peer ran: their columns say so (see the Peers line)."]
    return lines


def section_conversation(ctx: Any) -> list[str]:
    """The ``conversation`` section of ``python -m bench``."""
    rounds = ctx.reps or (1 if ctx.quick else 3)
    o = measure(ctx.tmp, rounds, 3 if ctx.quick else 7, getattr(ctx, "peers_python", None))
    return tables(o)
