"""Token plots readable at 400+ turns (issue 25, item 7).

Before: the full-history curve (~250k tokens here) set the y axis, so the trigger (4,800) and the
window (6,000) sat in the bottom 2 % — and ``plot_token_usage(thread)`` drew neither, although the
thread saved its manager's window. Now the y axis follows what was sent, the full history is a
faint line cut off at the top (``full_history=True`` shows it whole), trigger and window come from
the thread's recorded manager, and an unknown window draws nothing and says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core.state import AgentState
from tulip_nb.lab import plot_token_usage, to_png
from tulip_nb.lab._budget import Limits, failed_turn_positions, recorded_limits
from tulip_nb.lab._corpus_plots import plot_corpus_distributions
from tulip_nb.lab._plots import (
    FAILED_GID,
    FULL_GID,
    OVER_GID,
    SENT_GID,
    TRIGGER_GID,
    WINDOW_GID,
    fit_token_axis,
)
from tulip_nb.memory.conversation import STATE_KEY

from .long_plot_threads import FAILED, FAILING, TRIGGER, TURNS, WINDOW, LongThreads, long_threads

pytestmark = pytest.mark.slow  # a 300-turn thread is built for the module

PNG = b"\x89PNG"


@pytest.fixture(scope="module")
def long() -> LongThreads:
    return long_threads()


def line(ax: Any, gid: str) -> Any:
    found = [x for x in ax.lines if x.get_gid() == gid]
    assert len(found) == 1, f"{len(found)} lines with gid {gid!r}"
    return found[0]


def legend(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def height(ax: Any, y: float) -> float:
    lo, hi = ax.get_ylim()
    return (y - lo) / (hi - lo)


# -- the bullet: a 400-turn LLMCompactor(context_length=6000) thread --------------------------
def test_the_axis_follows_what_was_sent_and_the_recorded_lines_are_drawn(long: LongThreads) -> None:
    th = long.compact
    usage = th.usage
    sent, full = usage["context_tokens"].to_numpy(), usage["full_tokens"].to_numpy()
    assert len(usage) == 2 * (TURNS - FAILED) and full.max() > 30 * WINDOW > sent.max()
    fig = plot_token_usage(th)
    fig.canvas.draw()  # drawing does not rescale it
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo == 0 and max(sent.max(), WINDOW) <= hi <= 1.1 * WINDOW
    trigger, window = line(ax, TRIGGER_GID), line(ax, WINDOW_GID)
    assert trigger.get_visible() and list(trigger.get_ydata()) == [TRIGGER, TRIGGER]
    assert window.get_visible() and list(window.get_ydata()) == [WINDOW, WINDOW]
    assert height(ax, WINDOW) > 0.9 and height(ax, TRIGGER) > 0.7  # was 2.2 % and 1.8 %
    # the full history is there, whole, but does not set the axis
    full_line = line(ax, FULL_GID)
    assert list(full_line.get_ydata()) == list(full) and full_line.get_alpha() < 1
    assert full.max() > 30 * hi
    assert list(line(ax, SENT_GID).get_ydata()) == list(sent)
    texts = legend(ax)
    assert texts[0] == f"full history\n(up to {full.max():,}, off the axis)"
    assert f"trigger ({TRIGGER:,})" in texts and f"window ({WINDOW:,})" in texts
    assert f"failed turn ({FAILED})" in texts
    assert to_png(fig).startswith(PNG)


def test_full_history_true_puts_it_on_the_main_axis(long: LongThreads) -> None:
    full = long.compact.usage["full_tokens"].max()
    ax = plot_token_usage(long.compact, full_history=True).axes[0]
    assert full <= ax.get_ylim()[1] <= 1.1 * full
    assert legend(ax)[0] == "full history"
    assert line(ax, WINDOW_GID).get_ydata()[0] == WINDOW  # still drawn, now a thin band
    assert height(ax, WINDOW) < 0.05


def test_a_null_manager_thread_says_window_unknown_and_draws_no_line(long: LongThreads) -> None:
    th = long.null
    assert recorded_limits(th.latest.state) == Limits(None, None)
    sent = th.usage["context_tokens"].max()
    ax = plot_token_usage(th).axes[0]
    assert not line(ax, TRIGGER_GID).get_visible() and not line(ax, WINDOW_GID).get_visible()
    assert not any(np.isfinite(line(ax, g).get_ydata()).any() for g in (TRIGGER_GID, WINDOW_GID))  # never at 0
    assert "trigger & window unknown" in legend(ax)
    assert not [c for c in ax.collections if c.get_gid() == OVER_GID]  # unknown is not "over"
    assert sent <= ax.get_ylim()[1] <= 1.1 * sent  # sent == full history here
    # the caller's window: drawn, and the calls over it are red
    ax = plot_token_usage(th, context_length=WINDOW).axes[0]
    over = next(c for c in ax.collections if c.get_gid() == OVER_GID)
    assert len(over.get_offsets()) == int((th.usage["context_tokens"] > WINDOW).sum())
    assert "trigger unknown" in legend(ax) and f"window ({WINDOW:,})" in legend(ax)


def test_the_caller_wins_over_the_record_and_zero_means_unknown(long: LongThreads) -> None:
    ax = plot_token_usage(long.compact, trigger_tokens=3000, context_length=9000).axes[0]
    assert line(ax, TRIGGER_GID).get_ydata()[0] == 3000 and line(ax, WINDOW_GID).get_ydata()[0] == 9000
    assert 9000 <= ax.get_ylim()[1] <= 9000 * 1.1
    ax = plot_token_usage(long.compact, trigger_tokens=0).axes[0]  # 0: no trigger, not a line at 0
    assert not line(ax, TRIGGER_GID).get_visible() and "trigger unknown" in legend(ax)
    assert line(ax, WINDOW_GID).get_ydata()[0] == WINDOW


def test_failed_turns_are_marked_between_the_calls_around_them(long: LongThreads) -> None:
    for th in (long.compact, long.null):
        positions = failed_turn_positions(th)
        # turn i failed after i answered turns before it, each of them 2 calls, minus earlier failures
        assert positions == [2 * (i - k) - 0.5 for k, i in enumerate(FAILING)]
        ax = plot_token_usage(th).axes[0]
        marks = next(c for c in ax.collections if c.get_gid() == FAILED_GID)
        assert [seg[0][0] for seg in marks.get_segments()] == positions


def test_fit_token_axis_rescales_after_the_lines_move(long: LongThreads) -> None:
    fig = plot_token_usage(long.compact)
    ax = fig.axes[0]
    window = line(ax, WINDOW_GID)
    window.set_ydata([20_000, 20_000])
    fit_token_axis(ax)
    assert 20_000 <= ax.get_ylim()[1] <= 22_000
    window.set_visible(False)
    fit_token_axis(ax)
    assert ax.get_ylim()[1] <= 1.1 * max(TRIGGER, long.compact.usage["context_tokens"].max())


def test_recorded_limits_follow_an_overflow_cap() -> None:
    config = {"kind": "compactor", "context_length": 6000, "trigger_fraction": 0.5}
    saved = {"window": 6000, "config": config, "overflow_limit": 4000}
    assert recorded_limits(AgentState(metadata={STATE_KEY: saved})) == Limits(trigger=2000, window=6000)
    summarizing = {"kind": "summarizing", "context_length": 10_000, "trigger_fraction": 0.7}
    state = AgentState(metadata={STATE_KEY: {"window": 10_000, "config": summarizing}})
    assert recorded_limits(state) == Limits(trigger=7000, window=10_000)
    window_only = AgentState(metadata={STATE_KEY: {"window": 6000}})  # an older tulip_nb: no settings
    assert recorded_limits(window_only) == Limits(trigger=None, window=6000)


# -- any frame: the axis covers what matters, and only that ---------------------------------------------
@st.composite
def frames(draw: Any) -> tuple[pd.DataFrame, int | None, int | None, bool]:
    n = draw(st.integers(1, 60))
    sent = draw(st.lists(st.integers(1, 50_000), min_size=n, max_size=n))
    extra = draw(st.lists(st.integers(0, 2_000_000), min_size=n, max_size=n))
    compacted = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    frame = pd.DataFrame(
        {
            "call": range(n),
            "full_tokens": [s + e for s, e in zip(sent, extra, strict=True)],
            "context_tokens": sent,
            "compacted": compacted,
        }
    )
    trigger = draw(st.none() | st.integers(1, 200_000))
    window = draw(st.none() | st.integers(1, 200_000))
    return frame, trigger, window, draw(st.booleans())


@settings(max_examples=examples(0.25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
def test_the_axis_covers_sent_trigger_and_window_and_only_follows_full_history_when_asked(
    case: tuple[pd.DataFrame, int | None, int | None, bool],
) -> None:
    frame, trigger, window, full_history = case
    ax = plot_token_usage(frame, trigger_tokens=trigger, context_length=window, full_history=full_history).axes[0]
    lo, hi = ax.get_ylim()
    shown = [frame["context_tokens"].max(), *(v for v in (trigger, window) if v is not None)]
    if full_history:
        shown.append(frame["full_tokens"].max())
    assert lo == 0 and max(shown) <= hi <= 1.08 * max(shown) + 1e-6
    for gid, value in ((TRIGGER_GID, trigger), (WINDOW_GID, window)):
        drawn = line(ax, gid)
        assert drawn.get_visible() is (value is not None)
        if value is not None:
            assert list(drawn.get_ydata()) == [value, value]
    texts = legend(ax)
    assert ("window unknown" in " ".join(texts)) is (window is None)
    off = bool(frame["full_tokens"].max() > hi)
    assert texts[0].startswith("full history\n(up to") is off and (not full_history or not off)
    over = [c for c in ax.collections if c.get_gid() == OVER_GID]
    n_over = int((frame["context_tokens"] > window).sum()) if window is not None else 0
    assert (len(over[0].get_offsets()) if over else 0) == n_over


# -- corpus plots: an unknown window is not "none over" ------------------------------------------------
def test_corpus_distributions_say_when_the_window_is_unknown() -> None:
    rows = {
        "thread_id": ["a", "b", "c", "d"],
        "tokens": [100, 200, 300, None],
        "compactions": [0, 1, 2, None],
        "over_window_calls": [None, None, None, None],
        "error": [None, None, None, "CheckpointCorrupt: x"],
    }
    fig = plot_corpus_distributions(pd.DataFrame(rows))
    assert fig.axes[2].get_title() == "Calls over the window (window unknown for all 3 threads)"
    rows["over_window_calls"] = [0, 2, None, None]
    fig = plot_corpus_distributions(pd.DataFrame(rows))
    assert fig.axes[2].get_title() == "Calls over the window (1 threads have some; window unknown for 1, left out)"
    rows["over_window_calls"] = [0, 0, 0, None]
    assert plot_corpus_distributions(pd.DataFrame(rows)).axes[2].get_title() == "Calls over the window (none)"
