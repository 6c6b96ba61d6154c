"""S3Backend beyond the conformance suite: races, outages, created_at ordering, lifecycle.

Runs against moto's S3 server over real HTTP (started by ``factories/remote.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tulip_nb.core import BackendUnavailable, CheckpointConflict, UserError
from tulip_nb.memory.checkpointer import BaseCheckpointer, caller_metadata
from tulip_nb.memory.rest_delta import unpack

from .conformance import full_state
from .factories.remote import S3_CREDENTIALS, free_port, moto_endpoint, new_bucket

pytestmark = pytest.mark.service("s3")  # moto's S3 server, started by the tests


def _backend(bucket: str, **kwargs: Any) -> Any:
    from tulip_nb.memory.backends._s3 import S3Backend

    return S3Backend(bucket, endpoint_url=moto_endpoint(), **S3_CREDENTIALS, **kwargs)


@pytest.fixture
async def bucket() -> str:
    return new_bucket()


@pytest.fixture
async def s3(bucket: str) -> AsyncIterator[Any]:
    cp = _backend(bucket)
    yield cp
    await cp.close()


@pytest.fixture
async def raw(bucket: str, s3: Any) -> Any:
    """A plain boto3 client on the same bucket (created by a first save)."""
    return s3._io.client


def keys(raw: Any, bucket: str, prefix: str = "tulip/checkpoints/") -> list[str]:
    """The keys under ``prefix`` (tulip's objects by default; the history lies beside them)."""
    return sorted(o["Key"] for o in raw.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


async def test_layout_is_tulips(s3: Any, raw: Any, bucket: str) -> None:
    cid = await s3.save(full_state(), "user/42:chat #1", metadata={"k": 1})
    base = "tulip/checkpoints/user/42:chat #1/"
    assert set(keys(raw, bucket)) == {f"{base}{cid}.json", f"{base}{cid}.meta.json", f"{base}_latest"}
    latest = raw.get_object(Bucket=bucket, Key=f"{base}_latest")
    assert latest["ContentType"] == "text/plain" and latest["Body"].read() == cid.encode()
    body = raw.get_object(Bucket=bucket, Key=f"{base}{cid}.json")
    assert body["ContentType"] == "application/json"
    env = orjson.loads(body["Body"].read())
    assert list(env) == ["checkpoint_id", "thread_id", "created_at", "state"]
    assert env["thread_id"] == "user/42:chat #1" and env["created_at"].endswith("+00:00")
    meta = orjson.loads(raw.get_object(Bucket=bucket, Key=f"{base}{cid}.meta.json")["Body"].read())
    assert list(meta) == ["checkpoint_id", "thread_id", "created_at", "metadata"]
    assert caller_metadata(meta["metadata"]) == {"k": 1, "parent_checkpoint_id": None}


async def test_fifty_concurrent_saves_to_distinct_threads_lose_nothing(s3: Any) -> None:
    tids = [f"worker/{i}" for i in range(50)]
    cids = await asyncio.gather(*(s3.save(full_state(marker=t), t) for t in tids))
    assert await s3.list_threads(limit=1000) == sorted(tids)
    for tid, cid in zip(tids, cids, strict=True):
        assert await s3.list_checkpoints(tid) == [cid]
        loaded = await s3.load(tid)
        assert loaded is not None and loaded.messages[1].content == f"question 0 {tid}"


async def test_two_processes_compare_and_swap_one_conflict(bucket: str, raw: Any) -> None:
    """Two backends (no shared in-process lock): S3's If-Match on _latest picks one winner."""
    a, b = _backend(bucket), _backend(bucket)
    try:
        base = await a.save(full_state(), "race")
        results = await asyncio.gather(
            a.save(full_state(marker="a"), "race", expected_parent=base),
            b.save(full_state(marker="b"), "race", expected_parent=base),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, str)]
        losers = [r for r in results if isinstance(r, CheckpointConflict)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert losers[0].actual == winners[0]
        # the loser cleaned up: no orphan checkpoint looks like part of the thread, no orphan object
        assert await a.list_checkpoints("race") == [winners[0], base]
        base_dir = "tulip/checkpoints/race/"
        assert set(keys(raw, bucket)) == {f"{base_dir}{w}{s}" for w in winners for s in (".json", ".meta.json")} | {
            f"{base_dir}_latest"
        }
        history = keys(raw, bucket, "tulip/checkpoints.history/")
        heads = [k for k in history if "/h/" in k]
        named = b"".join(unpack(raw.get_object(Bucket=bucket, Key=k)["Body"].read()) for k in heads)
        assert len(heads) == 1 and all(k.encode() in named for k in history if k not in heads), history
    finally:
        await a.close()
        await b.close()


async def test_two_processes_plain_saves_never_fork_the_lineage(bucket: str) -> None:
    a, b = _backend(bucket), _backend(bucket)
    try:
        await asyncio.gather(*(cp.save(full_state(marker=str(i)), "shared") for i in range(6) for cp in (a, b)))
        infos = await a.list_checkpoint_infos("shared", limit=100)
        assert len(infos) == 12
        assert [i.parent_checkpoint_id for i in infos] == [i.checkpoint_id for i in infos[1:]] + [None]
        assert (await b.load_checkpoint("shared")).checkpoint_id == infos[0].checkpoint_id  # type: ignore[union-attr]
    finally:
        await a.close()
        await b.close()


async def test_latest_follows_created_at_not_last_modified(raw: Any, bucket: str) -> None:
    s3 = _backend(bucket, layout="tulip")  # every checkpoint projected: tulip's whole layout
    a = await s3.save(full_state(marker="a"), "t")
    b = await s3.save(full_state(marker="b"), "t")
    c = await s3.save(full_state(marker="c"), "t")
    # touch a: now it has the newest LastModified (what tulip re-points by)
    key = f"tulip/checkpoints/t/{a}.json"
    raw.put_object(Bucket=bucket, Key=key, Body=raw.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert await s3.delete("t", c)
    assert await s3.list_checkpoints("t") == [b, a]
    assert raw.get_object(Bucket=bucket, Key="tulip/checkpoints/t/_latest")["Body"].read() == b.encode()
    loaded = await s3.load("t")
    assert loaded is not None and loaded.messages[1].content == "question 0 b"
    await s3.close()


async def test_a_stale_pointer_written_by_tulip_loses_to_created_at(s3: Any, raw: Any, bucket: str) -> None:
    a = await s3.save(full_state(marker="a"), "t")
    b = await s3.save(full_state(marker="b"), "t")
    # tulip re-points _latest by LastModified (1 s resolution) and stamps nothing: it can name ``a``
    raw.put_object(Bucket=bucket, Key="tulip/checkpoints/t/_latest", Body=a.encode(), ContentType="text/plain")
    fresh = _backend(bucket)
    try:
        assert (await fresh.load("t")).messages[1].content == "question 0 b"  # type: ignore[union-attr]
        ckpt = await fresh.load_checkpoint("t")
        assert ckpt is not None and ckpt.checkpoint_id == b
    finally:
        await fresh.close()


async def test_a_lost_projection_is_written_again_from_the_history(s3: Any, raw: Any, bucket: str) -> None:
    """tulip's objects are a projection: the history keeps the thread when they expire (a lifecycle
    rule) or a crash loses them, and the next instance to touch the thread writes them again."""
    await s3.save(full_state(marker="a"), "t")
    b = await s3.save(full_state(marker="b"), "t")
    raw.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": f"tulip/checkpoints/t/{n}"} for n in (f"{b}.json", f"{b}.meta.json", "_latest")]},
    )  # e.g. expired
    fresh = _backend(bucket)
    try:
        ckpt = await fresh.load_checkpoint("t")
        assert ckpt is not None and ckpt.checkpoint_id == b
        assert set(keys(raw, bucket)) == {
            f"tulip/checkpoints/t/{n}" for n in (f"{b}.json", f"{b}.meta.json", "_latest")
        }
        assert raw.get_object(Bucket=bucket, Key="tulip/checkpoints/t/_latest")["Body"].read() == b.encode()
        assert await fresh.check_mirror("t") == []
    finally:
        await fresh.close()


async def test_list_threads_whole_ids_and_pattern(s3: Any) -> None:
    for tid in ["a", "a/b", "a/b/c", "tenant:1/x", "z"]:
        await s3.save(full_state(), tid)
    assert await s3.list_threads() == ["a", "a/b", "a/b/c", "tenant:1/x", "z"]
    assert await s3.list_threads(pattern="a/*") == ["a/b", "a/b/c"]
    assert await s3.list_threads(pattern="tenant:?/*") == ["tenant:1/x"]
    assert await s3.delete("a")  # only "a", not the threads below it
    assert await s3.list_threads() == ["a/b", "a/b/c", "tenant:1/x", "z"]


async def test_copy_rewrites_thread_id(s3: Any, raw: Any, bucket: str) -> None:
    cid = await s3.save(full_state(), "src")
    await s3.copy_thread("src", "dst/1")
    env = orjson.loads(raw.get_object(Bucket=bucket, Key=f"tulip/checkpoints/dst/1/{cid}.json")["Body"].read())
    assert env["thread_id"] == "dst/1"
    meta = orjson.loads(raw.get_object(Bucket=bucket, Key=f"tulip/checkpoints/dst/1/{cid}.meta.json")["Body"].read())
    assert meta["thread_id"] == "dst/1" and meta["metadata"]["copied_from"]["thread_id"] == "src"


async def test_outage_raises_backend_unavailable() -> None:
    from tulip_nb.memory.backends._s3 import S3Backend

    cp = S3Backend(
        "nobucket", endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1, connect_timeout=1, **S3_CREDENTIALS
    )
    try:
        for call in (cp.load("t"), cp.list_checkpoints("t"), cp.save(full_state(), "t"), cp.list_threads()):
            with pytest.raises(BackendUnavailable, match="S3Backend") as err:
                await call
            assert err.value.path is not None and err.value.path.startswith("s3://nobucket")
    finally:
        await cp.close()


async def test_missing_bucket_is_an_error_not_an_empty_thread() -> None:
    cp = _backend(new_bucket(), create_bucket=False)
    try:
        with pytest.raises(BackendUnavailable, match="NoSuchBucket"):
            await cp.load("t")
    finally:
        await cp.close()


async def test_configure_lifecycle(s3: Any, raw: Any, bucket: str) -> None:
    await s3.save(full_state(), "t")
    raw.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [{"ID": "other", "Filter": {"Prefix": "logs/"}, "Status": "Enabled", "Expiration": {"Days": 7}}]
        },
    )
    rule = await s3.configure_lifecycle(days_until_archive=30, days_until_delete=365)
    rules = {r["ID"]: r for r in raw.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]}
    assert set(rules) == {"other", "tulip_nb:tulip/checkpoints/"}
    mine = rules["tulip_nb:tulip/checkpoints/"]
    assert mine["Filter"]["Prefix"] == "tulip/checkpoints/" and mine["Status"] == "Enabled"
    assert mine["Transitions"][0]["Days"] == 30 and mine["Transitions"][0]["StorageClass"] == "GLACIER"
    assert mine["Expiration"]["Days"] == 365 and rule is not None and rule["ID"] == mine["ID"]
    await s3.configure_lifecycle(days_until_delete=90)  # replaces, never duplicates
    rules = {r["ID"]: r for r in raw.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]}
    assert rules["tulip_nb:tulip/checkpoints/"]["Expiration"]["Days"] == 90
    assert "Transitions" not in rules["tulip_nb:tulip/checkpoints/"]
    assert await s3.configure_lifecycle() is None
    assert [r["ID"] for r in raw.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]] == ["other"]
    with pytest.raises(UserError):
        await s3.configure_lifecycle(days_until_archive=30, days_until_delete=10)
    with pytest.raises(UserError):
        await s3.configure_lifecycle(days_until_delete=0)


