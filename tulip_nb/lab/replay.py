"""Cell-by-cell replay of a saved thread, and going live from any step as a new branch.

:class:`Replay` runs the agent loop again over a recorded thread, one model call per
:meth:`Replay.step`: the user prompts come from the record, the model's answers are served by a
:class:`ReplayModel` (the recorded assistant messages, in order — no model is ever called for a
recorded step), and tools run for real (``tools="real"``, the agent's) or answer with the
recorded results (``tools="recorded"``, and always without an agent). A recorded tool answers each
call with the result recorded **at that call's position** (the recorded assistant message being
replayed, the call's index in it; :mod:`tulip_nb.core.calls`), so reused or empty ids, parallel
calls, the same call answered differently at different times and error results all replay
exactly. After each step the new messages are compared with the record (canonical JSON); a
different tool call, arguments or tool result is reported in :attr:`Replay.divergences`.

At any step, :meth:`Replay.go_live` saves the replayed state (optionally edited) as a **new
thread** branched from the original (``forked_from`` / ``parent_checkpoint_id`` / ``replay_step``
in its save metadata) and continues it with a live model or another conversation manager::

    from tulip_nb.lab import Replay, open_thread

    r = Replay(open_thread(cp, "ticket-8912-refund"), agent=agent)
    r.run_to(3)                          # three model calls, all recorded
    r.current.messages[-1]               # where we are
    live = r.go_live(model=ScriptedModel(["Refund approved."]))
    live.result.text, live.thread_id     # the branch, resumable like any thread
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tulip_nb._deps import require
from tulip_nb._sync import sync_twin
from tulip_nb.agent import Agent
from tulip_nb.agent.result import AgentResult, Step
from tulip_nb.agent.turns import RUN_KEY, TurnRunner, canonical_args, snapshot, start_turn
from tulip_nb.core.calls import CallRef, answered_by, last_model_call, model_calls, unanswered_calls
from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import REPLAY_STEP_KEY
from tulip_nb.core.messages import Message
from tulip_nb.core.state import AgentState
from tulip_nb.lab._common import Edit, apply_edit, call_text, message_key
from tulip_nb.lab.branches import branch_state, save_branch
from tulip_nb.lab.thread import Thread, ThreadLike, as_thread
from tulip_nb.memory.conversation import STATE_KEY, ConversationManager, NullManager
from tulip_nb.models.replay import ReplayModel as _BaseReplayModel
from tulip_nb.tools import Tool

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["LiveBranch", "Replay", "ReplayModel"]


class ReplayModel(_BaseReplayModel):
    """Serves the assistant messages recorded in a thread, in order (lab twin of
    :class:`tulip_nb.models.ReplayModel` that also takes a :class:`Thread`)."""

    def __init__(
        self, recording: Thread | AgentState | Sequence[Message], *, strict: bool = False, name: str = "replay"
    ) -> None:
        if isinstance(recording, Thread):
            recording = recording.final_messages
        super().__init__(recording, strict=strict, name=name)


class RecordedResults:
    """The tool results of a record, by call position, for tools that answer from the record.

    :meth:`answer` serves the result recorded at the position ``where()`` names (the record's
    ``(assistant message index, call index)`` of the call being replayed) when the recorded call
    there is the same tool with canonically equal arguments. Otherwise (a call the record never
    answered there) it serves the latest result recorded for the same tool and arguments before
    that point, else the first after it; without a position (a live branch past the record) the
    latest one. A call the record never made raises :class:`LookupError`.
    """

    def __init__(self, record: Sequence[Message]) -> None:
        self.record = list(record)
        self.results: dict[CallRef, int] = {}
        self.by_call: dict[tuple[str, bytes], list[tuple[CallRef, int]]] = defaultdict(list)
        self.names: set[str] = set()
        for t, ref in enumerate(answered_by(self.record)):
            if ref is None:
                continue
            self.results[ref] = t
            call = self.record[ref[0]].tool_calls[ref[1]]
            self.by_call[(call.name, canonical_args(call.arguments))].append((ref, t))
        for m in self.record:
            self.names.update(c.name for c in m.tool_calls)

    def answer(self, name: str, arguments: dict[str, Any], at: CallRef | None) -> str:
        key = canonical_args(arguments)
        if at is not None:
            t = self.results.get(at)
            i, k = at
            calls = self.record[i].tool_calls if 0 <= i < len(self.record) else []
            if t is not None and k < len(calls) and calls[k].name == name and canonical_args(calls[k].arguments) == key:
                return self.record[t].content or ""
        hits = self.by_call.get((name, key))
        if not hits:
            where = f" at message {at[0]}, call {at[1]}" if at is not None else ""
            raise LookupError(f"no recorded result for {name}({arguments}){where}")
        if at is None:
            return self.record[hits[-1][1]].content or ""
        before = bisect_right([ref for ref, _ in hits], at)
        return self.record[hits[max(0, before - 1)][1]].content or ""

    def tools(self, like: dict[str, Tool], where: Callable[[], CallRef | None]) -> list[Tool]:
        """One tool per recorded (or ``like``) name, answering from the record at ``where()``."""
        tools = []
        for name in sorted(self.names | set(like)):

            async def recorded(_name: str = name, **arguments: Any) -> str:
                return self.answer(_name, arguments, where())

            real = like.get(name)
            params = real.parameters if real is not None else {"type": "object", "properties": {}}
            desc = real.description if real is not None else f"recorded results of {name}"
            tools.append(Tool(recorded, name=name, description=desc, parameters=params))
        return tools


@dataclass
class LiveBranch:
    """What :meth:`Replay.go_live` made: the new thread, the agent driving it, the run's result."""

    thread_id: str
    parent_checkpoint_id: str
    step: int
    agent: Agent
    result: AgentResult | None

    def thread(self) -> Thread:
        """A :class:`Thread` handle on the branch."""
        from tulip_nb.lab.thread import open_thread

        assert self.agent.checkpointer is not None
        return open_thread(self.agent.checkpointer, self.thread_id)


