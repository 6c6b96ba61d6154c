"""The file store never follows a symbolic link out of ``base_dir`` (issue 18, item 1).

Each attack plants a link inside the store: a thread directory, a checkpoint file, a dot file.
Listings and scans skip it; asked for by name it is refused; nothing outside the store is read
into it, written, created or deleted. A symlinked ``base_dir`` itself stays supported. Also here:
a delete in a directory shared by two threads keeps the other. (The links planted as the history
database, its WAL or a temp envelope are ``test_history_attacks.py``'s; the old layout's log,
tombstones and crash leftovers, read by ``tulip-nb convert``, are ``tests/unit/test_file_convert.py``'s.)
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Literal

import pytest

from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import CheckpointCorrupt, CheckpointNotFound, InvalidThreadId
from tulip_nb.memory.backends.file import FileCheckpointer

from .conftest import record_figure

Layout = Literal["history", "tulip"]

LAYOUTS: list[Layout] = ["history", "tulip"]


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
    assert not [w for w in caught if "outside" in str(w.message)], "something outside base_dir was read"
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
    """The history layout takes no lock file (SQLite's transactions order writers): a ``.lock``
    planted in a thread directory is never opened, so nothing is created through it."""
    base = tmp_path / "base"
    (base / "t").mkdir(parents=True)
    target = tmp_path / "created-by-the-store"
    (base / "t" / ".lock").symlink_to(target)
    cp = FileCheckpointer(base, layout=layout, fsync=False)
    await cp.save(_state("one"), "t")
    await cp.copy_thread("t", "u")
    await cp.delete("t")
    assert not target.exists() and not target.is_symlink()
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
