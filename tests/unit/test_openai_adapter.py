"""The OpenAI adapter against a local OpenAI-compatible server, with the real ``openai`` client.

The server (``http.server`` on 127.0.0.1, a thread per test module) answers according to the
requested model name, and records every request body so the tests can check what was sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("openai", reason="the openai extra is not installed")

from tulip_nb.agent import Agent, NullManager, tool
from tulip_nb.core import Message
from tulip_nb.models import ContextWindowExceeded, ModelHTTPError, resolve_model
from tulip_nb.models.openai import OpenAIModel


def _completion(message: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "test",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": usage or {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    }


def _tool_message(name: str, arguments: str, call_id: str = "call_abc") -> dict[str, Any]:
    return {
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


class _Handler(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]]

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})  # type: ignore[attr-defined]
        model = body["model"]
        last = body["messages"][-1]
        if model == "boom":
            self._send(500, {"error": {"message": "upstream exploded", "type": "server_error", "code": None}})
        elif model == "tiny":
            self._send(
                400,
                {
                    "error": {
                        "message": "maximum context length exceeded",
                        "type": "invalid_request_error",
                        "code": "context_length_exceeded",
                    }
                },
            )
        elif model == "malformed":
            self._send(200, _completion(_tool_message("lookup_order", '{"order_id": "ord-1"')))
        elif model == "tools" and last["role"] != "tool":
            usage = {
                "prompt_tokens": 20,
                "completion_tokens": 7,
                "total_tokens": 27,
                "prompt_tokens_details": {"cached_tokens": 8},
            }
            self._send(200, _completion(_tool_message("lookup_order", '{"order_id": "ord-4821"}'), usage))
        elif model == "tools":
            self._send(200, _completion({"content": f"Tool said: {last['content']}"}))
        else:
            self._send(200, _completion({"content": "hello from the local server"}))


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def _model(server: ThreadingHTTPServer, name: str) -> OpenAIModel:
    return OpenAIModel(name, base_url=_url(server), api_key="test-key", max_retries=0, timeout=10)


@tool(idempotent=True)
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"{order_id} is delivered"


async def test_text_answer_and_usage(server: ThreadingHTTPServer) -> None:
    r = await _model(server, "plain").complete([Message.system("s"), Message.user("hi")], [])
    assert r.message.role == "assistant" and r.message.content == "hello from the local server"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (11, 5, 16)
    sent = server.requests[-1]  # type: ignore[attr-defined]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer test-key"
    assert sent["body"]["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    assert "tools" not in sent["body"]


async def test_agent_round_trip_with_tool_calls(server: ThreadingHTTPServer) -> None:
    agent = Agent(_model(server, "tools"), [lookup_order], conversation_manager=NullManager())
    result = await agent.run("Refund ord-4821?")
    assert result.text == "Tool said: ord-4821 is delivered"
    assert result.usage.prompt_tokens == 31 and result.usage.cached_tokens == 8
    assert result.state.total_tokens_used == 43 and result.state.cached_tokens_used == 8
    first, second = server.requests[-2:]  # type: ignore[attr-defined]
    assert first["body"]["tools"] == [lookup_order.schema()]
    assistant, tool_msg = second["body"]["messages"][-2:]
    assert assistant["tool_calls"][0]["function"] == {"name": "lookup_order", "arguments": '{"order_id": "ord-4821"}'}
    assert tool_msg == {"role": "tool", "content": "ord-4821 is delivered", "tool_call_id": "call_abc"}


async def test_malformed_tool_call_is_kept_and_answered_with_an_error(server: ThreadingHTTPServer) -> None:
    r = await _model(server, "malformed").complete([Message.user("x")], [lookup_order.schema()])
    call = r.message.tool_calls[0]
    assert call.arguments == {} and call.malformed_arguments == '{"order_id": "ord-1"'
    agent = Agent(_model(server, "malformed"), [lookup_order], conversation_manager=NullManager(), max_iterations=1)
    result = await agent.run("x")
    assert result.stop_reason == "max_iterations"
    [ex] = result.tool_calls
    assert ex.error is not None and ex.error.startswith("ToolArgumentsInvalid")
    assert result.state.messages[-1].content.startswith("Error: ToolArgumentsInvalid")  # type: ignore[union-attr]


async def test_error_status_and_context_overflow(server: ThreadingHTTPServer) -> None:
    with pytest.raises(ModelHTTPError) as info:
        await _model(server, "boom").complete([Message.user("x")], [])
    assert info.value.status_code == 500 and "upstream exploded" in str(info.value)
    assert not isinstance(info.value, ContextWindowExceeded)
    with pytest.raises(ContextWindowExceeded) as overflow:
        await _model(server, "tiny").complete([Message.user("x")], [])
    assert overflow.value.status_code == 400


def test_model_string_reads_the_environment(server: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", _url(server))
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    agent = Agent("openai:plain", conversation_manager=NullManager())
    assert agent.model.name == "openai:plain"
    assert agent.run_sync("hi").text == "hello from the local server"
    assert server.requests[-1]["auth"] == "Bearer env-key"  # type: ignore[attr-defined]
    assert isinstance(resolve_model("openai:gpt-4o"), OpenAIModel)
