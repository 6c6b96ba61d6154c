"""Thread handles: one saved conversation, as DataFrames you can look at in a notebook.

A *thread* is every checkpoint saved under one ``thread_id``. :func:`open_thread` reads the
thread's checkpoint list and its latest state once and returns a :class:`Thread`; its views are
plain pandas DataFrames (``.messages``, ``.checkpoints``), and "what the model saw" at any model
call comes from the compaction events the agent recorded (:func:`tulip_nb.memory.compactor.model_view`),
never from a re-computation::

    from tulip_nb.lab import open_thread, threads

    t = open_thread(checkpointer, "ticket-8912-refund")   # or open_thread("file:./threads", ...)
    t.turns                      # turn, first, last, outcome, error, model_calls, tool_calls, tokens
    t.messages.tail()            # index, turn, role, text, tool_calls, tool_name, tokens, checkpoint
    t.checkpoints                # id, created_at, parent, turn, iteration, messages, tokens, metadata
    t.usage, t.events, t.lineage # per model call / per compaction / related threads
    t.model_view(3)              # the messages the 4th model call was sent (-1: the last)
    threads(checkpointer)        # one row per thread

A *turn* is a user message and everything the agent did for it, with how it ended (``answered``,
``error``, ``context_exceeded``, ``max_iterations``, ``interrupted``, or ``tulip`` for a turn a tulip
agent wrote; :mod:`tulip_nb.core.turns`). ``messages``, ``usage`` and ``checkpoints`` carry a
``turn`` column, so a researcher can start from a turn number and find its messages and calls.

Every view is a property (``t.usage_for(tools)`` is the one with an argument). Everything is sync
(works in a notebook cell); ``await aopen_thread(...)`` is the async twin. Where a checkpointer is
taken, a URL works too (:func:`~tulip_nb.memory.backends.checkpointer_from_url`).
Token counts are exact (:mod:`tulip_nb.tokens`) and cached per message. A thread written by an
agent carries its manager's per-message counts (checked against the messages' bytes), so opening
it does not encode the whole history again.
"""

from __future__ import annotations

import inspect
import itertools
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tulip_nb._deps import require
from tulip_nb._sync import run_sync, sync_twin
from tulip_nb.core import Message
from tulip_nb.core.calls import model_call_count, model_calls
from tulip_nb.core.canonical import same_message
from tulip_nb.core.errors import CheckpointNotFound, UserError
from tulip_nb.core.keys import ITERATION_KEY
from tulip_nb.core.state import AgentState
from tulip_nb.core.turns import OUTCOMES, Turn, split_turns, turn_index, turn_starts
from tulip_nb.lab._common import call_text, esc, short
from tulip_nb.lab._headers import PrefixIndex, marked_count
from tulip_nb.lab._lineage import lineage_rows
from tulip_nb.lab._recorded import recorded_tools
from tulip_nb.lab._stores import open_checkpointer
from tulip_nb.lab._window import over_window, saved_window, window_for
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, CheckpointInfo, validate_thread_id
from tulip_nb.memory.conversation import TulipView, compaction_events, model_view, model_views, saved_token_counts
from tulip_nb.tokens import REPLY_PRIMING, TokenCounter, get_counter

if TYPE_CHECKING:
    import pandas as pd

__all__: list[str] = []

"""``limit`` that lists every checkpoint of a thread."""


def _pd() -> Any:
    return require("pandas")


