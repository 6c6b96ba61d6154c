"""``tulip-nb diff URL A B``: how two threads of one checkpointer differ, turn by turn.

Prints the lineage-aware summary of :func:`tulip_nb.lab.diff_threads`, then its changes in hunks
with a few messages of context, like ``diff -u``::

    tulip-nb diff ./threads ticket-8912 ticket-8912-what-if
    tulip-nb diff ./threads ticket-8912 ticket-8912-what-if -U 1

    ...summary...
    --- ticket-8912  (983 messages, 300 turns)
    +++ ticket-8912-what-if  (983 messages, 300 turns)
        982 messages in common
    @@ -0,4 +0,4 @@ system prompt, turn 0
    -    0 system    You are an analyst.
    +    0 system    You are a careful analyst.
    ? system prompt changed
         1 user      turn 0: please check
    ...
    1 changed, 0 removed, 0 added in 1 hunk (3 messages of context)

A hunk header names the 0-based message indexes and counts of each side (``-start,count
+start,count``) and the turns it spans; a context line shows ``i`` (or ``i|j`` when the two
indexes differ), a changed message is a ``-`` line, a ``+`` line and a ``?`` line saying what
changed. Two messages are the same when the lab's diff says so: canonical JSON, tool-call ids
aside (a call is its position), so a copy whose store reordered keys, or a branch whose provider
renumbered its calls, is identical. The last line counts exactly the rows printed above it.

``--simple`` prints the plain diff instead (also used when ``tulip_nb.lab`` cannot be imported):
the common prefix of byte-identical messages, then what only ``A`` has (``-``) and what only ``B``
has (``+``).

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
        help="compare two threads of one checkpointer, turn by turn (exit 0 same, 1 differ, 2 error)",
        epilog="Exit status: 0 when the conversations are identical, 1 when they differ, 2 on an error.",
    )
    parser.add_argument("url", help="checkpointer URL")
    parser.add_argument("thread_a")
    parser.add_argument("thread_b")
    parser.add_argument(
        "-U",
        "--context",
        type=_context,
        default=3,
        metavar="N",
        help="messages of context around each change (default 3)",
    )
    parser.add_argument("--simple", action="store_true", help="the plain message diff, even when tulip_nb.lab has one")
    parser.set_defaults(handler=run)


def _context(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of messages, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more messages, got {n}")
    return n


def _lab_diff() -> Any:
    """``(aopen_thread, adiff_threads)`` from tulip_nb.lab, or None (not built, or not importable)."""
    try:
        from tulip_nb.lab import aopen_thread
        from tulip_nb.lab.diff import adiff_threads
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
    """Whether states ``a`` and ``b`` hold byte-identical conversations (message by message)."""
    return len(a.messages) == len(b.messages) == _common_prefix(a, b)


def simple_diff(a_id: str, a: Any, b_id: str, b: Any) -> list[str]:
    """Lines describing how state ``b`` differs from state ``a`` (message-level, by bytes)."""
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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def hunk_lines(result: Any, context: int) -> list[str]:
    """The ``diff -u``-like body for a :class:`~tulip_nb.lab.ThreadDiff`: headers, hunks and a
    last line whose counts are those of the rows printed."""
    lines = [
        f"--- {result.thread_a}  ({_plural(result.n_a, 'message')}, {_plural(result.turns_a, 'turn')})",
        f"+++ {result.thread_b}  ({_plural(result.n_b, 'message')}, {_plural(result.turns_b, 'turn')})",
        f"    {result.counts()['same']} messages in common",
    ]
    if result.identical:
        return [*lines, "    the conversations are identical"]
    printed = dict.fromkeys(("changed", "removed", "added"), 0)
    hunks = result.hunks(context)
    for h in hunks:
        lines.append(h.header())
        for r in h.rows:
            if r.kind == "same":
                where = str(r.index_a) if r.index_a == r.index_b else f"{r.index_a}|{r.index_b}"
                lines.append(f"  {where:>5} {_describe(r.a)}")
                continue
            printed[r.kind] += 1
            if r.a is not None:
                lines.append(f"- {r.index_a:>5} {_describe(r.a)}")
            if r.b is not None:
                lines.append(f"+ {r.index_b:>5} {_describe(r.b)}")
            if r.details:
                lines.append(f"? {'; '.join(r.details)}")
    lines.append(
        f"{printed['changed']} changed, {printed['removed']} removed, {printed['added']} added "
        f"in {_plural(len(hunks), 'hunk')} ({_plural(context, 'message')} of context)"
    )
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
        if lab_diff is None:
            return simple_diff(args.thread_a, states[0], args.thread_b, states[1]), identical(states[0], states[1])
        aopen_thread, adiff_threads = lab_diff
        result = await adiff_threads(await aopen_thread(cp, args.thread_a), await aopen_thread(cp, args.thread_b))
        return [*result.summary().splitlines(), "", *hunk_lines(result, args.context)], result.identical

    lines, same = with_checkpointer(args.url, work)
    for line in lines:
        print(line)
    return 0 if same else 1
