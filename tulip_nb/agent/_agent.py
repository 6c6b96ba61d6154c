"""The Agent: a model, tools and (optionally) a checkpointer that makes conversations durable.

A **turn** is one ``run(prompt)``: the agent loads the thread, appends the prompt, then loops
*Think* (one model call with the conversation manager's view of the history) -> *Execute* (the tool
calls the model asked for) until the model answers without tools, a terminal tool runs,
``max_iterations`` is reached, or a tool interrupts. A **thread** (``thread_id``) is the unit of
conversation: with a checkpointer, every run rehydrates the thread's latest state, in any process,
on any day (seed 000)::

    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends import FileCheckpointer
    from tulip_nb.models import ScriptedModel, text, tool_call

    agent = Agent(
        model=ScriptedModel([tool_call("lookup_order", order_id="ord-4821"), text("Eligible.")]),
        tools=[lookup_order],
        checkpointer=FileCheckpointer("./threads"),
    )
    agent.run_sync("Look into the refund on ord-4821.", thread_id="ticket-8912-refund")   # Day 1
    agent.run_sync("What did we conclude?", thread_id="ticket-8912-refund")              # Day 2

When the state is saved: when the run finishes or raises (the error recorded in ``errors``), and
before it pauses on an interrupt; with ``checkpoint_every_n_iterations=N`` also after every N-th
iteration that executed tools. A run continued with :meth:`Agent.resume` saves when it finishes,
raises or pauses again. Every save records its parent checkpoint (lineage).

Sync use: one rule, ``x`` is async and ``x_sync`` its sync twin (made from ``x`` by the package's
one twin mechanism, ``tulip_nb._sync.sync_twin``) — :meth:`run_sync`,
:meth:`resume_sync`, :meth:`fork_sync`, :meth:`get_state_sync`, :meth:`get_state_history_sync`,
:meth:`update_state_sync` — and ``agent("...")`` is ``run_sync``; they work in scripts *and* in
notebook cells (a running event loop) without ``nest_asyncio``. Stepping:
``async for step in agent.iterate(...)``.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal

from tulip_nb._sync import sync_twin
from tulip_nb.agent._checks import check_checkpointer
from tulip_nb.agent._errors import NothingToResume, ResumeNeedsResponse
from tulip_nb.agent._loop import TurnRunner, snapshot
from tulip_nb.agent._result import AgentResult, Step
from tulip_nb.agent._turn import coerce_messages, pending_calls, run_info, start_turn
from tulip_nb.agent.events import CheckpointLoaded, CheckpointSaved, check_hooks, emit
from tulip_nb.core import Message, utcnow
from tulip_nb.core.calls import last_model_call
from tulip_nb.core.errors import CheckpointConflict, CheckpointNotFound, UserError
from tulip_nb.core.keys import COUNTS_KEY, STATE_KEY
from tulip_nb.core.state import AgentState
from tulip_nb.memory.checkpointer import Checkpoint, validate_thread_id
from tulip_nb.memory.conversation.base import ConversationManager
from tulip_nb.memory.conversation.compactor import default_conversation_manager
from tulip_nb.memory.counts import Lineage, alineage, save_counts
from tulip_nb.models import Model, resolve_model
from tulip_nb.models.metadata import metadata_for
from tulip_nb.tools import Interrupt, Tool, as_tool

__all__ = ["Agent", "AgentBase"]

_Started = tuple[TurnRunner, Callable[[], Awaitable[Step | None]] | None]


class AgentBase:
    """What a conversation manager may rely on (seed 002): ``messages`` and ``system_prompt``."""

    system_prompt: str | None

    @property
    def messages(self) -> list[Message]:
        raise NotImplementedError

    @messages.setter
    def messages(self, value: Iterable[Any]) -> None:
        raise NotImplementedError


class Agent(AgentBase):
    """An LLM agent with tools and durable threads (see the module docstring).

    ``model`` is a :class:`~tulip_nb.models.Model` or ``"openai:<model>"``; ``tools`` functions or
    :class:`~tulip_nb.tools.Tool`; ``conversation_manager`` decides what the model sees (default:
    seed 000's — a compactor when the model's window is known, else a sliding window; pass
    ``NullManager()`` to send everything); ``hooks`` objects with ``on_*`` methods
    (:mod:`tulip_nb.agent.events`); ``messages`` pre-loads the history of the thread-less
    conversation (``{"role", "content"}`` dicts with text or ``[{"text": ...}]`` content).
    ``strict_concurrency=True`` makes every save of a turn a compare-and-swap on the checkpoint the
    turn started from: when another process saved the thread meanwhile, the run raises
    :class:`~tulip_nb.core.errors.CheckpointConflict` instead of the default last write wins.
    """

    def __init__(
        self,
        model: Model | str | None = None,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        *,
        system_prompt: str | None = None,
        checkpointer: Any = None,
        conversation_manager: ConversationManager | None = None,
        max_iterations: int = 20,
        checkpoint_every_n_iterations: int | None = None,
        hooks: Sequence[Any] = (),
        messages: Iterable[Any] | None = None,
        agent_id: str | None = None,
        strict_concurrency: bool = False,
    ) -> None:
        if max_iterations < 1:
            raise UserError(f"max_iterations must be at least 1, got {max_iterations}")
        if checkpoint_every_n_iterations is not None and checkpoint_every_n_iterations < 1:
            raise UserError(f"checkpoint_every_n_iterations must be None or >= 1, got {checkpoint_every_n_iterations}")
        self.model: Model = resolve_model(model)
        self.tools_by_name: dict[str, Tool] = {}
        for item in tools:
            t = as_tool(item)
            if t.name in self.tools_by_name:
                raise UserError(f"two tools are named {t.name!r}")
            self.tools_by_name[t.name] = t
        self.tool_schemas: list[dict[str, Any]] = [t.schema() for t in self.tools_by_name.values()]
        self.system_prompt = system_prompt
        self.checkpointer = check_checkpointer(checkpointer)
        self._manager = conversation_manager
        self.max_iterations = max_iterations
        self.checkpoint_every_n_iterations = checkpoint_every_n_iterations
        self.hooks: tuple[Any, ...] = check_hooks(hooks)
        self.agent_id = agent_id
        self.strict_concurrency = strict_concurrency
        # In-memory conversations: the thread-less one (key None), threads run without a
        # checkpointer, and the last seen state of checkpointed threads (for ``agent.messages``).
        self._local: dict[str | None, AgentState] = {}
        self._override: dict[str | None, list[Message]] = {}
        self._current: str | None = None
        if messages is not None:
            self._local[None] = AgentState(messages=coerce_messages(messages))

    def __repr__(self) -> str:
        return (
            f"Agent(model={getattr(self.model, 'name', type(self.model).__name__)!r}, tools={list(self.tools_by_name)})"
        )

    # -- seed 002 surface -----------------------------------------------------------------------
    @property
    def conversation_manager(self) -> ConversationManager:
        """The manager in use (the seed-000 default is created on first use)."""
        if self._manager is None:
            meta = metadata_for(getattr(self.model, "name", None))
            self._manager = default_conversation_manager(meta.context_window if meta else None, self.max_iterations)
        return self._manager

    @property
    def messages(self) -> list[Message]:
        """The history of the conversation last run (a copy; assign to replace, ``[]`` to reset).

        Assigning sets the history the *next* run of that conversation starts from; for a
        checkpointed thread that run saves it as a new checkpoint (older ones stay).
        """
        state = self._local.get(self._current)
        override = self._override.get(self._current)
        if override is not None:
            return list(override)
        return list(state.messages) if state is not None else []

    @messages.setter
    def messages(self, value: Iterable[Any]) -> None:
        self._override[self._current] = coerce_messages(value)

    # -- running --------------------------------------------------------------------------------
    async def run(
        self, prompt: str, thread_id: str | None = None, metadata: dict[str, Any] | None = None
    ) -> AgentResult:
        """Run one turn and return its :class:`AgentResult`."""
        runners: list[TurnRunner] = []
        async for _ in self._drive(lambda: self._start(prompt, thread_id, metadata), runners):
            pass
        return self._result(runners[0])

    run_sync = sync_twin(run, name="run_sync")

    def __call__(
        self, prompt: str, thread_id: str | None = None, metadata: dict[str, Any] | None = None
    ) -> AgentResult:
        """``agent("...")`` is :meth:`run_sync`."""
        return self.run_sync(prompt, thread_id=thread_id, metadata=metadata)

    def iterate(
        self, prompt: str, thread_id: str | None = None, metadata: dict[str, Any] | None = None
    ) -> AsyncIterator[Step]:
        """Run one turn, yielding a :class:`Step` per iteration.

        Stop consuming whenever you like: the thread is then saved as an unfinished turn and
        ``await agent.resume(thread_id=...)`` continues it later (in any process).
        """
        return self._drive(lambda: self._start(prompt, thread_id, metadata))

    async def resume(
        self, response: Any = None, *, thread_id: str | None = None, metadata: dict[str, Any] | None = None
    ) -> AgentResult:
        """Continue a paused turn: answer a pending interrupt with ``response``, or (no response)
        continue a turn that stopped unfinished — a process that died after an iteration
        checkpoint, or stepping that was stopped. Raises :class:`NothingToResume` otherwise.
        """
        runners: list[TurnRunner] = []
        async for _ in self._drive(lambda: self._start_resume(response, thread_id, metadata), runners):
            pass
        return self._result(runners[0])

    resume_sync = sync_twin(resume, name="resume_sync")

    def iterate_resume(
        self, response: Any = None, *, thread_id: str | None = None, metadata: dict[str, Any] | None = None
    ) -> AsyncIterator[Step]:
        """:meth:`resume`, one :class:`Step` at a time."""
        return self._drive(lambda: self._start_resume(response, thread_id, metadata))

    # -- internals ------------------------------------------------------------------------------
    async def _load(self, thread_id: str | None) -> tuple[AgentState | None, str | None, Lineage]:
        """The thread's state to continue from, the id of the checkpoint it came from, and the
        thread's lineage counters as of that checkpoint (:mod:`tulip_nb.memory.counts`)."""
        parent: str | None = None
        lineage = Lineage.new()
        if thread_id is not None:
            validate_thread_id(thread_id)
        state: AgentState | None
        if self.checkpointer is not None and thread_id is not None:
            ckpt = await self.checkpointer.load_checkpoint(thread_id)
            state = ckpt.state if ckpt is not None else None
            parent = ckpt.checkpoint_id if ckpt is not None else ""
            lineage = await alineage(self.checkpointer, thread_id, ckpt)
            if ckpt is not None:
                await emit(
                    self.hooks,
                    "on_checkpoint_loaded",
                    CheckpointLoaded(thread_id, ckpt.checkpoint_id, ckpt.state.iteration, len(ckpt.state.messages)),
                )
        else:
            local = self._local.get(thread_id)
            state = snapshot(local) if local is not None else None
        override = self._override.pop(thread_id, None)
        if override is not None:
            state = (state or AgentState()).model_copy(update={"messages": override})
        stored = state.metadata.get(STATE_KEY) if state is not None else None
        self.conversation_manager.restore_from_session(stored if isinstance(stored, dict) else {})
        self._current = thread_id
        return state, parent, lineage

    async def _start(self, prompt: str, thread_id: str | None, metadata: dict[str, Any] | None) -> _Started:
        if not isinstance(prompt, str):
            raise UserError(f"prompt must be a str, got {type(prompt).__name__}")
        existing, parent, lineage = await self._load(thread_id)
        state = start_turn(
            existing,
            prompt,
            system_prompt=self.system_prompt,
            metadata=metadata,
            agent_id=self.agent_id,
            max_iterations=self.max_iterations,
        )
        self._local[thread_id] = state
        runner = TurnRunner(
            self, state, thread_id, every=self.checkpoint_every_n_iterations, parent=parent, lineage=lineage
        )
        return runner, None

    async def _start_resume(self, response: Any, thread_id: str | None, metadata: dict[str, Any] | None) -> _Started:
        state, parent, lineage = await self._load(thread_id)
        if state is None:
            raise NothingToResume("there is no saved conversation to resume", thread_id=thread_id)
        info = run_info(state)
        status = info.get("status")
        if metadata:
            state.metadata.update(metadata)
        runner = TurnRunner(self, state, thread_id, every=None, parent=parent, lineage=lineage)
        if status == "interrupted":
            if response is None:
                question = (info.get("pending") or {}).get("question")
                raise ResumeNeedsResponse(f"the run is waiting for an answer to: {question!r}", thread_id=thread_id)

            async def prelude() -> Step | None:
                await runner.answer_interrupt(response)
                return await runner.finish_batch(force=True)

        elif status == "running":
            if response is not None:
                raise ResumeNeedsResponse(
                    "the turn stopped unfinished but asked nothing; resume it without a response",
                    thread_id=thread_id,
                )

            async def prelude() -> Step | None:
                return await runner.finish_batch() if pending_calls(state.messages) else None

        else:
            last = f"its last turn ended with status {status!r}" if status else "it has no unfinished turn"
            raise NothingToResume(f"nothing to resume: {last}; start a new turn with run()", thread_id=thread_id)
        self._local[thread_id] = state
        return runner, prelude

    async def _drive(
        self, start: Callable[[], Awaitable[_Started]], out: list[TurnRunner] | None = None
    ) -> AsyncIterator[Step]:
        """The one generator behind run / iterate / resume: start, step until done, save on
        failure (error recorded) or on an early stop (so ``resume`` continues the turn)."""
        runner, prelude = await start()
        if out is not None:
            out.append(runner)
        try:
            if prelude is not None:
                first = await prelude()
                if first is not None:
                    yield first
            while not runner.done:
                step = await runner.iteration()
                if step is None:
                    break
                yield step
        except GeneratorExit:
            await runner.stop_early()
            raise
        except Exception as e:
            await runner.fail(e)
            raise

    def _result(self, runner: TurnRunner) -> AgentResult:
        state = runner.state
        last = last_model_call(state.messages)
        final = state.messages[last] if last is not None else None
        return AgentResult(
            message=final,
            state=snapshot(state),
            stop_reason=runner.stop_reason or "complete",
            iterations=state.iteration,
            tool_calls=list(runner.executions),
            usage=runner.usage,
            thread_id=runner.thread_id,
            checkpoint_id=runner.checkpoint_id,
            interrupt=runner.interrupt,
        )

    # -- thread operations ----------------------------------------------------------------------
    def _require_checkpointer(self, operation: str) -> Any:
        if self.checkpointer is None:
            raise UserError(f"{operation}() needs Agent(checkpointer=...)")
        return self.checkpointer

    async def get_state(self, thread_id: str, checkpoint_id: str | None = None) -> AgentState:
        """The thread's latest state (or one checkpoint's); :class:`CheckpointNotFound` if none."""
        if self.checkpointer is None:
            local = self._local.get(thread_id)
            if local is None or checkpoint_id is not None:
                raise CheckpointNotFound("no such conversation in this agent", thread_id=thread_id)
            return snapshot(local)
        state = await self.checkpointer.load(thread_id, checkpoint_id)
        if state is None:
            raise CheckpointNotFound("thread has no checkpoints", thread_id=thread_id)
        return state

    get_state_sync = sync_twin(get_state, name="get_state_sync")

    async def get_state_history(self, thread_id: str, limit: int = 10) -> list[Checkpoint]:
        """The thread's checkpoints, newest first, each with its state and save metadata."""
        cp = self._require_checkpointer("get_state_history")
        out = []
        for cid in await cp.list_checkpoints(thread_id, limit=limit):
            ckpt = await cp.load_checkpoint(thread_id, cid)
            if ckpt is not None:
                out.append(ckpt)
        return out

    get_state_history_sync = sync_twin(get_state_history, name="get_state_history_sync")

    async def fork(self, thread_id: str, checkpoint_id: str | None = None, new_thread_id: str | None = None) -> str:
        """Copy one checkpoint (default: the latest) into a new thread and return its id.

        The new thread's first save metadata records ``forked_from`` (the source thread) and
        ``parent_checkpoint_id`` (the source checkpoint), as tulip does.
        """
        cp = self._require_checkpointer("fork")
        ckpt = await cp.load_checkpoint(thread_id, checkpoint_id)
        if ckpt is None:
            raise CheckpointNotFound("cannot fork a thread without checkpoints", thread_id=thread_id)
        new_id = new_thread_id or f"{thread_id}-fork-{uuid.uuid4().hex[:8]}"
        meta: dict[str, Any] = {"forked_from": thread_id, "parent_checkpoint_id": ckpt.checkpoint_id, "source": "fork"}
        meta[COUNTS_KEY] = save_counts(ckpt.state, await alineage(cp, thread_id, ckpt), "fork")
        if isinstance(ckpt.metadata.get("tulip_nb_hash"), str):  # chain the fork to its source
            meta["tulip_nb_parent_hash"] = ckpt.metadata["tulip_nb_hash"]
        try:
            cid = await cp.save(ckpt.state, new_id, metadata=meta, expected_parent="")
        except CheckpointConflict as e:
            raise CheckpointConflict("fork target thread already exists", thread_id=new_id) from e
        await emit(
            self.hooks,
            "on_checkpoint_saved",
            CheckpointSaved(new_id, cid, "fork", ckpt.state.iteration, len(ckpt.state.messages)),
        )
        return new_id

    fork_sync = sync_twin(fork, name="fork_sync")

    async def update_state(
        self, thread_id: str, messages: Iterable[Any] | None = None, metadata: dict[str, Any] | None = None
    ) -> str:
        """Save a new checkpoint with ``messages`` replaced and/or ``metadata`` merged.

        The save is a compare-and-swap on the checkpoint it edits (``CheckpointConflict`` if the
        thread moved on meanwhile); lineage records that checkpoint as the parent.
        """
        cp = self._require_checkpointer("update_state")
        ckpt = await cp.load_checkpoint(thread_id)
        state = snapshot(ckpt.state) if ckpt is not None else AgentState()
        if messages is not None:
            state.messages = coerce_messages(messages)
        if metadata:
            state.metadata.update(metadata)
        state.updated_at = utcnow()
        parent = ckpt.checkpoint_id if ckpt is not None else ""
        meta = {"source": "update", COUNTS_KEY: save_counts(state, await alineage(cp, thread_id, ckpt), "update")}
        cid: str = await cp.save(state, thread_id, metadata=meta, expected_parent=parent)
        await emit(
            self.hooks,
            "on_checkpoint_saved",
            CheckpointSaved(thread_id, cid, "update", state.iteration, len(state.messages)),
        )
        return cid

    update_state_sync = sync_twin(update_state, name="update_state_sync")

    def clone(self, *, hooks: Sequence[Any] = (), strict_concurrency: bool | None = None) -> Agent:
        """A twin for one concurrent caller: same model, tools, prompt and checkpointer; its own
        in-memory conversations and a fresh conversation manager (``clone_for_spawn()``).

        An agent keeps per-conversation working state (the manager's plan, the last thread run),
        so concurrent runs on *one* agent object must each use a clone — a server makes one per
        request. ``hooks`` are added after the agent's own.

        ::

            twin = agent.clone(hooks=[printer], strict_concurrency=True)
        """
        twin = copy.copy(self)
        twin._manager = self.conversation_manager.clone_for_spawn()
        preloaded = self._local.get(None)
        twin._local = {None: snapshot(preloaded)} if preloaded is not None else {}
        twin._override = {}
        twin._current = None
        twin.hooks = check_hooks((*self.hooks, *hooks))
        if strict_concurrency is not None:
            twin.strict_concurrency = strict_concurrency
        return twin

    # -- agents as tools ------------------------------------------------------------------------
    def spawn(self) -> Agent:
        """A fresh worker with this agent's model, tools and prompt, no checkpointer, and a
        conversation manager from ``clone_for_spawn()`` (so workers never share history)."""
        return Agent(
            self.model,
            list(self.tools_by_name.values()),
            system_prompt=self.system_prompt,
            conversation_manager=self.conversation_manager.clone_for_spawn(),
            max_iterations=self.max_iterations,
            hooks=self.hooks,
            agent_id=self.agent_id,
        )

    def as_tool(
        self, name: str | None = None, description: str | None = None, mode: Literal["spawn", "shared"] = "spawn"
    ) -> Tool:
        """This agent as a tool another agent can call with a ``prompt``.

        ``spawn``: each call runs in a fresh :meth:`spawn` worker, so parallel calls never share
        history. ``shared``: calls run on this agent's thread-less conversation, which grows.
        A worker that interrupts re-raises the :class:`~tulip_nb.tools.Interrupt` to the caller.
        """
        if mode not in ("spawn", "shared"):
            raise UserError(f"mode must be 'spawn' or 'shared', got {mode!r}")
        tool_name = name or f"ask_{self.agent_id or 'agent'}"

        async def call_agent(prompt: str) -> str:
            worker = self.spawn() if mode == "spawn" else self
            result = await worker.run(prompt)
            if result.interrupt is not None:
                raise Interrupt(result.interrupt.question, result.interrupt.payload)
            return result.text

        call_agent.__doc__ = (
            f"{description or f'Ask the {tool_name} agent to do a task and return its answer.'}\n\n"
            "Args:\n    prompt: What the agent should do, in plain language.\n"
        )
        return Tool(call_agent, name=tool_name, description=description)