class Thread:
    """A handle on one saved thread (see the module docstring); build it with :func:`open_thread`.

    ``state()`` is the latest :class:`~tulip_nb.core.AgentState`; older checkpoints are loaded on
    first need (``.checkpoints``, ``.history``, the ``checkpoint`` column of ``.messages``) and
    kept. The views (``messages``, ``checkpoints``, ``history``, ``usage``, ``events``,
    ``lineage``) are properties; ``usage_for(tools)`` is ``usage`` with the tool schemas counted.

    A Thread is a **snapshot** of the thread as it was when opened: ``messages``, ``history``,
    ``usage``, ``events`` and ``lineage`` are computed on first access and cached for the life of
    the handle, never invalidated (a later save, or a fork made afterwards, does not show: call
    :func:`open_thread` again for a fresh snapshot). The cached frames and lists are shared
    between accesses: ``.copy()`` one before changing it.
    """

    def __init__(
        self,
        checkpointer: BaseCheckpointer,
        thread_id: str,
        infos: list[CheckpointInfo],
        latest: Checkpoint,
        *,
        counter: TokenCounter | None = None,
    ) -> None:
        self.checkpointer = checkpointer
        self.thread_id = thread_id
        self.infos = infos
        """Checkpoint infos, newest first."""
        self.latest = latest
        self.counter = counter or get_counter()
        self._loaded: dict[str, Checkpoint] = {latest.checkpoint_id: latest}
        self._messages: pd.DataFrame | None = None
        self._primed = False

    def __repr__(self) -> str:
        failed = self._failed_counts()
        more = f", failed={failed}" if failed else ""
        return (
            f"Thread({self.thread_id!r}, checkpoints={len(self.infos)}, messages={len(self.latest.state.messages)}, "
            f"turns={len(self.turn_list)}{more})"
        )

    # -- turns ----------------------------------------------------------------------------------
    @cached_property
    def turn_list(self) -> list[Turn]:
        """The thread's turns (:class:`~tulip_nb.core.turns.Turn`), oldest first."""
        return split_turns(self.final_messages, self.latest.state.metadata)

    @cached_property
    def _starts(self) -> list[int]:
        return turn_starts(self.final_messages)

    def turn_of(self, message_index: int) -> int | None:
        """The turn message ``message_index`` belongs to (None for messages before the first user one)."""
        return turn_index(self._starts, message_index)

    def _failed_counts(self) -> dict[str, int]:
        """Turns that ended without an answer, by outcome (only those that occur)."""
        out: dict[str, int] = {}
        for t in self.turn_list:
            if t.failed:
                out[t.outcome or ""] = out.get(t.outcome or "", 0) + 1
        return {k: out[k] for k in OUTCOMES if k in out}

    @cached_property
    def turns(self) -> pd.DataFrame:
        """One row per turn: ``turn``, ``first`` / ``last`` (its message indexes, inclusive),
        ``outcome`` (NA when unknown), ``error`` (a failed turn's ``"Class: message"``),
        ``model_calls``, ``tool_calls``, ``tokens`` (of its messages), ``interrupts`` (answered
        interrupts it went on from) and ``recorded`` (the outcome is from the agent's turn log)."""
        pd = _pd()
        counts = self._counts()
        cum = [0, *itertools.accumulate(counts)]
        rows = [
            {
                "turn": t.turn,
                "first": t.first,
                "last": t.last,
                "outcome": t.outcome if t.outcome is not None else pd.NA,
                "error": t.error if t.error is not None else pd.NA,
                "model_calls": t.model_calls,
                "tool_calls": t.tool_calls,
                "tokens": cum[t.last + 1] - cum[t.first],
                "interrupts": t.interrupts,
                "recorded": t.recorded,
            }
            for t in self.turn_list
        ]
        cols = [
            "turn",
            "first",
            "last",
            "outcome",
            "error",
            "model_calls",
            "tool_calls",
            "tokens",
            "interrupts",
            "recorded",
        ]
        frame = pd.DataFrame(rows, columns=cols)
        for c in ("outcome", "error"):
            frame[c] = frame[c].astype("string")
        return frame

    def _turn_column(self, indexes: list[int]) -> Any:
        """A nullable-int column: the turn of each message index."""
        return _pd().array([self.turn_of(i) for i in indexes], dtype="Int64")

    # -- states ---------------------------------------------------------------------------------
    @property
    def checkpoint_ids(self) -> list[str]:
        """Checkpoint ids, newest first."""
        return [i.checkpoint_id for i in self.infos]

    def _check(self, checkpoint_id: str) -> None:
        if checkpoint_id not in self._loaded and checkpoint_id not in self.checkpoint_ids:
            raise CheckpointNotFound(
                "checkpoint is not in this thread", thread_id=self.thread_id, checkpoint_id=checkpoint_id
            )

    async def acheckpoint(self, checkpoint_id: str | None = None) -> Checkpoint:
        """One checkpoint (default: the latest) with its state; loaded once, then kept."""
        if checkpoint_id is None:
            return self.latest
        self._check(checkpoint_id)
        hit = self._loaded.get(checkpoint_id)
        if hit is None:
            hit = await self.checkpointer.load_checkpoint(self.thread_id, checkpoint_id)
            if hit is None:
                raise CheckpointNotFound("checkpoint vanished", thread_id=self.thread_id, checkpoint_id=checkpoint_id)
            self._loaded[checkpoint_id] = hit
        return hit

    def checkpoint(self, checkpoint_id: str | None = None) -> Checkpoint:
        """Sync :meth:`acheckpoint`."""
        if checkpoint_id is None or checkpoint_id in self._loaded:
            return self._loaded[checkpoint_id or self.latest.checkpoint_id]
        return run_sync(self.acheckpoint(checkpoint_id))

    def state(self, checkpoint_id: str | None = None) -> AgentState:
        """The state saved at ``checkpoint_id`` (default: the latest); a copy is up to you."""
        return self.checkpoint(checkpoint_id).state

    async def astate(self, checkpoint_id: str | None = None) -> AgentState:
        return (await self.acheckpoint(checkpoint_id)).state

    async def ahistory(self) -> list[Checkpoint]:
        """Every checkpoint of the thread with its state, oldest first."""
        return [await self.acheckpoint(i.checkpoint_id) for i in reversed(self.infos)]

    @cached_property
    def history(self) -> list[Checkpoint]:
        """Every checkpoint of the thread with its state, oldest first (sync :meth:`ahistory`)."""
        if all(i.checkpoint_id in self._loaded for i in self.infos):
            return [self._loaded[i.checkpoint_id] for i in reversed(self.infos)]
        return run_sync(self.ahistory())

    @property
    def final_messages(self) -> list[Message]:
        """The latest state's messages."""
        return self.latest.state.messages

    # -- headers: what each checkpoint holds, without loading it --------------------------------
    @cached_property
    def _prefixes(self) -> PrefixIndex:
        return PrefixIndex(self.final_messages)

    async def _aprefix_lens(self, infos: list[CheckpointInfo]) -> dict[str, int | None]:
        """For each checkpoint: ``n`` when it holds exactly the latest's first ``n`` messages.

        From the header (:mod:`tulip_nb.lab._headers`); a checkpoint without one is loaded (and
        not kept) to find out.
        """
        out: dict[str, int | None] = {}
        for info in infos:
            cid = info.checkpoint_id
            if marked_count(info.metadata) is not None:
                out[cid] = self._prefixes.prefix_len(info.metadata)
                continue
            ck = self._loaded.get(cid) or await self.checkpointer.load_checkpoint(self.thread_id, cid)
            msgs = ck.state.messages if ck is not None else None
            final = self.final_messages
            n = len(msgs) if msgs is not None else -1
            same = (
                msgs is not None
                and n <= len(final)
                and all(same_message(a, b) for a, b in zip(msgs, final, strict=False))
            )
            out[cid] = n if same else None
        return out

    async def aprefix_checkpoint(self, messages: list[Message]) -> CheckpointInfo | None:
        """The newest checkpoint whose messages are a prefix of ``messages`` (the parent of a
        branch cut there), from the headers; None when no checkpoint is."""
        final = self.final_messages
        k = 0
        while k < min(len(messages), len(final)) and same_message(messages[k], final[k]):
            k += 1
        oldest_first = list(reversed(self.infos))
        lens = await self._aprefix_lens(oldest_first)
        best: CheckpointInfo | None = None
        for info in oldest_first:
            n = lens[info.checkpoint_id]
            if n is not None and n <= k:
                best = info
        return best

    # -- frames ---------------------------------------------------------------------------------
    def _counts(self) -> list[int]:
        """Token counts of the latest messages; the agent's saved counts are reused when they hold."""
        msgs = self.final_messages
        if not self._primed:
            self._primed = True
            known = saved_token_counts(self.latest.state, self.counter)
            if known:
                self.counter.remember(msgs[: len(known)], known)
        return self.counter.message_counts(msgs)

    def _first_seen(self) -> list[str | None]:
        """For each latest message, the oldest checkpoint it already appears in (from the headers)."""
        msgs = self.final_messages
        out: list[str | None] = [None] * len(msgs)
        oldest_first = list(reversed(self.infos))
        lens = run_sync(self._aprefix_lens(oldest_first))
        done = 0
        for info in oldest_first:
            n = lens[info.checkpoint_id]
            if n is None or n <= done:
                continue
            out[done:n] = [info.checkpoint_id] * (n - done)
            done = n
        return out

    @property
    def messages(self) -> pd.DataFrame:
        """One row per message of the latest state: index, turn (NA before the first user
        message), role, text, tool_calls, tool_name, tool_call_id, tokens (exact, cached),
        checkpoint (the oldest checkpoint that has it)."""
        if self._messages is None:
            msgs = self.final_messages
            frame = _pd().DataFrame(
                {
                    "turn": self._turn_column(list(range(len(msgs)))),
                    "role": [m.role for m in msgs],
                    "text": [m.content or "" for m in msgs],
                    "tool_calls": [call_text(m) if m.tool_calls else "" for m in msgs],
                    "tool_name": [m.name or "" for m in msgs],
                    "tool_call_id": [m.tool_call_id or "" for m in msgs],
                    "tokens": self._counts(),
                    "checkpoint": self._first_seen(),
                }
            )
            frame.index.name = "index"
            self._messages = frame
        return self._messages

    @property
    def checkpoints(self) -> pd.DataFrame:
        """One row per checkpoint, oldest first: id, created_at, parent, turn (of its last message,
        when it holds a prefix of the latest messages; else NA), iteration, messages, tokens (of the
        saved history), source and the save metadata.

        From the headers: a checkpoint whose header says it holds a prefix of the latest messages
        (every tulip_nb save) and its iteration is never loaded; others are loaded one at a time.
        """
        return run_sync(self._acheckpoint_rows())

    async def _acheckpoint_rows(self) -> pd.DataFrame:
        counts = self._counts()
        cum = [0, *itertools.accumulate(counts)]
        oldest_first = list(reversed(self.infos))
        lens = await self._aprefix_lens([i for i in oldest_first if marked_count(i.metadata) is not None])
        rows = []
        for info in oldest_first:
            meta = info.metadata
            n, iteration = lens.get(info.checkpoint_id), meta.get(ITERATION_KEY)
            prefix = n is not None
            if n is not None and isinstance(iteration, int) and not isinstance(iteration, bool):
                tokens = cum[n]
            else:  # the header cannot say: load this one
                ck = self._loaded.get(info.checkpoint_id) or await self.checkpointer.load_checkpoint(
                    self.thread_id, info.checkpoint_id
                )
                if ck is None:
                    continue  # deleted since the thread was opened
                msgs = ck.state.messages
                n, iteration, tokens = len(msgs), ck.state.iteration, sum(self.counter.message_counts(msgs))
            rows.append(
                {
                    "id": info.checkpoint_id,
                    "created_at": info.created_at,
                    "parent": info.parent_checkpoint_id,
                    "turn": self.turn_of(n - 1) if prefix and n else None,
                    "iteration": iteration,
                    "messages": n,
                    "tokens": tokens,
                    "source": meta.get("source"),
                    "metadata": dict(meta),
                }
            )
        cols = ["id", "created_at", "parent", "turn", "iteration", "messages", "tokens", "source", "metadata"]
        frame = _pd().DataFrame(rows, columns=cols)
        frame["turn"] = frame["turn"].astype("Int64")
        return frame

    # -- what the model saw ---------------------------------------------------------------------
    @property
    def n_calls(self) -> int:
        """Model calls recorded in the thread (= assistant messages)."""
        return model_call_count(self.final_messages)

    def model_view(
        self, call: int, checkpoint_id: str | None = None, *, tulip_view: TulipView = "unknown"
    ) -> list[Message]:
        """What model call ``call`` (0-based over the whole thread; negative counts from the end,
        ``-1`` is the last call) was sent, from the recorded events. A call a tulip agent made has
        no record: ``tulip_view`` says what to assume (:func:`~tulip_nb.memory.conversation.model_view`)."""
        n = self.n_calls
        index = call + n if call < 0 else call
        if not 0 <= index < n:
            raise IndexError(f"thread {self.thread_id!r} has {n} model calls, no call {call}")
        return model_view(self.state(checkpoint_id), call=index, tulip_view=tulip_view)

    @cached_property
    def events(self) -> pd.DataFrame:
        """The recorded compaction events (one row each)."""
        events = compaction_events(self.latest.state)
        cols = ["call", "iteration", "manager", "trigger", "n_messages", "tokens_before", "tokens_after"]
        return _pd().DataFrame([{c: e.get(c) for c in cols} for e in events], columns=cols)

    @cached_property
    def usage(self) -> pd.DataFrame:
        """Per model call, from the recorded events: ``call``, ``n_messages``, ``full_tokens``
        (the whole history), ``context_tokens`` (what the model saw), ``compacted``, ``trigger``,
        ``over_window`` (against the window the thread's manager saved, when it counts tokens;
        None when unknown — :meth:`usage_for` takes the window). The tool schemas sent with every
        request are counted when the thread's manager saved them (every tulip_nb agent's token-aware
        manager does); :meth:`usage_for` takes them otherwise."""
        return self.usage_for(recorded_tools(self.latest.state))

    def usage_for(
        self,
        tools: list[dict[str, Any]] | None,
        *,
        context_window: int | str | None = None,
        tulip_view: TulipView = "unknown",
    ) -> pd.DataFrame:
        """:attr:`usage` with the tokens of ``tools`` (the schemas sent with every request) added.

        ``context_window``: the model's window (tokens, or a registered model name) for the
        ``over_window`` column (True: that call was sent more than the window; None: not known).
        ``tulip_view``: what a call a tulip agent made saw -- ``"unknown"`` (NA ``context_tokens``,
        ``compacted``, ``over_window``) or ``"full"`` (tulip's NullManager: the whole history).
        """
        state = self.latest.state
        window = window_for(context_window=context_window) or saved_window(state)
        counter = self.counter
        fixed = counter.count_tools(tools) + REPLY_PRIMING
        fired = {e.get("call"): e.get("trigger") for e in compaction_events(state)}
        rows = []
        views = model_views(state, tulip_view=tulip_view)  # None: a tulip call, view unknown
        ends = model_calls(state.messages)
        prefix = 0
        last = 0
        counts = counter.message_counts(state.messages)
        for k, (j, view) in enumerate(zip(ends, views, strict=True)):
            prefix += sum(counts[last:j])
            last = j
            rows.append(
                {
                    "call": k,
                    "n_messages": j,
                    "full_tokens": prefix + fixed,
                    "context_tokens": None if view is None else sum(counter.message_counts(view)) + fixed,
                    "compacted": None if view is None else k in fired,
                    "trigger": fired.get(k),
                }
            )
            rows[-1]["over_window"] = over_window(rows[-1]["context_tokens"], window)
        cols = ["call", "n_messages", "full_tokens", "context_tokens", "compacted", "trigger", "over_window"]
        frame = _pd().DataFrame(rows, columns=cols)
        if any(view is None for view in views):  # NA, and the known counts stay integers
            frame["context_tokens"] = frame["context_tokens"].astype("Int64")
        frame.insert(1, "turn", self._turn_column(ends))
        return frame

    # -- lineage --------------------------------------------------------------------------------
    async def alineage(self) -> pd.DataFrame:
        """Where this thread came from and which threads branched off it (same checkpointer)."""
        rows = await lineage_rows(self.checkpointer, self.thread_id, self.infos)
        cols = ["relation", "thread_id", "checkpoint_id", "branch_point", "created_at", "source"]
        return _pd().DataFrame(rows, columns=cols)

    @cached_property
    def lineage(self) -> pd.DataFrame:
        """Sync :meth:`alineage`: rows ``relation`` (``parent``/``ancestor``/``copied_from``/``fork``/
        ``copy``), ``thread_id``, ``checkpoint_id`` (the other thread's first checkpoint),
        ``branch_point`` (the checkpoint the branch was cut from), ``created_at``, ``source``."""
        return run_sync(self.alineage())

    # -- display --------------------------------------------------------------------------------
    def _repr_html_(self, last: int = 12) -> str:
        msgs = self.final_messages
        counts = self._counts()
        head = (
            f"<b>Thread</b> <code>{esc(self.thread_id)}</code> — {len(self.infos)} checkpoints, "
            f"{len(msgs)} messages, {sum(counts):,} tokens, {self.n_calls} model calls, "
            f"{len(compaction_events(self.latest.state))} compaction events, {len(self.turn_list)} turns"
        )
        failed = self._failed_counts()
        if failed:
            head += " (ended without an answer: " + ", ".join(f"{n} {k}" for k, n in failed.items()) + ")"
        rows = []
        start = max(0, len(msgs) - last)
        for i in range(start, len(msgs)):
            m = msgs[i]
            text = short(m.content) + (f" → {short(call_text(m), 120)}" if m.tool_calls else "")
            rows.append(
                f"<tr><td>{i}</td><td>{esc(m.role)}</td><td style='text-align:left'>{esc(text)}</td>"
                f"<td>{counts[i]}</td></tr>"
            )
        more = f"<p>… {start} earlier messages</p>" if start else ""
        return (
            f"<div class='tulip-nb-thread'><p>{head}</p>{more}<table><thead><tr><th>#</th><th>role</th>"
            f"<th>text</th><th>tokens</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
        )


