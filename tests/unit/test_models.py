"""ScriptedModel, ReplayModel, the metadata registry and model resolution."""

from __future__ import annotations

import pytest

from tulip_nb.core import Message, UserError
from tulip_nb.models import (
    ModelError,
    ModelResponse,
    ReplayDiverged,
    ReplayModel,
    ScriptedModel,
    Usage,
    metadata_for,
    register_metadata,
    resolve_model,
    text,
    tool_call,
    tool_calls,
)


async def test_scripted_list_in_order_with_stable_ids_and_estimated_usage() -> None:
    model = ScriptedModel([tool_call("a", x=1), "plain text", text("bye")])
    req = [Message.user("hi")]
    first = await model.complete(req, [])
    assert first.message.tool_calls[0].name == "a" and first.message.tool_calls[0].arguments == {"x": 1}
    call_id = first.message.tool_calls[0].id
    assert call_id.startswith("call_") and len(call_id) == 17
    again = await ScriptedModel([tool_call("a", x=1)]).complete(req, [])
    assert again.message.tool_calls[0].id == call_id  # derived from the request, same in any process
    assert first.usage.prompt_tokens > 0 and first.usage.requests == 1
    assert (await model.complete(req, [])).message.content == "plain text"
    assert (await model.complete(req, [])).message.content == "bye"
    with pytest.raises(ModelError, match="ran out"):
        await model.complete(req, [])
    assert len(model.requests) == 4


async def test_scripted_repeat_last_and_explicit_usage() -> None:
    model = ScriptedModel([ModelResponse(Message.assistant("x"), Usage(3, 4, 7, 0, 1))], repeat_last=True)
    for _ in range(3):
        r = await model.complete([Message.user("q")], [])
        assert r.usage.total_tokens == 7


async def test_scripted_function_sync_and_async() -> None:
    def reply(messages: list[Message], tools: list[dict[str, object]]) -> Message:
        return text(f"{len(messages)} messages, {len(tools)} tools")

    async def areply(messages: list[Message]) -> str:
        return messages[-1].text.upper()

    assert (await ScriptedModel(reply).complete([Message.user("a")], [{}])).message.content == "1 messages, 1 tools"
    assert (await ScriptedModel(areply).complete([Message.user("a")], [])).message.content == "A"


async def test_scripted_rejects_non_assistant() -> None:
    with pytest.raises(ModelError, match="assistant"):
        await ScriptedModel([Message.user("no")]).complete([], [])


def test_tool_calls_helper() -> None:
    m = tool_calls(("a", {"x": 1}), ("b", {}), content="thinking")
    assert [c.name for c in m.tool_calls] == ["a", "b"] and m.content == "thinking"


async def test_replay_serves_recording_and_reports_divergence() -> None:
    recorded = [
        Message.system("s"),
        Message.user("q"),
        Message.assistant(None, tool_call("t", x=1, call_id="call_1").tool_calls),
        Message.tool("42", tool_call_id="call_1", name="t"),
        Message.assistant("It is 42."),
    ]
    model = ReplayModel(recorded)
    r1 = await model.complete(recorded[:2], [])
    assert r1.message.tool_calls[0].id == "call_1"
    r2 = await model.complete([*recorded[:3], Message.tool("41", tool_call_id="call_1", name="t")], [])
    assert r2.message.content == "It is 42."
    assert len(model.divergences) == 1 and model.divergences[0].call_index == 1
    assert model.divergences[0].expected[0].content == "42" and model.remaining == 0
    with pytest.raises(ModelError):
        await model.complete(recorded, [])
    strict = ReplayModel(recorded, strict=True)
    with pytest.raises(ReplayDiverged):
        await strict.complete([Message.user("other")], [])


def test_metadata_registry() -> None:
    assert metadata_for("openai:gpt-4o-mini").context_window == 128_000  # type: ignore[union-attr]
    assert metadata_for("gpt-4o-2024-08-06").context_window == 128_000  # type: ignore[union-attr]
    for name in ("gpt-4.1", "gpt-4.1-mini", "o3", "o4-mini", "gpt-5", "gpt-5-mini"):
        assert metadata_for(name) is not None, name
    assert metadata_for("scripted") is None and metadata_for(None) is None
    register_metadata("my-local-model", context_window=8192)
    assert metadata_for("openai:my-local-model").context_window == 8192  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        register_metadata("bad", context_window=0)


def test_resolve_model() -> None:
    m = ScriptedModel(["x"])
    assert resolve_model(m) is m
    for bad in ("gpt-4o", "anthropic:claude", None, object()):
        with pytest.raises(UserError):
            resolve_model(bad)


def test_import_tulip_nb_does_not_import_optional_stacks() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tulip_nb, tulip_nb.agent, tulip_nb.models, tulip_nb.tools;"
        "bad=[m for m in ('openai','pandas','matplotlib','ipywidgets','starlette') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
