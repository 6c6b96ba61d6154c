"""Shared pages at size: bytes written, time to build, time to open in Chromium (figures, not tests).

Builds a messy 300-turn thread (failed and tulip turns, a fork; ``tulip_nb.testing``), its page and
the page of its fork diff, and a 50-thread corpus site; then opens each page in headless Debian
chromium (playwright, offline: the network is disabled and every request is counted) and reports
the load event (navigation start -> ``load``, the replay drawn by then) and the mean time to show
one model call in the replay (render and layout, in the page, over every call). The issue's bound:
a 300-turn page <= 5 MB, open < 2 s.

    python scripts/share_pages.py                 # about a minute
    python scripts/share_pages.py --turns 1000    # a longer thread
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tulip_nb.lab import diff_threads, open_corpus, open_thread, to_html
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.testing import MessySpec, build_messy_corpus, build_messy_thread

CHROMIUM = "/usr/bin/chromium"


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


STEP_ALL = """() => {
  const s = document.getElementById('tnb-slider'), n = +s.max + 1;
  let total = 0;
  for (let k = 0; k < n; k += 1) {
    const t0 = performance.now();
    s.value = String(k);
    s.dispatchEvent(new Event('input'));
    document.querySelector('#tnb-view tbody').getBoundingClientRect();  // include the layout
    total += performance.now() - t0;
  }
  return total / n;
}"""
"""Mean milliseconds to show one model call of the replay (render and layout), over every call."""


def open_times(paths: list[Path], runs: int) -> dict[Path, dict[str, float]]:
    """Median load time (ms) of each page over ``runs`` fresh pages, and of the replay's mean step."""
    from playwright.sync_api import sync_playwright

    out: dict[Path, dict[str, float]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless=new"])
        context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
        requests: list[str] = []
        context.on("request", lambda r: requests.append(r.url))
        for path in paths:
            loads, steps = [], []
            for _ in range(runs):
                page = context.new_page()
                page.goto(path.as_uri(), wait_until="load")
                nav = page.evaluate("JSON.stringify(performance.getEntriesByType('navigation')[0])")
                import json

                loads.append(json.loads(nav)["loadEventEnd"])
                if page.locator("#tnb-slider").count():
                    steps.append(page.evaluate(STEP_ALL))
                page.close()
            out[path] = {"load": statistics.median(loads), "step": statistics.median(steps) if steps else float("nan")}
        browser.close()
    others = [u for u in requests if not u.startswith("file://")]
    print(f"requests other than the pages' own files: {len(others)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tnb-share-"))

    cp = MemoryCheckpointer()
    truth, took = timed(lambda: build_messy_thread(cp, "messy", MessySpec(seed=30, turns=args.turns, forks=1)))
    thread = open_thread(cp, "messy")
    print(f"thread: {thread!r} ({thread.n_calls} model calls; built in {took:.1f} s)")
    page, took_page = timed(lambda: to_html(thread, root / "thread.html"))
    fork = open_thread(cp, truth.forks[0].thread_id)
    diff, took_diff = timed(lambda: to_html(diff_threads(thread, fork), root / "diff.html"))

    corpus_cp = MemoryCheckpointer()
    build_messy_corpus(corpus_cp, args.threads, MessySpec(seed=31, turns=12), prefix="case")
    corpus = open_corpus(corpus_cp)
    index, took_site = timed(lambda: to_html(corpus, root / "corpus"))
    site_bytes = sum(f.stat().st_size for f in (root / "corpus").rglob("*.html"))
    pages = sorted((root / "corpus" / "threads").iterdir())

    times = open_times([page, diff, index, pages[0]], args.runs)
    rows = [
        (f"thread page ({args.turns} turns)", page.stat().st_size, took_page, times[page]),
        ("fork diff page", diff.stat().st_size, took_diff, times[diff]),
        (f"corpus index ({args.threads} threads)", index.stat().st_size, took_site, times[index]),
        ("one corpus thread page (12 turns)", pages[0].stat().st_size, float("nan"), times[pages[0]]),
    ]
    print(f"\n{'page':<36} {'bytes':>11} {'build s':>8} {'open ms':>8} {'step ms':>8}")
    for name, size, build, t in rows:
        print(f"{name:<36} {size:>11,} {build:>8.2f} {t['load']:>8.0f} {t['step']:>8.1f}")
    print(f"corpus site: {len(pages) + 1} files, {site_bytes:,} bytes, built in {took_site:.1f} s (with plots)")
    print(f"pages in {root}")


if __name__ == "__main__":
    main()
