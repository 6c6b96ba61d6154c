"""What-if branches: fork a saved thread at any point, and sweep variants over one branch point.

A fork copies the history up to a point into a **new thread** of the same checkpointer, optionally
with one message edited, and records lineage in the new thread's first save metadata
(``forked_from``, ``parent_checkpoint_id``, ``fork_message_index``), so :func:`diff_threads`
finds where the branch left the original::

    from tulip_nb.lab import fork, sweep

    b = fork(thread, at=4, edit="Refund ord-4821 only if unopened.")   # message 4 rewritten
    b = fork(thread, at=checkpoint_id)                                  # a checkpoint as it was
    b = fork(thread, turn=12)                        # everything before turn 12's user message
    sweep(thread, at=4, agent=agent, variants={
        "gpt-4o": {"model": "openai:gpt-4o"},
        "terse": {"system_prompt": "Answer in one line."},
        "no db": {"tool_override": {"query_db": lambda sql: "db offline"}},
    })                                                     # one row per variant

``at`` is a checkpoint id or a message index (negative counts from the end): the branch keeps the
messages up to and including that index. ``turn=N`` (0-based, negative from the end; see
:attr:`Thread.turns <tulip_nb.lab.Thread.turns>`) cuts just before turn ``N``'s user message, so the
branch's next ``run`` is a new turn ``N``. The branch keeps the turn log of the turns it keeps
whole (their recorded outcomes); a turn it cuts in the middle is marked running. An edit drops
whatever followed the edited message (it was a consequence of the old text); the branch's next run
regenerates it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tulip_nb._deps import require
from tulip_nb._sync import sync_twin
from tulip_nb.agent import Agent
from tulip_nb.agent.turns import RUN_KEY, snapshot
from tulip_nb.core import Message
from tulip_nb.core.calls import POSITION_KEY, CallRef, answered_by, execution_position, model_call_count
from tulip_nb.core.errors import CheckpointConflict, CheckpointNotFound, UserError
from tulip_nb.core.keys import HASH_KEY, PARENT_HASH_KEY
from tulip_nb.core.state import AgentState, ToolExecution
from tulip_nb.core.turns import TURNS_KEY, split_turns, turn_log, turn_log_for_prefix, turn_starts
from tulip_nb.lab._common import FORK_INDEX_KEY, Edit, apply_edit, short
from tulip_nb.lab._live import SweepBudget, Tally, branch_id, executions_after, finished, live_columns, saved_branch
from tulip_nb.lab._thread import Thread, ThreadLike, aas_thread, aopen_thread
from tulip_nb.memory.conversation.events import EVENTS_KEY, STATE_KEY
from tulip_nb.memory.conversation.plan import fingerprint
from tulip_nb.models.budget import Budget
from tulip_nb.tools import Tool

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = [
    "SWEEP_COLUMNS",
    "VariantBranch",
    "branch_state",
    "save_branch",
    "sweep_variants",
    "turn_executions",
]

VARIANT_KEYS = frozenset({"model", "system_prompt", "edit", "conversation_manager", "tool_override"})


def turn_executions(
    executions: list[ToolExecution], messages: list[Message], start: int, shift: int = 0
) -> list[ToolExecution]:
    """The executions (in their order) of the calls answered in ``messages[start:]``, by position.

    An execution this toolkit recorded names its call's position (``tulip_nb_call``, plus
    ``shift`` when messages were inserted before it); it is kept when that call is answered in
    ``messages`` and is the same tool. One another SDK recorded (no position) is matched to a still
    unclaimed answered call of the turn with its id and tool name, in order. Ids alone never decide:
    providers reuse them.
    """
    answered = [ref for ref in answered_by(messages, start) if ref is not None]
    known = set(answered)
    claimed: set[CallRef] = set()
    keep: dict[int, ToolExecution] = {}
    loose: list[int] = []
    for n, ex in enumerate(executions):
        pos = execution_position(ex)
        if pos is None:
            loose.append(n)
            continue
        ref = (pos[0] + shift, pos[1])
        if ref in known and ref not in claimed and messages[ref[0]].tool_calls[ref[1]].name == ex.tool_name:
            claimed.add(ref)
            keep[n] = ex if not shift else ex.model_copy(update={POSITION_KEY: list(ref)})
    for n in loose:
        ex = executions[n]
        for ref in answered:
            call = messages[ref[0]].tool_calls[ref[1]]
            if ref not in claimed and call.id == ex.tool_call_id and call.name == ex.tool_name:
                claimed.add(ref)
                keep[n] = ex
                break
    return [keep[n] for n in sorted(keep)]


def branch_state(state: AgentState, messages: list[Message], *, shift: int = 0) -> AgentState:
    """A copy of ``state`` holding ``messages``, ready to continue as a branch.

    Compaction events that do not describe a prefix of ``messages`` are dropped, as is the
    manager's saved plan when it no longer applies; an unfinished turn is marked ``running`` so
    ``agent.resume(thread_id=...)`` continues it. ``shift``: messages inserted before the
    history (a system prompt a sweep variant adds), so recorded call positions move by that much.
    """
    new = snapshot(state)
    new.messages = list(messages)
    events = new.metadata.get(EVENTS_KEY)
    if events:
        keep = []
        for e in events:
            plan = e.get("plan") or {}
            n = int(plan.get("n", 0))
            if n <= len(messages) and plan.get("fp") == fingerprint(messages, n):
                keep.append(e)
        new.metadata[EVENTS_KEY] = keep
    mstate = new.metadata.get(STATE_KEY)
    if isinstance(mstate, dict) and isinstance(mstate.get("plan"), dict):
        plan = mstate["plan"]
        n = int(plan.get("n", 0))
        if n > len(messages) or plan.get("fp") != fingerprint(messages, n):
            new.metadata[STATE_KEY] = {**mstate, "plan": None}
    # per-turn bookkeeping describes the turn the branch point is in
    start = max((i for i, m in enumerate(messages) if m.role == "user"), default=0)
    turn = messages[start:]
    new.iteration = model_call_count(turn)
    new.tool_executions = turn_executions(new.tool_executions, messages, start, shift)
    new.tool_history = [ex.tool_name for ex in new.tool_executions]
    new.reasoning_steps = [r for r in new.reasoning_steps if r.iteration <= new.iteration]
    last = messages[-1] if messages else None
    done = last is not None and last.role == "assistant" and not last.tool_calls
    status = "complete" if done else "running"
    new.metadata[RUN_KEY] = {"status": status, "run_id": new.run_id}
    _branch_turn_log(new, state, messages, shift, start, done)
    return new


def _branch_turn_log(
    new: AgentState, source: AgentState, messages: list[Message], shift: int, start: int, done: bool
) -> None:
    """The branch's turn log: the source's records of the turns kept whole (moved by ``shift``),
    and the last turn as ``running`` (or ``answered``) when it was cut. A source without a log
    (written by tulip) gets none, so its turns still read as tulip's."""
    if turn_log(source.metadata) is None:
        return
    n = len(messages) - shift
    kept = turn_log_for_prefix(source.metadata, source.messages, n) or []
    log = [{**r, "at": r["at"] + shift} for r in kept if r["at"] + shift < len(messages)]
    later = [i for i in turn_starts(source.messages) if i > start - shift]
    cut = (later[0] if later else len(source.messages)) > n  # the last turn lost its end
    if cut and messages and messages[start].role == "user":
        log.append({"at": start, "outcome": "answered" if done else "running", "run_id": new.run_id})
    new.metadata[TURNS_KEY] = log


