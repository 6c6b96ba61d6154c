"""Tune a conversation manager on a saved thread: settings in, simulation, plot and tables out.

:class:`TunerController` holds one set of settings (``kind`` ``"compactor"`` with every
:class:`~tulip_nb.memory.compactor.LLMCompactor` setting — ``context_length``,
``trigger_fraction``, ``head_turns``, ``tail_token_fraction``, ``tool_output_ttl_turns`` — and
``summarizer``, who writes the summaries; or ``"window"`` with ``window_size``). It **starts from
what the thread ran**: the settings its manager saved, and its summariser (the function you pass
as ``summarize_fn=``, else the one re-imported from the thread's record, else the summaries the
thread recorded, served by position; :mod:`tulip_nb.lab._recorded`). It runs
:func:`tulip_nb.lab.simulate_compaction` for them and renders the
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
    t.config_code()                 # the same with the summariser's import line: paste it back

The code :meth:`config_code` gives builds a manager equal to :meth:`manager` (what was
simulated), summariser included — named by its import path; when it cannot be imported (a lambda,
a closure, the length model, summaries only recorded) the line names what to pass instead and
fails loudly (a ``NameError``) rather than building a different agent.

Summariser choices (``summarizer=``): ``"callable"`` (a function runs: yours, or the thread's
re-imported), ``"recorded"`` (the thread's recorded summaries), ``"length"`` (the length model, a
stand-in that keeps no facts), ``"none"`` (the middle is dropped).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.core.state import AgentState
from tulip_nb.lab._common import esc
from tulip_nb.lab._plots import (
    COMPACTION_GID,
    OVER_GID,
    TRIGGER_GID,
    WINDOW_GID,
    fit_token_axis,
    over_window_marks,
    over_window_mask,
    plot_token_usage,
    to_png,
)
from tulip_nb.lab._recorded import (
    RecordedSummaries,
    import_path,
    import_summarizer,
    recorded_config,
    recorded_summarizer_ref,
    summarizer_note,
)
from tulip_nb.lab._window import Window
from tulip_nb.lab.controllers._html import more_note, note, png_tag, scroll_box, table
from tulip_nb.lab.simulate import Probes, _state_of, normalize_probes, simulate_compaction, summarize_simulation
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.memory.managers import ConversationManager, SlidingWindowManager

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from tulip_nb.lab._thread import Thread

__all__ = ["DEFAULTS"]

DEFAULTS: dict[str, Any] = {
    "kind": "compactor",
    "context_length": 32_000,
    "trigger_fraction": 0.8,
    "head_turns": 2,
    "tail_token_fraction": 0.5,
    "tool_output_ttl_turns": 10,
    "summarizer": None,
    "window_size": 40,
}
"""Starting settings when the thread saved none (the defaults of :class:`LLMCompactor` except a
32k window); ``summarizer`` None: the thread's (see the module docstring)."""

