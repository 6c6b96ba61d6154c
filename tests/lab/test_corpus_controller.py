"""CorpusController (the plain-Python twin of CorpusView): sort, filter, page, select, configs.

The paging and sorting invariants run on a 1,000-row summary frame shaped like
``Corpus.summary()``; selection and the config picker run on a real synthetic corpus.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core.errors import UserError
from tulip_nb.lab._corpus_plots import kept_by_config, plot_corpus_distributions, plot_facts_kept
from tulip_nb.lab.controllers import CorpusController

PNG = b"\x89PNG\r\n\x1a\n"
SUMMARY_COLUMNS = [
    "thread_id", "turns", "model_calls", "messages", "tokens", "max_call_tokens", "compactions",
    "over_window_calls", "tool_calls", "tool_errors", "interrupts", "idempotent_hits", "forked_from",
    "first_update", "last_update", "checkpoints", "error",
]  # fmt: skip


def frame_summary(n: int = 1000, seed: int = 0, unread: int = 3) -> pd.DataFrame:
    """A summary frame with the columns of ``Corpus.summary()``; the last ``unread`` rows are
    threads that could not be read (NA counts, an error string)."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        turns = int(rng.integers(3, 13))
        rows.append(
            {
                "thread_id": f"case-{i:04d}",
                "turns": turns,
                "model_calls": 2 * turns,
                "messages": 4 * turns + 1,
                "tokens": int(rng.integers(500, 9000)),
                "max_call_tokens": int(rng.integers(300, 2500)),
                "compactions": int(rng.integers(0, 4)),
                "over_window_calls": int(rng.integers(0, 3)),
                "tool_calls": turns,
                "tool_errors": int(rng.integers(0, 2)),
                "interrupts": int(i % 40 == 0),
                "idempotent_hits": int(rng.integers(0, 3)),
                "forked_from": f"case-{i - 1:04d}" if i % 10 == 9 else None,
                "first_update": pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(minutes=i),
                "last_update": pd.Timestamp("2026-01-02", tz="UTC") + pd.Timedelta(minutes=i),
                "checkpoints": 2 * turns,
                "error": None,
            }
        )
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    counts = [
        c for c in SUMMARY_COLUMNS if c not in ("thread_id", "forked_from", "first_update", "last_update", "error")
    ]
    frame[counts] = frame[counts].astype("Int64")
    for j in range(n - unread, n):
        frame.loc[j, counts] = pd.NA
        frame.loc[j, "error"] = "CheckpointCorrupt: torn record"
    return frame


@pytest.fixture(scope="module")
def big() -> pd.DataFrame:
    return frame_summary()


def test_a_1000_row_summary_is_paged_25_rows_at_a_time(big: pd.DataFrame) -> None:
    c = CorpusController(big)
    assert c.pages == 40 and c.page_ids == [f"case-{i:04d}" for i in range(25)]
    html = c.html()
    assert html.count("<tr") == 26  # header + 25 rows, never 1,000
    assert "rows 1-25 of 1,000 threads · page 1 of 40" in html
    c.set_page(39)
    assert c.page_ids[-1] == "case-0999" and "rows 976-1,000 of 1,000 threads" in c.html()
    c.next_page()
    assert c.page == 39  # clamps at the last page
    with pytest.raises(UserError, match=r"page 40 is outside 0\.\.39"):
        c.set_page(40)
    c.prev_page()
    assert c.page == 38