async def save_branch(
    thread: Thread,
    state: AgentState,
    parent: str,
    *,
    new_thread_id: str | None,
    index: int,
    source: str,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """Save ``state`` as the first checkpoint of a new thread branched from ``thread`` at ``parent``."""
    new_id = new_thread_id or f"{thread.thread_id}-{source}-{uuid.uuid4().hex[:8]}"
    meta = {
        "forked_from": thread.thread_id,
        "parent_checkpoint_id": parent,
        "source": source,
        FORK_INDEX_KEY: index,
        **(extra or {}),
    }
    parent_hash = next((i.metadata.get(HASH_KEY) for i in thread.infos if i.checkpoint_id == parent), None)
    if isinstance(parent_hash, str):  # chain the branch to its source, as Agent.fork does
        meta[PARENT_HASH_KEY] = parent_hash
    try:
        await thread.checkpointer.save(state, new_id, metadata=meta, expected_parent="")
    except CheckpointConflict as e:
        raise CheckpointConflict("branch target thread already exists", thread_id=new_id) from e
    return new_id


async def _point(thread: Thread, at: str | int) -> tuple[AgentState, int, str]:
    """(source state, message index, parent checkpoint) of a fork point."""
    if isinstance(at, bool) or not isinstance(at, (str, int)):
        raise UserError(f"at= must be a checkpoint id or a message index, got {at!r}", thread_id=thread.thread_id)
    if isinstance(at, str):
        ck = await thread.acheckpoint(at)
        n = len(ck.state.messages)
        if n == 0:
            raise UserError("cannot fork at a checkpoint without messages", thread_id=thread.thread_id, at=at)
        return ck.state, n - 1, ck.checkpoint_id
    msgs = thread.final_messages
    index = at + len(msgs) if at < 0 else at
    if not 0 <= index < len(msgs):
        raise CheckpointNotFound(
            f"fork point is past the end: the thread has {len(msgs)} messages",
            thread_id=thread.thread_id,
            at=at,
        )
    parent = await thread.aprefix_checkpoint(msgs[: index + 1])  # from the headers: no state loaded
    return thread.latest.state, index, (parent or thread.latest.info).checkpoint_id


def _turn_point(thread: Thread, turn: int) -> int:
    """The message index a fork before turn ``turn``'s user message keeps up to."""
    if isinstance(turn, bool) or not isinstance(turn, int):
        raise UserError(f"turn= must be a turn number, got {turn!r}", thread_id=thread.thread_id)
    turns = split_turns(thread.final_messages, thread.latest.state.metadata)
    k = turn + len(turns) if turn < 0 else turn
    if not 0 <= k < len(turns):
        raise CheckpointNotFound(
            f"no turn {turn}: the thread has {len(turns)} turns", thread_id=thread.thread_id, turn=turn
        )
    if turns[k].first == 0:
        raise UserError(
            "cannot fork before the first turn: nothing comes before its user message (no system prompt)",
            thread_id=thread.thread_id,
            turn=turn,
        )
    return turns[k].first - 1


async def afork(
    thread: ThreadLike,
    at: str | int | None = None,
    edit: Edit | None = None,
    new_thread_id: str | None = None,
    *,
    turn: int | None = None,
    checkpointer: BaseCheckpointer | str | None = None,
) -> Thread:
    """A new thread with ``thread``'s history up to ``at``, or before turn ``turn`` (module
    docstring); returns its handle. Give exactly one of ``at`` and ``turn``.

    ``thread``: a :class:`Thread`, or a thread id with ``checkpointer=`` (a checkpointer or its URL).

    Errors name the thread and the point: a checkpoint not in the thread, an index past the end or
    a turn it does not have raise :class:`CheckpointNotFound`; a taken ``new_thread_id``
    :class:`CheckpointConflict`.
    """
    thread = await aas_thread(thread, checkpointer, what="fork")
    if (at is None) == (turn is None):
        raise UserError("fork: give exactly one of at= (a message index or checkpoint id) and turn=")
    if turn is not None:
        at = _turn_point(thread, turn)
    assert at is not None
    state, index, parent = await _point(thread, at)
    msgs, _ = apply_edit(state.messages[: index + 1], edit, index, f"thread {thread.thread_id!r}")
    new_id = await save_branch(
        thread, branch_state(state, msgs), parent, new_thread_id=new_thread_id, index=index, source="fork"
    )
    return await aopen_thread(thread.checkpointer, new_id, counter=thread.counter)


fork = sync_twin(afork)


def _variant_agent(base: Agent | None, spec: Mapping[str, Any], name: str, cp: Any, hooks: Sequence[Any] = ()) -> Agent:
    unknown = set(spec) - VARIANT_KEYS
    if unknown:
        raise UserError(f"variant {name!r}: unknown keys {sorted(unknown)}; allowed: {sorted(VARIANT_KEYS)}")
    model = spec.get("model", base.model if base is not None else None)
    if model is None:
        raise UserError(f"variant {name!r} needs a model: pass agent= or a 'model' entry")
    tools: dict[str, Any] = dict(base.tools_by_name) if base is not None else {}
    for tname, fn in (spec.get("tool_override") or {}).items():
        tools[tname] = fn if isinstance(fn, Tool) else Tool(fn, name=tname)
    manager = spec.get("conversation_manager")
    if manager is None and base is not None:
        manager = base.conversation_manager.clone_for_spawn()
    return Agent(
        model,
        list(tools.values()),
        system_prompt=spec.get("system_prompt", base.system_prompt if base is not None else None),
        checkpointer=cp,
        conversation_manager=manager,
        max_iterations=base.max_iterations if base is not None else 20,
        hooks=hooks,
    )


Variants = Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]
"""Sweep variants: ``{name: spec}``, or a list of specs (named ``"<index>: <key=value, ...>"``)."""


