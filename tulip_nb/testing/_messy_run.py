"""Running a messy thread's plans on a real agent, turn by turn, checking each as it goes.

:class:`Builder` owns one thread (or fork): an :class:`~tulip_nb.agent.Agent` whose
:class:`~tulip_nb.models.ScriptedModel` answers from the current turn's :class:`Plan`, a hook that
sees every save, and the thread's message count. A turn that does not do what its plan says (an
extra model request, a different stop reason, another message count) raises ``RuntimeError``
naming the turn: the ground truth is never silently wrong. Tulip turns are written through the
checkpointer's own API (load the latest, append, save), as a tulip agent would leave them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tulip_nb.agent import Agent
from tulip_nb.agent.events import CheckpointSaved
from tulip_nb.agent.turns import RUN_KEY, start_turn
from tulip_nb.core import Message
from tulip_nb.core.errors import CapabilityNotSupported, ContextWindowExceeded
from tulip_nb.core.keys import ITER_KEY, TURNS_KEY
from tulip_nb.core.state import ReasoningStep, ToolExecution
from tulip_nb.models import Model, ModelError, ScriptedModel
from tulip_nb.testing._messy_plan import Plan, Step
from tulip_nb.testing._messy_spec import MessySpec
from tulip_nb.testing._messy_tools import TOOLS_V1, TOOLS_V2

if TYPE_CHECKING:
    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["RESUME_ANSWER", "Builder", "Done", "make_agent"]

RESUME_ANSWER = "approved"
"""What ``agent.resume`` answers an interrupt with."""


class _Script:
    """The scripted model's answers for the turn being run: one step per request, in order."""

    def __init__(self) -> None:
        self.steps: deque[Step] = deque()
        self.where = ""

    def load(self, steps: Sequence[Step], where: str) -> None:
        self.steps = deque(steps)
        self.where = where

    def __call__(self, messages: list[Message]) -> Message:
        if not self.steps:
            raise RuntimeError(f"messy generator: {self.where}: the agent asked the model once more than planned")
        step = self.steps.popleft()
        if isinstance(step, BaseException):
            raise step
        return step


class _LastSave:
    """A hook that remembers the agent's last save."""

    def __init__(self) -> None:
        self.event: CheckpointSaved | None = None

    def on_checkpoint_saved(self, event: CheckpointSaved) -> None:
        self.event = event


def _out_of_step(where: str, what: str) -> RuntimeError:
    return RuntimeError(f"messy generator: {where}: {what}; the agent no longer behaves as the plan assumes")


@dataclass
class Done:
    """A turn once run: its plan, where it started, its run and last checkpoint."""

    plan: Plan
    start: int
    run_id: str
    checkpoint_id: str
    thread_id: str


def make_agent(
    cp: BaseCheckpointer | None,
    spec: MessySpec,
    model: Model,
    *,
    system_prompt: str,
    tools_v2: bool,
    hooks: Sequence[object] = (),
) -> Agent:
    """The agent a messy thread is written with (tools, manager, limits), on ``model``."""
    return Agent(
        model=model,
        tools=list(TOOLS_V2 if tools_v2 else TOOLS_V1),
        system_prompt=system_prompt,
        checkpointer=cp,
        conversation_manager=spec.make_manager(),
        max_iterations=spec.max_iterations,
        checkpoint_every_n_iterations=spec.checkpoint_every,
        hooks=hooks,
    )


