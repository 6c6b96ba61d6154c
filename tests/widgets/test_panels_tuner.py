"""ThreadBrowser, ReplayPlayer, CompactionTuner, ThreadDiffView and ExportPanel, driven headless."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from tulip_nb.agent import Agent
from tulip_nb.lab import fork, open_thread
from tulip_nb.lab.controllers import TunerController
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.widgets import CompactionTuner, ExportPanel, ReplayPlayer, ThreadBrowser, ThreadDiffView, TokenBudget

from ..lab.conftest import RaisingModel, lookup_order, manager

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def saved(agent: Agent, cp: MemoryCheckpointer) -> MemoryCheckpointer:
    for i in range(6):
        agent.run_sync(f"Please check ord-48{i:02d} for the customer.", thread_id="ticket-1")
    agent.run_sync("Please check ord-5000.", thread_id="other")
    return cp


def test_browser_filters_and_opens_a_thread_in_linked_widgets(saved: MemoryCheckpointer) -> None:
    player = ReplayPlayer(open_thread(saved, "other"))
    budget = TokenBudget(open_thread(saved, "other"))
    opened: list[str] = []
    b = ThreadBrowser(saved, open_in=[player, budget])
    b.on_open(lambda t: opened.append(t.thread_id))
    assert b.select.options == ("other", "ticket-1") and "2 of 2 threads" in b.table.value
    assert "<code>ticket-1</code>" in b.table.value
    b.filter.value = "ticket-*"
    assert b.select.options == ("ticket-1",) and "1 of 2 threads matching ticket-*" in b.table.value
    b.filter.value = "OTH"  # a substring, case-insensitive
    assert b.select.options == ("other",)
    b.filter.value = ""
    b.select.value = "ticket-1"
    assert opened == ["ticket-1"] and "opened <code>ticket-1</code> in 2 widgets" in b.status.value
    assert player.controller.thread.thread_id == "ticket-1" and player.slider.max == 11
    assert budget.label.value.startswith("12 calls")
    assert "tulip-nb-summary" in b.table.value  # the chosen row is marked
    assert "ticket-1" in b._repr_mimebundle_()["text/html"]


def test_player_marks_what_the_model_saw_and_replays(saved: MemoryCheckpointer) -> None:
    t = open_thread(saved, "ticket-1")
    model = RaisingModel()
    p = ReplayPlayer(t, agent=Agent(model, [lookup_order], conversation_manager=manager()))
    assert p.slider.max == t.n_calls - 1 and "model call 0 of 12" in p.view.value
    p.slider.value = p.slider.max
    view = t.model_view(t.n_calls - 1)
    assert f"{len(view)} messages sent of" in p.view.value
    assert "dropped" in p.view.value and "tulip-nb-dropped" in p.view.value  # the compactor dropped some
    assert "identical to the record so far" in p.view.value and model.calls == 0
    assert len(p.controller.replay.steps) == t.n_calls  # type: ignore[union-attr]
    p.prev_button.click()
    assert p.slider.value == p.slider.max - 1
    p.mode.value = "checkpoints"
    assert p.slider.description == "checkpoint" and p.slider.max == len(t.infos) - 1
    assert "checkpoint 1 of" in p.view.value
    assert p.get_state()["_view_name"] == "VBoxView"


def test_player_shows_where_a_replay_diverged(saved: MemoryCheckpointer) -> None:
    from tulip_nb.tools import tool

    @tool(name="lookup_order")
    def changed(order_id: str) -> str:
        """Look an order up.

        Args:
            order_id: The order id, like ord-4821.
        """
        return f"order {order_id}: lost in transit"

    p = ReplayPlayer(open_thread(saved, "ticket-1"), agent=Agent(RaisingModel(), [changed]))
    p.next_button.click()
    assert "the replay diverged at step 0" in p.view.value and "lost in transit" in p.view.value


def test_tuner_sliders_resimulate_and_copy_config(saved: MemoryCheckpointer) -> None:
    t = open_thread(saved, "ticket-1")
    tuner = CompactionTuner(t, probes=[("first order", "ord-4800")], context_length=1500, head_turns=1)
    first_png = bytes(tuner.image.value)
    assert first_png.startswith(PNG) and "compactions" in tuner.summary.value
    before = tuner.summary.value
    tuner.trigger_fraction.value = 0.5
    assert tuner.controller.settings["trigger_fraction"] == 0.5
    assert tuner.summary.value != before and bytes(tuner.image.value) != first_png
    assert "redrawn in" in tuner.timing.value
    assert tuner.tail_token_fraction.max == 0.45 and tuner.tail_token_fraction.value == 0.45  # clamped below trigger
    tuner.copy_button.click()
    # every LLMCompactor setting is in the line (the thread ran without a summariser: none here)
    line = (
        "LLMCompactor(context_length=1500, trigger_fraction=0.5, head_turns=1, tail_token_fraction=0.45, "
        "tool_output_ttl_turns=10)"
    )
    assert line in tuner.config.value
    assert "first order" in tuner.probes.value and "<th>dropped</th>" in tuner.table.value
    tuner.kind.value = "window"
    assert tuner.context_length.disabled and not tuner.window_size.disabled
    tuner.window_size.value = 6
    assert tuner.copy_config() == "SlidingWindowManager(window_size=6)"
    assert tuner.controller.summary["compactions"] > 0
    # moving back is served from the cache
    tuner.kind.value = "compactor"
    assert tuner.controller.timings[-1]["cached"] and "cached" in tuner.timing.value
    assert line in tuner._repr_mimebundle_()["text/html"]
    # the config line builds what was simulated
    from tulip_nb.memory.compactor import LLMCompactor  # noqa: F401  (used by eval)
    from tulip_nb.memory.managers import SlidingWindowManager  # noqa: F401

    built = eval(tuner.copy_config())
    assert (built.context_length, built.trigger_fraction, built.head_turns) == (1500, 0.5, 1)
    # with no settings given it starts from what the thread saved
    plain = CompactionTuner(t)
    assert (plain.context_length.value, plain.head_turns.value, plain.trigger_fraction.value) == (1500, 1, 0.8)
    assert plain.summarizer.value == "none" and plain.tool_output_ttl_turns.value == 10


async def test_tuner_debounces_slider_changes_inside_a_running_loop(saved: MemoryCheckpointer) -> None:
    tuner = CompactionTuner(open_thread(saved, "ticket-1"), context_length=1500, debounce=0.05)
    n = len(tuner.controller.timings)
    for cl in (2000, 3000, 4000):
        tuner.context_length.value = cl
    assert len(tuner.controller.timings) == n  # nothing yet: coalescing
    await asyncio.sleep(0.2)
    assert len(tuner.controller.timings) == n + 1 and tuner.controller.settings["context_length"] == 4000


@pytest.mark.slow
def test_tuner_redraw_time_on_a_2000_message_thread() -> None:
    """The budget is ~200 ms per change on a 2000-message thread (compactor settings): a target
    for the bench, printed here, never asserted (2 noisy cores); what is asserted is that a
    setting seen before is served from the cache."""
    from bench.workload import build_conversation

    msgs = build_conversation(2000)
    tuner = TunerController(msgs, context_length=64_000)
    for tf in (0.6, 0.7, 0.75, 0.85, 0.9):
        tuner.update(trigger_fraction=tf)
    for cl in (48_000, 96_000, 128_000):
        tuner.update(context_length=cl)
    tuner.update(context_length=64_000, trigger_fraction=0.6)  # cached
    cold = [t["total_ms"] for t in tuner.timings[1:] if not t["cached"]]
    cached = [t["total_ms"] for t in tuner.timings if t["cached"]]
    print(f"tuner redraw, 2000 messages: median {statistics.median(cold):.0f} ms, cached {cached[0]:.0f} ms")
    assert cold and cached, "both fresh and cached redraws were made"
    tuner.update(trigger_fraction=0.6)
    assert tuner.timings[-1]["cached"], "a setting seen before is not simulated again"


def test_diff_view_defaults_to_a_fork_and_can_pick_threads(saved: MemoryCheckpointer) -> None:
    t = open_thread(saved, "ticket-1")
    fork(t, at=3, edit="order ord-4800: lost", new_thread_id="ticket-1-what-if")
    d = ThreadDiffView(t)
    assert d.b.value == "ticket-1-what-if" and "diverge at message 3" in d.view.value
    assert "by lineage" in d.view.value and "tool result changed" in d.view.value
    d.b.value = "other"
    assert "other" in d.view.value and "aligned by content" in d.view.value
    d.show_thread(open_thread(saved, "ticket-1-what-if"))
    assert d.a.value == "ticket-1-what-if"
    assert "tulip-nb-diff" in d._repr_mimebundle_()["text/html"]


def test_export_panel_dry_run_then_export_with_progress_and_report(saved: MemoryCheckpointer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    e = ExportPanel(saved, dest=f"file:{tmp_path / 'out'}")
    assert e.threads.value == ("other", "ticket-1")
    e.threads.value = ("ticket-1",)
    assert "1 of 2 threads selected" in e.report.value
    e.dry_button.click()
    assert "dry run: would copy 12 checkpoints of 1 threads" in e.report.value
    assert "would write ~" in e.report.value and "history" in e.report.value  # the cost, for its layout
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.json"))
    e.export_button.click()
    assert "copied 12 checkpoints of 1 threads, 0 already there; verified" in e.report.value
    assert e.progress.value == e.progress.max == 1 and e.progress_label.value == "1/1: ticket-1"
    e.export_button.click()  # again: nothing duplicated
    assert "copied 0 checkpoints of 1 threads, 12 already there; verified" in e.report.value
    e.dest.value = ""
    e.export_button.click()
    assert "choose a destination" in e.report.value
