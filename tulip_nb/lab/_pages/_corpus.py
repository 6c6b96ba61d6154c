"""A corpus as a static site: ``index.html`` (the summary table, sortable and filterable in plain
JavaScript) and one thread page per thread under ``threads/``, deployable to any static host.

The table is escaped HTML written here, one row per thread with each cell's sort value in a
``data-v`` attribute; ``assets/table.js`` only reorders and hides those rows (it never writes
markup). A thread that cannot be read keeps its row, with its error, and gets no page.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from tulip_nb.core.errors import TulipNBError
from tulip_nb.lab._pages._document import page, page_name, write_page
from tulip_nb.lab._pages._text import esc, plain
from tulip_nb.lab._pages._thread import thread_page

if TYPE_CHECKING:
    from tulip_nb.lab.corpus import Corpus

__all__ = ["index_page", "write_site"]

HIDDEN = ("first_update",)
"""Summary columns the index leaves out (the thread pages have the detail)."""


def _cell(value: Any) -> tuple[str, str, bool]:
    """``(shown text, sort value, numeric)`` of one summary value (NA: empty, sorted last)."""
    if hasattr(value, "isoformat") and value == value:  # a timestamp (NaT is not equal to itself)
        text = value.isoformat(sep=" ")[:19]
        return text, text, False
    v = plain(value)
    if v is None:
        return "—", "", False
    if isinstance(v, bool):
        return str(v).lower(), str(int(v)), True
    if isinstance(v, int | float):
        return (f"{v:,}" if isinstance(v, int) else f"{v:,.4g}"), repr(v), True
    return str(v), str(v), False


def public_source(source: str | None, fallback: str) -> str:
    """Where the corpus came from, fit to publish: a URL's user, password and query (which may
    carry credentials) are left out.

    >>> public_source("postgresql://me:secret@db:5432/app?sslmode=require", "x")
    'postgresql://db:5432/app'
    >>> public_source("file:./corpus", "x"), public_source(None, "MemoryCheckpointer")
    ('file:./corpus', 'MemoryCheckpointer')
    """
    if not source:
        return fallback
    parts = urlsplit(source)
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return source
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def index_page(corpus: Corpus, summary: Any, links: dict[str, str]) -> str:
    """The index: the summary table with a link to each thread's page (``links``: id -> href)."""
    cols = [c for c in summary.columns if c not in HIDDEN]
    head = "".join(f"<th data-col='{esc(c)}' scope='col' tabindex='0'>{esc(c)}</th>" for c in cols)
    body = []
    for rec in summary.to_dict("records"):
        tid = str(rec["thread_id"])
        cells = []
        for c in cols:
            shown, key, numeric = _cell(rec[c])
            if c == "thread_id" and tid in links:
                shown_html = f"<a href='{esc(links[tid])}'><code>{esc(shown)}</code></a>"
            else:
                shown_html = esc(shown)
            cls = " class='num'" if numeric else ""
            cells.append(f"<td data-v='{esc(key)}'{cls}>{shown_html}</td>")
        body.append(f"<tr data-id='{esc(tid)}'>{''.join(cells)}</tr>")
    where = public_source(corpus.source, type(corpus.checkpointer).__name__)
    n = len(summary)
    html = (
        f"<header><h1>Corpus <code>{esc(where)}</code></h1>"
        f"<p class='facts'>{n:,} threads · one page per thread under <code>threads/</code></p></header>"
        "<div class='filters'><input id='tnb-filter' type='search' placeholder='filter: text, or tokens>2000 "
        "failed_turns=0 …' aria-label='filter'>"
        f"<span id='tnb-count' class='note'>{n:,} of {n:,} threads</span></div>"
        "<p class='note'>click a column to sort (again to reverse); a word filters on any cell, "
        "<code>column&gt;n</code>, <code>column&lt;n</code>, <code>column=n</code> on a number</p>"
        f"<div class='corpus-wrap'><table id='tnb-corpus' class='sortable'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
    return page(f"{where} · tulip_nb corpus", f"<main class='wide'>{html}</main>", scripts=["table.js"])


def write_site(corpus: Corpus, directory: Path, *, max_chars: int, plot: bool) -> Path:
    """Write the site into ``directory``; returns ``index.html``'s path."""
    summary = corpus.summary()
    links: dict[str, str] = {}
    for tid in corpus.thread_ids:
        try:
            thread = corpus[tid]
        except TulipNBError:  # its row already says what is wrong
            continue
        name = page_name(tid)
        html = thread_page(thread, max_chars=max_chars, plot=plot, back="../index.html")
        write_page(directory / "threads" / name, html)
        links[tid] = f"threads/{name}"
    return write_page(directory / "index.html", index_page(corpus, summary, links))
