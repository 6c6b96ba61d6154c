"""Tidy frames over a corpus: one row per turn, per model call, per message, per event.

The summary has one row per thread; a study usually needs the level below: "which turns fail
after a compaction?", "how many tokens does a call send in the 30th turn?". Each frame here is one
level, with ``thread_id`` and ``turn`` as join keys (as Inspect's ``samples_df`` / ``messages_df``
/ ``events_df`` are), built thread by thread from each thread's latest state and its recorded
compaction events:

- :func:`turns_frame` -- ``thread_id, turn, first, last, outcome, error, model_calls, tool_calls,
  tokens, tokens_sent, compacted, interrupts, recorded``: ``tokens_sent`` sums what the turn's
  calls were sent (NA when one of them is unknown: a tulip-written call); ``compacted``: whether a
  call of the turn was compacted;
- :func:`calls_frame` -- ``thread_id, turn, call, n_messages, full_tokens, context_tokens``
  (what was sent), ``compacted, trigger, over_window`` (NA when the window is unknown);
- :func:`messages_frame` -- ``thread_id, turn, message, role, tool_name, tool_call_id,
  tool_calls`` (calls an assistant message asked for), ``tokens``; ``text=True`` adds ``text``;
- :func:`events_frame` -- ``thread_id, turn, call, kind, detail, tokens_before, tokens_after``:
  ``compaction`` events (trigger, tokens), ``interrupt`` (one per interrupt a turn went on from,
  or is waiting on), ``tool_error`` (the recorded error), and one row per failed turn
  (``error``, ``context_exceeded``, ``max_iterations``; detail: the error).

Every frame has an ``error`` column: None, or the ``"<Type>: <msg>"`` of a thread that could not
be read (one row for that thread, NA elsewhere), so a failure is never a missing thread::

    corpus = open_corpus("file:./corpus")
    turns = corpus.turns()                                # pandas, in process
    calls = corpus.calls(executor=client)                 # on a Dask cluster, gathered as pandas
    lazy = corpus.messages(executor=client, output="dask")  # a dask DataFrame, one partition per chunk

The work is split by thread as for the summary (:mod:`tulip_nb.lab._executors`): a worker holds one
thread's state and its chunk's rows at a time. The frames are equal whatever the executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tulip_nb.core.calls import answered_by
from tulip_nb.lab._corpus_rows import end_chunk
from tulip_nb.lab._executors import error_row
from tulip_nb.lab._stores import open_checkpointer
from tulip_nb.lab._thread import Thread, aopen_thread

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FRAME_COLUMNS",
    "FRAME_KINDS",
    "calls_frame",
    "events_frame",
    "frame_partition",
    "frames_task",
    "messages_frame",
    "turns_frame",
    "typed_frame",
]

FRAME_COLUMNS: dict[str, dict[str, str]] = {
    "turns": {
        "thread_id": "object",
        "turn": "Int64",
        "first": "Int64",
        "last": "Int64",
        "outcome": "object",
        "turn_error": "object",
        "model_calls": "Int64",
        "tool_calls": "Int64",
        "tokens": "Int64",
        "tokens_sent": "Int64",
        "compacted": "boolean",
        "interrupts": "Int64",
        "recorded": "boolean",
        "error": "object",
    },
    "calls": {
        "thread_id": "object",
        "turn": "Int64",
        "call": "Int64",
        "n_messages": "Int64",
        "full_tokens": "Int64",
        "context_tokens": "Int64",
        "compacted": "boolean",
        "trigger": "object",
        "over_window": "boolean",
        "error": "object",
    },
    "messages": {
        "thread_id": "object",
        "turn": "Int64",
        "message": "Int64",
        "role": "object",
        "tool_name": "object",
        "tool_call_id": "object",
        "tool_calls": "Int64",
        "tokens": "Int64",
        "text": "object",
        "error": "object",
    },
    "events": {
        "thread_id": "object",
        "turn": "Int64",
        "call": "Int64",
        "kind": "object",
        "detail": "object",
        "tokens_before": "Int64",
        "tokens_after": "Int64",
        "error": "object",
    },
}
"""Each frame's columns and their dtypes (nullable: NA is unknown, never 0). The turns frame's
``turn_error`` is a failed turn's error; ``error`` is always the thread's read error."""
FRAME_KINDS = tuple(FRAME_COLUMNS)


def _value(v: Any) -> Any:
    """A cell as a plain Python value (None for NA), so rows pickle small and type the same."""
    if v is None:
        return None
    try:
        if v != v:  # NaN, NaT
            return None
    except (TypeError, ValueError):  # pd.NA
        return None
    return v.item() if hasattr(v, "item") else v


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _value(v) for k, v in row.items()} for row in frame.to_dict("records")]


def turns_frame(thread: Thread) -> list[dict[str, Any]]:
    """The turns rows of one thread (module docstring)."""
    usage = thread.usage
    sent: dict[int, Any] = {}
    compacted: dict[int, bool] = {}
    for turn, calls in usage.groupby("turn", dropna=True):
        tokens = calls["context_tokens"]
        sent[int(turn)] = None if tokens.isna().any() else int(tokens.sum())
        compacted[int(turn)] = bool(calls["compacted"].fillna(False).astype(bool).any())
    rows = []
    for r in _records(thread.turns):
        t = int(r["turn"])
        rows.append(
            {
                "thread_id": thread.thread_id,
                **{k: r[k] for k in ("turn", "first", "last", "outcome", "model_calls", "tool_calls", "tokens")},
                "turn_error": r["error"],
                "tokens_sent": sent.get(t, 0 if not r["model_calls"] else None),
                "compacted": compacted.get(t, False),
                "interrupts": r["interrupts"],
                "recorded": r["recorded"],
                "error": None,
            }
        )
    return rows


def calls_frame(thread: Thread) -> list[dict[str, Any]]:
    """The model-call rows of one thread (module docstring)."""
    return [{"thread_id": thread.thread_id, **r, "error": None} for r in _records(thread.usage)]


def messages_frame(thread: Thread, *, text: bool = False) -> list[dict[str, Any]]:
    """The message rows of one thread (module docstring); ``text``: with each message's text."""
    msgs = thread.final_messages
    frame = thread.messages
    turns = [_value(v) for v in frame["turn"]]
    tokens = [int(v) for v in frame["tokens"]]
    return [
        {
            "thread_id": thread.thread_id,
            "turn": turns[i],
            "message": i,
            "role": m.role,
            "tool_name": m.name or None,
            "tool_call_id": m.tool_call_id or None,
            "tool_calls": len(m.tool_calls) if m.role == "assistant" else None,
            "tokens": tokens[i],
            "text": (m.content or "") if text else None,
            "error": None,
        }
        for i, m in enumerate(msgs)
    ]


