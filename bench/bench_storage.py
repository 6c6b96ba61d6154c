"""Storage at scale (issue 17): a 10,000-checkpoint thread and a 100-fork sweep, FileCheckpointer.

Two sections of ``python -m bench``:

``checkpoints10k``
    one thread of 10,000 checkpoints in the delta layout (the default), then, each from a fresh
    instance (as in a new process): ``list_checkpoint_infos(limit=None)``, ``open_thread`` and
    ``Thread.checkpoints`` (time, and tracemalloc peak in a separate pass), a load by id of an old
    checkpoint (counting ``os.scandir`` / ``os.listdir`` calls while it runs), one save at 10,000
    and ``verify_thread``. The same at 1,000 checkpoints in the delta layout and in
    ``layout="tulip"`` (one envelope per checkpoint: O(n²) bytes to build, so not at 10,000).
``forks``
    a 2000-message thread (the BENCH.md conversation saved as the agent saves it, delta layout);
    one fork (``tulip_nb.lab.fork`` and ``Agent.fork``), the disk of 100 forks together, and a
    100-variant ``tulip_nb.lab.sweep`` (each variant a ScriptedModel answering one new turn).

The thread is built fast: one message per save (the BENCH.md messages, reused in a cycle, so their
JSON is cached), a turn every three saves (source "iteration", "iteration", "final", with the
agent's run id and iteration keys), with ``fsync=False`` while building; everything measured
afterwards uses the default ``fsync=True``.

    .venv/bin/python -m bench.bench_storage [--quick] [--section checkpoints10k|forks]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson

from bench.workload import build_conversation, iteration_ends, save_sources
from tulip_nb._deps import require
from tulip_nb.core import AgentState, Message
from tulip_nb.core.keys import ITERATION_KEY, RUN_ID_KEY, SOURCE_KEY
from tulip_nb.memory.backends.file import FileCheckpointer

X = "\u00d7"  # the multiplication sign of the ratios
THREAD = "long"
Layout = Literal["delta", "tulip"]


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def _disk(directory: Path) -> tuple[int, int]:
    files = [p for p in directory.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


@contextlib.contextmanager
def count_listings() -> Iterator[dict[str, int]]:
    """Count ``os.scandir`` and ``os.listdir`` calls (what ``Path.iterdir`` and ``glob`` use)."""
    got = {"scandir": 0, "listdir": 0}
    real_scandir, real_listdir = os.scandir, os.listdir

    def scandir(*a: Any, **k: Any) -> Any:
        got["scandir"] += 1
        return real_scandir(*a, **k)

    def listdir(*a: Any, **k: Any) -> Any:
        got["listdir"] += 1
        return real_listdir(*a, **k)

    os.scandir, os.listdir = scandir, listdir  # type: ignore[assignment]
    try:
        yield got
    finally:
        os.scandir, os.listdir = real_scandir, real_listdir  # type: ignore[assignment]


def _read_parse(path: Path) -> float:
    gc.collect()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        orjson.loads(f.read())
    return time.perf_counter() - t0


async def _atimed(coro: Any) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    got = await coro
    return time.perf_counter() - t0, got


# -- checkpoints10k -----------------------------------------------------------------------------
async def build_long(directory: Path, n: int, layout: Layout) -> tuple[float, AgentState]:
    """``n`` checkpoints in one thread, one message more each (fsync off while building)."""
    pool = build_conversation(2000)
    cp = FileCheckpointer(directory, fsync=False, layout=layout)
    state = AgentState(agent_id="bench-agent", messages=pool[:1], metadata={"user_id": "u-42"})
    t0 = time.perf_counter()
    for i in range(n):
        if i % 3 == 0:  # a new user turn: a new run
            state.run_id = f"run-{i // 3:06d}"
            state.iteration = 0
        state.messages.append(pool[1 + i % 1999])
        state.iteration += 1
        source = "final" if i % 3 == 2 or i == n - 1 else "iteration"
        meta = {SOURCE_KEY: source, RUN_ID_KEY: state.run_id, ITERATION_KEY: state.iteration}
        await cp.save(state, THREAD, metadata=meta)
    await cp.close()
    return time.perf_counter() - t0, state


async def _measure_long(directory: Path, n: int, layout: Layout, reps: int) -> dict[str, Any]:
    from tulip_nb.lab import aopen_thread
    from tulip_nb.memory.integrity import verify_thread
    from tulip_nb.tokens import TokenCounter

    require("pandas")  # imported before anything is timed (Thread.checkpoints builds a DataFrame)
    build_s, state = await build_long(directory / "store", n, layout)
    store = directory / "store"
    disk, files = _disk(store)
    r: dict[str, Any] = {"n": n, "layout": layout, "build_s": build_s, "disk": disk, "files": files}

    def fresh() -> FileCheckpointer:
        return FileCheckpointer(store, layout=layout)

    # listing: a fresh instance (cold: reads the log's headers / the index) and the same again (warm)
    cold, warm = [], []
    for _ in range(reps):
        cp = fresh()
        dt, infos = await _atimed(cp.list_checkpoint_infos(THREAD, limit=None))
        cold.append(dt)
        warm.append((await _atimed(cp.list_checkpoint_infos(THREAD, limit=None)))[0])
        await cp.close()
    assert len(infos) == n, (len(infos), n)
    r["list_cold"], r["list_warm"] = statistics.median(cold), statistics.median(warm)

    # open_thread + .checkpoints: token counts warm (a shared counter that has seen the messages)
    # and cold (a new counter); the peak memory in a separate pass (tracemalloc slows everything)
    warm_counter = TokenCounter("o200k_base")
    warm_counter.message_counts(state.messages)
    opens, rows_warm, rows_cold = [], [], []
    for _ in range(reps):
        for counter, into in ((warm_counter, rows_warm), (TokenCounter("o200k_base"), rows_cold)):
            cp = fresh()
            dt, thread = await _atimed(aopen_thread(cp, THREAD, counter=counter))
            opens.append(dt)
            dt, frame = await _atimed(thread._acheckpoint_rows())  # what Thread.checkpoints runs
            into.append(dt)
            assert len(frame) == n
            await cp.close()
    r["open"], r["rows_warm"], r["rows_cold"] = (statistics.median(x) for x in (opens, rows_warm, rows_cold))

    async def peak(with_open: bool) -> float:
        cp = fresh()
        thread = None if with_open else await aopen_thread(cp, THREAD, counter=warm_counter)
        gc.collect()
        tracemalloc.start()
        try:
            if thread is None:
                thread = await aopen_thread(cp, THREAD, counter=warm_counter)
            await thread._acheckpoint_rows()
            return tracemalloc.get_traced_memory()[1] / 1e6
        finally:
            tracemalloc.stop()
            await cp.close()

    r["rows_peak"], r["open_rows_peak"] = await peak(False), await peak(True)

    # load by id of an old checkpoint (the 100th), fresh instance, counting directory listings
    old = infos[-100]
    loads, floors, listed, listings = [], [], [], None
    floor_path = directory / "old.json"
    ck = await fresh().load_checkpoint(THREAD, old.checkpoint_id)
    assert ck is not None
    floor_path.write_bytes(ck.state.to_json_bytes())
    for _ in range(reps):
        cp = fresh()
        with count_listings() as got:
            dt, ck = await _atimed(cp.load_checkpoint(THREAD, old.checkpoint_id))
        assert ck is not None and ck.checkpoint_id == old.checkpoint_id
        listings = dict(got)
        loads.append(dt)
        floors.append(_read_parse(floor_path))
        await cp.close()
        cp = fresh()
        await cp.list_checkpoint_infos(THREAD, limit=None)  # the index read first (untimed)
        listed.append((await _atimed(cp.load_checkpoint(THREAD, old.checkpoint_id)))[0])
        await cp.close()
    r["load_old"], r["load_old_floor"], r["load_old_listings"] = (
        statistics.median(loads),
        statistics.median(floors),
        listings,
    )
    r["load_old_listed"] = statistics.median(listed)
    r["old_messages"] = len(ck.state.messages)

    # one save at n (fsync on): the first of a fresh instance, then the median of a few more
    cp = fresh()
    pool = build_conversation(2000)
    saves, save_listings = [], None
    fd = os.open(directory / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    floor_saves = []
    try:
        for i in range(reps + 1):
            msg = pool[(n + i) % 1999 + 1]
            state.messages.append(msg)
            state.iteration += 1
            meta = {SOURCE_KEY: "iteration", RUN_ID_KEY: state.run_id, ITERATION_KEY: state.iteration}
            with count_listings() as got:
                dt, _ = await _atimed(cp.save(state, THREAD, metadata=meta))
            saves.append(dt)
            save_listings = dict(got)
            line = orjson.dumps(orjson.loads(msg.json_bytes())) + b"\n"
            t0 = time.perf_counter()
            os.write(fd, line)
            os.fdatasync(fd)
            floor_saves.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        await cp.close()
    r["save_first"], r["save"] = saves[0], statistics.median(saves[1:])
    r["save_floor"], r["save_listings"] = statistics.median(floor_saves[1:]), save_listings

    # verify_thread, fresh instance, once (it is the longest measure)
    cp = fresh()
    dt, report = await _atimed(verify_thread(cp, THREAD))
    await cp.close()
    r["verify"], r["verify_ok"], r["verify_n"] = dt, report.ok, len(report.verdicts)
    shutil.rmtree(directory)
    return r


def section_checkpoints10k(ctx: Any) -> list[str]:
    """A 10,000-checkpoint thread (delta) and 1,000 in both layouts: history from the index."""
    reps = ctx.n(5, 3)
    results = []
    for n, layout in ((10_000, "delta"), (1_000, "delta"), (1_000, "tulip")):
        t0 = time.perf_counter()
        results.append(asyncio.run(_measure_long(ctx.tmp / f"long_{layout}_{n}", n, layout, reps)))  # type: ignore[arg-type]
        print(f"  checkpoints10k: {layout} {n} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return checkpoints_table(results, reps)


def _status(value: float, target: float) -> str:
    if value <= target:
        return "met"
    ratio = value / target
    return f"missed by {(ratio - 1) * 100:.1f} %" if ratio < 1.1 else f"missed ({ratio:.1f}{X} the target)"


def checkpoints_table(results: list[dict[str, Any]], reps: int) -> list[str]:
    head = " | ".join(f"{r['layout']}, {r['n']:,} checkpoints" for r in results)
    lines = [
        f"| measure (fresh instance; median of {reps} unless noted) | {head} | target at 10,000 | status (10,000) |",
        "|---|" + "---:|" * len(results) + "---|---|",
    ]
    big = results[0]

    def row(label: str, cells: list[str], target: str = "", status: str = "") -> None:
        lines.append(f"| {label} | {' | '.join(cells)} | {target} | {status} |")

    row("build (fsync=False, one message more per save), s", [f"{r['build_s']:.1f} s" for r in results])
    row("disk (files)", [f"{_mb(r['disk'])} ({r['files']})" for r in results])
    row(
        "`list_checkpoint_infos(limit=None)`, fresh instance (ms)",
        [_ms(r["list_cold"]) for r in results],
        "≤ 50 ms",
        _status(big["list_cold"] * 1e3, 50),
    )
    row("  the same call again on that instance (ms)", [_ms(r["list_warm"]) for r in results])
    row("`open_thread` (list + load latest), ms", [_ms(r["open"]) for r in results])
    row(
        "`Thread.checkpoints`, thread open, token counts warm (ms)",
        [_ms(r["rows_warm"]) for r in results],
        "≤ 200 ms",
        _status(big["rows_warm"] * 1e3, 200),
    )
    row("  the same, a new token counter (cold), ms", [_ms(r["rows_cold"]) for r in results])
    row(
        "  tracemalloc peak of `Thread.checkpoints` (MB)",
        [f"{r['rows_peak']:.1f}" for r in results],
        "≤ 50 MB",
        _status(big["rows_peak"], 50),
    )
    row("  tracemalloc peak of `open_thread(...).checkpoints` (MB)", [f"{r['open_rows_peak']:.1f}" for r in results])
    row(
        "load by id of the 100th checkpoint (ms) / × read + parse of its state",  # noqa: RUF001
        [f"{_ms(r['load_old'])} / {r['load_old'] / r['load_old_floor']:.2f}{X}" for r in results],
    )
    row(
        "  the same, the thread's index read first (untimed), ms / × the floor",  # noqa: RUF001
        [f"{_ms(r['load_old_listed'])} / {r['load_old_listed'] / r['load_old_floor']:.2f}{X}" for r in results],
    )
    row(
        "  directory listings during that load (scandir + listdir)",
        [str(sum(r["load_old_listings"].values())) for r in results],
        "0",
        "met" if sum(big["load_old_listings"].values()) == 0 else "missed",
    )
    row(
        "one save at n (+1 message, fsync=True): first of a fresh instance / median after (ms)",
        [f"{_ms(r['save_first'])} / {_ms(r['save'])}" for r in results],
    )
    row(
        "  ÷ append the message + fdatasync; listings per save",
        [f"{r['save'] / r['save_floor']:.2f}{X}; {sum(r['save_listings'].values())}" for r in results],
    )
    row(
        "`verify_thread` (s, once), verdicts, ok",
        [f"{r['verify']:.2f} s, {r['verify_n']:,}, {r['verify_ok']}" for r in results],
        "≤ 10 s",
        _status(big["verify"], 10),
    )
    last = results[0]["n"]
    return [
        *lines,
        "",
        f"The thread: one message more per save (BENCH.md messages reused in a cycle: the latest state holds "
        f"{last + 1:,} messages, ~{last * 0.84 / 1000:.1f} MB of JSON), a turn every three saves "
        '(source "iteration", "iteration", "final" with the agent\'s run id and iteration), signed, built '
        "with `fsync=False`; every measure after the build uses a fresh `FileCheckpointer` with the "
        '`fsync=True` default. `layout="tulip"` runs at 1,000 only: each save rewrites the whole history, '
        "so 10,000 would write ~42 GB. `Thread.checkpoints` time is the call on an open thread (what the "
        "property runs); its peak is traced in a separate pass.",
    ]


# -- forks --------------------------------------------------------------------------------------
async def save_like_agent(cp: FileCheckpointer, thread_id: str, messages: list[Message]) -> AgentState:
    """The conversation saved after every iteration, with the agent's metadata; the last state."""
    ends = iteration_ends(messages)
    state = AgentState(agent_id="bench-agent", metadata={"user_id": "u-42"})
    prev, turn = 0, 0
    for end, source in zip(ends, save_sources(messages, ends), strict=True):
        if any(m.role == "user" for m in messages[prev:end]):
            turn += 1
            state.run_id, state.iteration = f"run-{turn:06d}", 0
        state.messages.extend(messages[prev:end])
        state.iteration += 1
        prev = end
        meta = {SOURCE_KEY: source, RUN_ID_KEY: state.run_id, ITERATION_KEY: state.iteration}
        await cp.save(state, thread_id, metadata=meta)
    return state


