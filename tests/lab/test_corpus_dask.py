"""Corpus work on a real Dask LocalCluster (worker processes) and a ProcessPoolExecutor.

Workers open the store from its URL — a file store and PostgreSQL here — and the results equal
the in-process run. Failures stay rows: a task raising for one thread, a worker process killed.
One cluster serves the module (starting one takes seconds).
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import require_service
from tulip_nb.lab import Corpus, Thread, build_corpus, corpus_facts, map_threads, open_corpus
from tulip_nb.memory.compactor import LLMCompactor, SlidingWindowManager

pytest.importorskip("distributed")

pytestmark = pytest.mark.slow


def short_summary(msgs: Any, prev: Any) -> str:
    """A summariser the workers can import (the simulator runs a config's own summariser)."""
    return "s"


CONFIGS = {
    "compact 1k": LLMCompactor(context_length=1_000, head_turns=1),
    "compact 1.5k": LLMCompactor(context_length=1_500, head_turns=2, summarize_fn=short_summary),
    "window 8": SlidingWindowManager(window_size=8),
}
PG = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):  # a killed worker fails its task
        cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0")
        c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.fixture(scope="module")
def file_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"file://{tmp_path_factory.mktemp('dask_corpus')}"
    build_corpus(url, n=24, seed=5)
    return url


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    import asyncpg

    table = f"tnb_corpus_{uuid.uuid4().hex[:12]}"
    url = f"{PG}?table_name={table}"
    yield url
    conn = await asyncpg.connect(PG)
    try:
        await conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    finally:
        await conn.close()


def _both(url: str, executor: Any, **kw: Any) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(summary, simulation) in process and on ``executor``, each on a fresh corpus (no cache)."""
    with open_corpus(url) as here, open_corpus(url) as there:
        s0 = here.summary(progress=False)
        s1 = there.summary(executor=executor, progress=False, **kw)
        sim0 = here.simulate(CONFIGS, corpus_facts, progress=False)
        sim1 = there.simulate(CONFIGS, corpus_facts, executor=executor, progress=False, **kw)
    return s0, s1, sim0, sim1


def test_file_store_on_local_cluster_equals_in_process(client: Any, file_url: str) -> None:
    s0, s1, sim0, sim1 = _both(file_url, client)
    pd.testing.assert_frame_equal(s0, s1)
    pd.testing.assert_frame_equal(sim0, sim1)
    assert s0["error"].isna().all() and len(sim0) == 3 * 24 and sim0["error"].isna().all()
    assert (sim0["compactions"] > 0).any()
    shared = open_corpus(file_url).simulate(CONFIGS, [("order", "ord-")], executor=client, progress=False)
    assert shared["probe: order"].isin([True, False]).all()


def test_postgresql_on_local_cluster_equals_in_process(client: Any, pg_url: str) -> None:
    ids = build_corpus(pg_url, n=12, seed=1)
    s0, s1, sim0, sim1 = _both(pg_url, client, chunk_size=2)
    assert list(s0["thread_id"]) == sorted(ids)
    pd.testing.assert_frame_equal(s0, s1)
    pd.testing.assert_frame_equal(sim0, sim1)
    assert s0["error"].isna().all() and sim0["error"].isna().all()


def test_process_pool_equals_in_process(file_url: str) -> None:
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        s0, s1, sim0, sim1 = _both(file_url, pool, chunk_size=5)
    pd.testing.assert_frame_equal(s0, s1)
    pd.testing.assert_frame_equal(sim0, sim1)


def facts_or_fail(thread: Thread) -> list[tuple[str, str]]:
    if thread.thread_id == "case-0003":
        raise LookupError("no facts recorded for case-0003")
    return corpus_facts(thread)


def test_one_thread_failing_is_its_rows_only(client: Any, file_url: str) -> None:
    corpus = open_corpus(file_url)
    seen: list[tuple[int, int]] = []
    sim = corpus.simulate(
        CONFIGS, facts_or_fail, executor=client, chunk_size=4, progress=lambda d, n: seen.append((d, n))
    )
    bad = sim[sim["thread_id"] == "case-0003"]
    assert list(bad["config"]) == list(CONFIGS)
    assert set(bad["error"]) == {"LookupError: no facts recorded for case-0003"}
    assert sim[sim["thread_id"] != "case-0003"]["error"].isna().all()
    assert list(sim["thread_id"].drop_duplicates()) == corpus.thread_ids
    assert sorted(seen) == seen and seen[-1] == (24, 24) and len(seen) == 6


def test_corpus_from_an_instance_needs_a_url_for_workers(client: Any, tmp_path: Path) -> None:
    from tulip_nb.core.errors import UserError
    from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer

    # a file store on this machine: its URL is derived, the local cluster's workers open it
    row = Corpus(FileCheckpointer(tmp_path), ["a"]).summary(executor=client, progress=False).iloc[0]
    assert row["error"].startswith("CheckpointNotFound")  # reached the store: the thread is not there
    with pytest.raises(UserError, match="URL cannot be derived"):
        Corpus(MemoryCheckpointer(), ["a"]).summary(executor=client)


def kill_on(source: Any, chunk: list[str], victim: str) -> list[dict[str, Any]]:
    """A task whose worker process dies on the chunk holding ``victim``."""
    if victim in chunk:
        os._exit(3)
    return [{"thread_id": t, "pid": os.getpid()} for t in chunk]


def _check_killed(rows: list[dict[str, Any]], ids: list[str], victim: str, size: int) -> set[str]:
    assert [r["thread_id"] for r in rows] == ids  # nothing lost, in order
    k = ids.index(victim) // size
    lost = ids[k * size : (k + 1) * size]
    assert all(r.get("error") for r in rows if r["thread_id"] in lost)
    return {r["thread_id"] for r in rows if r.get("error")}


def test_process_pool_worker_killed_gives_error_rows(file_url: str) -> None:
    ids = open_corpus(file_url).thread_ids
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        rows = map_threads(kill_on, file_url, ids, ids[9], executor=pool, chunk_size=4, progress=False)
    failed = _check_killed(rows, ids, ids[9], 4)
    assert all("BrokenProcessPool" in r["error"] for r in rows if r["thread_id"] in failed)


def test_dask_worker_killed_gives_error_rows(client: Any, file_url: str) -> None:  # last: it kills a worker
    ids = open_corpus(file_url).thread_ids
    rows = map_threads(kill_on, file_url, ids, ids[9], executor=client, chunk_size=4, progress=False)
    failed = _check_killed(rows, ids, ids[9], 4)
    # With allowed-failures=0 the chunks that were on the dying worker (running, queued, or done
    # but not yet fetched) fail with it; the rest ran on the other worker or its replacement.
    chunks = [set(ids[i : i + 4]) for i in range(0, len(ids), 4)]
    assert set(ids[8:12]) <= failed < set(ids) and all(c <= failed or not c & failed for c in chunks)
    assert all("KilledWorker" in r["error"] for r in rows if r["thread_id"] in failed)
    assert all(r["pid"] != os.getpid() for r in rows if r["thread_id"] not in failed)
