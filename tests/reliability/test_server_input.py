"""Refused input: store URLs that are no URL, request targets that are not UTF-8, slow clients, leaked ids.

The command line is run as a real subprocess and the slow-client bounds against a real ``tulip-nb
serve`` (uvicorn) with a raw socket, since only a real server has connections to hold open.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.server._proc import serve
from tests.server.conftest import make_agent
from tulip_nb.core import AgentState, Message
from tulip_nb.core.principals import principal_for_api_key
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.server import AgentServer, checkpoint_app


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TULIP_NB_SERVER_API_KEY", raising=False)


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tulip_nb.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def fill(base: Path) -> None:
    asyncio.run(FileCheckpointer(base).save(AgentState(messages=[Message.user("hi")]), "t1"))


# -- URLs on the command line ---------------------------------------------------------------------
@pytest.mark.parametrize("dest", ["redis:127.0.0.1:6379", "postgres:/127.0.0.1/test", "127.0.0.1:6379", "rediss:h"])
def test_export_to_a_non_url_fails_and_creates_nothing(dest: str, tmp_path: Path) -> None:
    fill(tmp_path / "threads")
    r = cli("export", "file:./threads", dest, "--no-progress", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert repr(dest) in r.stderr and "redis://" in r.stderr and "postgresql://" in r.stderr
    assert r.stderr.count("\n") == 1  # one line, no traceback
    assert sorted(p.name for p in tmp_path.iterdir()) == ["threads"]  # no folder named after a server


def test_export_from_a_missing_directory_fails(tmp_path: Path) -> None:
    r = cli("export", f"file:{tmp_path / 'none'}", str(tmp_path / "dst"), "--no-progress")
    assert r.returncode == 2 and "no such directory" in r.stderr and str(tmp_path / "none") in r.stderr
    assert not (tmp_path / "dst").exists()


def test_threads_ls_on_a_missing_directory_fails(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    for url in (f"file:{missing}", str(missing), f"file://{missing}"):
        r = cli("threads", "ls", url)
        assert r.returncode == 2 and str(missing) in r.stderr, (url, r.stderr)
    r = cli("threads", "ls", "nonexistent", cwd=tmp_path)  # a bare relative name: not a path unless it exists
    assert r.returncode == 2 and "'nonexistent'" in r.stderr
    for command in (("threads", "show", str(missing), "t1"), ("diff", str(missing), "a", "b")):
        assert cli(*command).returncode == 2
    assert not missing.exists()


def test_a_bare_existing_relative_directory_still_works(tmp_path: Path) -> None:
    fill(tmp_path / "demo_threads")
    for url in ("demo_threads", "./demo_threads", "file:demo_threads"):
        r = cli("threads", "ls", url, cwd=tmp_path)
        assert r.returncode == 0 and r.stdout.split() == ["t1"], (url, r.stderr)
    r = cli("export", "demo_threads", "./copy", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert cli("threads", "ls", "copy", cwd=tmp_path).stdout.split() == ["t1"]


def test_serve_refuses_a_non_url_checkpointer() -> None:
    r = cli("serve", "--app", "tests.server.served_agent:agent", "--checkpointer", "redis:127.0.0.1:6379")
    assert r.returncode == 2 and "lacks '//'" in r.stderr


# -- request targets that are not UTF-8 -----------------------------------------------------------
BAD_TARGETS = [
    ("GET", "/threads/%FF"),
    ("DELETE", "/threads/%C3"),
    ("GET", "/threads/%FF/checkpoints"),
    ("GET", "/threads/ok/checkpoints/%FE%FF"),
    ("GET", "/threads?pattern=%FF"),
    ("GET", "/search?q=caf%C3"),
    ("GET", "/threads/ok?x%FF=1"),
    ("POST", "/invoke?x=%80"),
]


@pytest.mark.parametrize(("method", "target"), BAD_TARGETS)
async def test_invalid_utf8_in_path_or_query_is_400(
    method: str, target: str, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    r = await client.request(method, target, json={"prompt": "hi"} if method == "POST" else None)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "BadRequest" and "UTF-8" in r.json()["message"]
    assert "correlation_id" not in r.json() and not caplog.records  # a client error, not a logged failure


async def test_valid_utf8_ids_still_work(client: httpx.AsyncClient) -> None:
    assert (await client.post("/invoke", json={"prompt": "hi", "thread_id": "café"})).status_code == 200
    r = await client.get("/threads/caf%C3%A9")
    assert r.status_code == 200 and r.json()["thread_id"] == "café"
    assert (await client.get("/threads?pattern=caf%C3%A9")).json() == {"threads": ["café"]}


async def test_the_checkpoint_app_alone_answers_400_too() -> None:
    app = checkpoint_app(MemoryCheckpointer())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        for target in ("/threads/%FF/checkpoints", "/threads?pattern=%FF", "/threads/%FF/latest"):
            r = await c.get(target)
            assert r.status_code == 400 and r.json()["error"] == "BadRequest", (target, r.text)


# -- the storage id never leaves the server -------------------------------------------------------
async def test_mounted_checkpoint_routes_never_show_the_storage_id(
    make_client: Callable[..., httpx.AsyncClient],
) -> None:
    key = "leak-test-key"
    prefix = f"{principal_for_api_key(key)}:"
    server = AgentServer(make_agent(checkpointer=MemoryCheckpointer()), api_key=key)
    c = make_client(server, key)
    assert (await c.post("/invoke", json={"prompt": "hi", "thread_id": "t1"})).status_code == 200
    bodies: list[str] = []

    async def call(method: str, target: str, status: int, **kw: Any) -> httpx.Response:
        r = await c.request(method, target, **kw)
        assert r.status_code == status, (method, target, r.text)
        bodies.append(r.text)
        return r

    latest = (await call("GET", "/threads/t1/latest", 200)).json()
    assert latest["thread_id"] == "t1"
    await call("GET", "/threads/t1/checkpoints", 200)
    await call("GET", "/threads/t1/checkpoints/nope", 404)
    await call("GET", "/threads/nope/checkpoints/nope", 404)
    await call("POST", "/threads/t1/copy", 200, json={"dest_thread_id": "t2"})
    copied = (await call("GET", "/threads/t2/latest", 200)).json()
    assert copied["metadata"]["copied_from"]["thread_id"] == "t1"
    await call("GET", "/threads/t2/metadata", 200)
    await call("GET", "/threads/t2/checkpoints", 200)
    await call("POST", "/threads/t1/copy", 409, json={"dest_thread_id": "t2"})
    await call("POST", "/threads/t1/checkpoints", 412, json={"state": {"messages": []}}, headers={"If-Match": '"x"'})
    await call("GET", "/threads/a%00b/checkpoints", 422)
    await call("GET", "/threads", 200)
    await call("GET", "/threads-with-metadata", 200)
    await call("GET", "/search?q=hi", 200)
    await call("GET", "/metadata-query?key=source&value=%22final%22", 200)
    await call("DELETE", "/threads/nope/checkpoints", 404)
    await call("POST", "/vacuum", 501, json={})
    for body in bodies:
        assert prefix not in body, body
    # the store itself keeps tulip's layout
    assert sorted(await server.checkpointer.list_threads()) == [prefix + "t1", prefix + "t2"]


# -- slow bodies, in process ----------------------------------------------------------------------
async def test_a_body_slower_than_the_bound_is_408_and_closes() -> None:
    server = AgentServer(make_agent(), api_key=None, body_timeout=0.3)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/invoke",
        "raw_path": b"/invoke",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")],
    }
    chunks = [{"type": "http.request", "body": b'{"prompt": ', "more_body": True}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if chunks:
            return chunks.pop(0)
        await asyncio.sleep(3600)  # the rest never comes
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    t0 = time.monotonic()
    await asyncio.wait_for(server(scope, receive, send), timeout=5)
    assert time.monotonic() - t0 < 2
    start = sent[0]
    assert start["status"] == 408 and (b"connection", b"close") in start["headers"]
    assert b"RequestTimeout" in sent[1]["body"]


def test_body_timeout_must_be_positive() -> None:
    from tulip_nb.core.errors import UserError

    with pytest.raises(UserError, match="body_timeout"):
        AgentServer(make_agent(), body_timeout=0)
    assert AgentServer(make_agent(), body_timeout=None).body_timeout is None


# -- slow clients against a real server -----------------------------------------------------------
def _closed_within(sock: socket.socket, seconds: float, drip: bytes) -> tuple[float, bytes]:
    """Send ``drip`` one byte every 0.5 s until the server closes; (seconds it took, what came back)."""
    t0 = time.monotonic()
    got = b""
    sock.settimeout(0.5)
    for byte in drip:
        if time.monotonic() - t0 > seconds:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    else:
        raise AssertionError("the server let the whole slow request in")
    return time.monotonic() - t0, got


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    log_dir = tmp_path_factory.mktemp("slow")
    args = ("--app", "tests.server.served_agent:agent", "--header-timeout", "2", "--body-timeout", "2")
    with serve(*args, log_dir=log_dir) as (url, _):
        yield int(url.rsplit(":", 1)[1])


def test_headers_sent_slowly_are_cut_off(slow_server: int) -> None:
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: drip\r\nAccept: */*\r\n" + b"X-Pad: " * 20
    with socket.create_connection(("127.0.0.1", slow_server)) as sock:
        took, got = _closed_within(sock, 10, request)
    assert took < 5 and got == b""  # closed after ~2 s, long before the ~90 s the headers would take


def test_a_silent_connection_is_cut_off(slow_server: int) -> None:
    with socket.create_connection(("127.0.0.1", slow_server)) as sock:
        sock.settimeout(10)
        t0 = time.monotonic()
        assert sock.recv(1) == b""
        assert time.monotonic() - t0 < 5


def test_a_body_sent_slowly_gets_408(slow_server: int) -> None:
    head = b"POST /invoke HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    with socket.create_connection(("127.0.0.1", slow_server)) as sock:
        sock.sendall(head)
        took, got = _closed_within(sock, 10, b" " * 200)
    assert took < 5 and got.startswith(b"HTTP/1.1 408"), got


def test_a_normal_client_is_unaffected(slow_server: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{slow_server}") as http:
        for _ in range(3):  # on one kept-alive connection
            r = http.post("/invoke", json={"prompt": "hi", "thread_id": "n"})
            assert r.status_code == 200 and r.json()["message"] == "echo: hi"
            time.sleep(0.5)
