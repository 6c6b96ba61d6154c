"""AgentServer routes over httpx's ASGI transport: invoke, stream (SSE), resume, threads, errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson

from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.server import AgentServer

from .conftest import make_agent


def sse_frames(body: str) -> list[Any]:
    """Parse an SSE body into its data payloads ([DONE] kept as the string)."""
    assert body.endswith("data: [DONE]\n\n"), body[-80:]
    out: list[Any] = []
    for block in body.split("\n\n"):
        if not block:
            continue
        lines = [ln for ln in block.split("\n") if ln.startswith("data: ")]
        assert len(lines) == 1, block
        data = lines[0][len("data: ") :]
        out.append(data if data == "[DONE]" else orjson.loads(data))
    return out


async def test_health(client: httpx.AsyncClient) -> None:
    r = await client.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


async def test_invoke_then_read_thread(client: httpx.AsyncClient) -> None:
    r = await client.post("/invoke", json={"prompt": "please lookup", "thread_id": "t-1", "metadata": {"user": "u"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["stop_reason"] == "complete"
    assert body["iterations"] == 2 and body["tool_calls"] == 1  # real loop iterations, not events
    assert body["message"].startswith("done after tool:") and body["thread_id"] == "t-1"
    assert body["duration_ms"] >= 0 and body["checkpoint_id"]
    assert "checkpoint;dur=" in r.headers["server-timing"]
    r = await client.post("/invoke", json={"prompt": "hello again", "thread_id": "t-1"})
    assert r.json()["iterations"] == 1
    r = await client.get("/threads/t-1")
    assert r.status_code == 200
    thread = r.json()
    assert set(thread) >= {"thread_id", "iteration", "messages", "tool_executions", "metadata"}
    assert thread["thread_id"] == "t-1" and thread["iteration"] == 1
    assert [m["role"] for m in thread["messages"]] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert thread["metadata"]["user"] == "u"


async def test_invoke_without_thread_saves_nothing(client: httpx.AsyncClient) -> None:
    r = await client.post("/invoke", json={"prompt": "hi"})
    assert r.status_code == 200 and r.json()["message"] == "echo: hi" and r.json()["thread_id"] is None
    assert (await client.get("/threads")).json()["threads"] == []


async def test_stream_frames(client: httpx.AsyncClient) -> None:
    r = await client.post("/stream", json={"prompt": "please lookup", "thread_id": "s-1"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = sse_frames(r.text)
    kinds = [f if isinstance(f, str) else f["type"] for f in frames]
    assert kinds == ["think", "tool_start", "tool_complete", "think", "done", "[DONE]"]
    think, start, complete, _, done, _ = frames
    assert think["content"] == "checking the order" and think["tool_calls"] == 1
    assert start["tool"] == "lookup_order" and start["arguments"] == {"order_id": "ord-1"}
    assert complete["tool_call_id"] == start["tool_call_id"] and complete["error"] is None
    assert orjson.loads(complete["result"])["status"] == "delivered"
    assert done["stop_reason"] == "complete" and done["iterations"] == 2 and done["tool_calls"] == 1
    assert done["success"] is True and done["checkpoint_id"]
    saved = (await client.get("/threads/s-1")).json()
    assert saved["messages"][-1]["content"] == done["message"]


async def test_stream_error_frame_hides_details(client: httpx.AsyncClient) -> None:
    r = await client.post("/stream", json={"prompt": "boom", "thread_id": "e-1"})
    frames = sse_frames(r.text)
    assert [f if isinstance(f, str) else f["type"] for f in frames] == ["error", "[DONE]"]
    assert frames[0]["status"] == 500 and frames[0]["correlation_id"]
    assert "passwd" not in r.text and "Traceback" not in r.text


async def test_invoke_error_hides_details(client: httpx.AsyncClient) -> None:
    r = await client.post("/invoke", json={"prompt": "boom", "thread_id": "e-2"})
    assert r.status_code == 500 and r.json()["message"] == "internal error"
    assert "passwd" not in r.text and "Traceback" not in r.text
    # the failed turn was saved with its error recorded (the agent's save-on-failure)
    assert (await client.get("/threads/e-2")).json()["metadata"]["_tulip_nb_run"]["status"] == "error"


async def test_resume_json_and_sse(client: httpx.AsyncClient) -> None:
    r = await client.post("/invoke", json={"prompt": "approve it", "thread_id": "r-1"})
    body = r.json()
    assert body["stop_reason"] == "interrupted" and body["success"] is False
    assert body["interrupt"]["question"] == "Refund ord-1?"
    r = await client.post("/resume", json={"thread_id": "r-1"})
    assert r.status_code == 409 and r.json()["error"] == "ResumeNeedsResponse"
    r = await client.post("/resume", json={"thread_id": "r-1", "response": "yes"})
    assert r.status_code == 200, r.text
    assert r.json()["stop_reason"] == "complete" and r.json()["message"] == "done after tool: yes"
    r = await client.post("/resume", json={"thread_id": "r-1", "response": "again"})
    assert r.status_code == 404 and r.json()["error"] == "NothingToResume"
    r = await client.post("/resume", json={"thread_id": "nope"})
    assert r.status_code == 404
    # SSE flavour
    await client.post("/invoke", json={"prompt": "approve", "thread_id": "r-2"})
    r = await client.post(
        "/resume", json={"thread_id": "r-2", "response": "ok"}, headers={"Accept": "text/event-stream"}
    )
    frames = sse_frames(r.text)
    kinds = [f if isinstance(f, str) else f["type"] for f in frames]
    assert kinds == ["tool_complete", "think", "done", "[DONE]"]
    assert frames[0]["answered"] is True and frames[0]["tool"] == "ask_manager"
    assert frames[2]["message"] == "done after tool: ok" and frames[2]["tool_calls"] == 1


async def test_delete_thread(client: httpx.AsyncClient) -> None:
    await client.post("/invoke", json={"prompt": "x", "thread_id": "d-1"})
    r = await client.delete("/threads/d-1")
    assert r.json() == {"thread_id": "d-1", "deleted": True}
    assert (await client.get("/threads/d-1")).status_code == 404
    assert (await client.delete("/threads/d-1")).json()["deleted"] is False


async def test_thread_id_with_slash_is_one_segment(client: httpx.AsyncClient) -> None:
    await client.post("/invoke", json={"prompt": "x", "thread_id": "user/42"})
    r = await client.get("/threads/user%2F42")
    assert r.status_code == 200 and r.json()["thread_id"] == "user/42"


async def test_bad_requests(client: httpx.AsyncClient) -> None:
    r = await client.post("/invoke", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "InvalidJSON"
    r = await client.post("/invoke", json={"thread_id": "t"})
    assert r.status_code == 422 and r.json()["field"] == "prompt"
    r = await client.post("/invoke", json={"prompt": 3})
    assert r.status_code == 422 and r.json()["field"] == "prompt"
    r = await client.post("/invoke", json=["prompt"])
    assert r.status_code == 422 and r.json()["field"] == "body"
    r = await client.post("/invoke", json={"prompt": "x", "thread_id": "a\x00b"})
    assert r.status_code == 422 and r.json()["field"] == "thread_id"
    r = await client.post("/invoke", json={"prompt": "x", "thread_id": "t" * 300})
    assert r.status_code == 422 and r.json()["field"] == "thread_id"
    r = await client.post("/invoke", json={"prompt": "x", "metadata": {"_tulip_nb_run": {"status": "interrupted"}}})
    assert r.status_code == 422 and r.json()["field"] == "metadata"
    r = await client.post("/stream", json={"prompt": ""})
    assert r.status_code == 422 and r.json()["field"] == "prompt"
    r = await client.post("/resume", json={"response": "x"})
    assert r.status_code == 422 and r.json()["field"] == "thread_id"
    r = await client.get("/threads/" + "x" * 300)
    assert r.status_code == 422
    r = await client.post("/nowhere")
    assert r.status_code == 404


async def test_oversized_bodies(make_client: Callable[..., httpx.AsyncClient]) -> None:
    server = AgentServer(make_agent(), max_body_bytes=1000, max_checkpoint_bytes=2000)
    client = make_client(server)
    r = await client.post("/invoke", json={"prompt": "x" * 2000})
    assert r.status_code == 413 and r.json()["error"] == "PayloadTooLarge"

    async def chunked() -> Any:  # no Content-Length: the limit is enforced while reading
        for _ in range(10):
            yield b"x" * 500

    r = await client.post("/stream", content=chunked())
    assert r.status_code == 413
    r = await client.post("/threads/t/checkpoints", content=b"{" + b" " * 3000 + b"}")
    assert r.status_code == 413


async def test_checkpoint_protocol_is_mounted(client: httpx.AsyncClient) -> None:
    await client.post("/invoke", json={"prompt": "x", "thread_id": "c-1"})
    await client.post("/invoke", json={"prompt": "y", "thread_id": "c-1"})
    r = await client.get("/threads/c-1/checkpoints")
    assert r.status_code == 200 and len(r.json()["checkpoints"]) == 2
    assert all(c["thread_id"] == "c-1" for c in r.json()["checkpoints"])  # never the storage id
    latest = await client.get("/threads/c-1/latest")
    assert latest.status_code == 200 and latest.json()["thread_id"] == "c-1"
    assert (await client.get("/threads")).json()["threads"] == ["c-1"]
    assert (await client.post("/vacuum", json={})).status_code == 501


async def test_busy_thread_in_one_worker_is_409(make_client: Callable[..., httpx.AsyncClient]) -> None:
    import asyncio

    from tulip_nb.agent import Agent
    from tulip_nb.models import ScriptedModel, text

    gate = asyncio.Event()

    async def slow(messages: list[Any]) -> Any:
        await gate.wait()
        return text("ok")

    server = AgentServer(Agent(ScriptedModel(slow), checkpointer=MemoryCheckpointer()))
    client = make_client(server)
    first = asyncio.create_task(client.post("/invoke", json={"prompt": "a", "thread_id": "b-1"}))
    await asyncio.sleep(0.05)
    second = await client.post("/invoke", json={"prompt": "b", "thread_id": "b-1"})
    assert second.status_code == 409 and second.json()["error"] == "ThreadBusy"
    other = asyncio.create_task(client.post("/invoke", json={"prompt": "c", "thread_id": "b-2"}))
    await asyncio.sleep(0.05)
    gate.set()
    assert (await first).status_code == 200 and (await other).status_code == 200
    assert (await client.post("/invoke", json={"prompt": "d", "thread_id": "b-1"})).status_code == 200
