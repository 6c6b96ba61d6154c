"""The controller of ``CorpusView``: a corpus summary as a sorted, filtered, paged HTML table.

:class:`CorpusController` holds the view's state — sort column and direction, a thread-id filter
(a glob like ``case-00*`` or a substring), numeric ranges, a pandas query string, the page, the
selected thread and the chosen config — and renders it: the page's rows as an HTML table (25 rows
by default, so a corpus of thousands stays one screen and renders as fast as 25 rows), "rows 26-50
of 812 matching (1,000 threads)", the distribution plots of :mod:`tulip_nb.lab._corpus_plots`, and
the chosen config's simulation rows for the threads on the page::

    from tulip_nb.lab.controllers import CorpusController

    c = CorpusController(corpus, sim=corpus.simulate(configs, probes=corpus_facts))
    c.sort("tokens")                      # numbers sort largest first; again: smallest first
    c.set_query("compactions > 0 and tool_errors == 0")
    c.set_range("turns", minimum=6)
    c.page_ids                            # the 25 thread ids on the page
    thread = c.select(c.page_ids[0])      # a Thread (corpus[thread_id])
    c.set_config("tight"); c.config_rows()  # that config's simulation of the page's threads

``corpus`` may also be a summary frame alone (a saved ``Corpus.summary()``): everything works but
opening a thread, which needs the corpus. ``summary=`` gives a saved summary *with* the corpus
(threads open, nothing is recomputed); ``defer=True`` starts from a pending summary (ids, NA
cells: :func:`~tulip_nb.lab.corpus.pending_summary`) that :meth:`CorpusController.set_summary`
replaces when it has been read -- what ``CorpusView`` does in the background.
"""

from __future__ import annotations

import fnmatch
import math
from typing import TYPE_CHECKING, Any

from tulip_nb.core.errors import UserError
from tulip_nb.lab._common import esc
from tulip_nb.lab._corpus_plots import plot_corpus_distributions, plot_facts_kept
from tulip_nb.lab._corpus_rows import SIMULATION_COLUMNS, SUMMARY_COLUMNS
from tulip_nb.lab._plots import to_png
from tulip_nb.lab.controllers._html import MARK_COLORS, note, png_tag, scroll_box

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.lab._thread import Thread
    from tulip_nb.lab.corpus import Corpus

__all__ = ["PAGE_SIZE", "SIM_COLUMNS", "TABLE_COLUMNS"]

PAGE_SIZE = 25
"""Rows on a page of the table."""

TABLE_COLUMNS = tuple(c for c in SUMMARY_COLUMNS if c not in ("first_update", "last_update"))
"""Summary columns the table shows (every column of the summary, the update times too, can be
sorted and queried)."""

SIM_COLUMNS = tuple(c for c in SIMULATION_COLUMNS if c != "config")
"""Columns of a config's simulation rows the view shows."""

# compact rows (JupyterLab's widget HTML has a 28px line height), numbers right-aligned
_TABLE = "font-size:12px;line-height:14px;border-collapse:collapse"
_TH = "padding:2px 5px;vertical-align:bottom;max-width:6.5em"
_TD = "padding:1px 5px;white-space:nowrap"

PNG_CACHE = 32
"""Plots kept (one per filter tried and per config): going back to a filter is instant."""

TABLE_HEIGHT = 640
"""Height bound (px) of the table's scroll box (a page of 25 rows fits without scrolling)."""


def _missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v) or str(v) in ("<NA>", "NaT")
    except (TypeError, ValueError):  # pd.NA compares to NA, whose truth is ambiguous
        return True


