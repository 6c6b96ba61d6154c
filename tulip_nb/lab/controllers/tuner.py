"""Tune a conversation manager on a saved thread: settings in, simulation, plot and tables out.

:class:`TunerController` holds one set of settings (``kind`` ``"compactor"`` with
``context_length``, ``trigger_fraction``, ``head_turns``, ``tail_token_fraction``, or ``"window"``
with ``window_size``), runs :func:`tulip_nb.lab.simulate_compaction` for it, and renders the
token plot (:func:`tulip_nb.lab.plot_token_usage`, calls over the model's window in red), the
kept/dropped table and the fact-survival probes; the summary is red, not green, when any call was
sent more than the window and says how many. Results are cached per settings (a slider moved
back is instant) and the figure is drawn once and then only updated, so a change costs one
simulation plus one PNG encode::

    from tulip_nb.lab.controllers import TunerController

    t = TunerController(thread, probes=[("order id", "ord-4821")])
    t.update(context_length=32_000, trigger_fraction=0.7)
    t.summary                       # compactions, tokens saved, facts kept
    t.png                           # the plot, as PNG bytes
    t.config_line()                 # 'LLMCompactor(context_length=32000, trigger_fraction=0.7, ...)'
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tulip_nb.core.errors import UserError
from tulip_nb.core.messages import Message
from tulip_nb.core.state import AgentState
from tulip_nb.lab._common import esc
from tulip_nb.lab._window import Window
from tulip_nb.lab.controllers._html import more_note, note, png_tag, scroll_box, table
from tulip_nb.lab.plots import (
    COMPACTION_GID,
    OVER_GID,
    TRIGGER_GID,
    WINDOW_GID,
    over_window_marks,
    over_window_mask,
    plot_token_usage,
    to_png,
)
from tulip_nb.lab.simulate import Probes, normalize_probes, simulate_compaction, summarize_simulation
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.memory.managers import ConversationManager, SlidingWindowManager

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from tulip_nb.lab.thread import Thread

__all__ = ["DEFAULTS", "TunerController"]

DEFAULTS: dict[str, Any] = {
    "kind": "compactor",
    "context_length": 32_000,
    "trigger_fraction": 0.8,
    "head_turns": 2,
    "tail_token_fraction": 0.5,
    "window_size": 40,
}
"""Starting settings (the defaults of :class:`LLMCompactor` except a 32k window)."""

_COMPACTOR_KEYS = ("context_length", "trigger_fraction", "head_turns", "tail_token_fraction")
CACHE_SIZE = 64
TABLE_ROWS = 40
"""Rows of the kept/dropped table shown (the newest; a long thread compacts many times)."""
TABLE_HEIGHT = 320
"""Height bound (px) of the table's scroll box, so plot, sliders and table fit one screen."""


