"""The shared pages (tulip_nb.lab.share) read back: what they show matches the thread, the diff
and the corpus, on generated messy threads; hostile content stays text; long texts are cut with
their length shown. The browser test (tests/browser/test_share_pages.py) runs the scripts."""

from __future__ import annotations

import html as html_lib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.lab.hostile_threads import HOSTILE_ID, PAYLOADS, build_hostile_thread
from tests.lab.page_parse import Elements, assert_inert, data_block
from tulip_nb.core.errors import UserError
from tulip_nb.lab import diff_threads, fork, open_corpus, open_thread, to_html
from tulip_nb.lab.share import diff_html, page_name, thread_html
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.testing import ODD_THREAD_IDS, MessySpec, build_messy_corpus, build_messy_thread, messy_specs

SPANS = {"k": "shown", "p": "stubbed", "s": "summarised", "d": "dropped"}


def check_thread_page(html: str, thread, truth=None) -> dict:  # type: ignore[no-untyped-def]
    """Everything the page says about ``thread`` against the thread (and the generator's truth)."""
    page = Elements(html)
    msgs = thread.final_messages
    turns = thread.turn_list
    assert page.ids(r"turn-\d+") == [f"turn-{t.turn}" for t in turns]
    assert page.ids(r"m\d+") == [f"m{i}" for i in range(len(msgs))]
    assert page.count("details", **{"class": "msg r-tool"}) == sum(m.role == "tool" for m in msgs)
    assert page.count("details", **{"class": "call"}) == sum(len(m.tool_calls) for m in msgs)
    if truth is not None:
        shown = [o for o in page.tags if o[0] == "span" and (o[1].get("class") or "").startswith("outcome")]
        assert len(shown) == 2 * len(truth.turns)  # the turns table and the transcript
    data = data_block(html, "thread")
    assert [m[0] for m in data["messages"]] == [m.role for m in msgs]
    assert len(data["calls"]) == thread.n_calls
    for k, call in enumerate(data["calls"]):
        if call["tulip"]:
            assert call["rows"] == [] and call["sent"] is None
            continue
        view = thread.model_view(k)
        assert call["sent"] == len(view)
        pos, sent = 0, 0
        for kind, start, end, v, _tokens, ref in call["rows"]:
            if kind == "S":
                assert start == end == pos and v == sent and data["texts"][ref][1] == len(view[v].content or "")
                sent += 1
                continue
            assert start == pos and end > start
            pos = end
            if kind == "k":
                assert v == sent
                for i in range(start, end):  # a shown message is the message, verbatim
                    assert view[v + i - start].content == msgs[i].content
                sent += end - start
            elif kind == "p":
                sent += 1
        assert pos == call["history"] == call["end"] and sent == len(view)
    return data


@settings(max_examples=examples(0.04), deadline=None)
@given(spec=messy_specs(min_turns=6, max_turns=30, max_forks=1))
def test_thread_page_shows_every_turn_message_and_call_of_a_messy_thread(spec: MessySpec) -> None:
    cp = MemoryCheckpointer()
    main = build_messy_thread(cp, "t", spec)
    for truth in (main, *main.forks):
        t = open_thread(cp, truth.thread_id)
        html = thread_html(t, plot=False)
        check_thread_page(html, t, truth)
        assert_inert(html)
        outcomes = [turn.outcome for turn in truth.turns]  # the generator's ground truth
        rows = Elements(html).tags
        spans = [a.get("class") for tag, a in rows if tag == "span" and (a.get("class") or "").startswith("outcome")]
        assert [s.split("o-")[1] for s in spans[: len(outcomes)]] == outcomes


def test_pages_of_threads_without_calls_or_messages() -> None:
    from tulip_nb.agent import run_sync
    from tulip_nb.core import AgentState, Message

    cp = MemoryCheckpointer()
    run_sync(cp.save(AgentState(messages=[Message.system("s"), Message.user("hi")]), "no-calls"))
    run_sync(cp.save(AgentState(messages=[]), "empty"))
    for tid, facts in (("no-calls", "2 messages · 1 turn · 0 model calls"), ("empty", "0 messages · 0 turns")):
        t = open_thread(cp, tid)
        html = to_html(t)
        assert isinstance(html, str) and facts in html and "this thread has no model calls" in html
        assert check_thread_page(html, t)["calls"] == []
        assert Elements(html).count("img") == 0  # no plot of nothing


def test_thread_page_has_the_token_plot_as_an_inline_svg() -> None:
    cp = MemoryCheckpointer()
    build_messy_thread(cp, "t", MessySpec(seed=2, turns=30))
    html = to_html(open_thread(cp, "t"))
    imgs = [a for tag, a in Elements(html).tags if tag == "img"]
    assert len(imgs) == 1 and imgs[0]["src"].startswith("data:image/svg+xml;base64,")
    assert "default-src 'none'" in html