def _cell(col: str, v: Any) -> tuple[str, bool]:
    """``(html, numeric)`` of one cell."""
    if _missing(v):
        return "<span style='color:#999'>—</span>", False
    if col == "thread_id" or col == "forked_from":
        return f"<code>{esc(v)}</code>", False
    if col == "error":
        return f"<span style='color:#cf222e'>{esc(str(v)[:80])}</span>", False
    if isinstance(v, bool):
        return esc(v), False
    if isinstance(v, int | float) or hasattr(v, "__index__"):
        f = float(v)
        return (f"{int(f):,}" if f.is_integer() else f"{f:,.2f}"), True
    return esc(str(v)[:19]), False


def _check_same_threads(summary: pd.DataFrame, thread_ids: list[str]) -> None:
    """:class:`UserError` unless ``summary`` has one row per thread of ``thread_ids``."""
    if "thread_id" not in summary.columns:
        raise UserError(f"a corpus summary needs a thread_id column; got {list(summary.columns)}")
    have = [str(t) for t in summary["thread_id"]]
    if sorted(have) != sorted(thread_ids):
        extra = sorted(set(have) - set(thread_ids))[:3]
        missing = sorted(set(thread_ids) - set(have))[:3]
        raise UserError(
            f"the summary is not this corpus's: {len(have)} rows for {len(thread_ids)} threads"
            + (f"; not in the corpus: {extra}" if extra else "")
            + (f"; no row for: {missing}" if missing else "")
        )