class TunerController:
    """Settings -> simulation -> plot and tables for one thread (see the module docstring).

    ``thread``: a :class:`~tulip_nb.lab.Thread`, an :class:`AgentState` or a list of messages;
    ``probes``: ``[(label, text), ...]`` facts to follow; ``tools``: the tool schemas the agent sent;
    ``context_window``: the model's window (tokens or a registered model name), what
    ``over_window`` is measured against (default: the compactor's ``context_length``; for the
    sliding window, the window registered for the model, if any).
    ``timings`` keeps the milliseconds of each :meth:`update` (simulate, draw, total).
    """

    def __init__(
        self,
        thread: Thread | AgentState | Sequence[Message],
        *,
        probes: Probes = (),
        tools: Sequence[Any] | None = None,
        context_window: Window = None,
        **settings: Any,
    ) -> None:
        self.thread = thread
        self.probes = normalize_probes(probes)
        self.tools = tools
        self.context_window = context_window
        self.settings: dict[str, Any] = dict(DEFAULTS)
        self._check(settings)
        self.settings.update(settings)
        self._cache: OrderedDict[tuple[Any, ...], pd.DataFrame] = OrderedDict()
        self._fig: Figure | None = None
        self._png: bytes | None = None
        self.timings: list[dict[str, float]] = []
        self.sim: pd.DataFrame | None = None
        self.update()

    def __repr__(self) -> str:
        return f"TunerController({self.config_line()})"

    # -- settings -------------------------------------------------------------------------------
    @staticmethod
    def _check(settings: dict[str, Any]) -> None:
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise UserError(f"unknown tuner settings {sorted(unknown)}; allowed: {sorted(DEFAULTS)}")
        kind = settings.get("kind", "compactor")
        if kind not in ("compactor", "window"):
            raise UserError(f"kind must be 'compactor' or 'window', got {kind!r}")

    def _key(self) -> tuple[Any, ...]:
        s = self.settings
        if s["kind"] == "window":
            return ("window", int(s["window_size"]))
        return ("compactor", *(s[k] for k in _COMPACTOR_KEYS))

    def manager(self) -> ConversationManager:
        """A new manager built from the current settings."""
        s = self.settings
        if s["kind"] == "window":
            return SlidingWindowManager(window_size=int(s["window_size"]))
        return LLMCompactor(
            context_length=int(s["context_length"]),
            trigger_fraction=float(s["trigger_fraction"]),
            head_turns=int(s["head_turns"]),
            tail_token_fraction=float(s["tail_token_fraction"]),
        )

    def config_line(self) -> str:
        """The Python line that builds the chosen manager (paste it into ``Agent(...)``)."""
        s = self.settings
        if s["kind"] == "window":
            return f"SlidingWindowManager(window_size={int(s['window_size'])})"
        return (
            f"LLMCompactor(context_length={int(s['context_length'])}, "
            f"trigger_fraction={float(s['trigger_fraction']):g}, head_turns={int(s['head_turns'])}, "
            f"tail_token_fraction={float(s['tail_token_fraction']):g})"
        )

    # -- running --------------------------------------------------------------------------------
    def update(self, **settings: Any) -> pd.DataFrame:
        """Apply ``settings``, simulate (or take the cached result) and redraw; returns the frame."""
        self._check({**self.settings, **settings})
        self.settings.update(settings)
        t0 = time.perf_counter()
        key = self._key()
        sim = self._cache.get(key)
        cached = sim is not None
        if sim is None:
            sim = simulate_compaction(
                self.thread,
                {"tuned": self.manager()},
                probes=self.probes,
                tools=self.tools,
                context_window=self.context_window,
            )
            self._cache[key] = sim
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        t1 = time.perf_counter()
        self.sim = sim
        self._png = self._draw(sim)
        t2 = time.perf_counter()
        self.timings.append(
            {"simulate_ms": (t1 - t0) * 1e3, "draw_ms": (t2 - t1) * 1e3, "total_ms": (t2 - t0) * 1e3, "cached": cached}
        )
        return sim

    def _draw(self, sim: pd.DataFrame) -> bytes:
        """Draw the token plot: the first time with :func:`plot_token_usage`, then by moving the
        lines of the same figure (much cheaper than building a new one)."""
        x = sim["call"].to_numpy()
        trig = _first(sim, "trigger_tokens")
        window = _first(sim, "context_window")
        fig = self._fig
        if fig is None:
            fig = self._fig = plot_token_usage(sim, "tuned", trigger_tokens=trig or 0, context_length=window or 0)
            fig.set_size_inches(7.5, 3.4)
            fig.set_dpi(90)
        ax = fig.axes[0]
        marks = {c.get_gid(): c for c in ax.collections}
        if COMPACTION_GID not in marks:
            marks[COMPACTION_GID] = ax.scatter(
                [], [], marker="v", color="C3", zorder=3, label="compaction", gid=COMPACTION_GID
            )
        if OVER_GID not in marks:
            marks[OVER_GID] = over_window_marks(ax, [], [])
        ax.lines[0].set_data(x, sim["full_tokens"].to_numpy())
        ax.lines[1].set_data(x, sim["context_tokens"].to_numpy())
        fired = sim[sim["compacted"].astype(bool)]
        points = np.column_stack([fired["call"].to_numpy(), fired["context_tokens"].to_numpy()])
        marks[COMPACTION_GID].set_offsets(points.reshape(-1, 2))
        over = over_window_mask(sim, window)
        n_over = int(over.sum())
        points = np.column_stack([x[over], sim["context_tokens"].to_numpy()[over]])
        marks[OVER_GID].set_offsets(points.reshape(-1, 2))
        marks[OVER_GID].set_label(f"over the window ({n_over} call{'s' if n_over != 1 else ''})" if n_over else "_over")
        for line in ax.lines[2:]:
            gid = line.get_gid()
            if gid not in (TRIGGER_GID, WINDOW_GID):
                continue
            value = trig if gid == TRIGGER_GID else window
            line.set_visible(bool(value))
            if value:
                line.set_ydata([value, value])
                line.set_label(f"{'trigger' if gid == TRIGGER_GID else 'window'} ({value:,})")
            else:
                line.set_label(f"_{gid}")
        ax.relim(visible_only=True)
        ax.autoscale_view()
        ax.legend(loc="upper left", fontsize="small")
        fig.axes[0].set_title(f"Token usage — {self.config_line()}", fontsize="small")
        return to_png(fig)

    # -- results --------------------------------------------------------------------------------
    @property
    def png(self) -> bytes:
        """The token plot of the current settings (PNG)."""
        assert self._png is not None
        return self._png

    @property
    def summary(self) -> dict[str, Any]:
        """:func:`summarize_simulation` of the current settings, as a dict."""
        assert self.sim is not None
        out: dict[str, Any] = summarize_simulation(self.sim).iloc[0].to_dict()
        return out

    def events_frame(self) -> pd.DataFrame:
        """The calls where a compaction fired, and the final call: what was kept, pruned,
        summarised and dropped (original tokens of those messages)."""
        assert self.sim is not None
        sim = self.sim
        rows = sim[sim["compacted"].astype(bool) | (sim["call"] == sim["call"].max())]
        cols = [
            "call",
            "n_messages",
            "trigger",
            "context_tokens",
            "kept_tokens",
            "pruned_tokens",
            "summarized_tokens",
            "dropped_tokens",
        ]
        return rows[cols].reset_index(drop=True)

    def probes_frame(self) -> pd.DataFrame:
        """Per probe: calls after the fact was said, and in how many of them it was still seen."""
        import pandas as pd

        assert self.sim is not None
        rows = []
        for label, text in self.probes:
            col = self.sim[f"probe: {label}"]
            said = [v for v in col if v is not None and v == v]
            rows.append(
                {
                    "probe": label,
                    "text": text,
                    "checks": len(said),
                    "seen": sum(bool(v) for v in said),
                    "seen_at_end": bool(said[-1]) if said else None,
                }
            )
        return pd.DataFrame(rows, columns=["probe", "text", "checks", "seen", "seen_at_end"])

    @property
    def window(self) -> int | None:
        """The window the calls are measured against (None: not known)."""
        assert self.sim is not None
        return _first(self.sim, "context_window")

    def summary_html(self) -> str:
        s = self.summary
        facts = "n/a" if s["facts_kept"] != s["facts_kept"] else f"{s['facts_kept']:.0%}"
        text = (
            f"{s['calls']} model calls, {s['compactions']} compactions, max {s['max_context_tokens']:,} tokens sent, "
            f"{s['saved_fraction']:.0%} tokens saved, facts kept {facts}"
        )
        over = int(s.get("over_window_calls") or 0)
        if over:
            window = self.window
            where = f"the {window:,}-token window" if window else "the window"
            return note(f"{over} of {s['calls']} calls over {where} (a model rejects those) — {text}", "error")
        if self.window is None:
            return note(text + " (model window unknown: pass context_window= to check calls against it)", "info")
        return note(text, "ok")

    def table_html(self) -> str:
        """The kept/dropped table (compaction calls and the final call): the newest
        :data:`TABLE_ROWS` rows, in a scroll box (:meth:`events_frame` has them all)."""
        full = self.events_frame()
        frame = full.iloc[-TABLE_ROWS:]
        headers = ["call", "messages", "trigger", "sent", "kept", "pruned", "summarised", "dropped"]
        rows = [
            (
                str(int(r.call)),
                str(int(r.n_messages)),
                esc(r.trigger or "—"),
                f"{int(r.context_tokens):,}",
                f"{int(r.kept_tokens):,}",
                f"{int(r.pruned_tokens):,}",
                f"{int(r.summarized_tokens):,}",
                f"{int(r.dropped_tokens):,}",
            )
            for r in frame.itertuples()
        ]
        hidden = more_note(len(full) - len(frame), "the earliest compactions; events_frame() has every row")
        return hidden + scroll_box(table(headers, rows), max_height=TABLE_HEIGHT)

    def probes_html(self) -> str:
        if not self.probes:
            return note("no probes: pass probes=[(label, text), ...] to follow facts through compaction")
        frame = self.probes_frame()
        rows = [
            (
                esc(r.probe),
                f"<code>{esc(r.text)}</code>",
                f"{r.seen}/{r.checks}",
                "✔ seen" if r.seen_at_end else ("✘ lost" if r.seen_at_end is False else "—"),
            )
            for r in frame.itertuples()
        ]
        marks = ["" if r.seen_at_end is not False else "dropped" for r in frame.itertuples()]
        return table(["fact", "text", "seen in calls", "at the end"], rows, marks=marks)

    def html(self) -> str:
        """Everything, for a saved notebook."""
        return (
            "<div class='tulip-nb-tuner'>"
            + f"<p><code>{esc(self.config_line())}</code></p>"
            + self.summary_html()
            + png_tag(self.png, "token usage")
            + self.table_html()
            + self.probes_html()
            + "</div>"
        )


def _first(frame: pd.DataFrame, col: str) -> int | None:
    if col not in frame.columns or not len(frame):
        return None
    v = frame[col].iloc[0]
    return None if v is None or v != v else int(v)
