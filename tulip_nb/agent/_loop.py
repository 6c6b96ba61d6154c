"""The Think -> Execute loop for one turn, one iteration at a time.

:class:`TurnRunner` owns the working :class:`AgentState` of one turn (or of a resumed turn) and
advances it with :meth:`TurnRunner.iteration`; the agent wraps it into ``run``, ``iterate`` and
``resume``. The runner makes every save itself, so a :class:`Step` carries the id of the save that
ended it.

Rules it implements (seed 000 and FORMATS.md):

- Think sends the conversation manager's *view* of ``state.messages``; the full history is kept.
- Execute runs the requested calls in order. An exception, unknown tool, invalid JSON or invalid
  arguments becomes the result ``"Error: <Type>: <msg>"`` plus a ToolExecution with ``error``.
- ``idempotent`` tools called again with the same arguments return the recorded result.
- A tool raising :class:`~tulip_nb.tools.Interrupt` stops the turn: state saved, question pending.
- Stop when the model answers without tool calls, a terminal tool ran, or ``max_iterations``.
- With ``every=N``, save after every N-th iteration that executed tools (ids recorded in
  ``state.metadata["_tulip_iteration_checkpoints"]``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from tulip_nb.agent._errors import ResumeNeedsResponse
from tulip_nb.agent._result import PendingInterrupt, Step, StopReason
from tulip_nb.agent._turn import (
    ITER_KEY,
    RUN_KEY,
    execution,
    execution_position,
    find_idempotent_result,
    last_assistant,
    pending_positions,
    render_result,
    run_info,
)
from tulip_nb.agent.events import (
    CheckpointSaved,
    InterruptAnswered,
    InterruptRaised,
    IterationDone,
    ModelCall,
    ToolCalled,
    emit,
)
from tulip_nb.core import Message, ToolCall, utcnow
from tulip_nb.core.keys import COUNTS_KEY, ITERATION_KEY, RUN_ID_KEY, SOURCE_KEY, STATE_KEY
from tulip_nb.core.state import AgentState, ReasoningStep, ToolExecution
from tulip_nb.core.turns import outcome_for, record_turn
from tulip_nb.memory.checkpointer import new_checkpoint_id
from tulip_nb.memory.counts import Lineage, save_counts
from tulip_nb.models import ContextWindowExceeded, ModelError, Usage
from tulip_nb.tools import Interrupt, ToolArgumentsInvalid, ToolNotFound

if TYPE_CHECKING:
    from tulip_nb.memory.checkpointer import BaseCheckpointer
    from tulip_nb.memory.conversation.base import ConversationManager
    from tulip_nb.models import Model
    from tulip_nb.tools import Tool

__all__ = ["TurnHost", "TurnRunner", "snapshot"]


class TurnHost(Protocol):
    """What a :class:`TurnRunner` uses of the agent that runs it (:class:`~tulip_nb.agent.Agent` is
    one): its model and tools, where it saves, its hooks and its conversation manager."""

    @property
    def model(self) -> Model: ...
    @property
    def tools_by_name(self) -> dict[str, Tool]: ...
    @property
    def tool_schemas(self) -> list[dict[str, Any]]: ...
    @property
    def checkpointer(self) -> BaseCheckpointer | None: ...
    @property
    def hooks(self) -> tuple[Any, ...]: ...
    @property
    def strict_concurrency(self) -> bool: ...
    @property
    def conversation_manager(self) -> ConversationManager: ...


def snapshot(state: AgentState) -> AgentState:
    """An independent copy of ``state`` (lists and metadata copied; messages are immutable)."""
    return state.model_copy(
        update={
            "messages": list(state.messages),
            "tool_executions": list(state.tool_executions),
            "reasoning_steps": list(state.reasoning_steps),
            "tool_history": list(state.tool_history),
            "errors": list(state.errors),
            "metadata": {
                k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                for k, v in state.metadata.items()
            },
        }
    )


def _elapsed_ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


class TurnRunner:
    """Advances one turn of one thread; see the module docstring."""

    def __init__(
        self,
        agent: TurnHost,
        state: AgentState,
        thread_id: str | None,
        *,
        every: int | None,
        parent: str | None = None,
        lineage: Lineage | None = None,
    ) -> None:
        self.agent = agent
        self.lineage = lineage or Lineage.new()
        """The thread's lineage counters as of its latest save (:mod:`tulip_nb.memory.counts`)."""
        self.parent = parent
        """The thread's latest checkpoint as this turn knows it ("" = empty thread): with
        ``agent.strict_concurrency`` every save is a compare-and-swap on it."""
        self.state = state
        self.thread_id = thread_id
        self.every = every
        self.usage = Usage()
        self.executions: list[ToolExecution] = []
        self.checkpoint_id: str | None = None
        self.stop_reason: StopReason | None = None
        self.interrupt: PendingInterrupt | None = None

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    # -- saving ---------------------------------------------------------------------------------
    def _set_status(self, status: str, **extra: Any) -> None:
        state = self.state
        state.metadata[RUN_KEY] = {"status": status, "run_id": state.run_id, **extra}
        if status != "running":
            outcome = outcome_for(status, stop_reason=extra.get("stop_reason"), error=extra.get("error"))
            record = {"outcome": outcome, "error": extra.get("error"), "run_id": state.run_id}
            record_turn(state.metadata, state.messages, record)
        else:
            record_turn(state.metadata, state.messages, {"outcome": "running"})

    async def save(self, kind: str) -> str | None:
        """Save the working state (if the agent has a checkpointer and this run a thread id)."""
        state = self.state
        manager_state = self.agent.conversation_manager.get_state()
        if manager_state or STATE_KEY in state.metadata:
            state.metadata[STATE_KEY] = manager_state
        state.updated_at = utcnow()
        cp = self.agent.checkpointer
        if cp is None or self.thread_id is None:
            return None
        cid = new_checkpoint_id()
        if kind == "iteration":
            state.metadata[ITER_KEY] = [*state.metadata.get(ITER_KEY, []), cid]
        else:
            # A turn end, an interrupt or an early stop: tulip clears this list at every run end
            # and reads ids left here as its own crashed turn's saves, deleting them at its next
            # turn end; tulip_nb keeps its mid-turn saves.
            state.metadata.pop(ITER_KEY, None)
        meta = {SOURCE_KEY: kind, RUN_ID_KEY: state.run_id, ITERATION_KEY: state.iteration}
        if kind != "iteration":
            # the thread's counters at a turn's end (or stop), so a corpus summary reads this header,
            # not states; counting is a pass over the messages, so once per turn, not per model call
            meta[COUNTS_KEY] = save_counts(state, self.lineage, kind)
        expected = (self.parent or "") if self.agent.strict_concurrency else None
        cid = await cp.save(state, self.thread_id, cid, meta, expected_parent=expected)
        self.checkpoint_id = self.parent = cid
        self.lineage = self.lineage.after(state, kind)
        await emit(
            self.agent.hooks,
            "on_checkpoint_saved",
            CheckpointSaved(self.thread_id, cid, kind, state.iteration, len(state.messages)),
        )
        return cid

    async def _finish(self) -> str | None:
        """The turn is over: let the manager see it (its state is saved with the thread), then save."""
        self.agent.conversation_manager.apply_management(self.agent)
        self._set_status("complete", stop_reason=self.stop_reason)
        return await self.save("final")

    async def fail(self, error: BaseException) -> None:
        """Record ``error`` in the state and save it (the run is about to raise)."""
        self.state.errors = [*self.state.errors, f"{type(error).__name__}: {error}"]
        self.stop_reason = "error"
        self._set_status("error", error=f"{type(error).__name__}: {error}")
        try:
            await self.save("error")
        except Exception as save_error:
            error.add_note(f"tulip_nb: saving the failed run also failed: {save_error!r}")

    async def stop_early(self) -> None:
        """The caller stopped stepping: save so ``resume(thread_id=...)`` continues from here."""
        if not self.done:
            await self.save("stopped")

    # -- resume ---------------------------------------------------------------------------------
    async def answer_interrupt(self, response: Any) -> None:
        """Answer the pending interrupted call with ``response`` (the human's answer)."""
        info = run_info(self.state)
        data = info.get("pending")
        if not isinstance(data, dict):
            raise ResumeNeedsResponse("nothing is pending an answer in this thread", thread_id=self.thread_id)
        pending = PendingInterrupt.from_dict(data)
        # The interrupted call is the first open call of the last assistant message (calls run in
        # order and an interrupt stops the batch); its recorded position must still name it.
        open_calls = pending_positions(self.state.messages)
        where = pending.position if pending.position is not None else None
        first = open_calls[0] if open_calls else None
        call = self.state.messages[first[0]].tool_calls[first[1]] if first is not None else None
        if call is None or (where is not None and where != first) or call.name != pending.tool_name:
            raise ResumeNeedsResponse("the interrupted call is no longer open in this thread", thread_id=self.thread_id)
        content = render_result(response)
        self.state.messages.append(Message.tool(content, tool_call_id=call.id, name=pending.tool_name))
        ex = execution(pending.tool_name, call.id, pending.arguments, result=response, position=first)
        self._record(ex)
        self._set_status("running")
        await emit(
            self.agent.hooks,
            "on_interrupt_answered",
            InterruptAnswered(
                self.thread_id,
                self.state.iteration,
                pending.tool_name,
                pending.tool_call_id,
                pending.question,
                response,
            ),
        )

    async def finish_batch(self, *, force: bool = False) -> Step | None:
        """Run the calls of the last assistant message still without results (after a resume).

        Returns the completed iteration's step, or None when there was nothing to finish
        (``force`` finishes the iteration even when the only open call was just answered).
        """
        positions = pending_positions(self.state.messages)
        i = last_assistant(self.state.messages)
        if i is None or not self.state.messages[i].tool_calls or (not positions and not force):
            return None
        await self._execute(positions)
        return await self._end_iteration(i, (), Usage(), resumed=True)

    # -- one iteration --------------------------------------------------------------------------
    async def iteration(self) -> Step | None:
        """Think once and execute the requested tools; None if the turn is already over."""
        state = self.state
        if self.done:
            return None
        if state.iteration >= state.max_iterations:
            self.stop_reason = "max_iterations"
            await self._finish()
            return None
        state.iteration += 1
        agent = self.agent
        schemas = agent.tool_schemas
        manager = agent.conversation_manager
        view = await manager.aapply(list(state.messages), tools=schemas, state=state)
        t0 = time.perf_counter()
        try:
            response = await agent.model.complete(view, schemas)
        except ContextWindowExceeded as e:
            manager.reduce_context(agent, e)
            view = await manager.aapply(list(state.messages), tools=schemas, state=state)
            t0 = time.perf_counter()
            response = await agent.model.complete(view, schemas)
        duration = _elapsed_ms(t0)
        message = response.message
        if message.role != "assistant":
            raise ModelError(f"model answered with a {message.role!r} message, expected 'assistant'")
        state.messages.append(message)
        index = len(state.messages) - 1
        self._count(response.usage)
        if response.provider_state is not None:
            state.provider_state = response.provider_state
        await emit(
            agent.hooks,
            "on_model_call",
            ModelCall(self.thread_id, state.iteration, tuple(view), message, response.usage, duration),
        )
        if message.tool_calls:
            await self._execute([(index, k) for k in range(len(message.tool_calls))])
        return await self._end_iteration(index, tuple(view), response.usage, resumed=False)

    async def _end_iteration(self, index: int, request: tuple[Message, ...], usage: Usage, *, resumed: bool) -> Step:
        state = self.state
        message = state.messages[index]
        # This iteration's executions: those recorded for the calls of ``messages[index]`` (by
        # position; ids are not unique), in call order.
        mine = [(p, ex) for ex in state.tool_executions if (p := execution_position(ex)) and p[0] == index]
        results = tuple(ex for _, ex in sorted(mine, key=lambda item: item[0][1]))
        if message.tool_calls and not self.interrupt:
            state.reasoning_steps.append(
                ReasoningStep(
                    iteration=state.iteration,
                    thought=message.content,
                    tool_calls=list(message.tool_calls),
                    tool_results=list(results),
                )
            )
        terminal = set(state.terminal_tools) & set(self.agent.tools_by_name)
        cid: str | None = None
        if self.interrupt is not None:
            self._set_status("interrupted", pending=self.interrupt.to_dict())
            cid = await self.save("interrupt")
        elif not message.tool_calls:
            self.stop_reason = "complete"
        elif any(c.name in terminal for c in message.tool_calls):
            self.stop_reason = "terminal_tool"
        elif state.iteration >= state.max_iterations:
            self.stop_reason = "max_iterations"
        if self.stop_reason is not None and self.stop_reason != "interrupted":
            cid = await self._finish()
        elif cid is None and self._iteration_save_due(message, resumed):
            cid = await self.save("iteration")
        await emit(
            self.agent.hooks,
            "on_iteration",
            IterationDone(self.thread_id, state.iteration, message, results, cid),
        )
        return Step(
            iteration=state.iteration,
            request=request,
            tools=tuple(self.agent.tool_schemas),
            response=message,
            usage=usage,
            tool_results=results,
            state=snapshot(state),
            checkpoint_id=cid,
            stop_reason=self.stop_reason,
            interrupt=self.interrupt,
        )

    def _iteration_save_due(self, message: Message, resumed: bool) -> bool:
        """Every N-th iteration that executed tools, in a run (a resume saves only at its end)."""
        if not self.every or resumed or not message.tool_calls:
            return False
        return len(self.state.reasoning_steps) % self.every == 0

    def _count(self, usage: Usage) -> None:
        s = self.state
        s.prompt_tokens_used += usage.prompt_tokens
        s.completion_tokens_used += usage.completion_tokens
        s.total_tokens_used += usage.total_tokens or usage.prompt_tokens + usage.completion_tokens
        s.cached_tokens_used += usage.cached_tokens
        self.usage = self.usage + usage

    # -- execute --------------------------------------------------------------------------------
    def _record(self, ex: ToolExecution) -> None:
        self.state.tool_executions.append(ex)
        self.state.tool_history.append(ex.tool_name)
        self.executions.append(ex)

    async def _execute(self, positions: list[tuple[int, int]]) -> None:
        for position in positions:
            call = self.state.messages[position[0]].tool_calls[position[1]]
            try:
                await self._call_one(call, position)
            except Interrupt as intr:
                self.stop_reason = "interrupted"
                payload = intr.payload
                try:
                    render_result(payload)
                except TypeError:
                    payload = repr(payload)
                self.interrupt = PendingInterrupt(
                    intr.question, call.name, call.id, dict(call.arguments), payload, position=position
                )
                await emit(
                    self.agent.hooks,
                    "on_interrupt",
                    InterruptRaised(
                        self.thread_id,
                        self.state.iteration,
                        intr.question,
                        call.name,
                        call.id,
                        dict(call.arguments),
                        payload,
                    ),
                )
                return

    async def _call_one(self, call: ToolCall, position: tuple[int, int]) -> None:
        state = self.state
        tool = self.agent.tools_by_name.get(call.name)
        t0 = time.perf_counter()
        result: Any = None
        error: str | None = None
        cache_hit = False
        try:
            if call.malformed_arguments is not None:
                raise ToolArgumentsInvalid(
                    f"arguments for {call.name} are not valid JSON: {call.malformed_arguments[:200]!r}"
                )
            if tool is None:
                names = ", ".join(sorted(self.agent.tools_by_name)) or "none"
                raise ToolNotFound(f"no tool named {call.name!r} (available: {names})")
            if tool.idempotent:
                cache_hit, result = find_idempotent_result(state, call.name, call.arguments)
            if not cache_hit:
                result = await tool.invoke(call.arguments)
        except Interrupt:
            raise
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        duration = _elapsed_ms(t0)
        content = f"Error: {error}" if error is not None else render_result(result)
        state.messages.append(Message.tool(content, tool_call_id=call.id, name=call.name))
        ex = execution(
            call.name,
            call.id,
            dict(call.arguments),
            result=result,
            error=error,
            duration_ms=duration,
            cache_hit=cache_hit,
            position=position,
        )
        self._record(ex)
        await emit(
            self.agent.hooks,
            "on_tool_call",
            ToolCalled(self.thread_id, state.iteration, call, ex.result, error, cache_hit, duration, position),
        )