def _named_variants(variants: Variants) -> dict[str, Mapping[str, Any]]:
    """``{name: spec}`` of a dict or a list of variant specs (a list's are named by index and content)."""
    if isinstance(variants, Mapping):
        return {str(k): v for k, v in variants.items()}
    if isinstance(variants, (str, bytes)) or not isinstance(variants, Sequence):
        raise UserError(f"variants must be {{name: spec}} or a list of specs, got {type(variants).__name__}")
    out: dict[str, Mapping[str, Any]] = {}
    for i, spec in enumerate(variants):
        if not isinstance(spec, Mapping):
            raise UserError(f"variant {i} must be a dict like {{'model': ...}}, got {type(spec).__name__}")
        shown = ", ".join(f"{k}={getattr(v, '__name__', None) or repr(v)}" for k, v in spec.items())
        out[f"{i}: {short(shown, 60)}" if shown else str(i)] = spec
    return out


SWEEP_COLUMNS = [
    "variant", "thread_id", "final_answer", "iterations", "tool_trajectory", "tokens", "cost", "cached",
    "compactions", "error",
]  # fmt: skip


def _sweep_messages(state: AgentState, index: int, spec: Mapping[str, Any], where: str) -> tuple[list[Message], int]:
    """A variant's branch history (its edit and system prompt applied) and the messages it inserted."""
    msgs, _ = apply_edit(state.messages[: index + 1], spec.get("edit"), index, where)
    if spec.get("system_prompt") is None:
        return msgs, 0
    system = Message.system(spec["system_prompt"])
    if msgs and msgs[0].role == "system":
        return [system, *msgs[1:]], 0
    return [system, *msgs], 1


