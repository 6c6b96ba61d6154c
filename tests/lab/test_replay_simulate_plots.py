"""Replay (zero model calls, divergence, go_live lineage), the compaction simulator, plots."""

from __future__ import annotations

import pandas as pd
import pytest

from tulip_nb.agent import Agent
from tulip_nb.core.errors import UserError
from tulip_nb.lab import (
    Replay,
    compaction_grid,
    diff_threads,
    plot_composition,
    plot_sweep,
    plot_token_usage,
    simulate_compaction,
    to_png,
)
from tulip_nb.memory.compactor import EVENTS_KEY, NullManager, SlidingWindowManager
from tulip_nb.models import ReplayModel, ScriptedModel
from tulip_nb.tools import tool

from .conftest import THREAD, RaisingModel, Recorded, lookup_order, make_reply, manager

PNG = b"\x89PNG\r\n\x1a\n"


def _bytes(msgs: list) -> list[bytes]:
    return [m.json_bytes() for m in msgs]


def test_replay_reaches_the_identical_state_without_model_calls(recorded: Recorded) -> None:
    t = recorded.thread
    model = RaisingModel()
    agent = Agent(model, [lookup_order], conversation_manager=manager())
    r = Replay(t, agent=agent)
    assert r.step() is not None and len(r.steps) == 1
    final = r.run_to()
    assert final is not None and model.calls == 0
    assert _bytes(final.messages) == _bytes(t.final_messages)
    assert final.metadata[EVENTS_KEY] == t.state().metadata[EVENTS_KEY]  # same compactions, same views
    assert r.model.calls == r.total_steps == t.n_calls and r.model.divergences == []
    assert r.divergences.empty and r.done and r.step() is None
    # recorded tool results, no agent at all
    r2 = Replay(t, tools="recorded")
    assert _bytes(r2.run_to().messages) == _bytes(t.final_messages)  # type: ignore[union-attr]
    assert ReplayModel(t).remaining == t.n_calls
    with pytest.raises(UserError, match="outside"):
        r2.run_to(10_000)


def test_replay_reports_a_different_tool_result(recorded: Recorded) -> None:
    @tool(name="lookup_order")
    def changed(order_id: str) -> str:
        """Look an order up.

        Args:
            order_id: The order id, like ord-4821.
        """
        return f"order {order_id}: lost in transit"

    r = Replay(recorded.thread, agent=Agent(RaisingModel(), [changed], conversation_manager=manager()))
    r.run_to(1)
    div = r.divergences
    assert list(div["kind"]) == ["tool result"] and div["step"][0] == 0
    assert div["actual"][0].endswith("lost in transit")


def test_go_live_at_step_k_creates_a_branch_pointing_at_k(recorded: Recorded) -> None:
    t = recorded.thread
    k = 7  # after the tool call of turn 4 (its result is the last message)
    r = Replay(t, agent=Agent(RaisingModel(), [lookup_order], conversation_manager=manager()))
    r.run_to(k)
    assert r.current is not None and r.current.messages[-1].role == "tool"
    n = len(r.current.messages)
    live = r.go_live(model=ScriptedModel(make_reply("Live")), new_thread_id="live-branch")
    assert live.result is not None and live.result.text.startswith("Live:")
    b = live.thread()
    meta = b.infos[-1].metadata
    assert meta["forked_from"] == THREAD and meta["replay_step"] == k
    assert meta["parent_checkpoint_id"] == live.parent_checkpoint_id == t.checkpoints["id"][2]
    d = diff_threads(t, b)
    assert d.method == "lineage" and d.ancestor == (THREAD, live.parent_checkpoint_id)
    assert d.divergence_call == k and d.divergence_index == n
    # an edited tool result diverges at that message
    r2 = Replay(t, agent=Agent(RaisingModel(), [lookup_order], conversation_manager=manager()))
    r2.run_to(k)
    live2 = r2.go_live(model=ScriptedModel(make_reply("Edited")), edit="order ord-4803: refunded")
    d2 = diff_threads(t, live2.thread())
    assert d2.divergence_index == n - 1 and d2.divergence_call == k
    assert d2.changes[0].details == ["tool result changed"]
    with pytest.raises(UserError, match="step"):
        Replay(t).go_live(model=ScriptedModel(["x"]))


