"""``tulip-nb prune URL THREAD``: drop the checkpoints a thread no longer needs.

By default the iteration (mid-turn) checkpoints of every turn that has ended, as tulip does
itself; ``--keep-last N`` keeps the N newest checkpoints, ``--drop-turn-ends`` lets turn ends go
too (rules: :mod:`tulip_nb.memory.retention`). The survivors stay a chain ``tulip-nb verify``
accepts. ``--dry-run`` lists what would go, and counts what would stay, without touching the store
(the same selection the real prune makes)::

    tulip-nb prune ./demo_threads ticket-8912-refund --dry-run
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
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


@dataclass(frozen=True)
class PruneCounts:
    """One prune's report: checkpoints before, ids dropped (or to drop) oldest first, checkpoints kept."""

    before: int
    dropped: list[str]
    kept: int


async def prune(cp: Any, args: argparse.Namespace) -> PruneCounts:
    """What the prune dropped (or, ``--dry-run``, would drop) and kept, from one listing.

    The dry run reports :func:`~tulip_nb.memory.retention.prune_plan` of the thread's listing,
    the very selection :meth:`~tulip_nb.memory.checkpointer.BaseCheckpointer.prune` drops; the
    real run reports what is gone from the listing afterwards (so a save made meanwhile shows).
    """
    from tulip_nb.core.errors import CheckpointNotFound
    from tulip_nb.memory.retention import oldest_first, prune_plan

    infos = await cp.list_checkpoint_infos(args.thread_id, None)
    if not infos:
        raise CheckpointNotFound("no such thread", thread_id=args.thread_id)
    keep_turn_ends = not args.drop_turn_ends
    if args.dry_run:
        plan = prune_plan(infos, args.keep_last, keep_turn_ends)
        return PruneCounts(len(infos), list(plan.dropped), len(plan.kept))
    await cp.prune(args.thread_id, keep_last=args.keep_last, keep_turn_ends=keep_turn_ends)
    after = {i.checkpoint_id for i in await cp.list_checkpoint_infos(args.thread_id, None)}
    gone = [i.checkpoint_id for i in oldest_first(infos) if i.checkpoint_id not in after]
    return PruneCounts(len(infos), gone, len(after))


def run(args: argparse.Namespace) -> int:
    if args.keep_last is not None and args.keep_last < 0:
        print(f"tulip-nb prune: --keep-last must be >= 0, got {args.keep_last}", file=sys.stderr)
        return 2
    counts = with_checkpointer(args.url, lambda cp: prune(cp, args))
    for cid in counts.dropped:
        print(("would drop " if args.dry_run else "dropped ") + cid)
    n, before, kept = len(counts.dropped), counts.before, counts.kept
    summary = (
        f"would drop {n} of {before} checkpoint(s); {kept} would be kept"
        if args.dry_run
        else f"dropped {n} of {before} checkpoint(s); {kept} kept"
    )
    print(f"{args.thread_id}: {summary}", file=sys.stderr)
    return 0