def test_sort_flips_on_the_same_column_and_puts_unread_rows_last(big: pd.DataFrame) -> None:
    c = CorpusController(big)
    c.sort("tokens")  # a number: largest first
    tokens = c.rows["tokens"].tolist()
    readable = [t for t in tokens if t is not pd.NA]
    assert readable == sorted(readable, reverse=True) and all(t is pd.NA for t in tokens[len(readable) :])
    assert c.page_ids[0] == big.loc[big["tokens"].astype(float).idxmax(), "thread_id"]
    assert "tokens ▼" in c.html() and "sorted by tokens ↓" in c.html()
    c.set_page(3)
    c.sort("tokens")  # again: smallest first, back to page 1
    assert c.page == 0 and c.ascending
    assert c.rows["tokens"].dropna().is_monotonic_increasing
    c.sort("thread_id")  # text: A to Z
    assert c.ascending and c.page_ids[0] == "case-0000"
    c.sort("forked_from")  # mostly None: the forks first, None last
    assert c.page_ids[0] == "case-0009" and pd.isna(c.rows["forked_from"].iloc[-1])
    c.clear_sort()
    assert c.page_ids[0] == "case-0000"
    with pytest.raises(UserError, match="cannot sort by 'tokns'"):
        c.sort("tokns")


def test_text_filter_is_a_glob_or_a_substring(big: pd.DataFrame) -> None:
    c = CorpusController(big)
    c.set_text("case-00*")
    assert len(c.rows) == 100 and "of 100 matching (1,000 threads)" in c.html()
    c.set_text("CASE-012")  # substring, any case
    assert c.page_ids == [f"case-012{i}" for i in range(10)]
    c.set_text("nothing-like-this")
    assert len(c.rows) == 0 and "no thread matches the filters" in c.html() and c.pages == 1
    c.set_text("")
    assert len(c.rows) == 1000 and not c.filtered


def test_query_and_ranges_filter_and_errors_name_the_problem(big: pd.DataFrame) -> None:
    c = CorpusController(big)
    c.set_query("tokens > 5000 and compactions >= 1")
    want = big[(big["tokens"] > 5000).fillna(False) & (big["compactions"] >= 1).fillna(False)]
    assert c.rows["thread_id"].tolist() == want["thread_id"].tolist()
    assert "query: tokens &gt; 5000 and compactions &gt;= 1" in c.html()
    for bad, why in (
        ("tokns > 3", "name 'tokns' is not defined"),
        ("tokens >", "SyntaxError"),
        ("tokens + 1", "not True/False"),
    ):
        with pytest.raises(UserError, match=re.escape(why)):
            c.set_query(bad)
        assert c.query == "tokens > 5000 and compactions >= 1"  # the filter in force is kept
    c.set_query("")
    c.set_range("turns", minimum=6, maximum=8)
    assert set(c.rows["turns"]) <= {6, 7, 8} and len(c.rows) == int(big["turns"].between(6, 8).sum())
    assert "6 ≤ turns ≤ 8" in c.filter_text()
    c.set_range("over_window_calls", minimum=1)
    assert (c.rows["over_window_calls"] >= 1).all()
    c.set_range("turns")  # no bounds: removed
    assert "turns" not in c.ranges
    with pytest.raises(UserError, match="not a numeric summary column"):
        c.set_range("thread_id", minimum=1)
    with pytest.raises(UserError, match="minimum 5 is above maximum 2"):
        c.set_range("turns", minimum=5, maximum=2)
    c.set_text("case-09*")
    c.set_query("error == error")  # only the unread rows (NaN != NaN)
    assert c.rows["thread_id"].tolist() == []  # unread rows never match a range either
    c.clear_filters()
    c.set_query("error == error")
    assert c.rows["thread_id"].tolist() == ["case-0997", "case-0998", "case-0999"]


def test_a_summary_frame_alone_cannot_open_threads(big: pd.DataFrame) -> None:
    c = CorpusController(big)
    with pytest.raises(UserError, match="pass the Corpus to open threads"):
        c.select("case-0001")
    with pytest.raises(UserError, match="no thread 'nope'"):
        c.select("nope")
    with pytest.raises(UserError, match="configs= needs a Corpus"):
        CorpusController(big, configs={"x": object()})
    with pytest.raises(UserError, match="needs a thread_id column"):
        CorpusController(big.drop(columns="thread_id"))
    assert "no simulation" in c.sim_html() and c.facts_png() is None


