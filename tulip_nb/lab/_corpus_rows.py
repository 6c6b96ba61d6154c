"""The per-thread work of a corpus: one summary row, one simulation row per config.

These are the tasks :func:`tulip_nb.lab._executors.map_threads` runs (top-level ``async def``
functions, so they pickle and run on any worker): each opens the store from ``source`` (a URL, or
the checkpointer itself in process), handles its chunk **one thread at a time** (a thread's states
are dropped before the next is read) and turns a thread's failure into its row's ``error``.

Where each summary count comes from (see ``docs/corpus.md``):

- ``turns`` (user messages), ``model_calls`` (assistant messages), ``messages``, ``tokens`` (of the
  full history, exact; the agent's saved per-message counts are reused), ``tool_calls`` (calls in
  assistant messages), ``tool_errors`` (tool results that answer a call and read
  ``"Error: <Type>: <msg>"``, the form tulip and tulip_nb record a failed call in): from the
  latest state's messages, for any thread.
- ``max_call_tokens`` (what one model call was sent: its view, rebuilt from the recorded compaction
  events, plus the reply priming; tool schemas are not recorded, so not counted) and
  ``compactions`` (recorded events, ``EVENTS_KEY``): when the thread was written by tulip_nb (every
  checkpoint header has its mark) or carries events; else NA (tulip records no events, so what its
  manager sent is unknown).
- ``over_window_calls``: calls whose view exceeds the window (``context_window=``, else the one
  the thread's token-aware manager saved); NA when the window or the views are unknown.
- ``interrupts`` (saves of kind ``interrupt``) and ``idempotent_hits`` (executions recorded with
  ``idempotent_cache_hit``, one per call position; ``tool_executions`` hold one turn each, so the
  last checkpoint of every run is read, one at a time): tulip_nb-written threads only, else NA.
  A fork counts what it inherited: its source's checkpoints up to the branch point (followed back
  through forks of forks); NA when a source is gone.
- ``failed_turns`` and one ``turns_<outcome>`` count per outcome (``turns_answered``,
  ``turns_error``, ``turns_context_exceeded``, ``turns_max_iterations``, ``turns_interrupted``,
  ``turns_tulip``), plus ``turns_unknown`` (turns whose outcome nothing records or shows): from the
  latest state's turn log (:mod:`tulip_nb.core.turns`), for any thread.
- ``forked_from``, ``first_update``, ``last_update``, ``checkpoints``: the thread's own headers.

Memory: a task holds one thread's states at a time and its chunk's rows, and empties the token
counter's cache at the end of each chunk (in process too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tulip_nb.core.calls import answered_by, execution_position, model_call_count
from tulip_nb.core.errors import CheckpointNotFound
from tulip_nb.core.keys import FORKED_FROM_KEY, PARENT_KEY, RUN_ID_KEY, SOURCE_KEY
from tulip_nb.core.turns import OUTCOMES, split_turns
from tulip_nb.lab._executors import error_row
from tulip_nb.lab._headers import marked_count
from tulip_nb.lab._stores import open_checkpointer
from tulip_nb.lab._thread import Thread, aopen_thread
from tulip_nb.lab._window import saved_window, window_for
from tulip_nb.lab.simulate import asimulate_compaction, normalize_probes
from tulip_nb.memory.conversation import EVENTS_KEY, compaction_events, saved_token_counts
from tulip_nb.tokens import get_counter

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.memory.checkpointer import BaseCheckpointer, CheckpointInfo

__all__ = [
    "ALL_SUMMARY_COLUMNS",
    "SIMULATION_COLUMNS",
    "STATE_COLUMNS",
    "SUMMARY_COLUMNS",
    "end_chunk",
    "segments",
    "simulate_task",
    "summary_row",
]

ALL_SUMMARY_COLUMNS = [
    "thread_id",
    "turns",
    "failed_turns",
    *(f"turns_{o}" for o in OUTCOMES),
    "turns_unknown",
    "model_calls",
    "messages",
    "tokens",
    "max_call_tokens",
    "compactions",
    "over_window_calls",
    "tool_calls",
    "tool_errors",
    "interrupts",
    "idempotent_hits",
    "forked_from",
    "first_update",
    "last_update",
    "checkpoints",
    "read",
    "error",
]
"""Every summary column, in order (the state columns included)."""
STATE_COLUMNS = ("max_call_tokens", "over_window_calls")
"""Summary columns that need the thread's latest state (its calls' views): opt-in,
``summary(columns=[...])`` or ``columns="all"``."""
SUMMARY_COLUMNS = [c for c in ALL_SUMMARY_COLUMNS if c not in STATE_COLUMNS]
"""The default summary's columns: each read from headers and the counters kept at save time."""
SIMULATION_COLUMNS = [
    "thread_id",
    "config",
    "summarizer",
    "calls",
    "compactions",
    "max_context_tokens",
    "tokens_saved",
    "over_window_calls",
    "facts",
    "facts_kept",
    "error",
]
_MAX_FORK_DEPTH = 32
Segment = tuple[str, list["CheckpointInfo"]]


