"""States and thread ids the conformance suites save: every field set, and the awkward ids."""

from __future__ import annotations

from datetime import UTC, datetime

from tulip_nb.core import AgentState, Message, ReasoningStep, ToolCall, ToolExecution

__all__ = ["ODD_THREAD_IDS", "full_state"]

ODD_THREAD_IDS = [
    "a/b/c",
    "tenant:42:chat",
    "issue #1",
    "with spaces  and\ttabs",
    "unicodé-线程-🌷",
    "..",
    "../../etc/passwd",
    ".",
    "x" * 500,
    "a#1",
    "a_1",
    "trailing/",
    "%2F-percent",
]


def full_state(n_turns: int = 2, *, marker: str = "m") -> AgentState:
    """A state with every AgentState field set to a non-default value, plus unknown keys."""
    ts = datetime(2026, 11, 30, 6, 53, 58, 901263, tzinfo=UTC)
    messages = [
        Message(role="system", content="You are a test bot.", metadata={"tulip_at": "2026-11-30T06:53:58Z"}),
    ]
    for i in range(n_turns):
        call = ToolCall(id=f"call_{marker}{i}", name="lookup", arguments={"q": f"{marker}{i}", "n": [1, 2]})
        messages += [
            Message(role="user", content=f"question {i} {marker}", future_key={"nested": [i]}),
            Message(role="assistant", content=None, tool_calls=[call]),
            Message(role="tool", content=f"result {i}", tool_call_id=call.id, name="lookup"),
            Message(role="assistant", content=f"answer {i} ünïcode ✓"),
        ]
    bad_call = ToolCall(id="call_bad", name="lookup", arguments={}, malformed_arguments="{not json", extra_k=1)
    messages.append(Message(role="assistant", content="partial", tool_calls=[bad_call]))
    execution = ToolExecution(
        tool_name="lookup",
        tool_call_id="call_m0",
        arguments={"q": "m0"},
        result='{"rows": [1, 2]}',
        error=None,
        duration_ms=1.5,
        timestamp=ts,
        idempotent_cache_hit=True,
        exec_extra="kept",
    )
    return AgentState(
        run_id="950b6bf706fa48dfa414d48249d708f9",
        agent_id="agent-7",
        messages=messages,
        iteration=3,
        max_iterations=12,
        tool_executions=[execution],
        reasoning_steps=[
            ReasoningStep(
                iteration=1,
                thought="think",
                tool_calls=[messages[2].tool_calls[0]],
                tool_results=[execution],
                reflection="ok",
                confidence_delta=0.25,
                timestamp=ts,
            )
        ],
        confidence=0.5,
        confidence_threshold=0.9,
        confidence_history=[0.1, 0.5],
        tool_history=["lookup", "lookup"],
        tool_loop_threshold=4,
        tool_loop_read_only_threshold=7,
        tool_loop_read_only_tools=["grep", "read"],
        tool_loop_warnings=[("lookup", 3)],
        terminal_tools=["finish", "task_complete"],
        total_tokens_used=60,
        prompt_tokens_used=20,
        completion_tokens_used=40,
        cache_creation_tokens_used=1,
        cache_read_tokens_used=2,
        cached_tokens_used=3,
        cache_write_tokens_used=4,
        reported_cost_usd=0.01,
        reported_cost_calls=2,
        token_budget=100_000,
        input_price_per_mtok=0.15,
        output_price_per_mtok=0.6,
        cost_usd_used=0.002,
        cost_budget_usd=1.5,
        completion_mode="explicit",
        errors=["RuntimeError: boom"],
        provider_state={"response_id": "resp_1"},
        metadata={"user": "u42", "nested": {"a": [1, {"b": None}]}},
        started_at=ts,
        updated_at=ts,
        unknown_top_level={"future": True},
    )
