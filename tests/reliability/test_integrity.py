"""Tamper-evident threads: every backend signs, verify_thread finds the first edited checkpoint."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, Message
from tulip_nb.core._messages import ToolCall
from tulip_nb.core.state import MessageBlobCache, messages_digest
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer, checkpointer_from_url
from tulip_nb.memory.checkpointer import BaseCheckpointer, CheckpointInfo
from tulip_nb.memory.history import Rewrite
from tulip_nb.memory.integrity import HASH_KEY, PARENT_HASH_KEY, recompute_hash, verify_thread

from .conftest import drop_table, shared_url


@contextlib.asynccontextmanager
async def backend(kind: str, tmp_path: Path, redis_url: str, **kwargs: Any) -> AsyncIterator[BaseCheckpointer]:
    url = {
        "memory": "memory:",
        "file": f"file:{tmp_path / 'files'}",
        "redis": redis_url,
    }.get(kind) or (shared_url(kind) if kind != "s3" else "")
    if kind == "s3":
        from tests.backends.factories.remote import S3_CREDENTIALS, moto_endpoint, new_bucket
        from tulip_nb.memory.backends._s3 import S3Backend

        kwargs.setdefault("sign", True)  # signing is opt-in on the history model (issues 26, 27)
        cp: BaseCheckpointer = S3Backend(new_bucket(), endpoint_url=moto_endpoint(), **S3_CREDENTIALS, **kwargs)
    else:
        if kind != "memory":  # signing is opt-in on the history model's stores (issues 26, 27): these tests sign
            kwargs.setdefault("sign", True)
        cp = checkpointer_from_url(url, **kwargs)
    try:
        yield cp
    finally:
        await cp.close()
        if kind in ("postgresql", "mysql"):
            await drop_table(url)


def _state(n: int) -> AgentState:
    msgs = [Message.system("You are careful.")]
    for i in range(n):
        msgs.append(Message.user(f"question {i} ünïcode \u2028 {{'x': {i}}}"))
        msgs.append(
            Message.assistant(None, [ToolCall(id=f"c{i}", name="lookup", arguments={"z": i, "a": [1.5, None, "é"]})])
        )
        msgs.append(Message.tool(f"result {i}", tool_call_id=f"c{i}", name="lookup"))
    return AgentState(messages=msgs, metadata={"case": "ord-4821", "b": {"y": 1, "a": 2}})


@pytest.mark.parametrize("kind", ["memory", "file", "redis", "postgresql", "mysql", "s3"])
async def test_every_backend_signs_and_verifies(kind: str, tmp_path: Path, session_redis: Any) -> None:
    async with backend(kind, tmp_path, session_redis.url) as cp:
        state = _state(3)
        ids = []
        for i in range(4):
            state.messages.append(Message.user(f"turn {i}"))
            state.iteration = i
            ids.append(await cp.save(state, "t/1", metadata={"step": i}))
        report = await verify_thread(cp, "t/1")
        assert report.ok, report
        assert report.counts() == {"ok": 4}
        infos = sorted(await cp.list_checkpoint_infos("t/1", 10), key=lambda i: i.created_at)
        assert [i.checkpoint_id for i in infos] == ids
        for older, newer in itertools.pairwise(infos):  # the chain links hash to hash
            assert newer.metadata[PARENT_HASH_KEY] == older.metadata[HASH_KEY]
        # a fork chains to its source checkpoint in the other thread
        from tulip_nb.agent import Agent
        from tulip_nb.models.scripted import ScriptedModel

        agent = Agent(ScriptedModel(["ok"]), checkpointer=cp)
        fork = await agent.fork("t/1", ids[1], "t/1-fork")
        report = await verify_thread(cp, fork)
        assert report.ok and report.counts() == {"ok": 1}, report


async def test_tampering_with_tulip_s_envelopes_is_reported_and_repaired(tmp_path: Path) -> None:
    """``layout="tulip"``: every checkpoint's envelope is a projection of the signed history, so an
    edited or removed envelope never changes what tulip_nb loads or verifies; ``check_mirror``
    (``tulip-nb verify``) names it, and a new instance rewrites it from the history. Tampering with
    the history itself is ``tests/reliability/test_history_attacks.py``'s."""
    cp = FileCheckpointer(tmp_path, layout="tulip", sign=True)
    state = _state(2)
    for i in range(5):
        state.messages.append(Message.user(f"turn {i}"))
        await cp.save(state, "t")
    infos = sorted(await cp.list_checkpoint_infos("t", 10), key=lambda i: i.created_at)
    victim = cp.thread_dir("t") / f"{infos[2].checkpoint_id}.json"
    whole = victim.read_bytes()
    victim.write_bytes(whole.replace(b'"turn 1"', b'"turn one"'))
    (cp.thread_dir("t") / f"{infos[1].checkpoint_id}.json").unlink()
    fresh = FileCheckpointer(tmp_path, layout="tulip", sign=True)
    problems = fresh.check_mirror("t")
    assert any(infos[2].checkpoint_id in p and "differs from the history (state)" in p for p in problems), problems
    assert any(infos[1].checkpoint_id in p and "cannot be read" in p for p in problems), problems
    report = await verify_thread(fresh, "t")
    assert report.ok and [v.status for v in report.verdicts] == ["ok"] * 5
    loaded = await fresh.load("t", infos[2].checkpoint_id)
    assert loaded is not None and loaded.messages[-1].content == "turn 2"
    fresh._repaired.clear()  # a new instance's first touch: the missing envelope is written again
    await fresh.list_checkpoint_infos("t")
    assert (cp.thread_dir("t") / f"{infos[1].checkpoint_id}.json").exists()


