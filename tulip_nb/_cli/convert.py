"""``tulip-nb convert PATH [THREAD ...]``: move a file store written before the history model into it, verified.

A store written by the previous release (its ``delta`` layout, its ``tulip`` layout,
tulip-agents' envelopes) moves into ``FileCheckpointer(base)``, the history layout: every
checkpoint is written, loaded back and compared first, and only then are the old files removed
(:func:`tulip_nb.memory.backends.file_convert.convert_to_history`); tulip-agents' own envelopes
stay as they are. A conversion that stops midway can be run again; a converted thread is compared,
not written again. One line per thread, exit 1 when a thread was refused::

    tulip-nb convert ./threads
    tulip-nb convert ./threads ticket-8912-refund
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("convert", help="convert a file store written before the history model to it")
    parser.add_argument("path", help="the FileCheckpointer base directory (or file:PATH)")
    parser.add_argument(
        "--to",
        default="history",
        choices=["history"],
        help="the layout to convert to (the history layout, the only one written)",
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
    from tulip_nb.memory.backends.file_convert import convert_to_history

    base = _base(args.path)
    before, t0 = _disk(base), time.perf_counter()
    done = convert_to_history(base, args.threads or None)
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
