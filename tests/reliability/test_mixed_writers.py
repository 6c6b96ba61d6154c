"""Mixed writers on one file thread: tulip (takes no lock) and a strict tulip_nb writer.

tulip_nb's compare-and-swap is an ``flock`` tulip never takes, so it cannot order tulip's writes.
What the file checkpointer promises instead (``tulip_nb/memory/backends/_file_foreign.py``):
nothing a strict tulip_nb writer acknowledged is lost without a ``CheckpointConflict``; a foreign
write a save would hide raises, naming it; clock skew never hides a save chained to another.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tulip_nb.memory.backends.file as file_module
import tulip_nb.memory.checkpointer as checkpointer_module
from tulip_nb.agent import Agent, NullManager
from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import CheckpointConflict
from tulip_nb.memory.backends._delta_file import DeltaFileCheckpointer
from tulip_nb.memory.backends._file_foreign import ForeignWriteWarning
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import ScriptedModel, text

from .conftest import record_figure

tulip_file = pytest.importorskip(
    "tulip.memory.backends.file", reason="tulip-agents (the interop peer) is not installed"
)
tulip_state = pytest.importorskip("tulip.core.state")
tulip_agent = pytest.importorskip("tulip.agent")
tulip_testing = pytest.importorskip("tulip.testing")
tulip_conversation = pytest.importorskip("tulip.memory.conversation")

pytestmark = pytest.mark.interop

LAYOUTS = ["delta", "tulip"]
THREAD = "mixed/42:chat #1"
HOUR = timedelta(hours=1)


def state_of(*prompts: str) -> AgentState:
    return AgentState(messages=[Message.user(p) for p in prompts])


def as_tulip(state: AgentState) -> Any:
    return tulip_state.AgentState.model_validate_json(state.to_json_bytes())


@contextlib.contextmanager
def clock(module: ModuleType, offset: timedelta) -> Iterator[None]:
    """Shift ``module``'s ``datetime.now`` (tulip_nb stamps saves in memory/checkpointer.py's
    ``next_created_at``; tulip in its file backend's ``save``)."""
    real = module.datetime

    class Shifted(real):  # type: ignore[misc, valid-type]
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real.now(tz) + offset

    with mock.patch.object(module, "datetime", Shifted):
        yield


def user_prompts(state: AgentState | Any) -> list[str]:
    return [m.content for m in state.messages if m.role == "user"]


# -- said --------------------------------------------------------------------------------------------
def test_file_docstrings_say_compare_and_swap_protects_tulip_nb_writers_only() -> None:
    for doc in (file_module.__doc__, FileCheckpointer.__doc__):
        assert doc is not None
        flat = " ".join(doc.split())
        assert "tulip_nb writers only" in flat and "takes no lock" in flat, doc


