"""Cell-by-cell replay of a saved thread, turn by turn, and going live from any step as a new branch.

:class:`Replay` runs the agent loop again over a recorded thread, one step per :meth:`Replay.step`:
the user prompts come from the record, the model's answers are served by a :class:`~tulip_nb.models.ReplayModel`
(the recorded assistant messages — no model is ever called for a recorded step), and tools run for
real (``tools="real"``, the agent's) or answer with the recorded results (``tools="recorded"``, and
always without an agent). A recorded tool answers each call with the result recorded **at that
call's position** (the recorded assistant message being replayed, the call's index in it;
:mod:`tulip_nb.core.calls`), so reused or empty ids, parallel calls, the same call answered
differently at different times and error results all replay exactly. After each step the new
messages are compared with the record (canonical JSON); a different tool call, arguments or tool
result is reported in :attr:`Replay.divergences`.

**Turns, and how they ended.** The record is replayed turn by turn (:func:`~tulip_nb.core.turns.split_turns`
on its latest state): each recorded turn is started again from its user message and served its
own recorded model calls, and it ends as the record says it ended (decision 12):

- ``answered``: its calls; the last one answers.
- ``error`` / ``context_exceeded``: its calls, then one more **failure step**: the model raises the
  recorded error again (:class:`~tulip_nb.models.replay.ReplayedFailure`, named and worded as
  recorded: ``ModelError: provider 500``) -- or the replay's own manager raises
  ``ContextWindowExceeded`` first, as the agent's did.
- ``max_iterations``: its calls, then the turn stops at the limit, where the record stopped.
- ``interrupted``: its calls; the interrupting tool raises again (a recorded tool raises the
  recorded question) and the question stays pending; the next turn starts, as the record did
  (the dangling calls closed as "outcome unknown").
- an interrupt that was resumed: the real tool's :class:`~tulip_nb.tools.Interrupt` is answered
  with the recorded human answer (``ReplayStep.answer``) and the turn goes on; a recorded tool
  serves that answer as its result.
- ``tulip`` (written by a tulip agent; its manager and its tools' rendering are unknown): its
  recorded messages are copied, one step per model call, never re-run -- so nothing in it can
  diverge.
- unknown (None: a turn killed mid-way, or still running): its calls.

So a failed turn surfaces in the API as a step: :meth:`Replay.step` returns a :class:`ReplayStep`
(a :class:`~tulip_nb.agent._result.Step` with ``turn``, ``call``, ``outcome``, ``error``); the step
that ends a turn carries its outcome, and a turn that failed with an error ends with a step whose
``response`` is None, ``call`` None, ``outcome`` ``"error"`` (or ``"context_exceeded"``) and
``error`` the recorded text. :meth:`Replay.run_to` goes on past it, as the recorded thread did.
:attr:`Replay.turns` has every turn's recorded and replayed outcome; :attr:`Replay.divergences`
has a ``turn`` column, and a turn that ended otherwise than recorded is a divergence of kind
``outcome`` (for a failure the replay met for real, the same error class counts as the same
failure: a ``ContextWindowExceeded``'s token figures move when a fork changed the system prompt,
and the replay runs every turn with the thread's current one). Unmodified, every thread replays
with 0 divergences, whatever its failures, forks, interrupts and tulip-written turns:

>>> from tulip_nb.agent import Agent
>>> from tulip_nb.lab import open_thread
>>> from tulip_nb.memory.backends import MemoryCheckpointer
>>> from tulip_nb.models import ModelError, ScriptedModel, text
>>> def provider(messages):
...     if "fail" in messages[-1].content:
...         raise ModelError("provider 500")
...     return text("ok")
>>> cp = MemoryCheckpointer()
>>> agent = Agent(ScriptedModel(provider), checkpointer=cp)
>>> for prompt in ("one", "fail please", "three"):
...     try:
...         _ = agent.run_sync(prompt, thread_id="t")
...     except ModelError:
...         pass
>>> r = Replay(open_thread(cp, "t"))
>>> _ = r.run_to()
>>> [(s.turn, s.call, s.outcome, s.error) for s in r.steps]
[(0, 0, 'answered', None), (1, None, 'error', 'ModelError: provider 500'), (2, 1, 'answered', None)]
>>> len(r.divergences), list(r.turns["replayed"])
(0, ['answered', 'error', 'answered'])

At any step, :meth:`Replay.go_live` saves the replayed state (optionally edited) as a **new
thread** branched from the original (``forked_from`` / ``parent_checkpoint_id`` / ``replay_step``
in its save metadata) and continues it with a live model or another conversation manager: a turn
still open goes on live (go live *before* a failure step to see what a working provider would
have said), a turn that is over is followed by the next recorded prompt (or ``prompt=``)::

    from tulip_nb.lab import Replay, open_thread

    r = Replay(open_thread(cp, "ticket-8912-refund"), agent=agent)
    r.run_to(3)                          # three steps, all recorded
    r.current.messages[-1]               # where we are
    live = r.go_live(model=ScriptedModel(["Refund approved."]))
    live.result.text, live.thread_id     # the branch, resumable like any thread
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final, Literal

from tulip_nb._deps import require
from tulip_nb._sync import sync_twin
from tulip_nb.agent import Agent, AgentResult, Step
from tulip_nb.agent.turns import RUN_KEY, TurnRunner, snapshot, start_turn
from tulip_nb.core.calls import CallRef, last_model_call, model_calls, unanswered_calls
from tulip_nb.core.canonical import same_message
from tulip_nb.core.errors import TulipNBError, UserError
from tulip_nb.core.keys import REPLAY_STEP_KEY
from tulip_nb.core.state import AgentState
from tulip_nb.core.turns import FAILED_OUTCOMES, Turn, outcome_for, split_turns, turn_index
from tulip_nb.lab._common import Edit, apply_edit, call_text
from tulip_nb.lab._recorded_results import (
    OUTCOME_UNKNOWN_PREFIX,
    UNKNOWN_QUESTION,
    RecordedResults,
    pending_interrupts,
)
from tulip_nb.lab._thread import Thread, ThreadLike, as_thread
from tulip_nb.lab.branches import branch_state, save_branch
from tulip_nb.memory.conversation import STATE_KEY, ConversationManager, NullManager
from tulip_nb.models import Usage
from tulip_nb.models.replay import ReplayedFailure, ReplayModel

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["UNKNOWN_QUESTION", "LiveBranch", "RecordedResults", "Replay", "ReplayStep"]

RAISED: Final[tuple[str, ...]] = ("error", "context_exceeded")
"""Outcomes the record reached by raising: replayed with one failure step after the turn's calls."""


