"""Fixtures of the AgentServer tests: a small offline agent and an httpx client on the ASGI app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.backends.factories.remote import skip_without

skip_without("starlette", "httpx", extra="server")

import httpx  # noqa: E402

from tulip_nb.agent import Agent  # noqa: E402
from tulip_nb.core._messages import Message  # noqa: E402
from tulip_nb.models import ScriptedModel, text, tool_call  # noqa: E402
from tulip_nb.server import AgentServer  # noqa: E402
from tulip_nb.tools import Interrupt  # noqa: E402


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order.

    Args:
        order_id: The order id.
    """
    return {"order_id": order_id, "status": "delivered"}


def ask_manager(question: str) -> str:
    """Ask a manager and wait for the answer.

    Args:
        question: What to ask.
    """
    raise Interrupt(question)


def reply(messages: list[Message]) -> Message:
    """Deterministic across processes: decide from the conversation, not from a counter."""
    last = messages[-1]
    if last.role == "user" and "lookup" in (last.content or ""):
        return tool_call("lookup_order", content="checking the order", order_id="ord-1")
    if last.role == "user" and "approve" in (last.content or ""):
        return tool_call("ask_manager", question="Refund ord-1?")
    if last.role == "user" and "boom" in (last.content or ""):
        raise RuntimeError("secret internal detail /etc/passwd")
    if last.role == "tool":
        return text(f"done after tool: {last.content}")
    return text(f"echo: {last.content}")


def make_agent(**kw: Any) -> Agent:
    return Agent(ScriptedModel(reply), [lookup_order, ask_manager], **kw)


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TULIP_NB_SERVER_API_KEY", raising=False)


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    clients: list[httpx.AsyncClient] = []

    def build(server: AgentServer, key: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=server), base_url="http://t", headers=headers)
        clients.append(client)
        return client

    yield build
    for c in clients:
        await c.aclose()


@pytest.fixture
async def client(make_client: Callable[..., httpx.AsyncClient]) -> AsyncIterator[httpx.AsyncClient]:
    server = AgentServer(make_agent(), api_key=None)
    async with make_client(server) as c:
        yield c
