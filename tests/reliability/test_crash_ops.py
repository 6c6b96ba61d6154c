"""Thread-level operations of the file store survive a kill -9 at any moment (issue 18, item 2; issue 26).

``copy_thread``, a fork (the agent's and the lab's), ``vacuum`` and ``delete(thread)``, in both
layouts (the history, and ``layout="tulip"``, every checkpoint projected), are one SQLite
transaction each, and tulip's envelopes are written after the commit and repaired from the history
on the next open. After a kill, from a fresh open's point of view: the thread the operation wrote
is whole or gone (a vacuumed thread holds all its old checkpoints or none), it verifies, its
latest loads, its envelopes are the history's (``check_mirror``), a re-run of the operation
completes, and nothing is left over (no temp file of an envelope write).

A child runs the operation on a large thread (copy and vacuum 400 checkpoints, delete 1,000 in the
history layout, 500 with every checkpoint projected) and gets SIGKILL at a random moment within the
operation's measured duration; ``TULIP_NB_RELIABILITY_ITERATIONS`` (default 20) / 4 kills per
operation and layout. The kills that landed mid-operation are recorded as figures
(``file_<op>_kills_mid_op_<layout>``, next to ``file_<op>_kills_<layout>``). (The old engine's
crash points, a child exiting before each of its Python-level writes, do not reach SQLite's own
I/O; SQLite's atomicity under a power cut is ``test_file_power.py``'s.)
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest

import tulip_nb.lab  # noqa: F401  (imported before the crash children fork: a lab fork starts fast)
from tests.reliability import _ops_worker as worker
from tulip_nb.core.keys import PRUNED_KEY
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.integrity import verify_thread

from .conftest import ITERATIONS, forkserver, kill, record_figure

Layout = Literal["history", "tulip"]
LAYOUTS: list[Layout] = ["history", "tulip"]
KILLS = max(2, ITERATIONS // 4)
BIG_COPY = 400
BIG_DELETE: dict[Layout, int] = {"history": 1000, "tulip": 500}  # a tulip-layout save lists the directory


# -- helpers ------------------------------------------------------------------------------------------
def _leftovers(base: Path) -> list[str]:
    """What a crash may leave: staging directories, tombstones, temp files."""
    return sorted(
        str(p.relative_to(base))
        for p in base.rglob("*")
        if p.name.startswith((".tulip_nb_copy-", ".tulip_nb_trash-")) or p.name.endswith(".tmp")
    )


def _open(base: Path, layout: Layout) -> FileCheckpointer:
    return FileCheckpointer(base, layout=layout, fsync=False)


async def _touch_all(cp: FileCheckpointer) -> None:
    """A fresh open's first touch of every thread (which repairs its envelopes)."""
    for thread in await cp.list_threads(limit=None):
        await cp.list_checkpoint_infos(thread, 1)


async def _ids(cp: FileCheckpointer, thread: str) -> list[str]:
    return await cp.list_checkpoints(thread, limit=None)


async def _verified(cp: FileCheckpointer, thread: str, last: int | None, label: str, *, limit: int = 10**6) -> None:
    """``thread`` verifies (its newest ``limit``) and its latest is save ``last`` of the fill (None: no check)."""
    report = await verify_thread(cp, thread, limit=limit)
    assert report.ok, f"{label}: {thread} does not verify: {report}"
    if last is not None:
        state = await cp.load(thread)
        assert state is not None and state.messages == worker.state_at(last).messages, f"{label}: latest of {thread}"
    if True:
        assert cp.check_mirror(thread) == [], f"{label}: {thread}: {cp.check_mirror(thread)}"


def _template(tmp: Path, name: str, build: Callable[[Path], Awaitable[Any]]) -> tuple[Path, Any]:
    base = tmp / name
    return base, asyncio.run(build(base))


# -- copy ---------------------------------------------------------------------------------------------
async def _copy_source(base: Path, layout: Layout, count: int) -> None:
    cp = _open(base, layout)
    await worker.fill(cp, "src", count)
    await worker.fill(cp, "a_1", 3)
    await worker.fill(cp, "b_1", 2, start=50)


async def _check_copy(base: Path, layout: Layout, source: str, dest: str, label: str, *, deep: bool = True) -> str:
    """After a crash: ``dest`` is a whole copy of ``source`` or absent; a re-run completes. Not
    ``deep``: the copy is verified whole once, after the re-run, and the source by its listing."""
    limit = 10**6 if deep else 20
    cp = _open(base, layout)  # a fresh open, then a scan of every directory
    await _touch_all(cp)
    assert not _leftovers(base), f"{label}: leftovers after a fresh open: {_leftovers(base)}"
    src = await cp.list_checkpoint_infos(source, limit=None)
    last = src[0].metadata["n"]
    got = await cp.list_checkpoint_infos(dest, limit=None)
    if got:
        assert sorted(i.metadata["copied_from"]["checkpoint_id"] for i in got) == sorted(
            i.checkpoint_id for i in src
        ), f"{label}: a partial copy lists ({len(got)} of {len(src)})"
        await _verified(cp, dest, last, label, limit=limit)
    outcome = "whole" if got else "gone"
    if not got:  # a copy is one transaction: whole (done) or absent (run it again)
        assert await cp.copy_thread(source, dest), f"{label}: the re-run failed"
    assert len(await _ids(cp, dest)) == len(src)
    await _verified(cp, dest, last, f"{label} (re-run)", limit=limit)
    assert await cp.list_checkpoint_infos(source, limit=None) == src, f"{label}: the source changed"
    if deep:
        await _verified(cp, source, last, f"{label} (source)")
    await _verified(cp, "b_1", 51, f"{label} (neighbour)")
    assert not _leftovers(base), f"{label}: leftovers after the re-run: {_leftovers(base)}"
    return outcome


