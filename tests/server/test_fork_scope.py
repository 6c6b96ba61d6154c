"""Lineage through the AgentServer stays inside the caller's scope (issue 26, item 6).

A save on the mounted checkpoint routes may carry lineage in its save metadata: ``forked_from`` (a
fork's source thread) and ``copied_from`` (``{"thread_id", "checkpoint_id"}``). Both name a thread
**of the caller**: the server stores them as the caller's storage ids and shows them back as the
caller sent them, so a value naming another principal's thread (its client id or its storage id
``"<principal>:<id>"``) names a thread of the caller's own that is not there. No link is made to
the other principal's storage and nothing the caller sees depends on whether that thread exists.
Checked on the memory store and on the file store in both layouts (history, tulip), through the
real ASGI app in this process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.server import AgentServer

from .conftest import make_agent

KEY_A, KEY_B = "alice-secret-key", "bob-secret-key"
KINDS = ["memory", "history", "tulip"]
CID = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0"
STAMPS = ("created_at", "tulip_nb_created_at", "tulip_nb_hash", "tulip_nb_parent_hash", "tulip_nb_seq")
"""Save-metadata keys that differ between two runs of the same saves (time, and the hash over it)."""


def pid(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


ALICE, BOB = pid(KEY_A), pid(KEY_B)


def store(kind: str, base: Path) -> BaseCheckpointer:
    if kind == "memory":
        return MemoryCheckpointer()
    cp: BaseCheckpointer = FileCheckpointer(base, layout=kind)  # type: ignore[arg-type]
    return cp


def envelope(text: str, **metadata: Any) -> dict[str, Any]:
    """A checkpoint body as tulip's HTTP checkpointer posts it (the caller's own conversation)."""
    state = {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": f"re: {text}"}]}
    return {"checkpoint_id": CID, "state": state, "metadata": {"source": "fork", **metadata}}


def clean(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` without what differs between two runs of the same saves (a ``metadata`` within too)."""
    out = {k: v for k, v in meta.items() if k not in STAMPS}
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = clean(out["metadata"])
    return out


