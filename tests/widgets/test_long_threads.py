"""A 300-turn thread in every widget: rows aligned by message, collapsed spans, bounded heights.

The thread is recorded by a real agent (offline model, a tool, an LLMCompactor with a summariser
and a small window, so compaction fires many times); the provider reuses the id ``call_0`` for
every tool call. Each test reads the controllers' HTML, no browser. The build and reaction times
of each widget are printed (``-s``) and checked with a wide margin (2 noisy cores).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from tulip_nb.agent import Agent
from tulip_nb.core._messages import Message
from tulip_nb.lab import Thread, fork, open_thread
from tulip_nb.lab.controllers import PlayerController, TunerController
from tulip_nb.lab.controllers._panels import plan_at
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import tool
from tulip_nb.widgets import CompactionTuner, ReplayPlayer, ThreadDiffView, TokenBudget

pytestmark = pytest.mark.slow  # a 300-turn thread is built for the module

TURNS = 300
MAX_HEIGHT = re.compile(r"max-height:(\d+)px;overflow:auto")


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order id, like ord-1042.
    """
    return f"order {order_id}: shipped <fragile> & insured. " + "tracking line. " * 12


def reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
    last = messages[-1]
    oid = re.search(r"ord-\d+", last.content or "")
    found = oid.group(0) if oid else "ord-0"
    if last.role == "user":
        return tool_call("lookup_order", call_id="call_0", order_id=found)  # ids reused, as some providers do
    return text(f"{found} has shipped.")


def summarize(messages: list[Message], previous: str | None) -> str:
    return f"<{len(messages)} earlier messages> about orders & refunds"


def record(cp: MemoryCheckpointer, thread_id: str, turns: int, tag: str = "") -> Agent:
    agent = Agent(
        ScriptedModel(reply),
        [lookup_order],
        system_prompt="You are a support agent.",
        checkpointer=cp,
        conversation_manager=LLMCompactor(
            context_length=6000, trigger_fraction=0.8, head_turns=1, summarize_fn=summarize, tool_output_ttl_turns=3
        ),
    )
    for i in range(turns):
        agent.run_sync(f"Turn {i}{tag}: where is ord-{1000 + i}?", thread_id=thread_id)
    return agent


@pytest.fixture(scope="module")
def long() -> Thread:
    cp = MemoryCheckpointer()
    record(cp, "long", TURNS)
    return open_thread(cp, "long")


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3


def bounded(html: str, limit: int = 900) -> bool:
    heights = [int(h) for h in MAX_HEIGHT.findall(html)]
    return bool(heights) and all(h <= limit for h in heights)


def test_player_rows_are_aligned_by_message_and_collapsed(long: Thread) -> None:
    c = PlayerController(long)
    c.seek(c.size - 1)
    history, marks, view = c.marks()
    rows = c.rows()
    assert len(history) == 4 * TURNS and len(rows) < 300  # 1,200 messages, far fewer rows
    # every message is in exactly one row, in order; every view position appears once, in order
    assert next(r.start for r in rows if r.kind != "summary") == 0
    spans = [(r.start, r.end) for r in rows if r.kind != "summary"]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)) and spans[-1][1] == len(history)
    assert [r.view_index for r in rows if r.view_index is not None] == list(range(len(view)))
    # alignment: a shown row's message is the one the model saw at that position
    for r in rows:
        if r.kind == "shown":
            assert r.view_index is not None and view[r.view_index] is history[r.start]
            assert marks[r.start] in ("kept", "pruned")
        elif r.kind == "stubbed":
            assert r.view_index is not None and history[r.start].role == "tool"
            assert view[r.view_index].content != history[r.start].content
        elif r.kind == "summary":
            assert r.view_index is not None and "earlier messages" in (view[r.view_index].content or "")
    # one collapsed row per consecutive span: no two neighbours of the same collapsed kind
    kinds = [r.kind for r in rows]
    assert not any(a == b and a in ("dropped", "summarised") for a, b in itertools.pairwise(kinds))
    plan = plan_at(long.latest.state, c._ends[-1])
    assert plan is not None and plan.summary is not None
    collapsed = [r for r in rows if r.kind in ("dropped", "summarised")]
    assert collapsed and sum(r.count for r in collapsed) == sum(marks.count(x) for x in ("dropped", "summarised"))
    big = max(collapsed, key=lambda r: r.count)
    assert big.count > 100 and big.tokens == sum(long.counter.count_message(m) for m in history[big.start : big.end])


