"""``tulip-nb prune URL THREAD``: drop the checkpoints a thread no longer needs.

By default the iteration (mid-turn) checkpoints of every turn that has ended, as tulip does
itself; ``--keep-last N`` keeps the N newest checkpoints, ``--drop-turn-ends`` lets turn ends go
too (rules: :mod:`tulip_nb.memory.retention`). The survivors stay a chain ``tulip-nb verify``
accepts. ``--dry-run`` lists what would go without touching the store::

    tulip-nb prune ./demo_threads ticket-8912-refund --dry-run
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tulip_nb._cli._common import with_checkpointer


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("prune", help="drop finished turns' iteration checkpoints (or keep the last N)")
    parser.add_argument("url", help="checkpointer URL")
    parser.add_argument("thread_id")
    parser.add_argument("--keep-last", type=int, default=None, metavar="N", help="keep the N newest checkpoints")
    parser.add_argument("--drop-turn-ends", action="store_true", help="do not keep every turn end")
    parser.add_argument("--dry-run", action="store_true", help="only list the checkpoints that would be dropped")
    parser.set_defaults(handler=run)


async def prune(cp: Any, args: argparse.Namespace) -> tuple[int, list[str], int]:
    """``(checkpoints before, ids dropped (or to drop), checkpoints after)``."""
    from tulip_nb.core.errors import CheckpointNotFound
    from tulip_nb.memory.retention import oldest_first, plan_prune

    infos = await cp.list_checkpoint_infos(args.thread_id, None)
    if not infos:
        raise CheckpointNotFound("no such thread", thread_id=args.thread_id)
    keep_turn_ends = not args.drop_turn_ends
    plan = plan_prune(infos, args.keep_last, keep_turn_ends)
    ids = [i.checkpoint_id for i in oldest_first(infos) if i.checkpoint_id in plan]
    if args.dry_run:
        return len(infos), ids, len(infos)
    await cp.prune(args.thread_id, keep_last=args.keep_last, keep_turn_ends=keep_turn_ends)
    return len(infos), ids, len(await cp.list_checkpoints(args.thread_id, None))


def run(args: argparse.Namespace) -> int:
    if args.keep_last is not None and args.keep_last < 0:
        print(f"tulip-nb prune: --keep-last must be >= 0, got {args.keep_last}", file=sys.stderr)
        return 2
    before, ids, after = with_checkpointer(args.url, lambda cp: prune(cp, args))
    for cid in ids:
        print(("would drop " if args.dry_run else "dropped ") + cid)
    verb = "would drop" if args.dry_run else "dropped"
    print(f"{args.thread_id}: {verb} {len(ids)} of {before} checkpoint(s); {after} kept", file=sys.stderr)
    return 0