async def test_metadata_edit_and_stripped_hash(tmp_path: Path) -> None:
    cp = MemoryCheckpointer()
    for i in range(3):
        await cp.save(_state(1), "t", metadata={"who": "agent", "i": i})
    infos = sorted(await cp.list_checkpoint_infos("t", 10), key=lambda i: i.created_at)

    def forge(info: CheckpointInfo) -> None:
        """Store ``info``'s (edited) save metadata as one with write access to the store would: the
        row's content digest recomputed (a digest is no signature; the hash chain is)."""
        cp.store.rewrite_sync("t", lambda _rows: Rewrite({info.checkpoint_id: info.metadata}))

    infos[0].metadata["who"] = "someone else"
    forge(infos[0])
    report = await verify_thread(cp, "t")
    assert report.first_failure is not None and report.first_failure.checkpoint_id == infos[0].checkpoint_id
    infos[0].metadata["who"] = "agent"
    forge(infos[0])
    for key in (HASH_KEY, PARENT_HASH_KEY, "tulip_nb_hash_alg"):
        infos[-1].metadata.pop(key)
    forge(infos[-1])
    report = await verify_thread(cp, "t")
    assert report.ok and report.counts() == {"ok": 2, "unsigned": 1}
    strict = await verify_thread(cp, "t", strict=True)
    assert not strict.ok and strict.first_failure.checkpoint_id == infos[-1].checkpoint_id  # type: ignore[union-attr]


async def test_tulip_threads_are_unsigned_not_failures(tmp_path: Path) -> None:
    from tulip.memory.backends.file import FileCheckpointer as TulipFile  # the peer, writing its own format

    from bench.workload import to_tulip_state

    theirs = TulipFile(str(tmp_path))
    for _ in range(2):
        await theirs.save(to_tulip_state(_state(1)), "t")
    ours = FileCheckpointer(tmp_path, layout="tulip", sign=True)
    assert (await verify_thread(ours, "t")).counts() == {"unsigned": 2}
    state = await ours.load("t")
    assert state is not None
    await ours.save(state, "t")  # tulip_nb continues the thread: signed from here on
    report = await verify_thread(ours, "t")
    assert report.ok and report.counts() == {"unsigned": 2, "ok": 1}


async def test_copy_and_export_keep_verifying(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path / "a", sign=True)
    for i in range(3):
        await cp.save(_state(i + 1), "src")
    await cp.copy_thread("src", "dst")
    assert (await verify_thread(cp, "dst")).counts() == {"ok": 3}
    other = MemoryCheckpointer()
    for info in sorted(await cp.list_checkpoint_infos("src", 10), key=lambda i: i.created_at):
        ck = await cp.load_checkpoint("src", info.checkpoint_id)
        assert ck is not None
        await other.put_checkpoint(ck)
    assert (await verify_thread(other, "src")).counts() == {"ok": 3}


