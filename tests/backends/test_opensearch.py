"""OpenSearchBackend on the osmem-server emulator: concurrency, CAS across clients, layout, outages.

The whole conformance suite also runs on it (factory ``opensearch`` in factories/opensearch.py).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
import pytest

from tulip_nb.core import BackendUnavailable, CheckpointConflict
from tulip_nb.memory.backends._adapters import StorageBackendAdapter

from .conformance import full_state
from .factories.opensearch import drop_index, new_index, opensearch_url, start_emulator, stop_emulator

pytestmark = pytest.mark.service("opensearch")

Maker = Callable[[], StorageBackendAdapter]


@pytest.fixture
async def env() -> AsyncIterator[tuple[str, str, Maker]]:
    """(emulator URL, a fresh index name, a maker of independent clients on that index)."""
    from tulip_nb.memory.backends import opensearch_checkpointer

    url, index = opensearch_url(), new_index()
    made: list[StorageBackendAdapter] = []

    def maker() -> StorageBackendAdapter:
        made.append(opensearch_checkpointer(hosts=[url], index_name=index))
        return made[-1]

    try:
        yield url, index, maker
    finally:
        for cp in made:
            await cp.close()
        await drop_index(url, index)


async def raw_docs(url: str, index: str, prefix: str) -> dict[str, dict[str, Any]]:
    """Every document whose ``thread_id`` starts with ``prefix``: ``_id`` -> hit (with ``_source``)."""
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(hosts=[url])
    try:
        resp = await client.search(
            index=index,
            body={
                "size": 1000,
                "version": True,
                "seq_no_primary_term": True,
                "query": {"prefix": {"thread_id": prefix}},
            },
        )
    finally:
        await client.close()
    return {h["_id"]: h for h in resp["hits"]["hits"]}


async def test_fifty_concurrent_saves_to_distinct_threads_lose_nothing(env: Any) -> None:
    _, _, maker = env
    clients = [maker() for _ in range(5)]
    saved = await asyncio.gather(
        *(clients[i % 5].save(full_state(n_turns=1, marker=f"m{i}"), f"t{i}") for i in range(50))
    )
    reader = maker()
    assert sorted(await reader.list_threads(limit=1000)) == sorted(f"t{i}" for i in range(50))
    for i, cid in enumerate(saved):
        assert await reader.list_checkpoints(f"t{i}") == [cid]
        state = await reader.load(f"t{i}")
        assert state is not None and state.messages[1].content == f"question 0 m{i}"


async def test_two_writers_with_expected_parent_one_conflict_and_no_orphan(env: Any) -> None:
    url, index, maker = env
    a, b = maker(), maker()  # two clients, two connection pools: like two processes
    base = await a.save(full_state(), "shared")
    results = await asyncio.gather(
        a.save(full_state(marker="A"), "shared", expected_parent=base),
        b.save(full_state(marker="B"), "shared", expected_parent=base),
        return_exceptions=True,
    )
    wins = [r for r in results if isinstance(r, str)]
    losses = [r for r in results if isinstance(r, CheckpointConflict)]
    assert len(wins) == 1 and len(losses) == 1
    assert losses[0].actual == wins[0]
    assert await b.list_checkpoints("shared") == [wins[0], base]
    assert await b.latest_checkpoint_id("shared") == wins[0]
    loaded = await b.load("shared")
    winner_marker = "A" if isinstance(results[0], str) else "B"
    assert loaded is not None and loaded.messages[1].content == f"question 0 {winner_marker}"
    # the loser's record, written before its swap failed, was removed again
    ids = set(await raw_docs(url, index, "shared:"))
    assert ids == {f"shared:{base}", f"shared:{wins[0]}", "shared:latest", "shared:_checkpoints"}


async def test_racing_saves_keep_latest_in_step_with_the_index(env: Any) -> None:
    url, index, maker = env
    clients = [maker() for _ in range(4)]
    await asyncio.gather(*(clients[i % 4].save(full_state(marker=str(i)), "hot") for i in range(24)))
    newest = await clients[0].latest_checkpoint_id("hot")
    ckpt = await clients[1].load_checkpoint("hot")
    assert ckpt is not None and ckpt.checkpoint_id == newest
    docs = await raw_docs(url, index, "hot:")
    # :latest carries the index document's seq_no as its (external) version
    assert docs["hot:latest"]["_version"] == docs["hot:_checkpoints"]["_seq_no"]
    assert len(await clients[2].list_checkpoints("hot", limit=100)) == 24


async def test_document_shape_is_tulips(env: Any) -> None:
    url, index, maker = env
    cp = maker()
    cid = await cp.save(full_state(), "doc", metadata={"step": 1})
    docs = await raw_docs(url, index, "doc:")
    record = docs[f"doc:{cid}"]["_source"]
    assert record["thread_id"] == f"doc:{cid}"
    assert record["data"]["_checkpoint_id"] == cid and record["data"]["_metadata"]["step"] == 1
    assert orjson.loads(record["data_json"]) == record["data"]
    assert record["metadata"]["step"] == 1 and record["kv_kind"] == "record"
    assert "step=1" in record["meta_terms"] and "message_text" not in record
    latest = docs["doc:latest"]["_source"]
    assert latest["kv_kind"] == "latest" and "question 0 m" in latest["message_text"]
    index_doc = docs["doc:_checkpoints"]["_source"]
    assert [e["checkpoint_id"] for e in index_doc["data"]["checkpoints"]] == [cid]
    assert latest["data"] == record["data"]


async def test_keys_over_512_bytes_get_a_hashed_id(env: Any) -> None:
    from tulip_nb.memory.backends._opensearch import document_id

    url, index, maker = env
    cp = maker()
    tid = "é" * 300  # 600 bytes
    cid = await cp.save(full_state(), tid)
    assert await cp.list_checkpoints(tid) == [cid]
    docs = await raw_docs(url, index, tid)
    assert document_id(f"{tid}:{cid}") in docs and all(len(i.encode()) <= 512 for i in docs)
    assert document_id("#h:x") != "#h:x"  # a real key can never collide with a hashed id


async def test_storage_backend_save_refuses_a_state(env: Any) -> None:
    from tulip_nb.memory.backends import OpenSearchBackend

    url, index, _ = env
    backend = OpenSearchBackend(hosts=[url], index_name=index)
    try:
        with pytest.raises(TypeError, match="_checkpointer"):
            await backend.save(full_state(), "t")  # type: ignore[arg-type]
        await backend.save("..", {"a": 1})  # ids travel in request bodies: no URL normalisation
        assert await backend.load("..") == {"a": 1}
        assert await backend.delete("..") and not await backend.exists("..")
    finally:
        await backend.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_server_raises_backend_unavailable() -> None:
    opensearch_url()  # skip like the others when the client libraries are missing
    from tulip_nb.memory.backends import opensearch_checkpointer

    cp = opensearch_checkpointer(hosts=[f"http://127.0.0.1:{closed_port()}"], index_name="tnb-down", timeout=2)
    try:
        with pytest.raises(BackendUnavailable, match="OpenSearch"):
            await cp.load("t")
        with pytest.raises(BackendUnavailable, match="OpenSearch"):
            await cp.save(full_state(), "t")
        with pytest.raises(BackendUnavailable, match="OpenSearch"):
            await cp.list_threads()
    finally:
        await cp.close()


@pytest.fixture
def private_emulator() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """An emulator of this test's own, to stop mid-run."""
    opensearch_url()  # skip like the others when a package is missing
    proc, url = start_emulator()
    try:
        yield proc, url
    finally:
        stop_emulator(proc)


async def test_server_stopped_mid_run_raises_instead_of_an_empty_thread(private_emulator: Any) -> None:
    from tulip_nb.memory.backends import opensearch_checkpointer

    proc, url = private_emulator
    cp = opensearch_checkpointer(hosts=[url], index_name="tnb-midrun")
    try:
        await cp.save(full_state(), "t")
        assert await cp.load("t") is not None
        stop_emulator(proc)
        with pytest.raises(BackendUnavailable, match="OpenSearch"):
            await cp.load("t")
        with pytest.raises(BackendUnavailable, match="OpenSearch"):
            await cp.save(full_state(), "t")
    finally:
        await cp.close()
