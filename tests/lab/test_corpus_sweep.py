"""Corpus.sweep: what-if branches over every thread, tools answered from the recording."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tulip_nb.agent import Agent
from tulip_nb.core._messages import Message, ToolCall
from tulip_nb.core.errors import UserError
from tulip_nb.core.state import AgentState
from tulip_nb.lab import open_thread, threads
from tulip_nb.lab._corpus_sweep import COLUMNS, _divergence, sweep_corpus
from tulip_nb.lab.corpus import Corpus, open_corpus
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.memory.conversation import NullManager
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import tool

# thread id -> its turns' order ids: one, two and three turns
CASES = {"t-0": ["ord-10"], "t-1": ["ord-20", "ord-21"], "t-2": ["ord-30", "ord-31", "ord-32"]}
RECORDED = {o for orders in CASES.values() for o in orders} | {"ord-50"}
SYSTEM = "You are a support agent."


@tool
def lookup_order(order_id: str) -> str:
    """The tool the recording ran.

    Args:
        order_id: The order id.
    """
    return f"{order_id}: shipped"


@tool(name="lookup_order")
def live_lookup(order_id: str) -> str:
    """The sweep's live tool: a recorded call must never reach it.

    Args:
        order_id: The order id.
    """
    if order_id in RECORDED:
        raise RuntimeError(f"recorded call lookup_order({order_id}) ran live")
    return f"{order_id}: LIVE"


def override_lookup(order_id: str) -> str:
    return f"{order_id}: OVERRIDE"


def _reply(messages: list[Message], prefix: str) -> Message:
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    turn = messages[last_user:]
    results = [m.content for m in turn if m.role == "tool"]
    if not results:
        found = re.search(r"ord-\d+", turn[0].content or "")
        return tool_call("lookup_order", order_id=found.group(0) if found else "ord-0")
    return text(f"{prefix}: {results[-1]}")


def support_model(messages: list[Message]) -> Message:
    return _reply(messages, "Answer")


def different_model(messages: list[Message]) -> Message:
    return _reply(messages, "Different")


def broken_model(messages: list[Message]) -> Message:
    raise RuntimeError("model offline")


IN_FLIGHT = {"now": 0, "most": 0}


async def counting_model(messages: list[Message]) -> Message:
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["most"] = max(IN_FLIGHT["most"], IN_FLIGHT["now"])
    await asyncio.sleep(0.02)  # let the other branches start, if the bound allows them
    IN_FLIGHT["now"] -= 1
    return _reply(messages, "Answer")


def sweep_agent() -> Agent:
    return Agent(ScriptedModel(support_model), [live_lookup], system_prompt=SYSTEM, conversation_manager=NullManager())


@pytest.fixture
def store(tmp_path: Path) -> str:
    cp = FileCheckpointer(tmp_path, fsync=False)
    agent = Agent(
        ScriptedModel(support_model), [lookup_order], system_prompt=SYSTEM, checkpointer=cp,
        conversation_manager=NullManager(),
    )  # fmt: skip
    for tid, orders in CASES.items():
        for order in orders:
            agent.run_sync(f"Please check {order}.", thread_id=tid)
    return f"file:{tmp_path}"


@pytest.fixture
def corpus(store: str) -> Corpus:
    return open_corpus(store, "t-*")


def test_recorded_calls_are_answered_from_the_record(corpus: Corpus) -> None:
    df = sweep_corpus(corpus, {"same": {}}, agent=sweep_agent())
    assert list(df.columns) == COLUMNS
    assert list(df["thread_id"]) == list(CASES) and set(df["variant"]) == {"same"}
    assert df["error"].isna().all(), df["error"].tolist()
    # the live tool raises for every recorded order: none reached it
    assert list(df["recorded_tool_answers"]) == [1, 1, 1] and list(df["live_tool_calls"]) == [0, 0, 0]
    assert list(df["tool_calls"]) == [1, 1, 1] and list(df["iterations"]) == [2, 2, 2]
    assert (df["tokens"] > 0).all()
    assert list(df["final_answer"]) == [f"Answer: {o[-1]}: shipped" for o in CASES.values()]
    assert list(df["final_answer"]) == list(df["recorded_answer"])
    assert not df["diverged"].any() and df["first_divergence"].isna().all()


def test_a_changed_argument_runs_the_live_tool(corpus: Corpus) -> None:
    df = sweep_corpus(corpus, {"other order": {"edit": "Please check ord-99."}}, agent=sweep_agent())
    assert df["error"].isna().all(), df["error"].tolist()
    assert list(df["live_tool_calls"]) == [1, 1, 1] and list(df["recorded_tool_answers"]) == [0, 0, 0]
    assert list(df["final_answer"]) == ["Answer: ord-99: LIVE"] * 3
    assert df["diverged"].all()
    # the edited user message is the point; the call after it is the first difference
    users = {tid: len(orders) * 4 - 3 for tid, orders in CASES.items()}
    assert list(df["first_divergence"]) == [users[t] + 1 for t in CASES]


def test_a_tool_override_always_runs_live(corpus: Corpus) -> None:
    df = sweep_corpus(corpus, {"override": {"tool_override": {"lookup_order": override_lookup}}}, agent=sweep_agent())
    assert list(df["live_tool_calls"]) == [1, 1, 1] and list(df["recorded_tool_answers"]) == [0, 0, 0]
    assert all(a.endswith("OVERRIDE") for a in df["final_answer"])
    assert list(df["first_divergence"]) == [len(o) * 4 - 1 for o in CASES.values()]  # the tool result


def test_no_live_tools_needed(corpus: Corpus) -> None:
    """Without an agent the tools of the record answer, and a faithful model reproduces it."""
    df = sweep_corpus(corpus, {"scripted": {"model": ScriptedModel(support_model)}}, agent=None)
    assert df["error"].isna().all(), df["error"].tolist()
    assert list(df["recorded_tool_answers"]) == [1, 1, 1] and not df["diverged"].any()


def test_divergence_columns_per_variant(corpus: Corpus) -> None:
    variants = {
        "same": {},
        "different": {"model": ScriptedModel(different_model)},
        "terse": {"system_prompt": "Answer in one line."},  # before the point: the turn is the same
    }
    df = sweep_corpus(corpus, variants, agent=sweep_agent())
    assert list(df["variant"]) == list(variants) * 3  # thread order, then variant order
    by = {v: df[df["variant"] == v] for v in variants}
    assert not by["same"]["diverged"].any() and by["same"]["first_divergence"].isna().all()
    assert not by["terse"]["diverged"].any()
    assert by["different"]["diverged"].all()
    # same call, same recorded result, different final answer: 3 messages after the user's
    last = [len(o) * 4 for o in CASES.values()]
    assert list(by["different"]["first_divergence"]) == last
    assert all(a.startswith("Different:") for a in by["different"]["final_answer"])
    assert list(by["different"]["recorded_tool_answers"]) == [1, 1, 1]


def test_branches_are_threads_with_lineage(store: str, corpus: Corpus) -> None:
    df = sweep_corpus(corpus, {"same": {}, "different": {"model": ScriptedModel(different_model)}}, agent=sweep_agent())
    assert df["branch_thread_id"].is_unique
    for row in df.itertuples():
        source = open_thread(store, row.thread_id)
        branch = open_thread(store, row.branch_thread_id)
        point = len(CASES[row.thread_id]) * 4 - 3  # the last user message
        first = branch.infos[-1].metadata
        assert first["forked_from"] == row.thread_id and first["source"] == "sweep"
        assert first["variant"] == row.variant and first["fork_message_index"] == point
        # the parent is the end of the turn before the re-run one (the first turn: nothing before)
        parents = list(source.checkpoints["id"])
        assert first["parent_checkpoint_id"] == parents[max(0, len(parents) - 2)]
        assert branch.final_messages[: point + 1] == source.final_messages[: point + 1]
        assert branch.final_messages[-1].content == row.final_answer
    # the original threads are untouched
    assert [len(open_thread(store, t).final_messages) for t in CASES] == [1 + 4 * len(o) for o in CASES.values()]


def test_points_and_error_rows(store: str) -> None:
    cp = FileCheckpointer(Path(store.removeprefix("file:")), fsync=False)
    asyncio.run(cp.save(AgentState(messages=[Message.system(SYSTEM)]), "t-3-empty"))
    corpus = open_corpus(store, "t-*")
    agent = sweep_agent()
    df = sweep_corpus(corpus, {"same": {}, "broken": {"model": ScriptedModel(broken_model)}}, agent=agent)
    empty = df[df["thread_id"] == "t-3-empty"]
    assert len(empty) == 2 and empty["error"].str.contains("no user message").all()
    broken = df[(df["variant"] == "broken") & (df["thread_id"] != "t-3-empty")]
    assert broken["error"].str.startswith("RuntimeError: model offline").all()
    assert broken["branch_thread_id"].notna().all()  # the branch was saved before the run failed
    assert df[(df["variant"] == "same") & (df["thread_id"] != "t-3-empty")]["error"].isna().all()

    first = sweep_corpus(corpus[list(CASES)], {"same": {}}, at="first_user", agent=agent)
    assert first["error"].isna().all() and not first["diverged"].any()
    assert list(first["final_answer"]) == [f"Answer: {o[0]}: shipped" for o in CASES.values()]

    at5 = sweep_corpus(corpus[list(CASES)], {"same": {}}, at=5, agent=agent)  # turn 2's user message
    assert "past the end" in at5["error"][0] and at5["error"][1:].isna().all()
    at4 = sweep_corpus(corpus[list(CASES)], {"same": {}}, at=4, agent=agent)  # turn 1's answer
    assert at4["error"].str.contains("final answer of its turn").all()
    fn = sweep_corpus(corpus[list(CASES)], {"same": {}}, at=lambda t: len(t.final_messages) - 4, agent=agent)
    assert fn["error"].isna().all() and list(fn["final_answer"]) == list(fn["recorded_answer"])
    # at a call: the branch answers the open call (from the record), then the model goes on
    call = sweep_corpus(corpus[list(CASES)], {"same": {}}, at=-3, agent=agent)
    assert call["error"].isna().all() and not call["diverged"].any()
    assert list(call["recorded_tool_answers"]) == [1, 1, 1] and list(call["iterations"]) == [2, 2, 2]


def test_the_same_call_answered_differently_over_time(tmp_path: Path) -> None:
    """A recorded call is answered with the result recorded at its position, not the latest one."""
    checks = iter(range(1, 10))

    def lookup(order_id: str) -> str:
        return f"{order_id}: check #{next(checks)}"

    cp = FileCheckpointer(tmp_path, fsync=False)
    agent = Agent(
        ScriptedModel(support_model), [tool(name="lookup_order")(lookup)], system_prompt=SYSTEM, checkpointer=cp,
        conversation_manager=NullManager(),
    )  # fmt: skip
    for _ in range(3):
        agent.run_sync("Please check ord-50.", thread_id="t-pos")
    corpus = open_corpus(f"file:{tmp_path}")
    for at, answer in [("first_user", 1), (5, 2), ("last_user", 3)]:
        df = sweep_corpus(corpus, {"same": {}}, at=at, agent=sweep_agent())
        assert df["final_answer"][0] == f"Answer: ord-50: check #{answer}", at
        assert df["recorded_tool_answers"][0] == 1 and not df["diverged"][0]


def test_max_concurrency_bounds_the_branches_running(corpus: Corpus) -> None:
    variants = {"a": {"model": ScriptedModel(counting_model)}, "b": {"model": ScriptedModel(counting_model)}}
    for bound in (1, 2):
        IN_FLIGHT["most"] = 0
        df = sweep_corpus(corpus, variants, agent=sweep_agent(), max_concurrency=bound, resume=False)
        assert df["error"].isna().all() and len(df) == 6
        assert IN_FLIGHT["most"] == bound


def test_refused_before_anything_runs(store: str, corpus: Corpus) -> None:
    agent = sweep_agent()
    with pytest.raises(UserError, match=r"'x'.*unknown keys"):
        sweep_corpus(corpus, {"x": {"temperature": 0}}, agent=agent)
    with pytest.raises(UserError, match="at="):
        sweep_corpus(corpus, {"same": {}}, at="last", agent=agent)
    with pytest.raises(UserError, match="max_concurrency"):
        sweep_corpus(corpus, {"same": {}}, agent=agent, max_concurrency=0)
    with pytest.raises(UserError, match="needs a model"):
        sweep_corpus(corpus, {"same": {}}, agent=None)
    with ProcessPoolExecutor(1) as pool, pytest.raises(UserError, match="variant 'lam' cannot be sent"):
        sweep_corpus(
            corpus, {"ok": {}, "lam": {"model": ScriptedModel(lambda m: text("x"))}}, agent=agent, executor=pool
        )
    assert list(threads(store)["thread_id"]) == sorted(CASES)  # no branch was made


def assert_same_outcomes(got: Any, want: Any) -> None:
    import pandas as pd

    pd.testing.assert_frame_equal(got.drop(columns=["branch_thread_id"]), want.drop(columns=["branch_thread_id"]))


@pytest.mark.slow
def test_process_pool_gives_the_in_process_results(store: str) -> None:
    variants = {
        "same": {},
        "other order": {"edit": "Please check ord-99."},
        "different": {"model": ScriptedModel(different_model)},
    }
    corpus = open_corpus(store, "t-*")
    local = sweep_corpus(corpus, variants, agent=sweep_agent(), progress=False)
    ctx = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        remote = sweep_corpus(corpus, variants, agent=sweep_agent(), executor=pool, progress=False, resume=False)
    assert remote["error"].isna().all(), remote["error"].tolist()
    assert_same_outcomes(remote, local)
    assert set(remote["branch_thread_id"]).isdisjoint(local["branch_thread_id"])
    assert all(open_thread(store, b).final_messages for b in remote["branch_thread_id"])


@pytest.fixture(scope="module")  # one cluster for the module: starting one takes seconds
def dask_client() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0")
    with cluster, distributed.Client(cluster) as client:
        yield client


@pytest.mark.slow
def test_dask_cluster_gives_the_in_process_results(store: str, dask_client: Any) -> None:
    variants = {"same": {}, "different": {"model": ScriptedModel(different_model)}}
    corpus = open_corpus(store, "t-*")
    local = sweep_corpus(corpus, variants, agent=sweep_agent(), progress=False)
    remote = sweep_corpus(corpus, variants, agent=sweep_agent(), executor=dask_client, progress=False, resume=False)
    assert_same_outcomes(remote, local)


# -- divergence, as a property ---------------------------------------------------------------------

_msgs = st.lists(
    st.sampled_from(
        [
            Message.assistant(None, [ToolCall(id="a", name="lookup_order", arguments={"order_id": "ord-1"})]),
            Message.tool("ord-1: shipped", tool_call_id="a", name="lookup_order"),
            Message.assistant("done"),
            Message.assistant("other"),
        ]
    ),
    max_size=6,
)


@given(_msgs, _msgs, st.integers(0, 50))
def test_first_divergence_is_where_the_lists_part(branch: list[Message], recording: list[Message], start: int) -> None:
    first = _divergence(branch, recording, start)
    if branch == recording:
        assert first is None
    else:
        assert first is not None and start <= first <= start + min(len(branch), len(recording))
        k = first - start
        assert branch[:k] == recording[:k]
        assert k == min(len(branch), len(recording)) or branch[k] != recording[k]
    # ids are labels: renaming them changes nothing
    renamed = [
        m.model_copy(
            update={
                "tool_calls": [c.model_copy(update={"id": "z"}) for c in m.tool_calls],
                "tool_call_id": "z" if m.tool_call_id else None,
            }
        )
        for m in branch
    ]
    assert _divergence(renamed, recording, start) == first


def test_corpus_sweep_passes_resume_and_budget(corpus: Corpus) -> None:
    """``corpus.sweep`` takes the live-model options ``sweep_corpus`` has: a re-run reuses the
    branches it made (``resume=True``), ``resume=False`` makes new ones, a budget stops it."""
    from tulip_nb.models import Budget

    variants = {"same": {}}
    first = corpus.sweep(variants, agent=sweep_agent(), progress=False)
    again = corpus.sweep(variants, agent=sweep_agent(), progress=False)
    assert list(again["branch_thread_id"]) == list(first["branch_thread_id"])
    fresh = corpus.sweep(variants, agent=sweep_agent(), progress=False, resume=False)
    assert not set(fresh["branch_thread_id"]) & set(first["branch_thread_id"])
    stopped = corpus.sweep(variants, agent=sweep_agent(), progress=False, resume=False, budget=Budget(tokens=1))
    assert stopped.attrs["budget"]["stopped"]
