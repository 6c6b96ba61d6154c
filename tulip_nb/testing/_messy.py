"""Messy generated threads: real agent runs with injected failures, and their ground truth.

Research threads are messy (ARCHITECTURE.md, decision 12): turns fail, an interrupt is left
pending, a tulip agent adds turns, forks change the system prompt or a tool. The lab's replay,
diff, simulator and corpus frames are tested on threads like that, and a test needs to know what
*should* be found. :func:`build_messy_thread` writes such a thread with the real
:class:`~tulip_nb.agent.Agent` and a :class:`~tulip_nb.models.ScriptedModel` driven by a function,
into any checkpointer, following a plan drawn from a seed; it returns the plan's ground truth, a
:class:`MessyThread`: per turn how it ended (one of :data:`~tulip_nb.core.turns.OUTCOMES`), where it starts, how many
model calls and tool calls it made, which checkpoint ends it.

Each turn's user message is ``"T<i>: ..."``; one turn in four states a fact (``"fact F12 =
4821"``) that :func:`keep_facts`, the thread's summariser, keeps. What a turn may be:

- ``answered`` — a plain answer, or tool calls first: ``lookup_record`` (idempotent: a key already
  looked up in the thread is served from the record, a *cache hit*), ``query_metric`` (raises on
  some inputs: an ``"Error: ValueError: ..."`` result), ``fetch_report`` (a 5-30 kB result),
  two calls in one message, or two iterations; an interrupt answered with ``agent.resume`` also
  ends ``answered`` (``resumed=True``);
- ``error`` — the model raises :class:`~tulip_nb.models.ModelError` or
  :class:`~tulip_nb.models.ModelHTTPError` (at the first request or after a tool iteration);
- ``context_exceeded`` — a huge user message: the ``LLMCompactor`` raises
  :class:`~tulip_nb.core.errors.ContextWindowExceeded` before calling the model; with the null
  manager the scripted provider reports the overflow (the agent retries once: two requests);
- ``max_iterations`` — the model keeps calling tools until the agent's ``max_iterations``;
- ``interrupted`` — ``ask_human`` raises :class:`~tulip_nb.tools.Interrupt` and the turn is left
  pending: the next turn starts anyway (the agent answers the open call "outcome unknown");
- ``tulip`` — a turn written as a tulip agent writes it (a new ``run_id``; user, maybe a
  ``lookup_record`` call, answer; per-turn fields reset; no tulip_nb turn status, compaction event
  or save metadata of its own), through the checkpointer's own API, so no tulip is needed.

Forks (``MessySpec(forks=...)``) branch the finished thread before a random turn with the lab's
:func:`~tulip_nb.lab.fork`, then run a few turns with a changed system prompt or a changed
``query_metric`` (its v2 never raises), alternately. A fork's :class:`MessyThread` lists the
turns it inherited (recorded in the source thread) and its own.

>>> from tulip_nb.agent import run_sync
>>> from tulip_nb.memory.backends import MemoryCheckpointer
>>> from tulip_nb.testing import MessySpec, build_messy_thread
>>> cp = MemoryCheckpointer()
>>> spec = MessySpec(seed=3, turns=12, error_rate=0.2, tulip_rate=0.2, interrupt_rate=0.1)
>>> th = build_messy_thread(cp, "demo", spec)
>>> [t.outcome for t in th.turns][:6]
['answered', 'answered', 'tulip', 'tulip', 'max_iterations', 'error']
>>> bad = th.turns[5]
>>> bad.error, bad.start, bad.model_calls, bad.saved_status, bad.saved_source
('ModelError', 20, 1, 'error', 'error')
>>> saved = run_sync(cp.load_checkpoint("demo", bad.checkpoint_id))
>>> saved.state.metadata["_tulip_nb_run"]["status"], saved.metadata["source"]
('error', 'error')
>>> th.n_messages == len(run_sync(cp.load("demo")).messages)
True

**Determinism.** For one spec and thread id, every run writes the same messages, tool calls (ids
included) and results; checkpoint ids, run ids and timestamps are the store's and the agent's.
:func:`build_messy_corpus` derives each thread's seed from the spec's and its number.

This module imports no test framework; :func:`messy_specs` imports hypothesis when called.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tulip_nb._sync import sync_twin
from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.core.turns import OUTCOMES
from tulip_nb.models import ScriptedModel, text
from tulip_nb.testing._messy_plan import Planner
from tulip_nb.testing._messy_run import Builder, Done, make_agent
from tulip_nb.testing._messy_spec import MessySpec, keep_facts
from tulip_nb.testing._messy_tools import METRIC_V1, METRIC_V2

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from tulip_nb.agent import Agent
    from tulip_nb.memory.checkpointer import BaseCheckpointer
    from tulip_nb.models import Model

__all__ = [
    "MessyFork",
    "MessySpec",
    "MessyThread",
    "MessyTurn",
    "abuild_messy_corpus",
    "abuild_messy_thread",
    "build_messy_corpus",
    "build_messy_thread",
    "keep_facts",
    "messy_agent",
    "messy_specs",
]


SYSTEM_PROMPT = "You are an analyst. Use the tools; keep answers short."

# -- the ground truth ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MessyTurn:
    """The ground truth of one turn (see the fields' comments)."""

    index: int
    """0-based turn number in its thread."""
    outcome: str
    """One of :data:`~tulip_nb.core.turns.OUTCOMES`; an interrupt answered with ``resume`` is how the resume ended."""
    start: int
    """Message index of the turn's user message."""
    end: int
    """One past the turn's last message in the thread's final history (the next turn's start): a
    pending interrupt's "outcome unknown" result, added when the next turn starts, belongs here."""
    model_calls: int
    """Assistant messages the turn recorded."""
    requests: int
    """Times the model was asked (a failed request records no message)."""
    tool_calls: tuple[str, ...]
    """Names of the tools called, in order (the interrupting call included)."""
    tool_errors: int
    """Calls whose result is an ``"Error: ..."`` text (``query_metric`` raising)."""
    cache_hits: int
    """``lookup_record`` calls answered from the thread's record (the key was looked up before)."""
    error: str | None
    """The exception's class name, for ``error`` and ``context_exceeded`` turns."""
    resumed: bool
    """Interrupted, then answered with ``agent.resume``."""
    run_id: str
    """The turn's ``AgentState.run_id`` (a tulip turn has a new one too)."""
    checkpoint_id: str
    """The turn's last checkpoint, in :attr:`thread_id`."""
    thread_id: str
    """The thread that recorded the turn (for a fork's inherited turns: the source)."""
    facts: tuple[str, ...] = ()
    """Facts stated in the turn's user message."""

    @property
    def saved_status(self) -> str | None:
        """``state.metadata["_tulip_nb_run"]["status"]`` of the turn's last checkpoint (None: a
        tulip turn, which leaves the previous turn's record as it was)."""
        return {
            "error": "error",
            "context_exceeded": "error",
            "interrupted": "interrupted",
            "tulip": None,
        }.get(self.outcome, "complete")

    @property
    def saved_source(self) -> str | None:
        """The save-metadata ``source`` of the turn's last checkpoint (None: tulip writes none)."""
        return {
            "error": "error",
            "context_exceeded": "error",
            "interrupted": "interrupt",
            "tulip": None,
        }.get(self.outcome, "final")


@dataclass(frozen=True)
class MessyFork:
    """Where a fork came from and what it changed."""

    source_thread_id: str
    before_turn: int
    """The fork keeps the source's turns before this one."""
    at_message: int
    """The source message index it was cut at (``fork(at=...)``): the last message kept."""
    changed: Mapping[str, tuple[str, str]]
    """``{"system_prompt": (old, new)}`` or ``{"tool:query_metric": (old description, new
    description)}`` (the new ``query_metric`` never raises)."""


@dataclass(frozen=True)
class MessyThread:
    """A generated thread's ground truth: its turns, and its forks."""

    thread_id: str
    spec: MessySpec
    system_prompt: str
    """The system prompt the thread's own turns ran with."""
    turns: tuple[MessyTurn, ...]
    n_messages: int
    """Messages in the thread's latest state."""
    forked: MessyFork | None = None
    """Set on a fork."""
    forks: tuple[MessyThread, ...] = ()
    """The forks made of this thread."""

    @property
    def facts(self) -> tuple[str, ...]:
        """Every fact stated in the thread, in order."""
        return tuple(f for t in self.turns for f in t.facts)

    def outcome_counts(self) -> dict[str, int]:
        """``{outcome: number of turns}`` for every outcome of :data:`~tulip_nb.core.turns.OUTCOMES`
        (zeros included)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        for t in self.turns:
            counts[t.outcome] += 1
        return counts

    def threads(self) -> list[MessyThread]:
        """This thread, then its forks."""
        return [self, *self.forks]


def _turns(done: Sequence[Done], n_messages: int) -> tuple[MessyTurn, ...]:
    out = []
    for k, d in enumerate(done):
        p = d.plan
        end = done[k + 1].start if k + 1 < len(done) else n_messages
        out.append(
            MessyTurn(
                index=p.index,
                outcome=p.outcome,
                start=d.start,
                end=end,
                model_calls=sum(1 for s in p.steps if isinstance(s, Message))
                + sum(1 for s in p.resume_steps or () if isinstance(s, Message))
                + sum(1 for m in p.tulip_messages if m.role == "assistant"),
                requests=p.requests,
                tool_calls=tuple(p.tool_calls),
                tool_errors=p.tool_errors,
                cache_hits=p.cache_hits,
                error=p.error,
                resumed=p.resume_steps is not None,
                run_id=d.run_id,
                checkpoint_id=d.checkpoint_id,
                thread_id=d.thread_id,
                facts=p.facts,
            )
        )
    return tuple(out)


async def _run_plans(builder: Builder, planner: Planner, first: int, count: int, *, tool_fork: bool) -> list[Done]:
    done = []
    for index in range(first, first + count):
        forced = tool_fork and index == first
        outcome = "answered" if forced else planner.outcome(index)
        done.append(await builder.run(planner.plan(index, outcome, force_metric_error=forced)))
    return done


async def _fork(
    cp: BaseCheckpointer,
    source: str,
    done: list[Done],
    n_messages: int,
    spec: MessySpec,
    rng: random.Random,
    k: int,
) -> MessyThread:
    from tulip_nb.lab.branches import afork  # the lab is above this layer of use: import on demand

    before = rng.randint(1, len(done))
    at = done[before].start - 1 if before < len(done) else n_messages - 1
    fork_id = f"{source}-fork-{k}"
    await afork(source, at, new_thread_id=fork_id, checkpointer=cp)
    tool_fork = k % 2 == 1
    prompt = SYSTEM_PROMPT if tool_fork else f"{SYSTEM_PROMPT} Answer in one line (fork {k})."
    changed = (
        {"tool:query_metric": (METRIC_V1.description, METRIC_V2.description)}
        if tool_fork
        else {"system_prompt": (SYSTEM_PROMPT, prompt)}
    )
    pending = before == len(done) and done[-1].plan.pending
    builder = Builder(cp, fork_id, spec, system_prompt=prompt, tools_v2=tool_fork, n=at + 1, pending=pending)
    seen = {key for d in done[:before] for key in d.plan.keys}
    planner = Planner(spec, rng, tools_v2=tool_fork, seen=seen)
    own = await _run_plans(builder, planner, before, spec.fork_turns, tool_fork=tool_fork)
    turns = _turns([*done[:before], *own], builder.n)
    return MessyThread(
        thread_id=fork_id,
        spec=spec,
        system_prompt=prompt,
        turns=turns,
        n_messages=builder.n,
        forked=MessyFork(source, before, at, changed),
    )


async def abuild_messy_thread(
    checkpointer: BaseCheckpointer, thread_id: str, spec: MessySpec | None = None
) -> MessyThread:
    """Write one messy thread (and its forks) into ``checkpointer``; return its ground truth.

    ``thread_id`` must be new in the checkpointer (forks are ``<thread_id>-fork-<k>``). Raises
    :class:`~tulip_nb.core.errors.UserError` when the thread already has checkpoints, and
    ``RuntimeError`` naming the turn when the agent did not do what the plan assumed.
    """
    spec = spec or MessySpec()
    if await checkpointer.list_checkpoints(thread_id, limit=1):
        raise UserError("build_messy_thread needs a new thread: this one has checkpoints", thread_id=thread_id)
    rng = random.Random(spec.seed)
    builder = Builder(checkpointer, thread_id, spec, system_prompt=SYSTEM_PROMPT, tools_v2=False, n=1, pending=False)
    planner = Planner(spec, rng, tools_v2=False, seen=set())
    done = await _run_plans(builder, planner, 0, spec.turns, tool_fork=False)
    forks = [await _fork(checkpointer, thread_id, done, builder.n, spec, rng, k) for k in range(spec.forks)]
    return MessyThread(
        thread_id=thread_id,
        spec=spec,
        system_prompt=SYSTEM_PROMPT,
        turns=_turns(done, builder.n),
        n_messages=builder.n,
        forks=tuple(forks),
    )


build_messy_thread = sync_twin(abuild_messy_thread)


def _thread_seed(seed: int, i: int) -> int:
    return (seed * 1_000_003 + i) % 2**63


async def abuild_messy_corpus(
    checkpointer: BaseCheckpointer, n: int, spec: MessySpec | None = None, *, prefix: str = "messy"
) -> list[MessyThread]:
    """Write ``n`` messy threads ``<prefix>-0000`` ... (each with its forks); their ground truth.

    Thread ``i`` is built from ``spec`` with its own seed (see :attr:`MessyThread.spec`), so any
    one of them can be rebuilt alone with :func:`build_messy_thread`.
    """
    if n < 0:
        raise UserError(f"build_messy_corpus: n must be >= 0, got {n}")
    spec = spec or MessySpec()
    out = []
    for i in range(n):
        one = dataclasses.replace(spec, seed=_thread_seed(spec.seed, i))
        out.append(await abuild_messy_thread(checkpointer, f"{prefix}-{i:04d}", one))
    return out


build_messy_corpus = sync_twin(abuild_messy_corpus)


def messy_agent(
    checkpointer: BaseCheckpointer | None, thread: MessyThread | MessySpec | None = None, *, model: Model | None = None
) -> Agent:
    """An :class:`~tulip_nb.agent.Agent` set up as ``thread`` was written, to continue it live.

    Its tools (a tool fork's changed ``query_metric`` included), system prompt, a fresh manager
    as the spec configures it, ``max_iterations`` and ``checkpoint_every``: what
    ``Replay(..., agent=...)`` with real tools, ``go_live`` or a sweep needs. ``thread``: a
    :class:`MessyThread` (or just a spec: the main thread's setup). ``model`` defaults to a
    scripted one that answers ``"live answer."``. A fork's agent is the fork's: replaying the
    turns it inherited with it (real tools, the new system prompt) shows what the fork changed.
    """
    spec = thread.spec if isinstance(thread, MessyThread) else thread or MessySpec()
    forked = thread.forked if isinstance(thread, MessyThread) else None
    return make_agent(
        checkpointer,
        spec,
        model or ScriptedModel(lambda messages: text("live answer.")),
        system_prompt=thread.system_prompt if isinstance(thread, MessyThread) else SYSTEM_PROMPT,
        tools_v2=forked is not None and "tool:query_metric" in forked.changed,
    )


# -- hypothesis -----------------------------------------------------------------------------------


def messy_specs(
    *,
    min_turns: int = 5,
    max_turns: int = 40,
    max_forks: int = 2,
    managers: Sequence[str] = ("compactor", "null"),
) -> SearchStrategy[MessySpec]:
    """A hypothesis strategy of :class:`MessySpec` (imports hypothesis when called)::

    from hypothesis import given, settings
    from tulip_nb.testing import build_messy_thread, messy_specs

    @given(spec=messy_specs(min_turns=300, max_turns=320))
    @settings(max_examples=5, deadline=None)
    def test_replay_has_no_divergence(spec): ...
    """
    from hypothesis import strategies as st

    rate = st.sampled_from([0.0, 0.05, 0.1, 0.2])
    return st.builds(
        MessySpec,
        seed=st.integers(0, 2**32 - 1),
        turns=st.integers(min_turns, max_turns),
        error_rate=rate,
        context_rate=rate,
        max_iterations_rate=rate,
        interrupt_rate=rate,
        tulip_rate=rate,
        resume_rate=st.sampled_from([0.0, 0.5, 1.0]),
        tool_error_rate=st.sampled_from([0.0, 0.2, 0.5]),
        big_output_rate=st.sampled_from([0.0, 0.1, 0.3]),
        forks=st.integers(0, max_forks),
        fork_turns=st.integers(1, 3),
        manager=st.sampled_from(list(managers)),
        checkpoint_every=st.sampled_from([None, 1, 2]),
        max_iterations=st.integers(3, 5),
    )