ThreadLike = Thread | str
"""What a lab function takes as a thread: a :class:`Thread`, or a thread id (then with
``checkpointer=``, a checkpointer or its URL; see :func:`as_thread`)."""


async def aas_thread(
    thread: ThreadLike,
    checkpointer: BaseCheckpointer | str | None = None,
    *,
    counter: TokenCounter | None = None,
    what: str = "thread",
) -> Thread:
    """Async :func:`as_thread`."""
    if isinstance(thread, Thread):
        if checkpointer is not None and checkpointer is not thread.checkpointer:
            raise UserError(f"{what}: a Thread already has its checkpointer; pass checkpointer= only with a thread id")
        return thread
    if isinstance(thread, str):
        if checkpointer is None:
            raise UserError(
                f"{what}: {thread!r} is a thread id; pass checkpointer= (a checkpointer or its URL, "
                "'file:./threads', ...) or a Thread from open_thread(...)"
            )
        return await aopen_thread(checkpointer, thread, counter=counter)
    raise UserError(f"{what}: expected a Thread or a thread id, got {type(thread).__name__}")


def as_thread(
    thread: ThreadLike,
    checkpointer: BaseCheckpointer | str | None = None,
    *,
    counter: TokenCounter | None = None,
    what: str = "thread",
) -> Thread:
    """``thread`` as a :class:`Thread`: a Thread is returned as is; a thread id is opened with
    ``checkpointer`` (a checkpointer or a store URL such as ``"file:./threads"``), as
    :func:`open_thread` does. :class:`UserError` (naming ``what``) for an id without a
    checkpointer, a Thread with a different one, or anything else."""
    if isinstance(thread, Thread):
        return run_sync(aas_thread(thread, checkpointer, what=what)) if checkpointer is not None else thread
    return run_sync(aas_thread(thread, checkpointer, counter=counter, what=what))