# -- detected, deterministically ---------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
async def test_file_foreign_write_between_read_and_save_raises(tmp_path: Path, layout: str) -> None:
    ours = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    first = await ours.save(state_of("a"), THREAD)
    read = await ours.load_checkpoint(THREAD)
    assert read is not None and read.checkpoint_id == first
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    foreign = await theirs.save(as_tulip(state_of("a", "tulip's turn")), THREAD)
    with pytest.raises(CheckpointConflict, match="takes no lock") as err:
        await ours.save(state_of("a", "our turn"), THREAD, expected_parent=first)
    assert err.value.checkpoint_id == foreign and err.value.actual == foreign and err.value.expected == first
    latest = await ours.load_checkpoint(THREAD)
    assert latest is not None and latest.checkpoint_id == foreign  # nothing was written


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_file_hidden_foreign_write_raises_once_then_retry_continues(tmp_path: Path, layout: str) -> None:
    """tulip's clock an hour behind: its write sorts before ours and a save would hide it."""
    ours = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    first = await ours.save(state_of("a"), THREAD)
    assert (await ours.load_checkpoint(THREAD)) is not None
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    with clock(tulip_file, -HOUR):
        hidden = await theirs.save(as_tulip(state_of("a", "tulip's turn")), THREAD)
    assert await ours.latest_checkpoint_id(THREAD) == first  # older by created_at, no parent recorded
    with pytest.raises(CheckpointConflict, match="would hide them") as err:
        await ours.save(state_of("a", "b"), THREAD, expected_parent=first)
    assert err.value.checkpoint_id == hidden and err.value.context["foreign"] == [hidden]
    with pytest.raises(CheckpointConflict):  # still, until the writer reads the thread again
        await ours.save(state_of("a", "b"), THREAD, expected_parent=first)
    assert await ours.latest_checkpoint_id(THREAD) == first
    again = await ours.load_checkpoint(THREAD)  # the retry's read accepts what was reported
    assert again is not None and again.checkpoint_id == first
    second = await ours.save(state_of("a", "b"), THREAD, expected_parent=first)
    assert await ours.latest_checkpoint_id(THREAD) == second
    assert (await ours.load_checkpoint(THREAD, hidden)).checkpoint_id == hidden  # kept, a side branch


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_file_foreign_write_during_our_write_warns_and_next_save_raises(
    tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected under our lock, after the pre-write check: the save stands, a warning names the
    foreign checkpoint, and the writer's next strict save raises for it."""
    ours = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    first = await ours.save(state_of("a"), THREAD)
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    landed: list[str] = []
    real_check = DeltaFileCheckpointer._check_name_free

    def inject(self: DeltaFileCheckpointer, path: Path, thread_id: str, cid: str) -> None:
        if not landed:  # a worker thread of asyncio.to_thread: no loop is running here
            landed.append(asyncio.run(theirs.save(as_tulip(state_of("a", "tulip's racing turn")), THREAD)))
        real_check(self, path, thread_id, cid)

    monkeypatch.setattr(DeltaFileCheckpointer, "_check_name_free", inject)
    with pytest.warns(ForeignWriteWarning, match="takes no lock") as caught:
        second = await ours.save(state_of("a", "b"), THREAD, expected_parent=first)
    assert landed and landed[0] in str(caught[0].message)
    monkeypatch.setattr(DeltaFileCheckpointer, "_check_name_free", real_check)
    assert await ours.latest_checkpoint_id(THREAD) == second  # the save stands (stamped after tulip's)
    with pytest.raises(CheckpointConflict, match="takes no lock") as err:
        await ours.save(state_of("a", "b", "c"), THREAD, expected_parent=second)
    assert err.value.checkpoint_id == landed[0]


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_file_tulip_overwriting_an_acknowledged_turn_raises(tmp_path: Path, layout: str) -> None:
    """tulip continues from a state older than our acknowledged save: the next save says so."""
    ours = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    first = await ours.save(state_of("a"), THREAD, expected_parent="")
    acked = await ours.save(state_of("a", "acknowledged"), THREAD, expected_parent=first)
    stale = await theirs.save(as_tulip(state_of("a", "tulip from a stale read")), THREAD)
    read = await ours.load_checkpoint(THREAD)
    assert read is not None and read.checkpoint_id == stale
    with pytest.raises(CheckpointConflict, match="not in the state being saved") as err:
        await ours.save(state_of(*user_prompts(read.state), "next"), THREAD, expected_parent=stale)
    assert err.value.checkpoint_id == stale and err.value.context["superseded"] == acked
    read = await ours.load_checkpoint(THREAD)  # the retry's read: continue from tulip's state
    assert read is not None
    await ours.save(state_of(*user_prompts(read.state), "next"), THREAD, expected_parent=stale)
    # a tulip turn that continued from our save is an ordinary hand-off: no conflict
    fine = await theirs.save(as_tulip(state_of("a", "tulip from a stale read", "next", "tulip")), THREAD)
    read = await ours.load_checkpoint(THREAD)
    assert read is not None and read.checkpoint_id == fine
    await ours.save(state_of(*user_prompts(read.state), "more"), THREAD, expected_parent=fine)


# -- clock skew never hides a chained save -------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
async def test_file_clock_ahead_then_chained_tulip_save_is_latest(tmp_path: Path, layout: str) -> None:
    ours = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    await ours.save(state_of("a"), THREAD)
    with clock(checkpointer_module, HOUR):
        ahead = await ours.save(state_of("a", "b"), THREAD)
    tulips = await theirs.save(as_tulip(state_of("a", "b", "c")), THREAD, metadata={"parent_checkpoint_id": ahead})
    infos = await ours.list_checkpoint_infos(THREAD, limit=None)
    assert infos[0].checkpoint_id == tulips and infos[0].created_at < infos[1].created_at
    assert await ours.latest_checkpoint_id(THREAD) == tulips
    latest = await ours.load_checkpoint(THREAD)
    assert latest is not None and latest.checkpoint_id == tulips
    # the next tulip_nb save chains to tulip's and is stamped after the skewed one
    after = await ours.save(state_of("a", "b", "c", "d"), THREAD, expected_parent=tulips)
    infos = await ours.list_checkpoint_infos(THREAD, limit=None)
    assert [i.checkpoint_id for i in infos[:3]] == [after, tulips, ahead]
    assert infos[0].parent_checkpoint_id == tulips and infos[0].created_at > infos[2].created_at


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_file_real_tulip_agent_after_a_skewed_turn_is_detected(tmp_path: Path, layout: str) -> None:
    """A tulip agent's turn records no parent: with our clock an hour ahead it sorts before our
    turn, and the strict agent's next turn raises instead of hiding it."""
    ours = Agent(
        ScriptedModel([text("ours")], repeat_last=True),
        checkpointer=FileCheckpointer(tmp_path, layout=layout),  # type: ignore[arg-type]
        conversation_manager=NullManager(),
        strict_concurrency=True,
    )
    with clock(checkpointer_module, HOUR):
        first = await ours.run("one", thread_id=THREAD)
    theirs = _tulip_agent(tmp_path)
    second = await asyncio.to_thread(theirs.run_sync, "two", thread_id=THREAD)
    assert user_prompts(second.state) == ["one", "two"]  # tulip continued from our turn
    listed = await tulip_file.FileCheckpointer(base_dir=str(tmp_path)).list_checkpoints(THREAD, limit=100)
    assert listed[0] == first.checkpoint_id  # tulip too sorts our skewed turn first
    (tulips,) = set(listed) - {first.checkpoint_id}
    with pytest.raises(CheckpointConflict, match="would hide them") as err:
        await ours.run("three", thread_id=THREAD)
    assert err.value.checkpoint_id == tulips
    third = await ours.run("three", thread_id=THREAD)  # after the conflict, the retry continues
    assert third.checkpoint_id != first.checkpoint_id


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_file_a_parent_cycle_in_foreign_files_still_has_a_latest(tmp_path: Path, layout: str) -> None:
    """Hand-edited envelopes naming each other as parents: no hang, one latest, every one listed."""
    theirs = tulip_file.FileCheckpointer(base_dir=str(tmp_path))
    await theirs.save(as_tulip(state_of("a")), THREAD, "x", metadata={"parent_checkpoint_id": "y"})
    await theirs.save(as_tulip(state_of("a", "b")), THREAD, "y", metadata={"parent_checkpoint_id": "x"})
    ours = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    infos = await ours.list_checkpoint_infos(THREAD, limit=None)
    assert sorted(i.checkpoint_id for i in infos) == ["x", "y"]
    latest = infos[0].checkpoint_id
    loaded = await ours.load_checkpoint(THREAD)
    assert loaded is not None and loaded.checkpoint_id == latest
    cid = await ours.save(state_of("a", "b", "c"), THREAD, expected_parent=latest)
    assert await ours.latest_checkpoint_id(THREAD) == cid


def _tulip_agent(base: Path) -> Any:
    return tulip_agent.Agent(
        model=tulip_testing.ScriptedModel([tulip_testing.text("tulip")], repeat_last=True),
        conversation_manager=tulip_conversation.NullManager(),
        checkpointer=tulip_file.FileCheckpointer(base_dir=str(base)),
    )


STEPS = st.lists(st.tuples(st.sampled_from(("ours", "tulip")), st.integers(-180, 180)), min_size=1, max_size=8)


@settings(max_examples=30, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=st.sampled_from(LAYOUTS), steps=STEPS)
def test_file_latest_is_the_chain_head_whatever_the_clocks(layout: str, steps: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_chain(Path(tmp), layout, steps))


async def _chain(base: Path, layout: str, steps: list[tuple[str, int]]) -> None:
    """Each step saves on the chain's head, by tulip_nb (strict) or by tulip (parent recorded),
    with its clock off by up to three hours: the head is always the latest and the listing is the
    chain, newest first."""
    ours = FileCheckpointer(base, layout=layout, fsync=False)  # type: ignore[arg-type]
    theirs = tulip_file.FileCheckpointer(base_dir=str(base))
    written: list[str] = []
    for n, (writer, minutes) in enumerate(steps):
        state = state_of(*(f"turn {k}" for k in range(n + 1)))
        if writer == "ours":
            with clock(checkpointer_module, timedelta(minutes=minutes)):
                cid = await ours.save(state, THREAD, expected_parent=written[-1] if written else "")
        else:
            meta = {"parent_checkpoint_id": written[-1]} if written else {}
            with clock(tulip_file, timedelta(minutes=minutes)):
                cid = await theirs.save(as_tulip(state), THREAD, metadata=meta)
        written.append(cid)
        latest = await ours.load_checkpoint(THREAD)
        assert latest is not None and latest.checkpoint_id == cid, (steps, n)
        assert await ours.latest_checkpoint_id(THREAD) == cid
    infos = await ours.list_checkpoint_infos(THREAD, limit=None)
    assert [i.checkpoint_id for i in infos] == written[::-1]


Runs = list[tuple[str, str | CheckpointConflict]]
"""A tulip_nb writer's turns in order: (prompt, the acknowledged checkpoint id or the conflict)."""


async def assert_nothing_acknowledged_lost_silently(cp: FileCheckpointer, runs: Runs) -> int:
    """Every acknowledged turn's prompt is in the final latest, or the turn right after the last
    acknowledged checkpoint that held it raised a CheckpointConflict naming a writer that takes
    no lock. Returns how many acknowledged turns were lost (each one reported)."""
    final = await cp.load_checkpoint(THREAD)
    assert final is not None
    kept = set(user_prompts(final.state))
    held: dict[int, list[str]] = {}  # run index -> prompts its checkpoint holds
    for n, (_, outcome) in enumerate(runs):
        if isinstance(outcome, str):
            ckpt = await cp.load_checkpoint(THREAD, outcome)  # never overwritten or removed
            assert ckpt is not None
            held[n] = user_prompts(ckpt.state)
        else:
            assert "takes no lock" in str(outcome), outcome
    assert isinstance(runs[-1][1], str), "the probe turn kept conflicting"
    lost = 0
    for n, (prompt, outcome) in enumerate(runs):
        if not isinstance(outcome, str) or prompt in kept:
            continue
        assert prompt in held[n]
        lost += 1
        last = max(m for m, prompts in held.items() if prompt in prompts)
        after = runs[last + 1][1]
        assert isinstance(after, CheckpointConflict), f"{prompt!r} was lost without a CheckpointConflict"
    return lost


SKEWS = st.sampled_from((0, 0, 60, -60))
EVENTS = st.lists(st.tuples(st.sampled_from(("ours", "tulip", "tulip-stale")), SKEWS), min_size=1, max_size=12)


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=st.sampled_from(LAYOUTS), events=EVENTS)
def test_file_interleavings_lose_no_acknowledged_turn_silently(layout: str, events: list[tuple[str, int]]) -> None:
    """Generated interleavings of strict tulip_nb turns (read, then save on what was read) and
    tulip turns (on a fresh read, or on tulip's previous, stale read), each clock off by an hour
    or not: the same promise as the concurrent agents', every case reached deterministically."""
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_interleave(Path(tmp), layout, events))


