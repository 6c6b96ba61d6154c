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
Before writing anything, an export prints what it will write into DEST for DEST's layout (the
history layout stores each message once and a small row per checkpoint; tulip's layout a whole
state per checkpoint); --dry-run prints only that.
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
        "--layout",
        choices=("history", "tulip"),
        help="DEST's layout, for a store that takes one: history (messages once, a row per checkpoint) or "
        "tulip (also a whole envelope per checkpoint, what tulip lists); default: the store's own",
    )
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
    from tulip_nb.memory.backends import checkpointer_from_url

    cp = checkpointer_from_url(source)  # builds; connects to nothing
    try:
        require_existing(cp, source)
    finally:
        asyncio.run(cp.close())


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n / 1e3:,.1f} kB"


async def _open_dest(url: str, layout: str | None) -> tuple[Any, bool]:
    """DEST as a URL (opened by the export), or built here with ``layout=`` (closed by the caller).

    A store takes ``layout=`` when the store it builds has a ``layout`` (building connects to
    nothing); one without writes a single layout, and ``--layout`` is refused for it.
    """
    if layout is None:
        return url, False
    from tulip_nb.core.errors import UserError
    from tulip_nb.memory.backends import checkpointer_from_url

    probe = checkpointer_from_url(url)
    has_layout = hasattr(probe, "layout")
    await probe.close()
    if not has_layout:
        raise UserError(f"{url!r}: this store takes no --layout (it writes one layout only)")
    return checkpointer_from_url(url, layout=layout), True


def _estimate_line(report: Any, dry_run: bool) -> str:
    layout = report.attrs.get("dest_layout", "?")
    verb = "would write" if dry_run else "will write"
    return (
        f"{verb} ~{_size(int(report['dest_bytes'].sum()))} into the destination for "
        f"{int(report['copied'].sum())} checkpoint(s) ({_size(int(report['bytes'].sum()))} of state JSON read); "
        f"its layout: {layout}"
    )


def run(args: argparse.Namespace) -> int:
    from tulip_nb._deps import require

    require("pandas", feature="export")  # fail before any store is opened
    _check_source(args.source)
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from tulip_nb.lab.export import aexport_threads

    dest, close_dest = await _open_dest(args.dest, args.layout)
    options: dict[str, Any] = {
        "history": "latest" if args.latest_only else "all",
        "on_conflict": args.on_conflict,
        "map_ids": args.map_ids,
        "principal": args.principal,
        "concurrency": args.concurrency,
    }
    try:
        if not args.dry_run:  # say what it will cost before writing it
            plan = await aexport_threads(
                args.source, dest, args.threads, verify=False, dry_run=True, progress=False, **options
            )
            if not plan.empty:
                print(_estimate_line(plan, dry_run=False), flush=True)
        report = await aexport_threads(
            args.source,
            dest,
            args.threads,
            verify=not args.no_verify,
            dry_run=args.dry_run,
            progress=not args.no_progress and sys.stderr.isatty(),
            **options,
        )
    finally:
        if close_dest:
            await dest.close()
    if report.empty:
        print("no threads matched")
        return 0
    shown = report.drop(columns=["dest_thread"]) if (report["thread"] == report["dest_thread"]).all() else report
    print(shown.astype(object).where(shown.notna(), "-").to_string(index=False))
    failed = report["status"].isin(["failed", "conflict"])
    total = int(report["copied"].sum())
    verb = "would copy" if args.dry_run else "copied"
    print(f"\n{len(report)} thread(s), {verb} {total} checkpoint(s), {int(failed.sum())} failed")
    if args.dry_run:
        print(_estimate_line(report, dry_run=True))
    return 1 if failed.any() else 0
