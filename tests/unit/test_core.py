"""The data model: tulip's shapes, unknown keys kept, timezone handling, cached bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import orjson
import pydantic
import pytest

import tulip_nb
from tulip_nb.core import (
    AgentState,
    CapabilityNotSupported,
    CheckpointConflict,
    CheckpointCorrupt,
    InvalidThreadId,
    Message,
    ToolCall,
    ToolExecution,
    TulipNBError,
    state_json_bytes,
)

from ..conftest import SAMPLE_CHECKPOINT


def test_public_names_are_sorted_and_importable() -> None:
    assert list(tulip_nb.__all__) == sorted(tulip_nb.__all__)
    for name in tulip_nb.__all__:
        assert hasattr(tulip_nb, name), name


def test_import_pulls_in_no_optional_stack() -> None:
    code = (
        "import sys, tulip_nb, tulip_nb.memory.backends, tulip_nb.memory.managers\n"
        "heavy = {'pandas','matplotlib','ipywidgets','boto3','aiobotocore','asyncpg','redis',"
        "'mysql','opensearchpy','openai','tiktoken','starlette','httpx'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_sample_state_loads_with_every_key() -> None:
    raw = json.loads(SAMPLE_CHECKPOINT.read_text())["state"]
    state = AgentState.model_validate(raw)
    assert len(state.messages) == 9
    assert state.messages[2].tool_calls[0] == ToolCall(id="call_w1", name="get_weather", arguments={"city": "Lisbon"})
    again = orjson.loads(state_json_bytes(state))
    assert again == raw


def test_defaults_match_tulip_shape() -> None:
    state = AgentState.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    dumped = state.model_dump(mode="json")
    assert len(dumped) == 36
    assert dumped["max_iterations"] == 20 and dumped["confidence_threshold"] == 0.85
    assert dumped["completion_mode"] == "auto" and dumped["provider_state"] is None
    assert dumped["messages"][0] == {
        "role": "user",
        "content": "hi",
        "tool_calls": [],
        "tool_call_id": None,
        "name": None,
        "metadata": {},
    }
    assert len(state.run_id) == 32


@pytest.mark.parametrize(
    "stamp", ["2026-11-30T06:53:58.901263Z", "2026-11-30T06:53:58.901263+00:00", "2026-11-30T06:53:58.901263"]
)
def test_datetimes_accept_z_offset_and_naive(stamp: str) -> None:
    ex = ToolExecution.model_validate({"tool_name": "t", "tool_call_id": "c", "timestamp": stamp})
    assert ex.timestamp == datetime(2026, 11, 30, 6, 53, 58, 901263, tzinfo=UTC)
    assert orjson.loads(ex.model_dump_json())["timestamp"].endswith("Z")


def test_non_utc_offsets_are_kept_aware() -> None:
    ex = ToolExecution.model_validate({"tool_name": "t", "tool_call_id": "c", "timestamp": "2026-11-30T08:00:00+02:00"})
    assert ex.timestamp == datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def test_args_is_an_alias_of_arguments() -> None:
    call = ToolCall.model_validate({"id": "c1", "name": "f", "args": {"x": 1}})
    assert call.arguments == {"x": 1}
    assert "args" not in call.model_dump()


def test_messages_are_frozen_and_cache_their_bytes() -> None:
    msg = Message(role="user", content="hi", extra_key=[1])
    with pytest.raises(pydantic.ValidationError):
        msg.content = "changed"  # type: ignore[misc]
    first = msg.json_bytes()
    assert first is msg.json_bytes()
    assert orjson.loads(first) == orjson.loads(msg.model_dump_json())
    assert orjson.loads(first)["extra_key"] == [1]
    assert msg == Message(role="user", content="hi", extra_key=[1])
    changed = msg.model_copy(update={"content": "bye"})
    assert orjson.loads(changed.json_bytes())["content"] == "bye"
    assert msg.model_copy().json_bytes() == first


def test_message_block_view_for_seed_002() -> None:
    msgs = [Message.user("Tell me your name"), Message.assistant("I am a bot.")]
    texts = ["".join(b.get("text", "") for b in m["content"] if "text" in b) for m in msgs]
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert texts == ["Tell me your name", "I am a bot."]


def test_bad_message_role_is_a_validation_error() -> None:
    with pytest.raises(pydantic.ValidationError, match="role"):
        Message.model_validate({"role": "robot", "content": "x"})


def test_errors_carry_context() -> None:
    err = CheckpointCorrupt("bad bytes", thread_id="t/1", checkpoint_id="c1", path="/x/y.json")
    assert isinstance(err, TulipNBError)
    assert (err.thread_id, err.checkpoint_id, err.path) == ("t/1", "c1", "/x/y.json")
    assert "t/1" in str(err) and "/x/y.json" in str(err)
    conflict = CheckpointConflict("lost", thread_id="t", expected="a", actual="b")
    assert (conflict.expected, conflict.actual) == ("a", "b")
    assert isinstance(InvalidThreadId("x"), ValueError)
    cap = CapabilityNotSupported("X", "search", "search")
    assert isinstance(cap, NotImplementedError) and "'search'" in str(cap)
