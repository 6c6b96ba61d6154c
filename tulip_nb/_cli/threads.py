"""``tulip-nb threads ls|show|rm URL ...``: look at and remove the threads in a checkpointer.

::

    tulip-nb threads ls ./demo_threads
    tulip-nb threads show postgresql://postgres@127.0.0.1/test ticket-8912 --checkpoints 5
    tulip-nb threads show ./demo_threads ticket-8912 --tail 10
    tulip-nb threads rm ./demo_threads ticket-8912
"""

from __future__ import annotations

import argparse
from typing import Any

from tulip_nb._cli._common import one_line, with_checkpointer


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("threads", help="list, show or remove the threads of a checkpointer URL")
    sub = parser.add_subparsers(dest="threads_command", metavar="ACTION", required=True)
    ls = sub.add_parser("ls", help="list thread ids (needs a backend that can list threads)")
    ls.add_argument("url", help="checkpointer URL (file:DIR, postgresql://..., redis://..., ...)")
    ls.add_argument("--pattern", default="*", help="glob on thread ids (default: %(default)s)")
    ls.add_argument("--limit", type=int, default=1000, help="at most this many (default: %(default)s)")
    ls.set_defaults(handler=run_ls)
    show = sub.add_parser("show", help="print a thread's conversation and its checkpoints")
    show.add_argument("url", help="checkpointer URL")
    show.add_argument("thread_id")
    show.add_argument("--checkpoints", type=int, default=20, help="how many checkpoints to list (default: %(default)s)")
    show.add_argument(
        "--tail", type=int, default=None, metavar="N", help="show only the last N messages (default: all)"
    )
    show.add_argument("--width", type=int, default=100, help="cut message text at this width (default: %(default)s)")
    show.set_defaults(handler=run_show)
    rm = sub.add_parser("rm", help="delete a thread (or one checkpoint of it)")
    rm.add_argument("url", help="checkpointer URL")
    rm.add_argument("thread_id")
    rm.add_argument("--checkpoint", default=None, help="delete only this checkpoint")
    rm.set_defaults(handler=run_rm)


def run_ls(args: argparse.Namespace) -> int:
    async def work(cp: Any) -> list[str]:
        return list(await cp.list_threads(limit=args.limit, pattern=args.pattern))

    for thread_id in sorted(with_checkpointer(args.url, work)):
        print(thread_id)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from tulip_nb.core.errors import CheckpointNotFound, UserError

    if args.tail is not None and args.tail < 0:
        raise UserError(f"--tail must be 0 or more, got {args.tail}")

    async def work(cp: Any) -> tuple[Any, list[Any]]:
        ckpt = await cp.load_checkpoint(args.thread_id)
        if ckpt is None:
            raise CheckpointNotFound("no such thread", thread_id=args.thread_id)
        return ckpt, await cp.list_checkpoint_infos(args.thread_id, limit=args.checkpoints)

    ckpt, infos = with_checkpointer(args.url, work)
    state = ckpt.state
    print(f"thread {args.thread_id}: {len(state.messages)} messages, latest checkpoint {ckpt.checkpoint_id}")
    print()
    start = 0 if args.tail is None else max(0, len(state.messages) - args.tail)
    if start:
        print(f"   … {start} earlier message(s) not shown (--tail {args.tail})")
    for i, m in enumerate(state.messages[start:], start):
        line = f"{i:>4}  {m.role:<9} {one_line(m.content, args.width)}"
        calls = ", ".join(f"{c.name}({one_line(str(dict(c.arguments)), 60)})" for c in m.tool_calls)
        print(line + (f"  -> {calls}" if calls else ""))
    print()
    print(f"checkpoints (newest first, {len(infos)} shown):")
    for info in infos:
        source = info.metadata.get("source", "")
        parent = info.parent_checkpoint_id or "-"
        print(f"  {info.checkpoint_id}  {info.created_at.isoformat()}  {source:<9} parent {parent}")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from tulip_nb.core.errors import CheckpointNotFound

    async def work(cp: Any) -> bool:
        return bool(await cp.delete(args.thread_id, args.checkpoint))

    if not with_checkpointer(args.url, work):
        raise CheckpointNotFound("nothing to delete", thread_id=args.thread_id, checkpoint_id=args.checkpoint)
    what = f"checkpoint {args.checkpoint} of thread" if args.checkpoint else "thread"
    print(f"deleted {what} {args.thread_id}")
    return 0
