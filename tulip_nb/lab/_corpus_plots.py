"""Plots of a corpus: how its threads are distributed, and how many facts each config keeps.

Both take the frames of :class:`~tulip_nb.lab.corpus.Corpus` and return a self-displaying
:class:`~tulip_nb.lab._plots.InlineFigure` (matplotlib, Agg)::

    from tulip_nb.lab._corpus_plots import plot_corpus_distributions, plot_facts_kept

    summary = corpus.summary()
    plot_corpus_distributions(summary)                 # tokens, compactions, over-window calls
    plot_corpus_distributions(summary, highlight=summary[summary.tokens > 5_000])
    sim = corpus.simulate(configs, probes=corpus_facts)
    plot_facts_kept(sim, config="tight")               # kept share per config + one config's threads

Threads that could not be read (``error`` set, NA counts) are left out of the bars and counted in
the title, never drawn as zeros; so are threads whose window is unknown (an NA
``over_window_calls``): the over-window panel's title says "window unknown for N", never "none".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tulip_nb._deps import require
from tulip_nb.core.errors import UserError
from tulip_nb.lab._plots import _figure

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["CONFIG_LABEL_CHARS", "kept_by_config", "plot_corpus_distributions", "plot_facts_kept"]

CONFIG_LABEL_CHARS = 28
"""Config names longer than this are cut (with "…") on the facts-kept axis."""

_ALL = "0.75"
_SHOWN = "C0"


def _need(frame: pd.DataFrame, cols: tuple[str, ...], what: str, source: str) -> None:
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise UserError(f"{what} needs a {source} frame; missing columns {missing} (has {list(frame.columns)})")


def _numbers(frame: pd.DataFrame, col: str) -> Any:
    """The readable values of ``col`` as floats (NA rows, i.e. unread threads, left out)."""
    import pandas as pd

    return pd.to_numeric(frame[col], errors="coerce").dropna().to_numpy(dtype=float)


def _int_bars(ax: Axes, values: Any, shown: Any | None, color: str, zero: str | None = None) -> None:
    """Threads per integer value (0, 1, 2, ...): a bar per value, the shown subset over all;
    ``zero``: another colour for the bar at 0 (no call over the window is not an alarm)."""
    import numpy as np

    top = int(values.max()) if len(values) else 0
    xs = np.arange(top + 1)
    counts = np.bincount(values.astype(int), minlength=top + 1) if len(values) else np.zeros(1)
    colors = [zero if zero is not None and x == 0 else color for x in xs]
    ax.bar(xs, counts, color=colors if shown is None else _ALL, width=0.8, label=f"all ({len(values):,})")
    if shown is not None:
        sc = np.bincount(shown.astype(int), minlength=top + 1) if len(shown) else np.zeros(top + 1)
        ax.bar(xs, sc[: top + 1], color=colors, width=0.8, label=f"shown ({len(shown):,})")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def plot_corpus_distributions(summary: pd.DataFrame, *, highlight: pd.DataFrame | None = None) -> Figure:
    """Three panels over a :meth:`Corpus.summary` frame: tokens per thread (histogram),
    compactions per thread and calls over the window per thread (threads per count); without the
    state column ``over_window_calls`` (``summary(columns="all")`` reads it), failed turns per
    thread instead. ``highlight``: a subset of the rows (a filter's result) drawn over the whole
    corpus in grey."""
    require("matplotlib", feature="plot_corpus_distributions")
    if "over_window_calls" not in summary.columns:
        _need(summary, ("thread_id", "tokens", "compactions", "failed_turns"), "plot_corpus_distributions", "summary")
        return _distributions(summary, highlight, ("failed_turns", "Failed turns per thread", "C1", "C0"))
    _need(summary, ("thread_id", "tokens", "compactions", "over_window_calls"), "plot_corpus_distributions", "summary")
    return _distributions(summary, highlight, ("over_window_calls", "Calls over the window", "C3", "C0"))


def _distributions(summary: pd.DataFrame, highlight: pd.DataFrame | None, third: tuple[str, str, str, str]) -> Figure:
    from matplotlib.ticker import FuncFormatter

    fig = _figure(11.0, 3.3)
    axes = fig.subplots(1, 3)
    tokens = _numbers(summary, "tokens")
    shown = None if highlight is None else _numbers(highlight, "tokens")
    ax = axes[0]
    bins = _bins(tokens)
    ax.hist(tokens, bins=bins, color=_SHOWN if shown is None else _ALL, label=f"all ({len(tokens):,})")
    if shown is not None:
        ax.hist(shown, bins=bins, color=_SHOWN, label=f"shown ({len(shown):,})")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}"))
    ax.set_xlabel("tokens in the thread")
    ax.set_ylabel("threads")
    ax.set_title("Tokens per thread", fontsize="medium")
    for ax, col, title, color, zero in (
        (axes[1], "compactions", "Compactions per thread", "C2", None),
        (axes[2], *third),
    ):
        values = _numbers(summary, col)
        sub = None if highlight is None else _numbers(highlight, col)
        _int_bars(ax, values, sub, color, zero)
        ax.set_xlabel(col.replace("_", " ") + " in the thread")
        ax.set_title(title, fontsize="medium")
    if third[0] == "over_window_calls":
        _window_title(axes[2], summary)
    if highlight is not None:
        axes[0].legend(loc="best", fontsize="x-small")
    unread = _unread(summary)
    title = f"{len(summary):,} threads" + (f" ({unread:,} could not be read, left out)" if unread else "")
    fig.suptitle(title, fontsize="medium")
    return fig


def _window_title(ax: Any, summary: pd.DataFrame) -> None:
    over = int((_numbers(summary, "over_window_calls") > 0).sum())
    unknown = _window_unknown(summary)
    # NA is not 0: threads whose window is unknown are left out of the bars, and the title says so
    if unknown and unknown == len(summary) - _unread(summary):
        said = f"window unknown for all {unknown:,} threads"
    else:
        said = f"{over:,} threads have some" if over else "none"
        if unknown:
            said += f"; window unknown for {unknown:,}, left out"
    ax.set_title(f"Calls over the window ({said})", fontsize="medium")


def _bins(values: Any) -> Any:
    import numpy as np

    if not len(values):
        return 1
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:
        return np.array([lo - 0.5, hi + 0.5])
    return np.linspace(lo, hi, min(30, max(5, int(len(values) ** 0.5))) + 1)


def _unread(frame: pd.DataFrame) -> int:
    if "error" not in frame.columns:
        return 0
    return int(sum(isinstance(e, str) and bool(e) for e in frame["error"]))


def _window_unknown(summary: pd.DataFrame) -> int:
    """Readable threads whose over-window count is NA: their window is not known."""
    import pandas as pd

    counts = pd.to_numeric(summary["over_window_calls"], errors="coerce")
    unread = summary["error"].map(lambda e: isinstance(e, str) and bool(e)) if "error" in summary.columns else False
    return int((counts.isna() & ~pd.Series(unread, index=summary.index, dtype=bool)).sum())


def _label(name: object) -> str:
    s = str(name)
    return s if len(s) <= CONFIG_LABEL_CHARS else s[: CONFIG_LABEL_CHARS - 1] + "…"


def kept_by_config(sim: pd.DataFrame) -> pd.DataFrame:
    """``config, threads, facts, facts_kept, kept_fraction`` per config of a
    :meth:`Corpus.simulate` frame, in the frame's config order (error rows left out)."""
    import pandas as pd

    _need(sim, ("thread_id", "config", "facts", "facts_kept"), "plot_facts_kept", "Corpus.simulate")
    rows = []
    for name, g in sim.groupby("config", sort=False):
        facts = pd.to_numeric(g["facts"], errors="coerce")
        kept = pd.to_numeric(g["facts_kept"], errors="coerce")
        n_facts, n_kept = int(facts.fillna(0).sum()), int(kept.fillna(0).sum())
        rows.append(
            {
                "config": name,
                "threads": int(facts.notna().sum()),
                "facts": n_facts,
                "facts_kept": n_kept,
                "kept_fraction": n_kept / n_facts if n_facts else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=["config", "threads", "facts", "facts_kept", "kept_fraction"])


def plot_facts_kept(sim: pd.DataFrame, config: str | None = None) -> Figure:
    """Facts kept per config of a :meth:`Corpus.simulate` frame: left, the share of all the facts
    said that each config still showed at the thread's last call (a bar per config, ``kept/said``
    beside it; ``config`` highlighted); right, that config's threads by the share of their own
    facts kept (every config as an outline when ``config`` is None)."""
    require("matplotlib", feature="plot_facts_kept")
    import numpy as np
    import pandas as pd

    per = kept_by_config(sim)
    names = list(per["config"])
    if config is not None and config not in names:
        raise UserError(f"plot_facts_kept: no config {config!r} in the simulation; configs: {names}")
    fig = _figure(11.0, max(3.0, 1.2 + 0.35 * len(names)))
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1.0])
    ys = np.arange(len(names))[::-1]  # the first config on top
    fracs = per["kept_fraction"].to_numpy(dtype=float) * 100
    colors = [_SHOWN if config is None or n == config else _ALL for n in names]
    left.barh(ys, np.nan_to_num(fracs), color=colors)
    for y, f, r in zip(ys, fracs, per.itertuples(), strict=True):
        text = "no facts said" if f != f else f"{f:.0f}%  ({r.facts_kept:,}/{r.facts:,})"
        left.annotate(text, (0 if f != f else f, y), xytext=(4, 0), textcoords="offset points", va="center",
                      fontsize="x-small")  # fmt: skip
    left.set_yticks(ys, [_label(n) for n in names], fontsize="small")
    left.set_xlim(0, 125)
    left.set_xticks([0, 25, 50, 75, 100])
    left.set_xlabel("facts kept at the last call (% of facts said)")
    left.set_title("Facts kept per config", fontsize="medium")
    bins = np.linspace(0, 100, 11)
    title = "Threads by facts kept"
    for i, name in enumerate(names):
        if config is not None and name != config:
            continue
        g = sim[sim["config"] == name]
        facts = pd.to_numeric(g["facts"], errors="coerce").to_numpy(dtype=float)
        kept = pd.to_numeric(g["facts_kept"], errors="coerce").to_numpy(dtype=float)
        ok = facts > 0
        share = kept[ok] / facts[ok] * 100
        if config is None:
            right.hist(share, bins=bins, histtype="step", linewidth=1.5, color=f"C{i % 10}", label=_label(name))
        else:
            right.hist(share, bins=bins, color=_SHOWN)
            title = f"Threads by facts kept — {_label(name)} ({int(ok.sum()):,} threads)"
    right.set_xlabel("share of the thread's facts kept (%)")
    right.set_ylabel("threads")
    right.set_title(title, fontsize="medium")
    if config is None and names:  # one config: its name is the title, no key over the bars
        right.legend(loc="best", fontsize="x-small")
    return fig