class Replay:
    """Step through a recorded thread with the agent loop (see the module docstring).

    ``agent`` gives the tools, the conversation manager (cloned), ``max_iterations`` and the
    default model for :meth:`go_live`; its model is never called during replay. Without an agent,
    tools answer from the record and the model sees everything (``NullManager``). ``thread``: a
    :class:`Thread`, or a thread id with ``checkpointer=`` (a checkpointer or its URL).
    """

    def __init__(
        self,
        thread: ThreadLike,
        agent: Agent | None = None,
        *,
        tools: Literal["real", "recorded"] = "real",
        conversation_manager: ConversationManager | None = None,
        checkpointer: BaseCheckpointer | str | None = None,
    ) -> None:
        if tools not in ("real", "recorded"):
            raise UserError(f"tools= must be 'real' or 'recorded', got {tools!r}")
        thread = as_thread(thread, checkpointer, what="Replay")
        self.thread = thread
        self.record = list(thread.final_messages)
        self.base = agent
        self.model = ReplayModel(self.record)
        self._answers = model_calls(self.record)
        self.recorded = RecordedResults(self.record)
        real = dict(agent.tools_by_name) if agent is not None else {}
        self.tools_mode: Literal["real", "recorded"] = "real" if tools == "real" and agent is not None else "recorded"
        use = list(real.values()) if self.tools_mode == "real" else self.recorded.tools(real, self._replaying)
        if conversation_manager is None:
            conversation_manager = agent.conversation_manager.clone_for_spawn() if agent else NullManager()
        first = self.record[0] if self.record else None
        self.system_prompt = first.content if first is not None and first.role == "system" else None
        self.max_iterations = agent.max_iterations if agent is not None else 10**6
        self.agent = Agent(
            self.model,
            use,
            system_prompt=self.system_prompt,
            conversation_manager=conversation_manager,
            max_iterations=self.max_iterations,
        )
        self.current: AgentState | None = None
        self._runner: TurnRunner | None = None
        self.steps: list[Step] = []
        self._divergences: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"Replay({self.thread.thread_id!r}, step={len(self.steps)}/{self.total_steps})"

    # -- stepping -------------------------------------------------------------------------------
    def _replaying(self) -> CallRef | None:
        """The record's position of the call the replay is running now: the recorded assistant
        message the model just served, and the index of the first call of it without a result."""
        runner = self._runner
        served = self.model.calls - 1
        if runner is None or not 0 <= served < len(self._answers):
            return None
        msgs = runner.state.messages
        i = last_model_call(msgs)
        open_calls = unanswered_calls(msgs, i) if i is not None else []
        return (self._answers[served], open_calls[0]) if open_calls else None

    @property
    def total_steps(self) -> int:
        """Model calls recorded in the thread."""
        return len(self._answers)

    @property
    def done(self) -> bool:
        return len(self.steps) >= self.total_steps or (self._next_prompt() is None and self._turn_over())

    def _turn_over(self) -> bool:
        return self._runner is None or self._runner.done

    def _next_prompt(self) -> tuple[int, str] | None:
        start = len(self.current.messages) if self.current is not None else 0
        for i in range(start, len(self.record)):
            if self.record[i].role == "user":
                return i, self.record[i].content or ""
        return None

    async def astep(self) -> Step | None:
        """Replay one model call (starting the next recorded turn when needed); None at the end."""
        while True:
            if self._turn_over():
                nxt = self._next_prompt()
                if nxt is None or len(self.steps) >= self.total_steps:
                    return None
                state = start_turn(
                    self.current,
                    nxt[1],
                    system_prompt=self.system_prompt,
                    metadata=None,
                    agent_id=None,
                    max_iterations=self.max_iterations,
                )
                self._runner = TurnRunner(self.agent, state, None, every=None)
                self.current = state
            assert self._runner is not None
            before = len(self._runner.state.messages)
            step = await self._runner.iteration()
            if step is None:
                continue
            self.current = self._runner.state
            self._compare(len(self.steps), before, self._runner.state.messages)
            self.steps.append(step)
            return step

    step = sync_twin(astep)

    async def arun_to(self, n: int | None = None) -> AgentState | None:
        """Replay until ``n`` model calls have been replayed (default: all of them); returns
        :attr:`current`."""
        target = self.total_steps if n is None else n
        if not 0 <= target <= self.total_steps:
            raise UserError(
                f"run_to({n}) is outside the recorded {self.total_steps} model calls",
                thread_id=self.thread.thread_id,
            )
        while len(self.steps) < target:
            if await self.astep() is None:
                break
        return self.current

    run_to = sync_twin(arun_to)

    # -- divergence -----------------------------------------------------------------------------
    def _compare(self, step: int, start: int, msgs: list[Message]) -> None:
        for i in range(start, len(msgs)):
            got = msgs[i]
            want = self.record[i] if i < len(self.record) else None
            if want is not None and (
                got is want or got.json_bytes() == want.json_bytes() or message_key(got) == message_key(want)
            ):
                continue
            kind = "extra message"
            if want is not None and got.role == want.role == "tool":
                kind = "tool result"
            elif want is not None and got.role == want.role == "assistant":
                same_names = [c.name for c in got.tool_calls] == [c.name for c in want.tool_calls]
                kind = "tool arguments" if same_names and got.tool_calls else "tool call"
            elif want is not None:
                kind = "message"
            self._divergences.append(
                {
                    "step": step,
                    "index": i,
                    "kind": kind,
                    "expected": (want.content or call_text(want)) if want is not None else None,
                    "actual": got.content or call_text(got),
                }
            )

    @property
    def divergences(self) -> pd.DataFrame:
        """Where the replay left the record: step, message index, kind (``tool call``, ``tool
        arguments``, ``tool result``, ``message``), expected and actual text. Empty: faithful."""
        pd = require("pandas")

        return pd.DataFrame(self._divergences, columns=["step", "index", "kind", "expected", "actual"])

    # -- going live -----------------------------------------------------------------------------
    async def ago_live(
        self,
        model: Any = None,
        *,
        edit: Edit | None = None,
        conversation_manager: ConversationManager | None = None,
        prompt: str | None = None,
        new_thread_id: str | None = None,
    ) -> LiveBranch:
        """Continue from the current step as a new branch (module docstring).

        ``model``: the live model (default: the agent's); ``edit``: change a message first (text,
        Message, function, or ``{index: ...}``; default position: the last message, e.g. the user
        prompt before the first call of a turn or a tool result), what followed it is dropped;
        ``conversation_manager``: another manager for the branch; ``prompt``: when the current turn
        is complete, the next prompt (default: the record's next one).
        """
        if self.current is None:
            raise UserError(
                "go_live() needs at least one replayed step; call step() first", thread_id=self.thread.thread_id
            )
        k = len(self.steps)
        state = snapshot(self.current)
        msgs, first = apply_edit(state.messages, edit, len(state.messages) - 1, f"replay of {self.thread.thread_id!r}")
        shared = msgs[:first] if first is not None else msgs
        parent = await self.thread.aprefix_checkpoint(shared) or self.thread.latest.info
        branch = branch_state(state, msgs)
        branch.max_iterations = self.base.max_iterations if self.base is not None else 20
        if conversation_manager is not None:
            branch.metadata.pop(STATE_KEY, None)
        new_id = await save_branch(
            self.thread,
            branch,
            parent.checkpoint_id,
            new_thread_id=new_thread_id,
            index=len(msgs) - 1,
            source="replay",
            extra={REPLAY_STEP_KEY: k},
        )
        live_model = model if model is not None else (self.base.model if self.base is not None else None)
        if live_model is None:
            raise UserError("go_live() needs model= (or Replay(agent=...))", thread_id=self.thread.thread_id)
        manager = conversation_manager or self.agent.conversation_manager.clone_for_spawn()
        if self.tools_mode == "real":
            live_tools = list(self.agent.tools_by_name.values())
        else:  # the live branch is past the record: same tool + arguments, no position
            live_tools = self.recorded.tools(dict(self.base.tools_by_name) if self.base else {}, lambda: None)
        live = Agent(
            live_model,
            live_tools,
            system_prompt=self.system_prompt,
            checkpointer=self.thread.checkpointer,
            conversation_manager=manager,
            max_iterations=branch.max_iterations,
        )
        result: AgentResult | None
        if branch.metadata[RUN_KEY]["status"] == "running":
            result = await live.resume(thread_id=new_id)
        else:
            nxt = prompt if prompt is not None else (self._next_prompt() or (0, None))[1]
            result = await live.run(nxt, thread_id=new_id) if nxt is not None else None
        return LiveBranch(new_id, parent.checkpoint_id, k, live, result)

    go_live = sync_twin(ago_live)