def test_hostile_content_stays_text_in_every_page(tmp_path: Path) -> None:
    cp = MemoryCheckpointer()
    build_hostile_thread(cp)
    t = open_thread(cp, HOSTILE_ID)
    page = thread_html(t)
    assert_inert(page)
    data = check_thread_page(page, t)
    for p in PAYLOADS:
        assert any(p in m[1] or p.split("\u2028")[0] in m[1] for m in data["messages"])  # data, verbatim
        if "\u2028" not in p:
            assert html_lib.escape(p, quote=True) in page  # shown as text
    assert html_lib.escape(HOSTILE_ID) in page

    branch = fork(t, turn=3, new_thread_id="evil-branch", edit="</script><img src=x onerror=alert(1)>")
    d = diff_threads(t, branch)
    page = diff_html(d)
    assert_inert(page)
    assert "changed" in page and html_lib.escape("</script><img src=x onerror=alert(1)>") in page

    index = to_html(open_corpus(cp), tmp_path / "site", plot=False)
    assert_inert(index.read_text())
    for f in (tmp_path / "site" / "threads").iterdir():
        assert_inert(f.read_text())


@pytest.mark.parametrize("payload", PAYLOADS[:6] + PAYLOADS[9:])
def test_the_checks_see_a_payload_that_got_through(payload: str) -> None:
    cp = MemoryCheckpointer()
    build_messy_thread(cp, "t", MessySpec(seed=1, turns=3))
    page = thread_html(open_thread(cp, "t"), plot=False)
    assert_inert(page)
    with pytest.raises(AssertionError):
        assert_inert(page.replace("<main>", "<main>" + payload, 1))


def test_long_texts_are_cut_with_their_full_length_shown() -> None:
    cp = MemoryCheckpointer()
    build_messy_thread(cp, "t", MessySpec(seed=5, turns=40, big_output_rate=1.0, context_length=40_000))
    t = open_thread(cp, "t")
    longest = max((m for m in t.final_messages if m.role == "tool"), key=lambda m: len(m.content or ""))
    assert len(longest.content or "") > 5_000
    html = thread_html(t, max_chars=1_000, plot=False)
    assert f"truncated: 1,000 of {len(longest.content or ''):,} characters shown" in html
    assert (longest.content or "")[1_000:1_100] not in html
    with pytest.raises(UserError, match="max_chars"):
        thread_html(t, max_chars=0)


@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
@settings(max_examples=examples(2), deadline=None)
def test_script_json_round_trips_and_cannot_close_its_element(value: object) -> None:
    from tulip_nb.lab._pages._text import script_json

    text = script_json(value)
    assert json.loads(text) == value
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}


def test_diff_page_shows_the_branch_point_and_every_hunk() -> None:
    cp = MemoryCheckpointer()
    truth = build_messy_thread(cp, "t", MessySpec(seed=11, turns=40, forks=2))
    a = open_thread(cp, "t")
    for f in truth.forks:
        b = open_thread(cp, f.thread_id)
        d = diff_threads(a, b)
        page = to_html(d, context=2)
        assert isinstance(page, str)
        hunks = d.hunks(2)
        rows = [r for h in hunks for r in h.rows]
        el = Elements(page)
        for kind in ("changed", "removed", "added", "same"):
            assert el.count("tr", **{"class": f"k-{kind}"}) == sum(r.kind == kind for r in rows)
        assert el.count("tr", **{"class": "hunk"}) == len(hunks)
        if d.divergence_turn is not None:
            assert f"message {d.divergence_index:,} (turn {d.divergence_turn}" in page
        assert_inert(page)


def test_corpus_site_has_an_index_row_and_a_page_per_thread(tmp_path: Path) -> None:
    cp = MemoryCheckpointer()
    build_messy_corpus(cp, 4, MessySpec(seed=3, turns=8), prefix="c")
    for i, tid in enumerate(ODD_THREAD_IDS[:8]):
        build_messy_thread(cp, tid, MessySpec(seed=i, turns=3))
    corpus = open_corpus(cp)
    index = to_html(corpus, tmp_path / "site", plot=False)
    el = Elements(index.read_text())
    ids = [a["data-id"] for tag, a in el.tags if tag == "tr" and "data-id" in a]
    assert sorted(ids) == sorted(corpus.thread_ids)
    links = [a["href"] for tag, a in el.tags if tag == "a" and (a.get("href") or "").startswith("threads/")]
    assert len(links) == len(corpus) == len(set(links))
    for tid, href in zip(corpus.thread_ids, links, strict=True):
        path = (tmp_path / "site" / href).resolve()
        assert path.parent == (tmp_path / "site" / "threads").resolve() and path.is_file()
        assert href == f"threads/{page_name(tid)}"
        check_thread_page(path.read_text(), open_thread(cp, tid))


def test_corpus_index_never_publishes_the_store_credentials(tmp_path: Path) -> None:
    from tulip_nb.lab.corpus import Corpus

    cp = MemoryCheckpointer()
    build_messy_thread(cp, "t", MessySpec(seed=1, turns=3))
    secret = "postgresql://analyst:s3cr3t@db.internal:5432/threads?sslpassword=k3y"
    index = to_html(Corpus(cp, ["t"], source=secret), tmp_path / "site", plot=False)
    html = index.read_text()
    assert "postgresql://db.internal:5432/threads" in html
    assert "s3cr3t" not in html and "k3y" not in html and "analyst" not in html