async def segments(cp: BaseCheckpointer, thread_id: str, infos: list[CheckpointInfo]) -> list[Segment] | None:
    """The thread's checkpoints and, for a fork, its sources' up to each branch point (newest
    first in each); None when a source or its branch point is gone."""
    out: list[Segment] = [(thread_id, infos)]
    seen = {thread_id}
    first = infos[-1].metadata
    while isinstance(first.get(FORKED_FROM_KEY), str):
        source, parent = first[FORKED_FROM_KEY], first.get(PARENT_KEY)
        if source in seen or len(out) > _MAX_FORK_DEPTH:
            return None
        seen.add(source)
        upstream = await cp.list_checkpoint_infos(source, limit=None)
        ids = [i.checkpoint_id for i in upstream]
        if parent not in ids:
            return None
        upstream = upstream[ids.index(parent) :]
        out.append((source, upstream))
        first = upstream[-1].metadata
    return out


async def _idempotent_hits(cp: BaseCheckpointer, segments: list[Segment], latest: Any) -> int:
    """Distinct call positions recorded as idempotent cache hits, over the last save of each run."""
    hits: set[Any] = set()
    for tid, infos in segments:
        last_of_run: dict[Any, CheckpointInfo] = {}
        for info in infos:  # newest first: the first seen of a run is its last save
            last_of_run.setdefault(info.metadata.get(RUN_ID_KEY) or info.checkpoint_id, info)
        for info in last_of_run.values():
            is_latest = tid == segments[0][0] and info.checkpoint_id == latest.checkpoint_id
            ck = latest if is_latest else await cp.load_checkpoint(tid, info.checkpoint_id)
            if ck is None:
                raise CheckpointNotFound("checkpoint vanished while reading", thread_id=tid)
            for ex in ck.state.tool_executions:
                if ex.idempotent_cache_hit:
                    pos = execution_position(ex)
                    hits.add(pos if pos is not None else (ex.tool_name, ex.tool_call_id, str(ex.timestamp)))
    return len(hits)


def _is_error(content: str | None) -> bool:
    """Whether a tool result is the agent's record of a failed call (``"Error: <Type>: <msg>"``)."""
    return (content or "").startswith("Error:")


def _na() -> Any:
    import pandas as pd

    return pd.NA


async def summary_row(
    cp: BaseCheckpointer, thread_id: str, *, context_window: int | str | None = None, state_columns: bool = True
) -> dict[str, Any]:
    """One summary row from the thread's states (module docstring), every column of
    :data:`ALL_SUMMARY_COLUMNS`: the reference the header summary (``_corpus_summary``) equals,
    and its fallback for a thread without counters. ``state_columns=False`` leaves the
    :data:`STATE_COLUMNS` NA (they rebuild every call's view). Raises when the thread cannot be read."""
    na = _na()
    infos = await cp.list_checkpoint_infos(thread_id, limit=None)
    latest = await cp.load_checkpoint(thread_id, infos[0].checkpoint_id if infos else None)
    if latest is None:
        raise CheckpointNotFound("thread has no checkpoint (deleted since it was listed?)", thread_id=thread_id)
    infos = infos or [latest.info]
    state = latest.state
    msgs = state.messages
    counter = get_counter()
    known = saved_token_counts(state, counter)
    if known:
        counter.remember(msgs[: len(known)], known)
    counts = counter.message_counts(msgs)
    segs = await segments(cp, thread_id, infos)
    native = segs is not None and all(marked_count(i.metadata) is not None for _, s in segs for i in s)
    has_events = EVENTS_KEY in state.metadata
    calls = model_call_count(msgs)
    max_call: Any = na
    over: Any = na
    if state_columns and (native or has_events):
        usage = Thread(cp, thread_id, infos, latest, counter=counter).usage
        max_call = int(usage["context_tokens"].max()) if calls else 0
        window = window_for(context_window=context_window) or saved_window(state)
        if window is not None:
            over = int((usage["context_tokens"] > window).sum())
    answers = answered_by(msgs)
    errors = sum(1 for m, a in zip(msgs, answers, strict=True) if a is not None and _is_error(m.content))
    interrupts: Any = na
    hits: Any = na
    if native and segs is not None:
        interrupts = sum(1 for _, s in segs for i in s if i.metadata.get(SOURCE_KEY) == "interrupt")
        hits = await _idempotent_hits(cp, segs, latest)
    forked = infos[-1].metadata.get(FORKED_FROM_KEY)
    turns = split_turns(msgs, state.metadata)
    outcomes = {f"turns_{o}": sum(1 for t in turns if t.outcome == o) for o in OUTCOMES}
    return {
        "thread_id": thread_id,
        "turns": len(turns),
        "failed_turns": sum(1 for t in turns if t.failed),
        **outcomes,
        "turns_unknown": sum(1 for t in turns if t.outcome is None),
        "model_calls": calls,
        "messages": len(msgs),
        "tokens": sum(counts),
        "max_call_tokens": max_call,
        "compactions": len(compaction_events(state)) if native or has_events else na,
        "over_window_calls": over,
        "tool_calls": sum(len(m.tool_calls) for m in msgs if m.role == "assistant"),
        "tool_errors": errors,
        "interrupts": interrupts,
        "idempotent_hits": hits,
        "forked_from": forked if isinstance(forked, str) else None,
        "first_update": infos[-1].created_at,
        "last_update": infos[0].created_at,
        "checkpoints": len(infos),
        "read": "states",
        "error": None,
    }


