"""Plots of the lab's frames (matplotlib, Agg: no display, no pyplot state).

Every function takes a frame from :func:`~tulip_nb.lab.simulate_compaction` (or
:func:`~tulip_nb.lab.compaction_grid`, or ``Thread.usage()``) and returns a
:class:`matplotlib.figure.Figure`, which a notebook shows inline; :func:`to_png` gives its bytes::

    from tulip_nb.lab import plot_token_usage, plot_composition, plot_sweep, to_png

    sim = simulate_compaction(thread, {"32k": LLMCompactor(context_length=32_000)})
    plot_token_usage(sim, "32k")          # tokens per call, trigger line, window, compactions
    plot_composition(sim, "32k")          # stacked areas: system, tools, user, assistant, tool, summary
    plot_sweep(compaction_grid(thread))   # tokens saved vs facts kept, one point per config
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from tulip_nb.core.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["plot_composition", "plot_sweep", "plot_token_usage", "to_png"]

TRIGGER_GID = "trigger"
WINDOW_GID = "window"
_PARTS = (
    ("c_system", "system prompt"),
    ("c_tools", "tool schemas"),
    ("c_user", "user"),
    ("c_assistant", "assistant"),
    ("c_tool", "tool results"),
    ("c_summary", "summary"),
)


def _figure(width: float = 8.0, height: float = 4.0) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


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
    frame: pd.DataFrame,
    config: str | None = None,
    *,
    trigger_tokens: int | None = None,
    context_length: int | None = None,
) -> Figure:
    """Context tokens per model call against the trigger line and the window, with a marker at
    each compaction; the full history is dashed. Trigger and window come from the frame (a
    compactor's config) unless given."""
    g = _one(frame, config)
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    x = g["call"].to_numpy()
    ax.plot(x, g["full_tokens"].to_numpy(), "--", color="0.6", label="full history")
    ax.plot(x, g["context_tokens"].to_numpy(), color="C0", label="sent to the model")
    fired = g[g["compacted"].astype(bool)]
    if len(fired):
        ax.scatter(
            fired["call"].to_numpy(),
            fired["context_tokens"].to_numpy(),
            marker="v",
            color="C3",
            zorder=3,
            label="compaction",
        )
    trig = trigger_tokens if trigger_tokens is not None else _first(g, "trigger_tokens")
    window = context_length if context_length is not None else _first(g, "context_length")
    if trig is not None:
        ax.axhline(trig, color="C1", linestyle=":", label=f"trigger ({trig:,})", gid=TRIGGER_GID)
    if window is not None:
        ax.axhline(window, color="C3", linestyle="-", linewidth=1, label=f"window ({window:,})", gid=WINDOW_GID)
    ax.set_xlabel("model call")
    ax.set_ylabel("tokens")
    ax.set_title(f"Token usage — {config or _first(g, 'config') or 'thread'}")
    ax.legend(loc="upper left", fontsize="small")
    return fig


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


def plot_sweep(summary: pd.DataFrame) -> Figure:
    """Tokens saved against facts kept, one labelled point per config (a
    :func:`~tulip_nb.lab.compaction_grid` or :func:`~tulip_nb.lab.summarize_simulation` frame)."""
    for col in ("config", "saved_fraction", "facts_kept"):
        if col not in summary.columns:
            raise UserError(f"plot_sweep needs a summarize_simulation/compaction_grid frame; no column {col!r}")
    fig = _figure(6.0, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    saved = summary["saved_fraction"].to_numpy() * 100
    kept = summary["facts_kept"].fillna(1.0).to_numpy() * 100
    ax.scatter(saved, kept, color="C0")
    for name, x, y in zip(summary["config"], saved, kept, strict=True):
        ax.annotate(str(name), (x, y), textcoords="offset points", xytext=(4, 4), fontsize="x-small")
    ax.set_xlabel("tokens saved (% of sending everything)")
    ax.set_ylabel("facts kept (% of probe checks)")
    ax.set_title("Compaction sweep")
    ax.set_ylim(-5, 105)
    return fig
