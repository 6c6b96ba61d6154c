"""HTTPCheckpointer trusts only the protocol's answers, and ``timeout=`` bounds a whole call.

A 2xx that is not the protocol's receipt (HTML, empty, ``null``, ``{}``, truncated JSON, another id)
is ``BackendUnavailable`` naming the URL and what came back; a 200 ``{}`` / ``{"error": ...}`` is
never an empty state; an HTML 404 is not "no such checkpoint"; ``delete()`` is True only for
``{"deleted": true}``. The responses come from ``httpx.MockTransport``; the deadline is tested
against a real (tiny, asyncio) server that drips its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from tulip_nb.core import AgentState, BackendUnavailable, CheckpointNotFound, Message

httpx = pytest.importorskip("httpx")

BASE = "http://checkpoints.test"
HTML = b"<html><body>Welcome to the proxy</body></html>"
STATE = AgentState(messages=[Message.user("hello")])
PLAIN_404 = (404, "application/json", b'{"detail": "Not Found"}')  # what a plain server answers


def state_json() -> bytes:
    return STATE.to_json_bytes()


def reply(status: int, body: bytes | str | None, ctype: str = "application/json") -> httpx.Response:
    content = body.encode() if isinstance(body, str) else (body or b"")
    headers = {"content-type": ctype} if ctype else {}
    return httpx.Response(status, content=content, headers=headers)


Route = Callable[[httpx.Request], httpx.Response]


def checkpointer(routes: dict[tuple[str, str], Route | tuple[int, str, bytes | str]], **kwargs: Any) -> Any:
    """An HTTPCheckpointer over a MockTransport answering ``(method, path)`` from ``routes``; a plain
    (extension-less) server unless ``/capabilities`` is routed."""
    from tulip_nb.memory.backends import HTTPCheckpointer

    def handle(request: httpx.Request) -> httpx.Response:
        route = routes.get((request.method, request.url.path))
        if route is None:
            return reply(PLAIN_404[0], PLAIN_404[2], PLAIN_404[1])
        if callable(route):
            return route(request)
        status, ctype, body = route
        return reply(status, body, ctype)

    return HTTPCheckpointer(BASE, transport=httpx.MockTransport(handle), **kwargs)


def echo_receipt(request: httpx.Request) -> httpx.Response:
    """The protocol's receipt, as tulip_nb's checkpoint_app answers it."""
    sent = orjson.loads(request.content)
    return reply(201, orjson.dumps({"checkpoint_id": sent["checkpoint_id"], "thread_id": sent["thread_id"]}))


# -- save --------------------------------------------------------------------------------------------

BAD_RECEIPTS: dict[str, tuple[int, str, bytes | str, str]] = {
    # name: (status, content type, body, a piece of the error message)
    "html": (200, "text/html", HTML, "Welcome to the proxy"),
    "empty": (200, "application/json", b"", "an empty body"),
    "empty-204": (204, "", b"", "an empty body"),
    "null": (201, "application/json", b"null", "'null'"),
    "empty-object": (200, "application/json", b"{}", "'{}'"),
    "truncated": (200, "application/json", b'{"checkpoint_id": "c', '\'{"checkpoint_id": "c\''),
    "other-id": (201, "application/json", b'{"checkpoint_id": "someone-else"}', "someone-else"),
    "ok-without-id": (200, "application/json", b'{"ok": true}', "'{\"ok\": true}'"),
    "id-not-a-string": (200, "application/json", b'{"checkpoint_id": 1}', "checkpoint_id"),
}


@pytest.mark.parametrize("name", sorted(BAD_RECEIPTS))
async def test_save_without_the_protocols_receipt_is_not_acknowledged(name: str) -> None:
    status, ctype, body, shown = BAD_RECEIPTS[name]
    cp = checkpointer({("POST", "/threads/t/checkpoints"): (status, ctype, body)})
    try:
        with pytest.raises(BackendUnavailable) as err:
            await cp.save(STATE, "t", checkpoint_id="c1")
        message = str(err.value)
        assert f"{BASE}/threads/t/checkpoints" in message and f"HTTP {status}" in message
        assert shown in message and "not acknowledged" in message
        assert err.value.checkpoint_id == "c1"
    finally:
        await cp.close()


async def test_save_receipt_for_another_thread_is_not_acknowledged() -> None:
    def wrong_thread(request: httpx.Request) -> httpx.Response:
        sent = orjson.loads(request.content)
        return reply(201, orjson.dumps({"checkpoint_id": sent["checkpoint_id"], "thread_id": "other"}))

    cp = checkpointer({("POST", "/threads/t/checkpoints"): wrong_thread})
    try:
        with pytest.raises(BackendUnavailable, match="another thread"):
            await cp.save(STATE, "t")
    finally:
        await cp.close()


async def test_save_with_the_receipt_returns_the_id() -> None:
    bare = {("POST", "/threads/t/checkpoints"): (200, "application/json", '{"checkpoint_id": "c9"}')}
    for routes in ({("POST", "/threads/t/checkpoints"): echo_receipt}, bare):
        cp = checkpointer(routes)  # type: ignore[arg-type]
        try:
            assert await cp.save(STATE, "t", checkpoint_id="c9") == "c9"
        finally:
            await cp.close()


async def test_put_checkpoint_needs_the_receipt_too() -> None:
    from tulip_nb.core import utcnow
    from tulip_nb.memory.checkpointer import Checkpoint

    caps = (200, "application/json", b'{"capabilities": [], "extensions": 1}')
    ckpt = Checkpoint("c1", "t", utcnow(), STATE, {})
    cp = checkpointer({("GET", "/capabilities"): caps, ("POST", "/threads/t/checkpoints"): (200, "text/html", HTML)})
    try:
        with pytest.raises(BackendUnavailable, match="not acknowledged"):
            await cp.put_checkpoint(ckpt)
    finally:
        await cp.close()
    cp = checkpointer({("GET", "/capabilities"): caps, ("POST", "/threads/t/checkpoints"): echo_receipt})
    try:
        await cp.put_checkpoint(ckpt)
    finally:
        await cp.close()


# -- load --------------------------------------------------------------------------------------------

BAD_BODIES: dict[str, tuple[str, bytes, str]] = {
    "empty-object": ("application/json", b"{}", "not a checkpoint"),
    "error-object": ("application/json", b'{"error": "database unavailable"}', "database unavailable"),
    "html": ("text/html", HTML, "not a JSON object"),
    "empty": ("application/json", b"", "an empty body"),
    "null": ("application/json", b"null", "not a JSON object"),
    "list": ("application/json", b"[]", "not a JSON object"),
    "truncated": ("application/json", b'{"checkpoint_id": "c1", "state": {"mess', "not a JSON object"),
    "state-without-messages": ("application/json", b'{"checkpoint_id": "c1", "state": {}}', "not a checkpoint"),
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
async def test_load_of_a_body_that_is_not_a_checkpoint_is_an_outage(name: str) -> None:
    ctype, body, shown = BAD_BODIES[name]
    cp = checkpointer({("GET", "/threads/t/checkpoints/c1"): (200, ctype, body)})
    try:
        with pytest.raises(BackendUnavailable) as err:
            await cp.load("t", "c1")
        assert f"{BASE}/threads/t/checkpoints/c1" in str(err.value) and shown in str(err.value)
    finally:
        await cp.close()


async def test_load_of_another_checkpoints_envelope_is_an_outage() -> None:
    from tulip_nb.core import utcnow
    from tulip_nb.memory.envelope import encode_envelope

    other = encode_envelope("c2", "t", utcnow(), STATE, {})
    cp = checkpointer({("GET", "/threads/t/checkpoints/c1"): (200, "application/json", other)})
    try:
        with pytest.raises(BackendUnavailable, match="another checkpoint"):
            await cp.load("t", "c1")
    finally:
        await cp.close()


async def test_load_of_a_bare_state_or_an_envelope_works() -> None:
    from tulip_nb.core import utcnow
    from tulip_nb.memory.envelope import encode_envelope

    for body in (state_json(), encode_envelope("c1", "t", utcnow(), STATE, {"k": 1})):
        cp = checkpointer({("GET", "/threads/t/checkpoints/c1"): (200, "application/json", body)})
        try:
            loaded = await cp.load("t", "c1")
            assert loaded is not None and loaded.messages[0].content == "hello"
        finally:
            await cp.close()


LISTINGS_THAT_ARE_NOT: dict[str, tuple[int, str, bytes]] = {
    "empty-object": (200, "application/json", b"{}"),
    "error-object": (200, "application/json", b'{"error": "database unavailable"}'),
    "html": (200, "text/html", HTML),
    "empty": (200, "application/json", b""),
    "null": (200, "application/json", b"null"),
    "bad-entries": (200, "application/json", b'{"checkpoints": [{"id": "c1"}]}'),
    "html-404": (404, "text/html", HTML),
}


@pytest.mark.parametrize("name", sorted(LISTINGS_THAT_ARE_NOT))
async def test_latest_through_a_broken_listing_is_an_outage_not_an_empty_thread(name: str) -> None:
    cp = checkpointer({("GET", "/threads/t/checkpoints"): LISTINGS_THAT_ARE_NOT[name]})
    try:
        with pytest.raises(BackendUnavailable, match=f"{BASE}/threads/t/checkpoints"):
            await cp.load("t")
        with pytest.raises(BackendUnavailable):
            await cp.list_checkpoints("t")
    finally:
        await cp.close()


@pytest.mark.parametrize(
    "answer",
    [(200, "application/json", b"[]"), (200, "application/json", b'{"checkpoints": []}'), PLAIN_404],
    ids=["list", "wrapped", "json-404"],
)
async def test_the_protocols_empty_thread_is_none(answer: tuple[int, str, bytes]) -> None:
    cp = checkpointer({("GET", "/threads/t/checkpoints"): answer})
    try:
        assert await cp.load("t") is None
        assert await cp.list_checkpoints("t") == []
    finally:
        await cp.close()


EXTENSIONS = (200, "application/json", b'{"capabilities": [], "extensions": 1}')


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ((404, "application/json", b'{"error": "ThreadNotFound", "message": "no checkpoints"}'), None),
        ((404, "text/html", HTML), BackendUnavailable),
        ((200, "application/json", b"{}"), BackendUnavailable),
        ((200, "application/json", b'{"error": "database unavailable"}'), BackendUnavailable),
        ((200, "text/html", HTML), BackendUnavailable),
    ],
    ids=["thread-not-found", "html-404", "empty-object", "error-object", "html"],
)
async def test_latest_on_an_extension_server(answer: tuple[int, str, bytes], outcome: Any) -> None:
    cp = checkpointer({("GET", "/capabilities"): EXTENSIONS, ("GET", "/threads/t/latest"): answer})
    try:
        if outcome is None:
            assert await cp.load("t") is None
        else:
            with pytest.raises(outcome, match=f"{BASE}/threads/t/latest"):
                await cp.load("t")
    finally:
        await cp.close()


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (PLAIN_404, CheckpointNotFound),
        ((404, "application/json", b'{"error": "CheckpointNotFound", "message": "no"}'), CheckpointNotFound),
        ((404, "text/html", HTML), BackendUnavailable),
        ((404, "text/plain", b"404 page not found"), BackendUnavailable),
        # any JSON 404 is the protocol's answer (tulip's service says {"error": "Not found"}): only a
        # body that is not JSON is a proxy or a wrong base_url, and one naming another of our errors
        ((404, "application/json", b'{"error": "Not found"}'), CheckpointNotFound),
        ((404, "application/json", b'{"error": "CheckpointCorrupt", "message": "x"}'), BackendUnavailable),
    ],
    ids=["plain-json", "ours", "proxy-html", "proxy-text", "tulips-404", "another-error"],
)
async def test_only_the_protocols_404_is_not_found(answer: tuple[int, str, bytes], outcome: type) -> None:
    cp = checkpointer({("GET", "/threads/t/checkpoints/c1"): answer})
    try:
        with pytest.raises(outcome) as err:
            await cp.load("t", "c1")
        if outcome is BackendUnavailable:
            assert f"{BASE}/threads/t/checkpoints/c1" in str(err.value) and "HTTP 404" in str(err.value)
    finally:
        await cp.close()


# -- delete ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ((200, "application/json", b'{"deleted": true}'), True),
        ((200, "application/json", b'{"deleted": false}'), False),
        ((204, "", b""), True),
        (PLAIN_404, False),
        ((404, "application/json", b'{"error": "CheckpointNotFound", "message": "nothing to delete"}'), False),
        ((404, "application/json", b'{"error": "Not found"}'), False),
        ((200, "text/html", HTML), BackendUnavailable),
        ((200, "application/json", b"{}"), BackendUnavailable),
        ((200, "application/json", b""), BackendUnavailable),
        ((200, "application/json", b"null"), BackendUnavailable),
        ((202, "application/json", b'{"deleted": "yes"}'), BackendUnavailable),
        ((404, "text/html", HTML), BackendUnavailable),
    ],
    ids=[
        "deleted",
        "not-deleted",
        "204",
        "plain-404",
        "our-404",
        "tulips-404",
        "html",
        "empty-object",
        "empty",
        "null",
        "odd",
        "html-404",
    ],
)
async def test_delete_is_true_only_on_the_protocols_success(answer: tuple[int, str, bytes], outcome: Any) -> None:
    cp = checkpointer({("DELETE", "/threads/t/checkpoints/c1"): answer, ("DELETE", "/threads/t/checkpoints"): answer})
    try:
        for call in (lambda: cp.delete("t", "c1"), lambda: cp.delete("t")):
            if isinstance(outcome, bool):
                assert await call() is outcome
            else:
                with pytest.raises(BackendUnavailable, match=f"{BASE}/threads/t/checkpoints"):
                    await call()
    finally:
        await cp.close()


async def test_extension_answers_without_their_fields_are_an_outage() -> None:
    caps = (200, "application/json", b'{"capabilities": ["list_threads", "vacuum"], "extensions": 1}')
    cp = checkpointer(
        {
            ("GET", "/capabilities"): caps,
            ("GET", "/threads"): (200, "text/html", HTML),
            ("POST", "/vacuum"): (200, "application/json", b"{}"),
        }
    )
    try:
        with pytest.raises(BackendUnavailable, match=f"{BASE}/threads"):
            await cp.list_threads()
        with pytest.raises(BackendUnavailable, match="'removed'"):
            await cp.vacuum(1)
    finally:
        await cp.close()


# -- the deadline: a real server that drips ---------------------------------------------------------


@contextlib.asynccontextmanager
async def slow_server(answer: Callable[[str], Any]) -> AsyncIterator[str]:
    """A tiny HTTP/1.1 server: reads one request per connection, then runs ``answer(path)``, an
    async generator of ``(delay, bytes)`` pieces it writes one by one, then closes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            length = next((int(v) for k, _, v in (h.partition(":") for h in lines) if k.lower() == "content-length"), 0)
            if length:
                await reader.readexactly(length)
            async for delay, piece in answer(request_line.split(" ")[1]):
                await asyncio.sleep(delay)
                writer.write(piece)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


