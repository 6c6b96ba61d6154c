"""TokenBudget on a 400-turn thread (issue 25, item 7): the trigger and window its manager
recorded, an axis that follows what was sent, failed turns counted, an unknown window said."""

from __future__ import annotations

from typing import Any

import pytest

from tulip_nb.lab._plots import FAILED_GID, FULL_GID, TRIGGER_GID, WINDOW_GID
from tulip_nb.lab.controllers import BudgetController
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.widgets import TokenBudget

from ..lab.long_plot_threads import FAILED, TRIGGER, WINDOW, long_threads

pytestmark = pytest.mark.slow  # a long thread is built for the module


def line(ax: Any, gid: str) -> Any:
    return next(x for x in ax.lines if x.get_gid() == gid)


def test_token_budget_of_a_long_thread_draws_what_its_manager_recorded() -> None:
    th = long_threads().compact
    b = TokenBudget(th)
    c = b.controller
    assert (c.trigger, c.window) == (TRIGGER, WINDOW) and c.failed and len(c.failed) == FAILED
    assert f"of the trigger ({TRIGGER:,})" in b.label.value and f"window {WINDOW:,}" in b.label.value
    assert f"{FAILED} failed turns" in b.label.value and "over" not in b.label.value
    assert bytes(b.image.value).startswith(b"\x89PNG")
    assert c.figure is not None
    ax = c.figure.axes[0]
    lo, hi = ax.get_ylim()
    assert lo == 0 and max(WINDOW, c.max_tokens) <= hi <= 1.1 * WINDOW
    assert line(ax, TRIGGER_GID).get_ydata()[0] == TRIGGER and line(ax, WINDOW_GID).get_ydata()[0] == WINDOW
    assert max(line(ax, FULL_GID).get_ydata()) > 30 * hi  # drawn, cut off, not the axis
    assert len(next(m for m in ax.collections if m.get_gid() == FAILED_GID).get_segments()) == FAILED
    assert ax.get_title() == "Token usage — compact"


def test_token_budget_without_a_known_window_says_so() -> None:
    th = long_threads().null
    b = TokenBudget(th)
    c = b.controller
    assert c.trigger is None and c.window is None and c.over == 0
    assert "window unknown (pass context_window=)" in b.label.value and "trigger" not in b.label.value
    assert c.figure is not None
    ax = c.figure.axes[0]
    assert not line(ax, TRIGGER_GID).get_visible() and not line(ax, WINDOW_GID).get_visible()
    assert "trigger & window unknown" in [t.get_text() for t in ax.get_legend().get_texts()]
    # given a window: the calls over it are counted and red, the axis still follows what was sent
    b = TokenBudget(th, context_window=WINDOW)
    over = int((th.usage["context_tokens"] > WINDOW).sum())
    assert b.controller.over == over > 0 and f"{over} over the window ({WINDOW:,} tokens)" in b.label.value


def test_what_the_caller_says_wins_over_the_record() -> None:
    th = long_threads().compact
    mine = LLMCompactor(context_length=8000, trigger_fraction=0.5)
    c = BudgetController(th, manager=mine)
    assert (c.trigger, c.window) == (4000, 8000)
    c = BudgetController(th, context_window=5000)  # the model's window; the trigger is still recorded
    assert (c.trigger, c.window) == (TRIGGER, 5000)
    assert "tulip-nb-budget" in c.html()
