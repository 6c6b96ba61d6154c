"""Plots of the lab's frames (matplotlib, Agg: no display, no pyplot state).

Every function takes a frame from :func:`~tulip_nb.lab.simulate_compaction` (or
:func:`~tulip_nb.lab.compaction_grid`, or ``Thread.usage``; ``plot_token_usage`` also takes the
:class:`~tulip_nb.lab.Thread` itself) and returns a :class:`matplotlib.figure.Figure`;
:func:`to_png` gives its bytes::

    from tulip_nb.lab import plot_token_usage, plot_composition, plot_sweep, to_png

    sim = simulate_compaction(thread, {"32k": LLMCompactor(context_length=32_000)})
    plot_token_usage(sim, "32k")          # tokens per call, trigger line, window, compactions
    plot_token_usage(thread)              # what the thread recorded
    plot_composition(sim, "32k")          # stacked areas: system, tools, user, assistant, tool, summary
    plot_sweep(compaction_grid(thread))   # tokens saved vs facts kept, one point per config

The figures show themselves: as the last expression of a notebook cell they display as a PNG with
no ``%matplotlib`` magic (an :class:`InlineFigure` is a ``Figure`` with ``_repr_png_``; IPython
only knows how to show a plain ``Figure`` once a pyplot backend is active). They are not
registered with pyplot, so they are freed like any object and never shown twice.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from tulip_nb._deps import require
from tulip_nb.core.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from tulip_nb.lab.thread import Thread
    from tulip_nb.memory.checkpointer import BaseCheckpointer

# InlineFigure is defined on first use (module __getattr__), so matplotlib loads only when plotting
__all__ = ["InlineFigure", "plot_composition", "plot_sweep", "plot_token_usage", "to_png"]  # noqa: F822

TRIGGER_GID = "trigger"
WINDOW_GID = "window"
COMPACTION_GID = "compaction"
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
        InlineFigure.__qualname__ = "InlineFigure"  # pickles as tulip_nb.lab.plots.InlineFigure
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
) -> Figure:
    """Context tokens per model call against the trigger line and the window, with a marker at
    each compaction and a red dot at each call over the window (its ``over_window`` column, or
    more than the window when the frame has none); the full history is dashed. ``frame``: a
    :func:`simulate_compaction` frame (``config`` picks one config), a ``Thread.usage`` frame, or
    a :class:`Thread` (its recorded usage; or a thread id with ``checkpointer=``, a checkpointer
    or its URL). Trigger and window come from the frame (a compactor's
    config) unless given. The y axis starts at 0 and reaches the highest of the curves, the
    trigger and the window."""
    require("matplotlib", feature="plot_token_usage")
    from matplotlib.ticker import MaxNLocator

    from tulip_nb.lab.thread import Thread, as_thread

    if isinstance(frame, str | Thread):
        frame = as_thread(frame, checkpointer, what="plot_token_usage")
    elif checkpointer is not None:
        raise UserError("plot_token_usage: checkpointer= goes with a thread id, not a frame")
    if isinstance(frame, Thread):
        config = config or frame.thread_id
        frame = frame.usage
    g = _one(frame, config)
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    x = g["call"].to_numpy()
    dot = "o" if len(x) == 1 else None  # one call: a line of one point draws nothing
    ax.plot(x, g["full_tokens"].to_numpy(), "--", color="0.6", marker=dot, label="full history")
    ax.plot(x, g["context_tokens"].to_numpy(), color="C0", marker=dot, label="sent to the model")
    fired = g[g["compacted"].astype(bool)]
    if len(fired):
        ax.scatter(
            fired["call"].to_numpy(),
            fired["context_tokens"].to_numpy(),
            marker="v",
            color="C3",
            zorder=3,
            label="compaction",
            gid=COMPACTION_GID,
        )
    trig = trigger_tokens if trigger_tokens is not None else _first(g, "trigger_tokens")
    window = context_length if context_length is not None else _first(g, "context_length")
    if window is None:
        window = _first(g, "context_window")
    if trig is not None:
        ax.axhline(trig, color="C1", linestyle=":", label=f"trigger ({_n(trig)})", gid=TRIGGER_GID)
    if window is not None:
        ax.axhline(window, color="C3", linestyle="-", linewidth=1, label=f"window ({_n(window)})", gid=WINDOW_GID)
    over = over_window_mask(g, window)
    if over.any():
        over_window_marks(ax, g["call"].to_numpy()[over], g["context_tokens"].to_numpy()[over])
    ys = [float(v) for c in ("full_tokens", "context_tokens") for v in g[c]] + [
        float(v) for v in (trig, window) if v is not None
    ]
    # from 0 (a single point would otherwise sit on a ±0.04 axis); autoscale stays on, so a
    # caller that moves the lines (the tuner) can rescale
    ax.set_ylim(0, max([*ys, 1.0]) * 1.08, auto=None)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if len(x) == 1:
        ax.set_xlim(x[0] - 0.5, x[0] + 0.5, auto=None)
    ax.set_xlabel("model call")
    ax.set_ylabel("tokens")
    ax.set_title(f"Token usage — {config or _first(g, 'config') or 'thread'}")
    ax.legend(loc="upper left", fontsize="small")
    return fig


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
    ax.set_title(f"Context composition — {config or _first(g, 'config')}")
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