async def test_jsonb_style_key_reordering_still_verifies() -> None:
    """PostgreSQL jsonb hands keys back in its own order: the hash is over sorted keys."""
    cp = MemoryCheckpointer()
    await cp.save(_state(2), "t", metadata={"z": 1, "a": {"d": 1, "c": 2}})
    ck = await cp.load_checkpoint("t")
    assert ck is not None

    def shuffled(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: shuffled(obj[k]) for k in sorted(obj, key=lambda k: (len(k), k), reverse=True)}
        if isinstance(obj, list):
            return [shuffled(v) for v in obj]
        return obj

    from tulip_nb.memory._envelope import state_from_obj

    raw = shuffled(orjson.loads(ck.state.to_json_bytes()))
    again = state_from_obj(raw, where="test")
    assert recompute_hash((again, shuffled(ck.metadata))) == ck.metadata[HASH_KEY]


@pytest.mark.parametrize("kind", ["memory", "file", "redis", "postgresql", "mysql", "s3"])
async def test_signing_is_per_checkpointer(kind: str, tmp_path: Path, session_redis: Any) -> None:
    """``sign=False`` turns signing off for that checkpointer only, not for others in the process."""
    url = session_redis.url
    async with backend(kind, tmp_path, url, sign=False) as off, backend(kind, tmp_path / "on", url) as on:
        assert off.sign is False and on.sign is True
        await off.save(_state(1), "t-off")
        await on.save(_state(1), "t-on")
        await off.save(_state(2), "t-off")
        await on.save(_state(2), "t-on")
        assert all(HASH_KEY not in i.metadata for i in await off.list_checkpoint_infos("t-off"))
        assert all(HASH_KEY in i.metadata for i in await on.list_checkpoint_infos("t-on"))
        assert {v.status for v in (await verify_thread(off, "t-off")).verdicts} == {"unsigned"}
        assert (await verify_thread(on, "t-on")).ok


async def test_unsigned_save_drops_caller_hash_keys() -> None:
    """A caller's stale hash keys are never stored by an unsigned checkpointer (they would lie)."""
    cp = MemoryCheckpointer(sign=False)
    await cp.save(_state(1), "t", metadata={HASH_KEY: "f" * 64, PARENT_HASH_KEY: None, "k": 1})
    (info,) = await cp.list_checkpoint_infos("t")
    assert HASH_KEY not in info.metadata and PARENT_HASH_KEY not in info.metadata
    assert info.metadata["k"] == 1


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=examples(0.6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    contents=st.lists(st.tuples(_text, st.dictionaries(_text, _json, max_size=3)), min_size=0, max_size=8),
    meta=st.dictionaries(_text, _json, max_size=4),
    cut=st.integers(0, 8),
)
async def test_incremental_digest_equals_from_scratch(contents: list[Any], meta: dict[str, Any], cut: int) -> None:
    msgs = [
        Message.assistant(c, [ToolCall(id=f"c{i}", name="t", arguments=args)]) if args else Message.user(c)
        for i, (c, args) in enumerate(contents)
    ]
    cache = MessageBlobCache()
    cache.digest("k", msgs[:cut])
    assert cache.digest("k", msgs) == messages_digest(msgs)
    cache.blob("k", msgs)
    assert cache.digest("k", msgs) == messages_digest(msgs)
    # round trip through a store: a fresh process verifies what this one signed
    cp = MemoryCheckpointer()
    meta = {k: v for k, v in meta.items() if k not in ("parent_checkpoint_id", "copied_from")}
    await cp.save(AgentState(messages=msgs, metadata=meta), "t", metadata=meta)
    ck = await cp.load_checkpoint("t")
    assert ck is not None
    from tulip_nb.memory._envelope import decode_envelope, encode_envelope

    again = decode_envelope(encode_envelope(ck.checkpoint_id, "t", ck.created_at, ck.state, ck.metadata), where="test")
    assert recompute_hash(again) == ck.metadata[HASH_KEY]
