"""Pure state transitions of a turn: start it, close dangling calls, find idempotent results.

Kept apart from the loop so every rule the tulip format implies is one small, testable function.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from tulip_nb.core import Message, utcnow
from tulip_nb.core.calls import (
    POSITION_KEY,
    CallRef,
    block_end,
    execution_position,
    last_model_call,
    results_of,
    unanswered_calls,
)
from tulip_nb.core.keys import ITER_KEY, RUN_KEY
from tulip_nb.core.state import AgentState, ToolExecution
from tulip_nb.core.turns import record_turn

__all__ = [
    "ITER_KEY",
    "PER_TURN_FIELDS",
    "POSITION_KEY",
    "RUN_KEY",
    "canonical_args",
    "close_unanswered_calls",
    "coerce_messages",
    "execution",
    "execution_position",
    "find_idempotent_result",
    "last_assistant",
    "pending_calls",
    "pending_positions",
    "render_result",
    "run_info",
    "start_turn",
]

PER_TURN_FIELDS: tuple[str, ...] = (
    "iteration",
    "tool_executions",
    "reasoning_steps",
    "confidence",
    "confidence_history",
    "tool_history",
    "tool_loop_warnings",
    "total_tokens_used",
    "prompt_tokens_used",
    "completion_tokens_used",
    "cache_creation_tokens_used",
    "cache_read_tokens_used",
    "cached_tokens_used",
    "cache_write_tokens_used",
    "reported_cost_usd",
    "reported_cost_calls",
    "cost_usd_used",
    "errors",
)
"""Fields that describe the last turn only; a new turn starts them from their defaults."""

OUTCOME_UNKNOWN = (
    "Error: OutcomeUnknown: the run stopped before this call returned; it may or may not have "
    "taken effect. Check before calling it again."
)


def run_info(state: AgentState) -> dict[str, Any]:
    """The turn status record (empty for a thread saved by another SDK)."""
    info = state.metadata.get(RUN_KEY)
    return dict(info) if isinstance(info, dict) else {}


def coerce_messages(items: Iterable[Any]) -> list[Message]:
    """Messages from Message objects or dicts (``content`` as text or ``[{"text": ...}]`` blocks)."""
    out = []
    for item in items:
        if isinstance(item, Message):
            out.append(item)
            continue
        data = dict(item)
        content = data.get("content")
        if isinstance(content, list):
            data["content"] = "".join(b.get("text", "") for b in content if isinstance(b, dict)) or None
        out.append(Message.model_validate(data))
    return out


def close_unanswered_calls(messages: list[Message]) -> list[Message]:
    """Answer every tool call that has no result with an "outcome unknown" error result.

    A provider rejects a conversation with a dangling call, and a killed run leaves one. Calls are
    paired with results by position (:mod:`tulip_nb.core.calls`), so a reused or empty id never
    passes for an answer; the new result goes right after the call's block, in call order.
    """
    out: list[Message] | None = None
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        if m.role != "assistant" or not m.tool_calls:
            if out is not None:
                out.append(m)
            i += 1
            continue
        end = block_end(messages, i)
        missing = [k for k, t in enumerate(results_of(messages, i)) if t is None]
        if missing and out is None:
            out = list(messages[:i])
        if out is not None:
            out.extend(messages[i:end])
            for k in missing:
                call = m.tool_calls[k]
                out.append(Message.tool(OUTCOME_UNKNOWN, tool_call_id=call.id, name=call.name))
        i = end
    return list(messages) if out is None else out


def last_assistant(messages: list[Message]) -> int | None:
    """Index of the last assistant message, or None (:func:`~tulip_nb.core.calls.last_model_call`)."""
    return last_model_call(messages)


def pending_positions(messages: list[Message]) -> list[CallRef]:
    """Positions of the calls of the last assistant message that have no result yet."""
    i = last_assistant(messages)
    if i is None:
        return []
    return [(i, k) for k in unanswered_calls(messages, i)]


def pending_calls(messages: list[Message]) -> list[Any]:
    """Tool calls of the last assistant message that have no result yet."""
    return [messages[i].tool_calls[k] for i, k in pending_positions(messages)]


def _default(name: str) -> Any:
    return AgentState.model_fields[name].get_default(call_default_factory=True)


def _turn_defaults() -> dict[str, Any]:
    """Fresh defaults of the per-turn fields (pydantic's ``get_default`` inspects the factory's
    signature on every call: ~2 ms a turn, so the factories are looked up once)."""
    makers = _DEFAULT_MAKERS
    if not makers:
        for name in PER_TURN_FIELDS:
            f = AgentState.model_fields[name]
            factory = f.default_factory
            value = f.default
            makers[name] = factory if factory is not None else (lambda v=value: v)
    return {name: make() for name, make in makers.items()}


_DEFAULT_MAKERS: dict[str, Any] = {}


def start_turn(
    existing: AgentState | None,
    prompt: str,
    *,
    system_prompt: str | None,
    metadata: dict[str, Any] | None,
    agent_id: str | None,
    max_iterations: int,
) -> AgentState:
    """The state a new turn starts from.

    Keeps the history (dangling calls answered), ``metadata`` (merged with the new keys),
    ``provider_state`` and anything unknown; resets the per-turn fields; puts the current system
    prompt first; appends the user's prompt.
    """
    now = utcnow()
    messages = close_unanswered_calls(existing.messages) if existing else []
    if system_prompt is not None:
        system = Message.system(system_prompt)
        if messages and messages[0].role == "system":
            if messages[0].content != system_prompt:
                messages[0] = system
        else:
            messages.insert(0, system)
    messages.append(Message.user(prompt))
    merged = {**(existing.metadata if existing else {}), **(metadata or {})}
    merged.pop(ITER_KEY, None)  # the ids of the previous turn's mid-turn saves
    base = existing if existing is not None else AgentState()
    update: dict[str, Any] = _turn_defaults()
    update.update(
        run_id=_default("run_id"),
        messages=messages,
        metadata=merged,
        max_iterations=max_iterations,
        started_at=now,
        updated_at=now,
    )
    if agent_id is not None:
        update["agent_id"] = agent_id
    state = base.model_copy(update=update)
    state.metadata[RUN_KEY] = {"status": "running", "run_id": state.run_id}
    record_turn(state.metadata, messages, {"outcome": "running"})
    return state


def canonical_args(arguments: Any) -> bytes:
    """The canonical JSON of tool arguments: keys sorted at every level, integral floats as ints.

    Two calls are "the same call" for idempotency (and the replay's recorded tools) when these
    bytes are equal, whatever key order or number spelling a store or provider handed back.
    """
    return orjson.dumps(_normal_numbers(arguments), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)


def _normal_numbers(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, dict):
        return {k: _normal_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal_numbers(v) for v in value]
    return value


def render_result(result: Any) -> str:
    """A tool's return value as the tool message text (str as is, anything else as JSON)."""
    if isinstance(result, str):
        return result
    return orjson.dumps(result, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def find_idempotent_result(state: AgentState, tool_name: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, result)`` if ``tool_name(arguments)`` already succeeded in this thread.

    The seed's rule: a call is a cache hit only when the same tool already ran with canonically
    equal arguments, and the result served is *that* execution's. Looks in this turn's executions
    first (also those restored from an iteration checkpoint after a crash), then in the history of
    earlier turns, where each call is paired with its result by position, never by id.
    """
    key = canonical_args(arguments)
    for ex in reversed(state.tool_executions):
        if ex.tool_name == tool_name and ex.error is None and canonical_args(ex.arguments) == key:
            return True, ex.result
    messages = state.messages
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role != "assistant" or not m.tool_calls:
            continue
        if not any(c.name == tool_name and c.malformed_arguments is None for c in m.tool_calls):
            continue
        for k, t in enumerate(results_of(messages, i)):
            call = m.tool_calls[k]
            if t is None or call.name != tool_name or call.malformed_arguments is not None:
                continue
            answer = messages[t].content or ""
            if answer.startswith("Error:"):
                continue
            if canonical_args(call.arguments) == key:
                return True, answer
    return False, None


def execution(
    tool_name: str,
    call_id: str,
    arguments: dict[str, Any],
    *,
    result: Any = None,
    error: str | None = None,
    duration_ms: float = 0.0,
    cache_hit: bool = False,
    position: CallRef | None = None,
) -> ToolExecution:
    """A ToolExecution as tulip stores it: ``result`` is the text the model read (None on error);
    ``position`` (the call's identity) goes in the extra key :data:`POSITION_KEY`."""
    extra: dict[str, Any] = {POSITION_KEY: list(position)} if position is not None else {}
    return ToolExecution(
        tool_name=tool_name,
        tool_call_id=call_id,
        arguments=arguments,
        result=None if error is not None else render_result(result),
        error=error,
        duration_ms=duration_ms,
        idempotent_cache_hit=cache_hit,
        **extra,
    )
