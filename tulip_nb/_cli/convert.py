"""``tulip-nb convert PATH [THREAD ...] --to delta|tulip``: change a file store's layout, verified.

``delta`` is FileCheckpointer's default (an append-only log per thread plus one tulip envelope,
the latest turn end); ``tulip`` is tulip's own (one envelope per checkpoint, every checkpoint
visible to tulip). Every checkpoint is read back and compared before its old copy goes; a
conversion that stops midway can be run again (:mod:`tulip_nb.memory.backends.file_convert`)::

    tulip-nb convert ./threads ticket-8912-refund --to tulip
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("convert", help="convert a file store's threads between the delta and tulip layouts")
    parser.add_argument("path", help="the FileCheckpointer base directory (or file:PATH)")
    parser.add_argument("--to", required=True, choices=["delta", "tulip"], help="the layout to convert to")
    parser.add_argument("threads", nargs="*", metavar="THREAD", help="thread ids (default: every thread)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tulip_nb.core.errors import CheckpointNotFound, UserError
    from tulip_nb.memory.backends.file import FileCheckpointer
    from tulip_nb.memory.backends.file_convert import convert_thread

    path = args.path[len("file:") :] if args.path.startswith("file:") else args.path
    base = Path(path.removeprefix("//"))
    if not base.is_dir():
        raise UserError(f"no such directory: {base} (convert works on a FileCheckpointer base directory)")
    cp = FileCheckpointer(base, layout=args.to)
    threads = args.threads or asyncio.run(cp.list_threads(limit=None))
    for thread_id in threads:
        if not asyncio.run(cp.list_checkpoints(thread_id, limit=1)):
            raise CheckpointNotFound("no such thread", thread_id=thread_id)
        done = convert_thread(cp, thread_id, args.to)
        what = f"{done.converted} converted" if done.converted else f"already {args.to}"
        print(f"{thread_id}: {done.checkpoints} checkpoint(s), {what}, verified")
    print(f"tulip-nb convert: {len(threads)} thread(s) in the {args.to} layout", file=sys.stderr)
    return 0
