"""Seed 001's "Cross-thread store" snippets run as written, with ``tulip`` -> ``tulip_nb``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.conftest import SHARED

LOCAL_SEEDS = Path(__file__).resolve().parents[1] / "data" / "seeds"  # a copy of ../shared/seeds

SNIPPET = re.compile(
    r"^import asyncio\nfrom tulip\.memory\.store import InMemoryStore.*?^asyncio\.run\(main\(\)\)$", re.S | re.M
)


def snippets() -> list[str]:
    seeds = sorted((SHARED / "seeds").glob("001_*.txt")) or sorted(LOCAL_SEEDS.glob("001_*.txt"))
    assert seeds, f"seed 001 not found under {SHARED / 'seeds'} or {LOCAL_SEEDS}"
    text = seeds[0].read_text()
    section = text[text.index("Cross-thread store") :]
    found = [s.replace("from tulip.", "from tulip_nb.") for s in SNIPPET.findall(section)]
    assert len(found) == 2, "seed 001 should have two store snippets"
    return found


def run(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "seed_snippet"}
    exec(compile(code, "<seed 001>", "exec"), namespace)
    return namespace


def test_seed_store_snippets_run_as_written() -> None:
    for code in snippets():
        run(code)  # asyncio.run at top level: this test is deliberately sync


def test_seed_store_snippets_give_the_expected_results() -> None:
    first, second = snippets()
    # Same code, with main() returning what the page's snippet computes.
    hit = run(
        first.replace("asyncio.run(main())", "result = asyncio.run(main())").replace(
            '"refund_policy")\n', '"refund_policy")\n    return hit\n', 1
        )
    )["result"]
    assert hit == {"content": "Refunds over $500 need manager approval"}
    hits = run(
        second.replace("asyncio.run(main())", "result = asyncio.run(main())").replace(
            "limit=5)\n", "limit=5)\n    return hits\n", 1
        )
    )["result"]
    assert [(h.key, h.value) for h in hits] == [
        ("fact-1", {"note": "cust-4821 prefers store credit over card refunds"})
    ]
