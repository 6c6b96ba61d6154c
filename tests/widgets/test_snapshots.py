"""Every widget's ``_repr_mimebundle_`` carries a static snapshot of its current view: what a
notebook read without a kernel (nbconvert, GitHub, nbviewer) shows. Thread content in it stays
text (a hostile thread's payloads are escaped)."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from tests.lab.hostile_threads import HOSTILE_ID, PAYLOADS, build_hostile_thread
from tests.lab.page_parse import Elements
from tulip_nb.lab import open_thread
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.testing import MessySpec, build_messy_thread
from tulip_nb.widgets import CompactionTuner, ReplayPlayer, ThreadBrowser, ThreadDiffView, TokenBudget

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _snapshot(widget: object) -> str:
    bundle = widget._repr_mimebundle_()  # type: ignore[attr-defined]
    assert WIDGET_VIEW in bundle  # the live view is still there for a frontend
    html = bundle["text/html"]
    (tag, attrs) = Elements(html).tags[0]
    assert tag == "div" and attrs["class"] == "tulip-nb-snapshot" and attrs["data-widget"] == type(widget).__name__
    assert html_lib.escape(repr(widget)) in html
    return str(html)


@pytest.fixture(scope="module")
def messy() -> tuple[MemoryCheckpointer, str, str]:
    cp = MemoryCheckpointer()
    truth = build_messy_thread(cp, "t", MessySpec(seed=6, turns=30, forks=1))
    return cp, "t", truth.forks[0].thread_id


def test_the_player_snapshot_follows_the_slider(messy: tuple[MemoryCheckpointer, str, str]) -> None:
    cp, tid, _ = messy
    player = ReplayPlayer(open_thread(cp, tid))
    n = player.slider.max + 1
    player.slider.value = 3
    assert f"model call 3 of {n}" in _snapshot(player)
    player.slider.value = n - 1
    html = _snapshot(player)
    assert f"model call {n - 1} of {n}" in html and f"model call 3 of {n}" not in html


def test_diff_tuner_budget_and_browser_snapshots(messy: tuple[MemoryCheckpointer, str, str]) -> None:
    cp, tid, fork_id = messy
    t = open_thread(cp, tid)
    assert "tulip-nb-diff" in _snapshot(ThreadDiffView(t, open_thread(cp, fork_id)))
    tuner = CompactionTuner(t, context_length=4000)
    tuner.context_length.value = 6000
    tuner.debouncer.flush()
    assert re.search(r"context_length=6_?000", _snapshot(tuner))
    assert "<img" in _snapshot(TokenBudget(t))
    assert fork_id in _snapshot(ThreadBrowser(cp))


def test_a_hostile_thread_stays_text_in_the_snapshots() -> None:
    cp = MemoryCheckpointer()
    build_hostile_thread(cp)
    t = open_thread(cp, HOSTILE_ID)
    for widget in (ReplayPlayer(t), ThreadBrowser(cp)):
        html = _snapshot(widget)
        for tag, attrs in Elements(html).tags:
            assert tag not in ("script", "iframe", "svg", "a", "meta", "style"), (tag, attrs)
            assert not any(k.startswith("on") for k in attrs), (tag, attrs)
    assert any(html_lib.escape(p) in _snapshot(ReplayPlayer(t)) for p in PAYLOADS)
