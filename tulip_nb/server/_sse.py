"""Server-Sent Events for ``/stream`` and ``/resume``: frames from the agent's hooks and steps.

Each frame is ``data: <json>\\n\\n``; the stream always ends with ``data: [DONE]\\n\\n``:

=================  ============================================================================
``think``          after each model call: ``iteration``, ``content`` (what the model wrote),
                   ``tool_calls`` (how many it asked for)
``tool_start``     before a tool runs: ``tool``, ``tool_call_id``, ``arguments``
``tool_complete``  after it ran: ``tool``, ``tool_call_id``, ``result``, ``error``, ``duration_ms``
``done``           the turn is over: ``message``, ``stop_reason`` (and tulip's ``reason``),
                   ``success``, ``iterations``, ``tool_calls``, ``duration_ms``, ``thread_id``,
                   ``checkpoint_id``, ``interrupt`` (the pending question, or null)
``error``          the turn failed: ``error`` (a class name), ``message``, ``status``
=================  ============================================================================

Why hand-written rather than sse-starlette: the protocol is four lines, tulip's clients parse
``data:`` lines split by a blank line, and owning it keeps ``[DONE]`` exact and the server extra
to starlette + uvicorn. The run itself is a separate task fed by the agent's hooks
(``on_model_call`` / ``on_tool_call``) and :meth:`Agent.iterate` steps, so frames leave as they
happen, and a client that disconnects does not cancel the run: the turn still finishes and is saved.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

from tulip_nb.agent import Step
from tulip_nb.agent.events import ModelCall, ToolCalled
from tulip_nb.core import ToolCall
from tulip_nb.core.calls import execution_position

__all__ = ["DONE", "SUCCESS_REASONS", "StreamHook", "done_frame", "encode", "frames"]

DONE = b"data: [DONE]\n\n"
SUCCESS_REASONS = frozenset({"complete", "terminal_tool"})


def encode(frame: dict[str, Any]) -> bytes:
    """One SSE frame."""
    return b"data: " + orjson.dumps(frame, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n\n"


def _start(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_start", "tool": call.name, "tool_call_id": call.id, "arguments": dict(call.arguments)}


class StreamHook:
    """Agent hook that turns model and tool events into frames on ``queue``.

    ``tool_start`` of a batch's first call is sent right after the model call; each later call's
    start follows the previous call's ``tool_complete``, so starts match what actually ran (a call
    after an interrupting one never "starts").
    """

    extra_hook_methods = ("on_step",)  # called by the server after each step, not an agent event

    def __init__(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        self.queue = queue
        self._batch: list[ToolCall] = []
        # Calls are tracked by their index in the batch (providers reuse ids, even inside one
        # response), the batch being the calls of the assistant message at ``self._at``.
        self._at: int | None = None
        self._started: set[int] = set()
        self._completed: set[tuple[int, int]] = set()

    def _put(self, frame: dict[str, Any]) -> None:
        self.queue.put_nowait(frame)

    def _announce(self, k: int, call: ToolCall) -> None:
        self._started.add(k)
        self._put(_start(call))

    def on_model_call(self, event: ModelCall) -> None:
        calls = list(event.response.tool_calls)
        self._put(
            {
                "type": "think",
                "iteration": event.iteration,
                "content": event.response.content or "",
                "tool_calls": len(calls),
            }
        )
        self._batch, self._started, self._at = calls, set(), None
        if calls:
            self._announce(0, calls[0])

    def on_tool_call(self, event: ToolCalled) -> None:
        call = event.call
        i, k = event.position if event.position is not None else (-1, -1)
        if self._at != i:
            if self._at is not None or not self._batch:  # a resumed batch: no model call announced it
                self._batch, self._started = [], set()
            self._at = i
        if k not in self._started:
            self._announce(k, call)
        self._completed.add((i, k))
        self._put(
            {
                "type": "tool_complete",
                "tool": call.name,
                "tool_call_id": call.id,
                "result": event.result,
                "error": event.error,
                "duration_ms": round(event.duration_ms, 3),
            }
        )
        if k >= 0 and k + 1 < len(self._batch):
            self._announce(k + 1, self._batch[k + 1])

    def on_step(self, step: Step) -> None:
        """After each step: a call that completed without running — an interrupt answered on
        resume — gets its ``tool_complete`` (with ``answered: true``) too."""
        for ex in step.tool_results:
            where = execution_position(ex)
            if where is None or where in self._completed:
                continue
            self._completed.add(where)
            self._put(
                {
                    "type": "tool_complete",
                    "tool": ex.tool_name,
                    "tool_call_id": ex.tool_call_id,
                    "result": ex.result,
                    "error": ex.error,
                    "duration_ms": round(ex.duration_ms or 0.0, 3),
                    "answered": True,
                }
            )


def done_frame(steps: list[Step], *, thread_id: str | None, duration_ms: float) -> dict[str, Any]:
    """The ``done`` frame of a turn from the steps it made."""
    last = steps[-1] if steps else None
    reason = (last.stop_reason if last is not None else None) or "max_iterations"
    interrupt = last.interrupt if last is not None else None
    checkpoint_id = next((s.checkpoint_id for s in reversed(steps) if s.checkpoint_id), None)
    return {
        "type": "done",
        "message": last.response.text if last is not None and last.response is not None else "",
        "stop_reason": reason,
        "reason": reason,
        "success": reason in SUCCESS_REASONS,
        "iterations": last.iteration if last is not None else 0,
        "tool_calls": sum(len(s.tool_results) for s in steps),
        "duration_ms": round(duration_ms, 3),
        "thread_id": thread_id,
        "checkpoint_id": checkpoint_id,
        "interrupt": interrupt.to_dict() if interrupt is not None else None,
    }


async def frames(queue: asyncio.Queue[dict[str, Any] | None]) -> AsyncIterator[bytes]:
    """The response body: frames from ``queue`` until ``None``, then ``[DONE]``."""
    while True:
        frame = await queue.get()
        if frame is None:
            break
        yield encode(frame)
    yield DONE
