"""CompactionTuner: sliders over a conversation manager's settings, re-simulated on every change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as W

from tulip_nb._html import esc
from tulip_nb.core import Message
from tulip_nb.core.state import AgentState
from tulip_nb.lab import Thread
from tulip_nb.lab.controllers.tuner import TunerController
from tulip_nb.lab.simulate import Probes
from tulip_nb.widgets._base import Debouncer, Panel

__all__ = ["CompactionTuner"]


def _slider(**kw: Any) -> dict[str, Any]:
    return {"continuous_update": False, "style": {"description_width": "12em"}, "layout": W.Layout(width="36em"), **kw}


class CompactionTuner(Panel):
    """Tune compaction on a saved thread (:class:`~tulip_nb.lab.controllers.TunerController`).

    Sliders: every :class:`~tulip_nb.memory.compactor.LLMCompactor` setting (``context_length``,
    ``trigger_fraction``, ``head_turns``, ``tail_token_fraction``, ``tool_output_ttl_turns``) and
    who writes the summaries (``summarizer``: the thread's summariser function, its recorded
    summaries, none, or the length model), or ``window_size`` (a
    :class:`~tulip_nb.memory.managers.SlidingWindowManager`). They start from what the thread ran
    (its saved settings and summariser; ``summarize_fn=`` gives yours). Every change re-runs the
    simulator (cached per setting) and redraws the plot, the kept/dropped table and the
    fact-survival probes; **Copy config** shows the Python code that builds the manager the
    sliders show, summariser included (by import path, or a line saying it cannot be imported).
    Calls sent more than the model's window (``context_window=``: tokens or a registered model
    name; default the compactor's ``context_length``, else the thread's saved window) are red in
    the plot, and the summary says how many::

        from tulip_nb.widgets import CompactionTuner

        CompactionTuner(thread, probes=[("order id", "ord-4821")], context_length=32_000)

    Sliders send their value on release; in a kernel, changes closer than ``debounce`` seconds
    coalesce into one redraw.
    """

    def __init__(
        self,
        thread: Thread | AgentState | Sequence[Message],
        *,
        probes: Probes = (),
        tools: Sequence[Any] | None = None,
        context_window: int | str | None = None,
        debounce: float = 0.12,
        max_context_length: int = 256_000,
        summarize_fn: Any = None,
        **settings: Any,
    ) -> None:
        self.controller = TunerController(
            thread, probes=probes, tools=tools, context_window=context_window, summarize_fn=summarize_fn, **settings
        )
        self._busy = False
        s = self.controller.settings
        self.kind = W.ToggleButtons(
            options=[("LLMCompactor", "compactor"), ("sliding window", "window")], value=s["kind"]
        )
        self.context_length = W.IntSlider(
            value=s["context_length"], min=1000, max=max(max_context_length, s["context_length"]), step=1000,
            description="context_length", **_slider(),
        )  # fmt: skip
        self.trigger_fraction = W.FloatSlider(
            value=s["trigger_fraction"], min=0.3, max=1.0, step=0.05, description="trigger_fraction", **_slider()
        )
        self.head_turns = W.IntSlider(value=s["head_turns"], min=0, max=8, description="head_turns", **_slider())
        self.tail_token_fraction = W.FloatSlider(
            value=s["tail_token_fraction"],
            min=0.05,
            max=0.95,
            step=0.05,
            description="tail_token_fraction",
            **_slider(),
        )
        self.tool_output_ttl_turns = W.IntSlider(
            value=s["tool_output_ttl_turns"], min=0, max=max(50, s["tool_output_ttl_turns"]),
            description="tool_output_ttl_turns", **_slider(),
        )  # fmt: skip
        self.summarizer = W.Dropdown(
            options=self.controller.summarizer_options(), value=s["summarizer"], description="summarizer",
            style={"description_width": "12em"}, layout=W.Layout(width="36em"),
        )  # fmt: skip
        self.window_size = W.IntSlider(value=s["window_size"], min=2, max=400, description="window_size", **_slider())
        self.copy_button = W.Button(description="Copy config", icon="copy")
        self.config = W.HTML()
        self.timing = W.Label()
        self.summary = W.HTML()
        self.image = W.Image(format="png", layout=W.Layout(max_width="700px"))
        self.table = W.HTML()
        self.probes = W.HTML()
        self.status = W.HTML()
        self._sliders = {
            "context_length": self.context_length,
            "trigger_fraction": self.trigger_fraction,
            "head_turns": self.head_turns,
            "tail_token_fraction": self.tail_token_fraction,
            "tool_output_ttl_turns": self.tool_output_ttl_turns,
            "summarizer": self.summarizer,
            "window_size": self.window_size,
        }
        super().__init__(
            [
                self.kind,
                W.HBox(
                    [
                        # the sliders keep their width (their labels must not be clipped); the
                        # config text beside them wraps instead
                        W.VBox(list(self._sliders.values()), layout=W.Layout(flex="0 0 auto")),
                        W.VBox(
                            [self.copy_button, self.config, self.timing],
                            layout=W.Layout(flex="1 1 auto", min_width="0"),
                        ),
                    ]
                ),
                self.status,
                self.summary,
                self.image,
                W.HBox([self.table, self.probes]),
            ]
        )
        self.add_class("tulip-nb-tuner")
        self.debouncer = Debouncer(self._guard(self.status, self._apply), debounce)
        # enable the chosen kind's sliders at once, not after the debounce: a disabled slider's
        # readout drops what is typed into it (window_size typed right after the switch was lost)
        self.kind.observe(self._guard(self.status, lambda _: self._sync_enabled()), names="value")
        for w in [self.kind, *self._sliders.values()]:
            w.observe(self.debouncer, names="value")
        self.copy_button.on_click(self._guard(self.status, lambda _: self.copy_config()))
        self._sync_enabled()
        self._show()

    def __repr__(self) -> str:
        return f"CompactionTuner({self.controller.config_line()})"

    def _sync_enabled(self) -> None:
        window = self.kind.value == "window"
        for name, w in self._sliders.items():
            w.disabled = (name == "window_size") != window
        # a tail as large as the trigger re-compacts on every call: keep it below
        self.tail_token_fraction.max = round(max(0.1, self.trigger_fraction.value - 0.05), 2)

    def _apply(self, *_: Any) -> None:
        if self._busy:  # a clamp below changed a slider: the values are read after it anyway
            return
        self._busy = True
        try:
            self._sync_enabled()
            values = {k: w.value for k, w in self._sliders.items()}
            self.controller.update(kind=self.kind.value, **values)
        finally:
            self._busy = False
        self.status.value = ""
        self._show()

    def _show(self) -> None:
        c = self.controller
        t = c.timings[-1]
        self.timing.value = f"redrawn in {t['total_ms']:.0f} ms (simulation {t['simulate_ms']:.0f} ms" + (
            ", cached)" if t["cached"] else ")"
        )
        self.summary.value = c.summary_html()
        self.image.value = c.png
        self.table.value = c.table_html()
        self.probes.value = c.probes_html()
        if self.config.value:  # once shown, the config line follows the sliders (never a stale one)
            self.copy_config()

    def copy_config(self) -> str:
        """Show (and return) the Python code building the chosen manager
        (:meth:`~tulip_nb.lab.controllers.TunerController.config_code`)."""
        code = self.controller.config_code()
        self.config.value = f"<pre class='tulip-nb-config'>{esc(code)}</pre>"
        return code

    def show_thread(self, thread: Thread) -> None:
        """Tune another thread with the same settings and probes (a :class:`ThreadBrowser` calls
        this); its summariser is that thread's own (or the ``summarize_fn=`` you gave)."""
        c = self.controller
        settings = {k: v for k, v in c.settings.items() if k != "summarizer"}
        self.controller = TunerController(
            thread,
            probes=c.probes,
            tools=c.tools,
            context_window=c.context_window,
            summarize_fn=c.user_summarize_fn,
            **settings,
        )
        self._busy = True  # the dropdown follows the new thread's choices without a re-simulation
        try:
            self.summarizer.options = self.controller.summarizer_options()
            self.summarizer.value = self.controller.settings["summarizer"]
        finally:
            self._busy = False
        self._show()

    def fallback_html(self) -> str:
        return self.controller.html()
