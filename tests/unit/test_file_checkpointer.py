"""FileCheckpointer specifics: tulip's layout on disk, corrupt files, cross-process CAS."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from tulip_nb.core import BackendUnavailable, CheckpointConflict, CheckpointCorrupt, Message
from tulip_nb.memory.backends.file import FileCheckpointer, safe_name
from tulip_nb.memory.checkpointer import caller_metadata

from ..backends.conformance import full_state
from ..conftest import ROOT, SAMPLE_CHECKPOINT

SAMPLE_THREAD = "user/42:chat #1"


def place_sample(base: Path) -> tuple[Path, dict]:  # type: ignore[type-arg]
    raw = json.loads(SAMPLE_CHECKPOINT.read_text())
    target = base / "user_42_chat__1" / f"{raw['checkpoint_id']}.json"
    target.parent.mkdir(parents=True)
    shutil.copy(SAMPLE_CHECKPOINT, target)
    return target, raw


async def test_reads_a_real_tulip_file_and_resaves_every_key(tmp_path: Path) -> None:
    _, raw = place_sample(tmp_path)
    cp = FileCheckpointer(tmp_path)
    assert await cp.list_threads() == [SAMPLE_THREAD]
    state = await cp.load(SAMPLE_THREAD)
    assert state is not None and len(state.messages) == 9
    assert state.messages[-1].content == "Porto: 18C and raining too."
    cid = await cp.save(state, SAMPLE_THREAD)
    written = orjson.loads((tmp_path / "user_42_chat__1" / f"{cid}.json").read_bytes())
    assert written["state"] == raw["state"]
    assert caller_metadata(written["metadata"]) == {"parent_checkpoint_id": raw["checkpoint_id"]}
    assert await cp.list_checkpoints(SAMPLE_THREAD) == [cid, raw["checkpoint_id"]]


async def test_envelope_layout_is_tulips(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    cid = await cp.save(full_state(), "user/42:chat #1", metadata={"k": "v"})
    path = tmp_path / "user_42_chat__1" / f"{cid}.json"
    data = path.read_bytes()
    assert data.startswith(b'{"checkpoint_id":"' + cid.encode() + b'"')
    env = orjson.loads(data)
    assert list(env)[:3] == ["checkpoint_id", "thread_id", "created_at"]
    assert env["thread_id"] == "user/42:chat #1"
    assert env["created_at"].endswith("+00:00")
    assert env["state"]["started_at"].endswith("Z")
    assert set(env) == {"checkpoint_id", "thread_id", "created_at", "metadata", "state"}
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_safe_name_matches_tulip_and_bounds_length() -> None:
    assert safe_name("user/42:chat #1") == "user_42_chat__1"
    assert safe_name("café-ok_1") == "café-ok_1"
    long = safe_name("é" * 500)
    assert len(long.encode()) <= 200
    assert long != safe_name("é" * 499)


async def test_corrupt_file_explicit_load_names_it(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    good = await cp.save(full_state(marker="good"), "t")
    bad = await cp.save(full_state(marker="bad"), "t")
    path = tmp_path / "t" / f"{bad}.json"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated: header intact, body cut
    fresh = FileCheckpointer(tmp_path, layout="tulip")
    with pytest.raises(CheckpointCorrupt) as err:
        await fresh.load("t", bad)
    assert err.value.path == str(path)
    with pytest.warns(RuntimeWarning, match="unreadable checkpoint"):
        state = await fresh.load("t")
    assert state is not None and state.messages[1].content == "question 0 good"
    assert await fresh.list_checkpoints("t") == [good]  # never chosen again
    assert good


async def test_garbage_file_is_skipped_with_a_warning(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    good = await cp.save(full_state(), "t")
    (tmp_path / "t" / "zzz.json").write_bytes(b"\x00not json at all")
    fresh = FileCheckpointer(tmp_path, layout="tulip")
    with pytest.warns(RuntimeWarning, match="zzz.json"):
        assert await fresh.list_checkpoints("t") == [good]


async def test_outage_is_an_error_not_an_empty_thread(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    cp = FileCheckpointer(blocker)
    with pytest.raises(BackendUnavailable) as err:
        await cp.save(full_state(), "t")
    assert "not-a-dir" in str(err.value)
    with pytest.raises(BackendUnavailable):
        await cp.list_threads()


async def test_latest_is_newest_created_at_not_file_order(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    ids = [await cp.save(full_state(marker=str(i)), "t") for i in range(3)]
    # touch the oldest file: mtime must not matter
    os.utime(tmp_path / "t" / f"{ids[0]}.json", (time.time() + 100, time.time() + 100))
    assert await FileCheckpointer(tmp_path, layout="tulip").list_checkpoints("t") == ids[::-1]


async def test_sees_checkpoints_written_by_another_instance(tmp_path: Path) -> None:
    a, b = FileCheckpointer(tmp_path, layout="tulip"), FileCheckpointer(tmp_path, layout="tulip")
    first = await a.save(full_state(), "t")
    assert await b.list_checkpoints("t") == [first]
    second = await b.save(full_state(), "t")
    assert await a.list_checkpoints("t") == [second, first]
    await b.delete("t", second)
    assert await a.list_checkpoints("t") == [first]


async def test_copy_into_a_shared_directory_mints_new_ids(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    first = await cp.save(full_state(), "a#1")
    second = await cp.save(full_state(), "a#1")
    await cp.copy_thread("a#1", "a_1")
    infos = await cp.list_checkpoint_infos("a_1")
    assert len(infos) == 2 and {i.checkpoint_id for i in infos}.isdisjoint({first, second})
    assert infos[0].parent_checkpoint_id == infos[1].checkpoint_id
    assert await cp.list_checkpoints("a#1") == [second, first]


CAS_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, time
    sys.path.insert(0, sys.argv[4])
    from tulip_nb.memory.backends.file import FileCheckpointer
    from tulip_nb.core import AgentState, Message, CheckpointConflict
    base, parent, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    cp = FileCheckpointer(base)
    state = AgentState(messages=[Message.user("x" * 10000)])
    while time.time() < start:
        time.sleep(0.0005)
    try:
        asyncio.run(cp.save(state, "shared", expected_parent=parent))
        print("won")
    except CheckpointConflict:
        print("lost")
    """
)


