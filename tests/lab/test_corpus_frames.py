"""Tidy corpus frames: the same rows in process, on a process pool and on Dask; consistent with
the summary and with each thread's own frames; a thread that cannot be read is a row with its
error; a file store opened from an instance runs on a local cluster (its URL is derived)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import examples
from tulip_nb.core.errors import UserError
from tulip_nb.lab import Corpus, open_corpus, open_thread
from tulip_nb.lab._corpus_frames import FRAME_COLUMNS, FRAME_KINDS
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.testing import MessySpec, build_messy_corpus, messy_specs

SPEC = MessySpec(seed=21, turns=14, forks=1, interrupt_rate=0.15, error_rate=0.1, tool_error_rate=0.3, tulip_rate=0.1)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("frames")
    build_messy_corpus(FileCheckpointer(d), 6, SPEC)
    return d


def _frames(corpus: Corpus, executor: Any = None, **kw: Any) -> dict[str, pd.DataFrame]:
    return {k: corpus.frame(k, executor=executor, progress=False, **kw) for k in FRAME_KINDS}


def _check_consistent(corpus: Corpus, frames: dict[str, pd.DataFrame]) -> None:
    """Each frame agrees with the summary and with the threads' own frames."""
    s = corpus.summary(progress=False).set_index("thread_id")
    turns, calls, msgs, events = (frames[k] for k in FRAME_KINDS)
    for tid in corpus.thread_ids:
        row = s.loc[tid]
        t = turns[turns["thread_id"] == tid]
        assert len(t) == row["turns"], tid
        for outcome in ("answered", "error", "interrupted", "tulip"):
            assert (t["outcome"] == outcome).sum() == row[f"turns_{outcome}"], (tid, outcome)
        assert t["model_calls"].sum() == row["model_calls"] and t["tool_calls"].sum() == row["tool_calls"], tid
        assert (msgs["thread_id"] == tid).sum() == row["messages"], tid
        assert msgs.loc[msgs["thread_id"] == tid, "tokens"].sum() == row["tokens"], tid
        e = events[events["thread_id"] == tid]
        assert (e["kind"] == "tool_error").sum() == row["tool_errors"], tid
        assert (e["kind"] == "compaction").sum() == row["compactions"], tid
        c = calls[calls["thread_id"] == tid]
        thread = open_thread(corpus.checkpointer, tid)
        assert list(c["context_tokens"].astype("Int64")) == list(thread.usage["context_tokens"].astype("Int64")), tid
        sent = t["tokens_sent"].dropna()
        by_turn = c.groupby("turn")["context_tokens"].sum()
        assert all(by_turn.get(k, 0) == v for k, v in zip(t.loc[sent.index, "turn"], sent, strict=True)), tid
    for kind, frame in frames.items():
        assert list(frame.columns) == [c for c in FRAME_COLUMNS[kind] if c != "text"], kind
        assert frame["error"].isna().all(), kind


def test_frames_in_process_are_consistent(store: Path) -> None:
    with open_corpus(f"file://{store}") as corpus:
        _check_consistent(corpus, _frames(corpus))


@pytest.mark.slow
def test_frames_equal_on_a_process_pool_and_a_thread_pool(store: Path) -> None:
    with open_corpus(f"file://{store}") as here:
        want = _frames(here)
    with (
        open_corpus(f"file://{store}") as there,
        ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool,
    ):
        got = _frames(there, pool, chunk_size=3)
    with ThreadPoolExecutor(2) as threads:
        inst = Corpus(FileCheckpointer(store), want["turns"]["thread_id"].drop_duplicates().tolist())
        got_threads = _frames(inst, threads, chunk_size=2)
    for k in FRAME_KINDS:
        pd.testing.assert_frame_equal(got[k], want[k])
        pd.testing.assert_frame_equal(got_threads[k], want[k])


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None)
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.mark.slow
def test_frames_equal_on_dask_pandas_and_dask_dataframe(store: Path, client: Any) -> None:
    with open_corpus(f"file://{store}") as here:
        want = _frames(here)
    corpus = open_corpus(FileCheckpointer(store))  # an instance: its URL is derived for the local cluster
    assert corpus.source is None
    got = _frames(corpus, client, chunk_size=2)
    for k in FRAME_KINDS:
        pd.testing.assert_frame_equal(got[k], want[k])
        lazy = corpus.frame(k, executor=client, output="dask", chunk_size=2)
        assert lazy.npartitions == 6  # 12 threads (6 + a fork each) in chunks of 2
        pd.testing.assert_frame_equal(lazy.compute().reset_index(drop=True), want[k])
    summary = corpus.summary(executor=client, progress=False)
    assert summary["error"].isna().all() and set(summary["read"]) <= {"headers", "states"}
    with pytest.raises(UserError, match="cannot be derived"):
        Corpus(MemoryCheckpointer(), ["a"]).summary(executor=client)
    with pytest.raises(UserError, match="Client"):
        corpus.frame("turns", output="dask")


@settings(max_examples=examples(0.05), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=messy_specs(min_turns=3, max_turns=16, max_forks=1))
def test_frames_are_consistent_on_messy_corpora(spec: MessySpec) -> None:
    cp = MemoryCheckpointer()
    build_messy_corpus(cp, 2, spec)
    corpus = open_corpus(cp)
    _check_consistent(corpus, _frames(corpus))


class _StoreWithDebris(MemoryCheckpointer):
    """A store whose listing skips something it cannot read (as the file store skips a thread
    directory whose every file is corrupt), and says so through ``list_unreadable``."""

    async def list_unreadable(self, pattern: str = "*") -> dict[str, str]:
        return {"user_7_chat": "every file of the thread directory is corrupt: abc.json: not JSON"}


def test_an_unreadable_thread_is_a_row_with_its_error(tmp_path: Path) -> None:
    import json

    from tests.conftest import SAMPLE_CHECKPOINT

    cp = _StoreWithDebris()
    build_messy_corpus(cp, 2, MessySpec(seed=4, turns=5))
    corpus = open_corpus(cp)
    assert corpus.thread_ids == ["messy-0000", "messy-0001", "user_7_chat"]
    s = corpus.summary(progress=False).set_index("thread_id")
    assert s.loc["user_7_chat", "error"].startswith("CheckpointCorrupt: every file") and pd.isna(
        s.loc["user_7_chat", "turns"]
    )
    assert s.drop(index="user_7_chat")["error"].isna().all()
    for kind, frame in _frames(corpus).items():
        bad = frame[frame["thread_id"] == "user_7_chat"]
        assert len(bad) == 1 and bad["error"].iloc[0].startswith("CheckpointCorrupt"), kind
    assert corpus[1:].unreadable == {"user_7_chat": corpus.unreadable["user_7_chat"]} and not corpus[:2].unreadable
    # a listed thread whose checkpoint does not parse: its row says why, in the summary and every frame
    raw = json.loads(SAMPLE_CHECKPOINT.read_text())
    bad_dir = tmp_path / "broken"
    bad_dir.mkdir()
    envelope = {
        "checkpoint_id": "abc",
        "thread_id": "broken",
        "created_at": raw["created_at"],
        "state": {"messages": 5},
    }
    (bad_dir / "abc.json").write_text(json.dumps(envelope))
    files = open_corpus(FileCheckpointer(tmp_path))
    assert files.thread_ids == ["broken"]
    assert files.summary(progress=False)["error"].iloc[0].startswith("CheckpointCorrupt")
    for kind, frame in _frames(files).items():
        assert list(frame["thread_id"]) == ["broken"] and frame["error"].iloc[0].startswith("CheckpointCorrupt"), kind
