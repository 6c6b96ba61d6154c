"""tulip-nb convert to the history layout, on a store written by the release before it.

``tests/data/legacy_store/`` was written by that release (``tests/data/make_legacy_store.py``):
the delta layout (logs, forks into other threads' logs, a copy, a fork whose source was deleted,
a pruned log, two threads in one directory), the tulip layout, tulip-agents' own envelopes and a
thread both wrote. ``manifest.json`` holds what that release read back from it. Every test here
runs on the committed files, so it keeps working once the delta engine's writer is gone: only the
converter's reader of the old layout is used.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, examples
from tulip_nb._sync import run_sync
from tulip_nb.core import iso_offset
from tulip_nb.core.keys import MESSAGES_KEY, MIRROR_KEY
from tulip_nb.memory.backends import file_convert
from tulip_nb.memory.backends._history_file import HistoryFileCheckpointer
from tulip_nb.memory.backends._legacy_delta import LegacyStore
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.backends.file_convert import convert_to_history
from tulip_nb.memory.history import PROJECTION_KEY
from tulip_nb.memory.integrity import verify_thread

DATA = Path(__file__).resolve().parent.parent / "data" / "legacy_store"
MANIFEST: dict[str, Any] = json.loads((DATA / "manifest.json").read_text())
THREADS: dict[str, Any] = MANIFEST["threads"]
OLD_FILES = (".tulip_nb_log", ".tulip_nb_index", ".tulip_nb_forks", ".lock")


def legacy_store(tmp_path: Path) -> Path:
    """A fresh copy of the committed store; its ``base_dir``."""
    with tarfile.open(DATA / "store.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "store"


def by_tulip(row: dict[str, Any]) -> bool:
    """A checkpoint tulip-agents wrote (no tulip_nb mark in its save metadata)."""
    return MESSAGES_KEY not in row["metadata"]


def seen(ck: Any) -> dict[str, Any]:
    data = ck.state.to_json_bytes()
    return {
        "checkpoint_id": ck.checkpoint_id,
        "created_at": iso_offset(ck.created_at),
        "metadata": ck.metadata,
        "state_sha256": hashlib.sha256(data).hexdigest(),
        "state_bytes": len(data),
        "messages": len(ck.state.messages),
    }


def recorded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("checkpoint_id", "created_at", "metadata", "state_sha256", "state_bytes", "messages")}


def problems_in(cp: Any, thread_id: str) -> list[str]:
    """What ``cp`` does not read as the manifest recorded (every checkpoint, by id)."""
    out = []
    for row in THREADS[thread_id]["checkpoints"]:
        try:
            ck = run_sync(cp.load_checkpoint(thread_id, row["checkpoint_id"]))
        except Exception as e:  # any failure to read is the finding
            out.append(f"{row['checkpoint_id']}: {type(e).__name__}: {e}")
            continue
        if ck is None or seen(ck) != recorded(row):
            out.append(f"{row['checkpoint_id']}: differs")
    return out


class OldReader:
    """The old layouts read by id through the converter's read-only reader (the delta engine is gone)."""

    def __init__(self, base: Path) -> None:
        self.store = LegacyStore(base.resolve())

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str) -> Any:
        for entry in self.store.entries(thread_id):
            if entry.info.checkpoint_id == checkpoint_id:
                return self.store.load(thread_id, entry)
        return None

    async def close(self) -> None:
        self.store.close()