@pytest.mark.parametrize("round_", range(3))
def test_two_processes_with_expected_parent_exactly_one_wins(tmp_path: Path, round_: int) -> None:
    cp = FileCheckpointer(tmp_path)
    parent = asyncio.run(cp.save(full_state(), "shared"))
    start = time.time() + 1.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CAS_SCRIPT, str(tmp_path), parent, str(start), str(ROOT)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outs == ["lost", "lost", "lost", "won"]
    assert len(asyncio.run(FileCheckpointer(tmp_path).list_checkpoints("shared"))) == 2


async def test_conflicting_explicit_checkpoint_id_in_shared_dir(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    await cp.save(full_state(), "a#1", checkpoint_id="same")
    with pytest.raises(CheckpointConflict):
        await cp.save(full_state(), "a_1", checkpoint_id="same")
    loaded = await cp.load("a#1", "same")
    assert loaded is not None


async def test_message_bytes_are_reused_across_saves(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    state = full_state()
    await cp.save(state, "t")
    cached = [m.json_bytes() for m in state.messages]
    assert all(c is not None for c in cached)
    state.messages.append(Message.user("next"))
    await cp.save(state, "t")
    assert all(a is m.json_bytes() for a, m in zip(cached, state.messages, strict=False))


async def test_appending_saves_reuse_the_joined_history(tmp_path: Path) -> None:
    """The blob cache must never serve stale bytes: replaced, removed or appended messages."""
    cp = FileCheckpointer(tmp_path)
    state = full_state()
    await cp.save(state, "t")
    state.messages.append(Message.user("appended"))
    await cp.save(state, "t")
    loaded = await FileCheckpointer(tmp_path).load("t")
    assert loaded is not None and loaded.messages[-1].content == "appended"
    state.messages[1] = Message.user("replaced")
    state.messages.pop()
    await cp.save(state, "t")
    loaded = await FileCheckpointer(tmp_path).load("t")
    assert loaded is not None
    assert [m.content for m in loaded.messages] == [m.content for m in state.messages]
    assert loaded.messages[1].content == "replaced" and loaded.messages[-1].content == "partial"
    other = full_state(marker="other")
    await cp.save(other, "u")
    loaded_u = await cp.load("u")
    assert loaded_u is not None and loaded_u.model_dump() == other.model_dump()


async def test_persistent_index_serves_a_fresh_process(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    ids = [await cp.save(full_state(marker=str(i)), "t", metadata={"i": i}) for i in range(5)]
    index = tmp_path / "t" / ".tulip_nb_index"
    assert len(index.read_bytes().splitlines()) == 5
    await cp.delete("t", ids[-1])
    index.write_bytes(index.read_bytes() + b'{"f": "torn')  # a crash mid-append
    fresh = FileCheckpointer(tmp_path, layout="tulip")
    infos = await fresh.list_checkpoint_infos("t")
    assert [i.checkpoint_id for i in infos] == ids[-2::-1]
    assert caller_metadata(infos[0].metadata) == {"i": 3, "parent_checkpoint_id": ids[2]}
    # files the index does not know (another writer, e.g. tulip) are still found
    raw = orjson.loads((tmp_path / "t" / f"{ids[0]}.json").read_bytes())
    raw.update(checkpoint_id="foreign", created_at="2099-01-01T00:00:00+00:00")
    (tmp_path / "t" / "foreign.json").write_bytes(orjson.dumps(raw))
    assert (await FileCheckpointer(tmp_path, layout="tulip").list_checkpoints("t"))[0] == "foreign"


async def test_index_does_not_keep_a_deleted_thread_directory(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    await cp.save(full_state(), "t")
    assert await cp.delete("t")
    assert not (tmp_path / "t").exists()
