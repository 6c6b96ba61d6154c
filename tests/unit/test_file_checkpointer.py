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
    assert set(env) == {"checkpoint_id", "thread_id", "created_at", "metadata", "state", "tulip_nb_projection"}
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_safe_name_matches_tulip_and_bounds_length() -> None:
    assert safe_name("user/42:chat #1") == "user_42_chat__1"
    assert safe_name("café-ok_1") == "café-ok_1"
    long = safe_name("é" * 500)
    assert len(long.encode()) <= 200
    assert long != safe_name("é" * 499)


async def test_a_torn_envelope_is_repaired_and_a_torn_tulip_one_named(tmp_path: Path) -> None:
    """The envelopes are a projection: one torn by a crash is rewritten from the history by the next
    instance; one tulip wrote (no projection mark) is the only copy, so loading it names the file."""
    cp = FileCheckpointer(tmp_path, layout="tulip")
    good = await cp.save(full_state(marker="good"), "t")
    bad = await cp.save(full_state(marker="bad"), "t")
    path = tmp_path / "t" / f"{bad}.json"
    whole = path.read_bytes()
    path.write_bytes(b"")  # what a power cut leaves of a file renamed into place before its data was on disk
    fresh = FileCheckpointer(tmp_path, layout="tulip")
    state = await fresh.load("t", bad)
    assert state is not None and state.messages[1].content == "question 0 bad"
    assert path.read_bytes() == whole and fresh.check_mirror("t") == []
    raw = orjson.loads(whole)
    del raw["tulip_nb_projection"]
    raw.update(checkpoint_id="theirs", created_at="2099-01-01T00:00:00+00:00")
    theirs = tmp_path / "t" / "theirs.json"
    data = orjson.dumps(raw)
    theirs.write_bytes(data[: len(data) // 2])
    other = FileCheckpointer(tmp_path, layout="tulip")
    with pytest.raises(CheckpointCorrupt) as err:
        await other.load("t", "theirs")
    assert err.value.path == str(theirs)
    with pytest.warns(RuntimeWarning, match="unreadable checkpoint"):
        latest = await other.load_checkpoint("t")
    assert latest is not None and latest.checkpoint_id == bad  # never chosen
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


async def test_copy_into_a_shared_directory_keeps_both_threads_apart(tmp_path: Path) -> None:
    """A copy is rows on the same entries (same checkpoint ids, new thread): both threads list and
    load their own. (tulip itself reads one envelope per file name in a directory two ids share.)"""
    cp = FileCheckpointer(tmp_path, layout="tulip")
    first = await cp.save(full_state(), "a#1")
    second = await cp.save(full_state(marker="2"), "a#1")
    await cp.copy_thread("a#1", "a_1")
    infos = await cp.list_checkpoint_infos("a_1")
    assert [i.checkpoint_id for i in infos] == [second, first]
    assert all(i.metadata["copied_from"]["thread_id"] == "a#1" for i in infos)
    assert infos[0].parent_checkpoint_id == infos[1].checkpoint_id
    assert await cp.list_checkpoints("a#1") == [second, first]
    fresh = FileCheckpointer(tmp_path, layout="tulip")
    for thread_id in ("a#1", "a_1"):
        loaded = await fresh.load_checkpoint(thread_id, second)
        assert loaded is not None and loaded.thread_id == thread_id
        assert loaded.state.to_json_bytes() == full_state(marker="2").to_json_bytes()


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


@pytest.mark.slow
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


async def test_a_fresh_instance_sees_every_checkpoint_and_tulip_s_own(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    ids = [await cp.save(full_state(marker=str(i)), "t", metadata={"i": i}) for i in range(5)]
    assert sorted(p.stem for p in (tmp_path / "t").glob("*.json")) == sorted(ids)  # one envelope each
    await cp.delete("t", ids[-1])
    assert sorted(p.stem for p in (tmp_path / "t").glob("*.json")) == sorted(ids[:-1])
    fresh = FileCheckpointer(tmp_path, layout="tulip")
    infos = await fresh.list_checkpoint_infos("t")
    assert [i.checkpoint_id for i in infos] == ids[-2::-1]
    assert caller_metadata(infos[0].metadata) == {"i": 3, "parent_checkpoint_id": ids[2]}
    # files tulip writes (no projection mark) are found, and replaced ones read again
    raw = orjson.loads((tmp_path / "t" / f"{ids[0]}.json").read_bytes())
    del raw["tulip_nb_projection"]
    raw.update(checkpoint_id="foreign", created_at="2099-01-01T00:00:00+00:00")
    (tmp_path / "t" / "foreign.json").write_bytes(orjson.dumps(raw))
    assert (await fresh.list_checkpoints("t"))[0] == "foreign"
    raw["metadata"] = {"edited": True}
    tmp = tmp_path / "t" / ".foreign.json.tmp"
    tmp.write_bytes(orjson.dumps(raw))
    tmp.rename(tmp_path / "t" / "foreign.json")  # tulip's own rewrite: temp file + rename
    assert (await fresh.list_checkpoint_infos("t"))[0].metadata == {"edited": True}


async def test_index_does_not_keep_a_deleted_thread_directory(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, layout="tulip")
    await cp.save(full_state(), "t")
    assert await cp.delete("t")
    assert not (tmp_path / "t").exists()
