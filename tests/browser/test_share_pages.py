"""The shared pages in a real browser: Debian chromium (playwright), offline, every request logged.

A generated messy 300-turn thread (failed turns, tulip turns, a fork), the diff of the thread and
its fork, and a 50-thread corpus site are written with :mod:`tulip_nb.lab.share`, opened from
``file://`` in a context with the network disabled, and driven: the replay is stepped with the
keyboard, the buttons and the slider, and what it shows is checked against the thread at each
position (the call, messages sent, rows as the ReplayPlayer makes them); the diff's rows and the
corpus table against the lab; the corpus table is sorted and filtered and a thread page opened
from it. Hostile threads (tests/lab/hostile_threads.py) are opened the same way, with and without
the pages' Content-Security-Policy: no payload runs (``window.__tnb_pwned`` stays unset, no
dialog), none becomes an element, and each is shown as text. Every page must make no request but
its own file. Screenshots go to tests/browser/screenshots/.

Skips when chromium or playwright is missing (fails under TULIP_NB_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.browser.test_jupyterlab import CHROME_ARGS, CHROMIUM, SHOTS, _unavailable
from tests.lab.hostile_threads import HOSTILE_ID, PAYLOADS, PWNED, build_hostile_thread
from tulip_nb.lab import Thread, diff_threads, fork, open_corpus, open_thread, to_html
from tulip_nb.lab.controllers import PlayerController
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.testing import MessySpec, build_messy_corpus, build_messy_thread

pytestmark = pytest.mark.browser

CSP = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>\n')


@dataclass
class Site:
    root: Path
    thread: Thread
    fork: Thread
    corpus: Any
    hostile: list[Path] = field(default_factory=list)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    if not Path(CHROMIUM).exists():
        _unavailable(f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("playwright is not installed (pip install playwright; no 'playwright install' needed)")
    root = tmp_path_factory.mktemp("share")
    cp = MemoryCheckpointer()
    truth = build_messy_thread(cp, "messy-300", MessySpec(seed=30, turns=300, forks=1, tulip_rate=0.05))
    thread = open_thread(cp, "messy-300")
    branch = open_thread(cp, truth.forks[0].thread_id)
    to_html(thread, root / "thread.html")
    to_html(diff_threads(thread, branch), root / "diff.html")
    corpus_cp = MemoryCheckpointer()
    build_messy_corpus(corpus_cp, 50, MessySpec(seed=31, turns=10), prefix="case")
    corpus = open_corpus(corpus_cp)
    to_html(corpus, root / "corpus", plot=False)

    evil = MemoryCheckpointer()
    build_hostile_thread(evil)
    t = open_thread(evil, HOSTILE_ID)
    edited = fork(t, turn=2, new_thread_id="evil-branch", edit=PAYLOADS[2])
    pages = [
        to_html(t, root / "evil" / "thread.html"),
        to_html(diff_threads(t, edited), root / "evil" / "diff.html"),
        to_html(open_corpus(evil), root / "evil" / "corpus", plot=False),
    ]
    pages += sorted((root / "evil" / "corpus" / "threads").iterdir())
    hostile: list[Path] = []
    for p in pages:
        assert isinstance(p, Path)
        bare = p.with_name(p.stem + ".nocsp.html")  # escaping alone must hold too
        text = p.read_text()
        assert CSP.search(text)
        bare.write_text(CSP.sub("", text, count=1))
        hostile += [p, bare]
    return Site(root, thread, branch, corpus, hostile)


class Browser:
    """One offline browser context; every request and dialog is recorded."""

    def __init__(self, playwright: Any) -> None:
        self.browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        self.context = self.browser.new_context(offline=True, viewport={"width": 1400, "height": 1600})
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.context.on("request", lambda r: self.requests.append(r.url))

    def open(self, path: Path) -> Any:
        page = self.context.new_page()
        page.set_default_timeout(20_000)
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.goto(path.as_uri(), wait_until="load")
        return page

    def only_files(self, allowed: set[Path]) -> None:
        urls = {p.resolve().as_uri() for p in allowed}
        assert [u for u in self.requests if u not in urls] == [], "the page made requests"


@pytest.fixture
def chromium() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = Browser(p)
        try:
            yield b
        finally:
            b.browser.close()


def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def _expect_call(page: Any, thread: Thread, pc: PlayerController, k: int) -> None:
    from playwright.sync_api import expect

    n = thread.n_calls
    expect(page.locator("#tnb-pos")).to_have_text(f"call {k} of {n}")
    table = page.locator("#tnb-view")
    expect(table).to_have_attribute("data-call", str(k))
    if pc.tulip_call(k):
        expect(page.locator("#tnb-head")).to_contain_text("was made by a tulip agent")
        assert table.locator("tbody tr").count() == 0
        return
    view, history = thread.model_view(k), pc.marks(k)[0]
    expect(page.locator("#tnb-head")).to_contain_text(
        f"model call {k} of {n} (turn {thread.turn_of(len(history))}): {len(view)} messages sent of {len(history)}"
    )
    assert table.get_attribute("data-sent") == str(len(view))
    assert table.locator("tbody tr").count() == len(pc.rows(k))  # one row per ReplayPlayer row
    notes = page.locator("#tnb-notes p")
    assert [notes.nth(i).inner_text() for i in range(notes.count())] == pc.turn_notes(k)


def test_thread_page_steps_the_replay_and_shows_every_turn(site: Site, chromium: Browser) -> None:
    t = site.thread
    pc = PlayerController(t)
    page = chromium.open(site.root / "thread.html")
    n = t.n_calls
    assert page.locator("section.turn[id^='turn-']:not(#turn-pre)").count() == len(t.turn_list) == 300
    assert page.locator(".msg[id^='m']").count() == len(t.final_messages)
    assert page.locator("details.r-tool[open]").count() == 0  # results collapsed
    assert page.locator("table.turns tbody tr").count() == 300
    assert page.locator("table.events tbody tr").count() == len(t.events)
    assert page.locator("img.figure").count() == 1
    _expect_call(page, t, pc, n - 1)
    _shot(page, "share_thread_last_call")

    page.keyboard.press("ArrowLeft")
    _expect_call(page, t, pc, n - 2)
    page.click("#tnb-prev")
    _expect_call(page, t, pc, n - 3)
    page.click("#tnb-next")
    _expect_call(page, t, pc, n - 2)
    page.keyboard.press("Home")
    _expect_call(page, t, pc, 0)
    page.keyboard.press("ArrowRight")
    _expect_call(page, t, pc, 1)
    failed = sorted({k for k in range(n) if pc.turn_notes(k)})
    tulip = [k for k in range(n) if pc.tulip_call(k)]
    compacted = [int(c) for c in t.events["call"]]
    assert failed and tulip and compacted, "the messy thread should have failed, tulip and compacted calls"
    for k in [failed[0], failed[-1], tulip[0], compacted[0], compacted[-1], n // 2]:
        page.locator("#tnb-slider").fill(str(k))
        _expect_call(page, t, pc, k)
    page.locator("#tnb-slider").fill(str(compacted[-1]))
    page.locator("#tnb-view").scroll_into_view_if_needed()
    _shot(page, "share_thread_compacted_call")
    page.keyboard.press("End")
    _expect_call(page, t, pc, n - 1)
    assert chromium.errors == [] and chromium.dialogs == []
    chromium.only_files({site.root / "thread.html"})


def test_diff_page_shows_every_hunk(site: Site, chromium: Browser) -> None:
    d = diff_threads(site.thread, site.fork)
    page = chromium.open(site.root / "diff.html")
    rows = [r for h in d.hunks(3) for r in h.rows]
    for kind in ("changed", "removed", "added", "same"):
        assert page.locator(f"#tnb-diff tr.k-{kind}").count() == sum(r.kind == kind for r in rows)
    assert page.locator("#tnb-diff tr.hunk").count() == len(d.hunks(3))
    c = d.counts()
    assert f"{c['changed']:,} changed, {c['removed']:,} removed, {c['added']:,} added" in page.inner_text("#tnb-counts")
    assert f"message {d.divergence_index:,} (turn {d.divergence_turn}" in page.inner_text("#tnb-branch")
    _shot(page, "share_diff")
    chromium.only_files({site.root / "diff.html"})


def _visible_ids(page: Any) -> list[str]:
    return page.eval_on_selector_all("#tnb-corpus tbody tr:not([hidden])", "rs => rs.map(r => r.dataset.id)")


def test_corpus_site_sorts_filters_and_opens_a_thread(site: Site, chromium: Browser) -> None:
    from playwright.sync_api import expect

    summary = site.corpus.summary()
    index = site.root / "corpus" / "index.html"
    page = chromium.open(index)
    assert page.locator("#tnb-corpus tbody tr").count() == len(summary) == 50
    expect(page.locator("#tnb-count")).to_have_text("50 of 50 threads")
    page.click("#tnb-corpus th[data-col='tokens']")
    by_tokens = summary.sort_values(["tokens"], ascending=False, kind="stable")
    ids = _visible_ids(page)
    assert summary.set_index("thread_id").loc[ids, "tokens"].tolist() == by_tokens["tokens"].tolist()
    page.click("#tnb-corpus th[data-col='tokens']")
    assert summary.set_index("thread_id").loc[_visible_ids(page), "tokens"].is_monotonic_increasing
    cut = int(summary["tokens"].median())
    page.fill("#tnb-filter", f"tokens>{cut} failed_turns>=1")
    want = summary[(summary["tokens"] > cut) & (summary["failed_turns"] >= 1)]
    expect(page.locator("#tnb-count")).to_have_text(f"{len(want)} of 50 threads")
    assert sorted(_visible_ids(page)) == sorted(want["thread_id"])
    page.fill("#tnb-filter", "case-0007")
    assert _visible_ids(page) == ["case-0007"]
    _shot(page, "share_corpus_index")
    page.click("#tnb-corpus a:has-text('case-0007')")
    page.wait_for_load_state("load")
    t = site.corpus["case-0007"]
    _expect_call(page, t, PlayerController(t), t.n_calls - 1)
    page.click("a:has-text('← corpus')")
    page.wait_for_load_state("load")
    assert page.locator("#tnb-corpus tbody tr").count() == 50
    from tulip_nb.lab.share import page_name

    chromium.only_files({index, site.root / "corpus" / "threads" / page_name("case-0007")})


def test_hostile_threads_never_run(site: Site, chromium: Browser) -> None:
    for path in site.hostile:
        page = chromium.open(path)
        if page.locator("#tnb-slider").count():  # render every call, newest to oldest
            for _ in range(int(page.locator("#tnb-slider").get_attribute("max") or 0)):
                page.keyboard.press("ArrowLeft")
            assert page.locator("#tnb-pos").inner_text().startswith("call 0 of ")
        page.eval_on_selector_all("details", "ds => ds.forEach(d => { d.open = true; })")
        page.wait_for_timeout(100)
        assert page.evaluate(f"typeof window.{PWNED}") == "undefined", path.name
        for selector in ("#tnb-evil-link", "main iframe", "main svg", "main style", "main meta", "main script"):
            assert page.locator(selector).count() == 0, (path.name, selector)
        assert page.locator("main img").count() <= 1  # the token plot, a data: URL
        text = page.eval_on_selector("main", "m => m.textContent")  # off-screen turns too (content-visibility)
        if not path.name.startswith("evil-branch"):
            assert "evil <b>&amp;" in text, path.name  # the thread id, shown as text
        if path.name != "index.html" and "index.nocsp" not in path.name:
            assert "<img src=x onerror=" in text, path.name
        if path.name.startswith("thread"):
            for p in PAYLOADS:
                assert p.split("\u2028")[0] in text, (path.name, p)
        if "nocsp" not in path.name and "thread" in path.name and "corpus" not in str(path):
            _shot(page, "share_hostile_thread")
    assert chromium.dialogs == [] and chromium.errors == []
    chromium.only_files(set(site.hostile))
