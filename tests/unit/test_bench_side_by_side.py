"""The side-by-side bench's plumbing (bench/research.py, bench/bench_conversation.py, bench/peers.py).

Figures are never asserted (2 noisy cores): what is checked is that the recorded workload is what
the agent saved, that "fresh" message objects really carry no cache, that the same-run ratios
and statuses are computed from the right rounds, and that the section runs end to end with no
peer installed (saying so) — the peers themselves run in another venv.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from bench import bench_conversation as bc
from bench.bench_openai_sessions import to_items
from bench.research import Research, record
from tulip_nb.core import Message


@pytest.fixture(scope="module")
def work() -> Research:
    return record(3)


def test_recorded_saves_grow_and_end_at_each_turn(work: Research) -> None:
    ns = [s.n for s in work.saves]
    assert all(b > a for a, b in itertools.pairwise(ns)), ns
    assert ns[-1] == len(work.messages)
    sources = [s.metadata.get("source") for s in work.saves]
    assert sources.count("final") == work.turns
    assert sources[-1] == "final"
    # the append-only steps add up to the thread, in order
    assert [m for step in work.steps() for m in step] == work.messages
    # a save's state is the recorded one: its other fields, and the thread's first n messages
    last = work.saves[-1]
    state = last.state(work.fresh_messages(last.n))
    assert [m.model_dump(mode="json") for m in state.messages] == work.messages
    assert state.run_id == last.metadata.get("run_id")


def test_fresh_messages_are_new_objects_with_no_cache(work: Research) -> None:
    a = work.fresh_messages()
    a[0].json_bytes()  # serialising one copy caches its bytes on that copy only
    b = work.fresh_messages()
    assert all(x is not y for x, y in zip(a, b, strict=True))
    assert [m.model_dump() for m in a] == [m.model_dump() for m in b]
    fields = set(Message.model_fields)
    assert all(set(m.__dict__) <= fields for m in b)
    assert set(a[0].__dict__) - fields  # the cache exists, where it was made


def test_items_follow_the_messages(work: Research) -> None:
    calls = sum(len(m.get("tool_calls") or []) for m in work.messages)
    items = [it for m in work.messages for it in to_items(m)]
    assert sum(1 for it in items if it.get("type") == "function_call") == calls
    assert sum(1 for it in items if it.get("type") == "function_call_output") == sum(
        1 for m in work.messages if m["role"] == "tool"
    )
    # a Message and its JSON dict give the same items
    assert to_items(Message.model_validate(work.messages[2])) == to_items(work.messages[2])


def test_status_against_a_target() -> None:
    assert bc.status(0.8, 1.0) == "met"
    assert bc.status(1.0, 1.0) == "met"
    assert bc.status(1.05, 1.0) == "missed by 5 %"
    assert bc.status(3.0, 1.5).startswith("missed (2.0")
    assert bc.status(None, 1.0) == "not measured"


def test_ratios_are_taken_round_by_round(work: Research, tmp_path: Path) -> None:
    def case(key: str, times: list[float], disk: int) -> bc.Case:
        c = bc.Case(key, key, tmp_path / key)
        c.times, c.disk_bytes, c.loads = times, disk, [0.01]
        return c

    n = len(work.saves)
    rounds = [
        {"a": case("a", [1.0] * n, 10), "b": case("b", [2.0] * n, 5)},
        {"a": case("a", [3.0] * n, 10), "b": case("b", [2.0] * n, 5)},
    ]
    o = bc.Outcome(work, rounds, 1, "none", 0.0)
    assert bc.ratios(o, "a", "b", "total") == [0.5, 1.5]
    assert bc.ratios(o, "a", "b", "disk") == [2.0, 2.0]
    assert bc.ratios(o, "a", "missing", "total") == []


@pytest.mark.slow
def test_section_runs_without_peers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_PEERS_PYTHON", raising=False)
    pytest.importorskip("tulip")
    import importlib.util

    if importlib.util.find_spec("agents") or importlib.util.find_spec("langgraph"):
        pytest.skip("the peers are installed here: this checks the path without them")
    o = bc.measure(tmp_path, 1, 1, sys.executable, turns=2)
    keys = list(o.rounds[0])
    assert bc.SESSION not in keys and bc.GRAPH not in keys
    assert {bc.HISTORY, bc.HISTORY_OFF, bc.TULIP, bc.FLOOR} <= set(keys)
    assert all(len(c.times) == len(o.work.saves) for c in o.rounds[0].values())
    text = "\n".join(bc.tables(o))
    assert "peers not measured" in text
    assert "SQLiteSession not measured" in text
