"""ThreadBrowser, ReplayPlayer, ThreadDiffView and ExportPanel: thin views over the lab controllers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as W

from tulip_nb._html import esc
from tulip_nb.agent import Agent
from tulip_nb.lab import Thread
from tulip_nb.lab.controllers import BrowserController, DiffController, ExportController, PlayerController
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.widgets._base import Panel

__all__ = ["ExportPanel", "ReplayPlayer", "ThreadBrowser", "ThreadDiffView"]


class ThreadBrowser(Panel):
    """The threads of a checkpointer: id, checkpoints, messages, tokens, last update, with a
    filter (a glob like ``ticket-*`` or a substring). Choosing a thread in the list opens it in
    every widget of ``open_in`` (anything with ``show_thread(thread)``: ReplayPlayer,
    TokenBudget, CompactionTuner, ThreadDiffView) and calls the ``on_open`` callbacks::

        player = ReplayPlayer(thread)
        ThreadBrowser(checkpointer, open_in=[player])
    """

    def __init__(self, checkpointer: BaseCheckpointer | str, *, open_in: Sequence[Any] = ()) -> None:
        self.controller = BrowserController(checkpointer)
        self.open_in = list(open_in)
        self.callbacks: list[Callable[[Thread], None]] = []
        self.thread: Thread | None = None
        self.filter = W.Text(placeholder="filter: ticket-* or a substring", description="filter")
        self.select = W.Select(options=[], rows=6, description="thread", layout=W.Layout(width="40em"))
        self.refresh_button = W.Button(description="Refresh", icon="refresh")
        self.table = W.HTML()
        self.status = W.HTML()
        super().__init__([W.HBox([self.filter, self.refresh_button]), self.select, self.status, self.table])
        self.add_class("tulip-nb-browser")
        self.filter.observe(self._guard(self.status, self._filtered), names="value")
        self.select.observe(self._guard(self.status, self._selected), names="value")
        self.refresh_button.on_click(self._guard(self.status, lambda _: self.refresh()))
        self._show()

    def __repr__(self) -> str:
        return f"ThreadBrowser(threads={len(self.controller.frame)})"

    def on_open(self, fn: Callable[[Thread], None]) -> None:
        self.callbacks.append(fn)

    def refresh(self) -> None:
        self.controller.refresh()
        self._show()

    def _filtered(self, change: dict[str, Any]) -> None:
        self.controller.set_filter(change["new"])
        self._show()

    def _selected(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.open_thread(change["new"])

    def open_thread(self, thread_id: str) -> Thread:
        """Open ``thread_id`` in the linked widgets."""
        self.thread = self.controller.open(thread_id)
        for w in self.open_in:
            w.show_thread(self.thread)
        for fn in self.callbacks:
            fn(self.thread)
        self.status.value = f"<p>opened <code>{esc(thread_id)}</code> in {len(self.open_in)} widgets</p>"
        self.table.value = self.controller.html(selected=thread_id)
        return self.thread

    def _show(self) -> None:
        ids = self.controller.ids
        current = self.select.value
        self.select.options = ids
        self.select.value = current if current in ids else None
        self.table.value = self.controller.html(selected=self.select.value)

    def fallback_html(self) -> str:
        return self.controller.html(selected=self.thread.thread_id if self.thread else None)


class ReplayPlayer(Panel):
    """A slider over a thread's model calls (or checkpoints): the full history aligned by message
    with what the model saw — each message in one row, marked shown / stubbed, each run of
    summarised or dropped messages collapsed into one row (count and tokens), the summary where
    the model read it; newest first, in a scroll box, so a 1,000-message thread stays one screen.
    A turn that ended without an answer is told at the call it ended after (``turn 12 ended:
    error — ModelError: provider 500``). With ``agent``, the thread is replayed up to the slider
    (no model calls; failed turns replayed as recorded) and where the replay diverged is shown::

        ReplayPlayer(thread)                 # recorded views only
        ReplayPlayer(thread, agent=agent)    # also replay with the agent's tools
    """

    def __init__(self, thread: Thread, agent: Agent | None = None) -> None:
        self.agent = agent
        self.controller = PlayerController(thread, agent=agent)
        self.mode = W.ToggleButtons(options=[("model calls", "calls"), ("checkpoints", "checkpoints")], value="calls")
        self.slider = W.IntSlider(
            min=0, max=0, description="call", continuous_update=False, layout=W.Layout(width="40em")
        )
        self.prev_button = W.Button(description="◀", layout=W.Layout(width="3em"))
        self.next_button = W.Button(description="▶", layout=W.Layout(width="3em"))
        self.view = W.HTML()
        self.status = W.HTML()
        super().__init__([self.mode, W.HBox([self.prev_button, self.slider, self.next_button]), self.status, self.view])
        self.add_class("tulip-nb-player")
        self.mode.observe(self._guard(self.status, self._mode), names="value")
        self.slider.observe(self._guard(self.status, self._seek), names="value")
        self.prev_button.on_click(self._guard(self.status, lambda _: self._move(-1)))
        self.next_button.on_click(self._guard(self.status, lambda _: self._move(1)))
        self._reset_slider()

    def __repr__(self) -> str:
        c = self.controller
        return f"ReplayPlayer({c.thread.thread_id!r}, {c.mode}={c.position})"

    def show_thread(self, thread: Thread) -> None:
        self.controller = PlayerController(thread, agent=self.agent)
        self.controller.set_mode(self.mode.value)
        self._reset_slider()

    def _reset_slider(self) -> None:
        c = self.controller
        self.slider.description = "call" if c.mode == "calls" else "checkpoint"
        self.slider.max = max(0, c.size - 1)
        self.slider.value = 0
        self._render()

    def _mode(self, change: dict[str, Any]) -> None:
        self.controller.set_mode(change["new"])
        self._reset_slider()

    def _seek(self, change: dict[str, Any]) -> None:
        self.controller.seek(change["new"])
        self._render()

    def _move(self, delta: int) -> None:
        self.slider.value = min(self.slider.max, max(0, self.slider.value + delta))

    def _render(self) -> None:
        self.status.value = ""
        self.view.value = self.controller.html()

    def fallback_html(self) -> str:
        return self.controller.html()


class ThreadDiffView(Panel):
    """Pick two threads (default: ``a`` and its first fork) and see them side by side from the
    point where they part (:func:`tulip_nb.lab.diff_threads`): changed rows highlighted, with
    ``context`` same messages around them and the rest collapsed::

        ThreadDiffView(original, branch)
    """

    def __init__(self, a: Thread, b: Thread | None = None, *, context: int = 3) -> None:
        self.controller = DiffController(a, b, context=context)
        c = self.controller
        assert c.b is not None
        self.a = W.Dropdown(options=c.choices, value=c.a.thread_id, description="a")
        self.b = W.Dropdown(options=c.choices, value=c.b.thread_id, description="b")
        self.view = W.HTML()
        self.status = W.HTML()
        super().__init__([W.HBox([self.a, self.b]), self.status, self.view])
        self.add_class("tulip-nb-diff")
        self.a.observe(self._guard(self.status, lambda ch: self._pick(a=ch["new"])), names="value")
        self.b.observe(self._guard(self.status, lambda ch: self._pick(b=ch["new"])), names="value")
        self._render()

    def __repr__(self) -> str:
        c = self.controller
        return f"ThreadDiffView({c.a.thread_id!r}, {c.b.thread_id if c.b else None!r})"

    def _pick(self, a: str | None = None, b: str | None = None) -> None:
        self.controller.pick(a=a, b=b)
        self._render()

    def show_thread(self, thread: Thread) -> None:
        """Compare ``thread`` (as ``a``) with the current ``b``."""
        if thread.thread_id not in self.a.options:
            self.controller.choices = sorted({*self.controller.choices, thread.thread_id})
            self.a.options = self.b.options = self.controller.choices
        self.a.value = thread.thread_id

    def _render(self) -> None:
        self.status.value = ""
        self.view.value = self.controller.html()

    def fallback_html(self) -> str:
        return self.controller.html()


class ExportPanel(Panel):
    """Export threads to another store: choose threads and a destination URL (``file:./out``,
    ``s3://bucket/prefix?endpoint_url=...``, ``postgresql://...``), **Dry run** to see the plan,
    **Export** with a progress bar, then the verification report
    (:func:`tulip_nb.lab.export_threads`)::

        ExportPanel(checkpointer, dest="file:./exported")
    """

    def __init__(self, source: BaseCheckpointer | str, *, dest: str = "") -> None:
        self.controller = ExportController(source)
        c = self.controller
        self.threads = W.SelectMultiple(options=c.choices, value=tuple(c.selected), rows=6, description="threads")
        self.dest = W.Text(value=dest, placeholder="file:./exported or s3://bucket/prefix", description="to")
        self.verify = W.Checkbox(value=True, description="verify")
        self.on_conflict = W.Dropdown(options=["error", "skip", "overwrite"], value="error", description="on conflict")
        self.dry_button = W.Button(description="Dry run", icon="search")
        self.export_button = W.Button(description="Export", button_style="primary", icon="upload")
        self.progress = W.IntProgress(min=0, max=max(1, len(c.selected)), value=0, description="progress")
        self.progress_label = W.Label()
        self.report = W.HTML()
        super().__init__(
            [
                W.HBox([self.threads, W.VBox([self.dest, self.verify, self.on_conflict])]),
                W.HBox([self.dry_button, self.export_button]),
                W.HBox([self.progress, self.progress_label]),
                self.report,
            ]
        )
        self.add_class("tulip-nb-export")
        self.threads.observe(self._guard(self.report, self._chosen), names="value")
        self.dry_button.on_click(self._guard(self.report, lambda _: self.run(dry_run=True)))
        self.export_button.on_click(self._guard(self.report, lambda _: self.run(dry_run=False)))
        self.report.value = c.html()

    def __repr__(self) -> str:
        return f"ExportPanel(threads={len(self.controller.selected)}/{len(self.controller.choices)})"

    def _chosen(self, change: dict[str, Any]) -> None:
        self.controller.selected = list(change["new"])
        self.report.value = self.controller.html()

    def _tick(self, done: int, total: int, thread_id: str) -> None:
        self.progress.max = total
        self.progress.value = done
        self.progress_label.value = f"{done}/{total}: {thread_id}"

    def run(self, *, dry_run: bool) -> None:
        """Dry run or export the chosen threads to the destination; the report shows below."""
        self.progress.value = 0
        self.controller.export(
            self.dest.value,
            dry_run=dry_run,
            verify=self.verify.value,
            on_conflict=self.on_conflict.value,
            progress=self._tick,
        )
        self.report.value = self.controller.html()

    def fallback_html(self) -> str:
        return self.controller.html()
