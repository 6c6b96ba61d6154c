"""HTML escaping shared by :mod:`tulip_nb.lab` (its ``_repr_html_`` tables) and :mod:`tulip_nb.widgets`."""

from __future__ import annotations

import html

__all__ = ["esc"]


def esc(value: object) -> str:
    """HTML-escaped text of ``value`` (``None`` -> empty).

    >>> esc('<b a="1">'), esc(None)
    ('&lt;b a=&quot;1&quot;&gt;', '')
    """
    return html.escape("" if value is None else str(value), quote=True)
