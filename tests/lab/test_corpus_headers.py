"""The header summary equals the summary read from full states, on generated messy corpora.

Every agent save writes the thread's counters into its header (:mod:`tulip_nb.memory.counts`), and
``Corpus.summary()`` reads them instead of states. The reference is
:func:`tulip_nb.lab._corpus_rows.summary_row`, which loads the latest state and, for idempotent
hits, the last checkpoint of every run: the two must agree cell for cell on threads with failed
turns, interrupts answered or left pending, tulip-written turns (no counters in their headers),
forks (the agent's and the lab's) and resumes, on the memory store and the file store.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core.keys import COUNTS_KEY
from tulip_nb.lab import open_corpus
from tulip_nb.lab._corpus_rows import SUMMARY_COLUMNS, summary_row
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.memory.counts import read_counts
from tulip_nb.testing import MessySpec, build_messy_corpus, messy_specs

COUNTED = [c for c in SUMMARY_COLUMNS if c not in ("read",)]


def _reference(cp: BaseCheckpointer, ids: list[str]) -> pd.DataFrame:
    """The summary computed from full states, thread by thread."""

    async def rows() -> list[dict[str, object]]:
        return [await summary_row(cp, t, state_columns=False) for t in ids]

    frame = pd.DataFrame(asyncio.run(rows()))
    return frame


def _assert_equal(cp: BaseCheckpointer) -> pd.DataFrame:
    corpus = open_corpus(cp)
    got = corpus.summary(progress=False)
    want = _reference(cp, corpus.thread_ids)
    assert list(got["thread_id"]) == list(want["thread_id"])
    for col in COUNTED:
        for tid, g, w in zip(got["thread_id"], got[col], want[col], strict=True):
            same = (pd.isna(g) and pd.isna(w)) if (pd.isna(g) or pd.isna(w)) else g == w
            assert same, f"{tid} {col}: header summary {g!r}, from states {w!r}"
    return got


@settings(max_examples=examples(0.1), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=messy_specs(min_turns=3, max_turns=25, max_forks=2), n=st.integers(1, 3))
def test_header_summary_equals_the_states_on_messy_corpora(spec: MessySpec, n: int) -> None:
    cp = MemoryCheckpointer()
    build_messy_corpus(cp, n, spec)
    got = _assert_equal(cp)
    assert set(got["read"]) <= {"headers", "states"}


def test_most_rows_come_from_headers_on_the_file_store(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    build_messy_corpus(cp, 6, MessySpec(seed=11, turns=20, forks=1, interrupt_rate=0.1, tulip_rate=0.1))
    got = _assert_equal(cp)
    assert (got["read"] == "headers").sum() >= len(got) // 2, got["read"].tolist()
    # a tulip turn last leaves no counters in the newest header: that thread is read from states
    for tid, read in zip(got["thread_id"], got["read"], strict=True):
        newest = asyncio.run(cp.list_checkpoint_infos(tid, limit=1))[0]
        assert (read == "headers") == (read_counts(newest.metadata) is not None), tid


def test_fallback_na_gives_na_counters_never_zero(tmp_path: Path) -> None:
    cp = MemoryCheckpointer()
    build_messy_corpus(cp, 3, MessySpec(seed=5, turns=8, tulip_rate=0.0))
    tid = "messy-0001"
    latest = asyncio.run(cp.load_checkpoint(tid))
    assert latest is not None and COUNTS_KEY in latest.metadata
    meta = {k: v for k, v in latest.metadata.items() if k != COUNTS_KEY}
    asyncio.run(cp.save(latest.state, tid, metadata={**meta, "source": "foreign"}))  # a writer without counters
    corpus = open_corpus(cp)
    partial = corpus.summary(fallback="na", progress=False).set_index("thread_id")
    row = partial.loc[tid]
    assert row["read"] == "partial"
    for col in ("turns", "tool_calls", "tokens", "interrupts", "idempotent_hits"):
        assert pd.isna(row[col]), col  # unknown, never 0
    assert row["checkpoints"] == len(asyncio.run(cp.list_checkpoints(tid, limit=None)))
    exact = corpus.summary(progress=False).set_index("thread_id")
    assert exact.loc[tid, "read"] == "states" and exact.loc[tid, "turns"] == 8
    with pytest.raises(Exception, match="fallback"):
        corpus.summary(fallback="zero")


def test_a_thread_killed_mid_turn_is_read_from_its_state(tmp_path: Path) -> None:
    """Mid-turn saves carry no counters (counting is paid once per turn): a thread whose newest
    save is mid-turn (its run was killed in the turn) is read from its state, never stale."""
    from tulip_nb.core import Message
    from tulip_nb.core.keys import ITERATION_KEY, RUN_ID_KEY, SOURCE_KEY

    cp = FileCheckpointer(tmp_path, fsync=False)
    build_messy_corpus(cp, 2, MessySpec(seed=5, turns=6, forks=0))
    corpus = open_corpus(cp)
    victim = corpus.thread_ids[0]

    async def crash_mid_turn() -> None:
        latest = await cp.load_checkpoint(victim)
        assert latest is not None and read_counts(latest.metadata) is not None
        state = latest.state.model_copy(deep=True)
        state.messages.append(Message.user("one more question"))
        state.messages.append(Message.assistant("", tool_calls=[]))
        meta = {SOURCE_KEY: "iteration", RUN_ID_KEY: "killed", ITERATION_KEY: 1}
        await cp.save(state, victim, metadata=meta)

    asyncio.run(crash_mid_turn())
    got = _assert_equal(cp)
    rows = dict(zip(got["thread_id"], got["read"], strict=True))
    assert rows[victim] == "states" and set(rows.values()) == {"headers", "states"}