@dataclass
class VariantBranch:
    """One variant's branch from one point of a thread: the work a sweep does per variant.

    :meth:`make` builds its history (the variant's edit and system prompt applied; ``shift``
    messages inserted before the point) and the state saved as its first checkpoint; :meth:`run`
    forks it into its own thread and runs it, or finds the branch a previous run of the same sweep
    finished (``reused``). :func:`sweep` runs one per variant at a point of one thread;
    :func:`~tulip_nb.lab._corpus_sweep.sweep_corpus` maps the same over every thread of a corpus.
    """

    messages: list[Message]
    shift: int
    branch: AgentState
    thread_id: str | None = None
    final: AgentState | None = None
    reused: bool = False

    @classmethod
    def make(cls, state: AgentState, index: int, spec: Mapping[str, Any], where: str) -> VariantBranch:
        msgs, shift = _sweep_messages(state, index, spec, where)
        return cls(msgs, shift, branch_state(state, msgs, shift=shift))

    @property
    def at(self) -> int:
        """The branch point in the recording's numbering (an edit may cut before the sweep's point)."""
        return len(self.messages) - 1 - self.shift

    async def run(
        self,
        thread: Thread,
        go: Callable[[str], Awaitable[AgentState]],
        *,
        parent: str,
        index: int,
        name: str,
        tid: str | None,
    ) -> AgentState:
        """Fork (or find) the branch ``tid`` of ``thread`` at ``parent`` and run it: ``go(thread_id)``
        returns its final state. A finished branch is reused, an unfinished one (a crash, a failure)
        deleted and run again; :attr:`thread_id` is set before the run."""
        cp = thread.checkpointer
        saved = await saved_branch(cp, tid) if tid is not None else None
        if saved is not None and finished(saved, len(self.messages)):
            self.thread_id, self.final, self.reused = tid, saved, True
            return saved
        if saved is not None and tid is not None:
            await cp.delete(tid)
        self.thread_id = await save_branch(
            thread, self.branch, parent, new_thread_id=tid, index=index, source="sweep", extra={"variant": name}
        )
        self.final = await go(self.thread_id)
        return self.final


async def sweep_variants(
    names: Sequence[str],
    fill: Callable[[str, dict[str, Any]], Awaitable[None]],
    new_row: Callable[[str], dict[str, Any]],
    *,
    gate: asyncio.Semaphore,
    spend: SweepBudget,
) -> list[dict[str, Any]]:
    """One row per variant: ``fill(name, row)`` under ``gate``, the budget's refusal for a variant
    not started once it is spent, and a failed variant's error in its row (one failed branch must
    not sink the sweep)."""

    async def one(name: str) -> dict[str, Any]:
        row = new_row(name)
        async with gate:
            if spend.stopped:
                row["error"] = spend.not_run()
                return row
            try:
                await fill(name, row)
                spend.done += 1
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"
        return row

    return list(await asyncio.gather(*(one(n) for n in names)))


