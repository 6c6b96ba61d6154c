"""What tulip reads of the file store stays in step with the history, in both layouts.

``FileCheckpointer(base_dir)`` projects each thread's latest turn end as tulip's envelope;
``layout="tulip"`` projects every checkpoint. After any sequence of saves (turn ends and iteration
saves), deletes of one checkpoint, prunes, copies, vacuums and forks, the thread directories hold
exactly the projected checkpoints' envelopes, each equal to its row (``check_mirror``), and an
envelope removed or emptied by a crash is written again the first time an instance touches the
thread. Messy threads (failed turns, tulip turns that delete iteration saves, forks) too.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends._history_dir import is_turn_end
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.history import PROJECTION_KEY
from tulip_nb.testing._messy import MessySpec, abuild_messy_thread

LAYOUTS = ["history", "tulip"]
OPS = st.lists(
    st.sampled_from(["end", "iteration", "iteration", "delete_one", "prune", "copy", "fork", "vacuum_none"]),
    min_size=1,
    max_size=14,
)


def projected(cp: FileCheckpointer, thread_id: str) -> list[str]:
    """Checkpoint ids of the thread's envelopes that are projections (what tulip_nb wrote for tulip)."""
    out = []
    for path in cp.thread_dir(thread_id).glob("*.json"):
        obj = orjson.loads(path.read_bytes())
        if PROJECTION_KEY in obj and obj["thread_id"] == thread_id:
            out.append(obj["checkpoint_id"])
    return sorted(out)


async def expected(cp: FileCheckpointer, thread_id: str) -> list[str]:
    infos = await cp.list_checkpoint_infos(thread_id, None)
    if cp.layout == "tulip":
        return sorted(i.checkpoint_id for i in infos)
    ends = [i.checkpoint_id for i in infos if is_turn_end(i.metadata)]
    return ends[:1]


async def in_step(cp: FileCheckpointer, threads: set[str], label: str) -> None:
    for thread_id in sorted(threads):
        assert projected(cp, thread_id) == await expected(cp, thread_id), (label, thread_id)
        assert cp.check_mirror(thread_id) == [], (label, thread_id, cp.check_mirror(thread_id))


async def run_ops(base: Path, layout: Any, ops: list[str]) -> None:
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    threads = {"t"}
    msgs = [Message.system("sys"), Message.user("q0")]
    await cp.save(AgentState(messages=msgs), "t", metadata={"source": "final"})
    for i, op in enumerate(ops):
        if op in ("end", "iteration"):
            msgs = [*msgs, Message.assistant(f"a{i}"), Message.user(f"q{i + 1}")]
            await cp.save(AgentState(messages=msgs), "t", metadata={"source": "final" if op == "end" else "iteration"})
        elif op == "delete_one":
            ids = await cp.list_checkpoints("t", None)
            if len(ids) > 1:
                await cp.delete("t", ids[len(ids) // 2])
        elif op == "prune":
            await cp.prune("t", keep_last=2)
        elif op == "copy":
            await cp.copy_thread("t", f"copy-{i}")
            threads.add(f"copy-{i}")
        elif op == "fork":
            latest = await cp.load_checkpoint("t")
            assert latest is not None
            meta = {"source": "fork", "forked_from": "t", "parent_checkpoint_id": latest.checkpoint_id}
            await cp.save(latest.state, f"fork-{i}", metadata=meta)
            threads.add(f"fork-{i}")
        elif op == "vacuum_none":
            await cp.vacuum(365)  # nothing is that old: a pass over every thread that drops nothing
        await in_step(cp, threads, f"after {op} #{i}")
    # a crash lost some envelopes (never fsynced) and emptied another: the next instance repairs them
    for thread_id in sorted(threads):
        files = sorted(cp.thread_dir(thread_id).glob("*.json"))
        if files:
            files[0].unlink()
            if len(files) > 1:
                files[-1].write_bytes(b"")
    fresh = FileCheckpointer(base, layout=layout, fsync=False)
    for thread_id in sorted(threads):
        await fresh.list_checkpoint_infos(thread_id, 1)  # the first touch
    await in_step(fresh, threads, "after the repair")
    await fresh.delete("t")
    assert projected(fresh, "t") == [] and not list(fresh.thread_dir("t").glob("*.json"))
    await cp.close()
    await fresh.close()


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=examples(0.12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_the_projection_follows_every_operation(layout: str, ops: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run_ops(Path(tmp), layout, ops))


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_a_messy_thread_s_projection_is_in_step(tmp_path: Path, layout: str) -> None:
    cp = FileCheckpointer(tmp_path, layout=layout, fsync=False)  # type: ignore[arg-type]
    spec = MessySpec(seed=5, turns=25, forks=2, tulip_rate=0.15, tulip_deletes_iteration_saves=True)
    thread = await abuild_messy_thread(cp, "messy", spec)
    threads = {"messy", *(f.thread_id for f in thread.forks)}
    await in_step(cp, threads, "built")
    await cp.prune("messy", keep_last=3)
    await in_step(cp, threads, "pruned")
    fresh = FileCheckpointer(tmp_path, layout=layout, fsync=False)  # type: ignore[arg-type]
    for thread_id in sorted(threads):
        for info in await fresh.list_checkpoint_infos(thread_id, None):
            assert await fresh.load_checkpoint(thread_id, info.checkpoint_id) is not None
    await in_step(fresh, threads, "fresh")
