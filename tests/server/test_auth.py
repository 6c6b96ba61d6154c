"""AgentServer auth: bearer keys, principals, per-principal threads, tulip's storage layout."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tulip_nb.core.errors import UserError
from tulip_nb.core.principals import principal_for_api_key
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.server import AgentServer
from tulip_nb.server._auth import ApiKeys

from .conftest import make_agent

KEY_A, KEY_B = "key-a-secret", "key-b-secret"


def pid(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@pytest.fixture
def server() -> AgentServer:
    return AgentServer(make_agent(checkpointer=MemoryCheckpointer()), api_key=[KEY_A, KEY_B])


async def test_no_key_wrong_key_right_key(server: AgentServer, make_client: Callable[..., httpx.AsyncClient]) -> None:
    anon, wrong, right = make_client(server), make_client(server, "nope"), make_client(server, KEY_A)
    assert (await anon.get("/health")).status_code == 200  # health needs no key
    for c in (anon, wrong):
        for method, path in [
            ("POST", "/invoke"),
            ("POST", "/stream"),
            ("POST", "/resume"),
            ("GET", "/threads/x"),
            ("DELETE", "/threads/x"),
            ("GET", "/threads/x/checkpoints"),
            ("GET", "/threads"),
        ]:
            r = await c.request(method, path, json={"prompt": "hi", "thread_id": "x"})
            assert r.status_code == 401, (method, path)
            assert r.headers["www-authenticate"] == "Bearer" and "secret" not in r.text
    basic = make_client(server)
    r = await basic.post("/invoke", json={"prompt": "hi"}, headers={"Authorization": f"Basic {KEY_A}"})
    assert r.status_code == 401
    r = await right.post("/invoke", json={"prompt": "hi", "thread_id": "x"})
    assert r.status_code == 200


async def test_principals_do_not_see_each_other(
    server: AgentServer, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    a, b = make_client(server, KEY_A), make_client(server, KEY_B)
    assert (await a.post("/invoke", json={"prompt": "mine", "thread_id": "shared-name"})).status_code == 200
    assert (await b.get("/threads/shared-name")).status_code == 404
    assert (await b.get("/threads/shared-name/checkpoints")).json()["checkpoints"] == []
    assert (await b.get("/threads")).json()["threads"] == []
    assert (await b.delete("/threads/shared-name")).json()["deleted"] is False
    # b's thread of the same name is its own
    await b.post("/invoke", json={"prompt": "theirs", "thread_id": "shared-name"})
    ta = (await a.get("/threads/shared-name")).json()
    assert [m["content"] for m in ta["messages"] if m["role"] == "user"] == ["mine"]
    # a principal cannot reach another's storage id through the checkpoint routes either
    r = await b.get(f"/threads/{pid(KEY_A)}:shared-name/latest")
    assert r.status_code == 404
    # storage layout: tulip's "<principal>:<thread_id>"
    cp = server.checkpointer
    assert sorted(await cp.list_threads()) == sorted([f"{pid(KEY_A)}:shared-name", f"{pid(KEY_B)}:shared-name"])


async def test_anon_layout_and_plain_layout(make_client: Callable[..., httpx.AsyncClient]) -> None:
    cp = MemoryCheckpointer()
    c = make_client(AgentServer(make_agent(), checkpointer=cp))
    await c.post("/invoke", json={"prompt": "x", "thread_id": "t"})
    assert await cp.list_threads() == ["anon:t"]
    cp2 = MemoryCheckpointer()
    c2 = make_client(AgentServer(make_agent(), checkpointer=cp2, thread_layout="plain"))
    await c2.post("/invoke", json={"prompt": "x", "thread_id": "t"})
    assert await cp2.list_threads() == ["t"]
    with pytest.raises(UserError, match="mix"):
        AgentServer(make_agent(), api_key=[KEY_A, KEY_B], thread_layout="plain")


async def test_env_key(monkeypatch: pytest.MonkeyPatch, make_client: Callable[..., httpx.AsyncClient]) -> None:
    monkeypatch.setenv("TULIP_NB_SERVER_API_KEY", f"{KEY_A}, {KEY_B}")
    server = AgentServer(make_agent())
    assert (await make_client(server).post("/invoke", json={"prompt": "x"})).status_code == 401
    assert (await make_client(server, KEY_B).post("/invoke", json={"prompt": "x"})).status_code == 200


def test_api_keys_unit() -> None:
    keys = ApiKeys([KEY_A], from_env=False)
    assert keys.principal_for(f"Bearer {KEY_A}") == pid(KEY_A) == principal_for_api_key(KEY_A)
    assert keys.principal_for(f"bearer   {KEY_A}  ") == pid(KEY_A)
    assert keys.principal_for(f"Bearer {KEY_A}x") is None
    assert keys.principal_for(None) is None
    assert ApiKeys(None, from_env=False).principal_for(None) == "anon" == principal_for_api_key(None)
    with pytest.raises(UserError):
        ApiKeys([""], from_env=False)


@pytest.mark.interop
async def test_thread_a_tulip_server_stored_is_readable_in_compat_mode(
    tmp_path: Path, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    """tulip's AgentServer runs its agent on thread "<principal>:<id>"; a real tulip agent does that
    here on a file directory, and our server (tulip layout, same key, same directory) serves it."""
    import asyncio

    tulip_agent = pytest.importorskip("tulip.agent", reason="tulip-agents (the interop peer) is not installed")
    tulip_testing = pytest.importorskip("tulip.testing")
    tulip_file = pytest.importorskip("tulip.memory.backends.file")
    from tulip_nb.memory.backends.file import FileCheckpointer

    theirs = tulip_agent.Agent(
        model=tulip_testing.ScriptedModel([tulip_testing.text("hello from tulip")]),
        checkpointer=tulip_file.FileCheckpointer(base_dir=str(tmp_path)),
    )
    stored = f"{principal_for_api_key(KEY_A)}:legacy-7"
    await asyncio.to_thread(theirs.run_sync, "from tulip", thread_id=stored)

    server = AgentServer(make_agent(), api_key=KEY_A, checkpointer=FileCheckpointer(base_dir=tmp_path))
    c = make_client(server, KEY_A)
    r = await c.get("/threads/legacy-7")
    assert r.status_code == 200, r.text
    contents = [m["content"] for m in r.json()["messages"] if m["role"] != "system"]
    assert contents == ["from tulip", "hello from tulip"]
    r = await c.post("/invoke", json={"prompt": "continue", "thread_id": "legacy-7"})
    assert r.status_code == 200 and r.json()["message"] == "echo: continue"
    back = await tulip_file.FileCheckpointer(base_dir=str(tmp_path)).load(stored)
    assert [m.content for m in back.messages][-2:] == ["continue", "echo: continue"]
