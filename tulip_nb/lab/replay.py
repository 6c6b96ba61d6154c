"""Cell-by-cell replay of a saved thread, and going live from any step as a new branch.

:class:`Replay` runs the agent loop again over a recorded thread, one model call per
:meth:`Replay.step`: the user prompts come from the record, the model's answers are served by a
:class:`ReplayModel` (the recorded assistant messages, in order — no model is ever called for a
recorded step), and tools run for real (``tools="real"``, the agent's) or answer with the
recorded results (``tools="recorded"``). After each step the new messages are compared with the
record; a different tool call, arguments or tool result is reported in :attr:`Replay.divergences`.

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

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tulip_nb.agent import Agent
from tulip_nb.agent._loop import TurnRunner, snapshot
from tulip_nb.agent._turn import RUN_KEY, canonical_args, start_turn
from tulip_nb.agent.result import AgentResult, Step
from tulip_nb.core.errors import UserError
from tulip_nb.core.messages import Message
from tulip_nb.core.state import AgentState
from tulip_nb.lab._common import Edit, apply_edit, call_text, run
from tulip_nb.lab.branches import branch_state, save_branch
from tulip_nb.lab.thread import Thread
from tulip_nb.memory._events import STATE_KEY
from tulip_nb.memory.managers import ConversationManager, NullManager
from tulip_nb.models.replay import ReplayModel as _BaseReplayModel
from tulip_nb.tools import Tool

if TYPE_CHECKING:
    import pandas as pd

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


def _recorded_tools(record: list[Message], like: dict[str, Tool]) -> list[Tool]:
    """Tools that answer each call with the recorded result for the same name and arguments."""
    results: dict[str, str] = {m.tool_call_id: m.content or "" for m in record if m.role == "tool" and m.tool_call_id}
    queues: dict[tuple[str, bytes], deque[str]] = defaultdict(deque)
    names: set[str] = set()
    for m in record:
        for c in m.tool_calls:
            names.add(c.name)
            if c.id in results:
                queues[(c.name, canonical_args(c.arguments))].append(results[c.id])
    tools = []
    for name in sorted(names | set(like)):

        async def recorded(_name: str = name, **arguments: Any) -> str:
            q = queues.get((_name, canonical_args(arguments)))
            if not q:
                raise LookupError(f"no recorded result for {_name}({arguments})")
            return q.popleft()

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
    tools answer from the record and the model sees everything (``NullManager``).
    """

    def __init__(
        self,
        thread: Thread,
        agent: Agent | None = None,
        *,
        tools: Literal["real", "recorded"] = "real",
        conversation_manager: ConversationManager | None = None,
    ) -> None:
        if tools not in ("real", "recorded"):
            raise UserError(f"tools= must be 'real' or 'recorded', got {tools!r}")
        self.thread = thread
        self.record = list(thread.final_messages)
        self.base = agent
        self.model = ReplayModel(self.record)
        real = dict(agent.tools_by_name) if agent is not None else {}
        use = list(real.values()) if tools == "real" and agent is not None else _recorded_tools(self.record, real)
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
    @property
    def total_steps(self) -> int:
        """Model calls recorded in the thread."""
        return sum(1 for m in self.record if m.role == "assistant")

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

    def step(self) -> Step | None:
        """Sync :meth:`astep`."""
        return run(self.astep())

    async def arun_to(self, n: int | None = None) -> AgentState | None:
        """Replay until ``n`` model calls have been replayed (default: all of them)."""
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

    def run_to(self, n: int | None = None) -> AgentState | None:
        """Sync :meth:`arun_to`; returns :attr:`current`."""
        return run(self.arun_to(n))

    # -- divergence -----------------------------------------------------------------------------
    def _compare(self, step: int, start: int, msgs: list[Message]) -> None:
        for i in range(start, len(msgs)):
            got = msgs[i]
            want = self.record[i] if i < len(self.record) else None
            if want is not None and got.json_bytes() == want.json_bytes():
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
        import pandas as pd

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
        """Async :meth:`go_live`."""
        if self.current is None:
            raise UserError(
                "go_live() needs at least one replayed step; call step() first", thread_id=self.thread.thread_id
            )
        k = len(self.steps)
        state = snapshot(self.current)
        msgs, first = apply_edit(state.messages, edit, len(state.messages) - 1, f"replay of {self.thread.thread_id!r}")
        shared = msgs[:first] if first is not None else msgs
        await self.thread.ahistory()
        parent = self.thread.prefix_checkpoint(shared) or self.thread.latest
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
            extra={"replay_step": k},
        )
        live_model = model if model is not None else (self.base.model if self.base is not None else None)
        if live_model is None:
            raise UserError("go_live() needs model= (or Replay(agent=...))", thread_id=self.thread.thread_id)
        manager = conversation_manager or self.agent.conversation_manager.clone_for_spawn()
        live = Agent(
            live_model,
            list(self.agent.tools_by_name.values()),
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

    def go_live(
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
        return run(
            self.ago_live(
                model, edit=edit, conversation_manager=conversation_manager, prompt=prompt, new_thread_id=new_thread_id
            )
        )
