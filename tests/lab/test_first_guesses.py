"""First guesses in a notebook cell either work or say what was wrong.

Each test is one thing a researcher types on a long thread without reading the docs first: the
sync twin of an async thread operation, a view as an attribute, a URL for a checkpointer, a thread
id for the other side of a diff, one manager for a simulation, probes as a dict, sweep variants as
a list, a Thread for a plot, ``-1`` for the last call, a typo in a config, a model name for a token
counter; and the small display faults of the same issue (legend numbers, empty cells, axes,
layout, a slider that dropped what was typed).
"""

from __future__ import annotations

import asyncio
import io
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tulip_nb.core.errors import UserError
from tulip_nb.lab import (
    diff_threads,
    fork,
    open_thread,
    plot_sweep,
    plot_token_usage,
    simulate_compaction,
    summarize_simulation,
    sweep,
    threads,
    to_png,
)
from tulip_nb.lab.controllers import BrowserController, BudgetController, StepperController
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.compactor import LLMCompactor, SlidingWindowManager
from tulip_nb.models import ScriptedModel
from tulip_nb.tokens import TokenCounter

from ..widgets.conftest import make_stepping_agent
from .conftest import THREAD, Recorded, lookup_order, make_agent, make_reply, manager

PNG = b"\x89PNG\r\n\x1a\n"


# -- the agent's thread operations have sync twins --------------------------------------------------
def test_sync_twins_of_the_thread_operations(recorded: Recorded) -> None:
    agent = recorded.agent
    new = agent.fork_sync(THREAD, new_thread_id="t-fork")
    assert new == "t-fork"
    assert len(agent.get_state_sync("t-fork").messages) == len(recorded.thread.final_messages)
    history = agent.get_state_history_sync(THREAD, limit=3)
    assert len(history) == 3 and history[0].checkpoint_id == recorded.thread.checkpoint_ids[0]
    cid = agent.update_state_sync("t-fork", metadata={"note": "checked"})
    assert agent.get_state_sync("t-fork").metadata["note"] == "checked"
    assert agent.get_state_sync("t-fork", cid).metadata["note"] == "checked"


async def test_sync_twins_work_inside_a_running_loop(recorded: Recorded) -> None:
    """A notebook cell has a running loop: the twins must not need ``await`` there either."""
    assert recorded.agent.fork_sync(THREAD, new_thread_id="t-loop") == "t-loop"
    assert recorded.agent.get_state_sync("t-loop").messages


def test_an_unawaited_fork_is_refused_by_the_stepper(recorded: Recorded) -> None:
    coro = recorded.agent.fork(THREAD)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the coroutine is closed: no "never awaited" warning either
        with pytest.raises(UserError, match=r"you passed a coroutine: use agent\.fork_sync\(\.\.\.\) or await it"):
            StepperController(recorded.agent, "Go on.", thread_id=coro)  # type: ignore[arg-type]
        with pytest.raises(UserError, match="you passed a coroutine"):
            open_thread(recorded.cp, recorded.agent.fork(THREAD))
    assert list(threads(recorded.cp)["thread_id"]) == [THREAD]  # no new, empty thread


# -- Thread views are attributes --------------------------------------------------------------------
def test_thread_views_are_properties(recorded: Recorded) -> None:
    t = recorded.thread
    for name in ("usage", "events", "lineage", "messages", "checkpoints"):
        assert isinstance(getattr(t, name), pd.DataFrame), name
    assert [ck.checkpoint_id for ck in t.history] == t.checkpoint_ids[::-1]
    assert len(t.events) >= 1 and len(t.usage) == t.n_calls
    with_tools = t.usage_for([lookup_order.schema()])
    without = t.usage_for(None)
    extra = t.counter.count_tools([lookup_order.schema()])
    assert (with_tools["context_tokens"] - without["context_tokens"] == extra).all() and extra > 0
    # the thread's manager saved the schemas the agent sent: usage counts them unasked
    assert (t.usage["context_tokens"] == with_tools["context_tokens"]).all()


