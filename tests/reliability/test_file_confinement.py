"""The file store never follows a symbolic link out of ``base_dir`` (issue 18, item 1).

Each attack plants a link inside the store: a thread directory, a checkpoint file, the index, the
lock, the log. Listings and scans skip it with a warning naming it; asked for by name it is
refused; nothing outside the store is read into it, written, created or deleted. A symlinked
``base_dir`` itself stays supported. Also here: tombstones and temp files left by a crash are
cleaned up, and a delete in a directory shared by two threads is whole or gone.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Literal

import pytest

from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import BackendUnavailable, CheckpointCorrupt, CheckpointNotFound, InvalidThreadId
from tulip_nb.memory.backends.file import FileCheckpointer

from .conftest import record_figure

Layout = Literal["delta", "tulip"]

LAYOUTS: list[Layout] = ["delta", "tulip"]


def _state(text: str) -> AgentState:
    return AgentState(messages=[Message.user(text)])


async def _store_outside(root: Path, thread: str, texts: list[str]) -> Path:
    """A checkpoint-shaped thread directory outside the store (tulip's layout)."""
    cp = FileCheckpointer(root, layout="tulip", fsync=False)
    for text in texts:
        await cp.save(_state(text), thread)
    return root / thread


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_symlinked_thread_dir_is_skipped_and_refused(tmp_path: Path, layout: Layout) -> None:
    outside = await _store_outside(tmp_path / "outside", "evil", ["outside 1", "outside 2"])
    before = _tree(outside)
    base = tmp_path / "base"
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    await cp.save(_state("hello inside"), "good")
    (base / "evil").symlink_to(outside, target_is_directory=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert await cp.list_threads() == ["good"]
        hits = await cp.search("outside")
        assert all(h.get("thread_id") != "evil" for h in hits)
        await cp.search("hello")
        await cp.vacuum(0)  # everything in the store is older than now
    assert any("evil" in str(w.message) and issubclass(w.category, RuntimeWarning) for w in caught)
    assert _tree(outside) == before, "vacuum deleted or changed files outside base_dir"
    for call in (cp.load("evil"), cp.delete("evil"), cp.save(_state("x"), "evil"), cp.copy_thread("evil", "stolen")):
        with pytest.raises(InvalidThreadId):
            await call
    assert _tree(outside) == before
    record_figure("file_symlink_attacks_refused", 1)


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_symlinked_checkpoint_file_never_latest_nor_copied(tmp_path: Path, layout: Layout) -> None:
    base = tmp_path / "base"
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    for i in range(3):
        await cp.save(_state(f"turn {i}"), "t")
    secret_dir = await _store_outside(tmp_path / "outside", "t", ["SECRET newest"])
    (secret,) = list(secret_dir.glob("*.json"))
    (base / "t" / "zzz.json").symlink_to(secret)
    fresh = FileCheckpointer(base, layout=layout, fsync=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = await fresh.load("t")
        assert state is not None and state.messages[-1].content == "turn 2"
        infos = await fresh.list_checkpoint_infos("t", limit=None)
        assert len(infos) == 3
        assert await fresh.copy_thread("t", "u")
    assert any("zzz.json" in str(w.message) for w in caught)
    copied = b"".join(_tree(base / "u").values())
    assert b"SECRET" not in copied
    with pytest.raises((CheckpointCorrupt, CheckpointNotFound)):
        await fresh.load_checkpoint("t", "zzz")
    record_figure("file_symlink_attacks_refused", 1)


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_planted_index_symlink_is_never_appended_to(tmp_path: Path, layout: Layout) -> None:
    base = tmp_path / "base"
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    await cp.save(_state("one"), "t")
    target = tmp_path / "outside.txt"
    target.write_bytes(b"precious\n")
    index = base / "t" / ".tulip_nb_index"
    index.unlink(missing_ok=True)
    index.symlink_to(target)
    for store in (cp, FileCheckpointer(base, layout=layout, fsync=False)):
        await store.save(_state("two"), "t", metadata={"note": "caller metadata"})
        state = await store.load("t")
        assert state is not None and state.messages[-1].content == "two"
    assert target.read_bytes() == b"precious\n"
    record_figure("file_symlink_attacks_refused", 1)


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_planted_lock_symlink_creates_nothing(tmp_path: Path, layout: Layout) -> None:
    base = tmp_path / "base"
    (base / "t").mkdir(parents=True)
    target = tmp_path / "created-by-the-store"
    (base / "t" / ".lock").symlink_to(target)
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    with pytest.raises(BackendUnavailable):
        await cp.save(_state("one"), "t")
    assert not target.exists() and not target.is_symlink()
    record_figure("file_symlink_attacks_refused", 1)


async def test_planted_log_symlink_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "base"
    cp = FileCheckpointer(base, layout="delta", fsync=False)
    await cp.save(_state("one"), "real")
    outside_log = tmp_path / "outside-log"
    shutil.copyfile(base / "real" / ".tulip_nb_log", outside_log)
    before = outside_log.read_bytes()
    missing = tmp_path / "missing-log"
    for thread, target in (("t1", outside_log), ("t2", missing)):
        (base / thread).mkdir()
        (base / thread / ".tulip_nb_log").symlink_to(target)
        fresh = FileCheckpointer(base, layout="delta", fsync=False)
        with pytest.raises(BackendUnavailable, match="symbolic link"):
            await fresh.save(_state("two"), thread)
        with pytest.raises(BackendUnavailable, match="symbolic link"):
            await fresh.load(thread)
    assert outside_log.read_bytes() == before
    assert not missing.exists()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert "real" in await FileCheckpointer(base, layout="delta", fsync=False).list_threads()
    record_figure("file_symlink_attacks_refused", 1)


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_symlinked_base_dir_is_supported(tmp_path: Path, layout: Layout) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    cp = FileCheckpointer(link, layout=layout, fsync=False)
    await cp.save(_state("one"), "t")
    await cp.save(_state("two"), "t")
    assert await cp.list_threads() == ["t"]
    state = await cp.load("t")
    assert state is not None and state.messages[-1].content == "two"
    assert (real / "t").is_dir()
    assert await cp.delete("t")
    assert await cp.list_threads() == []


async def test_leftover_tombstones_and_temp_files_are_cleaned(tmp_path: Path) -> None:
    base = tmp_path / "base"
    cp = FileCheckpointer(base, layout="delta", fsync=False)
    await cp.save(_state("one"), "t")
    trash = base / ".tulip_nb_trash-0123"
    (trash / "sub").mkdir(parents=True)
    (trash / "sub" / "x.json").write_text("{}")
    dead_pid = 4_194_303  # above any pid in use (pid_max's default ceiling)
    tmp = base / "t" / f".abc.json.{dead_pid}.1.tmp"
    tmp.write_text("half")
    fresh = FileCheckpointer(base, layout="delta", fsync=False)
    assert not trash.exists()
    assert await fresh.load("t") is not None
    assert not tmp.exists()
    assert await fresh.list_threads() == ["t"]


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_delete_in_shared_directory_keeps_the_other_thread(tmp_path: Path, layout: Layout) -> None:
    base = tmp_path / "base"
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    for i in range(3):
        await cp.save(_state(f"a#1 {i}"), "a#1")
        await cp.save(_state(f"a_1 {i}"), "a_1")
    assert await cp.delete("a#1")
    assert await cp.load("a#1") is None
    assert len(await cp.list_checkpoint_infos("a_1", limit=None)) == 3
    assert sorted(await cp.list_threads()) == ["a_1"]
    assert not [p for p in (base / "a_1").iterdir() if p.name.startswith(".tulip_nb_trash-")]


async def test_interrupted_shared_delete_is_finished_by_the_next_scan(tmp_path: Path) -> None:
    """A crash after the commit point (the tombstone names the thread) with half the files moved."""
    base = tmp_path / "base"
    cp = FileCheckpointer(base, layout="delta", fsync=False)
    for i in range(3):
        await cp.save(_state(f"a#1 {i}"), "a#1")
        await cp.save(_state(f"a_1 {i}"), "a_1")
    directory = base / "a_1"
    logs = sorted(p.name for p in directory.glob(".tulip_nb_log-*"))
    assert len(logs) == 1
    trash = directory / ".tulip_nb_trash-crashed"
    trash.mkdir()
    (trash / ".thread").write_text("a#1")
    os.rename(directory / logs[0], trash / logs[0])  # the log moved, its envelope not yet
    fresh = FileCheckpointer(base, layout="delta", fsync=False)
    assert await fresh.load("a#1") is None
    assert await fresh.list_checkpoint_infos("a#1", limit=None) == []
    state = await fresh.load("a_1")
    assert state is not None and state.messages[-1].content == "a_1 2"
    assert not trash.exists()
    # an uncommitted tombstone (no thread id yet): nothing was moved, the thread stays
    (directory / ".tulip_nb_trash-early").mkdir()
    again = FileCheckpointer(base, layout="delta", fsync=False)
    assert len(await again.list_checkpoint_infos("a_1", limit=None)) == 3
    assert not (directory / ".tulip_nb_trash-early").exists()
