"""What-if branches over a whole corpus, with the recording standing in for the tools.

:func:`sweep_corpus` (``Corpus.sweep``) takes every thread of a :class:`~tulip_nb.lab.corpus.Corpus`
and every variant (the specs :func:`~tulip_nb.lab.branches.sweep` takes: ``model``,
``system_prompt``, ``edit``, ``conversation_manager``, ``tool_override``; the rest comes from
``agent``), branches the thread at one point into a **new thread** of the corpus's store, and runs
the branch live to the end of that turn. By default the point is the thread's last user message,
so the last turn is run again under the variant.

A tool call whose tool and canonical arguments equal a call of the recording is **answered from
the record** (the result recorded at the same position when the recording made that call there,
else the nearest earlier one; :class:`~tulip_nb.lab._replay.RecordedResults`), so a what-if over
recorded threads needs no live tools. Any other call runs the agent's tool; a tool the variant
overrides (``tool_override``) always runs, since that override is the what-if::

    from tulip_nb.lab import open_corpus

    corpus = open_corpus("file:./corpus", "case-*")
    df = corpus.sweep({"same": {}, "terse": {"system_prompt": "Answer in one line."}}, agent=agent)
    df.groupby("variant")[["diverged", "live_tool_calls"]].mean()

One row per (thread, variant), in the corpus's order, columns :data:`COLUMNS`: the branch's final
answer next to the recorded one, its iterations (the turn's model calls, as
:class:`~tulip_nb.agent._result.AgentResult` counts them), tokens, cost (USD, NA when the model's
price is unknown), ``cached`` (nothing was sent for it this run), tool calls (of which answered from
the record / run live; an idempotent tool's cache hit is neither), and whether the branch
``diverged`` from the recording: its messages after the point compared with the rest of the
recorded turn by the lab's message identity (:func:`~tulip_nb.core.canonical.same_message`, tool-call
ids left out: they are labels, a call's identity is its position). ``first_divergence`` is the
recording's message index where they first differ (None: the same). A thread that cannot be read or
has no such point, and a branch that fails, are rows with ``error``; the sweep goes on. Each branch
records its lineage in its first save (``forked_from``, ``parent_checkpoint_id``,
``fork_message_index``, ``source="sweep"``, ``variant``) and is named ``<thread>-sweep-<12 hex>``
from what decides it (so re-running the sweep reuses what it finished: ``resume=True``),
so a later ``open_corpus(url, "case-*")`` lists the branches too: keep the first corpus, or drop
the rows of ``summary()`` with a ``forked_from``.

**Executors.** The work is split by thread (:func:`~tulip_nb.lab._executors.map_threads`): in
process by default, or on a ``concurrent.futures`` executor or a Dask client, whose workers open
the store from its URL (open the corpus from a URL). What travels is the agent's recipe (model,
tools, system prompt, manager, ``max_iterations``) and the variants, pickled: a ``ScriptedModel``
with a module-level function, module-level ``@tool`` functions and the built-in managers do;
lambdas and closures do not (a :class:`~tulip_nb.core.errors.UserError` names the variant; Dask's
cloudpickle takes them). A variant's model is shared by its branches in a worker: give it no
per-conversation state (a reply function, not a list of answers). ``max_concurrency`` bounds the
branches running at once in each worker.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tulip_nb._deps import require
from tulip_nb._sync import sync_twin
from tulip_nb.agent import Agent
from tulip_nb.agent.events import Hooks, ModelCall, ToolCalled
from tulip_nb.core import Message
from tulip_nb.core.calls import CallRef, execution_position, last_model_call, unanswered_calls
from tulip_nb.core.canonical import same_message
from tulip_nb.core.errors import UserError
from tulip_nb.core.state import AgentState
from tulip_nb.lab._executors import amap_threads, is_dask_client, require_picklable
from tulip_nb.lab._live import SweepBudget, Tally, branch_id, executions_after, live_columns
from tulip_nb.lab._replay import RecordedResults
from tulip_nb.lab._stores import open_checkpointer
from tulip_nb.lab._thread import Thread, aopen_thread
from tulip_nb.lab.branches import VariantBranch, Variants, _named_variants, _point, _variant_agent, sweep_variants
from tulip_nb.models.budget import Budget
from tulip_nb.models.scripted import ScriptedModel
from tulip_nb.tools import Tool

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["COLUMNS", "At", "CorpusLike", "asweep_corpus", "sweep_chunk", "sweep_corpus"]


class CorpusLike(Protocol):
    """What a corpus sweep reads of its corpus (a :class:`~tulip_nb.lab.Corpus` is one): the thread
    ids, the open store, and the URL it was opened from (None: not from a URL; workers in other
    processes need one)."""

    @property
    def thread_ids(self) -> list[str]: ...

    @property
    def checkpointer(self) -> BaseCheckpointer: ...

    @property
    def source(self) -> str | None: ...


At = str | int | Callable[[Thread], int]
"""A branch point: ``"last_user"``, ``"first_user"``, a message index (negative from the end),
or a function ``thread -> message index``."""

COLUMNS = [
    "thread_id", "variant", "branch_thread_id", "final_answer", "recorded_answer", "iterations", "tokens",
    "cost", "cached", "tool_calls", "recorded_tool_answers", "live_tool_calls", "diverged", "first_divergence",
    "error",
]  # fmt: skip
_COUNTS = ("iterations", "tokens", "tool_calls", "recorded_tool_answers", "live_tool_calls", "first_divergence")
_TEXTS = ("branch_thread_id", "final_answer", "recorded_answer", "error")
_AT_NAMES = ("last_user", "first_user")


# -- what travels to the workers ---------------------------------------------------------------


def _global(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _tool_from(fn: Any, name: str, description: str, idempotent: bool, parameters: dict[str, Any]) -> Tool:
    built = Tool(fn, name=name, description=description, idempotent=idempotent)
    if built.parameters != parameters:  # the original's schema was given explicitly
        built = Tool(fn, name=name, description=description, idempotent=idempotent, parameters=parameters)
    return built


class _PortableTool:
    """A :class:`Tool` that pickles: by reference when it is a module-level ``@tool`` (the module
    attribute is the Tool, so its function cannot pickle by name), else as its function and
    settings. Unpickling gives back a plain Tool."""

    def __init__(self, tool: Tool) -> None:
        self.tool = tool

    def __reduce__(self) -> tuple[Any, ...]:
        t = self.tool
        module, qualname = getattr(t.fn, "__module__", None), getattr(t.fn, "__qualname__", "")
        if module and "<" not in qualname:
            try:
                if _global(module, qualname) is t:
                    return (_global, (module, qualname))
            except (ImportError, AttributeError):
                pass
        return (_tool_from, (t.fn, t.name, t.description, t.idempotent, t.parameters))


def _tool(obj: Any) -> Any:
    return obj.tool if isinstance(obj, _PortableTool) else obj


@dataclass
class _Plan:
    """The sweep's payload: the base agent's recipe, the variants, the point, the concurrency,
    whether branches are resumed, and (in process only) the budget's account."""

    base: dict[str, Any] | None
    variants: dict[str, dict[str, Any]]
    at: At
    max_concurrency: int
    resume: bool = True
    spend: SweepBudget | None = None

    def base_agent(self) -> Agent | None:
        if self.base is None:
            return None
        b = self.base
        return Agent(
            b["model"],
            [_tool(t) for t in b["tools"]],
            system_prompt=b["system_prompt"],
            conversation_manager=b["conversation_manager"],
            max_iterations=b["max_iterations"],
        )

    def spec(self, name: str) -> dict[str, Any]:
        spec = dict(self.variants[name])
        if spec.get("tool_override"):
            spec["tool_override"] = {k: _tool(v) for k, v in spec["tool_override"].items()}
        return spec


