"""The full history and what the model saw, aligned by message (the ReplayPlayer's table).

A :class:`~tulip_nb.memory.conversation.plan.Plan` says, for each message of the history, whether the model
saw it verbatim (*shown*), as a stub (*stubbed*: a pruned tool result), folded into the summary
(*summarised*) or not at all (*dropped*); the summary message itself stands where
:func:`~tulip_nb.memory.conversation.plan.render` puts it. :func:`aligned_rows` walks the history once and
makes one row per shown or stubbed message, one row per run of summarised or dropped messages
(with their count and tokens), and one row for the summary, each with its position in the view,
so a 1,000-message history at a compacted call is a few dozen rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tulip_nb.core import Message
from tulip_nb.lab._common import esc, short
from tulip_nb.lab.controllers._html import message_cell, scroll_box, table
from tulip_nb.memory.conversation.plan import Plan
from tulip_nb.tokens import TokenCounter

__all__ = ["AlignedRow", "aligned_html", "aligned_rows"]

_COLLAPSED = ("summarised", "dropped")
_ROW_MARKS = {
    "shown": "kept",
    "stubbed": "pruned",
    "summarised": "summarised",
    "dropped": "dropped",
    "summary": "summary",
}
_LISTED = 4  # messages listed at each end of a collapsed span


@dataclass(frozen=True)
class AlignedRow:
    """One row: ``kind`` (shown, stubbed, summarised, dropped, summary), the history span
    ``[start, end)`` (the summary: an empty span where it stands), the position in the model's
    view (None: not sent) and the history tokens of the span."""

    kind: str
    start: int
    end: int
    view_index: int | None
    tokens: int

    @property
    def count(self) -> int:
        return self.end - self.start


def _marks(n_history: int, plan: Plan | None) -> list[str]:
    out = ["shown"] * n_history
    if plan is None:
        return out
    out[: plan.n] = ["dropped"] * plan.n
    for spans, mark in ((plan.kept, "shown"), (plan.pruned, "stubbed"), (plan.summarized, "summarised")):
        for s, e in spans:
            out[s:e] = [mark] * (e - s)
    return out


def aligned_rows(history: Sequence[Message], plan: Plan | None, counter: TokenCounter) -> list[AlignedRow]:
    """The rows of ``history`` under ``plan``, oldest first (see the module docstring).

    The view positions follow :func:`~tulip_nb.memory.conversation.plan.render` exactly: pruned messages
    other than tool results are shown verbatim, and the summary goes before the first kept or
    pruned segment at or after ``plan.summary_at`` (else after the plan's messages).
    """
    marks = _marks(len(history), plan)
    if plan is not None:
        for s, e in plan.pruned:
            for i in range(s, min(e, len(history))):
                if history[i].role != "tool":
                    marks[i] = "shown"
    starts = {s for s, _ in (plan.kept + plan.pruned)} if plan is not None else set()
    pending = plan is not None and plan.summary is not None
    rows: list[AlignedRow] = []
    v = 0
    i, n = 0, len(history)
    while i < n or pending:
        if pending and plan is not None and (i >= plan.n or (i in starts and plan.summary_at <= i)):
            rows.append(AlignedRow("summary", i, i, v, 0))
            v += 1
            pending = False
            continue
        if i >= n:  # a plan made on more messages than this history (not expected): no summary row
            break
        kind = marks[i]
        if kind in _COLLAPSED:
            j = i
            while j < n and marks[j] == kind and not (pending and plan is not None and j >= plan.n):
                j += 1
            tokens = sum(counter.count_message(m) for m in history[i:j])
            rows.append(AlignedRow(kind, i, j, None, tokens))
            i = j
            continue
        rows.append(AlignedRow(kind, i, i + 1, v, counter.count_message(history[i])))
        v += 1
        i += 1
    return rows


def _span_label(row: AlignedRow) -> str:
    return f"{row.start}" if row.count == 1 else f"{row.start}-{row.end - 1}"


def _collapsed_cell(history: Sequence[Message], row: AlignedRow) -> str:
    msgs = list(enumerate(history[row.start : row.end], start=row.start))
    listed = msgs if len(msgs) <= 2 * _LISTED else msgs[:_LISTED] + msgs[-_LISTED:]
    items = []
    for k, (i, m) in enumerate(listed):
        if len(msgs) > 2 * _LISTED and k == _LISTED:
            items.append(f"<li>… {len(msgs) - 2 * _LISTED} more …</li>")
        items.append(f"<li>#{i} {message_cell(m, 100)}</li>")
    what = "message" if row.count == 1 else "messages"
    return (
        f"<details><summary>{row.count} {what} {row.kind} · {row.tokens:,} tokens</summary>"
        f"<ul style='margin:0;padding-left:1.2em'>{''.join(items)}</ul></details>"
    )


def _cells(
    history: Sequence[Message], view: Sequence[Message], row: AlignedRow, summary_at: int | None
) -> tuple[str, str, str]:
    sent = view[row.view_index] if row.view_index is not None and row.view_index < len(view) else None
    if row.kind == "summary":
        text = esc(short(sent.content, 400)) if sent is not None else ""
        return (
            "summary",
            "<i>written by the compactor (not in the history)</i>",
            f"<b>#{row.view_index} summary</b> {text}",
        )
    if row.kind in _COLLAPSED:
        where = f" (into summary #{summary_at})" if row.kind == "summarised" and summary_at is not None else ""
        model = f"✘ {row.kind}{where}: {row.count} msgs, {row.tokens:,} tokens not sent verbatim"
        return (_span_label(row), _collapsed_cell(history, row), model)
    m = history[row.start]
    if row.kind == "stubbed":
        stub = esc(short(sent.content, 120)) if sent is not None else ""
        return (str(row.start), message_cell(m), f"◐ stubbed as #{row.view_index}: <i>{stub}</i>")
    return (str(row.start), message_cell(m), f"✔ shown as #{row.view_index}")


def aligned_html(
    history: Sequence[Message], view: Sequence[Message], rows: Sequence[AlignedRow], *, max_height: int = 600
) -> str:
    """The rows as one table, newest first, in a scroll box of at most ``max_height`` px."""
    summary_at = next((r.view_index for r in rows if r.kind == "summary"), None)
    ordered = list(reversed(rows))
    cells = [_cells(history, view, r, summary_at) for r in ordered]
    marks = [_ROW_MARKS[r.kind] for r in ordered]
    body = table(["#", "history (newest first)", "what the model saw"], cells, marks=marks)
    return scroll_box(body, max_height=max_height)
