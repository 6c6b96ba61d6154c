"""A local OpenAI-compatible chat-completions server that misbehaves on purpose.

A real HTTP server (starlette on uvicorn, in a thread, bound to 127.0.0.1 on a free port) that
the real ``openai`` client talks to. It answers ``POST /v1/chat/completions`` deterministically
from the request: with tools and a fresh user message it calls the first tool (every required
string argument = the user's text), after a tool result it answers in text quoting the result,
without tools it answers in text. Usage is reported, with cached prompt tokens (half the prompt,
as a provider's prompt cache would bill) once a prompt is 64 tokens or more.

:class:`Hostility` makes it hostile, per request and reproducibly (a seeded RNG): a fraction of
429s with ``Retry-After`` / ``retry-after-ms``, a storm (the first N requests all 429), 500s,
slow answers, truncated bodies (half the JSON, Content-Length matching). It counts what it saw:
``requests``, ``statuses``, the requests in flight and their ``peak``, so tests can assert the
client's concurrency limit held.

    with OpenAIServer(Hostility(rate_429=0.2)) as server:
        model = OpenAIModel("gpt-4o-mini", base_url=server.url, api_key="test")
        ...
        server.requests, server.peak

Used by tests/models, bench/bench_live.py and scripts/record_live_notebook.py. Only on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["Hostility", "OpenAIServer"]


@dataclass
class Hostility:
    """What goes wrong, per request (fractions in [0, 1]; drawn from a ``seed``-ed RNG)."""

    rate_429: float = 0.0
    storm: int = 0
    """The first ``storm`` requests are all 429."""
    storm_500: int = 0
    """The ``storm_500`` requests after those are all 500."""
    retry_after_ms: int = 20
    rate_500: float = 0.0
    rate_slow: float = 0.0
    slow_seconds: float = 0.3
    rate_truncated: float = 0.0
    latency: float = 0.0
    """Seconds every answer takes (so concurrent requests overlap)."""
    seed: int = 0


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:6]


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    messages = body["messages"]
    tools = body.get("tools") or []
    last = messages[-1]
    tag = _digest(messages)
    if tools and last["role"] == "user":
        fn = tools[0]["function"]
        required = fn.get("parameters", {}).get("required", [])
        args = dict.fromkeys(required, last.get("content") or "")
        call = {
            "id": f"call_{tag}",
            "type": "function",
            "function": {"name": fn["name"], "arguments": json.dumps(args)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"[{body['model']} {tag}] from the tool: {str(last['content'])[:60]}"}
    return {"role": "assistant", "content": f"[{body['model']} {tag}] you said: {str(last.get('content'))[:60]}"}


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    message = _answer(body)
    prompt = _tokens(json.dumps(body["messages"]) + json.dumps(body.get("tools") or []))
    completion = _tokens(json.dumps(message))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    usage["prompt_tokens_details"] = {"cached_tokens": prompt // 2 if prompt >= 64 else 0}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-{_digest(body)}",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


@dataclass
class _Counts:
    requests: int = 0
    in_flight: int = 0
    peak: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    bodies: list[dict[str, Any]] = field(default_factory=list)


class OpenAIServer:
    """The server (see the module docstring); ``with OpenAIServer() as s:`` starts and stops it."""

    def __init__(self, hostility: Hostility | None = None) -> None:
        self.hostility = hostility or Hostility()
        self._rng = random.Random(self.hostility.seed)
        self._lock = threading.Lock()
        self._counts = _Counts()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- counters -------------------------------------------------------------------------------
    @property
    def requests(self) -> int:
        return self._counts.requests

    @property
    def peak(self) -> int:
        return self._counts.peak

    @property
    def statuses(self) -> Counter[str]:
        return Counter(self._counts.statuses)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return list(self._counts.bodies)

    def reset(self, hostility: Hostility | None = None) -> None:
        """Zero the counters (and, if given, change the hostility and reseed)."""
        with self._lock:
            if hostility is not None:
                self.hostility = hostility
            self._rng = random.Random(self.hostility.seed)
            self._counts = _Counts()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- the endpoint ---------------------------------------------------------------------------
    def _draw(self) -> tuple[str, float]:
        """(what this request gets, extra seconds), decided under the lock in arrival order."""
        h = self.hostility
        c = self._counts
        if c.requests <= h.storm:
            return "429", 0.0
        if c.requests <= h.storm + h.storm_500:
            return "500", 0.0
        r = self._rng.random()
        if r < h.rate_429:
            return "429", 0.0
        r -= h.rate_429
        if r < h.rate_500:
            return "500", 0.0
        r -= h.rate_500
        if r < h.rate_truncated:
            return "truncated", 0.0
        r -= h.rate_truncated
        if r < h.rate_slow:
            return "200", h.slow_seconds
        return "200", 0.0

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            c = self._counts
            c.requests += 1
            c.in_flight += 1
            c.peak = max(c.peak, c.in_flight)
            c.bodies.append(body)
            kind, extra = self._draw()
            c.statuses[kind] += 1
            latency = self.hostility.latency
            retry_ms = self.hostility.retry_after_ms
        try:
            await asyncio.sleep(latency + extra)
            if kind == "429":
                headers = {"retry-after-ms": str(retry_ms), "retry-after": str(max(1, retry_ms // 1000))}
                error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
                return JSONResponse({"error": error}, status_code=429, headers=headers)
            if kind == "500":
                error = {"message": "The server had an error", "type": "server_error", "code": None}
                return JSONResponse({"error": error}, status_code=500)
            data = json.dumps(_completion(body)).encode()
            if kind == "truncated":
                return Response(data[: len(data) // 2], media_type="application/json")
            return Response(data, media_type="application/json")
        finally:
            with self._lock:
                self._counts.in_flight -= 1

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> OpenAIServer:
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="error", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the local OpenAI-compatible server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