def head(length: int, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode()


async def test_a_dripping_server_cannot_stretch_the_timeout() -> None:
    """One byte every 0.5 s: httpx's per-read timeout (2 s) never fires; the call's deadline does."""
    from tulip_nb.memory.backends import HTTPCheckpointer

    body = orjson.dumps({"checkpoint_id": "c1", "thread_id": "t", "padding": "x" * 40})

    async def drip(path: str) -> AsyncIterator[tuple[float, bytes]]:
        yield 0.0, head(len(body))
        for i in range(len(body)):
            yield 0.5, body[i : i + 1]

    async with slow_server(drip) as url:
        cp = HTTPCheckpointer(url, timeout=2.0)
        try:
            for call in (lambda: cp.save(STATE, "t", checkpoint_id="c1"), lambda: cp.load("t", "c1")):
                started = time.monotonic()
                with pytest.raises(BackendUnavailable, match=r"timeout=2\.0s") as err:
                    await call()
                elapsed = time.monotonic() - started
                assert 1.9 <= elapsed < 3.5, elapsed
                assert url in str(err.value)
        finally:
            await cp.close()


async def test_the_deadline_covers_every_request_of_one_call() -> None:
    """A latest-load on a plain server is a listing plus a read: 1.2 s each, within timeout=2 per
    request, but not within 2 s for the call."""
    from tulip_nb.memory.backends import HTTPCheckpointer

    listing, state = b'["c1"]', state_json()

    async def answer(path: str) -> AsyncIterator[tuple[float, bytes]]:
        if path.startswith("/threads/t/checkpoints/c1"):
            yield 1.2, head(len(state)) + state
        elif path.startswith("/threads/t/checkpoints"):
            yield 1.2, head(len(listing)) + listing
        else:
            yield 0.0, head(2, "404 Not Found") + b"{}"

    async with slow_server(answer) as url:
        patient = HTTPCheckpointer(url, timeout=5.0)
        try:
            loaded = await patient.load("t")  # the server works
            assert loaded is not None and loaded.messages[0].content == "hello"
        finally:
            await patient.close()
        cp = HTTPCheckpointer(url, timeout=2.0)
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable, match="checkpoints/c1"):
                await cp.load("t")
            assert time.monotonic() - started < 2.6
            # each call has its own deadline: a single read still fits
            loaded = await cp.load("t", "c1")
            assert loaded is not None
        finally:
            await cp.close()