def _call_turns(usage: pd.DataFrame) -> dict[int, Any]:
    return {int(c): _value(t) for c, t in zip(usage["call"], usage["turn"], strict=True)}


def events_frame(thread: Thread) -> list[dict[str, Any]]:
    """The event rows of one thread (module docstring), in thread order."""
    tid = thread.thread_id
    rows: list[tuple[float, dict[str, Any]]] = []
    call_turn = _call_turns(thread.usage)
    turn_first = {int(t.turn): t.first for t in thread.turn_list}
    for e in _records(thread.events):
        call = e["call"]
        turn = call_turn.get(int(call)) if call is not None else None
        at = turn_first.get(turn, 0) if turn is not None else 0
        rows.append(
            (
                at,
                {
                    "thread_id": tid,
                    "turn": turn,
                    "call": call,
                    "kind": "compaction",
                    "detail": e["trigger"],
                    "tokens_before": e["tokens_before"],
                    "tokens_after": e["tokens_after"],
                },
            )
        )
    for t in thread.turn_list:
        waiting = 1 if t.outcome == "interrupted" else 0
        for _ in range(t.interrupts + waiting):
            rows.append((t.first, {"thread_id": tid, "turn": t.turn, "kind": "interrupt"}))
        if t.outcome in ("error", "context_exceeded", "max_iterations"):
            rows.append((t.last + 0.5, {"thread_id": tid, "turn": t.turn, "kind": t.outcome, "detail": t.error}))
    msgs = thread.final_messages
    for i, (m, ref) in enumerate(zip(msgs, answered_by(msgs), strict=True)):
        if ref is not None and (m.content or "").startswith("Error:"):
            detail = (m.content or "").splitlines()[0][:200]
            rows.append((i, {"thread_id": tid, "turn": thread.turn_of(i), "kind": "tool_error", "detail": detail}))
    rows.sort(key=lambda pair: pair[0])  # stable: same position keeps insertion order
    empty = dict.fromkeys(FRAME_COLUMNS["events"])
    return [{**empty, **row, "error": None} for _, row in rows]


_BUILDERS = {"turns": turns_frame, "calls": calls_frame, "events": events_frame}


async def frames_task(source: Any, chunk: list[str], payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of frame ``payload["kind"]`` for ``chunk`` (a :func:`~tulip_nb.lab._executors.map_threads`
    task): one thread's state at a time; a thread that fails is one row with ``error``."""
    kind = payload["kind"]
    cp, opened = open_checkpointer(source)
    rows: list[dict[str, Any]] = []
    try:
        for tid in chunk:
            try:
                thread = await aopen_thread(cp, tid)
                if kind == "messages":
                    rows += messages_frame(thread, text=bool(payload.get("text")))
                else:
                    rows += _BUILDERS[kind](thread)
                del thread
            except Exception as e:
                rows.append(error_row(tid, e))
    finally:
        await end_chunk(cp, opened)
    return rows


def typed_frame(kind: str, rows: list[dict[str, Any]], *, text: bool = False) -> pd.DataFrame:
    """``rows`` as the typed frame ``kind`` (:data:`FRAME_COLUMNS`)."""
    import pandas as pd

    spec = dict(FRAME_COLUMNS[kind])
    if kind == "messages" and not text:
        del spec["text"]
    frame = pd.DataFrame(rows, columns=list(spec))
    for col, dtype in spec.items():
        if dtype == "object":
            frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
        else:
            frame[col] = frame[col].astype(object).where(frame[col].notna(), None).astype(dtype)
    return frame


def frame_partition(source: Any, chunk: list[str], payload: dict[str, Any]) -> pd.DataFrame:
    """One chunk's typed frame (a Dask partition); a chunk that fails is its threads' error rows."""
    from tulip_nb._sync import run_sync

    try:
        rows = run_sync(frames_task(source, chunk, payload))
    except Exception as e:
        rows = [error_row(t, e) for t in chunk]
    return typed_frame(payload["kind"], rows, text=bool(payload.get("text")))
