"""``tulip-nb share URL THREAD -o thread.html``: a thread (or a diff) as one self-contained page.

For a colleague without a kernel, a store or tulip_nb: the page opens in any browser and makes no
network request (:mod:`tulip_nb.lab.share`)::

    tulip-nb share ./threads ticket-8912 -o ticket-8912.html
    tulip-nb share ./threads ticket-8912 --diff ticket-8912-what-if -o what-if.html
    tulip-nb share ./corpus 'case-*' --corpus -o site/

The thread page has the turns and how they ended, the token plot, a replay of what the model saw
at each call (slider and arrow keys), compaction events and every message (tool calls and results
collapsed; texts over ``--max-chars`` truncated with their length shown). With ``--diff B`` the
page is the what-if diff of ``THREAD`` (a) and ``B``: branch point, then each change with ``-U``
messages of context. With ``--corpus``, THREAD is a glob and the output a directory: a static
site of the matching threads (``index.html``, sortable and filterable, and a page per thread
under ``threads/``). Prints the path written and its size. Exit 0, or 2 on an error (an unknown
thread, a bad URL, the notebook extra missing).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tulip_nb._cli._common import with_checkpointer


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "share",
        help="write a thread (or a diff of two) as one self-contained HTML page, for readers without a kernel",
    )
    parser.add_argument("url", help="checkpointer URL")
    parser.add_argument("thread", help="the thread (a, with --diff; a glob, with --corpus)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--diff", metavar="B", help="write the diff of THREAD and B instead")
    what.add_argument("--corpus", action="store_true", help="write a static site of the threads matching THREAD")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="the page to write (default: <thread>.html; with --corpus: a directory, ./site)",
    )
    parser.add_argument("-U", "--context", type=_count, default=3, metavar="N", help="diff context (default 3)")
    parser.add_argument(
        "--max-chars", type=_count, default=4000, metavar="N", help="characters of a message shown (default 4000)"
    )
    parser.add_argument("--no-plot", action="store_true", help="leave out the token plot (no matplotlib)")
    parser.set_defaults(handler=run)


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {n}")
    return n


def _default_output(args: argparse.Namespace) -> Path:
    from tulip_nb.lab.share import page_name

    name = page_name(args.thread if args.diff is None else f"{args.thread}--{args.diff}")
    return Path(name)


def run(args: argparse.Namespace) -> int:
    from tulip_nb.lab import aopen_thread
    from tulip_nb.lab.diff import adiff_threads
    from tulip_nb.lab.share import diff_html, thread_html, write_html

    if args.max_chars < 1:
        raise ValueError("--max-chars must be 1 or more")
    if args.corpus:
        return _corpus(args)

    async def work(cp: Any) -> str:
        a = await aopen_thread(cp, args.thread)
        if args.diff is None:
            return thread_html(a, max_chars=args.max_chars, plot=not args.no_plot)
        b = await aopen_thread(cp, args.diff)
        return diff_html(await adiff_threads(a, b), context=args.context, max_chars=args.max_chars)

    html = with_checkpointer(args.url, work)
    out = write_html(args.output or _default_output(args), html)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


def _corpus(args: argparse.Namespace) -> int:
    from tulip_nb._cli._common import require_existing
    from tulip_nb.lab.corpus import open_corpus
    from tulip_nb.lab.share import to_html

    with open_corpus(args.url, args.thread) as corpus:
        require_existing(corpus.checkpointer, args.url)
        if not len(corpus):
            raise ValueError(f"no thread of {args.url!r} matches {args.thread!r}: nothing to share")
        index = to_html(corpus, args.output or Path("site"), max_chars=args.max_chars, plot=not args.no_plot)
    size = sum(f.stat().st_size for f in index.parent.rglob("*.html"))
    print(f"wrote {index} and {len(corpus)} thread pages ({size:,} bytes)")
    return 0