def test_model_view_takes_negative_indices(recorded: Recorded) -> None:
    t = recorded.thread
    n = t.n_calls
    assert t.model_view(-1) == t.model_view(n - 1)
    assert t.model_view(-n) == t.model_view(0)
    with pytest.raises(IndexError, match=f"{n} model calls"):
        t.model_view(-n - 1)
    with pytest.raises(IndexError):
        t.model_view(n)


# -- a URL wherever a checkpointer is taken ---------------------------------------------------------
def test_open_thread_and_threads_take_a_url(tmp_path: Path) -> None:
    agent = make_agent(FileCheckpointer(tmp_path))
    agent.run_sync("Please check ord-4800.", thread_id="t")
    t = open_thread(f"file://{tmp_path}", "t")
    assert isinstance(t.checkpointer, FileCheckpointer) and len(t.final_messages) == 5
    assert list(threads(f"file:{tmp_path}")["thread_id"]) == ["t"]
    browser = BrowserController(f"file:{tmp_path}")  # the ThreadBrowser's controller
    assert browser.ids == ["t"] and browser.open("t").checkpointer is browser.checkpointer
    with pytest.raises(UserError, match="unknown checkpointer URL scheme"):
        open_thread("nosuch://x", "t")


# -- the other side of a diff as a thread id --------------------------------------------------------
def test_diff_threads_takes_a_thread_id(recorded: Recorded) -> None:
    t = recorded.thread
    fork(t, at=3, edit="order ord-4800: lost", new_thread_id="t-fork")
    d = diff_threads(t, "t-fork")
    assert d.thread_b == "t-fork" and d.divergence_index == 3 and d.method == "lineage"


# -- the simulator: one manager, one dict, probes as a dict or texts, typos named --------------------
def test_simulate_one_manager_or_one_config_dict(recorded: Recorded) -> None:
    t = recorded.thread
    one = simulate_compaction(t, manager())
    assert list(one["config"].unique()) == [repr(manager())]
    assert one["compacted"].any()
    d = simulate_compaction(t, {"kind": "window", "window_size": 6})
    assert list(d["config"].unique()) == [repr(SlidingWindowManager(window_size=6))]
    listed = simulate_compaction(
        t, [{"kind": "compactor", "context_length": 1500}, SlidingWindowManager(window_size=6)]
    )
    assert listed["config"].nunique() == 2
    named = simulate_compaction(t, {"w": {"kind": "window", "window_size": 6}, "m": manager()})
    assert list(named["config"].unique()) == ["w", "m"]


def test_probes_as_a_dict_or_a_list_of_texts(recorded: Recorded) -> None:
    t = recorded.thread
    pairs = simulate_compaction(t, {"m": manager()}, probes=[("first", "ord-4800"), ("last", "ord-4807")])
    as_dict = simulate_compaction(t, {"m": manager()}, probes={"first": "ord-4800", "last": "ord-4807"})
    pd.testing.assert_frame_equal(pairs, as_dict)
    texts = simulate_compaction(t, {"m": manager()}, probes=["ord-4800", "ord-4807"])
    assert [c for c in texts.columns if c.startswith("probe: ")] == ["probe: ord-4800", "probe: ord-4807"]
    assert list(texts["probe: ord-4800"]) == list(pairs["probe: first"])
    with pytest.raises(UserError, match="non-empty text"):
        simulate_compaction(t, {"m": manager()}, probes={"empty": ""})


def test_a_typo_in_a_config_names_the_config_and_the_valid_keys(recorded: Recorded) -> None:
    t = recorded.thread
    with pytest.raises(UserError) as e:
        simulate_compaction(t, {"8k": {"kind": "compactor", "context_lenght": 8000}})
    msg = str(e.value)
    assert "config '8k'" in msg and "'context_lenght'" in msg and "did you mean 'context_length'" in msg
    assert "valid keys" in msg and "'trigger_fraction'" in msg and "LLMCompactor" in msg
    with pytest.raises(UserError, match=r"unknown key.*'window'.*valid keys: \['kind', 'model', 'token_counter'"):
        simulate_compaction(t, {"kind": "window", "window": 6})
    with pytest.raises(UserError, match="unknown kind 'compacter'"):
        simulate_compaction(t, {"kind": "compacter"})