class Builder:
    """Runs the plans of one thread (or fork) on a real agent, checking each turn as it goes."""

    def __init__(
        self,
        cp: BaseCheckpointer,
        thread_id: str,
        spec: MessySpec,
        *,
        system_prompt: str,
        tools_v2: bool,
        n: int,
        pending: bool,
    ) -> None:
        self.cp = cp
        self.thread_id = thread_id
        self.spec = spec
        self.system_prompt = system_prompt
        self.script = _Script()
        self.saves = _LastSave()
        script = self.script

        def reply(messages: list[Message]) -> Message:  # a plain function: ScriptedModel inspects it per call
            return script(messages)

        model = ScriptedModel(reply, name="messy-scripted")
        self.agent = make_agent(cp, spec, model, system_prompt=system_prompt, tools_v2=tools_v2, hooks=[self.saves])
        self.n = n
        """Messages in the thread (a fresh thread counts the system prompt its first turn adds)."""
        self.pending = pending
        """The thread ends with an unanswered call (the next turn answers it first)."""

    async def run(self, plan: Plan) -> Done:
        start = self.n + (1 if self.pending else 0)
        where = f"thread {self.thread_id!r} turn {plan.index} (planned {plan.outcome!r})"
        if plan.outcome == "tulip":
            run_id, cid = await self._tulip(plan, where)
        else:
            run_id, cid = await self._agent_turn(plan, where)
        self.n = start + plan.messages
        self.pending = plan.pending
        return Done(plan, start, run_id, cid, self.thread_id)

    async def _agent_turn(self, plan: Plan, where: str) -> tuple[str, str]:
        self.script.load(plan.steps, where)
        self.saves.event = None
        run_id: str | None = None
        try:
            result = await self.agent.run(plan.prompt, thread_id=self.thread_id)
        except (ModelError, ContextWindowExceeded) as e:
            if plan.error != type(e).__name__:
                raise _out_of_step(where, f"the turn raised {type(e).__name__}: {e}") from e
        else:
            if plan.error is not None:
                raise _out_of_step(where, f"expected {plan.error}, the turn ended {result.stop_reason!r}")
            run_id = result.state.run_id
            expected = "interrupted" if plan.resume_steps is not None or plan.pending else None
            expected = expected or ("max_iterations" if plan.outcome == "max_iterations" else "complete")
            if result.stop_reason != expected:
                raise _out_of_step(where, f"the turn stopped {result.stop_reason!r}, expected {expected!r}")
            if plan.resume_steps is not None:
                self.script.load(plan.resume_steps, where + " (resumed)")
                result = await self.agent.resume(RESUME_ANSWER, thread_id=self.thread_id)
                if result.stop_reason != "complete":
                    raise _out_of_step(where, f"the resumed turn stopped {result.stop_reason!r}")
        if self.script.steps:
            raise _out_of_step(where, f"{len(self.script.steps)} planned model answers were not asked for")
        event = self.saves.event
        if event is None:
            raise _out_of_step(where, "the turn saved nothing")
        expected_n = self.n + (1 if self.pending else 0) + plan.messages
        if event.message_count != expected_n:
            raise _out_of_step(where, f"its last save holds {event.message_count} messages, expected {expected_n}")
        if run_id is None:  # the run raised: read the run id from the save it recorded
            state = await self.cp.load(self.thread_id, event.checkpoint_id)
            if state is None:
                raise _out_of_step(where, f"checkpoint {event.checkpoint_id!r} cannot be loaded")
            run_id = state.run_id
        return run_id, event.checkpoint_id

    async def _tulip(self, plan: Plan, where: str) -> tuple[str, str]:
        """Append a turn as a tulip agent writes it: its own run, no tulip_nb bookkeeping."""
        latest = await self.cp.load_checkpoint(self.thread_id)
        if latest is None:
            raise _out_of_step(where, "there is no checkpoint to append a tulip turn to")
        old = latest.state
        stale = old.metadata.get(RUN_KEY)
        superseded = [str(c) for c in old.metadata.get(ITER_KEY) or []]
        # What every agent does between turns (tulip as well, FORMATS.md): history kept, open calls
        # answered, per-turn fields reset, a new run id, the current system prompt first.
        state = start_turn(
            old,
            plan.prompt,
            system_prompt=self.system_prompt,
            metadata=None,
            agent_id=None,
            max_iterations=old.max_iterations,
        )
        # tulip keeps tulip_nb's turn log as it found it (an unknown key) and adds no record
        if TURNS_KEY in old.metadata:
            state.metadata[TURNS_KEY] = old.metadata[TURNS_KEY]
        else:
            state.metadata.pop(TURNS_KEY, None)
        if stale is None:  # tulip writes no tulip_nb turn record: the previous one stays as it was
            state.metadata.pop(RUN_KEY, None)
        else:
            state.metadata[RUN_KEY] = stale
        state.messages = [*state.messages, *plan.tulip_messages]
        calls = [m for m in plan.tulip_messages if m.tool_calls]
        executions = [
            ToolExecution(
                tool_name=c.tool_calls[0].name,
                tool_call_id=c.tool_calls[0].id,
                arguments=dict(c.tool_calls[0].arguments),
                result=r.content,
                duration_ms=0.2,
            )
            for c, r in zip(calls, [m for m in plan.tulip_messages if m.role == "tool"], strict=True)
        ]
        state.iteration = sum(1 for m in plan.tulip_messages if m.role == "assistant")
        state.tool_executions = executions
        state.tool_history = [ex.tool_name for ex in executions]
        state.reasoning_steps = [
            ReasoningStep(iteration=k + 1, thought=None, tool_calls=list(c.tool_calls), tool_results=[ex])
            for k, (c, ex) in enumerate(zip(calls, executions, strict=True))
        ]
        state.prompt_tokens_used = 40 * state.iteration
        state.completion_tokens_used = 10 * state.iteration
        state.total_tokens_used = 50 * state.iteration
        cid = await self.cp.save(state, self.thread_id)
        if self.spec.tulip_deletes_iteration_saves:
            for old_id in superseded:
                try:
                    await self.cp.delete(self.thread_id, old_id)
                except CapabilityNotSupported:
                    break
        return state.run_id, cid
