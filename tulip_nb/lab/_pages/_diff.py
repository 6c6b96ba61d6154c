"""The page of a what-if diff: where two threads part, then every change with context.

The head says what :meth:`~tulip_nb.lab.ThreadDiff.summary` says (common ancestor, the branch
point: divergence message, turn and model call, a fork's cut) as a small table; the body is the
diff's hunks (:meth:`~tulip_nb.lab.ThreadDiff.hunks`), a row per aligned message -- changed,
removed, added, or same (context) -- with the runs of same messages between hunks collapsed into
one line, as ``tulip-nb diff`` prints them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tulip_nb.lab._common import call_text
from tulip_nb.lab._pages._document import page
from tulip_nb.lab._pages._text import clipped_pre, esc

if TYPE_CHECKING:
    from tulip_nb.core import Message
    from tulip_nb.lab.diff import MessageChange, ThreadDiff

__all__ = ["diff_body", "diff_page"]

CONTEXT_CHARS = 600
"""Characters of a context (same) message shown: the changed ones show up to ``max_chars``."""


def _cell(m: Message | None, limit: int) -> str:
    if m is None:
        return "<td class='txt'></td>"
    calls = f"<div class='note'>→ {esc(call_text(m))}</div>" if m.tool_calls else ""
    name = f" <code>{esc(m.name)}</code>" if m.name else ""
    text = clipped_pre(m.content, limit) if m.content else ""
    return f"<td class='txt'><b>{esc(m.role)}</b>{name}{text}{calls}</td>"


def _index(i: int | None) -> str:
    return "" if i is None else str(i)


def _row(c: MessageChange, max_chars: int) -> str:
    limit = CONTEXT_CHARS if c.kind == "same" else max_chars
    delta = "" if c.kind == "same" else f"{c.token_delta:+,}"
    return (
        f"<tr class='k-{esc(c.kind)}'><td>{esc(c.kind)}</td><td class='num'>{_index(c.index_a)}</td>"
        f"{_cell(c.a, limit)}<td class='num'>{_index(c.index_b)}</td>{_cell(c.b, limit)}"
        f"<td>{esc('; '.join(c.details))}</td><td class='num'>{delta}</td></tr>"
    )


def _gap(n: int) -> str:
    return f"<tr class='gap'><td colspan='7'>… {n:,} same message{'s' if n != 1 else ''} …</td></tr>"


def _branch_point(d: ThreadDiff) -> str:
    facts = [
        ("a", f"{d.thread_a} — {d.n_a:,} messages, {d.turns_a:,} turns, {d.tokens_a:,} tokens"),
        ("b", f"{d.thread_b} — {d.n_b:,} messages, {d.turns_b:,} turns, {d.tokens_b:,} tokens"),
        ("common ancestor", f"{d.ancestor[1]} in {d.ancestor[0]}" if d.ancestor else "none by lineage (by content)"),
        ("forked at message", "—" if d.fork_index is None else f"{d.fork_index:,}"),
        ("system prompt", "changed" if d.system_changed else "same"),
        (
            "diverge at",
            "no change after the system prompt"
            if d.divergence_turn is None
            else f"message {d.divergence_index:,} (turn {d.divergence_turn}, model call {d.divergence_call})",
        ),
        ("final answer", "same" if d.final_a == d.final_b else "differs"),
    ]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts)
    return f"<table class='branch' id='tnb-branch'><tbody>{rows}</tbody></table>"


def diff_body(d: ThreadDiff, *, context: int, max_chars: int) -> str:
    """The escaped HTML body of the diff page."""
    counts = d.counts()
    hunks = d.hunks(context)
    body: list[str] = []
    end_a = 0
    for h in hunks:
        if h.start_a > end_a:
            body.append(_gap(h.start_a - end_a))
        end_a = h.start_a + h.count_a
        body.append(f"<tr class='hunk'><td colspan='7'>{esc(h.header())}</td></tr>")
        body += [_row(c, max_chars) for c in h.rows]
    if hunks and d.n_a > end_a:
        body.append(_gap(d.n_a - end_a))
    line = (
        f"{counts['changed']:,} changed, {counts['removed']:,} removed, {counts['added']:,} added in "
        f"{len(hunks):,} hunk{'s' if len(hunks) != 1 else ''} ({context} messages of context) · "
        f"tokens {d.tokens_a:,} → {d.tokens_b:,} ({d.token_delta:+,})"
    )
    table = (
        "<table class='diff' id='tnb-diff'><thead><tr><th>kind</th><th class='num'>#a</th>"
        f"<th>{esc(d.thread_a)}</th><th class='num'>#b</th><th>{esc(d.thread_b)}</th><th>what changed</th>"
        f"<th class='num'>Δ tokens</th></tr></thead><tbody>{''.join(body)}</tbody></table>"
        if hunks
        else "<p class='note'>the conversations are identical</p>"
    )
    return (
        f"<header><h1>Diff <code>{esc(d.thread_a)}</code> → <code>{esc(d.thread_b)}</code></h1>"
        f"<p class='facts' id='tnb-counts'>{esc(line)}</p></header>"
        f"<section id='branch'><h2>Branch point</h2>{_branch_point(d)}"
        f"<div class='summary'><pre>{esc(d.summary())}</pre></div></section>"
        f"<section id='changes'><h2>Changes</h2>{table}</section>"
    )


def diff_page(d: ThreadDiff, *, context: int = 3, max_chars: int = 4000) -> str:
    """The whole self-contained page of the diff ``d`` (no script: nothing to run)."""
    return page(
        f"{d.thread_a} → {d.thread_b} · tulip_nb diff",
        "<main>" + diff_body(d, context=context, max_chars=max_chars) + "</main>",
    )
