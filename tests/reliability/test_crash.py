"""kill -9 a process that saves in a loop; after each kill the latest loads whole and verifies.

Per backend ``TULIP_NB_RELIABILITY_ITERATIONS`` kills (default 20), each at a random moment after
the child acknowledged at least one save. Checked after every kill: the latest checkpoint loads,
is whole (its counter, length and end marker agree: no half-written checkpoint is ever chosen),
is at least as new as the last save the child acknowledged (nothing acknowledged is lost), and the
newest checkpoints verify (hash chain) from a fresh process's point of view.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import _worker
from tulip_nb.memory.backends import checkpointer_from_url
from tulip_nb.memory.integrity import verify_thread

from .conftest import ITERATIONS, drop_table, forkserver, kill, record_figure, shared_url


async def _kill_loop(url: str, kills: int, label: str, *, make_cp: Any = None) -> None:
    ctx = forkserver()
    thread = f"crash-{uuid.uuid4().hex[:8]}"
    rng = random.Random(11)
    acked_total = 0
    last_n = 0
    for k in range(kills):
        acked = ctx.Value("q", 0, lock=False)
        proc = ctx.Process(target=_worker.save_loop, args=(url, thread, acked, k), daemon=True)
        proc.start()
        deadline = time.monotonic() + 30
        while acked.value <= last_n:  # at least one acknowledged save in this life
            assert proc.is_alive() or acked.value > last_n, f"{label}: saver died (exit {proc.exitcode})"
            assert time.monotonic() < deadline, f"{label}: no save acknowledged in 30 s"
            await asyncio.sleep(0.002)
        await asyncio.sleep(rng.uniform(0.0, 0.08))
        kill(proc)
        n_acked = acked.value
        acked_total += n_acked - last_n
        cp = make_cp() if make_cp else checkpointer_from_url(url)  # a fresh instance: a new process's view
        try:
            state = await cp.load(thread)
            assert state is not None and _worker.whole(state), f"{label}: kill {k}: latest is not whole"
            n = state.metadata["n"]
            assert n >= n_acked, f"{label}: kill {k}: acknowledged save {n_acked} lost (latest {n})"
            report = await verify_thread(cp, thread, limit=12)
            assert report.ok, f"{label}: kill {k}: {report}"
            last_n = n
        finally:
            await cp.close()
    cp = make_cp() if make_cp else checkpointer_from_url(url)
    try:
        report = await verify_thread(cp, thread, limit=100_000)
        assert report.ok, report
    finally:
        await cp.close()
    record_figure("kills", kills)
    record_figure("acked_saves", acked_total)


async def test_file(tmp_path: Path) -> None:
    await _kill_loop(f"file:{tmp_path}", ITERATIONS, "file")


async def test_redis(session_redis: Any) -> None:
    await _kill_loop(session_redis.url + "?prefix=crash:", ITERATIONS, "redis")


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_sql(kind: str) -> None:
    url = shared_url(kind)
    try:
        await _kill_loop(url, ITERATIONS, kind)
    finally:
        await drop_table(url)


async def test_s3() -> None:
    from tests.backends.factories.remote import S3_CREDENTIALS, moto_endpoint, new_bucket

    endpoint = moto_endpoint()
    bucket = new_bucket()
    creds = "&".join(f"{k}={v}" for k, v in S3_CREDENTIALS.items())
    url = f"s3://{bucket}/crash/?endpoint_url={endpoint}&{creds}"
    await _kill_loop(url, ITERATIONS, "s3")


@pytest.mark.soak
async def test_file_many(tmp_path: Path) -> None:
    await _kill_loop(f"file:{tmp_path}", ITERATIONS * 10, "file")


# -- an agent killed mid-iteration ------------------------------------------------------------------
def _recorded(state: Any) -> set[int]:
    """The effects whose results are in ``state`` (what a resume from it knows happened)."""
    if state is None:
        return set()
    args = {c.id: c.arguments["i"] for m in state.messages for c in m.tool_calls}
    return {args[m.tool_call_id] for m in state.messages if m.role == "tool" and m.tool_call_id in args}


def _ledger(path: Path) -> Counter[int]:
    with contextlib.suppress(FileNotFoundError):
        return Counter(int(x) for x in path.read_text().split())
    return Counter()


async def test_agent_killed_mid_iteration_resumes_without_repeating_recorded_effects(tmp_path: Path) -> None:
    """checkpoint_every_n_iterations=1, SIGKILL at random moments, resume until done.

    An idempotent tool whose execution is in the checkpoint the resume starts from never runs
    again (the model asks for every effect twice); only an execution that had not reached a
    checkpoint when the process died may run once more (that window cannot be closed without the
    tool's own idempotency key, and the test counts it).
    """
    from tulip_nb.memory.backends.file import FileCheckpointer

    ctx = forkserver()
    ledger = tmp_path / "ledger"
    directory = str(tmp_path / "threads")
    thread = "agent-crash"
    rng = random.Random(5)
    rerun_windows: Counter[int] = Counter()
    kills = 0
    for cycle in range(ITERATIONS + 2):
        cp = FileCheckpointer(directory)
        state = await cp.load(thread)
        recorded = _recorded(state)
        before = _ledger(ledger)
        if state is not None and state.metadata.get("_tulip_nb_run", {}).get("status") == "complete":
            break
        # a kill before the first save leaves nothing to resume: the next process starts the run
        proc = ctx.Process(
            target=_worker.agent_loop, args=(directory, thread, str(ledger), state is not None), daemon=True
        )
        proc.start()
        if cycle >= ITERATIONS:  # the kills are done: let it finish
            proc.join(60)
        else:
            await asyncio.sleep(rng.uniform(0.03, 0.25))
        if proc.is_alive():
            kill(proc)
            kills += 1
        else:
            proc.join(10)
            assert proc.exitcode == 0, f"agent process failed with exit code {proc.exitcode}"
            proc.close()
        after = _ledger(ledger)
        for i in recorded:
            assert after[i] == before[i], f"effect {i} was recorded in the checkpoint and ran again"
        cp2 = FileCheckpointer(directory)
        for i, c in after.items():
            if c > before[i] and i not in recorded:
                rerun_windows[i] += c - before[i] - 1 if c - before[i] > 1 else 0
                rerun_windows[i] += 1 if before[i] else 0
        assert (await verify_thread(cp2, thread)).ok
    final = await FileCheckpointer(directory).load(thread)
    assert final is not None and final.metadata["_tulip_nb_run"]["status"] == "complete", "agent never finished"
    counts = _ledger(ledger)
    assert set(counts) == set(range(_worker.TOTAL_EFFECTS))
    for i, c in counts.items():
        assert c <= 1 + rerun_windows[i], f"effect {i} ran {c} times"
    assert kills >= ITERATIONS // 2, f"only {kills} kills landed mid-run"
    record_figure("agent_kills", kills)