def _shippable_model(model: Any) -> Any:
    """``model`` to send to workers: a ScriptedModel without the requests it has recorded so far
    (an agent that wrote the corpus holds every request it made)."""
    if isinstance(model, ScriptedModel) and model.requests:
        model = copy.copy(model)
        model.requests = []
    return model


def _portable_spec(spec: Mapping[str, Any], ship: bool) -> dict[str, Any]:
    out = dict(spec)
    if ship and "model" in out:
        out["model"] = _shippable_model(out["model"])
    overrides = out.get("tool_override")
    if overrides:
        out["tool_override"] = {
            k: _PortableTool(v if isinstance(v, Tool) else Tool(v, name=k)) for k, v in dict(overrides).items()
        }
    return out


def _plan(
    agent: Agent | None, variants: dict[str, Mapping[str, Any]], at: At, max_concurrency: int, *, ship: bool
) -> _Plan:
    """The payload; ``ship``: it goes to other processes (models are then copied lighter)."""
    base = None
    if agent is not None:
        base = {
            "model": _shippable_model(agent.model) if ship else agent.model,
            "tools": [_PortableTool(t) for t in agent.tools_by_name.values()],
            "system_prompt": agent.system_prompt,
            "conversation_manager": agent.conversation_manager,
            "max_iterations": agent.max_iterations,
        }
    return _Plan(base, {n: _portable_spec(s, ship) for n, s in variants.items()}, at, max_concurrency)