async def test_s3_checkpointer_returns_the_backend_unchanged(bucket: str) -> None:
    from tulip_nb.memory.backends import S3Backend, s3_checkpointer

    cp = s3_checkpointer(bucket, prefix="p", endpoint_url=moto_endpoint(), **S3_CREDENTIALS)
    try:
        assert type(cp) is S3Backend and isinstance(cp, BaseCheckpointer) and cp.prefix == "p/"
        assert cp.capabilities.persistent_checkpoint_ids and cp.capabilities.branching
    finally:
        await cp.close()


async def test_two_processes_leave_tulip_the_newest_turn_end(bucket: str, raw: Any) -> None:
    """The projection is written after each commit, by whichever process saved; each re-checks it
    against the history afterwards, so tulip ends up shown the newest turn end, once."""
    a, b = _backend(bucket), _backend(bucket)
    try:
        await asyncio.gather(*(cp.save(full_state(marker=str(i)), "shared") for i in range(5) for cp in (a, b)))
        fresh = _backend(bucket)
        try:
            assert await fresh.check_mirror("shared") == []
            newest = (await fresh.list_checkpoint_infos("shared", 1))[0].checkpoint_id
            base = "tulip/checkpoints/shared/"
            assert set(keys(raw, bucket)) == {f"{base}{newest}.json", f"{base}{newest}.meta.json", f"{base}_latest"}
            assert await fresh.check_store() == []
        finally:
            await fresh.close()
    finally:
        await a.close()
        await b.close()