async def _interleave(base: Path, layout: str, events: list[tuple[str, int]]) -> None:
    ours = FileCheckpointer(base, layout=layout, fsync=False)  # type: ignore[arg-type]
    theirs = tulip_file.FileCheckpointer(base_dir=str(base))
    runs: Runs = []
    tulip_read: list[str] = []  # the prompts of the state tulip last read

    async def our_turn(prompt: str, minutes: int) -> bool:
        read = await ours.load_checkpoint(THREAD)
        state = state_of(*(user_prompts(read.state) if read else []), prompt)
        try:
            with clock(checkpointer_module, timedelta(minutes=minutes)):
                cid = await ours.save(state, THREAD, expected_parent=read.checkpoint_id if read else "")
        except CheckpointConflict as e:
            runs.append((prompt, e))
            return False
        runs.append((prompt, cid))
        return True

    for n, (who, minutes) in enumerate(events):
        if who == "ours":
            await our_turn(f"ours {n}", minutes)
            continue
        if who == "tulip":
            loaded = await theirs.load(THREAD)
            tulip_read = user_prompts(loaded) if loaded is not None else []
        tulip_read = [*tulip_read, f"tulip {n}"]
        with clock(tulip_file, timedelta(minutes=minutes)):
            await theirs.save(as_tulip(state_of(*tulip_read)), THREAD)
    for k in range(3):
        if await our_turn(f"probe {k}", 0):
            break
    await assert_nothing_acknowledged_lost_silently(ours, runs)