class CorpusController:
    """Sort, filter, page and select over a corpus summary (see the module docstring).

    ``corpus``: a :class:`~tulip_nb.lab.corpus.Corpus` (or its summary frame); ``summary``: its
    summary computed earlier; ``defer``: start from a pending summary (see the module docstring);
    ``sim``: a :meth:`Corpus.simulate` frame, or ``configs`` (+ ``probes``) to simulate now;
    ``page_size``: rows per page; ``columns``: the summary columns the table shows."""

    def __init__(
        self,
        corpus: Corpus | pd.DataFrame,
        *,
        summary: pd.DataFrame | None = None,
        defer: bool = False,
        sim: pd.DataFrame | None = None,
        configs: Any = None,
        probes: Any = None,
        page_size: int = PAGE_SIZE,
        columns: tuple[str, ...] = TABLE_COLUMNS,
    ) -> None:
        import pandas as pd

        if page_size < 1:
            raise UserError(f"page_size must be at least 1, got {page_size}")
        from tulip_nb.lab.corpus import pending_summary

        self.pending = False
        """True while the summary is a pending one (ids only: :meth:`set_summary` replaces it)."""
        if isinstance(corpus, pd.DataFrame):
            self.corpus: Corpus | None = None
            summary = corpus
        else:
            self.corpus = corpus
            if summary is not None:
                _check_same_threads(summary, corpus.thread_ids)
            elif defer:
                summary, self.pending = pending_summary(corpus.thread_ids), True
            else:
                summary = corpus.summary()
        if "thread_id" not in summary.columns:
            raise UserError(f"a corpus summary needs a thread_id column; got {list(summary.columns)}")
        self.summary: pd.DataFrame = summary.reset_index(drop=True)
        if sim is None and configs is not None and not defer:
            if self.corpus is None:
                raise UserError("configs= needs a Corpus to simulate; with a summary frame, pass sim=")
            sim = self.corpus.simulate(configs, probes)
        if sim is not None and not {"thread_id", "config"} <= set(sim.columns):
            raise UserError(f"sim must be a Corpus.simulate frame (thread_id, config, ...); got {list(sim.columns)}")
        self.sim = sim
        self.configs: list[str] = [str(c) for c in dict.fromkeys(sim["config"])] if sim is not None else []
        self.config: str | None = self.configs[0] if self.configs else None
        self.columns = tuple(c for c in columns if c in self.summary.columns)
        self.page_size = page_size
        self.sort_by: str | None = None
        self.ascending = True
        self.text = ""
        self.query = ""
        self.ranges: dict[str, tuple[float | None, float | None]] = {}
        self.page = 0
        self.selected: str | None = None
        self._ids = {str(t) for t in self.summary["thread_id"]}
        self._rows: pd.DataFrame | None = None
        self._png: dict[tuple[Any, ...], bytes] = {}
        self._sim_summary: pd.DataFrame | None = None

    def __repr__(self) -> str:
        return f"CorpusController({len(self.rows)}/{len(self.summary)} threads, page {self.page + 1}/{self.pages})"

    def set_summary(self, summary: pd.DataFrame) -> None:
        """Replace the (pending) summary by ``summary`` -- the same threads -- keeping the sort,
        the filters, the page and the selection; a query the new frame cannot run is dropped."""
        if "thread_id" not in summary.columns:
            raise UserError(f"a corpus summary needs a thread_id column; got {list(summary.columns)}")
        _check_same_threads(summary, [str(t) for t in self.summary["thread_id"]])
        self.summary = summary.reset_index(drop=True)
        self.columns = tuple(c for c in self.columns if c in self.summary.columns) or tuple(
            c for c in TABLE_COLUMNS if c in self.summary.columns
        )
        if self.query:
            try:
                self._query_mask(self.summary, self.query)
            except UserError:
                self.query = ""
        self.pending = False
        self._png.clear()
        self._changed(keep_page=True)

    def set_sim(self, sim: pd.DataFrame) -> None:
        """Take a :meth:`Corpus.simulate` frame (computed after the view opened)."""
        if not {"thread_id", "config"} <= set(sim.columns):
            raise UserError(f"sim must be a Corpus.simulate frame (thread_id, config, ...); got {list(sim.columns)}")
        self.sim = sim
        self.configs = [str(c) for c in dict.fromkeys(sim["config"])]
        self.config = self.config if self.config in self.configs else (self.configs[0] if self.configs else None)
        self._sim_summary = None

    # -- state ------------------------------------------------------------------------------------
    @property
    def sortable(self) -> list[str]:
        """Every column of the summary (all can be sorted)."""
        return [str(c) for c in self.summary.columns]

    @property
    def numeric(self) -> list[str]:
        """The summary's numeric columns (those :meth:`set_range` takes)."""
        import pandas as pd

        return [str(c) for c in self.summary.columns if pd.api.types.is_numeric_dtype(self.summary[c])]

    def _changed(self, *, keep_page: bool = False) -> None:
        self._rows = None
        if not keep_page:
            self.page = 0

    def sort(self, column: str, ascending: bool | None = None) -> None:
        """Sort by ``column``. Without ``ascending``: the same column again flips the direction;
        a new one starts largest first for numbers, A to Z otherwise. Missing values go last, ties
        keep thread-id order; the view goes back to page 1."""
        if column not in self.summary.columns:
            raise UserError(f"cannot sort by {column!r}: no such column; columns: {self.sortable}")
        if ascending is None:
            ascending = not self.ascending if column == self.sort_by else column not in self.numeric
        self.sort_by, self.ascending = column, ascending
        self._changed()

    def clear_sort(self) -> None:
        """Back to the summary's own order (the corpus listing order)."""
        self.sort_by, self.ascending = None, True
        self._changed()

    def set_text(self, text: str) -> None:
        """Keep the thread ids matching ``text``: a glob when it has ``*?[``, else a substring
        (case-insensitive); empty keeps every thread."""
        self.text = text.strip()
        self._changed()

    def set_query(self, query: str) -> None:
        """Keep the rows where the pandas query ``query`` holds (``"tokens > 5000 and
        tool_errors == 0"``; empty: no query). A query that does not parse, names an unknown
        column or is not a condition raises :class:`UserError` and leaves the filter as it was."""
        query = query.strip()
        if query:
            self._query_mask(self.summary, query)  # validate before taking it
        self.query = query
        self._changed()

    def set_range(self, column: str, minimum: float | None = None, maximum: float | None = None) -> None:
        """Keep the rows with ``minimum <= column <= maximum`` (either bound may be None; both
        None removes the range). Unread rows (NA) never match a range."""
        if column not in self.numeric:
            raise UserError(f"set_range: {column!r} is not a numeric summary column; numeric: {self.numeric}")
        if minimum is not None and maximum is not None and minimum > maximum:
            raise UserError(f"set_range({column!r}): minimum {minimum} is above maximum {maximum}")
        if minimum is None and maximum is None:
            self.ranges.pop(column, None)
        else:
            self.ranges[column] = (minimum, maximum)
        self._changed()

    def clear_filters(self) -> None:
        self.text, self.query, self.ranges = "", "", {}
        self._changed()

    @property
    def filtered(self) -> bool:
        return bool(self.text or self.query or self.ranges)

    # -- rows -------------------------------------------------------------------------------------
    def _query_mask(self, frame: pd.DataFrame, query: str) -> Any:
        import pandas as pd

        try:
            result = frame.eval(query, engine="python")
        except Exception as e:
            raise UserError(
                f"query {query!r} failed: {type(e).__name__}: {e}. Write a pandas condition over the "
                f"columns {self.sortable}, e.g. 'tokens > 5000 and tool_errors == 0'"
            ) from e
        if not isinstance(result, pd.Series) or len(result) != len(frame):
            raise UserError(f"query {query!r} is not a condition on the rows (e.g. 'tokens > 5000')")
        if not (pd.api.types.is_bool_dtype(result) or all(isinstance(v, bool) or _missing(v) for v in result)):
            raise UserError(f"query {query!r} gives {result.dtype} values, not True/False: write a condition")
        return result.fillna(False).astype(bool).to_numpy()

    def _mask(self) -> Any:
        import numpy as np
        import pandas as pd

        frame = self.summary
        mask = np.ones(len(frame), dtype=bool)
        if self.text:
            ids = [str(t) for t in frame["thread_id"]]
            f = self.text
            if set(f) & set("*?["):
                hit = [fnmatch.fnmatchcase(t, f) for t in ids]
            else:
                hit = [f.lower() in t.lower() for t in ids]
            mask &= np.array(hit, dtype=bool)
        for col, (lo, hi) in self.ranges.items():
            values = pd.to_numeric(frame[col], errors="coerce").astype(float).to_numpy()
            ok = ~np.isnan(values)
            if lo is not None:
                ok &= np.nan_to_num(values, nan=-np.inf) >= lo
            if hi is not None:
                ok &= np.nan_to_num(values, nan=np.inf) <= hi
            mask &= ok
        if self.query:
            mask &= self._query_mask(frame, self.query)
        return mask

    @property
    def rows(self) -> pd.DataFrame:
        """Every row matching the filters, in the sort order (all pages)."""
        if self._rows is None:
            rows = self.summary[self._mask()]
            if self.sort_by is not None:
                keys = [self.sort_by] + (["thread_id"] if self.sort_by != "thread_id" else [])
                rows = rows.sort_values(
                    keys, ascending=[self.ascending] + [True] * (len(keys) - 1), na_position="last", kind="mergesort"
                )
            self._rows = rows
        return self._rows

    @property
    def pages(self) -> int:
        return max(1, math.ceil(len(self.rows) / self.page_size))

    def set_page(self, page: int) -> None:
        """Go to page ``page`` (0-based)."""
        if not 0 <= page < self.pages:
            raise UserError(f"page {page} is outside 0..{self.pages - 1} ({len(self.rows)} rows)")
        self.page = page

    def next_page(self) -> None:
        self.page = min(self.page + 1, self.pages - 1)

    def prev_page(self) -> None:
        self.page = max(self.page - 1, 0)

    @property
    def page_rows(self) -> pd.DataFrame:
        self.page = min(self.page, self.pages - 1)  # a filter may have shortened the list
        start = self.page * self.page_size
        return self.rows.iloc[start : start + self.page_size]

    @property
    def page_ids(self) -> list[str]:
        return [str(t) for t in self.page_rows["thread_id"]]

    # -- selection and configs --------------------------------------------------------------------
    def select(self, thread_id: str) -> Thread:
        """Mark ``thread_id`` as selected and open it (``corpus[thread_id]``)."""
        if thread_id not in self._ids:
            raise UserError(f"no thread {thread_id!r} in this corpus ({len(self._ids)} threads)", thread_id=thread_id)
        if self.corpus is None:
            raise UserError("this view was built from a summary frame: pass the Corpus to open threads")
        thread = self.corpus[thread_id]
        self.selected = thread_id
        return thread

    def set_config(self, config: str) -> None:
        if config not in self.configs:
            raise UserError(f"no config {config!r} in the simulation; configs: {self.configs}")
        self.config = config

    def config_rows(self, *, page_only: bool = True) -> pd.DataFrame:
        """The chosen config's simulation rows, for the threads on the page (``page_only``) or
        for every matching thread, in the table's order."""
        import pandas as pd

        if self.sim is None or self.config is None:
            return pd.DataFrame(columns=list(SIM_COLUMNS))
        ids = self.page_ids if page_only else [str(t) for t in self.rows["thread_id"]]
        mine = self.sim[self.sim["config"] == self.config].drop_duplicates("thread_id").set_index("thread_id")
        present = [t for t in ids if t in mine.index]
        return mine.loc[present].reset_index()

    def config_summary(self) -> pd.DataFrame:
        """One row per config (:func:`tulip_nb.lab.corpus.summarize_corpus_simulation`)."""
        from tulip_nb.lab.corpus import summarize_corpus_simulation

        if self.sim is None:
            raise UserError("no simulation: pass sim= (a Corpus.simulate frame) or configs=")
        if self._sim_summary is None:  # the simulation never changes: summarised once
            self._sim_summary = summarize_corpus_simulation(self.sim)
        return self._sim_summary

    # -- rendering --------------------------------------------------------------------------------
    def head(self) -> str:
        """``rows 26-50 of 812 matching (1,000 threads) · sorted by tokens ↓ · page 2 of 33``
        (``· summary pending`` while it is read)."""
        n, total = len(self.rows), len(self.summary)
        start = self.page * self.page_size
        shown = f"rows {start + 1:,}-{min(start + self.page_size, n):,}" if n else "no rows"
        parts = [f"{shown} of {n:,} matching ({total:,} threads)" if self.filtered else f"{shown} of {total:,} threads"]
        if self.sort_by:
            parts.append(f"sorted by {self.sort_by} {'↑' if self.ascending else '↓'}")
        parts.append(f"page {self.page + 1} of {self.pages}")
        if self.pending:
            parts.append("summary pending")
        return " · ".join(parts)

    def filter_text(self) -> str:
        """What the filters are, in words (empty: none)."""
        parts = [f"thread id ~ {self.text!r}"] if self.text else []
        for col, (lo, hi) in self.ranges.items():
            low = f"{lo:g} ≤ " if lo is not None else ""
            high = f" ≤ {hi:g}" if hi is not None else ""
            parts.append(f"{low}{col}{high}")
        if self.query:
            parts.append(f"query: {self.query}")
        return "; ".join(parts)

    def _table(self, kind: str, frame: pd.DataFrame, columns: list[str], marked: str | None = None) -> str:
        """``frame[columns]`` as a compact HTML table (class ``tulip-nb-<kind>-table``); the row
        of the selected thread is marked; the column ``marked`` gets the sort arrow."""
        head = []
        for c in columns:
            arrow = (" ▲" if self.ascending else " ▼") if c == marked else ""
            # headers wrap (``over window calls`` on two lines), cells do not: the table stays narrow
            head.append(f"<th style='{_TH}'>{esc(c.replace('_', ' '))}{arrow}</th>")
        body = []
        for r in frame[columns].itertuples(index=False):
            sel = columns[0] == "thread_id" and str(r[0]) == self.selected
            tr = f" class='tulip-nb-selected' style='background:{MARK_COLORS['summary']}'" if sel else ""
            cells = []
            for col, v in zip(columns, r, strict=True):
                text, num = _cell(col, v)
                cells.append(f"<td style='text-align:{'right' if num else 'left'};{_TD}'>{text}</td>")
            body.append(f"<tr{tr}>{''.join(cells)}</tr>")
        return (
            f"<table class='tulip-nb-table tulip-nb-{kind}-table' style='{_TABLE}'>"
            f"<thead><tr>{''.join(head)}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        )

    def html(self) -> str:
        """The page as an HTML table (sorted column marked), with the count line above."""
        rows = self.page_rows
        table = self._table("corpus", rows, list(self.columns), marked=self.sort_by)
        filt = f" · filter: {self.filter_text()}" if self.filtered else ""
        empty = note("no thread matches the filters", "warn") if not len(rows) else ""
        return note(self.head() + filt) + empty + scroll_box(table, max_height=TABLE_HEIGHT)

    def distributions_png(self) -> bytes:
        """:func:`plot_corpus_distributions` of the summary, the matching rows highlighted when
        a filter is on (cached per filter)."""
        key = ("dist", self.text, self.query, tuple(sorted(self.ranges.items())))
        if key not in self._png:
            fig = plot_corpus_distributions(self.summary, highlight=self.rows if self.filtered else None)
            self._png[key] = to_png(fig)
            while len(self._png) > PNG_CACHE:  # the oldest filter's plot goes first
                del self._png[next(iter(self._png))]
        return self._png[key]

    def facts_png(self) -> bytes | None:
        """:func:`plot_facts_kept` with the chosen config highlighted (None: no simulation)."""
        if self.sim is None or self.config is None:
            return None
        key = ("facts", self.config)
        if key not in self._png:
            self._png[key] = to_png(plot_facts_kept(self.sim, self.config))
        return self._png[key]

    def sim_html(self) -> str:
        """The chosen config's line of :meth:`config_summary` and its rows for the page's threads."""
        if self.sim is None or self.config is None:
            return note("no simulation: pass configs= (and probes=) or sim= to compare compaction configs")
        s = self.config_summary()
        row = s[s["config"] == self.config]
        line = f"config {self.config}"
        if len(row):
            r = row.iloc[0]
            kept = r["kept_fraction"]
            line += (
                f": {int(r['threads']):,} threads, {int(r['compactions']):,} compactions, "
                f"p95 context {int(r['p95_context_tokens']):,} tokens, "
                f"{int(r['threads_over_window']):,} threads over the window, "
                f"facts kept {int(r['facts_kept']):,}/{int(r['facts']):,}"
                + (f" ({float(kept):.0%})" if not _missing(kept) else "")
                + (f", {int(r['errors'])} errors" if int(r["errors"]) else "")
            )
        over = not row.empty and int(row.iloc[0]["threads_over_window"]) > 0
        rows = self.config_rows()
        table = self._table("sim", rows, [c for c in SIM_COLUMNS if c in rows.columns])
        sub = note(f"{len(rows)} rows: the threads on page {self.page + 1} of the table, in its order")
        return note(line, "warn" if over else "ok") + sub + scroll_box(table, max_height=TABLE_HEIGHT)

    def fallback_html(self) -> str:
        """Everything the view shows, as one HTML fragment (a saved notebook without a kernel)."""
        parts = [self.html()]
        if not self.pending:  # a pending summary has nothing to plot yet
            parts.append(png_tag(self.distributions_png(), "corpus distributions"))
        if self.sim is not None:
            parts.append(self.sim_html())
            png = self.facts_png()
            if png is not None:
                parts.append(png_tag(png, "facts kept per config"))
        return f"<div class='tulip-nb-corpus'>{''.join(parts)}</div>"
