"""Planning a messy thread: each turn drawn from the seed, with what it will record.

A :class:`Plan` says what the scripted model answers at each request of one turn (an assistant
message, or an exception to raise) and what the turn will leave in the thread: messages, tool
calls, tool errors, idempotent hits, the error class. :class:`Planner` draws plans from a
:class:`~tulip_nb.testing.MessySpec` and a ``random.Random``, keeping the lookup keys the
thread already holds (a key looked up before is a cache hit).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import orjson

from tulip_nb.core import Message, ToolCall
from tulip_nb.models import ContextWindowExceeded as ProviderContextExceeded
from tulip_nb.models import ModelError, ModelHTTPError
from tulip_nb.testing._messy_spec import OUTCOME_RATES, MessySpec
from tulip_nb.testing._messy_tools import lookup_record, metric_fails

__all__ = ["Plan", "Planner", "Step"]

KEYS = 16
"""``lookup_record`` keys are drawn from ``k0`` .. ``k15``: repeats (cache hits) are common."""

Step = Message | BaseException
"""One model request: the assistant message it answers, or the exception it raises."""


@dataclass
class Plan:
    """One turn as planned: what the model answers, what the turn will record."""

    index: int
    outcome: str
    prompt: str
    steps: list[Step] = field(default_factory=list)
    resume_steps: list[Step] | None = None
    error: str | None = None
    tool_calls: list[str] = field(default_factory=list)
    tool_errors: int = 0
    cache_hits: int = 0
    keys: list[str] = field(default_factory=list)
    facts: tuple[str, ...] = ()
    messages: int = 1
    """Messages the turn appends after any "outcome unknown" result closing the previous turn."""
    pending: bool = False
    """The turn ends with an unanswered call (an interrupt left pending)."""
    tulip_messages: list[Message] = field(default_factory=list)

    @property
    def requests(self) -> int:
        """Model requests: one per step (a tulip turn: one per assistant message it wrote)."""
        tulip = sum(1 for m in self.tulip_messages if m.role == "assistant")
        return len(self.steps) + len(self.resume_steps or ()) + tulip


class Planner:
    """Draws each turn's plan from the seed; knows which lookup keys the thread already holds."""

    def __init__(self, spec: MessySpec, rng: random.Random, *, tools_v2: bool, seen: set[str]) -> None:
        self.spec = spec
        self.rng = rng
        self.tools_v2 = tools_v2
        self.seen = seen

    def outcome(self, index: int) -> str:
        if index == 0:
            return "answered"
        r = self.rng.random()
        for outcome, rate in OUTCOME_RATES.items():
            p = getattr(self.spec, rate)
            if r < p:
                return outcome
            r -= p
        return "answered"

    def plan(self, index: int, outcome: str, *, force_metric_error: bool = False) -> Plan:
        rng = self.rng
        facts: tuple[str, ...] = ()
        if rng.random() < 0.25:
            facts = (f"fact F{index} = {rng.randint(1000, 9999)}",)
        said = f" Note: {facts[0]}." if facts else ""
        plan = Plan(index, outcome, f"T{index}: what do the records say?{said}", facts=facts)
        if force_metric_error:  # a call the old tool failed on: the changed tool shows at once
            self._call(plan, [self._metric(fail=True)])
            self._answer(plan, f"A{index}: done.")
            return plan
        getattr(self, f"_{outcome}")(plan)
        return plan

    # -- one kind of turn each ----------------------------------------------------------------
    def _answered(self, plan: Plan) -> None:
        rng, i = self.rng, plan.index
        if i > 0 and rng.random() < self.spec.big_output_rate:
            if rng.random() < 0.5:
                self._call(plan, [self._lookup()])
            kb = rng.randint(5, 30)
            self._call(plan, [("fetch_report", {"kb": kb})])
            self._answer(plan, f"A{i}: the report ({kb} kB) is in.")
            return
        kind = rng.choices(("plain", "lookup", "metric", "both", "two"), (3, 3, 3, 1, 1))[0]
        if kind in ("lookup", "two"):
            self._call(plan, [self._lookup()])
        if kind in ("metric", "two"):
            self._call(plan, [self._metric()])
        if kind == "both":
            self._call(plan, [self._lookup(), self._metric()])
        self._answer(plan, f"A{i}: {'noted' if kind == 'plain' else 'done'}.")

    def _error(self, plan: Plan) -> None:
        rng = self.rng
        if rng.random() < 0.4:
            self._call(plan, [self._lookup() if rng.random() < 0.5 else self._metric()])
        error: ModelError = (
            ModelHTTPError("provider answered 503: overloaded", status_code=503)
            if rng.random() < 0.5
            else ModelError("provider 500: internal error")
        )
        plan.steps.append(error)
        plan.error = type(error).__name__

    def _context_exceeded(self, plan: Plan) -> None:
        # Digits cost at least a token per 3 characters, an estimate one per 4: 6 characters per
        # token of window is more than the window under every counter.
        log = "0123456789" * (6 * self.spec.context_length // 10)
        plan.prompt = f"T{plan.index}: summarise this log: {log}"
        plan.facts = ()
        plan.error = "ContextWindowExceeded"
        if self.spec.manager == "null":  # the provider reports it; the agent retries once
            plan.steps += [ProviderContextExceeded("prompt is too long", status_code=400) for _ in range(2)]

    def _max_iterations(self, plan: Plan) -> None:
        key = self._lookup()
        for k in range(self.spec.max_iterations):
            self._call(plan, [key if k % 2 else self._metric(fail=False)])

    def _interrupted(self, plan: Plan) -> None:
        rng, i = self.rng, plan.index
        if rng.random() < 0.5:
            self._call(plan, [self._lookup()])
        plan.steps.append(_assistant([("ask_human", {"question": f"Approve step {i}?"})]))
        plan.tool_calls.append("ask_human")
        plan.messages += 1
        if rng.random() < self.spec.resume_rate:
            plan.outcome = "answered"
            plan.resume_steps = [Message.assistant(f"A{i}: approved, done.")]
            plan.messages += 2  # the answer's result, then the model's answer
        else:
            plan.pending = True

    def _tulip(self, plan: Plan) -> None:
        rng, i = self.rng, plan.index
        out: list[Message] = []
        if rng.random() < 0.5:
            key = f"t{i}"  # a key no agent turn asks for: tulip's own cache is not modelled
            call = ToolCall(id=f"call_{rng.getrandbits(48):012x}", name="lookup_record", arguments={"key": key})
            result = _render(_run_tool(lookup_record, key=key))
            out += [Message.assistant(None, [call]), Message.tool(result, tool_call_id=call.id, name=call.name)]
            plan.tool_calls.append("lookup_record")
        out.append(Message.assistant(f"A{i}: answered by tulip."))
        plan.tulip_messages = out
        plan.messages += len(out)

    # -- steps ----------------------------------------------------------------------------------
    def _lookup(self) -> tuple[str, dict[str, Any]]:
        return ("lookup_record", {"key": f"k{self.rng.randrange(KEYS)}"})

    def _metric(self, *, fail: bool | None = None) -> tuple[str, dict[str, Any]]:
        if fail is None:
            fail = self.rng.random() < self.spec.tool_error_rate
        n = 7 * self.rng.randint(1, 30) if fail else 7 * self.rng.randint(0, 30) + self.rng.randint(1, 6)
        return ("query_metric", {"n": n})

    def _call(self, plan: Plan, calls: list[tuple[str, dict[str, Any]]]) -> None:
        plan.steps.append(_assistant(calls))
        plan.messages += 1 + len(calls)
        for name, args in calls:
            plan.tool_calls.append(name)
            if name == "lookup_record":
                key = args["key"]
                plan.cache_hits += key in self.seen
                self.seen.add(key)
                plan.keys.append(key)
            elif name == "query_metric" and not self.tools_v2 and metric_fails(args["n"]):
                plan.tool_errors += 1

    def _answer(self, plan: Plan, content: str) -> None:
        plan.steps.append(Message.assistant(content))
        plan.messages += 1


def _assistant(calls: list[tuple[str, dict[str, Any]]]) -> Message:
    return Message.assistant(None, [ToolCall(id="", name=n, arguments=a) for n, a in calls])


def _run_tool(fn: Any, **kwargs: Any) -> Any:
    """Run one of this module's async tools outside an agent (they never await anything)."""
    coro = fn(**kwargs)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError(f"{fn.__name__} awaited something")  # pragma: no cover


def _render(result: Any) -> str:
    return result if isinstance(result, str) else orjson.dumps(result).decode()
