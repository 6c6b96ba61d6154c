"""Checkpointer benchmark: tulip_nb beside tulip-agents and beside the raw-I/O floor.

    python -m bench                      # every section
    python -m bench --quick              # fewer repetitions (a smoke run)
    python -m bench --section checkpoint --section lab   # some sections (repeatable)
    python -m bench --sections conversation,checkpoints10k,forks   # the same, comma-separated
    python -m bench --out bench/latest.md                # also write the tables to a file

Sections
--------
``checkpoint``  one save / one load at 20, 200 and 2000 messages (prefixes of the BENCH.md
                conversation): tulip_nb FileCheckpointer and MemoryCheckpointer, tulip-agents'
                FileCheckpointer and MemoryCheckpointer on the same conversation (as tulip
                objects), and the floors (orjson dumps; + write + rename; + fsync; read + orjson
                loads). Medians of interleaved repetitions after a warm-up; ratios are taken
                inside this run only (the machine is 2 shared, noisy cores).
``conversation`` the 2000-message conversation saved after every iteration (one save per model
                call, with the agent's ``source``: "iteration" inside a turn, "final" at its end)
                by tulip_nb (delta layout with fsync on/off and unsigned, ``layout="tulip"``), by
                tulip-agents, LangGraph's SqliteSaver and the OpenAI Agents SDK's SQLiteSession:
                total seconds, first vs last 50 saves, bytes on disk, "load latest" with all those
                checkpoints in the thread; then the mid-turn save, load latest and load of older
                checkpoints against their floors, and the disk against the messages' JSON.
``checkpoints10k``, ``forks`` a 10,000-checkpoint thread and forks / a sweep of a 2000-message
                thread (:mod:`bench.bench_storage`).

Everything is written under a fresh ``tempfile.mkdtemp()`` directory that is removed at the end.
LangGraph (InMemorySaver, SqliteSaver) is measured when it is installed (the ``bench`` extra).
The other sections (tokens, compactor, kv, remote, lab, export, server, memory, corpus) are in
:mod:`bench.sections`, over the standalone scripts ``bench/bench_*.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from bench import bench_langgraph as lg
from bench import bench_openai_sessions as oa
from bench import bench_storage, sections
from bench.workload import (
    SIZES,
    build_conversation,
    build_state,
    conversation_stats,
    iteration_ends,
    save_sources,
    to_tulip_messages,
    to_tulip_state,
)
from tulip_nb.core import AgentState, state_json_bytes
from tulip_nb.core.keys import ITERATION_KEY, RUN_ID_KEY, SOURCE_KEY
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer

Case = Callable[[], Awaitable[float]]
"""One measurement: does its own untimed setup, returns the seconds of the timed part."""

MANY = 936  # checkpoints already in the thread for the "many checkpoints" load (BENCH.md)
TULIP_BUDGET_S = 60.0  # the conversation section's bound on tulip-agents' run
FALLBACK_MESSAGES = 500


# -- timing ---------------------------------------------------------------------------------------
@dataclass
class Result:
    samples: dict[str, list[float]] = field(default_factory=dict)

    def median_ms(self, name: str) -> float | None:
        s = self.samples.get(name)
        return statistics.median(s) * 1e3 if s else None


async def measure(cases: dict[str, Case], reps: int, warmup: int = 2) -> Result:
    """Run every case ``warmup + reps`` times, interleaved and in a rotating order.

    Interleaving spreads the machine's noise over all cases alike, so the ratios of medians taken
    in one run are stable even when absolute times drift.
    """
    res = Result({name: [] for name in cases})
    names = list(cases)
    for rep in range(warmup + reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            gc.collect()
            dt = await cases[name]()
            if rep >= warmup:
                res.samples[name].append(dt)
    return res


def _timed_sync(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- floors ---------------------------------------------------------------------------------------
class Floor:
    """What the bytes alone cost: orjson encode/decode and the file-system calls, nothing else."""

    def __init__(self, directory: Path, envelope: dict[str, Any]) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.obj = envelope
        self.n = 0
        self.last: Path | None = None

    def dumps(self) -> bytes:
        return orjson.dumps(self.obj)

    def write(self, fsync: bool) -> None:
        data = orjson.dumps(self.obj)
        self.n += 1
        path = self.dir / f"{self.n:06d}.json"
        tmp = self.dir / f".{self.n:06d}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.last = path

    def read(self) -> Any:
        assert self.last is not None
        with open(self.last, "rb") as f:
            return orjson.loads(f.read())


# -- section: checkpoint --------------------------------------------------------------------------
def _tulip_classes() -> tuple[Any, Any]:
    from tulip.memory.backends.file import FileCheckpointer as TulipFile
    from tulip.memory.backends.memory import MemoryCheckpointer as TulipMemory

    return TulipFile, TulipMemory


async def _fill_many(nb_dir: Path, tulip_dir: Path, thread: str, count: int) -> None:
    """``count`` older checkpoints (the 20-message prefix) in a thread, for both libraries.

    Finding the latest costs per file (a listing plus a head read), not per byte, so small older
    checkpoints stand in for the growing ones of a real conversation without writing 700 MB.
    """
    TulipFile, _ = _tulip_classes()
    small = build_state(20)
    small_t = to_tulip_state(small)
    nb = FileCheckpointer(nb_dir, fsync=False)
    tf = TulipFile(tulip_dir)
    for _ in range(count):
        await nb.save(small, thread)
        await tf.save(small_t, thread)


async def _checkpoint_size(
    tmp: Path, n: int, reps: int, rows: dict[str, dict[int, float | None]], sizes_bytes: dict[str, dict[int, int]]
) -> None:
    """Measure every case at ``n`` messages into ``rows`` (case -> size -> median ms)."""
    TulipFile, TulipMemory = _tulip_classes()
    root = tmp / f"ck{n}"
    root.mkdir()
    warm = build_state(n)
    warm_t = to_tulip_state(warm)
    state_json_bytes(warm)  # the agent saved these messages before: their bytes are cached
    env = FileCheckpointer(root / "probe", fsync=False)
    cid = await env.save(warm, "t")
    envelope_bytes = (env.checkpoint_path("t", cid)).read_bytes()
    envelope = orjson.loads(envelope_bytes)
    sizes_bytes["tulip_nb file"][n] = len(envelope_bytes)

    nb_sync = FileCheckpointer(root / "nb_sync")
    nb_nosync = FileCheckpointer(root / "nb_nosync", fsync=False)
    nb_cold = FileCheckpointer(root / "nb_cold", fsync=False)
    nb_cold_sync = FileCheckpointer(root / "nb_cold_sync")
    nb_mem = MemoryCheckpointer()
    t_file = TulipFile(root / "tulip")
    t_mem = TulipMemory()
    floor = Floor(root / "floor", envelope)

    # load fixtures: one checkpoint per thread (and, at 2000, a thread with MANY older ones)
    await FileCheckpointer(root / "nb_load").save(warm, "t")
    await TulipFile(root / "tulip_load").save(warm_t, "t")
    await nb_mem.save(warm, "t")
    await t_mem.save(warm_t, "t")
    floor.write(fsync=False)
    tulip_file = next((root / "tulip_load" / "t").glob("*.json"))
    sizes_bytes["tulip file"][n] = tulip_file.stat().st_size
    many = n == SIZES[-1]
    if many:
        await _fill_many(root / "nb_many", root / "tulip_many", "t", MANY - 1)
        await FileCheckpointer(root / "nb_many").save(warm, "t")
        await TulipFile(root / "tulip_many").save(warm_t, "t")

    async def timed(coro_fn: Callable[[], Awaitable[Any]]) -> float:
        t0 = time.perf_counter()
        await coro_fn()
        return time.perf_counter() - t0

    async def cold_save(cp: FileCheckpointer) -> float:
        fresh = build_state(n)  # new Message objects: nothing cached (untimed)
        return await timed(lambda: cp.save(fresh, "t"))

    async def nb_load(d: str) -> float:
        cp = FileCheckpointer(root / d)  # a fresh instance: no head cache, as in a new process
        return await timed(lambda: cp.load("t"))

    async def tulip_load(d: str) -> float:
        cp = TulipFile(root / d)
        return await timed(lambda: cp.load("t"))

    async def sync_case(fn: Callable[[], Any]) -> float:
        return _timed_sync(fn)

    cases: dict[str, Case] = {
        "nb file save (fsync=False)": lambda: timed(lambda: nb_nosync.save(warm, "t")),
        "nb file save (fsync=True, default)": lambda: timed(lambda: nb_sync.save(warm, "t")),
        "nb file save cold (fsync=False)": lambda: cold_save(nb_cold),
        "nb file save cold (fsync=True)": lambda: cold_save(nb_cold_sync),
        # a fresh store per save, so saved copies do not pile up on the heap (and in gc's way)
        "nb memory save": lambda: timed(lambda: MemoryCheckpointer().save(warm, "s")),
        "tulip file save": lambda: timed(lambda: t_file.save(warm_t, "t")),
        "tulip memory save": lambda: timed(lambda: TulipMemory().save(warm_t, "s")),
        "floor dumps": lambda: sync_case(floor.dumps),
        "floor dumps+write+rename": lambda: sync_case(lambda: floor.write(False)),
        "floor dumps+write+fsync+rename": lambda: sync_case(lambda: floor.write(True)),
        "nb file load latest": lambda: nb_load("nb_load"),
        "nb memory load": lambda: timed(lambda: nb_mem.load("t")),
        "tulip file load latest": lambda: tulip_load("tulip_load"),
        "tulip memory load": lambda: timed(lambda: t_mem.load("t")),
        "floor read+loads": lambda: sync_case(floor.read),
        "floor loads": lambda: sync_case(lambda: orjson.loads(envelope_bytes)),
    }
    if many:
        cases["nb file load latest, 936 ckpts"] = lambda: nb_load("nb_many")
        cases["tulip file load latest, 936 ckpts"] = lambda: tulip_load("tulip_many")
    close_lg: Callable[[], None] = lambda: None  # noqa: E731
    if lg.available():
        lg_cases, close_lg = lg.checkpoint_cases(root, warm.messages, envelope_bytes)
        cases.update(lg_cases)
    try:
        res = await measure(cases, reps)
    finally:
        close_lg()
    for name in cases:
        rows.setdefault(name, {})[n] = res.median_ms(name)
    shutil.rmtree(root)
    print(f"  checkpoint: {n} messages done", file=sys.stderr)


async def section_checkpoint(tmp: Path, reps_for: Callable[[int], int], out: list[str]) -> dict[str, Any]:
    rows: dict[str, dict[int, float | None]] = {}
    sizes_bytes: dict[str, dict[int, int]] = {"tulip_nb file": {}, "tulip file": {}}

    for n in SIZES:
        await _checkpoint_size(tmp, n, reps_for(n), rows, sizes_bytes)

    out.extend(_checkpoint_table(rows, sizes_bytes))
    return {"rows": rows, "bytes": sizes_bytes}


# (row label, case name, floor case, tulip case)
_SAVE_ROWS = [
    (
        "**tulip_nb File save**, messages saved before, fsync=False",
        "nb file save (fsync=False)",
        "floor dumps+write+rename",
        "tulip file save",
    ),
    (
        "tulip_nb File save, messages saved before, fsync=True (default)",
        "nb file save (fsync=True, default)",
        "floor dumps+write+fsync+rename",
        "tulip file save",
    ),
    (
        "tulip_nb File save, fresh messages (cold), fsync=False",
        "nb file save cold (fsync=False)",
        "floor dumps+write+rename",
        "tulip file save",
    ),
    (
        "tulip_nb File save, fresh messages (cold), fsync=True",
        "nb file save cold (fsync=True)",
        "floor dumps+write+fsync+rename",
        "tulip file save",
    ),
    ("tulip_nb Memory save", "nb memory save", "floor dumps", "tulip memory save"),
    ("tulip-agents File save (pretty JSON, no fsync)", "tulip file save", "floor dumps+write+rename", None),
    ("tulip-agents Memory save", "tulip memory save", "floor dumps", None),
    ("LangGraph InMemorySaver put (messages as dicts)", "lg memory save", "floor dumps", None),
    ("LangGraph SqliteSaver put (WAL, messages as dicts)", "lg sqlite save", "floor sqlite insert", None),
    ("floor: orjson dumps", "floor dumps", None, None),
    ("floor: dumps + write + rename", "floor dumps+write+rename", None, None),
    ("floor: dumps + write + fsync + rename", "floor dumps+write+fsync+rename", None, None),
    ("floor: one SQLite WAL insert + commit (the same bytes)", "floor sqlite insert", None, None),
]
_LOAD_ROWS = [
    (
        "**tulip_nb File load latest** (fresh instance, 1 checkpoint)",
        "nb file load latest",
        "floor read+loads",
        "tulip file load latest",
    ),
    (
        "tulip_nb File load latest, 936 checkpoints in the thread",
        "nb file load latest, 936 ckpts",
        "floor read+loads",
        "tulip file load latest, 936 ckpts",
    ),
    ("tulip_nb Memory load", "nb memory load", "floor loads", "tulip memory load"),
    ("tulip-agents File load latest (1 checkpoint)", "tulip file load latest", "floor read+loads", None),
    ("tulip-agents File load latest, 936 checkpoints", "tulip file load latest, 936 ckpts", "floor read+loads", None),
    ("tulip-agents Memory load", "tulip memory load", "floor loads", None),
    ("LangGraph InMemorySaver get_tuple (dicts)", "lg memory load", "floor loads", None),
    ("LangGraph SqliteSaver get_tuple (dicts)", "lg sqlite load", "floor read+loads", None),
    ("floor: read + orjson loads", "floor read+loads", None, None),
    ("floor: orjson loads (bytes in memory)", "floor loads", None, None),
]


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _checkpoint_table(rows: dict[str, dict[int, float | None]], sizes_bytes: dict[str, dict[int, int]]) -> list[str]:
    big = SIZES[-1]
    head = " | ".join(f"{n} msgs (ms)" for n in SIZES)
    extra = 5
    lines = [
        f"| measure (median) | {head} | × floor @{big} | tulip-agents ÷ this @{big} | "  # noqa: RUF001
        f"InMemorySaver ÷ this | SqliteSaver ÷ this |",
        "|---|" + "---:|" * (len(SIZES) + extra - 1),
    ]

    def emit(spec: list[tuple[str, str, str | None, str | None]], title: str) -> None:
        lines.append(f"| *{title}* |" + " |" * (len(SIZES) + extra - 1))
        peers = [rows.get(f"lg {kind} {title}", {}).get(big) for kind in ("memory", "sqlite")]
        for label, case, floor_case, tulip_case in spec:
            vals = rows.get(case, {})
            if not vals:
                continue
            v = vals.get(big)
            fl = rows.get(floor_case, {}).get(big) if floor_case else None
            tu = rows.get(tulip_case, {}).get(big) if tulip_case else None
            ratio_f = f"{v / fl:.2f}× ({floor_case.removeprefix('floor ')})" if v and fl else ""  # noqa: RUF001
            ratio_t = f"{tu / v:.1f}×" if v and tu else ""  # noqa: RUF001
            ratio_lg = " | ".join(
                f"{p / v:.1f}×" if v and p and not case.startswith(("lg ", "floor")) else ""  # noqa: RUF001
                for p in peers
            )
            cells = " | ".join(_fmt_ms(vals.get(n)) for n in SIZES)
            lines.append(f"| {label} | {cells} | {ratio_f} | {ratio_t} | {ratio_lg} |")

    emit(_SAVE_ROWS, "save")
    emit(_LOAD_ROWS, "load")
    sizes = " | ".join(f"{sizes_bytes['tulip_nb file'][n]:,} / {sizes_bytes['tulip file'][n]:,}" for n in SIZES)
    lines.append(f"| checkpoint file bytes, tulip_nb / tulip-agents | {sizes} | | | | |")
    if not lg.available():
        lines += ["", "LangGraph is not installed (`pip install 'tulip_nb[bench]'`): its columns are empty."]
    return lines


# -- section: conversation ------------------------------------------------------------------------
MID_TURN_LAST = 100  # the mid-turn saves medianed "at ~2000 messages": the last 100 iteration saves
OLDER_PICKS = 10  # random older checkpoints loaded per tulip_nb row


@dataclass
class Run:
    label: str
    times: list[float]
    disk_bytes: int
    files: int
    load_ms: float | None = None
    messages: int = 0
    stopped_early: bool = False
    load_floor_ms: float | None = None  # read + orjson.loads of the latest state's JSON, interleaved
    older: tuple[float, float, float] | None = None  # older loads: median ms, median and worst ratio
    disk_note: str = ""  # what the disk is made of (the log, the envelope)

    def row(self) -> str:
        first = statistics.mean(self.times[:50]) * 1e3
        last = statistics.mean(self.times[-50:]) * 1e3
        load = _fmt_ms(self.load_ms) if self.load_ms is not None else "—"
        return (
            f"| {self.label} | {self.messages} | {len(self.times)} | {sum(self.times):.2f} | "
            f"{first:.2f} | {last:.2f} | {self.disk_bytes / 1e6:.1f} MB ({self.files} files) | {load} |"
        )

    def mid_turn_ms(self, picks: list[int]) -> float | None:
        """Median ms of the saves at ``picks`` (indices of the last mid-turn saves)."""
        got = [self.times[i] for i in picks if i < len(self.times)]
        return statistics.median(got) * 1e3 if len(got) == len(picks) else None


def _disk(directory: Path) -> tuple[int, int]:
    """Bytes and number of every regular file under ``directory`` (logs, envelopes, indexes)."""
    files = [p for p in directory.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def _disk_note(directory: Path) -> str:
    """The delta layout's disk: its log and its tulip envelope(s); empty for other layouts."""
    log_bytes = sum(p.stat().st_size for p in directory.rglob(".tulip_nb_log*") if p.is_file())
    env_bytes = sum(p.stat().st_size for p in directory.rglob("*.json") if p.is_file())
    return f"log {log_bytes / 1e6:.2f} MB + envelope {env_bytes / 1e6:.2f} MB" if log_bytes else ""


