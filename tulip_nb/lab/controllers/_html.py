"""HTML fragments the controllers render (plain strings: the same text a widget shows live and a
saved notebook shows without a kernel)."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence

from tulip_nb.core import Message
from tulip_nb.lab._common import call_text, esc, short

__all__ = ["MARK_COLORS", "MAX_HEIGHT", "message_cell", "more_note", "note", "png_tag", "scroll_box", "table"]

MARK_COLORS = {
    "kept": "",
    "pruned": "#fff5b1",
    "summarised": "#e1ecff",
    "dropped": "#ffeef0",
    "summary": "#e6ffed",
    "edited": "#fde2ff",
}
"""Row backgrounds: what happened to a message in the model's view."""


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, marks: Sequence[str] | None = None) -> str:
    """An HTML table; ``marks[i]`` (a :data:`MARK_COLORS` key) colours row ``i`` and is its class."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        mark = marks[i] if marks is not None and i < len(marks) else ""
        color = MARK_COLORS.get(mark, "")
        style = f" style='background:{color}'" if color else ""
        cls = f" class='tulip-nb-{esc(mark)}'" if mark else ""
        cells = "".join(f"<td style='text-align:left'>{c}</td>" for c in row)
        body.append(f"<tr{cls}{style}>{cells}</tr>")
    return f"<table class='tulip-nb-table'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def message_cell(m: Message, limit: int = 160) -> str:
    """``role: text → calls`` of one message, escaped, on one line."""
    text = esc(short(m.content, limit))
    if m.tool_calls:
        text += f" <i>→ {esc(short(call_text(m), limit))}</i>"
    return f"<b>{esc(m.role)}</b> {text}"


def note(text: str, kind: str = "info") -> str:
    """A one-line status paragraph (``kind``: info, ok, warn, error)."""
    color = {"info": "#444", "ok": "#1a7f37", "warn": "#9a6700", "error": "#cf222e"}.get(kind, "#444")
    return f"<p class='tulip-nb-note tulip-nb-{esc(kind)}' style='color:{color}'>{esc(text)}</p>"


def png_tag(png: bytes, alt: str) -> str:
    """An inline ``<img>`` of PNG bytes (for the text/html fallback of a saved notebook)."""
    data = base64.b64encode(png).decode()
    return f"<img alt='{esc(alt)}' src='data:image/png;base64,{data}'/>"


MAX_HEIGHT = 600
"""Default height bound (px) of a scroll box: a long thread scrolls inside the widget."""


def scroll_box(html: str, *, max_height: int = MAX_HEIGHT) -> str:
    """``html`` in a box that scrolls past ``max_height`` pixels (a long table stays one screen)."""
    return (
        f"<div class='tulip-nb-scroll' style='max-height:{int(max_height)}px;overflow:auto;"
        f"border:1px solid #ddd'>{html}</div>"
    )


def more_note(hidden: int, where: str) -> str:
    """``… N more rows (where)``; empty when nothing was left out."""
    rows = "row" if hidden == 1 else "rows"
    return note(f"… {hidden:,} more {rows} not shown ({where})") if hidden > 0 else ""
