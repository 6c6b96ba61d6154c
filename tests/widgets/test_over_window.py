"""The lab and the widgets tell the truth about the window: every frame says which calls were sent
more than the model's window (``over_window``), the plots mark them red, TokenBudget counts them
instead of quoting the trigger, and the tuner's summary is not green while any call is over."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from tulip_nb.agent import Agent
from tulip_nb.core.errors import UserError
from tulip_nb.lab import Thread, open_thread, plot_token_usage, simulate_compaction, summarize_simulation
from tulip_nb.lab._plots import OVER_GID
from tulip_nb.lab.controllers import BudgetController, TunerController
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.memory.managers import NullManager, SlidingWindowManager
from tulip_nb.models import ScriptedModel
from tulip_nb.models.metadata import register_metadata
from tulip_nb.widgets import CompactionTuner, Stepper, TokenBudget

from ..lab.conftest import THREAD, TURNS, Recorded, lookup_order, make_agent, make_reply, manager

WINDOW = 1000
"""A window some calls of the simulated (uncompacted) thread exceed."""
SENT = 900
"""One the recorded calls (compacted to at most ~980 tokens) exceed, most of them."""


@pytest.fixture
def recorded() -> Recorded:
    """The lab tests' recorded thread (8 turns, a compacting agent)."""
    cp = MemoryCheckpointer()
    agent = make_agent(cp)
    for i in range(TURNS):
        agent.run_sync(f"Please check ord-48{i:02d} for the customer.", thread_id=THREAD)
    return Recorded(cp, agent, open_thread(cp, THREAD))


def over_calls(ax: object) -> np.ndarray | None:
    marks = [c for c in ax.collections if c.get_gid() == OVER_GID]  # type: ignore[attr-defined]
    return marks[0].get_offsets() if marks else None


def test_the_simulator_says_which_calls_were_over_the_window(recorded: Recorded) -> None:
    t = recorded.thread
    configs = {
        "null": NullManager(),
        "window 6": SlidingWindowManager(window_size=6),
        "compact 1500": manager(),
        "compact 300": LLMCompactor(context_length=300, head_turns=1),
    }
    sim = simulate_compaction(t, configs, context_window=WINDOW)
    assert set(sim["context_window"]) == {WINDOW}
    for _, row in sim.iterrows():
        if row["trigger"] != "window exceeded":
            assert row["over_window"] is (row["context_tokens"] > WINDOW)
    null = sim[sim["config"] == "null"]
    assert null["over_window"].any() and not null["over_window"].all()
    # without context_window= a compactor is bound by its context_length; others by the window
    # the thread's manager saved (1500) -- and with bare messages (nothing saved) it is unknown
    plain = simulate_compaction(t, configs)
    by = {name: g for name, g in plain.groupby("config")}
    assert set(by["null"]["context_window"]) == set(by["window 6"]["context_window"]) == {1500}
    assert list(by["null"]["over_window"]) == [bool(v > 1500) for v in by["null"]["context_tokens"]]
    assert set(by["compact 1500"]["context_window"]) == {1500} and not by["compact 1500"]["over_window"].any()
    bare = simulate_compaction(
        t.final_messages, {"null": NullManager(), "window 6": SlidingWindowManager(window_size=6)}
    )
    assert bare["over_window"].isna().all() and bare["context_window"].isna().all()
    unknown = summarize_simulation(bare)
    assert unknown["over_window_calls"].isna().all() and unknown["context_window"].isna().all()  # NA, never 0
    with pytest.raises(UserError, match="context_window="):
        summarize_simulation(bare, rank=True)
    # what must be kept cannot fit 300 tokens: the manager refuses, and the frame says so
    small = by["compact 300"]
    refused = small[small["trigger"] == "window exceeded"]
    assert len(refused) and refused["over_window"].all() and (refused["context_tokens"] > 300).all()
    summary = summarize_simulation(plain).set_index("config")
    assert summary.loc["compact 300", "over_window_calls"] == len(refused)
    assert summary.loc["null", "over_window_calls"] == int((by["null"]["context_tokens"] > 1500).sum()) > 0
    # the model's registered window, by name (for a sliding window, a null manager)
    name = f"tiny-{uuid.uuid4().hex[:8]}"
    register_metadata(name, context_window=WINDOW)
    named = simulate_compaction(t, {"null": NullManager()}, context_window=name)
    assert list(named["over_window"]) == list(null["over_window"])
    with pytest.raises(UserError, match="no window is registered"):
        simulate_compaction(t, {"null": NullManager()}, context_window="no-such-model-xyz")


def test_thread_usage_and_the_plot_mark_over_window_calls(recorded: Recorded) -> None:
    t = recorded.thread
    usage = t.usage_for(None, context_window=SENT)
    assert list(usage["over_window"]) == [bool(v > SENT) for v in usage["context_tokens"]]
    assert usage["over_window"].any()
    from tulip_nb.lab._window import saved_window

    saved = saved_window(t.latest.state)  # the window its manager saved with the thread, if any
    if saved is None:
        assert t.usage["over_window"].isna().all()
    else:
        assert list(t.usage["over_window"]) == [bool(v > saved) for v in t.usage["context_tokens"]]
    sim = simulate_compaction(t, {"null": NullManager()}, context_window=WINDOW)
    n_over = int(sim["over_window"].sum())
    assert n_over > 0
    ax = plot_token_usage(sim, "null").axes[0]
    offsets = over_calls(ax)
    assert offsets is not None and len(offsets) == n_over
    assert sorted(offsets[:, 0]) == sorted(sim.loc[sim["over_window"] == True, "call"])  # noqa: E712
    mark = next(c for c in ax.collections if c.get_gid() == OVER_GID)
    assert tuple(mark.get_facecolor()[0][:3]) == (1.0, 0.0, 0.0)  # red
    assert any("over the window" in text.get_text() for text in ax.get_legend().get_texts())
    # nothing over: no red marks
    fine = plot_token_usage(simulate_compaction(t, {"c": manager()}), "c").axes[0]
    assert over_calls(fine) is None
    # a frame without the column: the window it is drawn against decides
    plain = t.usage[["call", "full_tokens", "context_tokens", "compacted"]]
    again = over_calls(plot_token_usage(plain, context_length=SENT).axes[0])
    assert again is not None and len(again) == int(usage["over_window"].sum())