async def _bob_thread(bob: httpx.AsyncClient) -> str:
    """Bob's thread ``secret`` (two turns); the id of its latest checkpoint."""
    for prompt in ("the merger closes friday", "keep it quiet"):
        r = await bob.post("/invoke", json={"prompt": prompt, "thread_id": "secret"})
        assert r.status_code == 200, r.text
    cid = (await bob.get("/threads/secret")).json()["checkpoint_id"]
    assert isinstance(cid, str)
    return cid


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("named", ["storage id", "client id"])
async def test_forked_from_another_principals_thread_links_nothing(
    kind: str, named: str, tmp_path: Path, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    cp = store(kind, tmp_path)
    server = AgentServer(make_agent(checkpointer=cp), api_key=[KEY_A, KEY_B])
    alice, bob = make_client(server, KEY_A), make_client(server, KEY_B)
    bob_cid = await _bob_thread(bob)
    target = f"{BOB}:secret" if named == "storage id" else "secret"
    sent = envelope("my own notes", forked_from=target, parent_checkpoint_id=bob_cid)
    r = await alice.post("/threads/mine/checkpoints", json=sent)
    assert r.status_code == 201, r.text
    # alice reads back what she sent: a thread id of hers
    meta = (await alice.get("/threads/mine/metadata")).json()["metadata"]
    assert meta["forked_from"] == target and meta["parent_checkpoint_id"] == bob_cid
    # stored as alice's storage id: never bob's thread
    stored = await cp.get_metadata(f"{ALICE}:mine")
    assert stored is not None and stored["forked_from"] == f"{ALICE}:{target}"
    # bob deleting his thread changes nothing for alice
    assert (await bob.delete("/threads/secret")).json()["deleted"] is True
    r = await alice.get("/threads/mine/latest")
    assert r.status_code == 200, r.text
    assert [m["content"] for m in r.json()["state"]["messages"]] == ["my own notes", "re: my own notes"]
    fresh = await (store(kind, tmp_path) if kind != "memory" else cp).load(f"{ALICE}:mine")
    assert fresh is not None and [m.content for m in fresh.messages] == ["my own notes", "re: my own notes"]


@pytest.mark.parametrize("kind", KINDS)
async def test_what_alice_sees_does_not_depend_on_whether_bobs_thread_exists(
    kind: str, tmp_path: Path, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    """The same saves by alice on two servers, bob's thread there on one and never on the other:
    every answer alice gets is the same (up to time stamps and the hash over them)."""
    seen: list[list[Any]] = []
    bob_cid = ""
    for bob_exists in (True, False):
        cp = store(kind, tmp_path / str(bob_exists))
        server = AgentServer(make_agent(checkpointer=cp), api_key=[KEY_A, KEY_B])
        alice, bob = make_client(server, KEY_A), make_client(server, KEY_B)
        if bob_exists:
            bob_cid = await _bob_thread(bob)
        answers: list[Any] = []
        for thread, meta in [
            ("fork", {"forked_from": f"{BOB}:secret", "parent_checkpoint_id": bob_cid}),
            ("copy", {"copied_from": {"thread_id": f"{BOB}:secret", "checkpoint_id": bob_cid}}),
        ]:
            r = await alice.post(f"/threads/{thread}/checkpoints", json=envelope("probe", **meta))
            answers.append((r.status_code, r.json()))
            listed = (await alice.get(f"/threads/{thread}/checkpoints")).json()["checkpoints"]
            answers.append([(i["checkpoint_id"], clean(i["metadata"])) for i in listed])
            latest = (await alice.get(f"/threads/{thread}/latest")).json()
            answers.append((latest["checkpoint_id"], clean(latest["metadata"]), latest["state"]["messages"]))
        answers.append((await alice.get("/threads")).json())
        query = {"key": "source", "value": '"fork"'}
        rows = (await alice.get("/metadata-query", params=query)).json()["checkpoints"]
        answers.append(sorted((r["thread_id"], r["checkpoint_id"], clean(r["metadata"])) for r in rows))
        seen.append(answers)
    assert seen[0] == seen[1]
    assert seen[0][0] == (201, {"checkpoint_id": CID, "thread_id": "fork"})


@pytest.mark.parametrize("kind", KINDS)
async def test_a_fork_of_the_callers_own_thread_is_a_fork_in_its_scope(
    kind: str, tmp_path: Path, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    """What a client of the server does to fork (the lab over an HTTP checkpointer): its own ids."""
    cp = store(kind, tmp_path)
    server = AgentServer(make_agent(checkpointer=cp), api_key=[KEY_A, KEY_B])
    alice, bob = make_client(server, KEY_A), make_client(server, KEY_B)
    assert (await alice.post("/invoke", json={"prompt": "draft a refund", "thread_id": "a"})).status_code == 200
    source = (await alice.get("/threads/a/latest")).json()
    body = {
        "state": source["state"],
        "metadata": {"forked_from": "a", "parent_checkpoint_id": source["checkpoint_id"], "source": "fork"},
    }
    r = await alice.post("/threads/b/checkpoints", json=body)
    assert r.status_code == 201, r.text
    assert (await alice.get("/threads/b/metadata")).json()["metadata"]["forked_from"] == "a"
    stored = await cp.get_metadata(f"{ALICE}:b")
    assert stored is not None and stored["forked_from"] == f"{ALICE}:a"
    # alice finds her forks of "a" by the id she knows; bob finds none by alice's ids of any form
    q = {"key": "forked_from", "value": '"a"'}
    hits = (await alice.get("/metadata-query", params=q)).json()["checkpoints"]
    assert [(h["thread_id"], h["metadata"]["forked_from"]) for h in hits] == [("b", "a")]
    for value in ('"a"', f'"{ALICE}:a"'):
        r = await bob.get("/metadata-query", params={"key": "forked_from", "value": value})
        assert r.json()["checkpoints"] == []


@pytest.mark.parametrize("kind", KINDS)
async def test_copied_from_is_scoped_the_same_way(
    kind: str, tmp_path: Path, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    cp = store(kind, tmp_path)
    server = AgentServer(make_agent(checkpointer=cp), api_key=[KEY_A, KEY_B])
    alice, bob = make_client(server, KEY_A), make_client(server, KEY_B)
    bob_cid = await _bob_thread(bob)
    planted = {"thread_id": f"{BOB}:secret", "checkpoint_id": bob_cid}
    r = await alice.post("/threads/c/checkpoints", json=envelope("mine", copied_from=planted))
    assert r.status_code == 201, r.text
    assert (await alice.get("/threads/c/metadata")).json()["metadata"]["copied_from"] == planted
    stored = await cp.get_metadata(f"{ALICE}:c")
    assert stored is not None and stored["copied_from"]["thread_id"] == f"{ALICE}:{BOB}:secret"
    # a real copy names alice's own source as alice knows it
    assert (await alice.post("/threads/c/copy", json={"dest_thread_id": "d"})).json() == {"copied": True}
    meta = (await alice.get("/threads/d/metadata")).json()["metadata"]
    assert meta["copied_from"] == {"thread_id": "c", "checkpoint_id": CID}


@pytest.mark.parametrize("kind", KINDS)
async def test_lineage_naming_a_thread_outside_the_scope_is_not_shown(
    kind: str, tmp_path: Path, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    """A checkpoint of alice's written past the server (a notebook on the store) whose lineage
    names bob's storage id: alice is shown null there, never bob's storage id."""
    cp = store(kind, tmp_path)
    server = AgentServer(make_agent(checkpointer=cp), api_key=[KEY_A, KEY_B])
    alice = make_client(server, KEY_A)
    from tulip_nb.core import AgentState, Message

    meta = {
        "forked_from": f"{BOB}:secret",
        "copied_from": {"thread_id": f"{BOB}:secret", "checkpoint_id": "c1"},
        "source": "fork",
    }
    await cp.save(AgentState(messages=[Message.user("x")]), f"{ALICE}:side", metadata=meta)
    shown = (await alice.get("/threads/side/metadata")).json()["metadata"]
    assert shown["forked_from"] is None and shown["copied_from"] == {"thread_id": None, "checkpoint_id": "c1"}
    listed = (await alice.get("/threads/side/checkpoints")).json()["checkpoints"]
    assert listed[0]["metadata"]["forked_from"] is None
    assert BOB not in (await alice.get("/threads/side/latest")).text
    rows = (await alice.get("/threads-with-metadata")).json()["threads"]
    assert [r["thread_id"] for r in rows] == ["side"] and BOB not in str(rows)


@pytest.mark.parametrize(
    ("meta", "key"),
    [
        ({"forked_from": 42}, "forked_from"),
        ({"forked_from": ""}, "forked_from"),
        ({"forked_from": ["a"]}, "forked_from"),
        ({"forked_from": "a\x00b"}, "forked_from"),
        ({"copied_from": "a"}, "copied_from"),
        ({"copied_from": {"checkpoint_id": "c1"}}, "copied_from"),
        ({"copied_from": {"thread_id": 7, "checkpoint_id": "c1"}}, "copied_from"),
    ],
)
async def test_lineage_that_names_no_thread_is_a_422_naming_the_key(
    meta: dict[str, Any], key: str, tmp_path: Path, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    cp = MemoryCheckpointer()
    alice = make_client(AgentServer(make_agent(checkpointer=cp), api_key=[KEY_A, KEY_B]), KEY_A)
    r = await alice.post("/threads/t/checkpoints", json=envelope("x", **meta))
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "InvalidThreadId" and repr(key) in body["message"] and body["thread_id"] == "t"
    assert ALICE not in r.text
    assert await cp.list_threads() == []  # nothing saved
    # a verbatim put (an import) is held to the same rule
    headers = {"X-Tulip-NB-Put": "verbatim"}
    body_put = {**envelope("x", **meta), "created_at": "2026-01-02T00:00:00+00:00"}
    r = await alice.post("/threads/t/checkpoints", json=body_put, headers=headers)
    assert r.status_code == 422, r.text


async def test_null_lineage_is_kept_and_plain_layout_is_unchanged(
    tmp_path: Path, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    cp = MemoryCheckpointer()
    alice = make_client(AgentServer(make_agent(checkpointer=cp), api_key=[KEY_A, KEY_B]), KEY_A)
    r = await alice.post("/threads/t/checkpoints", json=envelope("x", forked_from=None, copied_from=None))
    assert r.status_code == 201, r.text
    stored = await cp.get_metadata(f"{ALICE}:t")
    assert stored is not None and stored["forked_from"] is None and stored["copied_from"] is None
    # one principal, plain layout: its ids are the storage ids, stored and shown as sent
    plain = MemoryCheckpointer()
    solo = make_client(AgentServer(make_agent(checkpointer=plain), api_key=KEY_A, thread_layout="plain"), KEY_A)
    r = await solo.post("/threads/t/checkpoints", json=envelope("x", forked_from="elsewhere"))
    assert r.status_code == 201, r.text
    stored = await plain.get_metadata("t")
    assert stored is not None and stored["forked_from"] == "elsewhere"
    assert (await solo.get("/threads/t/metadata")).json()["metadata"]["forked_from"] == "elsewhere"
