"""Natural inputs: every lab function that takes a thread takes a Thread, a thread id with a
checkpointer, or a thread id with a store URL; Thread's views are cached snapshots; a TokenCounter
for a model name."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

from tulip_nb.core import UserError
from tulip_nb.lab import (
    Replay,
    Thread,
    aas_thread,
    as_thread,
    compaction_grid,
    diff_threads,
    export_threads,
    fork,
    open_thread,
    plot_token_usage,
    simulate_compaction,
    sweep,
)
from tulip_nb.lab._plots import to_png
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import ScriptedModel
from tulip_nb.models.metadata import register_metadata
from tulip_nb.tokens import TokenCounter

from .conftest import THREAD, make_agent, make_reply

PNG = b"\x89PNG"
CONFIGS = {"window": {"kind": "window", "window_size": 4}}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("inputs") / "threads"
    agent = make_agent(FileCheckpointer(base))
    for i in range(3):
        agent.run_sync(f"Please check ord-48{i:02d} for the customer.", thread_id=THREAD)
    return base


@pytest.fixture
def url(store: Path) -> str:
    return f"file:{store}"


def test_as_thread_takes_a_thread_an_id_with_a_checkpointer_or_a_url(store: Path, url: str) -> None:
    cp = FileCheckpointer(store)
    t = open_thread(cp, THREAD)
    assert as_thread(t) is t and as_thread(t, cp) is t
    by_cp = as_thread(THREAD, cp)
    by_url = as_thread(THREAD, url)
    assert by_cp.checkpointer is cp and isinstance(by_url, Thread)
    assert by_cp.final_messages == by_url.final_messages == t.final_messages
    with pytest.raises(UserError, match=r"fork: 'x' is a thread id; pass checkpointer="):
        as_thread("x", what="fork")
    with pytest.raises(UserError, match="already has its checkpointer"):
        as_thread(t, MemoryCheckpointer())
    with pytest.raises(UserError, match="expected a Thread or a thread id, got int"):
        as_thread(3)


async def test_aas_thread_inside_a_loop(url: str) -> None:
    t = await aas_thread(THREAD, url)
    assert t.thread_id == THREAD and len(t.final_messages) > 0


def test_simulate_and_grid_take_an_id(url: str) -> None:
    t = open_thread(url, THREAD)
    ref = simulate_compaction(t, CONFIGS)
    pd.testing.assert_frame_equal(simulate_compaction(THREAD, CONFIGS, checkpointer=url), ref)
    assert len(compaction_grid(THREAD, checkpointer=url, trigger_fractions=(0.8,), tail_token_fractions=(0.2,))) == 1
    with pytest.raises(UserError, match=r"simulate_compaction: .* is a thread id"):
        simulate_compaction(THREAD, CONFIGS)  # a str is not a list of messages


def test_fork_sweep_replay_take_an_id(store: Path, url: str) -> None:
    cp = FileCheckpointer(store)
    b = fork(THREAD, at=2, new_thread_id="inputs-fork", checkpointer=cp)
    assert b.thread_id == "inputs-fork" and len(b.final_messages) == 3
    frame = sweep(THREAD, 2, {"again": {}}, prompt="And ord-4899?", agent=make_agent(cp), checkpointer=cp)
    assert frame["error"].isna().all() and frame["final_answer"][0].endswith("has shipped.")
    r = Replay(THREAD, checkpointer=url, tools="recorded")
    assert r.thread.thread_id == THREAD and r.total_steps > 0
    with pytest.raises(UserError, match=r"Replay: .* is a thread id"):
        Replay(THREAD)


def test_diff_takes_ids(store: Path) -> None:
    cp = FileCheckpointer(store)
    fork(THREAD, at=2, new_thread_id="inputs-diff", checkpointer=cp)
    d = diff_threads(THREAD, "inputs-diff", checkpointer=cp)
    assert (d.thread_a, d.thread_b) == (THREAD, "inputs-diff") and d.divergence_index == 3
    assert diff_threads(open_thread(cp, THREAD), "inputs-diff").divergence_index == 3  # unchanged meaning


def test_plot_and_export_take_ids_and_threads(url: str, tmp_path: Path) -> None:
    assert to_png(plot_token_usage(THREAD, checkpointer=url)).startswith(PNG)
    t = open_thread(url, THREAD)
    with pytest.raises(UserError, match="checkpointer= goes with a thread id"):
        plot_token_usage(t.usage, checkpointer=url)
    report = export_threads(url, f"file:{tmp_path / 'copy'}", [t], progress=False)
    assert list(report["thread"]) == [THREAD] and list(report["status"]) == ["copied"]
    assert export_threads(url, "memory:", t, progress=False)["copied"].sum() == len(t.infos)


def test_thread_views_are_cached_snapshots() -> None:
    cp = MemoryCheckpointer()
    agent = make_agent(cp, ScriptedModel(make_reply()))
    agent.run_sync("Please check ord-4801.", thread_id="snap")
    t = open_thread(cp, "snap")
    views = (t.usage, t.events, t.history, t.lineage)
    assert all(a is b for a, b in zip(views, (t.usage, t.events, t.history, t.lineage), strict=True))
    agent.run_sync("And ord-4802?", thread_id="snap")  # the thread moves on; the handle does not
    assert len(t.usage) == len(views[0]) and len(t.history) == 1
    fresh = open_thread(cp, "snap")
    assert len(fresh.usage) > len(t.usage) and len(fresh.history) == 2


def test_token_counter_for_model() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert TokenCounter.for_model("gpt-4o").encoding == "o200k_base"
        assert TokenCounter.for_model("openai:gpt-4-turbo").encoding == "cl100k_base"
        assert TokenCounter.for_model("gpt-4o-2024-08-06").encoding == TokenCounter("gpt-4o").encoding
        register_metadata("inputs-finetune", context_window=32_768)
        assert TokenCounter.for_model("inputs-finetune").encoding == "o200k_base"
    for bad in ("llama-3-unknown", "", "o200k_base"):
        with pytest.raises(UserError):
            TokenCounter.for_model(bad)
    with pytest.raises(UserError, match="not an encoding"):
        TokenCounter("o999k_base")  # an unknown encoding is an error, never an estimate