def _ships(executor: Any) -> bool:
    """Whether the payload goes to other processes (pickled)."""
    return executor is not None and not isinstance(executor, ThreadPoolExecutor)


def _check_pickles(plan: _Plan, executor: Any) -> None:
    """:class:`UserError` naming what cannot be sent to the workers (the agent, ``at``, a variant)."""
    if not _ships(executor):
        return
    dask = is_dask_client(executor)
    require_picklable("sweep: agent=", plan.base, dask=dask)
    require_picklable("sweep: at=", plan.at, dask=dask)
    for name, spec in plan.variants.items():
        require_picklable(f"sweep: variant {name!r}", spec, dask=dask)


# -- one branch --------------------------------------------------------------------------------


class _Positions(Hooks):
    """Where a branch is: the position of the call its tools are answering now, in the recording's
    numbering (``shift``: messages the variant inserted before the history)."""

    def __init__(self, messages: Sequence[Message], shift: int) -> None:
        self.n = len(messages)
        self.shift = shift
        i = last_model_call(messages)
        open_calls = unanswered_calls(messages, i) if i is not None else []
        self.assistant: int | None = i if open_calls else None
        self.call = open_calls[0] if open_calls else 0

    def on_model_call(self, event: ModelCall) -> None:
        self.assistant, self.call = self.n, 0
        self.n += 1

    def on_tool_call(self, event: ToolCalled) -> None:
        self.n += 1  # the result was appended before the event
        if event.position is not None:
            self.assistant, self.call = event.position[0], event.position[1] + 1
        else:
            self.call += 1

    def where(self) -> CallRef | None:
        return None if self.assistant is None else (self.assistant - self.shift, self.call)


def _answering_tool(
    name: str, real: Tool | None, recorded: RecordedResults | None, where: _Positions, counts: dict[str, int]
) -> Tool:
    """``name`` answered from the record when it holds the call (``recorded`` None: always live),
    else by the agent's tool; ``counts`` tallies both."""

    async def answer(**arguments: Any) -> Any:
        if recorded is not None:
            try:
                text = recorded.answer(name, arguments, where.where())
            except LookupError as e:
                if real is None:
                    raise LookupError(f"{e}, and the agent has no tool {name!r}") from None
            else:
                counts["recorded"] += 1
                return text
        assert real is not None
        real.validate_arguments(arguments)
        counts["live"] += 1
        return await real.invoke(arguments)

    params = real.parameters if real is not None else {"type": "object", "properties": {}}
    desc = real.description if real is not None else f"recorded results of {name}"
    idempotent = real.idempotent if real is not None else False
    return Tool(answer, name=name, description=desc, parameters=params, idempotent=idempotent)


