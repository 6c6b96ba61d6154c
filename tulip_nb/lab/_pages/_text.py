"""Untrusted text on a page: escaping, truncation with the full length shown, JSON for scripts.

Every string that comes from a thread (messages, tool arguments and results, errors, thread ids)
goes through :func:`esc` before it is HTML, or through :func:`script_json` before it is in a
``<script type="application/json">`` block. Both are safe against markup in the text:

>>> esc('<img src=x onerror="alert(1)">')
'&lt;img src=x onerror=&quot;alert(1)&quot;&gt;'
>>> script_json({"t": "</script><b>\\u2028&"})
'{"t":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u2028\\\\u0026"}'
>>> clip("x" * 10, 4)
('xxxx', 10)
"""

from __future__ import annotations

import json
from typing import Any

from tulip_nb._html import esc

__all__ = ["clip", "clipped_pre", "esc", "plain", "script_json"]

_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def plain(value: Any) -> Any:
    """``value`` with pandas/NumPy scalars and missing values as JSON-able Python (NA -> None)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return None if value != value else value  # NaN is missing, never 0
    item = getattr(value, "item", None)
    if callable(item):  # a NumPy scalar
        return plain(item())
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
    except ImportError:  # pragma: no cover - pandas comes with the notebook extra
        pass
    return str(value)


def script_json(data: Any) -> str:
    """``data`` as JSON text that can stand inside ``<script type="application/json">``.

    ``ensure_ascii`` writes U+2028/U+2029 (and any lone surrogate) as ``\\uXXXX`` escapes, and
    ``<``, ``>``, ``&`` become escapes too, so no string can close the element or open a comment.
    ``JSON.parse`` of the element's text gives ``data`` back.
    """
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.translate(_SCRIPT_SAFE)


def clip(text: str | None, limit: int) -> tuple[str, int]:
    """``(text cut to limit characters, the full length)``."""
    full = text or ""
    return (full if len(full) <= limit else full[:limit]), len(full)


def clipped_pre(text: str | None, limit: int, cls: str = "") -> str:
    """``text`` escaped in a ``<pre>``; a text longer than ``limit`` is cut, with a line saying
    how much is shown of how much."""
    shown, full = clip(text, limit)
    extra = f" class='{esc(cls)}'" if cls else ""
    body = f"<pre{extra}>{esc(shown)}</pre>"
    if full > len(shown):
        body += f"<p class='cut'>truncated: {len(shown):,} of {full:,} characters shown</p>"
    return body