def test_simulator_matches_the_recorded_compaction_events(recorded: Recorded) -> None:
    t = recorded.thread
    events = t.state().metadata[EVENTS_KEY]
    assert len(events) >= 2
    sim = simulate_compaction(t, {"same": manager()}, tools=[lookup_order], probes=[("first", "ord-4800")])
    fired = sim[sim["compacted"]]
    assert list(fired["call"]) == [e["call"] for e in events]
    assert list(fired["tokens_before"]) == [e["tokens_before"] for e in events]
    assert list(fired["tokens_after"]) == [e["tokens_after"] for e in events]
    assert list(fired["iteration"]) == [e["iteration"] for e in events]
    assert list(fired["context_tokens"]) == [e["tokens_after"] for e in events]
    # per call, what the simulator says the model saw == the views rebuilt from the recorded events
    usage = t.usage_for([lookup_order.schema()])
    assert list(sim["context_tokens"]) == list(usage["context_tokens"])
    assert list(sim["full_tokens"]) == list(usage["full_tokens"])
    # the fast path agrees with sending every call to the manager
    slow = simulate_compaction(t, {"same": manager()}, tools=[lookup_order], probes=[("first", "ord-4800")], exact=True)
    pd.testing.assert_frame_equal(sim, slow)
    assert sim["probe: first"].map(bool).all()  # in the protected head turn: always seen
    mid = simulate_compaction(t, {"same": manager()}, tools=[lookup_order], probes=[("mid", "ord-4802")])
    probe = list(mid["probe: mid"])
    assert all(v is None or v != v for v in probe[:4])  # not said yet (turn 3 starts at call 4)
    assert probe[4] is True or bool(probe[4])
    assert not bool(probe[-1])  # compacted away by the end


def test_simulator_configs_and_grid(recorded: Recorded) -> None:
    t = recorded.thread
    sim = simulate_compaction(
        t,
        {
            "null": NullManager(),
            "window": SlidingWindowManager(window_size=6),
            "dict": {"kind": "compactor", "context_length": 1200, "summarize_fn": lambda m, p: "real summary"},
        },
    )
    null = sim[sim["config"] == "null"]
    assert not null["compacted"].any() and (null["context_tokens"] == null["full_tokens"]).all()
    win = sim[sim["config"] == "window"]
    assert win["compacted"].any() and (win["trigger"].dropna() == "window").all()
    summ = sim[sim["config"] == "dict"]
    assert (summ["summary_tokens"] > 0).any() and set(summ["summarizer"]) == {"callable"}  # the config's own ran
    length = simulate_compaction(t, {"dict": {"kind": "compactor", "context_length": 1200}}, summarizer="length")
    assert set(length["summarizer"]) == {"length"} and (length["summary_tokens"] > 0).any()  # said, and labelled
    exact = simulate_compaction(t, {"window": SlidingWindowManager(window_size=6)}, exact=True)
    cols = ["call", "context_tokens", "compacted", "tokens_after", "kept_tokens", "dropped_tokens"]
    pd.testing.assert_frame_equal(win.reset_index(drop=True)[cols], exact[cols], check_dtype=False)
    grid = compaction_grid(
        t,
        context_length=1500,
        trigger_fractions=(0.6, 0.9),
        tail_token_fractions=(0.3, 0.5),
        probes=[("last", "ord-4807")],
    )
    assert len(grid) == 4 and set(grid["trigger_fraction"]) == {0.6, 0.9}
    assert (grid["tokens_saved"] > 0).all() and grid["facts_kept"].between(0, 1).all()
    with pytest.raises(UserError, match="unknown kind"):
        simulate_compaction(t, {"x": {"kind": "magic"}})


def test_plots_render_to_png_without_a_display(recorded: Recorded) -> None:
    sim = simulate_compaction(recorded.thread, {"a": manager(), "b": NullManager()}, tools=[lookup_order])
    fig = plot_token_usage(sim, "a")
    gids = [line.get_gid() for line in fig.axes[0].lines]
    assert "trigger" in gids and "window" in gids
    trigger = next(line for line in fig.axes[0].lines if line.get_gid() == "trigger")
    assert trigger.get_ydata()[0] == manager().trigger_tokens
    assert to_png(fig).startswith(PNG)
    assert to_png(plot_composition(sim, "a")).startswith(PNG)
    grid = compaction_grid(recorded.thread, context_length=1500, trigger_fractions=(0.7,), tail_token_fractions=(0.4,))
    assert to_png(plot_sweep(grid)).startswith(PNG)
    assert to_png(plot_token_usage(recorded.thread.usage, trigger_tokens=1200)).startswith(PNG)
    with pytest.raises(UserError, match="configs"):
        plot_token_usage(sim)
    import matplotlib

    assert matplotlib.get_backend().lower() == "agg" or "pyplot" not in __import__("sys").modules
