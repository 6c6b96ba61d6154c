"""HTTPCheckpointer against checkpoint_app under uvicorn on loopback: real HTTP, real races."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

from tulip_nb.core import BackendUnavailable, CapabilityNotSupported, CheckpointConflict, CheckpointNotFound
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer

from .conformance import full_state
from .factories.remote import S3_CREDENTIALS, free_port, serve_app, skip_without

pytestmark = pytest.mark.service("http")  # checkpoint_app under uvicorn, started by the tests


@pytest.fixture
def server(tmp_path: Any) -> Iterator[tuple[str, FileCheckpointer]]:
    skip_without("uvicorn", "starlette", "httpx", extra="server")
    from tulip_nb.server import checkpoint_app

    store = FileCheckpointer(tmp_path / "threads")
    with serve_app(checkpoint_app(store)) as url:
        yield url, store


@pytest.fixture
async def client(server: tuple[str, FileCheckpointer]) -> AsyncIterator[Any]:
    from tulip_nb.memory.backends import HTTPCheckpointer

    async with HTTPCheckpointer(server[0]) as cp:
        yield cp


async def test_ids_travel_as_one_percent_encoded_segment(client: Any, server: Any) -> None:
    import httpx

    tid = "a/b?c#d %2F ünï"
    cid = await client.save(full_state(), tid)
    async with httpx.AsyncClient(base_url=server[0]) as raw:
        from urllib.parse import quote

        listed = (await raw.get(f"/threads/{quote(tid, safe='')}/checkpoints")).json()
        assert [c["checkpoint_id"] for c in listed["checkpoints"]] == [cid]
        env = (await raw.get(f"/threads/{quote(tid, safe='')}/checkpoints/{cid}")).json()
        assert list(env)[:3] == ["checkpoint_id", "thread_id", "created_at"] and env["thread_id"] == tid
    assert await server[1].list_threads() == [tid]  # stored under the decoded id


async def test_fifty_concurrent_saves_to_distinct_threads_lose_nothing(client: Any) -> None:
    tids = [f"w/{i}" for i in range(50)]
    cids = await asyncio.gather(*(client.save(full_state(n_turns=1, marker=t), t) for t in tids))
    assert await client.list_threads(limit=1000) == sorted(tids)
    for tid, cid in zip(tids, cids, strict=True):
        assert await client.list_checkpoints(tid) == [cid]


async def test_two_clients_compare_and_swap_one_conflict(server: Any) -> None:
    from tulip_nb.memory.backends import HTTPCheckpointer

    async with HTTPCheckpointer(server[0]) as a, HTTPCheckpointer(server[0]) as b:
        base = await a.save(full_state(), "race")
        results = await asyncio.gather(
            *(cp.save(full_state(marker=str(i)), "race", expected_parent=base) for i, cp in enumerate([a, b] * 3)),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, str)]
        assert len(winners) == 1, results
        conflicts = [r for r in results if isinstance(r, CheckpointConflict)]
        assert len(conflicts) == 5 and all(c.actual == winners[0] for c in conflicts)
        assert await b.list_checkpoints("race") == [winners[0], base]
        with pytest.raises(CheckpointConflict):
            await a.save(full_state(), "race", expected_parent="")


async def test_outage_raises_instead_of_looking_empty() -> None:
    from tulip_nb.memory.backends import HTTPCheckpointer

    cp = HTTPCheckpointer(f"http://127.0.0.1:{free_port()}", timeout=2)
    try:
        for call in (cp.load("t"), cp.list_checkpoints("t"), cp.save(full_state(), "t"), cp.load("t", "c1")):
            with pytest.raises(BackendUnavailable, match="HTTPCheckpointer"):
                await call
        assert not await cp.health_check()
    finally:
        await cp.close()


async def test_store_outage_behind_the_server_names_the_backend() -> None:
    """checkpoint_app over an S3Backend whose endpoint is down: 503, then BackendUnavailable."""
    skip_without("boto3", extra="s3")
    from tulip_nb.memory.backends import HTTPCheckpointer, S3Backend
    from tulip_nb.server import checkpoint_app

    dead = S3Backend("nobucket", endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1, **S3_CREDENTIALS)
    with serve_app(checkpoint_app(dead)) as url:
        async with HTTPCheckpointer(url) as cp:
            with pytest.raises(BackendUnavailable, match=r"503.*S3Backend"):
                await cp.load("t")
            with pytest.raises(BackendUnavailable, match="S3Backend"):
                await cp.list_checkpoints("t")
    await dead.close()


async def test_capabilities_mirror_the_served_checkpointer(server: Any) -> None:
    from tulip_nb.memory.backends import HTTPCheckpointer

    async with HTTPCheckpointer(server[0]) as cp:
        assert cp.capabilities == FileCheckpointer(".").capabilities
    plain = MemoryCheckpointer()
    from tulip_nb.server import checkpoint_app

    with serve_app(checkpoint_app(plain)) as url:
        async with HTTPCheckpointer(url) as cp:
            assert not cp.capabilities.persistent_checkpoint_ids and cp.capabilities.search


async def test_plain_tulip_protocol_server_has_no_extensions() -> None:
    """Against a server with only tulip's routes, the optional operations are honestly off."""
    skip_without("starlette", "uvicorn", "httpx", extra="server")
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tulip_nb.memory.backends import HTTPCheckpointer

    saved: dict[str, Any] = {}

    async def post(request: Request) -> JSONResponse:
        body = orjson.loads(await request.body())
        saved[body["checkpoint_id"]] = body
        return JSONResponse({"checkpoint_id": body["checkpoint_id"]}, 201)

    async def listing(request: Request) -> JSONResponse:
        return JSONResponse(list(saved)[::-1])

    async def get(request: Request) -> JSONResponse:
        cid = request.path_params["cid"]
        if cid not in saved:
            return JSONResponse({"detail": "nope"}, 404)
        return JSONResponse(saved[cid]["state"])  # a bare state, as the protocol allows

    app = Starlette(
        routes=[
            Route("/threads/{tid}/checkpoints", post, methods=["POST"]),
            Route("/threads/{tid}/checkpoints", listing, methods=["GET"]),
            Route("/threads/{tid}/checkpoints/{cid}", get, methods=["GET"]),
        ]
    )
    with serve_app(app) as url:
        async with HTTPCheckpointer(url) as cp:
            assert cp.capabilities.enabled() == []
            cid = await cp.save(full_state(), "t")
            loaded = await cp.load("t")
            assert loaded is not None and loaded.model_dump(mode="json") == full_state().model_dump(mode="json")
            assert await cp.list_checkpoints("t") == [cid]
            with pytest.raises(CheckpointNotFound):
                await cp.load("t", "missing")
            with pytest.raises(CapabilityNotSupported):
                await cp.list_threads()
            with pytest.raises(CapabilityNotSupported):
                await cp.save(full_state(), "t", expected_parent=cid)