# -- vacuum -------------------------------------------------------------------------------------------
VACUUM_CASES = ["log", "iteration_tail", "envelopes", "mixed", "all_old"]
"""``log``: the thread's log (delta) or envelopes (tulip); ``iteration_tail``: every survivor is an
iteration save, so the tulip envelope goes too; ``envelopes``: a delta thread whose old part tulip
wrote (envelopes); ``mixed``: old envelopes and old log records; ``all_old``: the whole thread goes."""


async def _vacuum_thread(base: Path, layout: Layout, case: str, old: int, new: int) -> str:
    """The thread ``v``: ``old`` saves, then the cutoff (returned), then ``new`` saves."""
    cp = _open(base, layout)
    if case in ("envelopes", "mixed"):
        tulip = _open(base, "tulip")
        head = old if case == "envelopes" else old // 2
        await worker.fill(tulip, "v", head)
        await worker.fill(cp, "v", old - head, start=head)
    else:
        await worker.fill(cp, "v", old)
    await asyncio.sleep(0.05)
    cutoff = datetime.now(UTC)
    await asyncio.sleep(0.05)
    if case != "all_old":
        source = "iteration" if case == "iteration_tail" else "final"
        await worker.fill(cp, "v", new, start=old, source=source)
    await worker.fill(cp, "other", 2, start=90)  # another thread, nothing old: untouched
    return cutoff.isoformat()


async def _check_vacuum(base: Path, layout: Layout, cutoff: str, new: set[str], full: set[str], label: str) -> str:
    """After a crash: ``v`` holds all of ``full`` (nothing went) or exactly ``new`` (all old went)."""
    cp = _open(base, layout)
    await _touch_all(cp)
    assert not _leftovers(base), f"{label}: leftovers after a fresh open: {_leftovers(base)}"
    infos = await cp.list_checkpoint_infos("v", limit=None)
    ids = {i.checkpoint_id for i in infos}
    assert ids in (full, new), f"{label}: part of the old checkpoints went ({len(full - ids)} of {len(full - new)})"
    if infos:
        await _verified(cp, "v", infos[0].metadata["n"], label)
        if ids == new:  # the oldest survivor records the cut
            assert PRUNED_KEY in infos[-1].metadata, f"{label}: no prune record on the oldest survivor"
    when = datetime.fromisoformat(cutoff)
    await cp.vacuum(worker.days_before(when))  # the re-run completes
    after = await cp.list_checkpoint_infos("v", limit=None)
    assert {i.checkpoint_id for i in after} == new, f"{label}: the re-run left {len(after)}"
    if after:
        await _verified(cp, "v", after[0].metadata["n"], f"{label} (re-run)")
    await _verified(cp, "other", 91, label)
    assert not _leftovers(base), f"{label}: leftovers after the re-run: {_leftovers(base)}"
    return "none" if ids == full else "all"


async def _vacuum_sets(template: Path, layout: Layout, cutoff: str) -> tuple[set[str], set[str]]:
    infos = await _open(template, layout).list_checkpoint_infos("v", limit=None)
    when = datetime.fromisoformat(cutoff)
    return {i.checkpoint_id for i in infos if i.created_at >= when}, {i.checkpoint_id for i in infos}


# -- delete(thread) -----------------------------------------------------------------------------------
async def _delete_store(base: Path, layout: Layout, count: int) -> None:
    cp = _open(base, layout)
    await worker.fill(cp, "x", count)
    await worker.fill(cp, "a#1", 3, start=10)
    await worker.fill(cp, "a_1", 3, start=70)


async def _check_delete(base: Path, layout: Layout, thread: str, full: int, label: str) -> str:
    cp = _open(base, layout)
    await _touch_all(cp)
    assert not _leftovers(base), f"{label}: leftovers after a fresh open: {_leftovers(base)}"
    got = len(await _ids(cp, thread))
    assert got in (0, full), f"{label}: {thread} is neither whole nor gone ({got} of {full})"
    if got:
        await verify_thread(cp, thread, limit=20)
        assert await cp.load(thread) is not None
    assert len(await _ids(cp, "a_1")) == 3, f"{label}: the thread sharing the directory changed"
    await cp.delete(thread)  # the re-run completes
    assert await cp.load(thread) is None and thread not in await cp.list_threads()
    assert not _leftovers(base), f"{label}: leftovers after the re-run: {_leftovers(base)}"
    return "whole" if got else "gone"