def test_player_html_is_bounded_escaped_and_newest_first(long: Thread) -> None:
    p, build_ms = timed(lambda: ReplayPlayer(long))
    _, seek_ms = timed(lambda: setattr(p.slider, "value", p.slider.max))
    html = p.view.value
    rows = p.controller.rows()
    print(f"\nReplayPlayer, {TURNS} turns: build {build_ms:.0f} ms, seek to the last call {seek_ms:.0f} ms")
    assert bounded(html) and "<details>" in html
    assert html.count("<tr class=") == len(rows)
    big = max((r for r in rows if r.kind in ("dropped", "summarised")), key=lambda r: r.count)
    assert f"{big.count} messages {big.kind} · {big.tokens:,} tokens" in html
    assert "&lt;fragile&gt; &amp; insured" in html and "<fragile>" not in html  # escaped
    assert "summary</b> [Summary of the earlier conversation]" in html.replace("\n", " ")
    assert "&lt;" in html and "earlier messages&gt;" in html
    newest = html.index(f"Turn {TURNS - 1}:")
    assert newest < html.index(f"Turn {TURNS - 2}:")  # newest first
    assert "✔ shown as #" in html and "◐ stubbed as #" in html
    assert len(html) < 120_000  # times are printed (bench targets), never asserted
    p.mode.value = "checkpoints"
    assert bounded(p.view.value)


def test_tuner_table_is_bounded_and_redraws(long: Thread) -> None:
    tuner, build_ms = timed(lambda: CompactionTuner(long, context_length=4000, trigger_fraction=0.7, debounce=0))
    _, redraw_ms = timed(lambda: setattr(tuner.trigger_fraction, "value", 0.6))
    c = tuner.controller
    assert c.settings["trigger_fraction"] == 0.6
    frame = c.events_frame()
    html = tuner.table.value
    print(
        f"\nCompactionTuner, {TURNS} turns: build {build_ms:.0f} ms, redraw after a setting change {redraw_ms:.0f} ms"
    )
    assert bounded(html)
    shown = html.count("<tr>") - 1  # minus the header
    assert len(frame) > 40 and shown == 40 and f"{len(frame) - 40:,} more row" in html
    assert f"<td style='text-align:left'>{int(frame['call'].iloc[-1])}</td>" in html  # the newest rows are kept
    assert bounded(TunerController(long).html())


def test_budget_and_diff_of_two_long_branches(long: Thread) -> None:
    budget, budget_ms = timed(lambda: TokenBudget(long))
    assert budget.label.value.startswith(f"{2 * TURNS} calls")
    branch = fork(long, at=40 * 4, new_thread_id="long-branch")
    agent = record(long.checkpointer, "long-branch", 0)
    for i in range(60):
        agent.run_sync(f"Branch turn {i}: where is ord-{5000 + i}?", thread_id=branch.thread_id)
    view, diff_ms = timed(lambda: ThreadDiffView(long, open_thread(long.checkpointer, "long-branch")))
    html = view.view.value
    print(f"\nTokenBudget {budget_ms:.0f} ms; ThreadDiffView {diff_ms:.0f} ms ({len(html):,} chars of HTML)")
    assert bounded(html) and "more rows in .to_frame()" in html
    assert html.count("<tr style=") == 50


def test_shown_config_line_follows_the_sliders(long: Thread) -> None:
    tuner = CompactionTuner(long, context_length=4000, debounce=0)
    assert "context_length=4000" in tuner.copy_config()
    tuner.context_length.value = 6000
    assert "context_length=6000" in tuner.config.value


def test_checkpoint_mode_reads_headers_and_loads_only_the_checkpoint_shown(long: Thread) -> None:
    """Switching the player to checkpoints, and stepping through them, loads one state per
    checkpoint shown — never every state of the thread."""
    thread = open_thread(long.checkpointer, long.thread_id)
    assert len(thread.infos) > 100
    loads: list[str | None] = []
    cp = thread.checkpointer
    real = cp.load_checkpoint

    async def counting(thread_id: str, checkpoint_id: str | None = None) -> Any:
        loads.append(checkpoint_id)
        return await real(thread_id, checkpoint_id)

    cp.load_checkpoint = counting  # type: ignore[method-assign]
    try:
        player = ReplayPlayer(thread)
        player.mode.value = "checkpoints"
        assert "checkpoint 1 of" in player.view.value
        player.controller.seek(5)
        assert "checkpoint 6 of" in player.controller.html()
    finally:
        del cp.load_checkpoint  # type: ignore[method-assign]
    assert len(loads) <= 2, loads


def test_thread_browser_over_a_corpus_is_bounded() -> None:
    import asyncio

    from tulip_nb.core import AgentState
    from tulip_nb.lab.controllers import BrowserController
    from tulip_nb.lab.controllers._panels import BROWSER_ROWS

    cp = MemoryCheckpointer()

    async def fill() -> None:
        for t in range(BROWSER_ROWS + 50):
            await cp.save(AgentState(messages=[Message.user(f"case {t}")]), f"case-{t:03d}")

    asyncio.run(fill())
    b = BrowserController(cp)
    html = b.html()
    assert bounded(html) and html.count("<code>") == BROWSER_ROWS
    assert f"{BROWSER_ROWS + 50} of {BROWSER_ROWS + 50} threads" in html and "50 more rows" in html
    b.set_filter("case-00*")
    assert b.html().count("<code>") == 10 and "more rows" not in b.html()
