"""Plots of the lab's frames (matplotlib, Agg: no display, no pyplot state).

Every function takes a frame from :func:`~tulip_nb.lab.simulate_compaction` (or
:func:`~tulip_nb.lab.compaction_grid`, or ``Thread.usage``; ``plot_token_usage`` also takes the
:class:`~tulip_nb.lab.Thread` itself) and returns a :class:`matplotlib.figure.Figure`;
:func:`to_png` gives its bytes::

    from tulip_nb.lab import plot_token_usage, plot_composition, plot_sweep, to_png

    sim = simulate_compaction(thread, {"32k": LLMCompactor(context_length=32_000)})
    plot_token_usage(sim, "32k")          # tokens per call, trigger line, window, compactions
    plot_token_usage(thread)              # what the thread recorded, against its manager's lines
    plot_token_usage(thread, full_history=True)   # the y axis covers the whole history too
    plot_composition(sim, "32k")          # stacked areas: system, tools, user, assistant, tool, summary
    plot_sweep(compaction_grid(thread))   # tokens saved vs facts kept, one point per config

The figures show themselves: as the last expression of a notebook cell they display as a PNG with
no ``%matplotlib`` magic (an :class:`InlineFigure` is a ``Figure`` with ``_repr_png_``; IPython
only knows how to show a plain ``Figure`` once a pyplot backend is active). They are not
registered with pyplot, so they are freed like any object and never shown twice.
"""

from __future__ import annotations

import io
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tulip_nb._deps import require
from tulip_nb.core.errors import UserError
from tulip_nb.lab._budget import Limits, failed_turn_positions, recorded_limits
from tulip_nb.lab._recorded import summarizer_note

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from tulip_nb.lab._thread import Thread
    from tulip_nb.memory.checkpointer import BaseCheckpointer

# InlineFigure is defined on first use (module __getattr__), so matplotlib loads only when plotting
__all__ = ["InlineFigure", "fit_token_axis", "plot_composition", "plot_sweep", "plot_token_usage", "to_png"]  # noqa: F822

TRIGGER_GID = "trigger"
WINDOW_GID = "window"
COMPACTION_GID = "compaction"
FULL_GID = "full_history"
"""``gid`` of the full-history line of :func:`plot_token_usage` (the first line of its axes)."""
SENT_GID = "sent"
"""``gid`` of the sent-to-the-model line (the second line of its axes)."""
FAILED_GID = "failed_turn"
"""``gid`` of the failed-turn marks (one ``LineCollection`` of vertical lines)."""
SENT_AXIS_GID = "tokens:sent"
FULL_AXIS_GID = "tokens:full"
"""The axes' ``gid``: what its y axis is scaled to (what was sent, or the full history too)."""
_PARTS = (
    ("c_system", "system prompt"),
    ("c_tools", "tool schemas"),
    ("c_user", "user"),
    ("c_assistant", "assistant"),
    ("c_tool", "tool results"),
    ("c_summary", "summary"),
)


_inline_class: type[Figure] | None = None


def _inline_figure_class() -> type[Figure]:
    """:class:`InlineFigure`, defined on first use so importing this module imports no matplotlib."""
    global _inline_class
    if _inline_class is None:
        require("matplotlib", feature="tulip_nb.lab plots")
        from matplotlib.figure import Figure

        class InlineFigure(Figure):
            """A matplotlib ``Figure`` that a notebook displays as a PNG (``_repr_png_``, rendered
            with Agg); everything else is the ``Figure`` API (``savefig``, ``axes``, ...)."""

            def _repr_png_(self) -> bytes:
                return to_png(self)

        InlineFigure.__module__ = __name__
        InlineFigure.__qualname__ = "InlineFigure"  # pickles as tulip_nb.lab._plots.InlineFigure
        _inline_class = InlineFigure
    return _inline_class


