"""CorpusView in a real browser: JupyterLab on 127.0.0.1, Debian chromium driven by playwright.

Opens a copy of notebooks/07_corpus (200 offline threads, three configs simulated), runs all
cells, checks that the CorpusView table mounts with its count line, then clicks: **Clear
filters**, the sort direction button (the first row changes), **sort by** another column, a
pandas query, a bad query (shown in red), a thread in the **open** list (the replay tab shows its
ReplayPlayer) and the config picker — each time waiting for the view to change (browser -> kernel
-> browser). Screenshots go to the test's temporary folder and to tests/browser/screenshots/.

Skips when chromium or playwright is missing (fails under TULIP_NB_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.test_jupyterlab import CHROME_ARGS, CHROMIUM, SHOTS, _open_and_run_all, jupyterlab_server

pytestmark = pytest.mark.browser

NOTEBOOK = "07_corpus.ipynb"


@pytest.fixture
def corpus_lab(tmp_path: Path) -> Iterator[str]:
    """A JupyterLab server on 127.0.0.1 over a copy of notebook 07; yields its base URL."""
    yield from jupyterlab_server(tmp_path, [NOTEBOOK])


def _save(locator, tmp_path: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"{name}.png"
    locator.screenshot(path=str(path))
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, SHOTS / path.name)


def test_corpus_view_mounts_sorts_filters_and_opens_a_thread(corpus_lab: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    t0 = time.perf_counter()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 2000})
        page.set_default_timeout(60_000)
        try:
            _open_and_run_all(page, corpus_lab, NOTEBOOK)
            view = page.locator(".widget-vbox.tulip-nb-corpus").first  # the live view, not the fallback
            view.wait_for(timeout=240_000)  # building and simulating 200 threads comes first
            table = view.locator(".tulip-nb-corpus-table").first
            # the count line above the table (the status line above it may hold notes too)
            head = (
                view.locator(".widget-html", has=page.locator(".tulip-nb-corpus-table")).locator(".tulip-nb-note").first
            )
            # the notebook's last cell sorted, queried, opened a thread and picked a config
            expect(head).to_contain_text("matching (200 threads) · sorted by tokens ↓", timeout=120_000)
            expect(view.locator(".tulip-nb-player").first).to_be_attached()

            view.locator("button", has_text="Clear filters").click()
            expect(head).to_contain_text("rows 1-25 of 200 threads · sorted by tokens ↓ · page 1 of 8")
            assert table.locator("tbody tr").count() == 25
            first = table.locator("tbody tr td code").first.inner_text()
            view.scroll_into_view_if_needed()
            _save(view, tmp_path, "07_corpus_view_mounted")

            view.locator("button", has_text="descending").click()  # the sort click
            expect(head).to_contain_text("sorted by tokens ↑")
            expect(table.locator("tbody tr td code").first).not_to_have_text(first)
            expect(table.locator("th", has_text="tokens ▲")).to_have_count(1)

            view.locator(".widget-dropdown", has_text="sort by").locator("select").select_option("compactions")
            expect(head).to_contain_text("sorted by compactions ↓")

            query = view.locator(".widget-text", has_text="query").locator("input")
            query.fill("tokens > 2000 and tool_errors == 0")
            query.press("Enter")
            expect(head).to_contain_text("matching (200 threads) · sorted by compactions ↓")
            query.fill("tokns > 1")
            query.press("Enter")
            expect(view.locator(".tulip-nb-error").first).to_contain_text("name 'tokns' is not defined")
            query.fill("tokens > 2000 and tool_errors == 0")
            query.press("Enter")
            expect(view.locator(".tulip-nb-error")).to_have_count(0)

            pick = view.locator(".widget-select select").first
            chosen = pick.locator("option").nth(2).inner_text()
            pick.select_option(chosen)  # choosing a row opens it in the replay tab
            expect(view.locator(".tulip-nb-note", has_text=f"opened {chosen}")).to_have_count(1)
            player = view.locator(".tulip-nb-player").first
            expect(player).to_be_visible()
            expect(player).to_contain_text(re.compile(r"model call [1-9]\d* of \d+"))  # its last call, not call 0
            expect(table.locator("tr.tulip-nb-selected code").first).to_have_text(chosen)
            view.scroll_into_view_if_needed()
            _save(view, tmp_path, "07_corpus_view_thread_opened")

            view.locator(".lm-TabBar-tab", has_text="configs").click()
            view.locator(".widget-dropdown", has_text="config").locator("select").select_option("2k")
            expect(view.locator(".tulip-nb-ok", has_text="config 2k:").first).to_be_visible()
            _save(view, tmp_path, "07_corpus_view_config")
            view.locator(".lm-TabBar-tab", has_text="distributions").click()
            expect(view.locator(".widget-image").first).to_be_visible()
            _save(view, tmp_path, "07_corpus_view_distributions")
        except Exception:
            page.screenshot(path=str(tmp_path / "07_failure.png"), full_page=True)
            SHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp_path / "07_failure.png", SHOTS / "07_failure.png")
            raise
        finally:
            browser.close()
    print(f"browser test (07): {time.perf_counter() - t0:.1f} s; screenshots in {SHOTS}")