async def _forks(tmp: Path, reps: int) -> dict[str, Any]:
    from tulip_nb.agent import Agent
    from tulip_nb.lab import afork, aopen_thread, asweep
    from tulip_nb.models import ScriptedModel, text

    store = tmp / "forks"
    cp_build = FileCheckpointer(store, fsync=False)
    state = await save_like_agent(cp_build, "conv", build_conversation(2000))
    await cp_build.close()
    source_disk, _ = _disk(store)
    r: dict[str, Any] = {"messages": len(state.messages), "source_disk": source_disk}

    cp = FileCheckpointer(store)  # the default: fsync=True
    thread = await aopen_thread(cp, "conv")
    latest = thread.latest.checkpoint_id

    # one fork: lab.fork at the latest checkpoint (a Thread handle open), Agent.fork by thread id
    lab_times = []
    for i in range(reps):
        dt, branch = await _atimed(afork(thread, at=latest, new_thread_id=f"labfork-{i}"))
        lab_times.append(dt)
        assert len(branch.final_messages) == len(state.messages)
    agent = Agent(ScriptedModel([text("ok")], repeat_last=True), checkpointer=cp)
    agent_times = []
    for i in range(reps):
        dt, _ = await _atimed(agent.fork("conv", new_thread_id=f"agentfork-{i}"))
        agent_times.append(dt)
    r["lab_fork"], r["agent_fork"] = statistics.median(lab_times), statistics.median(agent_times)
    r["lab_fork_min"], r["agent_fork_min"] = min(lab_times), min(agent_times)
    # the floor of a reference: a 200-byte record appended + fdatasync
    fd = os.open(tmp / "ref.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    refs = []
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            os.write(fd, b"x" * 200)
            os.fdatasync(fd)
            refs.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    r["ref_floor"] = statistics.median(refs)
    for i in range(reps):
        shutil.rmtree(cp.thread_dir(f"labfork-{i}"))
        shutil.rmtree(cp.thread_dir(f"agentfork-{i}"))

    # 100 forks together (lab.fork of the latest checkpoint)
    before, _ = _disk(cp.thread_dir("conv"))
    t0 = time.perf_counter()
    for i in range(100):
        await afork(thread, at=latest, new_thread_id=f"fork-{i:03d}")
    r["forks100_s"] = time.perf_counter() - t0
    r["forks100_disk"] = sum(_disk(cp.thread_dir(f"fork-{i:03d}"))[0] for i in range(100))
    r["forks100_source_growth"] = _disk(cp.thread_dir("conv"))[0] - before
    mid = await cp.load_checkpoint("fork-050")
    assert mid is not None and len(mid.state.messages) == len(state.messages)

    # a 100-variant sweep: each a ScriptedModel answering one new turn
    variants = {f"v{i:03d}": {"model": ScriptedModel([text(f"Variant {i}: the answer.")])} for i in range(100)}
    have = set(await cp.list_threads())
    t0 = time.perf_counter()
    frame = await asweep(thread, at=latest, variants=variants, prompt="Summarise the thread in one line.")
    r["sweep_s"] = time.perf_counter() - t0
    errors = [e for e in frame["error"] if e]
    r["sweep_errors"] = errors[:3]
    r["sweep_ok"] = len(frame) - len(errors)
    new = [t for t in await cp.list_threads() if t not in have]
    disks = [_disk(cp.thread_dir(t)) for t in new]
    r["sweep_disk"] = sum(d for d, _ in disks)
    r["sweep_files"] = sum(f for _, f in disks)
    r["sweep_threads"] = len(new)
    await cp.close()
    r["msgs_json"] = len(b"[" + b",".join(m.json_bytes() for m in state.messages) + b"]")
    shutil.rmtree(store)
    return r


def section_forks(ctx: Any) -> list[str]:
    """Forks of a 2000-message delta thread: one fork, 100 forks, a 100-variant sweep."""
    reps = ctx.n(20, 10)
    r = asyncio.run(_forks(ctx.tmp, reps))
    fork_ok, agent_ok = _status(r["lab_fork"] * 1e3, 5), _status(r["agent_fork"] * 1e3, 5)
    disk_ok = _status(r["forks100_disk"] / 1e6, 20)
    lines = [
        f"| {r['messages']}-message thread, delta layout, fsync=True | measured | × floor / note | target | status |",  # noqa: RUF001
        "|---|---:|---|---|---|",
        f"| one `tulip_nb.lab.fork(thread, at=<latest id>)`, median of {reps} (ms) | {_ms(r['lab_fork'])} "
        f"(min {_ms(r['lab_fork_min'])}) | {r['lab_fork'] / r['ref_floor']:.1f}{X} a 200-byte append + fdatasync "
        f"({_ms(r['ref_floor'])} ms); includes opening the new thread | ≤ 5 ms | {fork_ok} |",
        f"| one `Agent.fork(thread_id)`, median of {reps} (ms) | {_ms(r['agent_fork'])} "
        f"(min {_ms(r['agent_fork_min'])}) | {r['agent_fork'] / r['ref_floor']:.1f}{X}; loads the latest state first "
        f"| ≤ 5 ms | {agent_ok} |",
        f"| 100 forks (`lab.fork`), total (s) | {r['forks100_s']:.2f} s | | | |",
        f"| 100 forks, disk together | {_mb(r['forks100_disk'])} | the source thread: "
        f"{_mb(r['source_disk'])}, grew by {_mb(r['forks100_source_growth'])} (its dependents list) | ≤ 20 MB | "
        f"{disk_ok} |",
        f"| `tulip_nb.lab.sweep`, 100 variants (ScriptedModel, one new turn each), concurrency 4 (s) | "
        f"{r['sweep_s']:.2f} s | {r['sweep_s'] * 10:.0f} ms per variant; {r['sweep_ok']} of 100 ran | | |",
        f"| sweep, disk of the 100 branch threads | {_mb(r['sweep_disk'])} ({r['sweep_files']} files) | "
        f"{r['sweep_disk'] / 100 / r['msgs_json']:.2f}{X} the thread's messages' JSON per branch: each turn end "
        "writes the branch's tulip envelope | | |",
        "",
        "The source thread: the BENCH.md conversation saved as the agent saves it (937 saves, built with "
        "`fsync=False`); forks and the sweep use a fresh `FileCheckpointer` (fsync=True). A fork saves a "
        'reference to the source checkpoint (source "fork": no tulip envelope until its first turn end); '
        "`lab.fork` returns an open Thread of the branch, so its time includes loading the branch's latest "
        "state.",
    ]
    if r["sweep_errors"]:
        lines += ["", f"Sweep errors (first 3): {r['sweep_errors']}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    from bench.sections import Ctx

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--section", action="append", choices=["checkpoints10k", "forks"])
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="tulip_nb_bench_storage_"))
    try:
        ctx = Ctx(tmp, args.quick)
        for name in args.section or ["checkpoints10k", "forks"]:
            fn = section_checkpoints10k if name == "checkpoints10k" else section_forks
            print("\n".join(fn(ctx)), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