# -- sweep variants as a list ---------------------------------------------------------------------
def test_sweep_takes_a_list_of_variants(recorded: Recorded) -> None:
    t = recorded.thread
    frame = sweep(
        t,
        at=3,
        agent=recorded.agent,
        prompt="And ord-4811?",
        variants=[{"system_prompt": "Be terse."}, {"model": ScriptedModel(make_reply("B"))}],
    )
    names = list(frame["variant"])
    assert names[0] == "0: system_prompt='Be terse.'" and names[1].startswith("1: model=")
    assert frame["error"].isna().all() and frame["final_answer"].str.contains("ord-4811").all()
    with pytest.raises(UserError, match="variant 0 must be a dict"):
        sweep(t, at=3, agent=recorded.agent, variants=["gpt-4o"])


# -- plots: a Thread, whole-number legends, a sensible axis, nothing cut off -------------------------
def test_plot_token_usage_takes_a_thread(recorded: Recorded) -> None:
    t = recorded.thread
    fig = plot_token_usage(t, trigger_tokens=1200)
    ax = fig.axes[0]
    assert ax.get_title() == f"Token usage — {THREAD}"
    assert list(ax.lines[1].get_ydata()) == list(t.usage["context_tokens"])
    assert to_png(fig).startswith(PNG)


def test_legend_numbers_are_whole_and_the_axis_starts_at_zero(recorded: Recorded) -> None:
    sim = simulate_compaction(recorded.thread, {"a": LLMCompactor(context_length=24_000), "w": SlidingWindowManager()})
    assert sim["trigger_tokens"].dtype.kind == "f"  # NaN for the window: the column is float
    fig = plot_token_usage(sim, "a")
    labels = [x.get_text() for x in fig.axes[0].get_legend().get_texts()]
    assert "trigger (19,200)" in labels and "window (24,000)" in labels
    assert fig.axes[0].get_ylim()[0] == 0


def test_token_budget_after_one_step_has_a_readable_axis() -> None:
    from tulip_nb.memory.backends._memory import MemoryCheckpointer

    stepper = StepperController(make_stepping_agent(MemoryCheckpointer()), "Refund ord-4800?", thread_id="t")
    stepper.step()
    budget = BudgetController(stepper)
    assert budget.rows == 1 and budget.png is not None and budget.png.startswith(PNG)
    fig = plot_token_usage(budget.frame(), trigger_tokens=budget.trigger, context_length=budget.window)
    fig.canvas.draw()
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert low == 0 and high >= max(budget.trigger or 0, budget.last_tokens)
    assert [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]] == [0]
    _inside(fig)


def test_sweep_labels_stay_inside_the_figure() -> None:
    names = [f"trigger {t:g} / tail {u:g}" for t in (0.6, 0.7, 0.8, 0.9, 0.95) for u in (0.2, 0.4)]
    names.append("a very long name " * 6)
    summary = pd.DataFrame(
        {"config": names, "saved_fraction": [0.3 + i / 1000 for i in range(11)], "facts_kept": [1.0] * 11}
    )
    fig = plot_sweep(summary)
    fig.canvas.draw()
    legend = fig.axes[0].get_legend()
    texts = [x.get_text() for x in legend.get_texts()]
    assert texts[0] == "1  trigger 0.6 / tail 0.2" and texts[-1].endswith("…") and len(texts[-1]) < 45
    _inside(fig)
    # the numbers of the points at (almost) the same place do not sit on each other
    marks = [a for a in fig.axes[0].texts]
    boxes = [a.get_window_extent() for a in marks]
    assert not any(boxes[i].overlaps(boxes[j]) for i in range(len(boxes)) for j in range(i))


