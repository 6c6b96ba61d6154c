"""CorpusView: a corpus summary as a sortable, filterable, paged table, its plots, its threads.

A thin view over :class:`~tulip_nb.lab.controllers.CorpusController`: every control calls one
controller method and puts the HTML/PNG it renders into an ``HTML``/``Image`` value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from tulip_nb._html import esc
from tulip_nb.lab.controllers.corpus import PAGE_SIZE, CorpusController
from tulip_nb.widgets._base import Debouncer, Panel, error_html
from tulip_nb.widgets._panels import ReplayPlayer

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.lab import Thread
    from tulip_nb.lab.corpus import Corpus

__all__ = ["CorpusView"]

TABS = ("distributions", "configs", "replay")


class CorpusView(Panel):
    """Browse a corpus (:func:`tulip_nb.lab.open_corpus`): its summary as a table of
    ``page_size`` rows per page, sorted by any column (**sort by** + the direction button), filtered
    by thread id (a glob or a substring) and by a pandas query (``tokens > 5000 and
    tool_errors == 0``; a bad query is shown in red, the table stays as it was), with the count
    shown/total. Below, three tabs: the distributions of the corpus (the matching threads over
    all), the configs of a simulation (a **config** picker: that config's totals, its rows for
    the threads on the page, facts kept per config), and a :class:`ReplayPlayer` of the thread
    chosen in the **open** list beside the table, at its last model call::

        corpus = open_corpus("file:./corpus")
        CorpusView(corpus, configs={"2k": LLMCompactor(context_length=2_000)}, probes=corpus_facts)
        CorpusView(corpus, sim=sim)      # a simulation already run
        CorpusView(corpus, summary=s, sim=sim)   # both computed earlier (or loaded from a file)

    **It never blocks the kernel.** Without ``summary=``, the view opens at once with the thread
    ids (every other cell "—", pending) and reads the summary in a background thread, with a
    progress bar; sorting, filtering, paging and replaying a thread all work meanwhile, and the
    table fills in when the summary is read (then ``configs=`` are simulated the same way).
    :meth:`wait` blocks until that is done (scripts, tests); ``background=False`` reads it first.
    ``corpus`` may be a summary frame alone (no replay then).
    """

    def __init__(
        self,
        corpus: Corpus | pd.DataFrame,
        configs: Any = None,
        probes: Any = None,
        sim: pd.DataFrame | None = None,
        *,
        summary: pd.DataFrame | None = None,
        page_size: int = PAGE_SIZE,
        debounce: float = 0.25,
        background: bool = True,
    ) -> None:
        self._lock = threading.RLock()
        self.done = threading.Event()
        """Set when the background work (summary, then ``configs=``) is over, or was never needed."""
        self.error: BaseException | None = None
        """Why the background work failed (None: it did not)."""
        self.controller = CorpusController(
            corpus, summary=summary, defer=background, sim=sim, configs=configs, probes=probes, page_size=page_size
        )
        c = self.controller
        self.progress = W.IntProgress(value=0, min=0, max=max(1, len(c.summary)), description="summary")
        self.progress_label = W.Label()
        self.progress_box = W.HBox([self.progress, self.progress_label])
        self.progress_box.add_class("tulip-nb-progress")
        self.progress_box.layout.display = None if c.pending else "none"
        self.player: ReplayPlayer | None = None
        self._quiet = False
        self.text = W.Text(placeholder="case-00* or a substring", description="thread id")
        self.query = W.Text(
            placeholder="pandas query, e.g. tokens > 5000 and tool_errors == 0 (Enter)",
            description="query",
            continuous_update=False,
            layout=W.Layout(width="36em"),
        )
        self.clear_button = W.Button(description="Clear filters", icon="times")
        self.sort_by = W.Dropdown(options=[("(listing order)", ""), *[(x, x) for x in c.sortable]], value="",
                                  description="sort by")  # fmt: skip
        self.direction = W.Button(description="▼ descending", disabled=True, layout=W.Layout(width="10em"))
        self.prev_button = W.Button(description="◀ prev", layout=W.Layout(width="6em"))
        self.next_button = W.Button(description="next ▶", layout=W.Layout(width="6em"))
        self.page_label = W.Label()
        self.thread_list = W.Select(
            options=[], rows=min(page_size, PAGE_SIZE), description="", layout=W.Layout(width="11em")
        )
        self.thread_list.disabled = c.corpus is None
        self.status = W.HTML()
        self.table = W.HTML(layout=W.Layout(flex="1 1 auto", min_width="0"))
        self.distributions = W.Image(format="png", layout=W.Layout(max_width="1100px"))
        self.config = W.Dropdown(options=c.configs, value=c.config, description="config", disabled=not c.configs)
        self.sim = W.HTML()
        self.facts = W.Image(format="png", layout=W.Layout(max_width="1100px"))
        self.replay_box = W.VBox([W.HTML(self._no_thread_note())])
        self.tabs = W.Tab(children=[self.distributions, W.VBox([self.config, self.sim, self.facts]), self.replay_box])
        self.tabs.titles = TABS
        super().__init__(
            [
                self.progress_box,
                W.HBox([self.text, self.query, self.clear_button]),
                W.HBox([self.sort_by, self.direction, self.prev_button, self.page_label, self.next_button]),
                self.status,
                W.HBox(
                    [W.VBox([W.HTML("<b>open ▸</b>"), self.thread_list], layout=W.Layout(flex="0 0 auto")), self.table]
                ),
                self.tabs,
            ]
        )
        self.add_class("tulip-nb-corpus")
        self.debouncer = Debouncer(self._guard(self.status, self._filter_text), debounce)
        self.text.observe(self.debouncer, names="value")
        self.query.observe(self._guard(self.status, self._query), names="value")
        self.clear_button.on_click(self._guard(self.status, lambda _: self.clear_filters()))
        self.sort_by.observe(self._guard(self.status, self._sort), names="value")
        self.direction.on_click(self._guard(self.status, lambda _: self.flip()))
        self.prev_button.on_click(self._guard(self.status, lambda _: self._page(-1)))
        self.next_button.on_click(self._guard(self.status, lambda _: self._page(1)))
        self.thread_list.observe(self._guard(self.status, self._opened), names="value")
        self.config.observe(self._guard(self.status, self._config), names="value")
        self._show(plots=True)
        self._show_sim()
        pending_sim = configs is not None and sim is None and c.corpus is not None and c.pending
        if c.pending:
            self._start(configs if pending_sim else None, probes)
        else:
            self.done.set()

    # -- background work ----------------------------------------------------------------------------
    def _start(self, configs: Any, probes: Any) -> None:
        self.progress_label.value = f"reading the summary of {len(self.controller.summary):,} threads…"
        worker = threading.Thread(
            target=self._read, args=(configs, probes), name="tulip-nb-corpus-summary", daemon=True
        )
        worker.start()

    def _progressed(self, what: str) -> Callable[[int, int], None]:
        def step(done: int, total: int) -> None:
            self.progress.max = max(1, total)
            self.progress.value = done
            self.progress_label.value = f"{what}: {done:,} of {total:,} threads"

        return step

    def _read(self, configs: Any, probes: Any) -> None:
        """The background thread: the summary, then the simulation of ``configs`` (if any)."""
        corpus = self.controller.corpus
        try:
            assert corpus is not None
            frame = corpus.summary(progress=self._progressed("summary"))
            with self._lock:
                self.controller.set_summary(frame)
                self._show(plots=True)
            if configs is not None:
                self.progress.description = "simulate"
                sim = corpus.simulate(configs, probes, progress=self._progressed("simulation"))
                with self._lock:
                    self.controller.set_sim(sim)
                    self.config.options = self.controller.configs
                    self.config.value = self.controller.config
                    self.config.disabled = not self.controller.configs
                    self._show_sim()
            self.progress_box.layout.display = "none"
        except BaseException as e:  # shown in the view: a background failure must not vanish
            self.error = e
            self.progress_label.value = f"failed: {type(e).__name__}: {e}"
            self.status.value = error_html(e)
        finally:
            self.done.set()

    def wait(self, timeout: float | None = None) -> CorpusView:
        """Block until the background summary (and simulation) is done; raise what it raised."""
        if not self.done.wait(timeout):
            raise TimeoutError(f"CorpusView: the summary was not read within {timeout} s")
        if self.error is not None:
            raise self.error
        return self

    def _guard(self, status: W.HTML, fn: Callable[..., Any]) -> Callable[..., None]:
        """A control's callback, one at a time with the background thread's updates."""

        def locked(*args: Any) -> None:
            with self._lock:
                fn(*args)

        return super()._guard(status, locked)

    def __repr__(self) -> str:
        c = self.controller
        return f"CorpusView({len(c.rows)}/{len(c.summary)} threads, page {c.page + 1}/{c.pages})"

    def _no_thread_note(self) -> str:
        if self.controller.corpus is None:
            return "<p class='tulip-nb-note'>built from a summary frame: pass the Corpus to replay threads</p>"
        return "<p class='tulip-nb-note'>choose a thread in the <b>open</b> list beside the table to replay it</p>"

    # -- callbacks: one controller call each, then a redraw ---------------------------------------
    def _filter_text(self) -> None:
        self.controller.set_text(self.text.value)
        self._show(plots=True)

    def _query(self, change: dict[str, Any]) -> None:
        self.controller.set_query(change["new"])
        self._show(plots=True)

    def clear_filters(self) -> None:
        self.controller.clear_filters()
        self.text.value = ""  # observers see the cleared controller: no double work
        self.query.value = ""
        self.debouncer.flush()
        self._show(plots=True)

    def _sort(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        if change["new"]:
            self.controller.sort(change["new"])
        else:
            self.controller.clear_sort()
        self._show()

    def sort(self, column: str, ascending: bool | None = None) -> None:
        """Sort by ``column`` as the controls do (:meth:`CorpusController.sort`)."""
        self.controller.sort(column, ascending)
        self._quiet = True
        try:
            self.sort_by.value = column
        finally:
            self._quiet = False
        self._show()

    def flip(self) -> None:
        """Reverse the sort direction."""
        c = self.controller
        if c.sort_by is not None:
            c.sort(c.sort_by, not c.ascending)
            self._show()

    def _page(self, delta: int) -> None:
        c = self.controller
        c.next_page() if delta > 0 else c.prev_page()
        self._show()

    def _opened(self, change: dict[str, Any]) -> None:
        if change["new"] and not self._quiet:
            self.open_thread(change["new"])

    def open_thread(self, thread_id: str) -> Thread:
        """Open ``thread_id`` in the replay tab at its last model call (and mark its row)."""
        thread = self.controller.select(thread_id)
        if self.player is None:
            self.player = ReplayPlayer(thread)
            self.replay_box.children = [self.player]
        else:
            self.player.show_thread(thread)
        self.player.slider.value = self.player.slider.max  # the last call: what compaction left
        self.tabs.selected_index = TABS.index("replay")
        self.status.value = f"<p class='tulip-nb-note'>opened <code>{esc(thread_id)}</code> in the replay tab</p>"
        self.table.value = self.controller.html()
        self._show_sim()
        return thread

    def _config(self, change: dict[str, Any]) -> None:
        if change["new"] is not None:
            self.controller.set_config(change["new"])
            self._show_sim()
            self.tabs.selected_index = TABS.index("configs")

    # -- drawing ----------------------------------------------------------------------------------
    def _show(self, *, plots: bool = False) -> None:
        with self._lock:
            self._draw(plots=plots)

    def _draw(self, *, plots: bool) -> None:
        c = self.controller
        self.status.value = ""  # the last action worked: an earlier error or note is stale
        self.table.value = c.html()
        self.page_label.value = f"page {c.page + 1} of {c.pages}"
        self.prev_button.disabled = c.page == 0
        self.next_button.disabled = c.page >= c.pages - 1
        self.direction.disabled = c.sort_by is None
        self.direction.description = "▲ ascending" if c.ascending else "▼ descending"
        ids = c.page_ids
        current = c.selected if c.selected in ids else None
        self._quiet = True  # refilling the list is not a choice of the user
        try:
            self.thread_list.options = ids
            self.thread_list.value = current
            self.thread_list.rows = max(2, len(ids))
        finally:
            self._quiet = False
        self.distributions.layout.display = "none" if c.pending else None  # nothing to plot yet
        if plots and not c.pending:
            self.distributions.value = c.distributions_png()
        self._show_sim()

    def _show_sim(self) -> None:
        c = self.controller
        self.sim.value = c.sim_html()
        png = c.facts_png()
        if png is not None:
            self.facts.value = png

    def fallback_html(self) -> str:
        html = self.controller.fallback_html()
        if self.player is not None:
            html += self.player.fallback_html()
        return html
