"""The simulator on generated messy threads: simulating the configuration a thread ran, with no
arguments but the thread, reproduces what it recorded — every compaction at its call, every view's
size, every fact kept — whatever its failed turns, interrupts, tulip-written turns and forks.

The thread's manager saved its settings, its summariser's import path and the tool schemas the
agent sent, so nothing has to be handed over.

Not covered (a known limit, in ``simulate_compaction``'s docstring): the generator's forks, which
change the system prompt or a tool. The simulator runs every call with the fork's prompt and tool
schemas, while the fork's inherited calls ran with the source's and the agent re-planned at the
branch point."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import examples
from tulip_nb.lab import open_thread, simulate_compaction
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.testing import MessySpec, MessyThread, build_messy_thread, messy_specs


def _same_as_recorded(cp: MemoryCheckpointer, thread_id: str) -> None:
    th = open_thread(cp, thread_id)
    sim = simulate_compaction(th)
    assert set(sim["summarizer"]) <= {"callable"}, thread_id  # keep_facts, re-imported by name
    ours = th.usage[th.usage["context_tokens"].notna()]
    ours = ours[[th.turn_list[t].outcome != "tulip" for t in ours["turn"]]]
    recorded = {c for c, hit in zip(th.usage["call"], th.usage["compacted"], strict=True) if hit is True}
    simulated = {c for c, hit in zip(sim["call"], sim["compacted"], strict=True) if hit is True}
    assert simulated == recorded, thread_id  # tulip's calls record no compaction, and none is simulated
    sent = dict(zip(sim["call"], sim["context_tokens"], strict=True))
    assert {int(c): int(sent[c]) for c in ours["call"]} == {
        int(c): int(v) for c, v in zip(ours["call"], ours["context_tokens"], strict=True)
    }, thread_id


@settings(max_examples=examples(0.05), suppress_health_check=[HealthCheck.too_slow])
@given(spec=messy_specs(min_turns=8, max_turns=16, max_forks=1, managers=("compactor",)))
def test_the_recorded_config_reproduces_the_record(spec: MessySpec) -> None:
    cp = MemoryCheckpointer()
    main = build_messy_thread(cp, "t", spec)
    for truth in _simulable(main.threads()):
        _same_as_recorded(cp, truth.thread_id)


def _simulable(threads: list[MessyThread]) -> list[MessyThread]:
    return [t for t in threads if t.forked is None]


@pytest.mark.slow
def test_the_recorded_config_reproduces_a_300_turn_messy_thread() -> None:
    cp = MemoryCheckpointer()
    main = build_messy_thread(cp, "long", MessySpec(seed=11, turns=300, forks=2))
    th = open_thread(cp, "long")
    assert len(th.events) > 10  # it compacted many times
    assert len(main.threads()) == 3 and len(_simulable(main.threads())) == 1
    for truth in _simulable(main.threads()):
        _same_as_recorded(cp, truth.thread_id)