async def end_chunk(cp: BaseCheckpointer, opened: bool) -> None:
    """End of a chunk: close the store if the task opened it from its URL (in a worker), and empty
    the shared token counter's content cache, in a worker and in process alike, so the memory of a
    corpus run is one chunk's whatever the corpus size. The cache is bounded by 200,000 messages,
    not bytes: the JSON keys of a long corpus's messages (tool results of 5-30 kB) would otherwise
    fill it with gigabytes; counts are recomputed on demand afterwards."""
    if opened:
        await cp.close()
    get_counter().clear_cache()


def reduce_simulation(
    thread_id: str, name: str, calls: pd.DataFrame, labels: list[str] | None, probes: list[str]
) -> dict[str, Any]:
    """One (thread, config) row from the per-call frame of that config."""
    na = _na()
    n = len(calls)
    said = kept = 0
    row: dict[str, Any] = {"thread_id": thread_id, "config": name, "calls": n}
    last = calls.iloc[-1] if n else None
    for label in probes:
        v = last[f"probe: {label}"] if last is not None else None
        v = None if v is None or v != v else bool(v)
        said += v is not None
        kept += v is True
        if labels is not None:
            row[f"probe: {label}"] = v
    windowed = [v for v in calls["over_window"] if v is not None and v == v] if n else []
    used = [str(v) for v in dict.fromkeys(calls["summarizer"]) if isinstance(v, str)] if n else []
    row.update(
        summarizer=", ".join(used) if used else None,
        compactions=int(calls["compacted"].sum()) if n else 0,
        max_context_tokens=int(calls["context_tokens"].max()) if n else na,
        tokens_saved=int((calls["full_tokens"] - calls["context_tokens"]).sum()) if n else 0,
        over_window_calls=sum(v is True for v in windowed) if windowed or not n else na,
        facts=said,
        facts_kept=kept,
        error=None,
    )
    return row


async def simulate_task(source: Any, chunk: list[str], payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (thread, config) of ``chunk`` (a :func:`~tulip_nb.lab._executors.map_threads` task).

    ``payload``: ``configs`` (``[(name, manager or "recorded"), ...]``), ``probes`` (shared
    ``[(label, text)]`` or a callable ``thread -> probes``), ``context_window``, ``tools`` (schemas
    or None), ``summarizer`` (the ``summarizer=`` choice).
    """
    cp, opened = open_checkpointer(source)
    configs: list[tuple[str, Any]] = payload["configs"]
    probes = payload["probes"]
    labels = None if callable(probes) else [label for label, _ in probes]
    rows: list[dict[str, Any]] = []
    try:
        for tid in chunk:
            try:
                thread = await aopen_thread(cp, tid)
                mine = normalize_probes(probes(thread)) if callable(probes) else probes
                sim = await asimulate_compaction(
                    thread,
                    dict(configs),
                    probes=mine,
                    tools=payload.get("tools"),
                    context_window=payload.get("context_window"),
                    summarizer=payload.get("summarizer"),
                )
                names = [label for label, _ in mine]
                for name, _ in configs:
                    calls = sim[sim["config"] == name] if len(sim) else sim
                    rows.append(reduce_simulation(tid, name, calls, labels, names))
                del thread, sim
            except Exception as e:
                rows += [{**error_row(tid, e), "config": name} for name, _ in configs]
    finally:
        await end_chunk(cp, opened)
    return rows
