"""The tools of the messy threads (:mod:`tulip_nb.testing._messy`): deterministic, async, offline.

``lookup_record`` is idempotent, ``query_metric`` raises on some inputs (its v2, for forks that
change a tool, never does), ``fetch_report`` returns 5-30 kB, ``ask_human`` interrupts the run.
Async, so the agent runs them without a worker thread.
"""

from __future__ import annotations

import functools
from typing import Any

from tulip_nb.tools import Interrupt, Tool

__all__ = [
    "LOOKUP",
    "METRIC_V1",
    "METRIC_V2",
    "TOOLS_V1",
    "TOOLS_V2",
    "ask_human",
    "fetch_report",
    "lookup_record",
    "metric_fails",
    "query_metric",
    "query_metric_v2",
    "report_text",
]


def _digest(text: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(text))


async def lookup_record(key: str) -> dict[str, Any]:
    """Look up a record by key (idempotent: the same key is served from the thread's record).

    Args:
        key: The record key, e.g. ``k3``.
    """
    n = _digest(key)
    return {"key": key, "value": n % 1000, "status": ("open", "closed", "held")[n % 3]}


def metric_fails(n: int) -> bool:
    """Whether ``query_metric`` v1 raises for ``n`` (multiples of 7)."""
    return n % 7 == 0


async def query_metric(n: int) -> str:
    """Read metric number ``n`` from the metrics service (some metrics are unavailable).

    Args:
        n: The metric number.
    """
    if metric_fails(n):
        raise ValueError(f"metric {n} is unavailable")
    return f"metric {n} = {n * 37 % 101}"


async def query_metric_v2(n: int) -> str:
    """Read metric number ``n`` from the new metrics service (every metric is available).

    Args:
        n: The metric number.
    """
    return f"metric {n} = {n * 37 % 101} (v2)"


_REPORT_SENTENCE = (
    "the quarterly revenue for the northern region was stable and the team reported steady growth "
    "across every product line while costs in the southern office stayed within the planned budget"
)
_REPORT_WORDS = _REPORT_SENTENCE.split()


@functools.lru_cache(maxsize=32)
def report_text(kb: int) -> str:
    """The text ``fetch_report(kb)`` returns: ``kb`` KiB of report lines (~5 characters a token)."""
    out: list[str] = []
    size = n = 0
    while size < kb * 1024:
        line = f"Section {n}: " + " ".join(_REPORT_WORDS[(n * 3 + k) % len(_REPORT_WORDS)] for k in range(14)) + ".\n"
        out.append(line)
        size += len(line)
        n += 1
    return "".join(out)[: kb * 1024]


async def fetch_report(kb: int) -> str:
    """Fetch the full analytics report (large).

    Args:
        kb: The report's size in KiB (5 to 30).
    """
    return report_text(kb)


async def ask_human(question: str) -> str:
    """Ask a human to approve the next step (pauses the run until they answer).

    Args:
        question: What to ask.
    """
    raise Interrupt(question, payload={"question": question})


LOOKUP = Tool(lookup_record, idempotent=True)
METRIC_V1 = Tool(query_metric)
METRIC_V2 = Tool(query_metric_v2, name="query_metric")
TOOLS_V1 = (LOOKUP, METRIC_V1, Tool(fetch_report), Tool(ask_human))
TOOLS_V2 = (LOOKUP, METRIC_V2, *TOOLS_V1[2:])
