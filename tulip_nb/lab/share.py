"""Share a thread without a kernel: self-contained HTML pages of a thread, a diff, a corpus.

A colleague with no kernel, no store and no tulip_nb opens the file in a browser; it also works
as a paper's supplement, a CI artifact or a static site. Each page is **one file**: the CSS and
the plain JavaScript are inline, figures are inline SVG images, the data is embedded as JSON,
and a Content-Security-Policy forbids every network request. Thread content is untrusted (models
and tools wrote it): every string is escaped, so ``<script>``, ``onerror=`` attributes,
``javascript:`` URLs or U+2028 in a message are shown as text and never run or break the page.

:func:`to_html` writes (or returns) the page of whatever it is given:

- :func:`thread_html` / ``to_html(thread, path)``: turns and outcomes, the token plot with trigger
  and window, a replay of what the model saw at each model call (slider, ◀ ▶, arrow keys),
  compaction events, every message with tool calls and results collapsed; texts longer than
  ``max_chars`` are truncated, with their full length shown.
- :func:`diff_html` / ``to_html(diff, path)``: the what-if diff: the summary (common
  ancestor, branch point), then every hunk of changed rows with context.
- :func:`write_corpus_site` / ``to_html(corpus, dir)``: ``index.html`` (a summary table, sortable
  and filterable in plain JavaScript) and one page per thread under ``threads/``.

The command line does the same: ``tulip-nb share URL THREAD -o thread.html`` and ``tulip-nb share
URL A --diff B -o diff.html``.

>>> from tulip_nb.memory.backends import MemoryCheckpointer
>>> from tulip_nb.lab import open_thread
>>> from tulip_nb.testing import MessySpec, build_messy_thread
>>> cp = MemoryCheckpointer()
>>> _ = build_messy_thread(cp, "demo", MessySpec(seed=1, turns=4))
>>> html = thread_html(open_thread(cp, "demo"), plot=False)
>>> html.startswith("<!DOCTYPE html>"), "default-src 'none'" in html
(True, True)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, overload

from tulip_nb.core.errors import UserError
from tulip_nb.lab._thread import Thread
from tulip_nb.lab.corpus import Corpus
from tulip_nb.lab.diff import ThreadDiff

__all__ = ["MAX_CHARS", "diff_html", "page_name", "thread_html", "write_corpus_site", "write_html"]

MAX_CHARS = 4000
"""Characters of one message (or tool argument, or result) a page shows; the rest is cut, and
the page says how long the whole text was."""


def _check_chars(max_chars: int) -> int:
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise UserError(f"max_chars must be a positive number of characters, got {max_chars!r}")
    return max_chars


def thread_html(thread: Thread, *, max_chars: int = MAX_CHARS, plot: bool = True) -> str:
    """The page of ``thread`` as a string (see the module docstring); ``plot=False`` leaves out
    the token plot (no matplotlib needed)."""
    from tulip_nb.lab._pages import thread_page

    return thread_page(thread, max_chars=_check_chars(max_chars), plot=plot)


def diff_html(diff: ThreadDiff, *, context: int = 3, max_chars: int = MAX_CHARS) -> str:
    """The page of a :class:`~tulip_nb.lab.ThreadDiff`: summary and branch point, then its hunks
    with ``context`` same messages around each change."""
    from tulip_nb.lab._pages import diff_page

    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise UserError(f"context must be 0 or more messages, got {context!r}")
    return diff_page(diff, context=context, max_chars=_check_chars(max_chars))


def write_html(path: str | Path, html: str) -> Path:
    """Write a page to ``path`` (parent directories made); returns the path."""
    from tulip_nb.lab._pages import write_page

    return write_page(path, html)


def page_name(thread_id: str) -> str:
    """A file name for ``thread_id``'s page in a corpus site (``threads/<name>``): the id's safe
    characters and a digest of the whole id, so ``a/b``, ``a:b`` and ``../x`` get distinct names
    that stay in their folder.

    >>> page_name("ticket-8912"), page_name("../etc/passwd")
    ('ticket-8912-f1ffbbce.html', 'etc_passwd-7fef78f5.html')
    """
    from tulip_nb.lab._pages import page_name as name

    return name(thread_id)


def write_corpus_site(corpus: Corpus, directory: str | Path, **options: Any) -> Path:
    """Write ``index.html`` and ``threads/<page_name>`` for every thread of ``corpus`` into
    ``directory`` (made when missing); returns the path of ``index.html``. ``options``:
    ``max_chars``, ``plot`` (per-thread token plots, default True)."""
    from tulip_nb.lab._pages import write_site

    max_chars = _check_chars(options.pop("max_chars", MAX_CHARS))
    plot = bool(options.pop("plot", True))
    if options:
        raise UserError(f"write_corpus_site: unknown options {sorted(options)}")
    return write_site(corpus, Path(directory), max_chars=max_chars, plot=plot)


@overload
def to_html(obj: Thread | ThreadDiff, path: None = None, **options: Any) -> str: ...
@overload
def to_html(obj: Thread | ThreadDiff | Corpus, path: str | Path, **options: Any) -> Path: ...
def to_html(obj: Thread | ThreadDiff | Corpus, path: str | Path | None = None, **options: Any) -> str | Path:
    """The self-contained page of a :class:`~tulip_nb.lab.Thread` or a
    :class:`~tulip_nb.lab.ThreadDiff`, written to ``path`` (returns the path) or returned as a
    string when ``path`` is None; a :class:`~tulip_nb.lab.Corpus` is written as a site into the
    directory ``path`` (returns its ``index.html``).

    ``options``: ``max_chars`` (all), ``plot`` (a thread, a corpus: the token plots),
    ``context`` (a diff: same messages shown around each change).

    >>> to_html(42)
    Traceback (most recent call last):
    ...
    tulip_nb.core.errors.UserError: to_html takes a Thread, a ThreadDiff or a Corpus, got int
    """
    if isinstance(obj, Corpus):
        if path is None:
            raise UserError("to_html(corpus, directory): a corpus is a site of pages, give the directory to write")
        return write_corpus_site(obj, path, **options)
    if isinstance(obj, Thread):
        html = thread_html(obj, **_only(options, "max_chars", "plot"))
    elif isinstance(obj, ThreadDiff):
        html = diff_html(obj, **_only(options, "max_chars", "context"))
    else:
        raise UserError(f"to_html takes a Thread, a ThreadDiff or a Corpus, got {type(obj).__name__}")
    return html if path is None else write_html(path, html)


def _only(options: dict[str, Any], *allowed: str) -> dict[str, Any]:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise UserError(f"to_html: unknown options {unknown} (this page takes {', '.join(allowed)})")
    return options