async def test_delete_of_a_missing_checkpoint_is_false_on_any_json_404_and_an_outage_on_html() -> None:
    """tulip's checkpoint service answers a missing checkpoint with ``{"error": "Not found"}``: that is
    "nothing to delete" (False). A 404 that is not JSON (a proxy, a wrong base_url) is an outage, and a
    JSON 404 naming another of our errors is not read as "absent"."""
    skip_without("starlette", "uvicorn", "httpx", extra="server")
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    from tulip_nb.core.errors import BackendUnavailable
    from tulip_nb.memory.backends import HTTPCheckpointer

    async def delete(request: Request) -> Response:
        cid = request.path_params["cid"]
        if cid == "html":
            return HTMLResponse("<h1>Not Found</h1>", 404)
        if cid == "invalid":
            return JSONResponse({"error": "InvalidThreadId", "message": "bad id"}, 404)
        return JSONResponse({"error": "Not found"}, 404)

    app = Starlette(routes=[Route("/threads/{tid}/checkpoints/{cid}", delete, methods=["DELETE"])])
    with serve_app(app) as url:
        async with HTTPCheckpointer(url) as cp:
            assert await cp.delete("thread1", "nonexistent") is False
            with pytest.raises(BackendUnavailable, match="not the protocol's not-found"):
                await cp.delete("thread1", "html")
            with pytest.raises(BackendUnavailable):
                await cp.delete("thread1", "invalid")
