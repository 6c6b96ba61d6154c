"""Step an agent one iteration at a time, and branch when you change what it saw.

:class:`StepperController` drives :meth:`Agent.iterate <tulip_nb.agent.Agent.iterate>` one
:class:`~tulip_nb.agent._result.Step` per call, and keeps what a notebook wants to look at: the
request exactly as sent (after compaction), the answer, tool calls and results, tokens, and the
checkpoint saved. It never changes a saved checkpoint: editing the *pending* message (the tool
result the model has not seen yet, or the user message of the current turn) and continuing cuts a
**branch** with :func:`tulip_nb.lab.fork` and goes on there with ``agent.iterate_resume``; the
parent thread stays as it was::

    from tulip_nb.lab.controllers import StepperController

    s = StepperController(agent, "Refund ord-4821?", thread_id="ticket-8912")
    s.step()                                   # one model call (+ its tools)
    s.edit_pending("order ord-4821: lost")     # change the tool result the model will read next
    s.step()                                   # -> runs on the branch "ticket-8912-edit-1"
    s.run_to_end()
    s.thread_id, s.branches                    # where we are, and the branches made

The agent needs a checkpointer for editing, forking and reset (a branch is a saved thread).
Use ``Agent(checkpoint_every_n_iterations=1)`` to get a checkpoint after every step.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from tulip_nb._sync import run_sync
from tulip_nb.agent import Agent, Step
from tulip_nb.core import Message
from tulip_nb.core.errors import CheckpointConflict, UserError
from tulip_nb.core.state import AgentState
from tulip_nb.lab._common import esc, short
from tulip_nb.lab._thread import open_thread
from tulip_nb.lab.branches import fork
from tulip_nb.lab.controllers._html import message_cell, note, table
from tulip_nb.memory.managers import PlanningManager
from tulip_nb.tokens import REPLY_PRIMING, TokenCounter, get_counter

__all__: list[str] = []

IdFactory = Callable[[str, str, int], str]
"""``(thread_id, kind, n) -> new thread id`` for branches (kind: ``edit``, ``fork``, ``reset``)."""


def default_ids(thread_id: str, kind: str, n: int) -> str:
    """``<thread_id>-<kind>-<n>``: deterministic, so notebook outputs are stable."""
    return f"{thread_id}-{kind}-{n}"


@dataclass(frozen=True)
class StepRecord:
    """One step as the stepper shows it: the :class:`Step`, the thread it ran on, and tokens
    (``context_tokens``: what the model was sent; ``full_tokens``: the whole history then)."""

    index: int
    thread_id: str
    step: Step
    context_tokens: int
    full_tokens: int
    request_messages: int
    history_messages: int

    @property
    def checkpoint_id(self) -> str | None:
        return self.step.checkpoint_id

    @property
    def compacted(self) -> bool:
        """The model was sent fewer or other messages than the history held."""
        return self.request_messages != self.history_messages


class StepperController:
    """Step ``agent`` through ``prompt`` on ``thread_id`` (see the module docstring).

    ``ids`` names new branches (default ``<thread_id>-<kind>-<n>``). ``listeners`` are called with
    the controller after every change (a :class:`TokenBudget` redraws from them).
    """

    def __init__(self, agent: Agent, prompt: str, thread_id: str, *, ids: IdFactory | None = None) -> None:
        if not isinstance(agent, Agent):
            raise UserError(f"StepperController needs an Agent, got {type(agent).__name__}")
        if not isinstance(prompt, str) or not prompt:
            raise UserError("StepperController needs a non-empty prompt (the user message of the first turn)")
        if inspect.isawaitable(thread_id):  # e.g. an un-awaited agent.fork(...): never a new, empty thread
            if inspect.iscoroutine(thread_id):
                thread_id.close()
            raise UserError(
                "thread_id: you passed a coroutine: use agent.fork_sync(...) or await it "
                "(agent.fork and the other thread operations are async)"
            )
        self.agent = agent
        self.prompt = prompt
        self.thread_id = thread_id
        self.root_thread_id = thread_id
        self.ids = ids or default_ids
        self.records: list[StepRecord] = []
        self.branches: list[str] = []
        self.listeners: list[Callable[[StepperController], None]] = []
        self.status = "ready: press Step to send the prompt"
        self.next_prompt: str | None = None
        self._gen: AsyncIterator[Step] | None = None
        self._started = False
        self._turn_done = False
        self._pending_edit: tuple[str, str] | None = None
        self._counters: dict[str, int] = {}
        self._start_checkpoint: str | None = None

    def __repr__(self) -> str:
        return f"StepperController({self.thread_id!r}, steps={len(self.records)}, {self.status!r})"

    # -- what is shown --------------------------------------------------------------------------
    @property
    def counter(self) -> TokenCounter:
        manager = self.agent.conversation_manager
        return manager.counter if isinstance(manager, PlanningManager) else get_counter()

    @property
    def state(self) -> AgentState | None:
        """The state after the last step (None before the first)."""
        return self.records[-1].step.state if self.records else None

    @property
    def last(self) -> StepRecord | None:
        return self.records[-1] if self.records else None

    @property
    def turn_done(self) -> bool:
        return self._turn_done

    @property
    def edited_target(self) -> str | None:
        """The target of an edit waiting for the next step (None: none)."""
        return self._pending_edit[0] if self._pending_edit is not None else None

    def targets(self) -> list[str]:
        """What an edit can change now, first the default: ``"prompt"`` (not sent yet), ``"tool"``
        (the result the model reads next), ``"next"`` (the user message of a new turn, after one
        ends) and ``"user"`` (the user message of the current or last turn)."""
        if not self._started:
            return ["prompt"]
        st = self.state
        out = []
        if st is not None and not self._turn_done and st.messages and st.messages[-1].role == "tool":
            out.append("tool")
        if self._turn_done:
            out.append("next")
        if self._user_index() is not None:
            out.append("user")
        return out

    def _user_index(self) -> int | None:
        st = self.state
        if st is None:
            return None
        for i in range(len(st.messages) - 1, -1, -1):
            if st.messages[i].role == "user":
                return i
        return None

    def pending(self, target: str | None = None) -> tuple[int, Message] | None:
        """``(index, message)`` an edit of ``target`` (default: the first of :meth:`targets`)
        changes; None for the prompt and the next user message (not saved yet)."""
        if target is None:
            allowed = self.targets()
            target = allowed[0] if allowed else None
        st = self.state
        if st is None or target not in ("tool", "user"):
            return None
        i = len(st.messages) - 1 if target == "tool" else self._user_index()
        return (i, st.messages[i]) if i is not None else None

    def pending_text(self, target: str | None = None) -> str:
        """The current text of what :meth:`edit_pending` would change."""
        target = target or (self.targets() or ["prompt"])[0]
        if self._pending_edit is not None and self._pending_edit[0] == target:
            return self._pending_edit[1]
        if target == "prompt":
            return self.prompt
        if target == "next":
            return self.next_prompt or ""
        p = self.pending(target)
        return (p[1].content or "") if p is not None else ""

    def describe(self, target: str) -> str:
        """A target of :meth:`targets`, in words."""
        p = self.pending(target)
        where = f" #{p[0]}" if p is not None else ""
        return {
            "prompt": "user message (not sent yet)",
            "tool": f"tool result{where}, not yet read by the model (edit = branch)",
            "user": f"user message{where} of this turn (edit = branch, the turn runs again)",
            "next": "next user message (a new turn on this thread)",
        }[target]

    # -- actions --------------------------------------------------------------------------------
    def edit_pending(self, text: str, target: str | None = None) -> None:
        """Change ``target`` (default: the first of :meth:`targets`). The prompt and the next
        user message are simply what the next step sends; a saved tool result or user message is
        never changed in place: the next :meth:`step` continues on a new branch with the edit."""
        if not isinstance(text, str):
            raise UserError(f"edit_pending needs text, got {type(text).__name__}")
        allowed = self.targets()
        target = target or (allowed[0] if allowed else None)
        if target not in allowed:
            raise UserError(f"cannot edit {target!r} now; editable: {allowed}", thread_id=self.thread_id)
        if target == "prompt":
            self.prompt = text
        elif target == "next":
            self.next_prompt = text
        else:
            p = self.pending(target)
            if p is not None and text != (p[1].content or ""):
                self._pending_edit = (target, text)
                self.status = f"edited the {target} message: the next step continues on a new branch"
            elif self._pending_edit is not None and self._pending_edit[0] == target:
                self._pending_edit = None
        self._notify()

    def step(self) -> StepRecord | None:
        """Run one iteration; None when there is nothing left to do (the turn is over and no next
        user message was given)."""
        if self._pending_edit is not None:
            self._branch_with_edit()
        if self._gen is None:
            if not self._started:
                self._begin()
                self._gen = self.agent.iterate(self.prompt, thread_id=self.thread_id)
                self._started = True
            elif self._turn_done:
                if not self.next_prompt:
                    self.status = "turn complete: type the next user message to continue this thread"
                    self._notify()
                    return None
                self._gen = self.agent.iterate(self.next_prompt, thread_id=self.thread_id)
                self.next_prompt = None
                self._turn_done = False
            else:
                self._gen = self.agent.iterate_resume(thread_id=self.thread_id)
        gen = self._gen
        try:
            step = run_sync(_anext(gen))
        except Exception as e:
            self._gen = None
            self._turn_done = True  # the agent saved the failed turn; a new one can follow
            self.status = f"error: {type(e).__name__}: {e}"
            self._notify()
            raise
        if step is None:
            self._gen = None
            self._turn_done = True
            self.status = "turn complete"
            self._notify()
            return None
        record = self._record(step)
        if step.stop_reason is not None:
            run_sync(_aclose(gen))
            self._gen = None
            self._turn_done = step.stop_reason != "interrupted"
            self.status = f"turn over: {step.stop_reason}"
        else:
            self.status = f"iteration {step.iteration} done"
        self._notify()
        return record

    def run_to_end(self) -> list[StepRecord]:
        """Step until the turn is over; returns the new records."""
        out: list[StepRecord] = []
        for _ in range(self.agent.max_iterations + 2):
            rec = self.step()
            if rec is None:
                break
            out.append(rec)
            if rec.step.stop_reason is not None:
                break
        return out

    def fork_here(self, new_thread_id: str | None = None) -> str:
        """Branch the thread at the current point and continue stepping on the branch."""
        self._require_checkpointer("fork_here")
        if not self.records:
            raise UserError("fork_here() needs at least one step", thread_id=self.thread_id)
        self._stop()
        thread = open_thread(self._cp(), self.thread_id)
        at = len(self.state.messages) - 1 if self.state is not None else -1
        new_id = self._new_thread("fork", new_thread_id, lambda nid: fork(thread, at=at, new_thread_id=nid).thread_id)
        self.status = f"forked: now on {new_id}"
        self._notify()
        return new_id

    def reset(self) -> None:
        """Start over from where the stepper began. Nothing saved is deleted: the next step sends
        the prompt again on a new thread, a fork of the starting checkpoint when there was one."""
        self._stop()
        if self._started:
            self._require_checkpointer("reset")
            start = self._start_checkpoint
            if start is not None:
                root = open_thread(self._cp(), self.root_thread_id)
                self._new_thread("reset", None, lambda nid: fork(root, at=start, new_thread_id=nid).thread_id)
            else:
                self.thread_id = self._free_id("reset")
                self.branches.append(self.thread_id)
        self._started = False
        self._turn_done = False
        self.next_prompt = None
        self.records.clear()
        self._pending_edit = None
        self.status = f"reset: the next step sends the prompt again on {self.thread_id}"
        self._notify()

    def close(self) -> None:
        """Stop stepping (an unfinished turn is saved so ``agent.resume`` can continue it)."""
        self._stop()

    # -- internals ------------------------------------------------------------------------------
    def _cp(self) -> Any:
        return self.agent.checkpointer

    def _require_checkpointer(self, what: str) -> None:
        if self.agent.checkpointer is None:
            raise UserError(f"{what}() makes a branch, which needs Agent(checkpointer=...)", thread_id=self.thread_id)

    def _begin(self) -> None:
        cp = self._cp()
        if cp is None:
            return
        latest = run_sync(cp.load_checkpoint(self.thread_id))
        if latest is not None and self.thread_id == self.root_thread_id:
            self._start_checkpoint = latest.checkpoint_id

    def _stop(self) -> None:
        if self._gen is not None:
            run_sync(_aclose(self._gen))
            self._gen = None

    def _free_id(self, kind: str) -> str:
        cp = self._cp()
        for _ in range(1000):
            n = self._counters[kind] = self._counters.get(kind, 0) + 1
            nid = self.ids(self.root_thread_id, kind, n)
            if cp is None or run_sync(cp.load_checkpoint(nid)) is None:
                return nid
        raise UserError(f"no free thread id for a {kind} branch of {self.root_thread_id!r}")

    def _new_thread(self, kind: str, wanted: str | None, make: Callable[[str], str]) -> str:
        for _ in range(1000):
            nid = wanted or self._free_id(kind)
            try:
                made = make(nid)
            except CheckpointConflict:
                if wanted:
                    raise
                continue
            self.branches.append(made)
            self.thread_id = made
            return made
        raise UserError(f"could not create a {kind} branch of {self.thread_id!r}")

    def _branch_with_edit(self) -> None:
        self._require_checkpointer("edit")
        assert self._pending_edit is not None
        target, text = self._pending_edit
        where = self.pending(target)
        if where is None:
            raise UserError(f"nothing to edit for {target!r}", thread_id=self.thread_id)
        self._stop()
        index = where[0]
        thread = open_thread(self._cp(), self.thread_id)
        self._new_thread("edit", None, lambda nid: fork(thread, at=index, edit=text, new_thread_id=nid).thread_id)
        self._pending_edit = None
        self._turn_done = False

    def _record(self, step: Step) -> StepRecord:
        counter = self.counter
        fixed = counter.count_tools(list(step.tools)) + REPLY_PRIMING
        msgs = step.state.messages
        at = len(msgs)
        if step.response is not None:
            for j in range(len(msgs) - 1, -1, -1):
                if msgs[j] is step.response or msgs[j] == step.response:
                    at = j
                    break
        rec = StepRecord(
            index=len(self.records),
            thread_id=self.thread_id,
            step=step,
            context_tokens=sum(counter.message_counts(step.request)) + fixed,
            full_tokens=sum(counter.message_counts(msgs[:at])) + fixed,
            request_messages=len(step.request),
            history_messages=at,
        )
        self.records.append(rec)
        return rec

    def _notify(self) -> None:
        for fn in list(self.listeners):
            fn(self)

    # -- rendering ------------------------------------------------------------------------------
    def request_html(self) -> str:
        """The last request, message by message, as sent (after compaction)."""
        rec = self.last
        if rec is None:
            return note(f"nothing sent yet; the prompt is: {short(self.prompt, 200)}")
        rows = [(str(i), message_cell(m, 240)) for i, m in enumerate(rec.step.request)]
        head = (
            f"<p><b>Request of iteration {rec.step.iteration}</b> on <code>{esc(rec.thread_id)}</code>: "
            f"{rec.request_messages} messages ({rec.history_messages} in the history), "
            f"{rec.context_tokens:,} tokens{' — compacted' if rec.compacted else ''}</p>"
        )
        return head + table(["#", "message"], rows)

    def answer_html(self) -> str:
        """The last answer, its tool calls and their results."""
        rec = self.last
        if rec is None:
            return ""
        step = rec.step
        parts = []
        if step.response is not None:
            parts.append(f"<p><b>Answer</b>: {message_cell(step.response, 400)}</p>")
        if step.tool_results:
            rows = [
                (esc(ex.tool_name), esc(short(str(ex.arguments), 120)), esc(short(str(ex.result), 200)))
                for ex in step.tool_results
            ]
            parts.append(table(["tool", "arguments", "result"], rows))
        if step.interrupt is not None:
            parts.append(note(f"waiting for a human: {step.interrupt.question}", "warn"))
        return "".join(parts)

    def steps_html(self) -> str:
        """One row per step: thread, iteration, tokens, calls, checkpoint saved."""
        rows = [
            (
                str(r.index),
                f"<code>{esc(r.thread_id)}</code>",
                str(r.step.iteration),
                f"{r.request_messages}/{r.history_messages}",
                f"{r.context_tokens:,}",
                f"{r.full_tokens:,}",
                esc(", ".join(c.name for c in (r.step.response.tool_calls if r.step.response else ())) or "—"),
                f"<code>{esc(r.checkpoint_id[:8])}</code>" if r.checkpoint_id else "—",
                esc(r.step.stop_reason or ""),
            )
            for r in self.records
        ]
        headers = ["step", "thread", "iter", "sent/history", "tokens sent", "full", "tools", "checkpoint", "stop"]
        return table(headers, rows)

    def status_html(self) -> str:
        kind = "error" if self.status.startswith("error") else "ok" if "complete" in self.status else "info"
        extra = f" — branches: {', '.join(self.branches)}" if self.branches else ""
        return note(f"{self.status} (thread {self.thread_id}){extra}", kind)

    def html(self) -> str:
        """Everything, for a saved notebook (``text/html``)."""
        return (
            "<div class='tulip-nb-stepper'>"
            + self.status_html()
            + self.request_html()
            + self.answer_html()
            + self.steps_html()
            + "</div>"
        )


async def _anext(gen: AsyncIterator[Step]) -> Step | None:
    try:
        return await gen.__anext__()
    except StopAsyncIteration:
        return None


async def _aclose(gen: AsyncIterator[Step]) -> None:
    close = getattr(gen, "aclose", None)
    if close is not None:
        await close()