async def aopen_thread(
    checkpointer: BaseCheckpointer | str, thread_id: str, *, counter: TokenCounter | None = None
) -> Thread:
    """A :class:`Thread` for ``thread_id``; :class:`CheckpointNotFound` names an unknown thread.

    ``checkpointer``: a checkpointer or its URL (``"file:./threads"``, ``"s3://bucket/prefix/"``,
    ...; the thread keeps the one built from it as ``.checkpointer``). ``counter``: the token
    counter for the counts shown (default: the shared ``o200k_base`` one).
    """
    if inspect.isawaitable(thread_id):  # an un-awaited agent.fork(...) must not read as a thread id
        if inspect.iscoroutine(thread_id):
            thread_id.close()
        raise UserError("thread_id: you passed a coroutine: use agent.fork_sync(...) or await it")
    validate_thread_id(thread_id)
    cp, opened = open_checkpointer(checkpointer)
    try:
        infos = await cp.list_checkpoint_infos(thread_id, limit=None)
        latest = await cp.load_checkpoint(thread_id, infos[0].checkpoint_id if infos else None)
        if latest is None:
            raise CheckpointNotFound(f"no such thread in {cp!r}", thread_id=thread_id)
    except BaseException:
        if opened:
            await cp.close()
        raise
    if not infos:
        infos = [latest.info]
    return Thread(cp, thread_id, infos, latest, counter=counter)


