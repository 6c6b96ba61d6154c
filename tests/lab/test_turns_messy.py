"""Turns on generated messy threads: what the lab reads equals what the generator did.

The generator (:mod:`tulip_nb.testing._messy`) knows every turn's outcome (errors, context
overflow, ``max_iterations``, interrupts answered or left pending, tulip-written turns, forks that
change the system prompt or a tool). ``Thread.turns``, the ``turn`` columns and the corpus summary's
outcome counts must agree with it exactly, on small generated threads, on a 300-turn thread and on
a corpus.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import examples
from tulip_nb.core.turns import OUTCOMES
from tulip_nb.lab import open_corpus, open_thread
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.testing import MessySpec, MessyThread, build_messy_corpus, build_messy_thread, messy_specs


def _check(cp: MemoryCheckpointer, truth: MessyThread) -> None:
    th = open_thread(cp, truth.thread_id)
    turns = th.turn_list
    where = truth.thread_id
    assert len(turns) == len(truth.turns), where
    for got, want in zip(turns, truth.turns, strict=True):
        at = f"{where} turn {want.index}"
        assert got.outcome == want.outcome, at
        assert got.first == want.start and got.last == want.end - 1, at
        assert got.model_calls == want.model_calls, at
        assert got.tool_calls == len(want.tool_calls), at
        assert got.error_class == want.error, at
    frame = th.turns
    assert dict(frame["outcome"].value_counts()) == {k: v for k, v in truth.outcome_counts().items() if v}, where
    calls = th.usage.groupby("turn").size()
    assert {int(k): int(v) for k, v in calls.items()} == {t.index: t.model_calls for t in truth.turns if t.model_calls}


@settings(max_examples=examples(0.12), suppress_health_check=[HealthCheck.too_slow])
@given(spec=messy_specs(min_turns=5, max_turns=30))
def test_turns_equal_the_generators_on_messy_threads(spec: MessySpec) -> None:
    cp = MemoryCheckpointer()
    main = build_messy_thread(cp, "t", spec)
    for truth in main.threads():
        _check(cp, truth)


@pytest.mark.slow
def test_a_300_turn_messy_thread() -> None:
    cp = MemoryCheckpointer()
    spec = MessySpec(seed=7, turns=300, forks=2, error_rate=0.04, context_rate=0.02, max_iterations_rate=0.02)
    main = build_messy_thread(cp, "long", spec)
    counts = main.outcome_counts()
    assert all(counts[o] > 0 for o in OUTCOMES), counts  # every kind of turn is in there
    for truth in main.threads():
        _check(cp, truth)


def test_corpus_summary_counts_outcomes_as_generated() -> None:
    cp = MemoryCheckpointer()
    made = build_messy_corpus(cp, 40, MessySpec(seed=3, turns=12, forks=1))
    truth = {t.thread_id: t for m in made for t in m.threads()}
    summary = open_corpus(cp).summary().set_index("thread_id")
    assert set(summary.index) == set(truth)
    for tid, t in truth.items():
        row = summary.loc[tid]
        counts = t.outcome_counts()
        assert row["turns"] == len(t.turns), tid
        assert row["turns_unknown"] == 0, tid
        for o in OUTCOMES:
            assert row[f"turns_{o}"] == counts[o], (tid, o)
        assert row["failed_turns"] == sum(
            counts[o] for o in ("error", "context_exceeded", "max_iterations", "interrupted")
        )