def _turn_end(messages: Sequence[Message], point: int) -> int:
    """End (exclusive) of the turn ``messages[point]`` is in: the next user message, or the end."""
    return next((i for i in range(point + 1, len(messages)) if messages[i].role == "user"), len(messages))


def _final_text(messages: Sequence[Message]) -> str | None:
    last = next((m for m in reversed(messages) if m.role == "assistant"), None)
    return last.content if last is not None and not last.tool_calls else None


def _divergence(branch: Sequence[Message], recording: Sequence[Message], start: int) -> int | None:
    """The recording's index (``start`` + offset) where ``branch`` first differs from ``recording``."""
    for k, (a, b) in enumerate(zip(branch, recording, strict=False)):
        if not same_message(a, b, ids=False):
            return start + k
    return None if len(branch) == len(recording) else start + min(len(branch), len(recording))


def _row(thread_id: str, variant: str | None, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(thread_id=thread_id, variant=variant, **values)
    return row


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


@dataclass
class _Point:
    thread: Thread
    state: AgentState
    index: int
    parent: str
    recorded: RecordedResults


async def _run_branch(
    point: _Point,
    name: str,
    spec: Mapping[str, Any],
    variant: Agent,
    row: dict[str, Any],
    plan: _Plan,
    base: Agent | None,
) -> None:
    """Fork ``point`` for variant ``name``, run it to the end of the turn, fill ``row``."""
    thread = point.thread
    vb = VariantBranch.make(point.state, point.index, spec, f"thread {thread.thread_id!r}")
    at, msgs, shift = vb.at, vb.messages, vb.shift
    record = thread.final_messages
    segment = record[at + 1 : _turn_end(record, at)]
    row["recorded_answer"] = _final_text(segment)
    last = msgs[-1]
    if last.role == "assistant" and not last.tool_calls:
        raise UserError(
            f"message {at} is the final answer of its turn: nothing to run again there (point at a user "
            "message, e.g. at='last_user')",
            thread_id=thread.thread_id,
        )
    tid = branch_id(thread.thread_id, point.parent, at, name, spec, base, None) if plan.resume else None
    live_only = set(spec.get("tool_override") or {})
    tally = Tally()
    counts = {"recorded": 0, "live": 0}

    async def go(branch_tid: str) -> AgentState:
        row["branch_thread_id"] = branch_tid
        return await _run_live(point, variant, msgs, shift, live_only, branch_tid, tally, counts)

    final = await vb.run(thread, go, parent=point.parent, index=at, name=name, tid=tid)
    row["branch_thread_id"] = vb.thread_id
    branch = vb.branch
    if vb.reused:
        counts = _recorded_counts(branch, final, point.recorded, live_only, shift)
    after = final.messages[len(msgs) :]
    first = _divergence(after, segment, at + 1)
    row.update(
        final_answer=_final_text(after),
        iterations=final.iteration,
        **live_columns(variant.model, branch, final, None if vb.reused else tally),
        tool_calls=len(executions_after(branch, final)),
        recorded_tool_answers=counts["recorded"],
        live_tool_calls=counts["live"],
        diverged=first is not None,
        first_divergence=first,
    )


async def _run_live(
    point: _Point,
    variant: Agent,
    msgs: list[Message],
    shift: int,
    live_only: set[str],
    tid: str,
    tally: Tally,
    counts: dict[str, int],
) -> AgentState:
    """Run the saved branch ``tid`` to the end of its turn, tools answered from the record (how
    many from the record, how many live: ``counts``)."""
    positions = _Positions(msgs, shift)
    real = variant.tools_by_name
    names = sorted(point.recorded.names | set(real))
    tools = [
        _answering_tool(n, real.get(n), None if n in live_only else point.recorded, positions, counts) for n in names
    ]
    agent = Agent(
        variant.model,
        tools,
        system_prompt=variant.system_prompt,
        checkpointer=point.thread.checkpointer,
        conversation_manager=variant.conversation_manager.clone_for_spawn(),
        max_iterations=variant.max_iterations,
        hooks=[positions, tally],
    )
    result = await agent.resume(thread_id=tid)
    return result.state


def _recorded_counts(
    before: AgentState, after: AgentState, recorded: RecordedResults, live_only: set[str], shift: int
) -> dict[str, int]:
    """A reused branch's answers from the record / live tools, by the rule the live run applied
    (the record holds the call at its position in the recording's numbering; an idempotent cache
    hit is neither)."""
    counts = {"recorded": 0, "live": 0}
    old = {tuple(p) for ex in before.tool_executions if (p := execution_position(ex)) is not None}
    for ex in after.tool_executions:
        pos = execution_position(ex)
        if pos is None or tuple(pos) in old or ex.idempotent_cache_hit:
            continue
        if ex.tool_name not in live_only:
            try:
                recorded.answer(ex.tool_name, ex.arguments, (pos[0] - shift, pos[1]))
            except LookupError:
                pass
            else:
                counts["recorded"] += 1
                continue
        counts["live"] += 1
    return counts


# -- one thread, one chunk ---------------------------------------------------------------------


def _index_of(thread: Thread, at: At) -> int:
    msgs = thread.final_messages
    if isinstance(at, str):
        users = [i for i, m in enumerate(msgs) if m.role == "user"]
        if not users:
            raise UserError(f"at={at!r}: the thread has no user message", thread_id=thread.thread_id)
        return users[-1] if at == "last_user" else users[0]
    index = at(thread) if callable(at) else at
    if isinstance(index, bool) or not isinstance(index, int):
        raise UserError(f"at= function must return a message index (int), got {index!r}", thread_id=thread.thread_id)
    return index


async def _open_point(cp: Any, thread_id: str, at: At) -> _Point:
    thread = await aopen_thread(cp, thread_id)
    state, index, parent = await _point(thread, _index_of(thread, at))
    return _Point(thread, state, index, parent, RecordedResults(thread.final_messages))


async def _sweep_chunk(cp: Any, thread_ids: Sequence[str], plan: _Plan) -> list[dict[str, Any]]:
    base = plan.base_agent()
    specs = {name: plan.spec(name) for name in plan.variants}
    spend = plan.spend or SweepBudget(None)
    variants = {name: spend.hold(_variant_agent(base, spec, name, None)) for name, spec in specs.items()}
    gate = asyncio.Semaphore(plan.max_concurrency)

    async def thread(tid: str) -> list[dict[str, Any]]:
        """The one sweep (:func:`~tulip_nb.lab.branches.sweep_variants`) at this thread's point."""
        try:
            async with gate:
                point = await _open_point(cp, tid, plan.at)
        except Exception as e:
            return [_row(tid, name, error=_error(e)) for name in specs]

        async def fill(name: str, row: dict[str, Any]) -> None:
            await _run_branch(point, name, specs[name], variants[name], row, plan, base)

        return await sweep_variants(list(specs), fill, lambda name: _row(tid, name), gate=gate, spend=spend)

    per_thread = await asyncio.gather(*(thread(tid) for tid in thread_ids))
    return [row for rows in per_thread for row in rows]


async def sweep_chunk(source: Any, thread_ids: Sequence[str], plan: _Plan) -> list[dict[str, Any]]:
    """The task :func:`~tulip_nb.lab._executors.map_threads` runs on a chunk of thread ids (top
    level, so a worker imports it): ``source`` is the corpus's checkpointer or its store URL."""
    cp, opened = open_checkpointer(getattr(source, "checkpointer", source))
    try:
        return await _sweep_chunk(cp, thread_ids, plan)
    finally:
        if opened:
            await cp.close()


# -- the sweep ---------------------------------------------------------------------------------


def _check_at(at: Any) -> At:
    if isinstance(at, str) and at in _AT_NAMES:
        return at
    if callable(at) or (isinstance(at, int) and not isinstance(at, bool)):
        return at  # type: ignore[no-any-return]
    raise UserError(f"at= must be 'last_user', 'first_user', a message index or a function thread -> index, got {at!r}")


def _expand(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Every row complete, and a chunk's error row (no variant) as one row per variant."""
    out = []
    for row in rows:
        full = {**dict.fromkeys(COLUMNS), **row}
        if full.get("variant") is None:
            out += [{**full, "variant": name} for name in names]
        else:
            out.append(full)
    return out


async def asweep_corpus(
    corpus: CorpusLike,
    variants: Variants,
    *,
    at: At = "last_user",
    agent: Agent | None,
    executor: Any = None,
    max_concurrency: int = 8,
    progress: Any = None,
    budget: Budget | int | None = None,
    resume: bool = True,
) -> pd.DataFrame:
    """Run one branch per thread of ``corpus`` x variant from ``at``; a DataFrame of outcomes.

    See the module docstring. ``variants``: ``{name: spec}`` or a list of specs (as
    :func:`~tulip_nb.lab.branches.sweep` takes them); ``agent``: the base the variants change (its
    tools are the live ones; None: every variant names its ``model`` and tools answer from the
    record only); ``executor``: None (in process), a ``concurrent.futures`` executor or a Dask
    client (the corpus must then come from a store URL); ``progress`` as
    :func:`~tulip_nb.lab._executors.map_threads` takes it. A bad variant, ``at`` or
    ``max_concurrency``, or a payload that cannot reach the workers, is a :class:`UserError`
    before anything runs; per thread and branch failures are rows with ``error``.

    Live models (:mod:`tulip_nb.lab._live`): ``tokens`` and ``cost`` per branch, ``cached`` when
    nothing was sent; ``resume=True`` reuses the branches a previous run of the same sweep finished
    and re-runs the unfinished ones; ``budget=`` (a :class:`~tulip_nb.models.Budget` or an int of
    tokens) refuses the live call that would pass it, leaves the branches not started as rows
    saying so, and ``frame.attrs["budget"]`` says how far the sweep got. A budget is one account
    in this process: with an executor that ships work to other processes it is refused.
    """
    pd = require("pandas")

    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
        raise UserError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
    at = _check_at(at)
    named = _named_variants(variants)
    if not named:
        raise UserError("sweep: no variants given")
    for name, spec in named.items():
        _variant_agent(agent, spec, name, None)  # unknown keys, no model: refused here, not per row
    spend = SweepBudget(budget)
    if spend.meter is not None and _ships(executor):
        raise UserError("sweep: budget= is one account in this process; run without an executor or on a thread pool")
    plan = _plan(agent, named, at, max_concurrency, ship=_ships(executor))
    plan.resume = resume
    _check_pickles(plan, executor)
    ids = list(corpus.thread_ids)
    if spend.meter is not None:
        spend.total = len(ids) * len(named)
        plan.spend = spend
    rows = await amap_threads(sweep_chunk, corpus, ids, plan, executor=executor, progress=progress)
    frame = _frame(pd, _expand(rows, list(named)))
    if spend.meter is not None:
        frame.attrs["budget"] = spend.attrs()
    return frame


def _frame(pd: Any, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a frame: counts ``Int64`` and ``diverged`` ``boolean`` (NA on error rows), text
    columns None where missing."""
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for col in _COUNTS:
        frame[col] = frame[col].astype("Int64")
    frame["diverged"] = frame["diverged"].astype("boolean")
    frame["cached"] = frame["cached"].astype("boolean")
    frame["cost"] = frame["cost"].astype("Float64")
    for col in _TEXTS:
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
    return frame


sweep_corpus = sync_twin(asweep_corpus)
