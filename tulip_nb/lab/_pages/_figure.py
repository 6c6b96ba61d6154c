"""A matplotlib figure as an inline image: SVG in a ``data:`` URL (no file, no request).

An SVG shown through ``<img>`` is inert (the browser runs no script in it and loads nothing it
references), so a figure whose labels came from a thread cannot act on the page.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from tulip_nb.lab._pages._text import esc

__all__ = ["svg_img"]


def svg_img(fig: Any, alt: str, *, cls: str = "figure") -> str:
    """``<img>`` of ``fig`` as SVG (text as paths, no timestamp, so a page is reproducible)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "tulip_nb"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    data = base64.b64encode(buf.getvalue()).decode()
    return f"<img class='{esc(cls)}' alt='{esc(alt)}' src='data:image/svg+xml;base64,{data}'>"
