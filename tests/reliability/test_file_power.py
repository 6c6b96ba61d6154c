"""Power cuts and kill -9 for the file store (issue 18, items 2 and 3).

- Under ``strace``, a save with ``fsync=True`` is durable in the right order: each save and the
  delete sync SQLite's write-ahead log (``history.sqlite3-wal``, ``synchronous=FULL``) before
  returning, and tulip's envelope (the projection, never fsynced: durability is the commit's) is
  renamed into place only after the commit's sync. (``strace`` is an apt package in CI; without it
  the test is skipped, or fails when ``TULIP_NB_REQUIRE_SERVICES`` is set.) Both file layouts: the
  history, and ``layout="tulip"`` (every checkpoint projected).
- A subprocess deleting threads of many checkpoints is killed (SIGKILL) at random moments; after
  each kill every thread is whole or gone, from a fresh process's point of view.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from tests.conftest import ROOT
from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends.file import FileCheckpointer

from .conftest import ITERATIONS, record_figure, unavailable

Layout = Literal["history", "tulip"]

_SAVE = """
import asyncio, sys
from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends.file import FileCheckpointer
cp = FileCheckpointer(sys.argv[1], layout=sys.argv[2], fsync=True)
asyncio.run(cp.save(AgentState(messages=[Message.user("hi")]), "t"))
asyncio.run(cp.save(AgentState(messages=[Message.user("hi"), Message.user("again")]), "t"))
asyncio.run(cp.delete("t"))
"""

_LINE = re.compile(r"^(?:\d+\s+)?(\w+)\((.*)")
_FD = re.compile(r"^-?\d+<(.*?)>")
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _trace(tmp_path: Path, layout: Layout) -> tuple[Path, list[tuple[str, list[str]]]]:
    strace = shutil.which("strace")
    if strace is None:
        unavailable("strace is not installed (apt-get install strace)")
    base = Path(os.path.realpath(tmp_path)) / "store"
    out = tmp_path / "trace.txt"
    calls = "fsync,fdatasync,rename,renameat,renameat2,mkdir,mkdirat,openat"
    cmd = [str(strace), "-f", "-qq", "-y", "-s", "4096", "-o", str(out), "-e", f"trace={calls}"]
    proc = subprocess.run(
        [*cmd, sys.executable, "-c", _SAVE, str(base), layout],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0 and "ptrace" in proc.stderr.lower():
        unavailable(f"strace cannot trace here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    events: list[tuple[str, list[str]]] = []
    for line in out.read_text().splitlines():
        m = _LINE.match(line)
        if m is None or "resumed>" in line:
            continue
        name, rest = m.groups()
        if re.search(r"\)\s+=\s+-1", rest):
            continue  # a failed call
        fd = _FD.match(rest)
        args = [fd.group(1)] if fd and name in ("fsync", "fdatasync") else _STR.findall(rest)
        events.append((name, args))
    return base, events


def _index(events: list[tuple[str, list[str]]], start: int, pred: Callable[[str, list[str]], bool]) -> int:
    for i in range(start, len(events)):
        if pred(*events[i]):
            return i
    raise AssertionError(f"no matching call after #{start}: {events[start : start + 40]}")


def _is_rename(name: str) -> bool:
    return name in ("rename", "renameat", "renameat2")


@pytest.mark.parametrize("layout", ["history", "tulip"])
def test_fsync_order_under_strace(tmp_path: Path, layout: Layout) -> None:
    base, ev = _trace(tmp_path, layout)
    wal = str(base / ".tulip_nb" / "history.sqlite3-wal")

    def synced(n: str, a: list[str]) -> bool:
        return n in ("fsync", "fdatasync") and a == [wal]

    def projected(n: str, a: list[str]) -> bool:
        return _is_rename(n) and len(a) == 2 and a[0].endswith(".tmp") and a[1].endswith(".json")

    # the first save: its commit syncs the WAL, then tulip's envelope is renamed into place
    w = _index(ev, 0, synced)
    first = _index(ev, 0, projected)
    assert w < first, "the envelope was published before the save's commit was on disk"
    # the second save and the delete commit too, each syncing the WAL again
    assert sum(1 for n, a in ev if synced(n, a)) >= 3, [e for e in ev if e[0] in ("fsync", "fdatasync")]
    second = _index(ev, first + 1, projected)
    _index(ev, first + 1, synced)
    assert _index(ev, first + 1, synced) < second


_DELETER = """
import asyncio, sys
from tulip_nb.memory.backends.file import FileCheckpointer
async def main():
    cp = FileCheckpointer(sys.argv[1], layout=sys.argv[2])
    print("go", flush=True)
    await cp.delete("a#1")
    await cp.delete("x")
    print("done", flush=True)
asyncio.run(main())
"""

CHECKPOINTS = 150


async def _template(base: Path, layout: Layout) -> dict[str, tuple[int, str]]:
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    for thread in ("x", "a#1", "a_1"):
        messages = []
        for i in range(CHECKPOINTS):
            messages.append(Message.user(f"{thread} {i} " + "p" * 200))
            await cp.save(AgentState(messages=list(messages)), thread)
    return {t: await _whole(base, layout, t) for t in ("x", "a#1", "a_1")}


async def _whole(base: Path, layout: Layout, thread: str) -> tuple[int, str]:
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    infos = await cp.list_checkpoint_infos(thread, limit=None)
    state = await cp.load(thread)
    await cp.close()
    return len(infos), "" if state is None else str(state.messages[-1].content)


@pytest.mark.parametrize("layout", ["history", "tulip"])
def test_kill9_during_delete_leaves_thread_whole_or_gone(tmp_path: Path, layout: Layout) -> None:
    template = tmp_path / "template"
    full = asyncio.run(_template(template, layout))
    assert all(n == CHECKPOINTS for n, _ in full.values())
    rng = random.Random(18)
    kills = max(4, min(ITERATIONS, 12))
    outcomes = {"whole": 0, "gone": 0}
    for k in range(kills):
        base = tmp_path / f"run{k}"
        shutil.copytree(template, base, symlinks=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", _DELETER, str(base), layout], stdout=subprocess.PIPE, cwd=ROOT, text=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "go"
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        proc.stdout.close()
        for thread in ("x", "a#1"):
            got = asyncio.run(_whole(base, layout, thread))
            assert got in (full[thread], (0, "")), f"kill {k}: {thread} is neither whole nor gone: {got}"
            outcomes["whole" if got[0] else "gone"] += 1
        assert asyncio.run(_whole(base, layout, "a_1")) == full["a_1"], f"kill {k}: the other thread changed"
        leftovers = [p.name for p in base.rglob(".tulip_nb_trash-*")]
        assert not leftovers, f"kill {k}: tombstones left after a fresh open and scan: {leftovers}"
        shutil.rmtree(base)
    record_figure(f"file_delete_kills_survived_{layout}", kills)