def tulip_envelopes(base: Path) -> dict[str, str]:
    """path -> sha256 of every envelope without a tulip_nb mark (tulip-agents' own)."""
    out = {}
    for path in sorted(base.glob("*/*.json")):
        obj = orjson.loads(path.read_bytes())
        if MESSAGES_KEY not in obj.get("metadata", {}) and MIRROR_KEY not in obj and PROJECTION_KEY not in obj:
            out[str(path.relative_to(base))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_converted(base: Path) -> None:
    """The whole store is in the history layout, as the manifest says, and nothing old is left."""
    hist = FileCheckpointer(base)  # the default layout: it would refuse a directory with old files
    try:
        assert sorted(run_sync(hist.list_threads(limit=None))) == sorted(THREADS)
        for thread_id, want in THREADS.items():
            assert problems_in(hist, thread_id) == [], thread_id
            infos = run_sync(hist.list_checkpoint_infos(thread_id, None))
            assert sorted(i.checkpoint_id for i in infos) == sorted(r["checkpoint_id"] for r in want["checkpoints"])
            assert infos[0].checkpoint_id == want["latest"], thread_id
            assert run_sync(verify_thread(hist, thread_id)).ok, thread_id
            assert hist.check_mirror(thread_id) == [], thread_id
        assert hist.check_store() == []
    finally:
        run_sync(hist.close())
    left = [p for p in base.rglob("*") if p.name.startswith(OLD_FILES) or p.name.startswith(".tulip_nb_trash")]
    assert left == []
    for path in base.glob("*/*.json"):  # what stays: the projections and tulip's own envelopes
        obj = orjson.loads(path.read_bytes())
        assert PROJECTION_KEY in obj or MESSAGES_KEY not in obj.get("metadata", {}), path
        assert MIRROR_KEY not in obj, path


def test_the_fixture_is_the_old_release_s() -> None:
    assert MANIFEST["release"]["default_layout"] == "delta"
    assert (DATA / "store.tar.gz").stat().st_size + (DATA / "manifest.json").stat().st_size < 300_000
    with tarfile.open(DATA / "store.tar.gz") as tar:
        names = tar.getnames()
    kinds = Counter(Path(n).name.split("-")[0] for n in names)
    assert kinds[".tulip_nb_log"] >= 10 and kinds[".tulip_nb_forks"] >= 1 and kinds[".tulip_nb_index"] >= 10
    assert any(Path(n).name.startswith(".tulip_nb_log-") for n in names)  # two threads in one directory
    assert sum(by_tulip(r) for t in THREADS.values() for r in t["checkpoints"]) >= 1
    assert {"messy-fork-0", "support-copy", "orphan", "tulip-layout", "mixed"} <= set(THREADS)


def test_every_checkpoint_of_the_old_release_s_store_survives(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    tulip_before = tulip_envelopes(base)
    assert tulip_before  # tulip-agents wrote some
    done = convert_to_history(base)
    assert [r.thread_id for r in done] == sorted(THREADS)
    for r in done:
        rows = THREADS[r.thread_id]["checkpoints"]
        mine = sum(not by_tulip(row) for row in rows)
        assert (r.converted, r.verified, r.tulip_kept, r.checkpoints) == (mine, len(rows), len(rows) - mine, len(rows))
        assert r.status == ("converted" if mine else "already") and r.detail == "", r
    assert_converted(base)
    assert tulip_envelopes(base) == tulip_before  # tulip's own envelopes stay as they were, byte for byte


def test_forks_and_copies_load_and_keep_their_lineage(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    convert_to_history(base)
    hist = HistoryFileCheckpointer(base)
    try:
        for fork, source in (
            ("messy-fork-0", "messy"),
            ("support/42:refund #1-fork", "support/42:refund #1"),
            ("support-copy", "support/42:refund #1"),
        ):
            infos = run_sync(hist.list_checkpoint_infos(fork, None))
            first = infos[-1]
            if fork == "support-copy":
                assert all(i.metadata["copied_from"]["thread_id"] == source for i in infos)
                src = run_sync(hist.load_checkpoint(source, first.metadata["copied_from"]["checkpoint_id"]))
            else:
                assert first.metadata["forked_from"] == source
                src = run_sync(hist.load_checkpoint(source, first.parent_checkpoint_id))
            ck = run_sync(hist.load_checkpoint(fork, first.checkpoint_id))
            assert src is not None and ck is not None
            assert [m.json_bytes() for m in ck.state.messages] == [m.json_bytes() for m in src.state.messages]
        orphan = run_sync(hist.load_checkpoint("orphan"))
        assert orphan is not None and orphan.checkpoint_id == THREADS["orphan"]["latest"]
    finally:
        run_sync(hist.close())


def test_a_rerun_is_a_no_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = legacy_store(tmp_path)
    convert_to_history(base)

    def files() -> dict[str, str]:
        return {
            str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*"))
            if p.is_file() and ".tulip_nb/" not in str(p.relative_to(base)) + "/"
        }

    def rows() -> dict[str, list[Any]]:
        hist = HistoryFileCheckpointer(base)
        try:
            return {
                t: [(i.checkpoint_id, i.created_at, i.metadata) for i in run_sync(hist.list_checkpoint_infos(t, None))]
                for t in THREADS
            }
        finally:
            run_sync(hist.close())

    before_files, before_rows = files(), rows()

    async def no_write(self: Any, checkpoint: Any) -> None:
        raise AssertionError(f"a re-run wrote {checkpoint.checkpoint_id}")

    monkeypatch.setattr(HistoryFileCheckpointer, "put_checkpoint", no_write)
    again = convert_to_history(base)
    assert {r.status for r in again} == {"already"}
    assert sum(r.converted for r in again) == sum(r.removed for r in again) == 0
    assert files() == before_files and rows() == before_rows


# -- killed midway ------------------------------------------------------------------------------


class Killed(Exception):
    pass


def run_killed(base: Path, monkeypatch: pytest.MonkeyPatch, event: str, nth: int, thread: str | None = None) -> bool:
    """Run a conversion that dies at the ``nth`` step ``event`` (of ``thread``); whether it died."""
    calls = {"n": 0}

    def step(ev: str, thread_id: str, what: str = "") -> None:
        if ev == event and (thread is None or thread_id == thread):
            calls["n"] += 1
            if calls["n"] == nth:
                raise Killed(f"{ev} {thread_id} {what}")

    monkeypatch.setattr(file_convert, "_step", step)
    try:
        convert_to_history(base)
    except Killed:
        return True
    finally:
        monkeypatch.undo()
    return False


def assert_every_thread_whole(base: Path, *, in_history: bool) -> None:
    """Each thread reads whole, as recorded, through the old engine or the history layout (or
    through the history layout, for every thread, once the removal phase began)."""
    old, hist = OldReader(base), HistoryFileCheckpointer(base)
    hist.allow_legacy = True  # mid-conversion: a thread's old files may still be there
    try:
        for thread_id in THREADS:
            in_hist = problems_in(hist, thread_id)
            if in_history:
                assert in_hist == [], (thread_id, in_hist)
            elif in_hist:
                assert problems_in(old, thread_id) == [], (thread_id, in_hist)
    finally:
        run_sync(hist.close())
        run_sync(old.close())


def snapshot(base: Path) -> dict[str, bytes]:
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def assert_nothing_old_removed(base: Path, before: dict[str, bytes]) -> None:
    """Phase 1 leaves every old file: as it was, or (an envelope) replaced by the history's
    projection of the same checkpoint (same id, created_at, save metadata and state)."""
    for name, data in before.items():
        path = base / name
        assert path.exists(), f"{name} was removed before every thread was converted"
        now = path.read_bytes()
        if now != data:
            old, new = orjson.loads(data), orjson.loads(now)
            assert name.endswith(".json") and PROJECTION_KEY in new, name
            same = ("checkpoint_id", "thread_id", "created_at", "metadata", "state")
            assert {k: old[k] for k in same} == {k: new[k] for k in same}, name


KILLS = [
    ("put", 1, None),
    ("put", 2, "tulip-layout"),  # between the tulip layout's envelopes
    ("put", 9, "support-copy"),
    ("verified", 3, "messy-fork-0"),
    ("put", 40, None),
    ("phase2", 1, None),
    ("removed", 1, None),
    ("removed", 2, "shared_1"),  # a directory two threads share
    ("removed", 1, "messy"),  # a source, after its fork
    ("removed", 17, None),
    ("removed", 30, None),
]


@pytest.mark.slow
@pytest.mark.parametrize(("event", "nth", "thread"), KILLS)
def test_a_conversion_killed_at_any_step_leaves_whole_threads_and_finishes_when_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, event: str, nth: int, thread: str | None
) -> None:
    base = legacy_store(tmp_path)
    tulip_before, files_before = tulip_envelopes(base), snapshot(base)
    assert run_killed(base, monkeypatch, event, nth, thread), "the kill point was never reached"
    assert_every_thread_whole(base, in_history=event in ("phase2", "removed"))
    if event in ("put", "verified", "phase2"):
        assert_nothing_old_removed(base, files_before)
    assert tulip_envelopes(base) == tulip_before
    done = convert_to_history(base)
    assert {r.status for r in done} <= {"converted", "already"}, done
    assert_converted(base)
    assert tulip_envelopes(base) == tulip_before
    assert {r.status for r in convert_to_history(base)} == {"already"}


_STEPS: list[tuple[str, str]] = []


def all_steps() -> list[tuple[str, str]]:
    """Every step ``(event, thread)`` of a whole conversion of the fixture, in order (run once)."""
    if not _STEPS:
        with tempfile.TemporaryDirectory() as tmp:
            base = legacy_store(Path(tmp))
            real = file_convert._step
            file_convert._step = lambda event, thread_id, what="": _STEPS.append((event, thread_id))
            try:
                convert_to_history(base)
            finally:
                file_convert._step = real
    return _STEPS


@pytest.mark.slow
@settings(max_examples=examples(0.15), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_conversion_killed_after_any_step_can_be_finished(monkeypatch: pytest.MonkeyPatch, data: Any) -> None:
    steps = all_steps()
    assert {e for e, _ in steps} == {"put", "verified", "phase2", "removed"}
    k = data.draw(st.integers(0, len(steps) - 1), label="killed after step")
    event = steps[k][0]
    nth = sum(1 for e, _ in steps[: k + 1] if e == event)
    with tempfile.TemporaryDirectory() as tmp:
        base = legacy_store(Path(tmp))
        before = snapshot(base)
        assert run_killed(base, monkeypatch, event, nth)
        in_history = any(e == "phase2" for e, _ in steps[: k + 1])
        assert_every_thread_whole(base, in_history=in_history)
        if not in_history or event == "phase2":
            assert_nothing_old_removed(base, before)
        convert_to_history(base)
        assert_converted(base)


def test_a_failing_history_write_leaves_the_old_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = legacy_store(tmp_path)
    real, calls = HistoryFileCheckpointer.put_checkpoint, {"n": 0}

    async def failing(self: Any, checkpoint: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 12:
            raise OSError(28, "No space left on device")
        await real(self, checkpoint)

    monkeypatch.setattr(HistoryFileCheckpointer, "put_checkpoint", failing)
    with pytest.raises(OSError, match="No space"):
        convert_to_history(base)
    monkeypatch.undo()
    old = OldReader(base)
    assert all(problems_in(old, t) == [] for t in THREADS)
    run_sync(old.close())
    convert_to_history(base)
    assert_converted(base)


# -- refusals and partial runs ---------------------------------------------------------------------


def test_a_checkpoint_that_reads_back_differently_refuses_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = legacy_store(tmp_path)
    victim = THREADS["pruned"]["checkpoints"][1]["checkpoint_id"]
    real = HistoryFileCheckpointer.load_checkpoint

    async def lossy(self: Any, thread_id: str, checkpoint_id: str | None = None) -> Any:
        ck = await real(self, thread_id, checkpoint_id)
        if ck is not None and ck.checkpoint_id == victim:
            ck.metadata = {k: v for k, v in ck.metadata.items() if k != "run_id"}  # a key lost on the way
        return ck

    monkeypatch.setattr(HistoryFileCheckpointer, "load_checkpoint", lossy)
    done = {r.thread_id: r for r in convert_to_history(base)}
    assert done["pruned"].status == "refused" and "reads back differently (save metadata)" in done["pruned"].detail
    assert "were written to the history before this" in done["pruned"].detail and done["pruned"].converted >= 1
    assert (base / "pruned" / ".tulip_nb_log").exists()  # its old files stay
    assert {r.status for t, r in done.items() if t != "pruned"} <= {"converted", "already"}
    monkeypatch.undo()
    old = OldReader(base)
    assert problems_in(old, "pruned") == []
    run_sync(old.close())


def test_a_log_that_cannot_be_read_whole_refuses_its_thread_before_anything_is_written(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    log = base / "pruned" / ".tulip_nb_log"
    data = bytearray(log.read_bytes())
    data[len(data) // 3] ^= 0x20  # one flipped bit in a record the old engine checksums
    log.write_bytes(bytes(data))
    done = {r.thread_id: r for r in convert_to_history(base)}
    pruned = done["pruned"]
    assert pruned.status == "refused" and "cannot be read from the old store" in pruned.detail
    assert "checksum" in pruned.detail and pruned.converted == 0
    hist = HistoryFileCheckpointer(base)
    assert run_sync(hist.store.rows("pruned")) == []
    run_sync(hist.close())
    assert log.read_bytes() == bytes(data)
    assert {r.status for t, r in done.items() if t != "pruned"} <= {"converted", "already"}


def test_envelope_extras_refuse_the_thread_and_keep_it_as_it_was(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    directory = base / THREADS["tulip-layout"]["directory"]
    older = directory / (THREADS["tulip-layout"]["checkpoints"][-1]["checkpoint_id"] + ".json")
    obj = orjson.loads(older.read_bytes())
    state = obj.pop("state")
    older.write_bytes(orjson.dumps({**obj, "x_review": {"by": "ops"}, "state": state}))  # an envelope extra
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    done = {r.thread_id: r for r in convert_to_history(base)}
    refused = done["tulip-layout"]
    assert refused.status == "refused" and "x_review" in refused.detail and "does not keep" in refused.detail
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == files  # not a byte changed
    hist = HistoryFileCheckpointer(base)
    assert run_sync(hist.store.rows("tulip-layout")) == []  # nothing of it written
    run_sync(hist.close())
    assert all(r.status == "converted" or r.status == "already" for t, r in done.items() if t != "tulip-layout")
    old = OldReader(base)
    assert run_sync(old.load_checkpoint("tulip-layout", obj["checkpoint_id"])).extra == {"x_review": {"by": "ops"}}
    run_sync(old.close())
    r = cli(str(base))
    assert r.returncode == 1 and "tulip-layout: refused:" in r.stderr and "x_review" in r.stderr


def test_a_source_converted_alone_keeps_the_log_its_forks_use(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    (messy,) = convert_to_history(base, ["messy"])
    assert messy.status == "pending" and messy.converted == len(THREADS["messy"]["checkpoints"])
    assert "messy-fork-0" in messy.detail or "base of forks" in messy.detail
    assert (base / "messy" / ".tulip_nb_log").exists()
    old = OldReader(base)
    assert problems_in(old, "messy-fork-0") == [] and problems_in(old, "messy") == []
    run_sync(old.close())
    (fork,) = convert_to_history(base, ["messy-fork-0"])  # a dependent goes first: its log may go
    assert fork.status == "converted" and not (base / "messy-fork-0" / ".tulip_nb_log").exists()
    (messy,) = convert_to_history(base, ["messy"])
    assert messy.status == "converted" and messy.converted == 0 and messy.removed >= 2
    assert not (base / "messy" / ".tulip_nb_log").exists()
    convert_to_history(base)
    assert_converted(base)


def test_the_delta_engine_s_leftovers_go(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    dead = 2**22 + 12345  # above pid_max's default: no such process
    (base / ".tulip_nb_trash-0123abcd").mkdir()
    (base / ".tulip_nb_trash-0123abcd" / ".tulip_nb_log").write_bytes(b"gone already")
    (base / f".tulip_nb_copy-{dead}-feed.tmp").mkdir()
    tmp = base / "pruned" / f".0f9f.json.{dead}.1.tmp"
    tmp.write_bytes(b"{")
    convert_to_history(base)
    assert not tmp.exists() and sorted(p.name for p in base.iterdir() if p.name.startswith(".")) == [".tulip_nb"]
    assert_converted(base)


# -- tulip after the conversion ---------------------------------------------------------------------


def test_tulip_agents_resumes_a_converted_thread_and_we_continue_after_it(tmp_path: Path) -> None:
    tulip_agent = pytest.importorskip("tulip.agent", reason="tulip-agents (the interop peer) is not installed")
    tulip_testing = pytest.importorskip("tulip.testing")
    tulip_file = pytest.importorskip("tulip.memory.backends.file")
    tulip_conversation = pytest.importorskip("tulip.memory.conversation")
    from tulip_nb.agent import Agent
    from tulip_nb.memory.conversation.compactor import LLMCompactor
    from tulip_nb.models import ScriptedModel, text

    base = legacy_store(tmp_path)
    convert_to_history(base)
    thread = "support/42:refund #1"
    tcp = tulip_file.FileCheckpointer(base_dir=str(base))
    for thread_id, want in MANIFEST["tulip"].items():  # tulip still sees each thread's latest turn end
        listed = run_sync(tcp.list_checkpoints(thread_id, limit=1000))
        assert listed[0] == want["listed"][0], thread_id
        assert set(listed) <= set(want["listed"]) | {want["listed"][0]}
        state = run_sync(tcp.load(thread_id))
        last = state.messages[-1].content if state.messages else None
        assert (last if last is None else last[:80]) == want["last_message"], thread_id
    assert run_sync(tcp.list_checkpoints("tulip-agents/1", limit=1000)) == MANIFEST["tulip"]["tulip-agents/1"]["listed"]

    theirs = tulip_agent.Agent(
        model=tulip_testing.ScriptedModel([tulip_testing.text("Refund sent (tulip).")]),
        tools=[],
        system_prompt="You handle refunds.",
        conversation_manager=tulip_conversation.NullManager(),
        checkpointer=tulip_file.FileCheckpointer(base_dir=str(base)),
    )
    result = theirs.run_sync("Send the refund?", thread_id=thread)
    before = THREADS[thread]["checkpoints"][0]["messages"]
    assert len(result.state.messages) == before + 2
    tulip_latest = run_sync(tcp.list_checkpoints(thread, limit=1))[0]

    hist = HistoryFileCheckpointer(base)
    latest = run_sync(hist.load_checkpoint(thread))
    assert latest is not None and latest.checkpoint_id == tulip_latest
    assert latest.state.messages[-1].content == "Refund sent (tulip)."
    ours = Agent(
        ScriptedModel([text("Anything else?")]),
        [],
        system_prompt="You handle refunds.",
        checkpointer=hist,
        conversation_manager=LLMCompactor(context_length=900, head_turns=1),
        checkpoint_every_n_iterations=1,
    )
    after = asyncio.run(ours.run("Thanks", thread_id=thread))
    assert [m.content for m in after.state.messages][-4:] == [
        "Send the refund?",
        "Refund sent (tulip).",
        "Thanks",
        "Anything else?",
    ]
    infos = run_sync(hist.list_checkpoint_infos(thread, None))
    assert {r["checkpoint_id"] for r in THREADS[thread]["checkpoints"]} < {i.checkpoint_id for i in infos}
    assert run_sync(verify_thread(hist, thread)).counts().get("broken_chain", 0) == 0
    assert run_sync(tcp.list_checkpoints(thread, limit=1))[0] == after.checkpoint_id  # tulip resumes ours
    run_sync(hist.close())


# -- the command line -------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tulip_nb.cli", "convert", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )


@pytest.mark.slow
def test_cli(tmp_path: Path) -> None:
    base = legacy_store(tmp_path)
    r = cli(str(base), "messy-fork-0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("messy-fork-0: 4 checkpoint(s), 4 converted, 4 verified, ") and "converted" in r.stdout
    r = cli(f"file:{base}")  # history is the default target
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert sorted(lines) == sorted(THREADS)
    assert lines["messy-fork-0"].endswith("already in the history layout")
    assert "2 tulip envelope(s) kept" in lines["tulip-agents/1"]
    assert "12 of 12 thread(s) in the history layout" in r.stderr and "disk" in r.stderr
    assert_converted(base)
    r = cli(str(base), "--to", "history")
    assert r.returncode == 0 and all(v.endswith("already in the history layout") for v in r.stdout.splitlines())
    r = cli(str(base), "nope")
    assert r.returncode == 2 and "no such thread" in r.stderr
    r = cli(str(tmp_path / "missing"))
    assert r.returncode == 2 and "no such directory" in r.stderr