def __getattr__(name: str) -> Any:
    if name == "InlineFigure":
        return _inline_figure_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _figure(width: float = 8.0, height: float = 4.0) -> Figure:
    require("matplotlib", feature="tulip_nb.lab plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    # constrained layout: axis labels, titles and outside legends stay inside the PNG at any size
    fig = _inline_figure_class()(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _n(value: Any) -> str:
    """A token count for a label: ``19,200``, never ``19,200.0``."""
    return f"{round(float(value)):,}"


def to_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (rendered with Agg)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _one(frame: pd.DataFrame, config: str | None) -> pd.DataFrame:
    if "config" not in frame.columns:
        return frame
    names = list(dict.fromkeys(frame["config"]))
    if config is None:
        if len(names) != 1:
            raise UserError(f"the frame has {len(names)} configs; pass config= one of {names}")
        config = names[0]
    if config not in names:
        raise UserError(f"no config {config!r} in the frame; configs: {names}")
    return frame[frame["config"] == config]


def plot_token_usage(
    frame: pd.DataFrame | Thread | str,
    config: str | None = None,
    *,
    checkpointer: BaseCheckpointer | str | None = None,
    trigger_tokens: float | None = None,
    context_length: float | None = None,
    full_history: bool = False,
    failed_turns: Sequence[float] | None = None,
) -> Figure:
    """Context tokens per model call (what was sent) against the trigger line and the window, with
    a marker at each compaction and a red dot at each call over the window.

    ``frame``: a :func:`simulate_compaction` frame (``config`` picks one config), a
    ``Thread.usage`` frame, or a :class:`Thread` (its recorded usage; or a thread id with
    ``checkpointer=``, a checkpointer or its URL).

    **Trigger and window** come from the caller (``trigger_tokens=``, ``context_length=``), else
    from the frame (a simulated compactor's config), else from a thread's recorded manager (the
    ``"trigger"`` and ``"window"`` it saved with the thread). When one is not known no line is
    drawn for it and the legend says "window unknown" (never a line at 0); a given value of 0
    means the same. A window you give also decides which calls are red (``context_tokens >
    window``); otherwise the frame's ``over_window`` column does.

    **The y axis follows what was sent**: from 0 to just above the highest of the sent curve,
    the trigger and the window, so on a long thread whose whole history is many times the window
    the lines that matter keep most of the height. The full history is a faint dashed line on
    the same scale, cut off at the top; when it leaves the axis its key says how high it goes
    ("full history (up to 249,939, off the axis)").
    ``full_history=True`` scales the axis to the full history as well (every curve whole, the
    window then a thin band at the bottom of a long thread).

    **Failed turns** (``failed_turns=``: positions on the call axis, ``k - 0.5`` for a turn that
    failed after ``k`` calls; a :class:`Thread`'s are found from its ``source="error"`` saves)
    are faint red vertical lines, counted in the legend.

    Every artist has a ``gid`` (:data:`FULL_GID`, :data:`SENT_GID`, :data:`TRIGGER_GID`,
    :data:`WINDOW_GID`, :data:`COMPACTION_GID`, :data:`OVER_GID`, :data:`FAILED_GID`); the trigger
    and window lines always exist (hidden when unknown), so a caller can move them and call
    :func:`fit_token_axis` to rescale.

    >>> import pandas as pd
    >>> frame = pd.DataFrame({"call": [0, 1, 2], "full_tokens": [900, 40_000, 90_000],
    ...                       "context_tokens": [900, 3_000, 4_500], "compacted": [False, True, True]})
    >>> ax = plot_token_usage(frame, trigger_tokens=4_800, context_length=6_000).axes[0]
    >>> [round(v) for v in ax.get_ylim()]   # what was sent and the window, not the 90k history
    [0, 6480]
    >>> [t.get_text() for t in ax.get_legend().get_texts()][:1]
    ['full history\\n(up to 90,000, off the axis)']
    >>> round(plot_token_usage(frame, full_history=True).axes[0].get_ylim()[1])
    97200
    """
    require("matplotlib", feature="plot_token_usage")
    from tulip_nb.lab._thread import Thread, as_thread

    recorded = Limits()
    if isinstance(frame, str | Thread):
        frame = as_thread(frame, checkpointer, what="plot_token_usage")
    elif checkpointer is not None:
        raise UserError("plot_token_usage: checkpointer= goes with a thread id, not a frame")
    if isinstance(frame, Thread):
        config = config or frame.thread_id
        recorded = recorded_limits(frame.latest.state)
        if failed_turns is None:
            failed_turns = failed_turn_positions(frame)
        frame = frame.usage
    g = _one(frame, config)
    given_window = _tokens(context_length, "context_length")
    trig = _tokens(trigger_tokens, "trigger_tokens")
    if trigger_tokens is None:
        trig = _tokens(_first(g, "trigger_tokens"), "trigger_tokens") or recorded.trigger
    window = given_window
    if context_length is None:
        window = (
            _tokens(_first(g, "context_length"), "context_length")
            or _tokens(_first(g, "context_window"), "context_window")
            or recorded.window
        )
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    x = g["call"].to_numpy()
    dot = "o" if len(x) == 1 else None  # one call: a line of one point draws nothing
    ax.plot(x, g["full_tokens"].to_numpy(), "--", color="0.55", alpha=0.7, linewidth=1, marker=dot,
            label="full history", gid=FULL_GID)  # fmt: skip
    ax.plot(x, g["context_tokens"].to_numpy(), color="C0", linewidth=1.2, marker=dot, label="sent to the model",
            gid=SENT_GID)  # fmt: skip
    fired = g[g["compacted"].astype(bool)]
    if len(fired):
        ax.scatter(
            fired["call"].to_numpy(),
            fired["context_tokens"].to_numpy(),
            marker="v",
            s=_marker_size(len(fired)),
            color="C3",
            zorder=3,
            label=f"compaction ({len(fired):,})",
            gid=COMPACTION_GID,
        )
    _limit_line(ax, TRIGGER_GID, trig, unknown=window is not None)
    _limit_line(ax, WINDOW_GID, window, unknown=trig is not None)
    if trig is None and window is None:
        next(line for line in ax.lines if line.get_gid() == WINDOW_GID).set_label("trigger & window unknown")
    over = g["context_tokens"].to_numpy() > given_window if given_window is not None else over_window_mask(g, window)
    if over.any():
        over_window_marks(ax, x[over], g["context_tokens"].to_numpy()[over])
    if failed_turns:
        n = len(failed_turns)
        ax.vlines(list(failed_turns), 0, 1, transform=ax.get_xaxis_transform(), colors=OVER_COLOR, alpha=0.35,
                  linewidth=1, linestyles="--", label=f"failed turn ({n:,})", gid=FAILED_GID)  # fmt: skip
    ax.set_gid(FULL_AXIS_GID if full_history else SENT_AXIS_GID)
    if len(x) == 1:
        ax.set_xlim(x[0] - 0.5, x[0] + 0.5, auto=None)
    ax.set_xlabel("model call")
    ax.set_ylabel("tokens")
    ax.set_title(f"Token usage — {config or _first(g, 'config') or 'thread'}{summarizer_note(g)}")
    fit_token_axis(ax)
    return fig


def _tokens(value: Any, what: str) -> int | None:
    """A trigger or window in tokens, or None when not known (None, NaN, or 0: no line at 0)."""
    if value is None or value != value:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UserError(f"plot_token_usage: {what} must be tokens (a number), got {value!r}")
    if value < 0:
        raise UserError(f"plot_token_usage: {what} must be positive, got {value!r}")
    return round(float(value)) or None


def _marker_size(n: int) -> float:
    """Compaction markers shrink when there are many, so hundreds of them stay points, not a band."""
    return 36.0 if n <= 40 else 18.0 if n <= 150 else 8.0


def _limit_line(ax: Axes, gid: str, value: int | None, *, unknown: bool) -> None:
    """The trigger or window line; hidden (NaN, no height) when ``value`` is unknown, labelled
    "… unknown" when ``unknown`` (the other one is known; both unknown get one entry)."""
    name = "trigger" if gid == TRIGGER_GID else "window"
    color, style = ("C1", ":") if gid == TRIGGER_GID else ("C3", "-")
    if value is not None:
        ax.axhline(value, color=color, linestyle=style, linewidth=1.2, label=f"{name} ({_n(value)})", gid=gid)
    else:
        label = f"{name} unknown" if unknown else f"_{name}"
        ax.axhline(float("nan"), color=color, linestyle=style, visible=False, label=label, gid=gid)


def fit_token_axis(ax: Axes) -> None:
    """Scale the y axis of a :func:`plot_token_usage` axes to what it shows now, say in the key
    whether the full history leaves it, and redraw the key (call it after moving lines or data).

    The axis runs from 0 to 8 % above the highest visible sent value, trigger and window (and
    the full history when the figure was made with ``full_history=True``)."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    lines = {line.get_gid(): line for line in ax.lines}
    full_axis = ax.get_gid() == FULL_AXIS_GID
    tops = [1.0]
    for gid in (SENT_GID, TRIGGER_GID, WINDOW_GID, *((FULL_GID,) if full_axis else ())):
        line = lines.get(gid)
        if line is not None and line.get_visible():
            ys = np.asarray(line.get_ydata(), dtype=float)
            if len(ys) and np.isfinite(ys).any():
                tops.append(float(np.nanmax(ys)))
    top = max(tops) * 1.08
    # autoscale stays on (auto=None), so a caller that relims still can; this is the default view
    ax.set_ylim(0, top, auto=None)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    for marks in ax.collections:
        if marks.get_gid() == COMPACTION_GID:  # a caller may have moved them: count them again
            n = len(np.asarray(marks.get_offsets()))
            marks.set_label(f"compaction ({n:,})" if n else "_compaction")
    full = lines.get(FULL_GID)
    if full is not None:
        ys = np.asarray(full.get_ydata(), dtype=float)
        highest = float(np.nanmax(ys)) if np.isfinite(ys).any() else 0.0
        # the key says how far the cut-off line goes: no note over the curves
        off = not full_axis and highest > top
        full.set_label(f"full history\n(up to {_n(highest)}, off the axis)" if off else "full history")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", borderaxespad=0.0)


OVER_GID = "over_window"
OVER_COLOR = "red"


def over_window_mask(g: pd.DataFrame, window: float | None = None) -> Any:
    """Boolean array: the calls of ``g`` sent more than the window (its ``over_window`` column, or
    ``context_tokens > window`` when the frame has none)."""
    import numpy as np

    if "over_window" in g.columns:
        return np.array([v is not None and v == v and bool(v) for v in g["over_window"]], dtype=bool)
    if window is None:
        return np.zeros(len(g), dtype=bool)
    return g["context_tokens"].to_numpy() > float(window)


def over_window_marks(ax: Any, x: Any, y: Any) -> Any:
    """Red markers at the calls over the window (``gid`` :data:`OVER_GID`, so they can be moved)."""
    n = len(x)
    label = f"over the window ({n} call{'s' if n != 1 else ''})" if n else "_over_window"
    return ax.scatter(
        x, y, marker="o", s=36, color=OVER_COLOR, edgecolors="darkred", zorder=4, label=label, gid=OVER_GID
    )


def _first(g: pd.DataFrame, col: str) -> Any:
    if col not in g.columns or not len(g):
        return None
    v = g[col].iloc[0]
    return None if v is None or v != v else v


def plot_composition(frame: pd.DataFrame, config: str | None = None) -> Figure:
    """What the model was sent at each call, as stacked areas: system prompt, tool schemas, user,
    assistant, tool results, summary."""
    g = _one(frame, config)
    missing = [c for c, _ in _PARTS if c not in g.columns]
    if missing:
        raise UserError(f"plot_composition needs a simulate_compaction frame; missing columns {missing}")
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    ax.stackplot(g["call"].to_numpy(), *[g[c].to_numpy() for c, _ in _PARTS], labels=[lbl for _, lbl in _PARTS])
    ax.set_xlabel("model call")
    ax.set_ylabel("tokens sent")
    ax.set_title(f"Context composition — {config or _first(g, 'config')}{summarizer_note(g)}")
    ax.legend(loc="upper left", fontsize="small")
    return fig


SWEEP_LABEL_CHARS = 36
"""Config names longer than this are cut (with "…") in :func:`plot_sweep`'s key."""


def plot_sweep(summary: pd.DataFrame) -> Figure:
    """Tokens saved against facts kept, one numbered point per config (a
    :func:`~tulip_nb.lab.compaction_grid` or :func:`~tulip_nb.lab.summarize_simulation` frame);
    the key beside the axes gives each number's config, so names never overlap the points or each
    other."""
    require("matplotlib", feature="plot_sweep")
    from matplotlib.lines import Line2D

    for col in ("config", "saved_fraction", "facts_kept"):
        if col not in summary.columns:
            raise UserError(f"plot_sweep needs a summarize_simulation/compaction_grid frame; no column {col!r}")
    fig = _figure(8.0, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    saved = summary["saved_fraction"].to_numpy() * 100
    kept = summary["facts_kept"].fillna(1.0).to_numpy() * 100
    handles = []
    span_x = max(float(saved.max() - saved.min()), 1.0) if len(saved) else 1.0
    placed: list[tuple[float, float]] = []
    for i, (name, x, y) in enumerate(zip(summary["config"], saved, kept, strict=True)):
        color = f"C{i % 10}"
        ax.scatter([x], [y], color=color, zorder=3)
        # the number of a point close to earlier ones goes below them, not over their numbers
        near = sum(1 for px, py in placed if abs(px - x) / span_x < 0.05 and abs(py - y) < 5)
        placed.append((float(x), float(y)))
        dy = 4 if not near else -12 - 10 * (near - 1)
        ax.annotate(str(i + 1), (x, y), textcoords="offset points", xytext=(4, dy), fontsize="x-small")
        label = str(name)
        if len(label) > SWEEP_LABEL_CHARS:
            label = label[: SWEEP_LABEL_CHARS - 1] + "…"
        handles.append(Line2D([], [], marker="o", linestyle="none", color=color, label=f"{i + 1}  {label}"))
    if handles:
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            fontsize="x-small",
            ncols=1 if len(handles) <= 16 else 2,
            title="config",
            title_fontsize="x-small",
        )
    ax.set_xlabel("tokens saved (% of sending everything)")
    ax.set_ylabel("facts kept (% of probe checks)")
    ax.set_title("Compaction sweep")
    ax.set_ylim(-5, 105)
    return fig
