"""The page skeleton every shared page uses: one HTML file that needs nothing but a browser.

A page is ``<head>`` (charset, a Content-Security-Policy, the inline CSS) and a body of escaped
HTML, then data blocks (``<script type="application/json">``, see :func:`._text.script_json`) and
our own inline scripts from ``assets/``. The policy is the second wall behind escaping:
``default-src 'none'`` (no request of any kind: no fetch, no image, font or frame from anywhere
but ``data:`` images), scripts only when their SHA-256 is listed (so an injected ``<script>`` or
an ``onerror=`` attribute would not run even if escaping failed), no ``<base>``, no form posts.

>>> html = page("t <1>", "<p>hi</p>", scripts=["table.js"], data={"x": 1})
>>> html.startswith("<!DOCTYPE html>"), "<title>t &lt;1&gt;</title>" in html
(True, True)
>>> "default-src 'none'" in html and "'sha256-" in html
True
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tulip_nb.lab._pages._text import esc, script_json

__all__ = ["asset", "page", "page_name", "write_page"]

GENERATOR = "tulip_nb"


@cache
def asset(name: str) -> str:
    """The text of ``assets/<name>`` (CSS or JavaScript shipped with the package)."""
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def _hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"


def _policy(scripts: list[str]) -> str:
    script_src = " ".join(_hash(s) for s in scripts) or "'none'"
    return (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src {script_src}; base-uri 'none'; form-action 'none'"
    )


def page(title: str, body: str, *, scripts: Sequence[str] = (), data: dict[str, Any] | None = None) -> str:
    """A whole HTML document: ``body`` (already escaped HTML), ``data`` as JSON blocks (one per
    key, ``id="tnb-<key>"``) and the named ``assets/`` scripts, allowed by hash."""
    code = [asset(name) for name in scripts]
    blocks = "".join(
        f'<script type="application/json" id="tnb-{esc(key)}">{script_json(value)}</script>\n'
        for key, value in (data or {}).items()
    )
    inline = "".join(f"<script>{c}</script>\n" for c in code)
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f'<meta http-equiv="Content-Security-Policy" content="{_policy(code)}">\n'
        "<meta name='referrer' content='no-referrer'>\n"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
        f"<meta name='generator' content='{GENERATOR}'>\n"
        f"<title>{esc(title)}</title>\n<style>{asset('page.css')}</style>\n</head>\n"
        f"<body>\n{body}\n{blocks}{inline}</body>\n</html>\n"
    )


def write_page(path: str | Path, html: str) -> Path:
    """Write ``html`` to ``path`` (UTF-8; a lone surrogate from a thread is written as an escape,
    never a crash); the parent directory is made when missing. Returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(html.encode("utf-8", errors="backslashreplace"))
    return out


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def page_name(thread_id: str) -> str:
    """A file name for ``thread_id``'s page: the id's safe characters and a digest of the whole id,
    so ``a/b``, ``a:b`` and ``../x`` get distinct names that stay in their folder.

    >>> page_name("ticket-8912"), page_name("../etc/passwd")
    ('ticket-8912-f1ffbbce.html', 'etc_passwd-7fef78f5.html')
    """
    stem = _UNSAFE.sub("_", thread_id).strip("._")[:80] or "thread"
    return f"{stem}-{hashlib.sha256(thread_id.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}.html"
