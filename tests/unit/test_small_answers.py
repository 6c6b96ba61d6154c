"""Issue 25, item 8: ``tulip-nb prune --dry-run`` counts what the real prune keeps, and
``tulip-nb verify`` reads each checkpoint once (what ``verify_thread`` reads) and keeps every check.

Before: ``prune --dry-run`` on a 400-turn thread saved every iteration printed "800 kept" when the
prune keeps 400; ``verify`` loaded every state twice, newest first (the slow order for the file
store), 166 s where ``verify_thread`` took 7.8 s on 800 checkpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tulip_nb._cli.prune import PruneCounts, prune
from tulip_nb._cli.verify import verify
from tulip_nb.agent import Agent
from tulip_nb.cli import main
from tulip_nb.core import AgentState, CheckpointCorrupt, Message
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.memory.retention import plan_prune, prune_plan
from tulip_nb.models import ScriptedModel, text, tool_call

SOURCES = ["iteration", "iteration", "iteration", "final", "interrupt", "fork"]
OPTIONS = [(keep_last, drop) for keep_last in (None, 0, 1, 3, 1000) for drop in (False, True)]


def lookup(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order id.
    """
    return f"{order_id}: delivered " * 20


def agent_thread(cp: Any, turns: int, thread_id: str = "long") -> None:
    """``turns`` turns of 1-3 tool calls, saved after every iteration (the issue's setting)."""
    script = []
    for t in range(turns):
        script += [tool_call("lookup", order_id=f"o-{t}-{k}") for k in range(1 + t % 3)] + [text(f"answer {t}")]
    agent = Agent(ScriptedModel(script), [lookup], checkpointer=cp, checkpoint_every_n_iterations=1)
    for t in range(turns):
        agent.run_sync(f"question {t}", thread_id=thread_id)


def args(keep_last: int | None, drop_turn_ends: bool, dry_run: bool, thread_id: str = "long") -> argparse.Namespace:
    return argparse.Namespace(thread_id=thread_id, keep_last=keep_last, drop_turn_ends=drop_turn_ends, dry_run=dry_run)


async def dry_then_real(cp: Any, keep_last: int | None, drop: bool, thread_id: str) -> tuple[PruneCounts, PruneCounts]:
    listed = await cp.list_checkpoint_infos(thread_id, None)
    dry = await prune(cp, args(keep_last, drop, True, thread_id))
    assert await cp.list_checkpoint_infos(thread_id, None) == listed  # a dry run touches nothing
    real = await prune(cp, args(keep_last, drop, False, thread_id))
    return dry, real


# -- prune --dry-run -------------------------------------------------------------------------------


@settings(deadline=None)
@given(sources=st.lists(st.sampled_from(SOURCES), min_size=1, max_size=120), option=st.sampled_from(OPTIONS))
def test_dry_run_counts_are_the_real_prunes(sources: list[str], option: tuple[int | None, bool]) -> None:
    """On generated threads (any mix of iteration saves and turn ends), for every retention option."""

    async def run() -> None:
        cp = MemoryCheckpointer()
        for n, source in enumerate(sources):
            await cp.save(AgentState(messages=[Message.user(f"m{n}")]), "t", metadata={"source": source})
        dry, real = await dry_then_real(cp, *option, thread_id="t")
        assert dry == real
        assert dry.kept == len(await cp.list_checkpoint_infos("t", None)) == dry.before - len(dry.dropped)
        assert (await verify_thread(cp, "t")).ok

    asyncio.run(run())


@pytest.mark.parametrize(("keep_last", "drop"), OPTIONS)
def test_dry_run_counts_on_an_agent_thread(tmp_path: Path, keep_last: int | None, drop: bool) -> None:
    cp = FileCheckpointer(tmp_path)
    agent_thread(cp, 12)
    dry, real = asyncio.run(dry_then_real(cp, keep_last, drop, "long"))
    assert dry == real and dry.kept + len(dry.dropped) == dry.before


def test_prune_plan_is_what_prune_drops() -> None:
    """The one selection: plan_prune (what BaseCheckpointer.prune drops) is prune_plan's dropped."""
    cp = MemoryCheckpointer()
    for n, source in enumerate(["iteration", "final", "iteration", "iteration"]):
        asyncio.run(cp.save(AgentState(messages=[Message.user(f"m{n}")]), "t", metadata={"source": source}))
    infos = asyncio.run(cp.list_checkpoint_infos("t", None))
    plan = prune_plan(infos)
    assert set(plan.dropped) == plan_prune(infos) and len(plan.dropped) == 1
    assert plan.kept[-2:] == tuple(i.checkpoint_id for i in infos[:2][::-1])  # the unfinished last turn


