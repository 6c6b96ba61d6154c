"""tulip-nb convert on old stores beyond the committed fixture: what an old-release writer or a crash
left (read by the read-only reader of the delta layout as the old engine finished it), links,
damage, and the layout switch of ``FileCheckpointer``.

The stores are the previous release's (``tests/data/legacy_store/``, see
``tests/unit/test_convert_history.py``), changed by hand or with the few records
``tests/legacy_writer.py`` appends in that release's format.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.legacy_writer import PRUNE, append, record, snapshot
from tests.unit.test_convert_history import OLD_FILES, THREADS, OldReader, legacy_store, problems_in
from tulip_nb._sync import run_sync
from tulip_nb.core.errors import UserError
from tulip_nb.memory.backends import file_convert as _file_convert
from tulip_nb.memory.backends._legacy_delta import LegacyStore
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.backends.file_convert import convert_to_history
from tulip_nb.memory.checkpointer import Checkpoint
from tulip_nb.memory.integrity import verify_thread


def latest_of(base: Path, thread_id: str) -> Checkpoint:
    ck = run_sync(OldReader(base).load_checkpoint(thread_id, THREADS[thread_id]["latest"]))
    assert ck is not None
    return ck


def later(ck: Checkpoint, cid: str, **meta: Any) -> Checkpoint:
    kept = {k: v for k, v in ck.metadata.items() if not k.startswith("tulip_nb_")}  # no signature to forge
    metadata = {**kept, "parent_checkpoint_id": ck.checkpoint_id, **meta}
    return Checkpoint(cid, ck.thread_id, ck.created_at + timedelta(seconds=1), ck.state, metadata)


def rows(base: Path, thread_id: str) -> list[str]:
    hist = FileCheckpointer(base)
    try:
        return [r.checkpoint_id for r in run_sync(hist.store.rows(thread_id))]
    finally:
        run_sync(hist.close())


def no_old_files(base: Path) -> bool:
    return not [p for p in base.rglob("*") if p.name.startswith((*OLD_FILES, ".tulip_nb_trash", ".tulip_nb_copy"))]


def test_the_delta_layout_is_refused_with_the_convert_command(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"tulip-nb convert .*history layout"):
        FileCheckpointer(tmp_path, layout="delta")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="'history' or 'tulip'"):
        FileCheckpointer(tmp_path, layout="json")  # type: ignore[arg-type]
    base = legacy_store(tmp_path / "old")
    with pytest.raises(UserError, match="tulip-nb convert"):  # a directory the old layout wrote
        run_sync(FileCheckpointer(base).load("pruned"))


def test_a_log_record_with_envelope_extras_refuses_its_thread(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    extra = later(latest_of(base, "pruned"), "imported-1", source="import")
    append(base / "pruned" / ".tulip_nb_log", "pruned", snapshot(extra, {"x_origin": "s3"}))
    done = {r.thread_id: r for r in convert_to_history(base)}
    assert done["pruned"].status == "refused" and "x_origin" in done["pruned"].detail
    assert "imported-1" in done["pruned"].detail and rows(base, "pruned") == []
    assert (base / "pruned" / ".tulip_nb_log").exists()
    assert run_sync(OldReader(base).load_checkpoint("pruned", "imported-1")).extra == {"x_origin": "s3"}
    assert {r.status for t, r in done.items() if t != "pruned"} <= {"converted", "already"}


def test_a_save_made_between_the_phases_keeps_the_log_and_a_rerun_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = legacy_store(tmp_path)
    late = later(latest_of(base, "pruned"), "late-1", source="answer")

    def old_writer(event: str, thread_id: str, what: str = "") -> None:
        if event == "phase2":
            append(base / "pruned" / ".tulip_nb_log", "pruned", snapshot(late))

    monkeypatch.setattr(_file_convert, "_step", old_writer)
    done = {r.thread_id: r for r in convert_to_history(base)}
    assert done["pruned"].status == "pending" and "changed in the old store" in done["pruned"].detail
    assert (base / "pruned" / ".tulip_nb_log").exists()
    monkeypatch.undo()
    again = {r.thread_id: r for r in convert_to_history(base)}
    assert again["pruned"].status == "converted" and again["pruned"].converted == 1
    assert no_old_files(base)
    hist = FileCheckpointer(base)
    latest = run_sync(hist.load_checkpoint("pruned"))
    assert latest is not None and latest.checkpoint_id == "late-1"
    assert latest.state.to_json_bytes() == late.state.to_json_bytes()
    assert run_sync(verify_thread(hist, "pruned")).ok
    run_sync(hist.close())


def test_a_committed_drop_a_crash_interrupted_is_read_as_finished(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    first, *rest = [r["checkpoint_id"] for r in THREADS["messy"]["checkpoints"]][::-1]  # oldest first
    tomb = base / "messy" / ".tulip_nb_trash-0badc0de"
    tomb.mkdir()
    (tomb / ".drop").write_text(json.dumps({"thread_id": "messy", "files": {}, "logged": [first]}))
    (base / "pruned" / ".tulip_nb_trash-feedface").mkdir()  # never committed: nothing went
    assert first not in [e.info.checkpoint_id for e in LegacyStore(base).entries("messy")]
    done = {r.thread_id: r for r in convert_to_history(base)}
    assert {r.status for r in done.values()} <= {"converted", "already"}, done
    assert sorted(rows(base, "messy")) == sorted(rest)
    assert sorted(rows(base, "pruned")) == sorted(r["checkpoint_id"] for r in THREADS["pruned"]["checkpoints"])
    assert no_old_files(base)


def test_a_committed_copy_and_an_interrupted_shared_delete_are_read_as_finished(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    directory = base / "support-copy"
    staging = directory / ".tulip_nb_copy-4242-beef.tmp"
    staging.mkdir()
    for p in list(directory.iterdir()):
        if p.name == ".tulip_nb_log" or p.suffix == ".json":
            p.rename(staging / p.name)  # the copy committed, its files not moved in yet
    (staging / ".thread").write_text("support-copy")
    tomb = base / "shared_1" / ".tulip_nb_trash-d00d"
    tomb.mkdir()
    (tomb / ".thread").write_text("shared#1")  # its delete committed, its files not moved out yet
    done = {r.thread_id: r for r in convert_to_history(base)}
    assert "shared#1" not in done and done["support-copy"].status == "converted"
    hist = FileCheckpointer(base)
    assert problems_in(hist, "support-copy") == [] and problems_in(hist, "shared_1") == []
    assert run_sync(hist.list_checkpoint_infos("shared#1")) == []
    run_sync(hist.close())
    assert no_old_files(base)


def test_a_torn_tail_is_no_checkpoint_and_a_damaged_middle_is_skipped_with_a_warning(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    log = base / "orphan" / ".tulip_nb_log"
    torn = later(latest_of(base, "orphan"), "torn-1")
    append(log, "orphan", snapshot(torn)[:-7])  # a crash mid-append
    assert [e.info.checkpoint_id for e in LegacyStore(base).entries("orphan")][-1] == THREADS["orphan"]["latest"]
    pruned = base / "pruned" / ".tulip_nb_log"
    append(pruned, "pruned", b"\xd7\x1bnot a record", record(PRUNE, {"ids": []}))
    with pytest.warns(RuntimeWarning, match="unreadable bytes"):
        done = {r.thread_id: r for r in convert_to_history(base)}
    assert done["orphan"].status == done["pruned"].status == "converted"
    hist = FileCheckpointer(base)
    assert problems_in(hist, "orphan") == [] and problems_in(hist, "pruned") == []
    assert "torn-1" not in rows(base, "orphan")
    run_sync(hist.close())


def test_a_flipped_byte_in_a_delta_refuses_its_thread(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    log = base / "messy" / ".tulip_nb_log"
    data = bytearray(log.read_bytes())
    data[-40] ^= 0x01  # the newest record's body: it fails its checksum
    log.write_bytes(bytes(data))
    done = {r.thread_id: r for r in convert_to_history(base, ["messy"])}
    assert done["messy"].status == "refused" and "checksum" in done["messy"].detail
    assert rows(base, "messy") == [] and log.read_bytes() == bytes(data)


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_a_linked_log_is_never_read(tmp_path: Path, how: str) -> None:
    base = legacy_store(tmp_path)
    log = base / "pruned" / ".tulip_nb_log"
    outside = tmp_path / "outside.log"
    log.rename(outside)
    if how == "symlink":
        log.symlink_to(outside)
    else:
        os.link(outside, log)
    with pytest.warns(RuntimeWarning, match="skipping thread log"):
        done = {r.thread_id: r for r in convert_to_history(base)}
    assert done["pruned"].status == "refused" and "link" in done["pruned"].detail
    assert rows(base, "pruned") == [] and outside.exists()


def test_a_log_moved_in_from_another_thread_is_refused(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    (base / "pruned" / ".tulip_nb_log").unlink()
    (base / "orphan" / ".tulip_nb_log").rename(base / "pruned" / ".tulip_nb_log")
    done = {r.thread_id: r for r in convert_to_history(base, ["pruned"])}
    assert done["pruned"].status == "refused" and "belongs to thread 'orphan'" in done["pruned"].detail
    assert rows(base, "pruned") == []


def test_a_rerun_after_a_thread_s_directory_went_is_a_no_op(tmp_path: Path) -> None:
    """A thread without a turn end has no projection, so its directory goes with its old files."""
    base = legacy_store(tmp_path)
    convert_to_history(base)
    for p in (base / "pruned").iterdir():
        p.unlink()
    (base / "pruned").rmdir()
    again = {r.thread_id: r for r in convert_to_history(base)}
    assert {r.status for r in again.values()} == {"already"}
    hist = FileCheckpointer(base)
    assert problems_in(hist, "pruned") == []
    run_sync(hist.close())


def test_the_async_twin(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    done = asyncio.run(_file_convert.aconvert_to_history(base, ["messy-fork-0"]))
    assert [(r.thread_id, r.converted) for r in done] == [("messy-fork-0", 4)]
