"""CorpusView driven headless: a real synthetic corpus, its simulation, clicks and values."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pytest

from tulip_nb.lab._synthetic import build_corpus, corpus_facts
from tulip_nb.lab.corpus import Corpus, open_corpus
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.memory.managers import SlidingWindowManager
from tulip_nb.widgets import CorpusView, ReplayPlayer

from ..lab.test_corpus_controller import frame_summary

PNG = b"\x89PNG\r\n\x1a\n"
N = 32


def configs() -> dict[str, object]:
    return {"2k": LLMCompactor(context_length=2_000), "window-6": SlidingWindowManager(window_size=6)}


@dataclass
class Built:
    corpus: Corpus
    sim: pd.DataFrame


@pytest.fixture(scope="module")
def built() -> Built:
    cp = MemoryCheckpointer()
    build_corpus(cp, n=N, seed=3)
    corpus = open_corpus(cp)
    return Built(corpus, corpus.simulate(configs(), probes=corpus_facts, progress=False))


def _table_ids(html: str) -> list[str]:
    import re

    return re.findall(r"<tr[^>]*><td[^>]*><code>([^<]+)</code>", html)


def test_the_view_shows_a_page_of_the_summary_with_plots(built: Built) -> None:
    v = CorpusView(built.corpus, sim=built.sim, page_size=10).wait(30)
    assert f"rows 1-10 of {N} threads · page 1 of 4" in v.table.value
    assert list(v.thread_list.options) == built.corpus.thread_ids[:10] == _table_ids(v.table.value)
    assert v.page_label.value == "page 1 of 4" and v.prev_button.disabled and not v.next_button.disabled
    assert bytes(v.distributions.value).startswith(PNG) and bytes(v.facts.value).startswith(PNG)
    assert v.tabs.titles == ("distributions", "configs", "replay")
    assert "choose a thread" in v.replay_box.children[0].value
    assert v.direction.disabled  # nothing to reverse before a sort
    html = v._repr_mimebundle_()["text/html"]
    assert "tulip-nb-corpus-table" in html and html.count("<img") == 2  # the saved notebook's view


@pytest.mark.slow
def test_sort_click_filter_and_paging(built: Built) -> None:
    v = CorpusView(built.corpus, sim=built.sim, page_size=10).wait(30)
    summary = built.corpus.summary()
    v.sort_by.value = "tokens"  # a number: largest first
    want = summary.sort_values(["tokens", "thread_id"], ascending=[False, True], kind="mergesort")
    assert list(v.thread_list.options) == want["thread_id"].tolist()[:10] == _table_ids(v.table.value)
    assert "tokens ▼" in v.table.value and v.direction.description == "▼ descending"
    v.next_button.click()
    assert list(v.thread_list.options) == want["thread_id"].tolist()[10:20] and v.page_label.value == "page 2 of 4"
    v.direction.click()  # back to page 1, smallest first
    assert v.controller.ascending and v.page_label.value == "page 1 of 4"
    up = summary.sort_values(["tokens", "thread_id"], kind="mergesort")
    assert list(v.thread_list.options) == up["thread_id"].tolist()[:10]
    assert v.direction.description == "▲ ascending" and "tokens ▲" in v.table.value
    v.text.value = "fork"  # a substring (no event loop here: the debouncer runs at once)
    forks = [t for t in built.corpus.thread_ids if "fork" in t]
    assert forks and sorted(v.thread_list.options) == sorted(forks)
    assert f"of {len(forks)} matching ({N} threads)" in v.table.value
    v.query.value = "tokns > 1"
    assert "UserError" in v.status.value and "tokns" in v.status.value
    assert sorted(v.thread_list.options) == sorted(forks)  # the bad query changed nothing
    v.query.value = "tool_errors >= 1"
    matching = summary[(summary["tool_errors"] >= 1).fillna(False) & summary["thread_id"].str.contains("fork")]
    assert v.status.value == "" and sorted(v.thread_list.options) == sorted(matching["thread_id"])
    v.clear_button.click()
    assert v.text.value == "" and v.query.value == "" and f"of {N} threads" in v.table.value
    v.sort("thread_id")
    assert v.sort_by.value == "thread_id" and list(v.thread_list.options) == built.corpus.thread_ids[:10]


@pytest.mark.slow
def test_selecting_a_row_opens_the_thread_in_a_replay_player(built: Built) -> None:
    v = CorpusView(built.corpus, sim=built.sim, page_size=10).wait(30)
    tid = v.thread_list.options[3]
    v.thread_list.value = tid
    assert isinstance(v.player, ReplayPlayer) and v.replay_box.children == (v.player,)
    assert v.player.controller.thread.thread_id == tid
    n = built.corpus[tid].n_calls
    assert v.player.slider.value == n - 1 and f"model call {n - 1} of {n}" in v.player.view.value  # the last call
    assert v.player.controller.thread.final_messages == built.corpus[tid].final_messages
    assert v.tabs.selected_index == 2 and f"opened <code>{tid}</code>" in v.status.value
    assert "tulip-nb-selected" in v.table.value and "tulip-nb-selected" in v.sim.value
    player = v.player
    other = v.thread_list.options[5]
    v.thread_list.value = other
    assert v.player is player and player.controller.thread.thread_id == other  # one player, reused
    v.next_button.click()  # the selected thread is not on page 2: the list has no value
    assert v.thread_list.value is None and v.player.controller.thread.thread_id == other
    n = built.corpus[other].n_calls
    assert f"model call {n - 1} of {n}" in v._repr_mimebundle_()["text/html"]  # the fallback shows the player too


@pytest.mark.slow
def test_the_config_picker_shows_that_configs_simulation(built: Built) -> None:
    v = CorpusView(built.corpus, sim=built.sim, page_size=10).wait(30)
    assert v.config.options == ("2k", "window-6") and v.config.value == "2k"
    assert "config 2k:" in v.sim.value
    first = v.facts.value
    v.config.value = "window-6"
    assert "config window-6:" in v.sim.value and v.facts.value != first and v.tabs.selected_index == 1
    rows = v.controller.config_rows()
    assert rows["thread_id"].tolist() == list(v.thread_list.options) and set(rows["config"]) == {"window-6"}
    s = built.corpus.simulation_summary(built.sim).set_index("config")
    kept, facts = int(s.loc["window-6", "facts_kept"]), int(s.loc["window-6", "facts"])
    assert f"facts kept {kept:,}/{facts:,}" in v.sim.value


def test_configs_are_simulated_when_no_sim_is_given(built: Built) -> None:
    v = CorpusView(built.corpus[:8], configs=configs(), probes=corpus_facts).wait(60)
    assert v.config.options == ("2k", "window-6") and len(v.controller.sim) == 16  # type: ignore[arg-type]
    plain = CorpusView(built.corpus[:8]).wait(30)
    assert plain.config.disabled and "no simulation" in plain.sim.value


def test_a_1000_row_summary_stays_paged_in_the_view() -> None:
    v = CorpusView(frame_summary(1000))
    assert len(v.thread_list.options) == 25 and len(_table_ids(v.table.value)) == 25
    assert "rows 1-25 of 1,000 threads · page 1 of 40" in v.table.value
    for _ in range(45):
        v.next_button.click()
    assert v.page_label.value == "page 40 of 40" and v.next_button.disabled
    assert v.thread_list.options[-1] == "case-0999"
    assert v.thread_list.disabled and "pass the Corpus to replay" in v.replay_box.children[0].value


class SlowStore(MemoryCheckpointer):
    """A store whose header listings take ``delay`` seconds (a remote database, a large corpus)."""

    delay = 0.05

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10):  # type: ignore[no-untyped-def]
        import asyncio

        await asyncio.sleep(self.delay)
        return await super().list_checkpoint_infos(thread_id, limit)


@pytest.mark.slow
def test_the_view_opens_at_once_and_works_while_the_summary_is_read() -> None:
    import time

    cp = SlowStore()
    build_corpus(cp, n=40, seed=2)
    corpus = open_corpus(cp)
    t0 = time.perf_counter()
    v = CorpusView(corpus, configs=configs(), probes=corpus_facts, page_size=10)
    opened = time.perf_counter() - t0
    assert v.controller.pending and not v.done.is_set(), "the summary should still be running"
    assert opened < 1.0, opened  # the summary alone takes ~40 x 2 listings x 0.05 s
    assert "summary pending" in v.table.value and v.progress_box.layout.display is None
    assert _table_ids(v.table.value) == corpus.thread_ids[:10]  # the ids are there, the counts are not yet
    v.next_button.click()  # paging, sorting and replay work meanwhile
    assert v.page_label.value.startswith("page 2 of")
    v.sort_by.value = "thread_id"
    thread = v.open_thread(corpus.thread_ids[3])
    assert isinstance(v.player, ReplayPlayer) and v.player.slider.value == v.player.slider.max == thread.n_calls - 1
    assert v.controller.pending, "opening a thread must not wait for the summary"
    v.wait(120)
    assert not v.controller.pending and v.progress_box.layout.display == "none"
    assert v.controller.summary.equals(corpus.summary()) and v.controller.sort_by == "thread_id"
    assert "summary pending" not in v.table.value and bytes(v.distributions.value).startswith(PNG)
    assert v.config.options == ("2k", "window-6") and len(v.controller.sim) == 2 * 40  # type: ignore[arg-type]
    assert v.progress.value == v.progress.max == 40
    assert v.controller.selected == corpus.thread_ids[3]  # the selection survived


def test_a_summary_and_simulation_computed_earlier_are_taken_with_the_corpus(built: Built) -> None:
    from tulip_nb.core.errors import UserError

    summary = built.corpus.summary()
    v = CorpusView(built.corpus, summary=summary, sim=built.sim, page_size=10)
    assert v.done.is_set() and not v.controller.pending and v.controller.summary.equals(summary)
    assert v.progress_box.layout.display == "none"
    v.open_thread(built.corpus.thread_ids[0])  # replay works: the corpus came with the summary
    assert v.player is not None
    with pytest.raises(UserError, match="not this corpus"):
        CorpusView(built.corpus[:4], summary=summary)


def test_a_store_failing_under_the_background_summary_gives_error_rows() -> None:
    class Broken(MemoryCheckpointer):
        async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10):  # type: ignore[no-untyped-def]
            raise RuntimeError("the store went away")

    cp = Broken()
    build_corpus(cp, n=3, seed=1)
    v = CorpusView(open_corpus(cp))
    v.done.wait(30)
    # a thread that cannot be read is a row with its error, never a lost summary
    assert not v.controller.pending and v.controller.summary["error"].str.contains("went away").all()
