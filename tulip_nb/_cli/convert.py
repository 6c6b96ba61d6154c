"""``tulip-nb convert PATH [--to history|delta|tulip] [THREAD ...]``: change a file store's layout, verified.

``history`` (the default) moves a store written by the previous release (the ``delta`` layout, the
``tulip`` layout, tulip-agents' envelopes) into ``FileCheckpointer(base, layout="history")``: every
checkpoint is written, loaded back and compared first, and only then are the old files removed
(:func:`tulip_nb.memory.backends.file_convert.convert_to_history`); tulip-agents' own envelopes
stay as they are. A conversion that stops midway can be run again; a converted thread is compared,
not written again. One line per thread, exit 1 when a thread was refused::

    tulip-nb convert ./threads
    tulip-nb convert ./threads ticket-8912-refund

``delta`` / ``tulip`` convert between the previous release's two layouts (an append-only log per
thread plus one tulip envelope, or one envelope per checkpoint)::

    tulip-nb convert ./threads ticket-8912-refund --to tulip
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Literal, cast


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "convert", help="convert a file store to the history layout (or between the delta and tulip layouts)"
    )
    parser.add_argument("path", help="the FileCheckpointer base directory (or file:PATH)")
    parser.add_argument(
        "--to",
        default="history",
        choices=["history", "delta", "tulip"],
        help="the layout to convert to (default: history)",
    )
    parser.add_argument("threads", nargs="*", metavar="THREAD", help="thread ids (default: every thread)")
    parser.set_defaults(handler=run)


def _base(path: str) -> Path:
    from tulip_nb.core.errors import UserError

    path = path[len("file:") :] if path.startswith("file:") else path
    base = Path(path.removeprefix("//"))
    if not base.is_dir():
        raise UserError(f"no such directory: {base} (convert works on a FileCheckpointer base directory)")
    return base


def _disk(base: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(base):
        for name in files:
            with contextlib.suppress(OSError):  # gone meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def run(args: argparse.Namespace) -> int:
    base = _base(args.path)
    if args.to == "history":
        return _to_history(base, args.threads)
    return _between(base, cast(Literal["delta", "tulip"], args.to), args.threads)


def _to_history(base: Path, threads: list[str]) -> int:
    from tulip_nb.memory.backends.file_convert import convert_to_history

    before, t0 = _disk(base), time.perf_counter()
    done = convert_to_history(base, threads or None)
    seconds, after = time.perf_counter() - t0, _disk(base)
    refused = 0
    for r in done:
        if r.status == "refused":
            refused += 1
            print(f"{r.thread_id}: refused: {r.detail}", file=sys.stderr)
            continue
        parts = [f"{r.converted} converted", f"{r.verified} verified"]
        if r.tulip_kept:
            parts.append(f"{r.tulip_kept} tulip envelope(s) kept")
        if r.removed:
            parts.append(f"{r.removed} old file(s) removed")
        state = {"converted": "converted", "already": "already in the history layout", "pending": "pending"}[r.status]
        line = f"{r.thread_id}: {r.checkpoints} checkpoint(s), {', '.join(parts)}; {state}"
        print(line + (f" ({r.detail})" if r.detail else ""))
    converted = sum(r.converted for r in done)
    verified = sum(r.verified for r in done)
    print(
        f"tulip-nb convert: {len(done) - refused} of {len(done)} thread(s) in the history layout,"
        f" {converted} checkpoint(s) converted, {verified} verified, in {seconds:.1f} s;"
        f" disk {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB",
        file=sys.stderr,
    )
    return 1 if refused else 0


def _between(base: Path, layout: Literal["delta", "tulip"], threads: list[str]) -> int:
    from tulip_nb.memory.backends.file_convert import convert_between

    done = convert_between(base, layout, threads or None)
    for r in done:
        what = f"{r.converted} converted" if r.converted else f"already {layout}"
        print(f"{r.thread_id}: {r.checkpoints} checkpoint(s), {what}, verified")
    print(f"tulip-nb convert: {len(done)} thread(s) in the {layout} layout", file=sys.stderr)
    return 0