# -- kill -9 ------------------------------------------------------------------------------------------
def _kill_loop(
    template: Path, tmp: Path, layout: Layout, op: str, args: tuple[Any, ...], check: Any, label: str
) -> tuple[int, dict[str, int]]:
    """SIGKILL a child running ``op`` at a random moment of it, ``KILLS`` times; ``check(base, k)``
    after each. Returns the kills that landed mid-operation and the outcomes."""
    probe = tmp / "probe"
    shutil.copytree(template, probe, symlinks=True)
    body = worker.operation(_open(probe, layout), op, args)
    started = time.perf_counter()
    body()
    duration = time.perf_counter() - started
    shutil.rmtree(probe)
    ctx, rng = forkserver(), random.Random(f"{op}-{layout}")
    mid, outcomes = 0, {}
    for k in range(KILLS):
        base = tmp / f"kill{k}"
        shutil.copytree(template, base, symlinks=True)
        flag, took = ctx.Value("i", 0, lock=False), ctx.Value("d", 0.0, lock=False)
        proc = ctx.Process(target=worker.run_op, args=(str(base), layout, op, args, flag, took), daemon=True)
        proc.start()
        deadline = time.monotonic() + 60
        while flag.value == 0 and proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.0005)
        time.sleep(rng.uniform(0.0, duration * 1.1))
        landed = flag.value == 1
        kill(proc)
        assert flag.value != 0, f"{label}: the child never started the operation"
        mid += landed
        duration = took.value or duration  # a kill that came too late: how long the op takes in a child
        outcome = asyncio.run(check(base, k))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    record_figure(f"file_{op}_kills_{layout}", KILLS)
    record_figure(f"file_{op}_kills_mid_op_{layout}", mid)
    return mid, outcomes


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kill9_during_copy(tmp_path: Path, layout: Layout) -> None:
    template, _ = _template(tmp_path, "template", lambda b: _copy_source(b, layout, BIG_COPY))

    async def check(base: Path, k: int) -> str:
        return await _check_copy(base, layout, "src", "dst", f"copy {layout} kill {k}", deep=k == KILLS - 1)

    _kill_loop(template, tmp_path, layout, "copy", ("src", "dst"), check, f"copy {layout}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kill9_during_vacuum(tmp_path: Path, layout: Layout) -> None:
    template, cutoff = _template(tmp_path, "template", lambda b: _vacuum_thread(b, layout, "log", 200, 200))
    new, full = asyncio.run(_vacuum_sets(template, layout, cutoff))

    async def check(base: Path, k: int) -> str:
        return await _check_vacuum(base, layout, cutoff, new, full, f"vacuum {layout} kill {k}")

    _kill_loop(template, tmp_path, layout, "vacuum", (cutoff,), check, f"vacuum {layout}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kill9_during_delete(tmp_path: Path, layout: Layout) -> None:
    template, _ = _template(tmp_path, "template", lambda b: _delete_store(b, layout, BIG_DELETE[layout]))
    full = len(asyncio.run(_ids(_open(template, layout), "x")))

    async def check(base: Path, k: int) -> str:
        return await _check_delete(base, layout, "x", full, f"delete {layout} kill {k}")

    _kill_loop(template, tmp_path, layout, "delete", ("x",), check, f"delete {layout}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kill9_during_forks(tmp_path: Path, layout: Layout) -> None:
    """A child forks ``src`` again and again; killed, each fork is whole or (the one in flight) gone."""
    base = tmp_path / "store"
    asyncio.run(worker.fill(_open(base, layout), "src", 40))
    ctx, rng = forkserver(), random.Random(f"fork-{layout}")
    mid = 0
    for k in range(KILLS):
        started, done = ctx.Value("q", 0, lock=False), ctx.Value("q", 0, lock=False)
        done.value = started.value = k * 1000  # each life forks into new ids
        proc = ctx.Process(target=worker.fork_loop, args=(str(base), layout, "src", started, done), daemon=True)
        proc.start()
        while done.value < k * 1000 + 2 and proc.is_alive():
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.02))
        in_flight = started.value > done.value
        kill(proc)
        mid += in_flight
        label = f"fork {layout} kill {k}"

        async def check(lo: int = k * 1000, hi: int = started.value, label: str = label) -> None:
            cp = _open(base, layout)
            await _touch_all(cp)
            assert not _leftovers(base), f"{label}: {_leftovers(base)}"
            for i in range(lo, hi):
                got = await _ids(cp, f"fork-{i}")
                assert len(got) == 1 or (not got and i == hi - 1), f"{label}: fork-{i}: {got}"
                if not got:
                    await worker._fork(cp, "agent", "src", f"fork-{i}")  # the re-run completes
                await _verified(cp, f"fork-{i}", 39, label)

        asyncio.run(check())
    record_figure(f"file_fork_kills_{layout}", KILLS)
    record_figure(f"file_fork_kills_mid_op_{layout}", mid)