async def _median_load(make: Callable[[], Any], thread: str, reps: int) -> float:
    times = []
    for _ in range(reps):
        cp = make()
        gc.collect()
        t0 = time.perf_counter()
        await cp.load(thread)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _read_parse(path: Path) -> float:
    gc.collect()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        orjson.loads(f.read())
    return time.perf_counter() - t0


async def _load_vs_floor(
    make: Callable[[], FileCheckpointer], cid: str | None, floor_path: Path, reps: int, *, list_first: bool
) -> tuple[float, float]:
    """Median ms of a fresh instance's load (latest, or ``cid``) and of the floor, interleaved.

    ``list_first``: read the thread's index (untimed) before the load, as a notebook that listed
    the checkpoints before picking one does.
    """
    ours, floor = [], []
    for _ in range(reps):
        cp = make()
        if list_first:
            await cp.list_checkpoint_infos("conv", limit=None)
        gc.collect()
        t0 = time.perf_counter()
        got = await cp.load_checkpoint("conv", cid)
        ours.append(time.perf_counter() - t0)
        assert got is not None
        floor.append(_read_parse(floor_path))
    return statistics.median(ours) * 1e3, statistics.median(floor) * 1e3


async def _nb_conversation(
    directory: Path,
    n: int,
    fsync: bool,
    label: str,
    load_reps: int,
    layout: Literal["delta", "tulip"] = "delta",
    sign: bool = True,
) -> Run:
    """The conversation saved as the agent saves it: ``source`` "iteration" inside a turn, "final"
    at its end, with the run id and the turn's iteration (the agent's keys)."""
    msgs = build_conversation(n)  # fresh: each message is serialised on its first save
    ends = iteration_ends(msgs)
    state = AgentState(agent_id="bench-agent", metadata={"user_id": "u-42"})
    cp = FileCheckpointer(directory, fsync=fsync, layout=layout, sign=sign)
    times: list[float] = []
    prev, turn = 0, 0
    for end, source in zip(ends, save_sources(msgs, ends), strict=True):
        if any(m.role == "user" for m in msgs[prev:end]):  # a new user turn: a new run
            turn += 1
            state.run_id = f"run-{turn:06d}"
            state.iteration = 0
        state.messages.extend(msgs[prev:end])
        state.iteration += 1
        prev = end
        meta = {SOURCE_KEY: source, RUN_ID_KEY: state.run_id, ITERATION_KEY: state.iteration}
        t0 = time.perf_counter()
        await cp.save(state, "conv", metadata=meta)
        times.append(time.perf_counter() - t0)
    disk, files = _disk(directory)
    disk_note = _disk_note(directory)
    await cp.close()

    def fresh() -> FileCheckpointer:
        return FileCheckpointer(directory, fsync=fsync, layout=layout, sign=sign)

    floors = directory.parent / f"{directory.name}_floors"
    floors.mkdir()
    latest = floors / "latest.json"
    latest.write_bytes(state.to_json_bytes())
    load, load_floor = await _load_vs_floor(fresh, None, latest, load_reps, list_first=False)
    infos = await fresh().list_checkpoint_infos("conv", limit=None)
    picks = random.Random(0).sample(infos[1:], OLDER_PICKS)
    ratios, olds = [], []
    for info in picks:
        ck = await fresh().load_checkpoint("conv", info.checkpoint_id)
        assert ck is not None
        path = floors / f"{info.checkpoint_id}.json"
        path.write_bytes(ck.state.to_json_bytes())
        ours, floor = await _load_vs_floor(fresh, info.checkpoint_id, path, max(3, load_reps // 2), list_first=True)
        ratios.append(ours / floor)
        olds.append(ours)
    shutil.rmtree(floors)
    older = (statistics.median(olds), statistics.median(ratios), max(ratios))
    return Run(label, times, disk, files, load, n, load_floor_ms=load_floor, older=older, disk_note=disk_note)


async def _tulip_conversation(directory: Path, n: int, budget_s: float | None, load_reps: int) -> Run:
    from tulip.core.state import AgentState as TulipAgentState

    TulipFile, _ = _tulip_classes()
    msgs = to_tulip_messages(build_conversation(n))
    ends = iteration_ends(build_conversation(n))
    state = TulipAgentState(agent_id="bench-agent", metadata={"user_id": "u-42"})
    cp = TulipFile(directory)
    times: list[float] = []
    stopped = False
    for i, end in enumerate(ends, 1):
        # tulip's AgentState is frozen with a tuple of messages: an agent makes a new state per
        # step (``with_messages``), reusing the message objects; done here outside the timer
        state = state.model_copy(update={"messages": tuple(msgs[:end]), "iteration": i})
        t0 = time.perf_counter()
        await cp.save(state, "conv")
        times.append(time.perf_counter() - t0)
        if budget_s is not None and sum(times) > budget_s:
            stopped = True
            break
    disk, files = _disk(directory)
    load = None if stopped else await _median_load(lambda: TulipFile(directory), "conv", load_reps)
    return Run("tulip-agents FileCheckpointer (pretty JSON, no fsync)", times, disk, files, load, n, stopped)


def _floor_conversation(directory: Path, n: int, load_reps: int) -> tuple[Run, Run, float]:
    """Two floors: rewrite the whole thread per save (orjson + write + rename), and append-only;
    and the median ms of reading + parsing the last state's JSON (the load floor)."""
    directory.mkdir(parents=True)
    msgs = build_conversation(n)
    dicts = [orjson.loads(m.json_bytes()) for m in msgs]
    ends = iteration_ends(msgs)
    rewrite: list[float] = []
    prev = 0
    for i, end in enumerate(ends):
        part = dicts[:end]
        t0 = time.perf_counter()
        data = orjson.dumps({"messages": part})
        tmp = directory / f".{i}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, directory / f"{i:06d}.json")
        rewrite.append(time.perf_counter() - t0)
    disk, files = _disk(directory)
    last = directory / f"{len(ends) - 1:06d}.json"
    load_floor = statistics.median(_read_parse(last) for _ in range(max(5, load_reps))) * 1e3
    shutil.rmtree(directory)
    directory.mkdir()
    append: list[float] = []
    fd = os.open(directory / "thread.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for end in ends:
            t0 = time.perf_counter()
            os.write(fd, b"".join(orjson.dumps(d) + b"\n" for d in dicts[prev:end]))
            os.fdatasync(fd)
            append.append(time.perf_counter() - t0)
            prev = end
    finally:
        os.close(fd)
    size = (directory / "thread.jsonl").stat().st_size
    return (
        Run("floor: orjson dumps + write + rename of the whole thread", rewrite, disk, files, None, n),
        Run("floor: append new messages + fdatasync (one file)", append, size, 1, None, n),
        load_floor,
    )


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "—"  # noqa: RUF001


def _targets_table(runs: list[Run], sources: list[str], append: Run, load_floor: float, msgs_json: int) -> list[str]:
    """The issue-17 measures per row: mid-turn save, load latest / older vs their floors, disk."""
    mids = [i for i, src in enumerate(sources) if src == "iteration"]
    first, last = mids[:MID_TURN_LAST], mids[-MID_TURN_LAST:]
    ends = [i for i, src in enumerate(sources) if src != "iteration"]
    floor_mid = append.mid_turn_ms(last)
    lines = [
        f"| same run | mid-turn save, median of the first / last {MID_TURN_LAST} (ms) | last ÷ append + fdatasync | "
        f"total of the {len(mids)} mid-turn / {len(ends)} turn-end saves (s) | load latest (ms) | "
        f"÷ read + parse of that state | older checkpoint, median of {OLDER_PICKS} random (ms) | "
        "÷ its floor (median / worst) | disk ÷ messages' JSON |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        m_first, m_last = r.mid_turn_ms(first), r.mid_turn_ms(last)
        split = (
            f"{sum(r.times[i] for i in mids):.2f} / {sum(r.times[i] for i in ends):.2f}"
            if len(r.times) == len(sources)
            else "—"
        )
        lf = r.load_floor_ms if r.load_floor_ms is not None else load_floor
        load = f"{_fmt_ms(r.load_ms)}" if r.load_ms is not None else "—"
        star = "" if r.load_floor_ms is not None or r.load_ms is None else " ¹"
        if r.older is not None:
            old = _fmt_ms(r.older[0])
            old_r = f"{r.older[1]:.2f}× / {r.older[2]:.2f}×"  # noqa: RUF001
        else:
            old, old_r = "—", "—"
        disk = f"{r.disk_bytes / msgs_json:.2f}×" + (f" ({r.disk_note})" if r.disk_note else "")  # noqa: RUF001
        lines.append(
            f"| {r.label} | {_fmt_ms(m_first)} / {_fmt_ms(m_last)} | "
            f"{_ratio(m_last, floor_mid) if r is not append else '1.00×'} | {split} | {load} | "  # noqa: RUF001
            f"{(_ratio(r.load_ms, lf) + star) if r.load_ms is not None else '—'} | {old} | {old_r} | {disk} |"
        )
    return lines


async def section_conversation(tmp: Path, quick: bool, out: list[str]) -> dict[str, Any]:
    n = SIZES[-1]
    load_reps = 5 if quick else 9
    runs: list[Run] = []
    note = ""
    t_run = await _tulip_conversation(tmp / "conv_tulip", n, TULIP_BUDGET_S, load_reps)
    shutil.rmtree(tmp / "conv_tulip", ignore_errors=True)
    if t_run.stopped_early:
        note = (
            f"tulip-agents needed more than {TULIP_BUDGET_S:.0f} s for the 2000-message conversation "
            f"(stopped after {len(t_run.times)} saves), so every row below uses the first "
            f"{FALLBACK_MESSAGES} messages."
        )
        n = FALLBACK_MESSAGES
        t_run = await _tulip_conversation(tmp / "conv_tulip", n, None, load_reps)
        shutil.rmtree(tmp / "conv_tulip", ignore_errors=True)
    print("  conversation: tulip-agents done", file=sys.stderr)
    runs.append(t_run)
    nb_rows: list[tuple[bool, Literal["delta", "tulip"], bool, str]] = [
        (True, "delta", True, "**tulip_nb FileCheckpointer, delta layout (default), fsync=True (default)**"),
        (False, "delta", True, "tulip_nb FileCheckpointer, delta layout, fsync=False"),
        (True, "delta", False, "tulip_nb FileCheckpointer, delta layout, fsync=True, sign=False (no hash chain)"),
        (True, "tulip", True, 'tulip_nb FileCheckpointer, layout="tulip" (the old default), fsync=True'),
    ]
    for fsync, layout, sign, label in nb_rows:
        d = tmp / f"conv_nb_{layout}_{fsync}_{sign}"
        runs.append(await _nb_conversation(d, n, fsync, label, load_reps, layout, sign))
        shutil.rmtree(d, ignore_errors=True)
        print(f"  conversation: tulip_nb {layout} fsync={fsync} done", file=sys.stderr)
    if lg.available():
        msgs = build_conversation(n)
        got = lg.conversation(tmp / "conv_lg", msgs, iteration_ends(msgs), load_reps)
        shutil.rmtree(tmp / "conv_lg", ignore_errors=True)
        runs.append(
            Run("LangGraph SqliteSaver (WAL; messages as dicts)", got["times"], got["disk"], 1, got["load_ms"], n)
        )
        print("  conversation: LangGraph done", file=sys.stderr)
    if oa.available():
        msgs = build_conversation(n)
        got = await oa.conversation(tmp / "conv_oa", msgs, iteration_ends(msgs), load_reps)
        shutil.rmtree(tmp / "conv_oa", ignore_errors=True)
        runs.append(
            Run("OpenAI Agents SDK SQLiteSession (appends new items)", got["times"], got["disk"], 1, got["load_ms"], n)
        )
        print("  conversation: OpenAI Agents SDK done", file=sys.stderr)
    rewrite, append, load_floor = _floor_conversation(tmp / "conv_floor", n, load_reps)
    runs.extend((rewrite, append))
    shutil.rmtree(tmp / "conv_floor", ignore_errors=True)
    msgs = build_conversation(n)
    sources = save_sources(msgs)
    picks = [i for i, s in enumerate(sources) if s == "iteration"][-MID_TURN_LAST:]
    msgs_json = conversation_stats(msgs)["json_bytes"]
    out.append(
        "| conversation, one save per iteration | messages | saves | total (s) | first 50 (ms/save) | "
        "last 50 (ms/save) | disk | load latest after (ms) |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    out.extend(r.row() for r in runs)
    out.append("")
    out.append(
        f'tulip_nb saves carry the agent\'s metadata: `source` "iteration" for the '
        f'{sources.count("iteration")} saves inside a turn, "final" for the {sources.count("final")} turn ends '
        "(a save point followed by a user message, or the last one), with the run id and the turn's "
        "iteration; the delta layout writes its one tulip envelope at each turn end. Disk counts every "
        "file (log, envelope, index, lock). Each save signs (hash chain) except in the sign=False row."
    )
    out.append("")
    out.append("Against the floors, in the same run:")
    out.append("")
    out.extend(_targets_table(runs, sources, append, load_floor, msgs_json))
    out.append("")
    out.append(
        f'Mid-turn saves: the first and the last {len(picks)} saves with source "iteration" (the last at '
        f"{iteration_ends(msgs)[picks[0]]} to {iteration_ends(msgs)[picks[-1]]} messages), each row's own times at "
        "those save points against the append + fdatasync floor's at the same points. tulip_nb loads: "
        "a fresh instance (as in a new process), interleaved with reading + `orjson.loads` of that "
        f"state's JSON; older checkpoints: {OLDER_PICKS} picked at random (seed 0), the thread's index "
        "read first (untimed), a fresh instance each time. ¹ not interleaved: against the floor "
        f"measured once in the same run ({_fmt_ms(load_floor)} ms for the whole-thread JSON). "
        f"Messages' JSON: {msgs_json:,} bytes."
    )
    if note:
        out.append("")
        out.append(note)
    if not lg.available():
        out.append("")
        out.append("LangGraph is not installed (`pip install 'tulip_nb[bench]'`): skipped.")
    else:
        out.append("")
        out.append("LangGraph's InMemorySaver is left out here: it would keep every checkpoint (~0.8 GB) in RAM.")
    if not oa.available():
        out.append("")
        out.append("openai-agents is not installed (`pip install 'tulip_nb[bench]'`): SQLiteSession skipped.")
    return {
        "runs": [r.__dict__ | {"times": None, "total_s": sum(r.times), "mid_ms": r.mid_turn_ms(picks)} for r in runs],
        "note": note,
        "load_floor_ms": load_floor,
        "msgs_json": msgs_json,
    }


# -- entry point ----------------------------------------------------------------------------------
def _checkpoint_section(ctx: sections.Ctx) -> list[str]:
    def reps_for(n: int) -> int:
        return ctx.n(25 if n >= 2000 else 60, 5)

    out: list[str] = []
    asyncio.run(section_checkpoint(ctx.tmp, reps_for, out))
    return [f"Medians of {reps_for(20)}/{reps_for(200)}/{reps_for(2000)} interleaved repetitions.", "", *out]


def _conversation_section(ctx: sections.Ctx) -> list[str]:
    out: list[str] = []
    asyncio.run(section_conversation(ctx.tmp, ctx.quick, out))
    return out


SECTIONS: dict[str, tuple[str, Callable[[sections.Ctx], list[str]]]] = {
    "checkpoint": ("checkpoint save / load at 20, 200, 2000 messages", _checkpoint_section),
    "conversation": ("2000 messages, a save after every iteration", _conversation_section),
    "tokens": ("token accounting per model call", sections.section_tokens),
    "compactor": ("LLMCompactor per call at 2000 messages", sections.section_compactor),
    "kv": ("Redis, PostgreSQL, MySQL, OpenSearch (emulator)", sections.section_kv),
    "remote": ("S3 (moto) and HTTP", sections.section_remote),
    "lab": ("open_thread, diff_threads, simulate_compaction", sections.section_lab),
    "export": ("export_threads throughput", sections.section_export),
    "server": ("AgentServer throughput", sections.section_server),
    "memory": ("peak memory loading a 2000-message thread", sections.section_memory),
    "checkpoints10k": ("a thread of 10,000 checkpoints (delta layout)", bench_storage.section_checkpoints10k),
    "forks": ("forks and a 100-variant sweep of a 2000-message thread", bench_storage.section_forks),
    "corpus": ("a corpus of 1,000 threads x 10 configs, in-process and on Dask", sections.section_corpus),
}
"""Every section: name -> (title, function returning Markdown lines)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument(
        "--section", action="append", choices=[*SECTIONS, "all"], help="run only this section (repeatable)"
    )
    parser.add_argument(
        "--sections", default=None, help="comma-separated sections, e.g. conversation,checkpoints10k,forks"
    )
    parser.add_argument("--reps", type=int, default=None, help="repetitions per case (overrides the default)")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this Markdown file")
    args = parser.parse_args(argv)
    picked = [*(args.section or []), *(x.strip() for x in (args.sections or "").split(",") if x.strip())]
    unknown = [x for x in picked if x not in SECTIONS and x != "all"]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    chosen = list(SECTIONS) if not picked or "all" in picked else list(dict.fromkeys(picked))

    tmp = Path(tempfile.mkdtemp(prefix="tulip_nb_bench_"))
    doc: list[str] = []

    def emit(lines: list[str]) -> None:
        print("\n".join(lines), flush=True)
        doc.extend(lines)

    try:
        stats = conversation_stats(build_conversation(SIZES[-1]))
        load = os.getloadavg()
        emit(
            [
                sections.environment(tmp),
                f"Load average at the start: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min).",
                "",
                f"Workload (bench/workload.py, seed 0) at {stats['messages']} messages: {stats['user_turns']} user "
                f"turns, {stats['model_calls']} model calls, {stats['tool_results']} tool results, "
                f"{stats['chars']:,} characters, {stats['json_bytes']:,} bytes of message JSON.",
                "",
            ]
        )
        ctx = sections.Ctx(tmp, args.quick, args.reps)
        for name in chosen:
            title, fn = SECTIONS[name]
            t0 = time.perf_counter()
            print(f"[{name}] running ...", file=sys.stderr, flush=True)
            lines = fn(ctx)
            took = time.perf_counter() - t0
            la = os.getloadavg()[0]
            emit([f"### {name}: {title}", "", *lines, "", f"*({name}: {took:.0f} s, load average {la:.2f})*", ""])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if args.out is not None:
            args.out.write_text("\n".join(doc) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