async def asweep(
    thread: ThreadLike,
    at: str | int,
    variants: Variants,
    *,
    checkpointer: BaseCheckpointer | str | None = None,
    prompt: str | None = None,
    agent: Agent | None = None,
    concurrency: int = 4,
    budget: Budget | int | None = None,
    resume: bool = True,
) -> pd.DataFrame:
    """Run one branch per variant from the same point; a DataFrame row per variant.

    Each variant (``{"model", "system_prompt", "edit", "conversation_manager", "tool_override"}``,
    all optional; the rest comes from ``agent``) is forked at ``at`` into its own thread, then runs
    ``prompt`` as a new turn (or, without a prompt, continues the unfinished turn at that point).
    ``variants``: ``{name: spec}``, or a list of specs, named ``"0: model='openai:gpt-4o'"`` etc.
    Columns (:data:`SWEEP_COLUMNS`): variant, thread_id, final_answer, iterations, tool_trajectory,
    tokens, cost (USD; NA when the model's price is unknown), cached (nothing was sent this run),
    compactions, error (a failed variant is reported, not raised). At most ``concurrency`` run at
    once. ``thread``: a :class:`Thread`, or a thread id with ``checkpointer=`` (a checkpointer or
    its URL).

    ``resume=True`` (default) names each branch from what decides it, so running the same sweep
    again reuses the branches already finished and re-runs only the missing or unfinished ones
    (their model calls already made come from the response cache); ``resume=False`` makes fresh
    branches. ``budget=``: a :class:`~tulip_nb.models.Budget` (tokens and/or USD) or an int
    (tokens): a live call that would pass it is refused, its branch is a row with the error, the
    branches not started yet are rows saying so, and ``frame.attrs["budget"]`` says how far the
    sweep got (module :mod:`tulip_nb.lab._live`).
    """
    pd = require("pandas")

    if concurrency < 1:
        raise UserError(f"concurrency must be at least 1, got {concurrency}")
    thread = await aas_thread(thread, checkpointer, what="sweep")
    variants = _named_variants(variants)
    spend = SweepBudget(budget)
    tallies = {name: Tally() for name in variants}
    agents = {
        name: spend.hold(_variant_agent(agent, spec, name, thread.checkpointer, [tallies[name]]))
        for name, spec in variants.items()
    }
    state, index, parent = await _point(thread, at)
    spend.total = len(variants)

    def new_row(name: str) -> dict[str, Any]:
        row: dict[str, Any] = dict.fromkeys(SWEEP_COLUMNS)
        row.update(variant=name, iterations=0, tool_trajectory=[], compactions=0)
        return row

    async def fill(name: str, row: dict[str, Any]) -> None:
        spec, a = variants[name], agents[name]
        vb = VariantBranch.make(state, index, spec, f"thread {thread.thread_id!r}")
        tid = branch_id(thread.thread_id, parent, index, name, spec, agent, prompt) if resume else None

        async def go(branch_tid: str) -> AgentState:
            row["thread_id"] = branch_tid
            result = await (
                a.run(prompt, thread_id=branch_tid) if prompt is not None else a.resume(thread_id=branch_tid)
            )
            return result.state

        final = await vb.run(thread, go, parent=parent, index=index, name=name, tid=tid)
        row["thread_id"] = vb.thread_id
        reused = tallies[name].calls == 0
        before = len(vb.branch.metadata.get(EVENTS_KEY) or [])
        last = final.messages[-1] if len(final.messages) > len(vb.messages) else None
        row.update(
            final_answer=last.content
            if last is not None and last.role == "assistant" and not last.tool_calls
            else None,
            iterations=final.iteration,
            tool_trajectory=executions_after(vb.branch, final),
            compactions=len(final.metadata.get(EVENTS_KEY) or []) - before,
            **live_columns(a.model, vb.branch, final, None if reused else tallies[name]),
        )

    rows = await sweep_variants(list(variants), fill, new_row, gate=asyncio.Semaphore(concurrency), spend=spend)
    frame = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
    frame["tokens"] = frame["tokens"].astype("Int64")
    frame["cost"] = frame["cost"].astype("Float64")
    frame["cached"] = frame["cached"].astype("boolean")
    for col in ("thread_id", "final_answer", "error"):  # text or None, whatever pandas would infer
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
    if spend.meter is not None:
        frame.attrs["budget"] = spend.attrs()
    return frame


sweep = sync_twin(asweep)