SUMMARIZER_CHOICES = ("callable", "recorded", "length", "none")
"""What writes the summaries (module docstring)."""
_SUMMARIZER_LABELS = {
    "callable": "the summariser function",
    "recorded": "the thread's recorded summaries",
    "length": "length model (keeps no facts)",
    "none": "none: the middle is dropped",
}
_COMPACTOR_KEYS = (
    "context_length",
    "trigger_fraction",
    "head_turns",
    "tail_token_fraction",
    "tool_output_ttl_turns",
    "summarizer",
)
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
    ``summarize_fn``: your summariser function (default: the thread's, re-imported when its
    saved import path allows). ``**settings`` override the starting ones (the thread's saved
    settings, else :data:`DEFAULTS`).
    ``timings`` keeps the milliseconds of each :meth:`update` (simulate, draw, total).
    """

    def __init__(
        self,
        thread: Thread | AgentState | Sequence[Message],
        *,
        probes: Probes = (),
        tools: Sequence[Any] | None = None,
        context_window: Window = None,
        summarize_fn: Any = None,
        **settings: Any,
    ) -> None:
        self.thread = thread
        self.probes = normalize_probes(probes)
        self.tools = tools
        self.context_window = context_window
        state = _state_of(thread)
        self.recorded_summarizer = recorded_summarizer_ref(state)
        """The import path of the thread's summariser, as its manager saved it (None: not saved)."""
        if summarize_fn is not None and not callable(summarize_fn):
            raise UserError(f"summarize_fn must be a function (messages, previous) -> str, got {summarize_fn!r}")
        self.user_summarize_fn = summarize_fn
        """The summariser you passed (None: the thread's own is used)."""
        self.summarize_fn = summarize_fn if summarize_fn is not None else import_summarizer(self.recorded_summarizer)
        """The summariser function ``"callable"`` runs (yours, or the thread's re-imported; None: none)."""
        self._has_recorded = state is not None and (
            len(RecordedSummaries(state, _no_summary)) > 0 or self.recorded_summarizer is not None
        )
        self.settings: dict[str, Any] = {**DEFAULTS, **self._recorded_settings(state)}
        self._check(settings)
        self.settings.update(settings)
        if self.settings["summarizer"] is None:
            self.settings["summarizer"] = self.summarizer_options()[0][1]
        self._check(self.settings)
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
    def _recorded_settings(state: AgentState | None) -> dict[str, Any]:
        """The starting settings the thread's manager saved (an LLMCompactor's), else none."""
        config = recorded_config(state)
        if config is None or config.get("kind") != "compactor":
            return {}
        return {k: config[k] for k in _COMPACTOR_KEYS if k in config} | {"kind": "compactor"}

    def summarizer_options(self) -> list[tuple[str, str]]:
        """``(label, choice)`` of the summarisers this thread can be simulated with, the thread's
        own first (a function when one is known, else its recorded summaries)."""
        out = []
        if self.summarize_fn is not None:
            name = getattr(self.summarize_fn, "__qualname__", None) or repr(self.summarize_fn)
            out.append((f"{name} (function)", "callable"))
        if self._has_recorded:
            out.append((_SUMMARIZER_LABELS["recorded"], "recorded"))
        out += [(_SUMMARIZER_LABELS[c], c) for c in ("none", "length")]
        return out

    def _check(self, settings: dict[str, Any]) -> None:
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise UserError(f"unknown tuner settings {sorted(unknown)}; allowed: {sorted(DEFAULTS)}")
        kind = settings.get("kind", "compactor")
        if kind not in ("compactor", "window"):
            raise UserError(f"kind must be 'compactor' or 'window', got {kind!r}")
        choice = settings.get("summarizer")
        allowed = [c for _, c in self.summarizer_options()]
        if choice is not None and choice not in allowed:
            why = {
                "callable": "no summariser function is known: pass summarize_fn=",
                "recorded": "the thread recorded no summary",
            }.get(str(choice), f"choose one of {list(SUMMARIZER_CHOICES)}")
            raise UserError(f"summarizer={choice!r} is not available for this thread ({why}); available: {allowed}")

    def _key(self) -> tuple[Any, ...]:
        s = self.settings
        if s["kind"] == "window":
            return ("window", int(s["window_size"]))
        return ("compactor", *(s[k] for k in _COMPACTOR_KEYS))

    def manager(self) -> ConversationManager:
        """A new manager built from the current settings, with the summariser that is simulated
        when it is a function (the recorded summaries and the length model are simulation
        stand-ins: then ``summarize_fn`` is None here and :meth:`config_code` says so)."""
        s = self.settings
        if s["kind"] == "window":
            return SlidingWindowManager(window_size=int(s["window_size"]))
        return LLMCompactor(
            context_length=int(s["context_length"]),
            trigger_fraction=float(s["trigger_fraction"]),
            head_turns=int(s["head_turns"]),
            tail_token_fraction=float(s["tail_token_fraction"]),
            summarize_fn=self.summarize_fn if s["summarizer"] == "callable" else None,
            tool_output_ttl_turns=int(s["tool_output_ttl_turns"]),
        )

    def _summarize_arg(self) -> tuple[str | None, str | None, str | None]:
        """``(summarize_fn= source, import line, comment)`` for the current summariser."""
        choice = self.settings["summarizer"]
        if choice == "none":
            return None, None, None
        if choice == "callable":
            path = import_path(self.summarize_fn)
            if path is not None:
                module, qualname = path
                head = qualname.split(".")[0]
                if module == "__main__":
                    return qualname, None, "defined in this notebook"
                return qualname, f"from {module} import {head}", None
            name = getattr(self.summarize_fn, "__name__", "")
            where = f"{getattr(self.summarize_fn, '__module__', '?')}.{getattr(self.summarize_fn, '__qualname__', '?')}"
            arg = name if name.isidentifier() else "YOUR_SUMMARIZER"
            return arg, None, f"cannot be imported ({where}, a lambda or closure): put yours in scope as {arg}"
        ref = self.recorded_summarizer
        if choice == "recorded":
            if ref is not None:
                last = ref["qualname"].split(".")[-1]
                arg = last if last.isidentifier() else "YOUR_SUMMARIZER"
                return (
                    arg,
                    None,
                    (
                        f"simulated with the recorded summaries; the thread ran {ref['module']}.{ref['qualname']}, "
                        f"which cannot be imported here: put it in scope as {arg}"
                    ),
                )
            return "YOUR_SUMMARIZER", None, "simulated with the recorded summaries; the thread saved no summariser path"
        return "YOUR_SUMMARIZER", None, "simulated with the length model (keeps no facts): pass a real summariser"

    def config_line(self) -> str:
        """The Python expression that builds the chosen manager (paste it into ``Agent(...)``);
        a summariser that needs an import or cannot be named carries a comment
        (:meth:`config_code` adds the import line)."""
        s = self.settings
        if s["kind"] == "window":
            return f"SlidingWindowManager(window_size={int(s['window_size'])})"
        arg, _, comment = self._summarize_arg()
        line = (
            f"LLMCompactor(context_length={int(s['context_length'])}, "
            f"trigger_fraction={float(s['trigger_fraction']):g}, head_turns={int(s['head_turns'])}, "
            f"tail_token_fraction={float(s['tail_token_fraction']):g}, "
            f"tool_output_ttl_turns={int(s['tool_output_ttl_turns'])}"
            + (f", summarize_fn={arg})" if arg is not None else ")")
        )
        return line + (f"  # summarize_fn {comment}" if comment else "")

    def config_code(self) -> str:
        """:meth:`config_line` with the import line its summariser needs, if any (module docstring)."""
        line = self.config_line()
        if self.settings["kind"] == "window":
            return line
        _, imports, _ = self._summarize_arg()
        return f"{imports}\n{line}" if imports else line

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
            choice = self.settings["summarizer"] if self.settings["kind"] == "compactor" else None
            sim = simulate_compaction(
                self.thread,
                {"tuned": self.manager()},
                probes=self.probes,
                tools=self.tools,
                context_window=self.context_window,
                summarizer="config" if choice in (None, "callable") else choice,
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
            fig.set_size_inches(7.5, 3.0)
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
        fit_token_axis(ax)  # the y axis follows what is sent, not the full history
        # the settings are spelled out beside the plot (config_line); the title names the manager
        title = self.config_line().split("(")[0] + summarizer_note(sim)
        fig.axes[0].set_title(f"Token usage — {title}", fontsize="small")
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
        over_calls: Any = s.get("over_window_calls")
        over = 0 if _missing(over_calls) else int(over_calls)
        if self.settings["kind"] == "compactor":
            text += f"; summaries: {_SUMMARIZER_LABELS[self.settings['summarizer']]}"
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


def _no_summary(messages: list[Message], previous: str | None) -> str:
    return ""


def _missing(v: Any) -> bool:
    """None, NaN or ``pd.NA`` (an unknown count)."""
    return v is None or v is pd_na() or v != v


def pd_na() -> Any:
    import pandas as pd

    return pd.NA


def _first(frame: pd.DataFrame, col: str) -> int | None:
    if col not in frame.columns or not len(frame):
        return None
    v = frame[col].iloc[0]
    return None if v is None or v != v else int(v)
