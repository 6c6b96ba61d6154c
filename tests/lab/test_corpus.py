"""Corpus: open_corpus, summary (columns and counts), sub-corpora, simulate, map_threads in process."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLE_CHECKPOINT, examples
from tulip_nb.agent import Agent, Interrupt, NullManager, tool
from tulip_nb.core.errors import UserError
from tulip_nb.lab import (
    Corpus,
    Thread,
    aopen_corpus,
    build_corpus,
    corpus_facts,
    map_threads,
    open_corpus,
    open_thread,
    simulate_compaction,
    summarize_corpus_simulation,
)
from tulip_nb.lab._corpus_rows import ALL_SUMMARY_COLUMNS, SIMULATION_COLUMNS, SUMMARY_COLUMNS
from tulip_nb.lab._executors import amap_threads
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor, SlidingWindowManager
from tulip_nb.models import ScriptedModel, text, tool_call, tool_calls

# -- a corpus built once ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    d = tmp_path_factory.mktemp("corpus")
    build_corpus(f"file://{d}", n=32, seed=0)
    return open_corpus(f"file://{d}")


CONFIGS = {
    "compact 1k": LLMCompactor(context_length=1_000, head_turns=1),
    "window 8": SlidingWindowManager(window_size=8),
}


def test_open_corpus_lists_ids_only(synthetic: Corpus) -> None:
    assert synthetic.source is not None and synthetic.source.startswith("file://")
    assert len(synthetic) == 32 and list(synthetic) == synthetic.thread_ids == sorted(synthetic.thread_ids)
    assert "case-0007-fork-14" in synthetic and "nope" not in synthetic
    sub = open_corpus(synthetic.checkpointer, "case-000*")
    assert sub.source is None and sub.thread_ids == [t for t in synthetic.thread_ids if t.startswith("case-000")]
    assert len(open_corpus(synthetic.source, limit=5)) == 5
    with pytest.raises(UserError, match="limit"):
        open_corpus(synthetic.source, limit=-1)


def test_summary_columns_and_values_against_the_threads(synthetic: Corpus) -> None:
    s = synthetic.summary(progress=False)
    assert list(s.columns) == SUMMARY_COLUMNS and list(s["thread_id"]) == synthetic.thread_ids
    assert "max_call_tokens" not in s.columns  # a state column: opt-in
    assert s["error"].isna().all() and (s["compactions"] > 0).sum() >= 3
    full = synthetic.summary(columns="all", progress=False)
    assert list(full.columns) == ALL_SUMMARY_COLUMNS
    assert full[SUMMARY_COLUMNS].drop(columns="read").equals(s.drop(columns="read"))
    for tid in ("case-0000", "case-0007-fork-14", "case-0012"):
        row = full.set_index("thread_id").loc[tid]
        t = open_thread(synthetic.checkpointer, tid)
        msgs = t.final_messages
        assert row["messages"] == len(msgs) and row["model_calls"] == t.n_calls
        assert row["turns"] == sum(m.role == "user" for m in msgs)
        assert row["tokens"] == t.messages["tokens"].sum()
        assert row["max_call_tokens"] == t.usage["context_tokens"].max()
        assert row["compactions"] == len(t.events)
        assert row["over_window_calls"] == (t.usage["context_tokens"] > 2_000).sum()
        assert row["tool_calls"] == sum(len(m.tool_calls) for m in msgs)
        assert row["checkpoints"] == len(t.infos)
        assert row["first_update"] == t.infos[-1].created_at and row["last_update"] == t.infos[0].created_at
    assert s.set_index("thread_id").loc["case-0007-fork-14", "forked_from"] == "case-0007"
    assert synthetic.summary() is not s and synthetic.summary().equals(s)  # cached rows, a fresh frame


# -- hand-built threads with known counts ----------------------------------------------------------


@tool(idempotent=True)
def price(sku: str) -> str:
    """A price.

    Args:
        sku: The item.
    """
    return f"{sku}: 9.99"


@tool
def flaky(x: int) -> str:
    """Always fails.

    Args:
        x: Anything.
    """
    raise ValueError(f"flaky failed on {x}")


@tool
def approve(case: str) -> str:
    """Needs a human.

    Args:
        case: The case.
    """
    raise Interrupt(f"approve {case}?")


def _agent(cp: Any, script: list[Any]) -> Agent:
    return Agent(
        model=ScriptedModel(script),
        tools=[price, flaky, approve],
        system_prompt="sys",
        checkpointer=cp,
        conversation_manager=NullManager(),
    )


@pytest.fixture
def known() -> MemoryCheckpointer:
    cp = MemoryCheckpointer()
    agent = _agent(
        cp,
        [
            tool_call("price", sku="a"),
            text("a costs 9.99"),
            tool_call("price", sku="a"),  # idempotent hit 1
            tool_calls(("flaky", {"x": 1}), ("price", {"sku": "b"})),  # tool error 1
            text("done"),
            tool_call("approve", case="c1"),  # interrupt 1
            text("approved"),
            tool_call("price", sku="b"),  # idempotent hit 2
            text("b costs 9.99"),
        ],
    )
    agent.run_sync("price of a?", thread_id="known")
    agent.run_sync("again, and b", thread_id="known")
    assert agent.run_sync("approve it", thread_id="known").stop_reason == "interrupted"
    agent.resume_sync("yes", thread_id="known")
    agent.run_sync("b again?", thread_id="known")
    fork = _agent(cp, [tool_call("price", sku="a"), text("a again")])  # idempotent hit 3 (in the fork)
    fork.fork_sync("known", new_thread_id="known-fork")
    fork.run_sync("a?", thread_id="known-fork")
    _agent(cp, [text("hello")]).run_sync("hi", thread_id="plain")
    return cp


def test_summary_counts_of_hand_built_threads(known: MemoryCheckpointer) -> None:
    s = open_corpus(known).summary(columns="all", progress=False).set_index("thread_id")
    assert set(s["read"]) == {"states"}  # state columns asked for: the rows are read from states
    k = s.loc["known"]
    assert (k["turns"], k["model_calls"], k["tool_calls"], k["tool_errors"]) == (4, 9, 6, 1)
    assert (k["idempotent_hits"], k["interrupts"], k["compactions"], k["checkpoints"]) == (2, 1, 0, 5)
    assert pd.isna(k["over_window_calls"])  # a NullManager saves no window: unknown
    assert k["forked_from"] is None and k["error"] is None
    f = s.loc["known-fork"]
    assert (f["idempotent_hits"], f["interrupts"], f["tool_errors"], f["checkpoints"]) == (3, 1, 1, 2)
    assert f["forked_from"] == "known" and f["turns"] == 5
    p = s.loc["plain"]
    assert (p["turns"], p["model_calls"], p["tool_calls"], p["idempotent_hits"], p["messages"]) == (1, 1, 0, 0, 3)
    headers = open_corpus(known).summary(progress=False).set_index("thread_id")
    assert set(headers["read"]) == {"headers"}
    pd.testing.assert_frame_equal(headers.drop(columns="read"), s[headers.columns].drop(columns="read"))
    windowed = open_corpus(known).summary(columns="all", progress=False, context_window=10).set_index("thread_id")
    assert windowed.loc["plain", "over_window_calls"] == 1  # 'sys' + 'hi' + priming > 10 tokens
    assert windowed.loc["known", "over_window_calls"] == 9


async def test_fork_whose_source_is_gone(known: MemoryCheckpointer) -> None:
    await known.delete("known")
    corpus = await aopen_corpus(known)
    summary = await corpus.asummary(progress=False)
    f = summary.set_index("thread_id").loc["known-fork"]
    # the counters were counted when the fork was saved: its source's deletion does not unknow them
    assert (f["idempotent_hits"], f["interrupts"], f["tool_errors"], f["read"]) == (3, 1, 1, "headers")
    # read from states, what it inherited can no longer be recounted: NA, never 0
    states = await corpus.asummary(columns="all", progress=False)
    g = states.set_index("thread_id").loc["known-fork"]
    assert pd.isna(g["idempotent_hits"]) and pd.isna(g["interrupts"]) and g["tool_errors"] == 1


def test_tulip_written_and_unreadable_threads(tmp_path: Path) -> None:
    raw = json.loads(SAMPLE_CHECKPOINT.read_text())
    target = tmp_path / "user_42_chat__1" / f"{raw['checkpoint_id']}.json"
    target.parent.mkdir(parents=True)
    shutil.copy(SAMPLE_CHECKPOINT, target)
    bad = tmp_path / "broken" / "abc.json"
    bad.parent.mkdir()
    bad.write_text(
        json.dumps(
            {"checkpoint_id": "abc", "thread_id": "broken", "created_at": raw["created_at"], "state": {"messages": 5}}
        )
    )
    s = open_corpus(FileCheckpointer(tmp_path)).summary(columns="all", progress=False).set_index("thread_id")
    tulip = s.loc["user/42:chat #1"]
    assert tulip["read"] == "states"  # no counters in tulip's header: read from its state
    assert (tulip["turns"], tulip["model_calls"], tulip["tool_calls"], tulip["tool_errors"]) == (2, 4, 2, 0)
    for unknown in ("compactions", "max_call_tokens", "over_window_calls", "interrupts", "idempotent_hits"):
        assert pd.isna(tulip[unknown]), unknown  # tulip records no events, no run ids
    broken = s.loc["broken"]
    assert broken["error"].startswith("CheckpointCorrupt:")
    assert all(pd.isna(broken[c]) for c in ALL_SUMMARY_COLUMNS if c not in ("thread_id", "error"))


# -- sub-corpora -----------------------------------------------------------------------------------


def test_indexing_and_filter(synthetic: Corpus) -> None:
    ids = synthetic.thread_ids
    assert isinstance(synthetic["case-0003"], Thread) and synthetic["case-0003"].thread_id == "case-0003"
    assert synthetic[0].thread_id == ids[0] and synthetic[-1].thread_id == ids[-1]
    assert synthetic[2:5].thread_ids == ids[2:5] and synthetic[["case-0004", "case-0001"]].thread_ids == [
        "case-0004",
        "case-0001",
    ]
    with pytest.raises(KeyError, match="not in this corpus"):
        synthetic["nope"]
    with pytest.raises(UserError, match="not in this corpus"):
        synthetic.filter(thread_ids=["case-0001", "nope"])
    s = synthetic.summary(progress=False)
    big = synthetic.filter(s["tokens"] > 1_200)
    assert big.thread_ids == list(s.loc[s["tokens"] > 1_200, "thread_id"])
    assert synthetic.filter(lambda row: row["compactions"] > 0).thread_ids == list(
        s.loc[s["compactions"] > 0, "thread_id"]
    )
    assert big.summary().reset_index(drop=True).equals(s[s["tokens"] > 1_200].reset_index(drop=True))
    by_id = s.set_index("thread_id")["turns"] >= 8
    assert synthetic.filter(by_id).thread_ids == list(by_id[by_id].index)
    with pytest.raises(UserError, match="values for"):
        synthetic.filter([True, False])
    with pytest.raises(UserError, match="booleans"):
        synthetic.filter(s["interrupts"].where(s["turns"] > 5))
    with pytest.raises(UserError, match="corpus"):
        synthetic[3.5]  # type: ignore[call-overload]


@settings(max_examples=examples(0.25), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_filter_by_mask_keeps_exactly_the_marked_threads(synthetic: Corpus, data: st.DataObject) -> None:
    mask = data.draw(st.lists(st.booleans(), min_size=len(synthetic), max_size=len(synthetic)))
    sub = synthetic.filter(mask)
    assert sub.thread_ids == [t for t, m in zip(synthetic.thread_ids, mask, strict=True) if m]
    assert sub.checkpointer is synthetic.checkpointer and sub.source == synthetic.source
    rows = synthetic.summary().set_index("thread_id")
    assert sub.summary().set_index("thread_id").equals(rows.loc[sub.thread_ids])


# -- simulate --------------------------------------------------------------------------------------


def _reference(corpus: Corpus, probes: Any) -> pd.DataFrame:
    """The per-thread simulator, reduced here by hand: what Corpus.simulate must equal."""
    rows = []
    for tid in corpus.thread_ids:
        t = open_thread(corpus.checkpointer, tid)
        mine = probes(t) if callable(probes) else probes
        sim = simulate_compaction(t, CONFIGS, probes=mine)
        for name in CONFIGS:
            g = sim[sim["config"] == name]
            last = g.iloc[-1]
            seen = [last[f"probe: {label}"] for label, _ in mine]
            rows.append(
                {
                    "thread_id": tid,
                    "config": name,
                    "summarizer": ", ".join(v for v in dict.fromkeys(g["summarizer"]) if isinstance(v, str)) or None,
                    "calls": len(g),
                    "compactions": int(g["compacted"].sum()),
                    "max_context_tokens": int(g["context_tokens"].max()),
                    "tokens_saved": int(g["full_tokens"].sum() - g["context_tokens"].sum()),
                    "over_window_calls": int((g["over_window"] == True).sum())  # noqa: E712
                    if g["over_window"].notna().any()
                    else pd.NA,
                    "facts": sum(v is not None for v in seen),
                    "facts_kept": sum(v is not None and bool(v) for v in seen),
                }
            )
    return pd.DataFrame(rows)


def _na_none(col: pd.Series) -> pd.Series:
    return col.astype(object).where(col.notna(), None)


@pytest.mark.parametrize("per_thread", [False, True])
def test_simulate_equals_the_per_thread_simulator(synthetic: Corpus, per_thread: bool) -> None:
    sub = synthetic[:12]
    shared = [("order", "ord-"), ("callback", "555-"), ("nowhere", "zebra")]
    probes: Any = corpus_facts if per_thread else shared
    sim = sub.simulate(CONFIGS, probes, progress=False)
    probe_cols = [] if per_thread else [f"probe: {label}" for label, _ in shared]
    assert list(sim.columns) == SIMULATION_COLUMNS + probe_cols
    assert len(sim) == 2 * len(sub) and sim["error"].isna().all()
    ref = _reference(sub, probes)
    for col in ref.columns:
        assert list(_na_none(sim[col])) == list(_na_none(ref[col])), col
    if not per_thread:
        assert set(sim["probe: nowhere"]) == {None}
        assert sim["probe: order"].isin([True, False]).all()
    else:  # a compactor that keeps the first turn keeps more of the case's facts than a short window
        kept = sim.groupby("config")["facts_kept"].sum()
        assert kept["compact 1k"] > kept["window 8"]


def test_simulation_summary_aggregates(synthetic: Corpus) -> None:
    sim = synthetic[:10].simulate(CONFIGS, corpus_facts, progress=False)
    out = synthetic.simulation_summary(sim)
    assert list(out["config"]) == list(CONFIGS)
    for _, row in out.iterrows():
        g = sim[sim["config"] == row["config"]]
        assert row["threads"] == 10 and row["errors"] == 0
        assert row["compactions"] == g["compactions"].sum() and row["facts"] == g["facts"].sum()
        assert row["kept_fraction"] == pytest.approx(g["facts_kept"].sum() / g["facts"].sum())
        assert row["max_context_tokens"] == g["max_context_tokens"].max()
        assert row["p95_context_tokens"] == pytest.approx(g["max_context_tokens"].astype(float).quantile(0.95))
        assert row["mean_compactions"] == pytest.approx(g["compactions"].mean())


def test_summarize_corpus_simulation_by_hand() -> None:
    na = pd.NA
    sim = pd.DataFrame(
        [
            ["a", "x", "recorded", 3, 1, 100, 10, 0, 2, 1, None],
            ["b", "x", "recorded, length", 5, 2, 300, 30, 2, 2, 2, None],
            ["c", "x", None, na, na, na, na, na, na, na, "OSError: gone"],
            ["a", "y", None, 3, 0, 50, 0, na, 2, 0, None],
        ],
        columns=SIMULATION_COLUMNS,
    )
    for col in SIMULATION_COLUMNS[3:-1]:
        sim[col] = sim[col].astype("Int64")
    out = summarize_corpus_simulation(sim).set_index("config")
    x = out.loc["x"]
    assert (x["threads"], x["errors"], x["compactions"], x["facts"], x["facts_kept"]) == (3, 1, 3, 4, 3)
    assert (x["threads_over_window"], x["over_window_calls"], x["max_context_tokens"], x["tokens_saved"]) == (
        1,
        2,
        300,
        40,
    )
    assert x["kept_fraction"] == 0.75 and x["mean_compactions"] == 1.5
    assert x["summarizer"] == "recorded, length"
    y = out.loc["y"]  # its one thread's window is unknown: NA, never 0
    assert y["threads_over_window"] is na and y["over_window_calls"] is na and y["kept_fraction"] == 0.0


def test_simulate_failures_are_rows(synthetic: Corpus) -> None:
    def probes(t: Thread) -> Any:
        if t.thread_id == "case-0002":
            raise RuntimeError("no facts for case-0002")
        return corpus_facts(t)

    sim = synthetic[:4].simulate(CONFIGS, probes, progress=False)
    bad = sim[sim["thread_id"] == "case-0002"]
    assert len(bad) == 2 and set(bad["config"]) == set(CONFIGS)
    assert set(bad["error"]) == {"RuntimeError: no facts for case-0002"} and bad["calls"].isna().all()
    assert sim[sim["thread_id"] != "case-0002"]["error"].isna().all()


def test_configs_that_cannot_pickle_are_named(synthetic: Corpus) -> None:
    class Local(SlidingWindowManager):  # a class inside a function does not pickle
        pass

    with ProcessPoolExecutor(1) as pool, pytest.raises(UserError, match="config 'mine'"):
        synthetic.simulate({"mine": Local(window_size=4)}, executor=pool, progress=False)
    lam = LLMCompactor(context_length=1_000, summarize_fn=lambda msgs, prev: "s")
    assert synthetic[:2].simulate({"lam": lam}, executor=ThreadPoolExecutor(2), progress=False)["error"].isna().all()
    with pytest.raises(UserError, match="URL"):
        open_corpus(MemoryCheckpointer()).simulate(CONFIGS, executor=ProcessPoolExecutor(1))
    with pytest.raises(UserError, match="URL"):  # each worker would open its own, empty, memory store
        Corpus(MemoryCheckpointer(), ["a"], source="memory:").summary(executor=ProcessPoolExecutor(1))
    with pytest.raises(UserError, match="URL"):
        map_threads(where_task, "memory:", ["a"], None, executor=ProcessPoolExecutor(1))


def test_relative_store_urls_reach_workers_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "threads").mkdir()
    rows = map_threads(where_task, "file:threads", ["a"], None, executor=ThreadPoolExecutor(1), progress=False)
    assert rows == [{"thread_id": "a", "source": f"file://{tmp_path}/threads"}]
    rows = map_threads(where_task, "s3://bucket/p/", ["a"], None, executor=ThreadPoolExecutor(1), progress=False)
    assert rows == [{"thread_id": "a", "source": "s3://bucket/p/"}]


def where_task(source: Any, chunk: list[str], payload: Any) -> list[dict[str, Any]]:
    return [{"thread_id": t, "source": source} for t in chunk]


# -- map_threads in process --------------------------------------------------------------------------


def sync_task(source: Any, chunk: list[str], payload: Any) -> list[dict[str, Any]]:
    if "t3" in chunk and payload == "fail":
        raise OSError("chunk lost")
    return [{"thread_id": t, "n": int(t[1:])} for t in chunk]


async def async_task(source: Any, chunk: list[str], payload: Any) -> Any:
    if "t5" in chunk:
        return "not rows"
    return [{"thread_id": t, "source": type(source).__name__} for t in chunk]


async def test_map_threads_in_process_order_errors_progress() -> None:
    cp = MemoryCheckpointer()
    ids = [f"t{i}" for i in range(10)]
    seen: list[tuple[int, int]] = []
    rows = await amap_threads(sync_task, cp, ids, "fail", chunk_size=3, progress=lambda d, n: seen.append((d, n)))
    assert [r["thread_id"] for r in rows] == ids
    assert [r.get("error") for r in rows[3:6]] == ["OSError: chunk lost"] * 3
    assert [r["n"] for r in rows[:3] + rows[6:]] == [0, 1, 2, 6, 7, 8, 9]
    assert seen == [(3, 10), (6, 10), (9, 10), (10, 10)]
    rows = map_threads(async_task, cp, ids, None, chunk_size=4, progress=False)
    assert [r["thread_id"] for r in rows] == ids
    assert {r.get("source") for r in rows[:4]} == {"MemoryCheckpointer"}  # in process: the open store
    assert all(r["error"].startswith("TypeError: the task returned str") for r in rows[4:8])
    with pytest.raises(UserError, match="chunk_size"):
        map_threads(sync_task, cp, ids, None, chunk_size=0)
    with pytest.raises(UserError, match="executor must be"):
        map_threads(sync_task, cp, ids, None, executor="dask")


def flaky_chunks(source: Any, chunk: list[str], payload: frozenset[str]) -> list[dict[str, Any]]:
    if payload & set(chunk):
        raise ConnectionError("worker lost")
    return [{"thread_id": t, "ok": True} for t in chunk]


@given(
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=1, max_value=12),
    st.sets(st.integers(min_value=0, max_value=40)),
)
def test_map_threads_keeps_every_thread_in_order(n: int, size: int, bad: set[int]) -> None:
    ids = [f"t{i:02d}" for i in range(n)]
    victims = frozenset(f"t{i:02d}" for i in bad)
    rows = map_threads(flaky_chunks, MemoryCheckpointer(), ids, victims, chunk_size=size, progress=False)
    assert [r["thread_id"] for r in rows] == ids
    for k in range(0, n, size):
        chunk = ids[k : k + size]
        failed = bool(victims & set(chunk))
        for r in rows[k : k + size]:
            assert (r.get("error") == "ConnectionError: worker lost") is failed and r.get("ok", False) is not failed
