"""Reading the shared pages back in tests: their elements, attributes and embedded JSON."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any


class Elements(HTMLParser):
    """Every start tag of a page, with its attributes, and the text of each ``<script>``."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in_script: dict[str, str | None] | None = None
        self._buf: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script, self._buf = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            self._buf.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._in_script is not None:
            self.scripts.append((self._in_script, "".join(self._buf)))
            self._in_script = None

    def count(self, tag: str, **attrs: str) -> int:
        return sum(1 for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items()))

    def ids(self, pattern: str) -> list[str]:
        rx = re.compile(pattern)
        return [a["id"] or "" for _, a in self.tags if a.get("id") and rx.fullmatch(a["id"] or "")]


def data_block(html: str, name: str) -> Any:
    """The JSON of ``<script type="application/json" id="tnb-<name>">``, parsed."""
    for attrs, text in Elements(html).scripts:
        if attrs.get("type") == "application/json" and attrs.get("id") == f"tnb-{name}":
            return json.loads(text)
    raise AssertionError(f"no data block tnb-{name}")


def assert_inert(html: str) -> None:
    """Nothing in ``html`` can run but the page's own scripts: no event-handler attribute, no
    ``javascript:`` URL, no element a payload would add, and every script is ours."""
    page = Elements(html)
    for tag, attrs in page.tags:
        for k, v in attrs.items():
            assert not k.startswith("on"), (tag, k, v)
            assert not (v or "").strip().lower().startswith("javascript:"), (tag, k, v)
        assert tag not in ("iframe", "svg", "body") or (tag == "body" and not attrs), (tag, attrs)
        if tag == "meta":
            assert attrs.get("http-equiv") in (None, "Content-Security-Policy"), attrs
        if tag == "img":
            assert (attrs.get("src") or "").startswith("data:image/"), attrs
    assert page.count("style") == 1  # ours
    for attrs, text in page.scripts:
        if attrs.get("type") == "application/json":
            assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
        else:
            assert not attrs and text.lstrip().startswith("/* tulip_nb "), (attrs, text[:80])
