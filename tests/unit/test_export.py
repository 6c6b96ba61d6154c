"""export_threads: verbatim copies, verification, conflicts, dry runs, id mapping, resume after a kill."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.backends.conformance import full_state
from tests.conftest import ROOT
from tulip_nb.core import AgentState, Message, UserError
from tulip_nb.lab import export_threads
from tulip_nb.lab._ids import principal_for_api_key, split_server_thread_id, strip_principal
from tulip_nb.lab.export import aexport_threads
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, caller_metadata


async def fill(cp: BaseCheckpointer, threads: list[str], n: int) -> None:
    for t in threads:
        for i in range(n):
            await cp.save(full_state(n_turns=1, marker=f"{t}-{i}"), t, metadata={"step": i})


async def same_history(a: BaseCheckpointer, b: BaseCheckpointer, tid: str, dtid: str | None = None) -> None:
    ia = await a.list_checkpoint_infos(tid, limit=1000)
    ib = await b.list_checkpoint_infos(dtid or tid, limit=1000)
    assert [(i.checkpoint_id, i.created_at, i.metadata) for i in ia] == [
        (i.checkpoint_id, i.created_at, i.metadata) for i in ib
    ]
    for info in ia:
        x = await a.load(tid, info.checkpoint_id)
        y = await b.load(dtid or tid, info.checkpoint_id)
        assert x is not None and y is not None and x.model_dump(mode="json") == y.model_dump(mode="json")


async def test_copies_history_lineage_and_times_verbatim(tmp_path: Path) -> None:
    src, dst = FileCheckpointer(tmp_path / "src"), MemoryCheckpointer()
    await fill(src, ["a", "b/c", "ticket #9"], 4)
    report = await aexport_threads(src, dst, progress=False)
    assert list(report["thread"]) == ["a", "b/c", "ticket #9"]
    assert list(report["copied"]) == [4, 4, 4] and report["verified"].tolist() == [True] * 3
    assert report["error"].tolist() == [None] * 3 and (report["bytes"] > 0).all()
    for t in ("a", "b/c", "ticket #9"):
        await same_history(src, dst, t)
        infos = await dst.list_checkpoint_infos(t)
        assert infos[0].parent_checkpoint_id == infos[1].checkpoint_id  # lineage intact
    # a second run finds everything in place: nothing copied, same checksums
    again = await aexport_threads(src, dst, progress=False)
    assert list(again["copied"]) == [0, 0, 0] and list(again["skipped"]) == [4, 4, 4]
    assert list(again["status"]) == ["up to date"] * 3
    assert list(again["checksum"]) == list(report["checksum"])


async def test_thread_selection_latest_only_and_dry_run(tmp_path: Path) -> None:
    src, dst = MemoryCheckpointer(), FileCheckpointer(tmp_path / "dst")
    await fill(src, ["ticket-1", "ticket-2", "other"], 3)
    dry = await aexport_threads(src, dst, "ticket-*", dry_run=True, progress=False)
    assert list(dry["thread"]) == ["ticket-1", "ticket-2"] and list(dry["copied"]) == [3, 3]
    assert list(dry["status"]) == ["dry run"] * 2 and dry["verified"].tolist() == [None, None]
    assert await dst.list_threads() == []  # wrote nothing
    latest = await aexport_threads(src, dst, ["ticket-2"], history="latest", progress=False)
    assert list(latest["copied"]) == [1] and latest["verified"].tolist() == [True]
    newest = (await src.list_checkpoint_infos("ticket-2"))[0]
    assert await dst.list_checkpoint_infos("ticket-2") == [
        type(newest)(newest.checkpoint_id, "ticket-2", newest.created_at, newest.metadata)
    ]
    # the rest of the history can follow later: the latest already there is not a conflict
    rest = await aexport_threads(src, dst, ["ticket-2"], progress=False)
    assert list(rest["copied"]) == [2] and list(rest["skipped"]) == [1] and rest["verified"].tolist() == [True]


async def test_conflicts_error_skip_overwrite() -> None:
    src, dst = MemoryCheckpointer(), MemoryCheckpointer()
    await fill(src, ["t"], 2)
    await dst.save(AgentState(messages=[Message.user("someone else's")]), "t")
    report = await aexport_threads(src, dst, progress=False)
    assert report.loc[0, "status"] == "conflict" and "on_conflict" in report.loc[0, "error"]
    assert len(await dst.list_checkpoints("t")) == 1  # untouched
    skipped = await aexport_threads(src, dst, on_conflict="skip", progress=False)
    assert skipped.loc[0, "status"] == "skipped (conflict)" and skipped.loc[0, "error"] is None
    over = await aexport_threads(src, dst, on_conflict="overwrite", progress=False)
    assert over.loc[0, "copied"] == 2 and over.loc[0, "verified"]
    await same_history(src, dst, "t")


async def test_verify_catches_a_non_verbatim_destination() -> None:
    """A third-party checkpointer without put_checkpoint gets the save() fallback: times differ."""

    class Plain(MemoryCheckpointer):
        put_checkpoint = BaseCheckpointer.put_checkpoint  # type: ignore[assignment]

    src = MemoryCheckpointer()
    when = datetime(2024, 1, 1, tzinfo=UTC)
    await src.put_checkpoint(Checkpoint("c1", "t", when, full_state(), {"parent_checkpoint_id": None}))
    report = await aexport_threads(src, Plain(), progress=False)
    assert report.loc[0, "verified"] is False or report.loc[0, "verified"] == False  # noqa: E712
    assert "created_at" in report.loc[0, "error"]


async def test_agent_server_ids_map_to_plain_ids_and_back() -> None:
    server, notebook, back = MemoryCheckpointer(), MemoryCheckpointer(), MemoryCheckpointer()
    key_principal = principal_for_api_key("secret-key")
    await fill(server, ["anon:support/42", f"{key_principal}:support/42", "anon:x"], 2)
    out = await aexport_threads(server, notebook, map_ids="strip-principal", principal="anon", progress=False)
    assert list(out["dest_thread"]) == ["support/42", "x"] and out["verified"].all()
    assert await notebook.list_threads() == ["support/42", "x"]
    await same_history(server, notebook, "anon:support/42", "support/42")
    home = await aexport_threads(notebook, back, map_ids="add-principal", principal=key_principal, progress=False)
    assert list(home["dest_thread"]) == [f"{key_principal}:support/42", f"{key_principal}:x"]
    assert split_server_thread_id(home.loc[0, "dest_thread"]) == (key_principal, "support/42")
    assert strip_principal("anon")("bob:x") is None
    with pytest.raises(UserError, match="principal"):
        await aexport_threads(server, notebook, map_ids="strip-principal", progress=False)


async def test_bad_arguments_are_user_errors() -> None:
    src = MemoryCheckpointer()
    for kwargs in ({"history": "some"}, {"on_conflict": "merge"}, {"concurrency": 0}):
        with pytest.raises(UserError):
            await aexport_threads(src, MemoryCheckpointer(), progress=False, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="URL"):
        await aexport_threads("nosuch://x", src, progress=False)


def test_sync_call_inside_a_running_loop_and_no_tqdm_without_progress() -> None:
    code = textwrap.dedent("""
        import asyncio, sys
        from tulip_nb.core import AgentState, Message
        from tulip_nb.memory.backends import MemoryCheckpointer
        from tulip_nb.lab import export_threads
        src, dst = MemoryCheckpointer(), MemoryCheckpointer()
        async def main():
            await src.save(AgentState(messages=[Message.user("hi")]), "t")
            return export_threads(src, dst, progress=False)   # sync API inside a running loop
        report = asyncio.run(main())
        assert report.loc[0, "verified"], report
        assert "tqdm" not in sys.modules
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_progress_bar_counts_checkpoints(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("tqdm", reason="tqdm (notebook extra) not installed")
    src = FileCheckpointer(tmp_path / "src")
    import asyncio

    asyncio.run(fill(src, ["a", "b"], 3))
    report = export_threads(src, "memory:", progress=True)
    assert report["verified"].all()
    assert "6/6" in capsys.readouterr().err


_KILLER = """
import asyncio, os, sys
from tulip_nb.lab import export_threads
from tulip_nb.memory.backends import FileCheckpointer

dest = FileCheckpointer(sys.argv[2], layout="tulip")  # one SQLite commit (and one envelope) per checkpoint
die_at, calls = int(sys.argv[3]), 0
save = dest.store.save_sync

def dying_save(thread_id, plan):
    global calls
    calls += 1
    if calls == die_at:  # killed inside a save, before its commit
        os._exit(9)
    return save(thread_id, plan)

dest.store.save_sync = dying_save
export_threads(FileCheckpointer(sys.argv[1]), dest, progress=False, concurrency=3)
"""


@pytest.mark.slow
async def test_killed_midway_then_resumed_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    src = FileCheckpointer(tmp_path / "src")
    threads = [f"t{i:02d}" for i in range(8)]
    await fill(src, threads, 6)
    dest_dir = tmp_path / "dst"
    killed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _KILLER, str(tmp_path / "src"), str(dest_dir), "21"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert killed.returncode == 9, killed.stderr
    dst = FileCheckpointer(dest_dir, layout="tulip")
    partial = {t: await dst.list_checkpoints(t, limit=100) for t in threads}
    done = sum(len(v) for v in partial.values())
    # only committed checkpoints: the 21st save never committed (up to two saves of the other
    # threads in flight at the kill may not have either)
    assert 18 <= done <= 20
    for t, ids in partial.items():  # each thread holds an oldest-first prefix of its history
        full = (await src.list_checkpoints(t, limit=100))[::-1]
        assert ids[::-1] == full[: len(ids)]
    report = await aexport_threads(src, dst, progress=False)
    assert int(report["copied"].sum()) == 48 - done and int(report["skipped"].sum()) == done
    assert report["verified"].all() and report["error"].isna().all()
    for t in threads:
        await same_history(src, dst, t)


async def test_put_fallback_keeps_ids_and_metadata() -> None:
    class Plain(MemoryCheckpointer):
        put_checkpoint = BaseCheckpointer.put_checkpoint  # type: ignore[assignment]

    cp = Plain()
    when = datetime.now(UTC) - timedelta(days=3)
    await cp.put_checkpoint(Checkpoint("c1", "t", when, full_state(), {"k": 1}))
    info = (await cp.list_checkpoint_infos("t"))[0]
    assert info.checkpoint_id == "c1" and caller_metadata(info.metadata) == {"k": 1, "parent_checkpoint_id": None}