def test_token_budget_counts_calls_over_the_window_and_never_quotes_the_trigger(recorded: Recorded) -> None:
    t = recorded.thread
    ok = TokenBudget(t, manager=manager())
    assert "of the trigger (1,200)" in ok.label.value and "over" not in ok.label.value
    over = int((t.usage["context_tokens"] > SENT).sum())
    b = TokenBudget(t, manager=manager(), context_window=SENT)
    assert b.controller.over == over > 0
    assert f"{over} over the window (900 tokens)" in b.label.value
    assert "of the trigger" not in b.label.value and "%" not in b.label.value
    assert "tulip-nb-error" in b.controller.html() and "tulip-nb-error" in b.fallback_html()
    assert b.label.style.text_color == "#cf222e"
    assert bytes(b.image.value).startswith(b"\x89PNG")
    c = BudgetController(t, manager=manager(), context_window=SENT)
    frame = c.frame()
    assert list(frame["over_window"]) == [bool(v > SENT) for v in frame["context_tokens"]]


def test_token_budget_follows_a_stepper_over_the_window() -> None:
    cp = MemoryCheckpointer()
    agent = Agent(
        ScriptedModel(make_reply()),
        [lookup_order],
        system_prompt="You are a support agent.",
        checkpointer=cp,
        conversation_manager=NullManager(),
    )
    s = Stepper(agent, "Please check ord-4800.", thread_id="live")
    b = TokenBudget(s, context_window=300)
    s.step_button.click()
    assert b.controller.over == 0 and "over" not in b.label.value
    s.step_button.click()  # the tool result is in the request now: more than 300 tokens
    assert b.controller.over == 1 and "2 calls, 1 over the window (300 tokens)" in b.label.value


def _open(recorded: Recorded) -> Thread:
    return open_thread(recorded.cp, recorded.thread.thread_id)


def test_tuner_summary_is_red_while_calls_are_over_the_window(recorded: Recorded) -> None:
    t = _open(recorded)
    tuner = TunerController(t, kind="window", window_size=40, context_window=WINDOW)
    sim = tuner.sim
    assert sim is not None
    n_over = int(sim["over_window"].sum())
    assert n_over > 0 and tuner.summary["over_window_calls"] == n_over
    html = tuner.summary_html()
    assert "tulip-nb-error" in html and "tulip-nb-ok" not in html
    assert f"{n_over} of {len(sim)} calls over the 1,000-token window" in html
    offsets = over_calls(tuner._fig.axes[0])  # type: ignore[union-attr]
    assert offsets is not None and len(offsets) == n_over
    # a window that keeps every call under it: green again, and the red marks are gone
    tuner.update(window_size=4)
    assert tuner.summary["over_window_calls"] == 0 and "tulip-nb-ok" in tuner.summary_html()
    offsets = over_calls(tuner._fig.axes[0])  # type: ignore[union-attr]
    assert offsets is not None and len(offsets) == 0
    # a compactor whose window cannot hold what must be kept: red, with the count
    tuner.update(kind="compactor", context_length=300, head_turns=1)
    assert tuner.summary["over_window_calls"] > 0 and "tulip-nb-error" in tuner.summary_html()
    # a sliding window is bound by the window the thread's manager saved (1500 here) ...
    saved = TunerController(t, kind="window", window_size=40)
    assert saved.window == 1500 and "calls over the 1,500-token window" in saved.summary_html()
    # ... and with bare messages it is unknown unless said: not claimed either way
    unknown = TunerController(t.final_messages, kind="window", window_size=40)
    assert "model window unknown" in unknown.summary_html() and "tulip-nb-ok" not in unknown.summary_html()


def test_compaction_tuner_widget_shows_the_count(recorded: Recorded) -> None:
    w = CompactionTuner(_open(recorded), context_length=300, head_turns=1)
    assert "calls over the 300-token window" in w.summary.value and "tulip-nb-error" in w.summary.value
    w.context_length.value = 4000
    w.debouncer.flush()
    assert "tulip-nb-ok" in w.summary.value
    w.show_thread(_open(recorded))
    assert w.controller.context_window is None


def test_saved_thread_usage_knows_its_managers_window() -> None:
    """A thread run with a token-aware manager carries its window: ``Thread.usage`` marks calls."""
    from tulip_nb import Agent
    from tulip_nb.lab import open_thread
    from tulip_nb.memory.backends._memory import MemoryCheckpointer
    from tulip_nb.memory.compactor import LLMCompactor
    from tulip_nb.models import ScriptedModel, text

    cp = MemoryCheckpointer()
    agent = Agent(
        ScriptedModel([text("fine")], repeat_last=True),
        checkpointer=cp,
        conversation_manager=LLMCompactor(context_length=5_000),
    )
    for i in range(3):
        agent.run_sync(f"turn {i}", thread_id="w")
    usage = open_thread(cp, "w").usage
    assert list(usage["over_window"]) == [False, False, False]
    assert list(usage_with_small_window(cp)["over_window"]) == [True, True, True]


def usage_with_small_window(cp: object) -> object:
    from tulip_nb.lab import open_thread

    return open_thread(cp, "w").usage_for(None, context_window=5)  # type: ignore[arg-type]
