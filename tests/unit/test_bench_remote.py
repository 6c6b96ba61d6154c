"""The remote and export400 sections' plumbing (bench/bench_stores.py, bench/bench_export.py).

Figures are never asserted (2 noisy cores): what is checked is that ``layout=`` is passed only to a
factory that takes it, that the marks are the turn ends of a third, two thirds and all of the
turns, that the table's ratios, growth and fork/copy cells come from the right rounds, and that
the 400-turn thread has the checkpoints it says.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bench import bench_stores as bs
from bench.bench_export import build_400
from bench.research import Research, record
from tulip_nb.memory.backends import FileCheckpointer


@pytest.fixture(scope="module")
def work() -> Research:
    return record(6)


def test_layout_is_passed_only_to_a_factory_that_takes_it() -> None:
    def old(dsn: str = "", **kwargs: Any) -> None: ...

    def new(dsn: str = "", *, layout: str = "history", **kwargs: Any) -> None: ...

    assert bs.layout_kwargs(old, "tulip") == {} and not bs.takes_layout(old)
    assert bs.layout_kwargs(new, "tulip") == {"layout": "tulip"} and bs.takes_layout(new)
    assert bs.layout_kwargs(new, None) == {}
    assert bs.nb_label("Redis", "history")[1] == '**tulip_nb** `layout="history"`'
    assert "whole state per checkpoint" in bs.nb_label("S3", None)[1]


def test_marks_are_turn_ends(work: Research) -> None:
    at = bs.marks(work)
    assert sorted(at) == [2, 4, 6]
    ends = [i for i, s in enumerate(work.saves) if s.metadata.get("source") == "final"]
    assert [at[2], at[4], at[6]] == [ends[1], ends[3], ends[5]] and at[6] == len(work.saves) - 1


def _case(work: Research, key: str, store: str, per_save: float, held: dict[int, int], fork: float | None) -> bs.Case:
    c = bs.Case(key, key, store, work)
    c.times = [per_save] * len(work.saves)
    c.held = held
    if fork is not None:
        c.fork_s = {2: fork, 6: 3 * fork}
    return c


def test_table_cells_come_from_each_round(work: Research) -> None:
    at = bs.marks(work)
    n = len(work.saves)
    rounds = [
        {
            bs.GRAPH: _case(work, bs.GRAPH, "PostgreSQL", 1.0, {2: 100, 4: 200, 6: 300}, 0.01),
            "tulip_nb PostgreSQL": _case(
                work, "tulip_nb PostgreSQL", "PostgreSQL", 2.0, {2: 1000, 4: 4000, 6: 9000}, None
            ),
        },
        {
            bs.GRAPH: _case(work, bs.GRAPH, "PostgreSQL", 1.0, {2: 100, 4: 200, 6: 300}, 0.01),
            "tulip_nb PostgreSQL": _case(
                work, "tulip_nb PostgreSQL", "PostgreSQL", 4.0, {2: 1000, 4: 4000, 6: 9000}, None
            ),
        },
    ]
    o = bs.Outcome(work, rounds, at, {2: 100, 4: 200, 6: 300}, "none", [], ("history",), 0.0)
    assert bs.per_round(o, "tulip_nb PostgreSQL", lambda c: sum(c.times)) == [2.0 * n, 4.0 * n]
    row = next(line for line in bs.tables(o) if line.startswith("| PostgreSQL | tulip_nb"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2] == f"{3.0 * n:.2f}"  # the median of the two rounds' totals
    assert cells[3] == "3.00\u00d7"  # ÷ LangGraph, round by round (2 and 4), median 3
    assert cells[6] == "10.0\u00d7 / 20.0\u00d7 / 30.0\u00d7"  # ÷ the messages' JSON at each mark
    assert cells[7] == "9.0\u00d7"  # growth from the first mark to the last
    graph = next(line for line in bs.tables(o) if line.startswith("| PostgreSQL | LangGraph"))
    assert "10.0 / 30.0 (3.0\u00d7)" in graph  # fork at both marks, and their ratio


def test_the_long_export_thread_has_the_checkpoints_it_says(tmp_path: Path) -> None:
    facts = asyncio.run(build_400(tmp_path / "src", turns=12, checkpoints=30))
    assert facts["turns"] == 12 and facts["checkpoints"] == 30
    infos = asyncio.run(FileCheckpointer(tmp_path / "src").list_checkpoint_infos("long", limit=None))
    assert len(infos) == 30
    assert sum(i.metadata.get("source") == "final" for i in infos) == 12  # every turn end is kept