@dataclass(frozen=True)
class ReplayStep(Step):
    """One step of a :class:`Replay`: a recorded model call replayed, or a recorded failure
    reproduced (module docstring).

    ``turn``: the recorded turn (0-based); ``call``: the record's model-call number replayed (None
    for a failure step); ``outcome``: set on the step that ended its turn, how the *replayed* turn
    ended (``answered``, ``error``, ``context_exceeded``, ``max_iterations``, ``interrupted``,
    ``tulip``); ``error``: a failure step's error text (``"ModelError: provider 500"``);
    ``answer``: the recorded human answer an interrupt of this step was resumed with.
    """

    turn: int = 0
    call: int | None = None
    outcome: str | None = None
    error: str | None = None
    answer: str | None = None

    @property
    def failed(self) -> bool:
        """True when this step ended its turn without an answer."""
        return self.outcome in FAILED_OUTCOMES


def _outcome_text(outcome: str | None, error: str | None) -> str:
    return f"{outcome or 'unknown'}: {error}" if error else (outcome or "unknown")


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
        from tulip_nb.lab._thread import open_thread

        assert self.agent.checkpointer is not None
        return open_thread(self.agent.checkpointer, self.thread_id)


class Replay:
    """Step through a recorded thread turn by turn with the agent loop (see the module docstring).

    ``agent`` gives the tools, the conversation manager (cloned), ``max_iterations`` and the
    default model for :meth:`go_live`; its model is never called during replay. Without an agent,
    tools answer from the record and the model sees everything (``NullManager``). ``thread``: a
    :class:`Thread`, or a thread id with ``checkpointer=`` (a checkpointer or its URL).

    A step is one recorded model call, or the failure that ended a turn with an error
    (:attr:`total_steps` counts both); :attr:`turns` says how each turn ended, recorded and replayed.
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
        latest = thread.latest.state
        self.record = list(latest.messages)
        self.record_turns: list[Turn] = split_turns(self.record, latest.metadata)
        """The recorded turns (:func:`~tulip_nb.core.turns.split_turns` of the latest state)."""
        self.base = agent
        self.model = ReplayModel(self.record)
        self._answers = model_calls(self.record)
        self._call_no = {at: n for n, at in enumerate(self._answers)}
        self.recorded = RecordedResults(self.record, pending=pending_interrupts(self.record, self.record_turns, latest))
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
        head = self.record_turns[0].first if self.record_turns else len(self.record)
        # what precedes the first user message (the system prompt) and the thread's terminal tools
        self._origin = AgentState(messages=self.record[:head], terminal_tools=list(latest.terminal_tools))
        self.current: AgentState | None = None
        self._runner: TurnRunner | None = None
        self.steps: list[ReplayStep] = []
        self._divergences: list[dict[str, Any]] = []
        self._k = -1  # the turn being replayed
        self._open = False  # it has steps left
        self._closed = False  # the end was reached and checked
        self._starts: list[int] = []  # replayed index of each begun turn's user message
        self._checked = 0  # replayed messages compared with the record so far
        self._ended: dict[int, tuple[str | None, str | None, int | None]] = {}  # turn -> outcome, error, step

    def __repr__(self) -> str:
        return f"Replay({self.thread.thread_id!r}, step={len(self.steps)}/{self.total_steps})"

    # -- stepping -------------------------------------------------------------------------------
    def _replaying(self) -> CallRef | None:
        """The record's position of the call the replay is running now: the recorded assistant
        message the model just served, and the index of the first call of it without a result."""
        runner, at = self._runner, self.model.last_served
        if runner is None or at is None:
            return None
        msgs = runner.state.messages
        i = last_model_call(msgs)
        open_calls = unanswered_calls(msgs, i) if i is not None else []
        return (at, open_calls[0]) if open_calls else None

    @property
    def total_steps(self) -> int:
        """Steps the record has: its model calls in turns, plus one per turn that failed raising."""
        return sum(t.model_calls + (t.outcome in RAISED) for t in self.record_turns)

    def steps_for_calls(self, n: int) -> int:
        """How many steps replay the record's first ``n`` model calls and the failure steps that
        directly follow them (a player showing model call ``n - 1`` runs the replay that far)."""
        steps = calls = 0
        for t in self.record_turns:
            if calls >= n and (t.model_calls or t.outcome not in RAISED):
                break
            take = min(t.model_calls, n - calls)
            steps, calls = steps + take, calls + take
            if take < t.model_calls:
                break
            steps += t.outcome in RAISED
        return steps

    @property
    def done(self) -> bool:
        """True when every recorded turn has been replayed to its end."""
        return self._closed or (not self._open and self._k >= len(self.record_turns) - 1)

    async def astep(self) -> ReplayStep | None:
        """Replay one step (starting the next recorded turn when needed); None at the end."""
        while True:
            if self._open:
                step = await self._advance()
                if step is not None:
                    self.steps.append(step)
                    return step
            elif not self._begin_next():
                self._close()
                return None

    step = sync_twin(astep)

    async def arun_to(self, n: int | None = None) -> AgentState | None:
        """Replay until ``n`` steps have been replayed (default: to the end of the record, failed
        turns included); returns :attr:`current`."""
        if n is not None and not 0 <= n <= self.total_steps:
            raise UserError(
                f"run_to({n}) is outside the recorded {self.total_steps} steps", thread_id=self.thread.thread_id
            )
        while n is None or len(self.steps) < n:
            if await self.astep() is None:
                break
        return self.current

    run_to = sync_twin(arun_to)

    def _begin_next(self) -> bool:
        """Start the next recorded turn from its user message; False when there is none."""
        k = self._k + 1
        if k >= len(self.record_turns):
            return False
        turn = self.record_turns[k]
        limit = turn.model_calls + (turn.outcome in RAISED)  # a failing turn tries one call more
        state = start_turn(
            self.current if self.current is not None else self._origin,
            self.record[turn.first].content or "",
            system_prompt=self.system_prompt,
            metadata=None,
            agent_id=None,
            max_iterations=limit,
        )
        self._k, self.current = k, state
        self._starts.append(len(state.messages) - 1)
        self._check(len(self.steps))  # the previous turn's calls closed at this start, the prompt
        if k > 0:
            self._check_missing(k - 1)
        if turn.outcome == "tulip":
            self._runner = None
            self._open = turn.model_calls > 0
            if not self._open:  # a prompt and nothing the model did: copy whatever followed it
                state.messages.extend(self.record[turn.first + 1 : turn.last + 1])
                self._check(len(self.steps))
                self._end(k, "tulip", None, None)
            return True
        self.model.begin_turn(turn)
        self._runner = TurnRunner(self.agent, state, None, every=None)
        self._open = limit > 0
        if not self._open:  # nothing recorded happened after the prompt (a run killed at once)
            self._end(k, turn.outcome, turn.error, None)
        return True

    async def _advance(self) -> ReplayStep | None:
        """One step of the open turn; None when the turn ended without one."""
        k, runner = self._k, self._runner
        if runner is None:
            return self._copy_step()
        try:
            step = await runner.iteration()
        except TulipNBError as e:  # the recorded failure, or one the replay met for real
            await runner.fail(e)
            return self._failure_step(e)
        except Exception as e:  # not a failure a turn records as an outcome: a bug, surfaced
            await runner.fail(e)
            raise
        if step is None:
            self.current = runner.state
            self._end(k, _outcome(runner), None, None)
            return None
        answer = None
        if step.interrupt is not None:
            step, answer = await self._resume_as_recorded(step)
        runner = self._runner
        assert runner is not None
        self.current = runner.state
        n = len(self.steps)
        self._check(n)
        outcome = _outcome(runner) if runner.done else None
        if runner.done:
            self._end(k, outcome, None, n)
        call = self._call_no.get(self.model.last_served) if self.model.last_served is not None else None
        return _replay_step(step, turn=k, call=call, outcome=outcome, answer=answer)

    async def _resume_as_recorded(self, step: Step) -> tuple[Step, str | None]:
        """A tool interrupted: answer it with the record's human answer, as the recorded resume
        did; a question the record left unanswered stays pending."""
        assert step.interrupt is not None and self._runner is not None
        pos, at = step.interrupt.position, self.model.last_served
        t = self.recorded.results.get((at, pos[1])) if pos is not None and at is not None else None
        answer = self.record[t].content or "" if t is not None else None
        if answer is None or answer.startswith(OUTCOME_UNKNOWN_PREFIX):
            return step, None
        resumed = TurnRunner(self.agent, self._runner.state, None, every=None)  # as Agent.resume does
        await resumed.answer_interrupt(answer)
        finished = await resumed.finish_batch(force=True)
        assert finished is not None
        self._runner = resumed
        merged = {
            "state": finished.state,
            "tool_results": finished.tool_results,
            "stop_reason": finished.stop_reason,
            "interrupt": None,
        }
        return Step(**{**{f.name: getattr(step, f.name) for f in fields(Step)}, **merged}), answer

    def _failure_step(self, error: TulipNBError) -> ReplayStep:
        assert self._runner is not None
        state = self._runner.state
        text = f"{type(error).__name__}: {error}"
        outcome = outcome_for("error", error=text)
        self.current = state
        n = len(self.steps)
        self._check(n)
        self._end(self._k, outcome, text, n, ours=isinstance(error, ReplayedFailure))
        return ReplayStep(
            iteration=state.iteration,
            request=(),
            tools=tuple(self.agent.tool_schemas),
            response=None,
            usage=Usage(),
            tool_results=(),
            state=snapshot(state),
            stop_reason="error",
            turn=self._k,
            outcome=outcome,
            error=text,
        )

    def _copy_step(self) -> ReplayStep:
        """The next model call of a tulip-written turn: its recorded messages, copied."""
        assert self.current is not None
        k, turn = self._k, self.record_turns[self._k]
        state = snapshot(self.current)
        at = self._record_index(len(state.messages))
        calls = [a for a in self._answers[bisect_right(self._answers, at - 1) :] if a <= turn.last][:2]
        stop = calls[1] if len(calls) > 1 else turn.last + 1
        state.messages.extend(self.record[at:stop])
        self.current = state
        n = len(self.steps)
        self._check(n)
        last = len(calls) < 2
        if last:
            self._end(k, "tulip", None, n)
        return ReplayStep(
            iteration=state.iteration,
            request=(),
            tools=(),
            response=self.record[calls[0]],
            usage=Usage(),
            tool_results=(),
            state=state,
            turn=k,
            call=self._call_no[calls[0]],
            outcome="tulip" if last else None,
        )

    def _end(self, k: int, outcome: str | None, error: str | None, step: int | None, *, ours: bool = False) -> None:
        """Turn ``k`` ended: keep how, and compare it with how the record says it ended (``ours``:
        the failure was the record's, raised again by the model)."""
        self._open = False
        self._ended[k] = (outcome, error, step)
        rec = self.record_turns[k]
        if rec.outcome in (None, "tulip"):
            return  # nothing recorded to compare with
        if outcome != rec.outcome or (rec.outcome in RAISED and not _same_failure(rec.error, error, ours)):
            self._divergences.append(
                {
                    "step": step if step is not None else len(self.steps),
                    "turn": k,
                    "index": rec.last,
                    "kind": "outcome",
                    "expected": _outcome_text(rec.outcome, rec.error),
                    "actual": _outcome_text(outcome, error),
                }
            )

    def _close(self) -> None:
        if not self._closed and self._k >= 0:
            self._check_missing(self._k)
        self._closed = True

    # -- divergence -----------------------------------------------------------------------------
    def _record_index(self, j: int) -> int:
        """The record's index of replayed message ``j``: the same place in the same turn."""
        k = turn_index(self._starts, j)
        return j if k is None else self.record_turns[k].first + (j - self._starts[k])

    def _check(self, step: int) -> None:
        """Compare the replayed messages not compared yet with the record, turn by turn."""
        assert self.current is not None
        msgs = self.current.messages
        for j in range(self._checked, len(msgs)):
            k = turn_index(self._starts, j)
            i = self._record_index(j)
            bound = self.record_turns[k].last if k is not None else len(self._origin.messages) - 1
            want = self.record[i] if i <= bound else None
            got = msgs[j]
            if want is not None and same_message(got, want):
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
                    "turn": k,
                    "index": i,
                    "kind": kind,
                    "expected": (want.content or call_text(want)) if want is not None else None,
                    "actual": got.content or call_text(got),
                }
            )
        self._checked = len(msgs)

    def _check_missing(self, k: int) -> None:
        """Turn ``k`` is over: a recorded message it did not reproduce is a divergence."""
        assert self.current is not None
        rec = self.record_turns[k]
        end = self._starts[k + 1] if k + 1 < len(self._starts) else len(self.current.messages)
        made = end - self._starts[k]
        if made < rec.last - rec.first + 1:
            want = self.record[rec.first + made]
            self._divergences.append(
                {
                    "step": len(self.steps),
                    "turn": k,
                    "index": rec.first + made,
                    "kind": "missing message",
                    "expected": want.content or call_text(want),
                    "actual": None,
                }
            )

    @property
    def divergences(self) -> pd.DataFrame:
        """Where the replay left the record: step, turn, the record's message index, kind (``tool
        call``, ``tool arguments``, ``tool result``, ``message``, ``extra message``, ``missing
        message``, ``outcome``: the turn ended otherwise than recorded), expected and actual text.
        Empty: faithful."""
        pd = require("pandas")

        return pd.DataFrame(self._divergences, columns=["step", "turn", "index", "kind", "expected", "actual"])

    @property
    def turns(self) -> pd.DataFrame:
        """One row per recorded turn: its messages (``first``/``last``), how the record says it
        ended (``outcome``, ``error``, ``model_calls``, ``interrupts``) and how the replay ended it
        so far (``replayed``, ``replayed_error``, ``step``: the step that ended it; NA until it is
        replayed, or when it ended without a step of its own)."""
        pd = require("pandas")

        rows = []
        for t in self.record_turns:
            outcome, error, step = self._ended.get(t.turn, (None, None, None))
            rows.append(
                {
                    "turn": t.turn,
                    "first": t.first,
                    "last": t.last,
                    "outcome": t.outcome,
                    "error": t.error,
                    "model_calls": t.model_calls,
                    "interrupts": t.interrupts,
                    "replayed": outcome,
                    "replayed_error": error,
                    "step": step,
                }
            )
        frame = pd.DataFrame(rows, columns=_TURN_COLUMNS)
        frame["step"] = frame["step"].astype("Int64")
        for c in ("outcome", "error", "replayed", "replayed_error"):  # NA, never NaN or None
            frame[c] = frame[c].astype("string")
        return frame

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
        is over (answered, or ended as recorded: an error, the limit, a question left pending), the
        next prompt (default: the record's next one). A turn still open goes on live: from the
        step before a failure step, the live model answers the call that failed in the record.
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
        if edit is None and not self._open:  # the turn is over as the record ended it: say so
            branch.metadata[RUN_KEY] = dict(state.metadata[RUN_KEY])
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
            nxt = prompt if prompt is not None else self._next_prompt()
            result = await live.run(nxt, thread_id=new_id) if nxt is not None else None
        return LiveBranch(new_id, parent.checkpoint_id, k, live, result)

    go_live = sync_twin(ago_live)

    def _next_prompt(self) -> str | None:
        """The user prompt of the recorded turn after the current one (None after the last)."""
        k = self._k + 1
        return self.record[self.record_turns[k].first].content or "" if k < len(self.record_turns) else None


_TURN_COLUMNS: Final = [
    "turn",
    "first",
    "last",
    "outcome",
    "error",
    "model_calls",
    "interrupts",
    "replayed",
    "replayed_error",
    "step",
]


def _outcome(runner: TurnRunner) -> str:
    """The outcome of a turn the runner ended without raising."""
    if runner.stop_reason == "interrupted":
        return "interrupted"
    return outcome_for("complete", stop_reason=runner.stop_reason)


def _same_failure(recorded: str | None, replayed: str | None, ours: bool) -> bool:
    """Whether a replayed failure is the recorded one: the same text when the replay raised the
    record's (a :class:`ReplayedFailure`); the same error class when the replay met it for real
    (the manager's own ``ContextWindowExceeded``, whose token figures move with the system prompt
    when a fork changed it since)."""
    if recorded is None:
        return True
    if ours:
        return replayed == recorded
    return (replayed or "").partition(":")[0].strip() == recorded.partition(":")[0].strip()


def _replay_step(step: Step, **extra: Any) -> ReplayStep:
    return ReplayStep(**{f.name: getattr(step, f.name) for f in fields(Step)}, **extra)