open_thread = sync_twin(aopen_thread)


async def athreads(checkpointer: BaseCheckpointer | str, pattern: str = "*", limit: int = 1000) -> pd.DataFrame:
    """One row per thread of ``checkpointer`` (or its URL; ``list_threads`` capability):
    thread_id, checkpoints, messages, tokens, last_update, forked_from (missing for a thread that
    was not branched off another)."""
    cp, opened = open_checkpointer(checkpointer)
    try:
        return await _threads(cp, pattern, limit)
    finally:
        if opened:
            await cp.close()


async def _threads(checkpointer: BaseCheckpointer, pattern: str, limit: int) -> pd.DataFrame:
    counter = get_counter()
    rows = []
    for tid in await checkpointer.list_threads(limit=limit, pattern=pattern):
        infos = await checkpointer.list_checkpoint_infos(tid, limit=None)
        latest = await checkpointer.load_checkpoint(tid, infos[0].checkpoint_id if infos else None)
        if latest is None:
            continue
        msgs = latest.state.messages
        last: datetime = infos[0].created_at if infos else latest.created_at
        rows.append(
            {
                "thread_id": tid,
                "checkpoints": len(infos),
                "messages": len(msgs),
                "tokens": sum(counter.message_counts(msgs)),
                "last_update": last,
                "forked_from": (infos[-1].metadata.get("forked_from") if infos else None),
            }
        )
    cols = ["thread_id", "checkpoints", "messages", "tokens", "last_update", "forked_from"]
    return _pd().DataFrame(rows, columns=cols)


threads = sync_twin(athreads)
