"""``tulip-nb verify URL THREAD``: re-read every checkpoint of a thread and check it.

For each checkpoint the listing names: the envelope decodes (state valid), its checkpoint and
thread ids are the ones asked for, its ``parent_checkpoint_id`` exists in the thread (or, for a
fork's first checkpoint, in the ``forked_from`` thread), it is newer
than its parent, and the listing is in ``created_at`` order (newest first). Files the backend
skipped as unreadable (a warning) count as problems too, and so does a file store's tulip envelope
that is missing, unreadable or not the log's latest turn end (the delta layout). Then the hash chain
(:func:`tulip_nb.memory.integrity.verify_thread`): every signed checkpoint's content must match its
``tulip_nb_hash`` and chain to its parent's; unsigned checkpoints (written by tulip) are counted,
not failed (``--strict`` fails an unsigned checkpoint that follows signed ones). One line per
problem, exit 1 if any::

    tulip-nb verify ./demo_threads ticket-8912-refund
"""

from __future__ import annotations

import argparse
import itertools
import sys
import warnings
from typing import Any

from tulip_nb._cli._common import with_checkpointer


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("verify", help="re-read and validate every checkpoint of a thread")
    parser.add_argument("url", help="checkpointer URL")
    parser.add_argument("thread_id")
    parser.add_argument(
        "--limit", type=int, default=100_000, help="at most this many checkpoints (default: %(default)s)"
    )
    parser.add_argument("--strict", action="store_true", help="an unsigned checkpoint after signed ones fails")
    parser.set_defaults(handler=run)


async def verify(
    cp: Any, thread_id: str, limit: int = 100_000, *, strict: bool = False, chain: dict[str, int] | None = None
) -> tuple[int, list[str]]:
    """``(checkpoints checked, problems)`` for ``thread_id`` in ``cp`` (``chain``: filled with the
    hash-chain verdict counts)."""
    from tulip_nb.core.errors import CheckpointCorrupt, CheckpointNotFound
    from tulip_nb.memory.integrity import verify_thread

    problems: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infos = await cp.list_checkpoint_infos(thread_id, limit=limit)
        created: dict[str, Any] = {}
        for info in infos:
            cid = info.checkpoint_id
            try:
                ckpt = await cp.load_checkpoint(thread_id, cid)
            except (CheckpointCorrupt, CheckpointNotFound) as e:
                problems.append(f"{cid}: cannot be read: {e}")
                continue
            except Exception as e:  # a state that no longer validates, say
                problems.append(f"{cid}: does not decode: {type(e).__name__}: {e}")
                continue
            if ckpt is None:
                problems.append(f"{cid}: listed but missing")
                continue
            if ckpt.checkpoint_id != cid:
                problems.append(f"{cid}: envelope says checkpoint_id {ckpt.checkpoint_id!r}")
            if ckpt.thread_id != thread_id:
                problems.append(f"{cid}: envelope says thread_id {ckpt.thread_id!r}")
            created[cid] = ckpt.created_at
        for newer, older in itertools.pairwise(infos):
            if newer.created_at < older.created_at:
                problems.append(f"{newer.checkpoint_id}: listed before the older {older.checkpoint_id} (created_at)")
        ids = {i.checkpoint_id for i in infos}
        complete = len(infos) < limit
        for info in infos:
            parent = info.parent_checkpoint_id
            if parent is None:
                continue
            if parent not in ids:
                source = info.metadata.get("forked_from")
                if isinstance(source, str) and source != thread_id:  # a fork's first checkpoint
                    if not await cp.exists(source, parent):
                        problems.append(f"{info.checkpoint_id}: fork parent {parent} is not in {source!r}")
                elif complete:
                    problems.append(f"{info.checkpoint_id}: parent {parent} is not in the thread")
            elif info.checkpoint_id in created and parent in created and created[parent] > created[info.checkpoint_id]:
                problems.append(f"{info.checkpoint_id}: older than its parent {parent}")
    problems += [f"warning: {w.message}" for w in caught]
    check_mirror = getattr(cp, "check_mirror", None)  # the file store's delta layout: tulip's envelope
    if callable(check_mirror):
        problems += check_mirror(thread_id)
    report = await verify_thread(cp, thread_id, limit=limit, strict=strict)
    problems += [
        f"{v.checkpoint_id}: hash chain: {v.status}: {v.detail}" for v in report.failures if v.status != "unreadable"
    ]
    if chain is not None:
        chain.update(report.counts())
    return len(infos), problems


def run(args: argparse.Namespace) -> int:
    from tulip_nb.core.errors import CheckpointNotFound

    chain: dict[str, int] = {}
    strict = bool(getattr(args, "strict", False))
    count, problems = with_checkpointer(
        args.url, lambda cp: verify(cp, args.thread_id, args.limit, strict=strict, chain=chain)
    )
    if count == 0 and not problems:
        raise CheckpointNotFound("no such thread", thread_id=args.thread_id)
    for line in problems:
        print(line)
    if problems:
        print(f"tulip-nb verify: {len(problems)} problem(s) in {count} checkpoint(s)", file=sys.stderr)
        return 1
    print(f"ok: {count} checkpoint(s) of {args.thread_id}")
    print("hash chain: " + ", ".join(f"{n} {status}" for status, n in sorted(chain.items())))
    return 0
