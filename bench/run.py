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
``conversation`` the issue-26 research thread (300 turns, a save after every model call), every
                store side by side and interleaved save by save: tulip_nb ``layout="history"``
                (fsync on and off; also with fresh message objects at every save; the delta
                layout's case went with its engine, issue 26), tulip-agents, OpenAI Agents ``SQLiteSession``, LangGraph
                ``SqliteSaver`` + ``DeltaChannel`` and the append + fdatasync floor: the durable
                conversation, disk ÷ the messages' JSON, load latest, and same-run ratios against
                the issue's targets (:mod:`bench.bench_conversation`).
``remote``      the same research thread on PostgreSQL, MySQL, Redis and S3 (moto): tulip_nb's
                factories (each layout they take), tulip-agents', LangGraph ``PostgresSaver`` +
                ``DeltaChannel``, ``SQLAlchemySession`` and a floor per store: all saves, storage at
                100/200/300 turns, fork/copy at 100 vs 300 turns (:mod:`bench.bench_stores`;
                ``--turns`` scales it down, ``--layouts`` picks layouts).
``export400``   one 400-turn thread of 855 checkpoints exported whole into each store: bytes held
                ÷ the messages' JSON, seconds, the dry run's estimate (:mod:`bench.bench_export`).
``checkpoints10k``, ``forks`` a 10,000-checkpoint thread in the history and tulip layouts; fork
                and copy at 500 and 2,000 messages, 100 forks, a sweep (:mod:`bench.bench_storage`).

The peers SQLiteSession and LangGraph + DeltaChannel run in a worker process (:mod:`bench.peers`)
under ``--peers-python`` (else ``$BENCH_PEERS_PYTHON``, else this Python), so they need not be
installed beside tulip_nb.
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
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import bench_conversation, bench_storage, bench_stores, sections
from bench import bench_langgraph as lg
from bench.workload import (
    SIZES,
    build_conversation,
    build_state,
    conversation_stats,
    to_tulip_state,
)
from tulip_nb.core import state_json_bytes
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer

Case = Callable[[], Awaitable[float]]
"""One measurement: does its own untimed setup, returns the seconds of the timed part."""

MANY = 936  # checkpoints already in the thread for the "many checkpoints" load (BENCH.md)


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
    # the floors' payload: the state's envelope as one JSON file (layout="tulip" projects one per save)
    env = FileCheckpointer(root / "probe", fsync=False, layout="tulip")
    cid = await env.save(warm, "t")
    envelope_bytes = (env.thread_dir("t") / f"{cid}.json").read_bytes()
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


# -- entry point ----------------------------------------------------------------------------------
def _checkpoint_section(ctx: sections.Ctx) -> list[str]:
    def reps_for(n: int) -> int:
        return ctx.n(25 if n >= 2000 else 60, 5)

    out: list[str] = []
    asyncio.run(section_checkpoint(ctx.tmp, reps_for, out))
    return [f"Medians of {reps_for(20)}/{reps_for(200)}/{reps_for(2000)} interleaved repetitions.", "", *out]


SECTIONS: dict[str, tuple[str, Callable[[sections.Ctx], list[str]]]] = {
    "checkpoint": ("checkpoint save / load at 20, 200, 2000 messages", _checkpoint_section),
    "conversation": (
        "the issue-26 research thread (300 turns), a save after every model call, side by side",
        bench_conversation.section_conversation,
    ),
    "tokens": ("token accounting per model call", sections.section_tokens),
    "compactor": ("LLMCompactor per call at 2000 messages", sections.section_compactor),
    "kv": ("Redis, PostgreSQL, MySQL, OpenSearch (emulator)", sections.section_kv),
    "remote": (
        "the issue-26 research thread on PostgreSQL, MySQL, Redis and S3, beside tulip-agents, LangGraph "
        "PostgresSaver + DeltaChannel, SQLAlchemySession and the floors",
        bench_stores.section_remote,
    ),
    "s3http": ("S3 (moto) and HTTP: one save / load at 200 and 2,000 messages", sections.section_s3http),
    "lab": ("open_thread, diff_threads, simulate_compaction", sections.section_lab),
    "export": ("export_threads throughput", sections.section_export),
    "export400": (
        "one 400-turn thread of 855 checkpoints exported whole into every store: bytes held, seconds, the estimate",
        sections.section_export400,
    ),
    "server": ("AgentServer throughput", sections.section_server),
    "memory": ("peak memory loading a 2000-message thread", sections.section_memory),
    "checkpoints10k": (
        "a thread of 10,000 checkpoints, history and tulip layouts",
        bench_storage.section_checkpoints10k,
    ),
    "forks": ("fork and copy at 500 and 2,000 messages, 100 forks, a 100-variant sweep", bench_storage.section_forks),
    "corpus": (
        "a corpus of 1,000 threads of 5-200 turns: summary from headers, frames, simulate on Dask",
        sections.section_corpus,
    ),
    "live": ("a 50-branch live sweep against a local server with 20 % 429s (issue 29)", sections.section_live),
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
    parser.add_argument(
        "--turns",
        type=int,
        default=None,
        help="remote, export400: the thread's turns (default: the full workload, 300 / 400; less is a smoke run)",
    )
    parser.add_argument(
        "--layouts",
        default=None,
        help="remote, export400: layouts of the stores that take layout= (default: history,tulip)",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this Markdown file")
    parser.add_argument(
        "--peers-python",
        default=None,
        help="a Python with openai-agents, langgraph and langgraph-checkpoint-sqlite: the peers of the "
        "conversation and forks sections run in it, out of process (default: $BENCH_PEERS_PYTHON, else this one)",
    )
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
        layouts = tuple(x.strip() for x in args.layouts.split(",") if x.strip()) if args.layouts else None
        ctx = sections.Ctx(tmp, args.quick, args.reps, args.peers_python, args.turns, layouts)
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
