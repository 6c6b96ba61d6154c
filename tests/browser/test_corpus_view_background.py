"""CorpusView in a real browser while its summary is still being read.

A notebook opens a view over a store whose header listings are slow (0.25 s each, as a remote
database can be): the view must mount at once with the thread ids and a progress bar, page and
open a thread in the replay tab while the summary runs (browser -> kernel -> browser, so the
kernel is not blocked), then fill the table in when the summary is read.

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

NOTEBOOK = "corpus_background.ipynb"
SOURCE = """\
import asyncio
from tulip_nb.lab import build_corpus, open_corpus
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.widgets import CorpusView


class SlowStore(MemoryCheckpointer):
    delay = 0.0

    async def list_checkpoint_infos(self, thread_id, limit=10):
        await asyncio.sleep(self.delay)
        return await super().list_checkpoint_infos(thread_id, limit)


cp = SlowStore()
build_corpus(cp, n=60, seed=4)
cp.delay = 0.25  # ~60 threads x 0.25 s: the summary takes seconds
view = CorpusView(open_corpus(cp), page_size=10)
view"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[str]:
    import nbformat

    for base in jupyterlab_server(tmp_path, []):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(SOURCE)]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        nbformat.write(nb, tmp_path / "root" / NOTEBOOK)
        yield base


def test_corpus_view_is_usable_while_its_summary_runs(lab: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    t0 = time.perf_counter()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1600})
        page.set_default_timeout(60_000)
        try:
            _open_and_run_all(page, lab, NOTEBOOK)
            view = page.locator(".widget-vbox.tulip-nb-corpus").first
            view.wait_for(timeout=120_000)
            head = (
                view.locator(".widget-html", has=page.locator(".tulip-nb-corpus-table")).locator(".tulip-nb-note").first
            )
            expect(head).to_contain_text("rows 1-10 of 60 threads · page 1 of 6 · summary pending")
            expect(view.locator(".tulip-nb-progress").first).to_be_visible()
            shot = tmp_path / "corpus_view_pending.png"
            view.screenshot(path=str(shot))
            view.locator("button", has_text="next").click()  # a round trip to the kernel
            expect(head).to_contain_text("rows 11-20 of 60 threads · page 2 of 6 · summary pending")
            pick = view.locator(".widget-select select").first
            # by position: the options are re-rendered for page 2 just after the header (separate
            # widget messages), so a label read a moment before may be gone when it is selected
            pick.select_option(index=1)
            player = view.locator(".tulip-nb-player").first
            expect(player).to_be_visible()
            expect(player).to_contain_text(re.compile(r"model call [1-9]\d* of \d+"))
            expect(head).to_contain_text("summary pending")  # all of that while the summary ran
            expect(head).not_to_contain_text("summary pending", timeout=120_000)
            expect(head).to_contain_text("rows 11-20 of 60 threads · page 2 of 6")
            expect(view.locator(".tulip-nb-progress")).to_be_hidden()
            cells = view.locator(".tulip-nb-corpus-table tbody tr").first.locator("td")
            expect(cells.nth(1)).to_have_text(re.compile(r"^\d+$"))  # turns: a number now, not "—"
            view.screenshot(path=str(tmp_path / "corpus_view_read.png"))
            SHOTS.mkdir(parents=True, exist_ok=True)
            for name in ("corpus_view_pending.png", "corpus_view_read.png"):
                shutil.copy(tmp_path / name, SHOTS / name)
        except Exception:
            page.screenshot(path=str(tmp_path / "background_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    print(f"browser test (background summary): {time.perf_counter() - t0:.1f} s")