@settings(max_examples=examples(0.4), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    column=st.sampled_from(SUMMARY_COLUMNS),
    flips=st.integers(0, 2),
    page_size=st.integers(1, 60),
    text=st.sampled_from(["", "case-0*", "7", "case-1??9"]),
    lo=st.none() | st.integers(0, 10),
)
def test_pages_partition_the_sorted_filtered_rows(
    big: pd.DataFrame, column: str, flips: int, page_size: int, text: str, lo: int | None
) -> None:
    c = CorpusController(big.head(300), page_size=page_size)
    c.set_text(text)
    c.set_range("turns", minimum=lo)
    for _ in range(flips + 1):
        c.sort(column)
    seen: list[str] = []
    for p in range(c.pages):
        c.set_page(p)
        assert len(c.page_ids) <= page_size
        seen += c.page_ids
    assert seen == c.rows["thread_id"].tolist()  # every matching row once, in order
    ids = set(seen)
    glob = re.compile(text.replace("*", ".*").replace("?", "."))
    mask = [
        (not text or bool(glob.fullmatch(t) if set(text) & set("*?") else text in t))
        and (lo is None or (turns is not pd.NA and turns >= lo))
        for t, turns in zip(big.head(300)["thread_id"], big.head(300)["turns"], strict=True)
    ]
    assert ids == set(big.head(300)["thread_id"][mask])
    values = c.rows[column].dropna().tolist()
    if column not in ("forked_from", "error"):
        assert values == sorted(values, reverse=not c.ascending)


def test_the_distribution_plots_highlight_the_filtered_rows(big: pd.DataFrame) -> None:
    c = CorpusController(big)
    first = c.distributions_png()
    assert first.startswith(PNG) and c.distributions_png() is first  # cached per filter
    c.set_query("tokens > 8000")
    assert c.distributions_png() != first
    fig = plot_corpus_distributions(big, highlight=c.rows)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == "Tokens per thread" and "threads have some" in titles[2]  # the frame has some
    assert "3 could not be read" in fig.texts[0].get_text()  # suptitle: unread rows counted, not drawn
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["all (997)", f"shown ({len(c.rows)})"]
    with pytest.raises(UserError, match="missing columns"):
        plot_corpus_distributions(big.drop(columns="tokens"))


def _sim(ids: list[str]) -> pd.DataFrame:
    rows = []
    for name, keep in (("loose", 4), ("tight", 1)):
        for i, t in enumerate(ids):
            rows.append(
                {
                    "thread_id": t, "config": name, "calls": 10, "compactions": i % 3, "max_context_tokens": 1000 + i,
                    "tokens_saved": 50 * i, "over_window_calls": int(name == "tight" and i % 5 == 0), "facts": 4,
                    "facts_kept": keep if i % 2 else keep // 2, "error": None,
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


def test_facts_kept_plot_and_table_follow_the_config(big: pd.DataFrame) -> None:
    sim = _sim(big["thread_id"].tolist()[:50])
    per = kept_by_config(sim)
    assert per["config"].tolist() == ["loose", "tight"]
    assert per["facts"].tolist() == [200, 200] and per["facts_kept"].tolist() == [150, 25]
    fig = plot_facts_kept(sim, "tight")
    bars = [p.get_width() for p in fig.axes[0].patches]
    assert bars == pytest.approx([75.0, 12.5])
    assert "tight" in fig.axes[1].get_title()
    with pytest.raises(UserError, match="no config 'x'"):
        plot_facts_kept(sim, "x")
    c = CorpusController(big.head(50), sim=sim, page_size=10)
    assert c.configs == ["loose", "tight"] and c.config == "loose"
    c.sort("tokens")
    rows = c.config_rows()
    assert rows["thread_id"].tolist() == c.page_ids and set(rows["config"]) == {"loose"}
    c.set_config("tight")
    assert set(c.config_rows()["config"]) == {"tight"} and len(c.config_rows(page_only=False)) == 50
    with pytest.raises(UserError, match="no config 'nope'"):
        c.set_config("nope")
    assert c.facts_png().startswith(PNG)  # type: ignore[union-attr]
