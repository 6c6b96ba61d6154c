"""The hostile OpenAI-compatible server, one per module, counters reset for every test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("openai", reason="the openai extra is not installed")
pytest.importorskip("uvicorn", reason="the server extra is not installed")

from tests.models.openai_server import Hostility, OpenAIServer
from tulip_nb.models.openai import OpenAIModel


@pytest.fixture(scope="module")
def module_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def server(module_server: OpenAIServer) -> OpenAIServer:
    module_server.reset(Hostility())
    return module_server


MakeModel = Callable[..., OpenAIModel]


@pytest.fixture
async def make_model(server: OpenAIServer) -> AsyncIterator[MakeModel]:
    """``make_model(name=..., **kw)``: an OpenAIModel on the server; each test gets its own model
    names (so its concurrency limit is its own), and every client is closed at the end."""
    made: list[OpenAIModel] = []
    suffix = uuid.uuid4().hex[:6]

    def make(name: str = "gpt-4o-mini", **kw: Any) -> OpenAIModel:
        kw.setdefault("base_url", server.url)
        kw.setdefault("api_key", "test-key")
        model = OpenAIModel(f"{name}-{suffix}" if kw.pop("unique", True) else name, **kw)
        made.append(model)
        return model

    yield make
    for m in made:
        await m.aclose()
