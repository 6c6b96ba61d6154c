"""``tulip-nb diff URL A B``: how two threads of one checkpointer differ, message by message.

Prints the lineage-aware summary of :func:`tulip_nb.lab.diff_threads` first when the research
layer is installed (skip it with ``--simple``), then a plain diff of the latest states: the shared
prefix, then what only ``A`` has (``-``) and what only ``B`` has (``+``)::

    tulip-nb diff ./threads ticket-8912 ticket-8912-what-if

Exit status, as ``diff``'s: 0 when the conversations are identical, 1 when they differ, 2 on an
error (an unknown thread, a bad URL).
"""

from __future__ import annotations

import argparse
from typing import Any

from tulip_nb._cli._common import one_line, with_checkpointer


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="compare two threads of one checkpointer, message by message (exit 0 same, 1 differ, 2 error)",
        epilog="Exit status: 0 when the conversations are identical, 1 when they differ, 2 on an error.",
    )
    parser.add_argument("url", help="checkpointer URL")
    parser.add_argument("thread_a")
    parser.add_argument("thread_b")
    parser.add_argument("--simple", action="store_true", help="the plain message diff, even when tulip_nb.lab has one")
    parser.set_defaults(handler=run)


def _lab_diff() -> Any:
    """``(aopen_thread, adiff_threads)`` from tulip_nb.lab, or None (not built, or no pandas)."""
    try:
        from tulip_nb.lab.diff import adiff_threads
        from tulip_nb.lab.thread import aopen_thread
    except ImportError:
        return None
    return aopen_thread, adiff_threads


def _describe(m: Any) -> str:
    calls = ", ".join(c.name for c in m.tool_calls)
    return f"{m.role:<9} {one_line(m.content, 90)}" + (f"  -> {calls}" if calls else "")


def _common_prefix(a: Any, b: Any) -> int:
    common = 0
    for ma, mb in zip(a.messages, b.messages, strict=False):
        if ma.json_bytes() != mb.json_bytes():
            break
        common += 1
    return common


def identical(a: Any, b: Any) -> bool:
    """Whether states ``a`` and ``b`` hold the same conversation (message by message)."""
    return len(a.messages) == len(b.messages) == _common_prefix(a, b)


def simple_diff(a_id: str, a: Any, b_id: str, b: Any) -> list[str]:
    """Lines describing how state ``b`` differs from state ``a`` (message-level)."""
    common = _common_prefix(a, b)
    lines = [
        f"--- {a_id}  ({len(a.messages)} messages)",
        f"+++ {b_id}  ({len(b.messages)} messages)",
        f"    {common} messages in common",
    ]
    lines += [f"- {i:>4} {_describe(m)}" for i, m in enumerate(a.messages[common:], common)]
    lines += [f"+ {i:>4} {_describe(m)}" for i, m in enumerate(b.messages[common:], common)]
    if common == len(a.messages) == len(b.messages):
        lines.append("    the conversations are identical")
    return lines


def run(args: argparse.Namespace) -> int:
    from tulip_nb.core.errors import CheckpointNotFound

    lab_diff = None if args.simple else _lab_diff()

    async def work(cp: Any) -> tuple[list[str], bool]:
        states = []
        for tid in (args.thread_a, args.thread_b):
            state = await cp.load(tid)
            if state is None:
                raise CheckpointNotFound("no such thread", thread_id=tid)
            states.append(state)
        lines = []
        if lab_diff is not None:
            aopen_thread, adiff_threads = lab_diff
            result = await adiff_threads(await aopen_thread(cp, args.thread_a), await aopen_thread(cp, args.thread_b))
            lines += [*result.summary().splitlines(), ""]
        same = identical(states[0], states[1])
        return lines + simple_diff(args.thread_a, states[0], args.thread_b, states[1]), same

    lines, same = with_checkpointer(args.url, work)
    for line in lines:
        print(line)
    return 0 if same else 1
