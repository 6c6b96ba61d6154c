"""``tulip-nb export SRC DEST``: copy threads between checkpointers, verified (see tulip_nb.lab.export)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

_EPILOG = """\
SRC and DEST are checkpointer URLs: file:./dir, memory:, s3://bucket/prefix/?endpoint_url=...,
redis://host:6379/0?prefix=p: (tulip's keys for the same prefix, which must end in ':'),
postgresql://user@host/db, mysql://user@host/db (TLS when the server offers it; ?ssl=required:
TLS or an error, ?ssl=disabled: never), http://host:8000,
tulip-pg://user@host/db?tenant=acme (tulip's native PgCheckpointer table), or a directory
(an existing one, or a path starting with /, ./, ../ or ~). Anything else is refused (exit 2).
Exit status: 0 when every thread exported (and verified), 1 when any thread failed or conflicted."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="copy threads with their whole history from one checkpointer to another, verified",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", metavar="SRC", help="checkpointer URL to read threads from")
    parser.add_argument("dest", metavar="DEST", help="checkpointer URL to write them to")
    parser.add_argument("--threads", metavar="GLOB", help="only thread ids matching this glob (default: all)")
    parser.add_argument("--latest-only", action="store_true", help="copy each thread's latest checkpoint only")
    parser.add_argument("--dry-run", action="store_true", help="report what would be copied; write nothing")
    parser.add_argument(
        "--on-conflict",
        choices=("error", "skip", "overwrite"),
        default="error",
        help="a destination thread with checkpoints the source lacks: report it (error, the default), "
        "skip it, or overwrite it",
    )
    parser.add_argument("--no-verify", action="store_true", help="do not read the copies back and compare")
    parser.add_argument(
        "--map-ids",
        choices=("strip-principal", "add-principal"),
        help="tulip AgentServer ids '<principal>:<id>': strip the principal, or add it (needs --principal)",
    )
    parser.add_argument("--principal", help="the AgentServer principal for --map-ids ('anon' or 12 hex digits)")
    parser.add_argument("--concurrency", type=int, default=4, help="threads copied at once (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (default: on a terminal)")
    parser.set_defaults(handler=run)


def _check_source(source: str) -> None:
    """Refuse a SRC directory that does not exist (it would export "no threads", exit 0)."""
    if source.startswith(("tulip-pg://", "postgresql+tulip://")):
        return
    from tulip_nb._cli._common import require_existing
    from tulip_nb.memory.urls import checkpointer_from_url

    cp = checkpointer_from_url(source)  # builds; connects to nothing
    try:
        require_existing(cp, source)
    finally:
        asyncio.run(cp.close())


def run(args: argparse.Namespace) -> int:
    from tulip_nb._deps import require

    require("pandas", feature="export")  # fail before any store is opened
    from tulip_nb.lab.export import export_threads

    _check_source(args.source)

    report = export_threads(
        args.source,
        args.dest,
        args.threads,
        history="latest" if args.latest_only else "all",
        verify=not args.no_verify,
        dry_run=args.dry_run,
        on_conflict=args.on_conflict,
        progress=not args.no_progress and sys.stderr.isatty(),
        map_ids=args.map_ids,
        principal=args.principal,
        concurrency=args.concurrency,
    )
    if report.empty:
        print("no threads matched")
        return 0
    shown = report.drop(columns=["dest_thread"]) if (report["thread"] == report["dest_thread"]).all() else report
    print(shown.astype(object).where(shown.notna(), "-").to_string(index=False))
    failed = report["status"].isin(["failed", "conflict"])
    total = int(report["copied"].sum())
    verb = "would copy" if args.dry_run else "copied"
    print(f"\n{len(report)} thread(s), {verb} {total} checkpoint(s), {int(failed.sum())} failed")
    return 1 if failed.any() else 0