def test_cli_dry_run_says_how_many_the_prune_keeps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bullet: a thread saved every iteration, dry run then prune; "N kept" is the same N."""
    cp = FileCheckpointer(tmp_path / "threads")
    agent_thread(cp, 10)
    before = len(asyncio.run(cp.list_checkpoint_infos("long", None)))
    assert main(["prune", str(tmp_path / "threads"), "long", "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert main(["prune", str(tmp_path / "threads"), "long"]) == 0
    real = capsys.readouterr()
    after = len(asyncio.run(cp.list_checkpoint_infos("long", None)))
    assert after == 10 < before  # the turn ends
    assert f"long: would drop {before - after} of {before} checkpoint(s); {after} would be kept" in dry.err
    assert f"long: dropped {before - after} of {before} checkpoint(s); {after} kept" in real.err
    assert [ln.split()[-1] for ln in dry.out.splitlines()] == [ln.split()[-1] for ln in real.out.splitlines()]


# -- verify ----------------------------------------------------------------------------------------


class Counting(FileCheckpointer):
    """A file store that counts what is read."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        self.loads: dict[tuple[str, str | None], int] = {}
        self.listings: dict[str, int] = {}

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        self.loads[thread_id, checkpoint_id] = self.loads.get((thread_id, checkpoint_id), 0) + 1
        return await super().load_checkpoint(thread_id, checkpoint_id)

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        self.listings[thread_id] = self.listings.get(thread_id, 0) + 1
        return await super().list_checkpoint_infos(thread_id, limit)

    async def load_checkpoints(self, thread_id: str, checkpoint_ids: Sequence[str]) -> list[Any]:
        for cid in checkpoint_ids:
            self.loads[thread_id, cid] = self.loads.get((thread_id, cid), 0) + 1
        return await super().load_checkpoints(thread_id, checkpoint_ids)


def test_verify_reads_each_checkpoint_once_as_verify_thread_does(tmp_path: Path) -> None:
    agent_thread(FileCheckpointer(tmp_path), 15)
    agent = Agent(ScriptedModel([text("what if")]), checkpointer=FileCheckpointer(tmp_path))
    agent.fork_sync("long", new_thread_id="what-if")
    agent.run_sync("and then?", thread_id="what-if")
    for thread in ("long", "what-if"):
        alone, cli = Counting(tmp_path), Counting(tmp_path)
        report = asyncio.run(verify_thread(alone, thread))
        chain: dict[str, int] = {}
        count, problems = asyncio.run(verify(cli, thread, chain=chain))
        assert problems == [] and chain == report.counts() and count == len(report.verdicts)
        own = {k: n for k, n in cli.loads.items() if k[0] == thread}
        assert own == {k: n for k, n in alone.loads.items() if k[0] == thread}  # what verify_thread reads
        assert set(own.values()) == {1} and len(own) == count  # every state once
        assert cli.listings[thread] == 1


class Faulty(MemoryCheckpointer):
    """A store whose chosen checkpoints read back wrong."""

    def __init__(self, faults: dict[str, str]) -> None:
        super().__init__()
        self.faults = faults

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        ckpt = await super().load_checkpoint(thread_id, checkpoint_id)
        fault = self.faults.get(checkpoint_id or "")
        if ckpt is None or fault is None:
            return ckpt
        if fault == "corrupt":
            raise CheckpointCorrupt("bad bytes", thread_id=thread_id, checkpoint_id=checkpoint_id)
        if fault == "invalid":
            raise ValueError("state no longer validates")
        if fault == "missing":
            return None
        if fault == "thread":
            return Checkpoint(ckpt.checkpoint_id, "elsewhere", ckpt.created_at, ckpt.state, ckpt.metadata)
        return Checkpoint("other-id", thread_id, ckpt.created_at, ckpt.state, ckpt.metadata)


EXPECTED = {
    "corrupt": "{cid}: cannot be read: ",
    "invalid": "{cid}: does not decode: ValueError: state no longer validates",
    "missing": "{cid}: listed but missing",
    "thread": "{cid}: envelope says thread_id 'elsewhere'",
    "id": "{cid}: envelope says checkpoint_id 'other-id'",
}


@settings(deadline=None)
@given(
    n=st.integers(1, 40),
    faults=st.dictionaries(st.integers(0, 39), st.sampled_from(sorted(EXPECTED)), max_size=6),
)
def test_verify_keeps_every_envelope_check(n: int, faults: dict[int, str]) -> None:
    """Each faulty checkpoint gets its problem line, once; a sound thread gets none."""

    async def run() -> None:
        cp = Faulty({})
        ids = [await cp.save(AgentState(messages=[Message.user(f"m{k}")]), "t") for k in range(n)]
        cp.faults = {ids[k]: kind for k, kind in faults.items() if k < n}
        _, problems = await verify(cp, "t")
        for cid, kind in cp.faults.items():
            want = EXPECTED[kind].format(cid=cid)
            assert sum(line.startswith(want) for line in problems) == 1, (want, problems)
            assert not any(line.startswith(f"{cid}: hash chain: unreadable") for line in problems)
        assert bool(problems) == bool(cp.faults)

    asyncio.run(run())


def test_verify_still_checks_parents_and_order(tmp_path: Path) -> None:
    """The checks made from the listing: a parent missing from the thread, a child older than its parent."""
    cp = FileCheckpointer(tmp_path / "a")
    agent_thread(cp, 3)
    store = tmp_path / "b"
    shutil.copytree(tmp_path / "a", store)
    cp = FileCheckpointer(store)
    infos = asyncio.run(cp.list_checkpoint_infos("long", None))
    middle = infos[len(infos) // 2]
    assert asyncio.run(cp.delete("long", middle.checkpoint_id))
    _, problems = asyncio.run(verify(cp, "long"))
    child = next(i for i in infos if i.parent_checkpoint_id == middle.checkpoint_id)
    assert f"{child.checkpoint_id}: parent {middle.checkpoint_id} is not in the thread" in problems