# -- a real tulip agent and a strict tulip_nb agent, interleaved -----------------------------------------
@pytest.mark.filterwarnings("ignore::tulip_nb.memory.backends._file_foreign.ForeignWriteWarning")
@pytest.mark.parametrize("layout", LAYOUTS)
async def test_file_mixed_agents_lose_no_acknowledged_turn_silently(tmp_path: Path, layout: str) -> None:
    """30 turns each, concurrently, on one thread. Every acknowledged tulip_nb turn is in the final
    thread, or the tulip_nb run right after the last acknowledged checkpoint holding it raised
    CheckpointConflict naming a writer that takes no lock."""
    turns = 30
    cp = FileCheckpointer(tmp_path, layout=layout)  # type: ignore[arg-type]
    ours = Agent(
        ScriptedModel([text("ok")], repeat_last=True),
        checkpointer=cp,
        conversation_manager=NullManager(),
        strict_concurrency=True,
    )
    theirs = _tulip_agent(tmp_path)
    rng = random.Random(7)

    def tulip_turns() -> None:
        for i in range(turns):
            theirs.run_sync(f"tulip {i}", thread_id=THREAD)
            time.sleep(rng.random() * 0.003)

    runs: Runs = []

    async def run(prompt: str) -> bool:
        try:
            result = await ours.run(prompt, thread_id=THREAD)
        except CheckpointConflict as e:
            runs.append((prompt, e))
            return False
        assert result.checkpoint_id is not None
        runs.append((prompt, result.checkpoint_id))
        return True

    worker = asyncio.create_task(asyncio.to_thread(tulip_turns))
    for i in range(turns):
        await run(f"ours {i}")
        await asyncio.sleep(rng.random() * 0.003)
    await worker
    for k in range(3):  # a last turn after tulip stopped, so a loss at the end is seen too
        if await run(f"probe {k}"):
            break
    lost = await assert_nothing_acknowledged_lost_silently(cp, runs)
    record_figure("mixed_writers_runs", len(runs))
    record_figure("mixed_writers_conflicts", sum(isinstance(o, CheckpointConflict) for _, o in runs))
    record_figure("mixed_writers_lost_and_reported", lost)