def _inside(fig: Any) -> None:
    """Everything drawn (labels, ticks, legend, title) is inside the rendered PNG."""
    renderer = fig.canvas.get_renderer()
    drawn, box = fig.get_tightbbox(renderer), fig.bbox_inches
    assert box.x0 - 0.01 <= drawn.x0 and drawn.x1 <= box.x1 + 0.01, (drawn, box)
    assert box.y0 - 0.01 <= drawn.y0 and drawn.y1 <= box.y1 + 0.01, (drawn, box)


def test_figures_show_themselves_and_stay_out_of_pyplot(recorded: Recorded) -> None:
    import sys

    from IPython.core.formatters import DisplayFormatter

    fig = plot_token_usage(recorded.thread)
    data, _ = DisplayFormatter().format(fig)
    assert data["image/png"].startswith(PNG) and "Figure" in data["text/plain"]
    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # still a matplotlib Figure
    assert buf.getvalue().startswith(PNG) and fig.axes
    assert fig.canvas.manager is None  # pyplot gives every figure it tracks a manager
    if "matplotlib.pyplot" in sys.modules:  # another test imported it: ours are not registered there
        import matplotlib.pyplot as plt

        assert plt.get_fignums() == []


# -- small display faults of the widgets ------------------------------------------------------------
def test_thread_browser_shows_a_dash_for_no_parent(recorded: Recorded) -> None:
    fork(recorded.thread, at=3, new_thread_id="t-fork")
    html = BrowserController(recorded.cp).html()
    rows = {r.split("</code>")[0].rsplit(">", 1)[-1]: r for r in html.split("<tr")[2:]}
    assert "<td style='text-align:left'>—</td></tr>" in rows[THREAD]
    assert f"<td style='text-align:left'>{THREAD}</td></tr>" in rows["t-fork"] and "nan" not in html


async def test_window_size_typed_right_after_switching_kind_is_kept(recorded: Recorded) -> None:
    from tulip_nb.widgets import CompactionTuner

    tuner = CompactionTuner(recorded.thread, context_length=1500, debounce=0.05)
    tuner.kind.value = "window"
    # at once, not after the debounce: a disabled slider's readout drops what is typed into it
    assert not tuner.window_size.disabled and tuner.context_length.disabled
    tuner.window_size.value = 12
    await asyncio.sleep(0.2)
    assert tuner.controller.settings["window_size"] == 12
    assert tuner.copy_config() == "SlidingWindowManager(window_size=12)"


def test_tuner_takes_probes_as_a_dict(recorded: Recorded) -> None:
    from tulip_nb.lab.controllers import TunerController

    tuner = TunerController(recorded.thread, probes={"first order": "ord-4800"}, context_length=1500)
    assert tuner.probes == [("first order", "ord-4800")] and "first order" in tuner.probes_html()
    assert summarize_simulation(tuner.sim)["facts_kept"].iloc[0] >= 0


# -- imports and token counters -------------------------------------------------------------------
def test_checkpointer_from_url_is_exported_with_the_backends() -> None:
    import tulip_nb.memory.backends as backends
    from tulip_nb.memory.backends import checkpointer_from_url

    assert checkpointer_from_url("memory:").__class__.__name__ == "MemoryCheckpointer"
    assert list(backends.__all__) == sorted(backends.__all__) and "checkpointer_from_url" in backends.__all__
    for name in backends.__all__:
        assert hasattr(backends, name), name
    assert "S3Backend" in dir(backends) and "checkpointer_from_url" in dir(backends)


@pytest.mark.parametrize(
    ("name", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("openai:gpt-4o-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("cl100k_base", "cl100k_base"),
    ],
)
def test_token_counter_takes_a_model_name(name: str, encoding: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no estimate warning: the model's encoding is used
        counter = TokenCounter(name)
    assert counter.encoding == encoding and counter.exact and counter.count_text("hello world") == 2


def test_token_counter_refuses_a_name_it_does_not_know() -> None:
    with pytest.raises(UserError, match=r"TokenCounter\('o200k_bse'\): not an encoding .*get_counter\(model\)"):
        TokenCounter("o200k_bse")
