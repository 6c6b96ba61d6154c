"""Anchors kept outside the store (``verify --anchor`` / ``--expect``, an audit trail) and forks whose source is gone.

A rollback of the newest checkpoints, or a newest checkpoint replaced by a consistently re-signed
one, leaves a thread whose chain verifies: only an anchor shows it. A fork whose source was deleted
must keep verifying (``origin_gone``), while a fork whose own first checkpoints were removed must not.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tulip_nb.agent import Agent
from tulip_nb.cli import main
from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import ALG_KEY, CREATED_AT_KEY, HASH_KEY, MESSAGES_KEY, PARENT_HASH_KEY, SEQ_KEY
from tulip_nb.memory.audit import AuditTrail
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer, checkpointer_from_url
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, CheckpointInfo
from tulip_nb.memory.integrity import FAILURES, Anchor, verify_thread
from tulip_nb.models.scripted import ScriptedModel

from .conftest import drop_table, shared_url


async def _thread(cp: BaseCheckpointer, n: int = 5, tid: str = "t", source: str = "final") -> list[CheckpointInfo]:
    state = AgentState(messages=[Message.system("You are careful.")])
    for i in range(n):
        state.messages.append(Message.user(f"turn {i}"))
        state.messages.append(Message.assistant(f"answer {i}"))
        await cp.save(state, tid, metadata={"source": source, "i": i})
    return await _infos(cp, tid)


async def _infos(cp: BaseCheckpointer, tid: str) -> list[CheckpointInfo]:
    return sorted(await cp.list_checkpoint_infos(tid, None), key=lambda i: (i.created_at, i.checkpoint_id))


async def _load(cp: BaseCheckpointer, tid: str, cid: str) -> Checkpoint:
    ck = await cp.load_checkpoint(tid, cid)
    assert ck is not None
    return ck


def cli(*args: str) -> tuple[int, str, str]:
    """``tulip-nb`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse refusing the arguments
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


# -- rollback against an anchor kept outside the store -----------------------------------------


@pytest.mark.parametrize("n_removed", [1, 2, 5])
def test_rollback_is_caught_by_verify_expect(tmp_path: Path, n_removed: int) -> None:
    store = tmp_path / "s"
    infos = asyncio.run(_thread(FileCheckpointer(store, sign=True)))
    code, out, err = cli("verify", str(store), "t", "--anchor")
    assert code == 0, out + err
    anchor = Anchor.from_json(out)  # stdout is the anchor alone; the summary went to stderr
    assert "ok: 5 checkpoint(s) of t" in err
    assert (anchor.seq, anchor.checkpoint_id, anchor.hash) == (5, infos[-1].checkpoint_id, infos[-1].metadata[HASH_KEY])
    assert anchor.saves == {i.checkpoint_id: i.metadata[HASH_KEY] for i in infos}
    (tmp_path / "a.json").write_text(out)
    code, out, _ = cli("verify", str(store), "t", "--expect", str(tmp_path / "a.json"))
    assert code == 0 and "anchor: ok: reaches the anchor" in out

    async def roll_back() -> None:
        cp = FileCheckpointer(store, sign=True)
        for info in infos[-n_removed:]:
            assert await cp.delete("t", info.checkpoint_id)

    asyncio.run(roll_back())
    if n_removed < 5:  # what is left is a consistent, older thread: without an anchor it verifies
        assert cli("verify", str(store), "t")[0] == 0
    for expect in (str(tmp_path / "a.json"), f"file:{tmp_path / 'a.json'}", anchor.hash or "", "5", anchor.to_json()):
        code, out, err = cli("verify", str(store), "t", "--expect", expect)
        assert code == 1, (expect, out, err)
        if n_removed == 5:  # the whole thread deleted: against an anchor that is a rollback too
            assert out.startswith("(no checkpoints): anchor: rolled_back")
        assert "anchor: rolled_back" in out and "problem(s)" in err
    if n_removed == 5:
        assert cli("verify", str(store), "t")[0] == 2  # without one: no such thread
    else:
        assert f"{n_removed} newest saves removed" in cli("verify", str(store), "t", "--expect", "5")[1]
        # an anchor of an older save is still reached
        older = infos[0].metadata[HASH_KEY]
        assert cli("verify", str(store), "t", "--expect", older)[0] == 0


def test_expect_refuses_what_is_no_anchor(tmp_path: Path) -> None:
    store = tmp_path / "s"
    asyncio.run(_thread(FileCheckpointer(store, sign=True), n=2))
    for bad, says in [("nope", "no such file"), ("0", "seq must be"), ("{", "not JSON"), ('{"a": 1}', "not a tulip")]:
        code, _, err = cli("verify", str(store), "t", "--expect", bad)
        assert code == 2 and says in err, (bad, err)
    code, _, err = cli("verify", str(store), "t", "--expect-from-audit", "redis://x/0")
    assert code == 2 and "reads a file" in err
    code, _, err = cli("verify", str(store), "t", "--expect", "1", "--expect-from-audit", "x")
    assert code == 2 and "not allowed with" in err
    # a thread without a signed checkpoint has nothing to anchor
    unsigned = tmp_path / "u"
    asyncio.run(_thread(FileCheckpointer(unsigned, sign=False), n=1))
    code, _, err = cli("verify", str(unsigned), "t", "--anchor")
    assert code == 2 and "nothing to anchor" in err


def _agent(cp: BaseCheckpointer, trail: AuditTrail, turns: int) -> Agent:
    return Agent(ScriptedModel([f"reply {i}" for i in range(turns)]), checkpointer=cp, hooks=[trail])


async def test_the_audit_trail_records_hash_and_seq_and_anchors(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path / "threads", sign=True)
    trail = AuditTrail(tmp_path / "audit.jsonl", checkpointer=cp)
    agent = _agent(cp, trail, 4)
    for i in range(4):
        await agent.run(f"question {i}", thread_id="ticket")
    infos = await _infos(cp, "ticket")
    saves = [e for e in await trail.entries() if e.kind == "checkpoint"]
    assert [(e.data["checkpoint_id"], e.data["checkpoint_hash"], e.data["checkpoint_seq"]) for e in saves] == [
        (i.checkpoint_id, i.metadata[HASH_KEY], i.metadata[SEQ_KEY]) for i in infos
    ]
    anchor = await trail.anchor("ticket")
    assert (anchor.seq, anchor.hash, anchor.thread_id) == (4, infos[-1].metadata[HASH_KEY], "ticket")
    report = await verify_thread(cp, "ticket", expect=anchor)
    assert report.ok and report.anchor is not None and report.anchor.status == "ok", report
    # the trail knows nothing of another thread, and a trail without checkpointer= records no hash
    with pytest.raises(UserError, match="no hashed save"):
        await trail.anchor("other")
    bare = AuditTrail(tmp_path / "bare.jsonl")
    await _agent(cp, bare, 1).run("hi", thread_id="b")
    entry = next(e for e in await bare.entries() if e.kind == "checkpoint")
    assert "checkpoint_hash" not in entry.data
    with pytest.raises(UserError, match="checkpointer="):
        await bare.anchor("b")
    # a save the agent did not make is recorded by hand
    await cp.save(AgentState(messages=[Message.user("by a script")]), "ticket")
    newest = (await _infos(cp, "ticket"))[-1]
    entry = await trail.record_save("ticket", newest.checkpoint_id)
    assert entry.data["checkpoint_seq"] == 5 and (await trail.anchor("ticket")).seq == 5
    # an anchor is refused from a tampered trail
    lines = (tmp_path / "audit.jsonl").read_bytes().splitlines()
    edited = orjson.loads(lines[0])
    edited["data"]["checkpoint_seq"] = 99
    (tmp_path / "audit.jsonl").write_bytes(b"\n".join([orjson.dumps(edited), *lines[1:]]) + b"\n")
    with pytest.raises(UserError, match="broken audit trail"):
        await AuditTrail(tmp_path / "audit.jsonl").anchor("ticket")


@pytest.mark.parametrize("n_removed", [1, 3])
async def test_rollback_is_caught_via_the_audit_trail(tmp_path: Path, n_removed: int) -> None:
    cp = FileCheckpointer(tmp_path / "threads", sign=True)
    trail = AuditTrail(tmp_path / "audit.jsonl", checkpointer=cp)
    agent = _agent(cp, trail, 4)
    for i in range(4):
        await agent.run(f"question {i}", thread_id="ticket")
    infos = await _infos(cp, "ticket")
    for info in infos[-n_removed:]:
        assert await cp.delete("ticket", info.checkpoint_id)
    assert (await verify_thread(cp, "ticket")).ok  # consistent without the anchor
    report = await verify_thread(cp, "ticket", expect=await AuditTrail(tmp_path / "audit.jsonl").anchor("ticket"))
    assert not report.ok and report.anchor is not None and report.anchor.status == "rolled_back", report
    assert f"{n_removed} newest saves removed" in report.anchor.detail
    assert all(v.status == "ok" for v in report.verdicts)

    def from_cli() -> tuple[int, str, str]:
        return cli("verify", str(tmp_path / "threads"), "ticket", "--expect-from-audit", str(tmp_path / "audit.jsonl"))

    code, out, err = await asyncio.to_thread(from_cli)
    assert code == 1 and "anchor: rolled_back" in out, out + err
    # --expect takes the audit trail file too
    code, out, _ = await asyncio.to_thread(
        cli, "verify", str(tmp_path / "threads"), "ticket", "--expect", str(tmp_path / "audit.jsonl")
    )
    assert code == 1 and "anchor: rolled_back" in out


@pytest.mark.parametrize("how", ["resigned", "copied", "copied-at-its-time", "stripped"])
async def test_a_copied_over_or_resigned_newest_is_caught_by_the_audit_trail(tmp_path: Path, how: str) -> None:
    cp = MemoryCheckpointer()
    trail = AuditTrail(tmp_path / "audit.jsonl", checkpointer=cp)
    agent = _agent(cp, trail, 4)
    for i in range(4):
        await agent.run(f"question {i}", thread_id="ticket")
    infos = await _infos(cp, "ticket")
    older, newest = infos[1], infos[-1]
    if how == "resigned":  # rewritten consistently: the newest replaced by a properly signed save under its id
        state = (await _load(cp, "ticket", newest.checkpoint_id)).state
        state.messages[-1] = Message.assistant("Refund approved.")
        assert await cp.delete("ticket", newest.checkpoint_id)
        await cp.save(state, "ticket", newest.checkpoint_id, {"source": "final"})
        assert (await verify_thread(cp, "ticket")).ok  # the chain alone cannot see it
        assert (await verify_thread(cp, "ticket", expect=newest.metadata[SEQ_KEY])).ok  # nor the seq
    elif how == "stripped":  # hash keys and marks removed: looks like a tulip save without an anchor
        ck = await _load(cp, "ticket", newest.checkpoint_id)
        ck.state.messages[-1] = Message.assistant("Refund approved.")
        gone = (HASH_KEY, PARENT_HASH_KEY, ALG_KEY, SEQ_KEY, CREATED_AT_KEY, MESSAGES_KEY)
        meta = {k: v for k, v in ck.metadata.items() if k not in gone}
        await cp.put_checkpoint(Checkpoint(ck.checkpoint_id, "ticket", ck.created_at, ck.state, meta))
        assert (await verify_thread(cp, "ticket")).ok
    else:
        ck = await _load(cp, "ticket", older.checkpoint_id)
        when = older.created_at if how == "copied-at-its-time" else newest.created_at
        await cp.put_checkpoint(Checkpoint(newest.checkpoint_id, "ticket", when, ck.state, ck.metadata))
    report = await verify_thread(cp, "ticket", expect=await trail.anchor("ticket"))
    assert not report.ok, report
    assert report.anchor is not None and report.anchor.status == "rolled_back", report
    bad = next(v for v in report.verdicts if v.checkpoint_id == newest.checkpoint_id)
    assert bad.failed, report
    if how in ("resigned", "stripped"):
        assert bad.status == "mismatch" and "anchored" in bad.detail


# -- forks whose source is gone ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def store(kind: str, tmp_path: Path) -> AsyncIterator[Callable[[], BaseCheckpointer]]:
    """A factory of instances over one store (fresh for the file store; one for the others)."""
    if kind == "memory":
        mem = MemoryCheckpointer()
        yield lambda: mem
        return
    if kind == "file":
        yield lambda: FileCheckpointer(tmp_path / "files", sign=True)
        return
    url = shared_url(kind)
    cp = checkpointer_from_url(url, sign=True)  # signing is opt-in on the history model's stores
    try:
        yield lambda: cp
    finally:
        await cp.close()
        await drop_table(url)


async def _fork(cp: BaseCheckpointer, at: int = 1, turns: int = 2) -> tuple[list[CheckpointInfo], str]:
    src = await _thread(cp, n=3, tid="src")
    agent = Agent(ScriptedModel([f"fork reply {i}" for i in range(turns)]), checkpointer=cp)
    fork = await agent.fork("src", src[at].checkpoint_id, "src-fork")
    for i in range(turns):
        await agent.run(f"fork question {i}", thread_id=fork)
    return src, fork


@pytest.mark.parametrize("kind", ["memory", "file", "postgresql"])
async def test_a_fork_whose_source_was_deleted_verifies(kind: str, tmp_path: Path) -> None:
    async with store(kind, tmp_path) as fresh:
        _, fork = await _fork(fresh())
        head = (await verify_thread(fresh(), fork)).head_anchor
        assert head is not None
        assert await fresh().delete("src")
        report = await verify_thread(fresh(), fork, expect=head)
        assert report.ok, report
        assert report.counts() == {"origin_gone": 1, "ok": 2}, report
        first = report.verdicts[0]
        assert "source thread 'src' is gone" in first.detail and "recorded origin" in first.detail
        assert "origin_gone" not in FAILURES
        assert (await verify_thread(fresh(), fork, strict=True)).ok
        # the fork's own first checkpoint removed as well: that is still caught
        assert await fresh().delete(fork, report.verdicts[0].checkpoint_id)
        report = await verify_thread(fresh(), fork)
        assert not report.ok and report.verdicts[0].status == "broken_chain", report


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_lab_fork_whose_source_was_deleted_verifies_with_its_recorded_origin(kind: str, tmp_path: Path) -> None:
    """lab.fork / sweep branches chain to their source's hash as Agent.fork does."""
    from tulip_nb.lab import afork, aopen_thread

    async with store(kind, tmp_path) as fresh:
        src = await _thread(fresh(), n=3, tid="src")
        branch = await afork(await aopen_thread(fresh(), "src"), src[1].checkpoint_id, new_thread_id="src-lab")
        agent = Agent(ScriptedModel(["lab fork reply"]), checkpointer=fresh())
        await agent.run("lab fork question", thread_id=branch.thread_id)
        assert await fresh().delete("src")
        report = await verify_thread(fresh(), "src-lab")
        assert report.ok, report
        assert report.verdicts[0].status == "origin_gone", report
        assert "recorded origin" in report.verdicts[0].detail, report


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("removed", [1, 2])
async def test_a_fork_without_its_first_checkpoints_fails(kind: str, removed: int, tmp_path: Path) -> None:
    async with store(kind, tmp_path) as fresh:
        _, fork = await _fork(fresh(), turns=3)
        infos = await _infos(fresh(), fork)
        for info in infos[:removed]:
            assert await fresh().delete(fork, info.checkpoint_id)
        report = await verify_thread(fresh(), fork)
        assert not report.ok, report
        first = report.verdicts[0]
        assert first.status == "broken_chain" and "not in the thread" in first.detail, report
        assert await fresh().delete("src")  # and with the source gone too
        report = await verify_thread(fresh(), fork)
        assert not report.ok and report.verdicts[0].status == "broken_chain", report


async def test_a_fork_of_a_replaced_source_checkpoint_still_fails() -> None:
    """The source present with another checkpoint under the parent's id is not a gone origin."""
    cp = MemoryCheckpointer()
    src, fork = await _fork(cp)
    parent = await _load(cp, "src", src[1].checkpoint_id)
    parent.state.messages.append(Message.user("slipped in"))
    meta = {**parent.metadata, HASH_KEY: "0" * 64}
    await cp.put_checkpoint(Checkpoint(parent.checkpoint_id, "src", parent.created_at, parent.state, meta))
    report = await verify_thread(cp, fork)
    assert not report.ok and report.verdicts[0].status == "broken_chain", report


def test_verify_cli_on_a_fork_whose_source_was_deleted(tmp_path: Path) -> None:
    base = tmp_path / "threads"

    async def build() -> str:
        cp = FileCheckpointer(base, sign=True)
        _, fork = await _fork(cp)
        assert await cp.delete("src")
        return fork

    fork = asyncio.run(build())
    code, out, err = cli("verify", str(base), fork)
    assert code == 0, out + err
    assert "origin_gone" in out and "note:" in out and "1 origin_gone" in out


async def test_prune_and_vacuum_keep_anchors_and_forks_verifying(tmp_path: Path) -> None:
    cp = MemoryCheckpointer()
    trail = AuditTrail(tmp_path / "audit.jsonl", checkpointer=cp)
    agent = Agent(ScriptedModel(["a", "b", "c"]), checkpointer=cp, hooks=[trail], checkpoint_every_n_iterations=1)
    for i in range(3):
        await agent.run(f"question {i}", thread_id="t")
    head = (await verify_thread(cp, "t")).head_anchor
    assert head is not None
    await cp.prune("t", keep_last=2, keep_turn_ends=False)
    for anchor in (head, await trail.anchor("t")):
        report = await verify_thread(cp, "t", expect=anchor)
        assert report.ok and report.anchor is not None and report.anchor.status == "ok", report
    # vacuum: the source's old checkpoints (the fork's parent among them) go, and the fork's own
    src, fork = await _fork(cp, at=0)
    old = datetime.now(UTC) - timedelta(days=90)
    for n, info in enumerate(src[:2]):
        ck = await _load(cp, "src", info.checkpoint_id)
        await cp.put_checkpoint(Checkpoint(ck.checkpoint_id, "src", old + timedelta(seconds=n), ck.state, ck.metadata))
    fork_head = (await verify_thread(cp, fork)).head_anchor
    assert await cp.vacuum(older_than_days=30) == 2
    assert (await verify_thread(cp, "src", expect=3)).ok
    report = await verify_thread(cp, fork, expect=fork_head)
    assert report.ok and report.counts() == {"origin_gone": 1, "ok": 2}, report
    assert "no longer holds" in report.verdicts[0].detail
    first = (await _infos(cp, fork))[0]
    ck = await _load(cp, fork, first.checkpoint_id)
    await cp.put_checkpoint(Checkpoint(ck.checkpoint_id, fork, old, ck.state, ck.metadata))
    assert await cp.vacuum(older_than_days=30) == 1  # the fork's first checkpoint: the rest is re-linked
    report = await verify_thread(cp, fork, expect=fork_head)
    assert report.ok and report.counts() == {"ok": 2}, report


# -- any attack on a signed thread is reported against its anchor ---------------------------------

ATTACKS = ["edit", "edit_meta", "edit_time", "delete", "rollback", "copy", "resign", "strip"]


async def _attack(cp: MemoryCheckpointer, kind: str, i: int, j: int, n: int) -> bool:
    """Apply one attack (``i``, ``j``: checkpoint positions); False when the thread is too small for it."""
    infos = await _infos(cp, "t")
    if not infos:
        return False
    a, b = infos[i % len(infos)], infos[j % len(infos)]
    ck = await _load(cp, "t", a.checkpoint_id)
    if kind == "edit":
        ck.state.messages[-1] = Message.assistant(f"edited {n}")
        await cp.put_checkpoint(Checkpoint(a.checkpoint_id, "t", ck.created_at, ck.state, ck.metadata))
    elif kind == "edit_meta":
        meta = {**ck.metadata, f"slipped_{n}": True}
        await cp.put_checkpoint(Checkpoint(a.checkpoint_id, "t", ck.created_at, ck.state, meta))
    elif kind == "edit_time":
        later = ck.created_at + timedelta(microseconds=1 + n)
        await cp.put_checkpoint(Checkpoint(a.checkpoint_id, "t", later, ck.state, ck.metadata))
    elif kind == "delete":
        await cp.delete("t", a.checkpoint_id)
    elif kind == "rollback":
        for info in infos[-(1 + i % len(infos)) :]:
            await cp.delete("t", info.checkpoint_id)
    elif kind == "copy":
        if a.checkpoint_id == b.checkpoint_id:
            return False
        await cp.put_checkpoint(Checkpoint(b.checkpoint_id, "t", b.created_at, ck.state, ck.metadata))
    elif kind == "resign":  # the newest replaced by a properly signed save under its id
        newest = await _load(cp, "t", infos[-1].checkpoint_id)
        newest.state.messages.append(Message.user(f"resigned {n}"))
        await cp.delete("t", newest.checkpoint_id)
        await cp.save(newest.state, "t", newest.checkpoint_id, {"source": "final"})
    else:  # strip: every tulip_nb key removed (looks like a tulip save), content edited
        ck.state.messages.append(Message.user(f"stripped {n}"))
        gone = (HASH_KEY, PARENT_HASH_KEY, ALG_KEY, SEQ_KEY, CREATED_AT_KEY, MESSAGES_KEY)
        meta = {k: v for k, v in ck.metadata.items() if k not in gone}
        await cp.put_checkpoint(Checkpoint(a.checkpoint_id, "t", ck.created_at, ck.state, meta))
    return True


@given(
    n=st.integers(min_value=1, max_value=6),
    attacks=st.lists(
        st.tuples(st.sampled_from(ATTACKS), st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=3
    ),
    texts=st.lists(st.text(max_size=12), min_size=6, max_size=6),
)
def test_random_attacks_are_always_reported(n: int, attacks: list[tuple[str, int, int]], texts: list[str]) -> None:
    async def run() -> None:
        cp = MemoryCheckpointer()
        state = AgentState(messages=[Message.system("You are careful.")])
        for k in range(n):
            state.messages.append(Message.user(texts[k]))
            state.messages.append(Message.assistant(f"answer {k}"))
            await cp.save(state, "t", metadata={"source": "final"})
        before = await verify_thread(cp, "t")
        assert before.ok and before.head_anchor is not None, before
        applied = [await _attack(cp, kind, i, j, m) for m, (kind, i, j) in enumerate(attacks)]
        if not any(applied):
            return
        report = await verify_thread(cp, "t", expect=before.head_anchor)
        assert not report.ok, (attacks, report, [str(v) for v in report.verdicts])

    asyncio.run(run())
