"""Diff two threads: where they part, and what changed, turn by turn and message by message.

:func:`diff_threads` first looks for the **common ancestor** by lineage (the newest checkpoint
both threads descend from: a fork's ``forked_from`` / ``parent_checkpoint_id``, a copy's shared
checkpoint ids); without one the threads are compared by content alone. Then the two histories
are **aligned** (:mod:`tulip_nb.lab._diff_align`): the system prompts position by position, the
turns a fork copied pair by pair (its ``fork_message_index``), the rest **by turns**, so a turn
inserted or removed in one branch is one ``added`` / ``removed`` block, not a shift of everything
after it; inside two paired turns, message by message.

"The same message" has one definition (:func:`~tulip_nb.core.canonical.message_key`, ``ids=False``):
canonical JSON (keys sorted, integral floats as ints, ``{}`` and a missing default field alike),
tool-call ids left out -- a call is its position (ARCHITECTURE decision 10), so a branch whose
provider numbered its calls differently is not "changed". A copy in a store that reorders keys
(PostgreSQL ``jsonb``) is identical to its source.

Every aligned position is a row (:attr:`ThreadDiff.rows`): ``same``, ``changed`` (same role at the
same place, different content, with what differs: text, tool-call name or arguments by call index,
a tool result, the call a result answers, metadata -- only when it really differs), ``removed``
(only in a) or ``added`` (only in b). :attr:`ThreadDiff.changes` are the rows that are not
``same``. A system prompt edited in place is one changed row, reported as
:attr:`~ThreadDiff.system_changed`; it does not move the **divergence point**, which is the first
change after it (:attr:`~ThreadDiff.divergence_index`, ``divergence_turn``, ``divergence_call``)::

    d = diff_threads(original, branch)
    d.system_changed, d.divergence_turn         # True, None: only the system prompt differs
    print(d.summary())
    for h in d.hunks(context=3):                # changes with context, like ``diff -u``
        print(h.header())
    d.to_frame()                                # one row per differing message
    d                                           # hunks as HTML in a notebook
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tulip_nb._deps import require
from tulip_nb._sync import sync_twin
from tulip_nb.core import Message
from tulip_nb.core.calls import CallRef, calls_before
from tulip_nb.core.canonical import canonical_json, message_value
from tulip_nb.core.turns import turn_index, turn_starts
from tulip_nb.lab._common import FORK_INDEX_KEY, call_text, esc, short
from tulip_nb.lab._diff_align import Row, Side, align, lineage_turns, side
from tulip_nb.lab._lineage import common_ancestor, origin
from tulip_nb.lab._thread import Thread, aas_thread, aopen_thread

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["Hunk"]


@dataclass
class MessageChange:
    """One aligned position of two threads: ``kind`` is ``same``, ``changed``, ``removed`` (only in
    ``a``) or ``added`` (only in ``b``); ``turn_a`` / ``turn_b`` are the 0-based turns of the two
    messages (None before the first user message: the system prompt)."""

    kind: str
    index_a: int | None
    index_b: int | None
    a: Message | None
    b: Message | None
    tokens_a: int = 0
    tokens_b: int = 0
    details: list[str] = field(default_factory=list)
    turn_a: int | None = None
    turn_b: int | None = None

    @property
    def role(self) -> str:
        m = self.b if self.b is not None else self.a
        return m.role if m is not None else ""

    @property
    def token_delta(self) -> int:
        return self.tokens_b - self.tokens_a

    def text_diff(self, context: int = 1) -> str:
        """Unified diff of the two texts (empty unless changed)."""
        a = (self.a.content or "") if self.a is not None else ""
        b = (self.b.content or "") if self.b is not None else ""
        lines = difflib.unified_diff(a.splitlines(), b.splitlines(), "a", "b", n=context, lineterm="")
        return "\n".join(lines)


@dataclass(frozen=True)
class Hunk:
    """A run of changed rows with up to ``context`` same rows around them (:meth:`ThreadDiff.hunks`).

    ``start_a`` / ``count_a``: the 0-based index of the hunk's first message in ``a`` and how many
    of ``a``'s messages it shows (for a hunk that only adds, where ``b``'s messages go in ``a``);
    the same for ``b``.
    """

    rows: list[MessageChange]
    start_a: int
    count_a: int
    start_b: int
    count_b: int

    def header(self) -> str:
        """``@@ -start_a,count_a +start_b,count_b @@ turn N`` (message indexes, 0-based, as the
        rows show them; the turns the hunk spans, ``b``'s in brackets when they differ)."""
        return f"@@ -{self.start_a},{self.count_a} +{self.start_b},{self.count_b} @@ {self.where()}"

    def where(self) -> str:
        """The turns this hunk spans (``system prompt`` before the first turn)."""
        ta = sorted({r.turn_a for r in self.rows if r.index_a is not None and r.turn_a is not None})
        tb = sorted({r.turn_b for r in self.rows if r.index_b is not None and r.turn_b is not None})
        pre = any(
            (r.index_a is not None and r.turn_a is None) or (r.index_b is not None and r.turn_b is None)
            for r in self.rows
        )
        parts = ["system prompt"] if pre else []
        main = _turns_text(ta or tb)
        if main:
            parts.append(main + (f" (b: {_turns_text(tb)})" if ta and tb and ta != tb else ""))
        return ", ".join(parts)

    def counts(self) -> dict[str, int]:
        """Rows of each kind in this hunk (``same`` are its context rows)."""
        out = dict.fromkeys(("changed", "removed", "added", "same"), 0)
        for r in self.rows:
            out[r.kind] += 1
        return out


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _turns_text(turns: list[int]) -> str:
    if not turns:
        return ""
    return f"turn {turns[0]}" if len(turns) == 1 else f"turns {turns[0]}-{turns[-1]}"


def _call_changes(a: Message, b: Message) -> list[str]:
    """What differs between the tool calls of ``a`` and ``b``, call by call (ids never count)."""
    out = []
    ca, cb = a.tool_calls, b.tool_calls
    for i in range(max(len(ca), len(cb))):
        x = ca[i] if i < len(ca) else None
        y = cb[i] if i < len(cb) else None
        if x is None and y is not None:
            out.append(f"tool call added: {y.name}")
        elif y is None and x is not None:
            out.append(f"tool call removed: {x.name}")
        elif x is not None and y is not None:
            if x.name != y.name:
                out.append(f"tool call {i}: {x.name} -> {y.name}")
            elif (
                canonical_json(x.arguments) != canonical_json(y.arguments)
                or x.malformed_arguments != y.malformed_arguments
            ):
                keys = sorted(set(x.arguments) | set(y.arguments))
                moved = [k for k in keys if canonical_json(x.arguments.get(k)) != canonical_json(y.arguments.get(k))]
                out.append(f"{x.name} arguments changed: {', '.join(moved) or 'raw text'}")
            else:
                extra = _changed_keys(
                    x.model_dump(exclude={"id", "name", "arguments", "malformed_arguments"}),
                    y.model_dump(exclude={"id", "name", "arguments", "malformed_arguments"}),
                )
                if extra:
                    out.append(f"tool call {i} ({x.name}): {', '.join(extra)} changed")
    return out


def _changed_keys(x: dict[str, Any], y: dict[str, Any]) -> list[str]:
    return [k for k in sorted(set(x) | set(y)) if canonical_json(x.get(k)) != canonical_json(y.get(k))]


_COVERED = frozenset({"role", "content", "tool_calls", "name", "metadata"})


def _answers(messages: list[Message], refs: list[CallRef | None], i: int) -> tuple[int, str, bytes] | None:
    """The call message ``i`` answers, as (call index, tool, canonical arguments)."""
    ref = refs[i]
    if ref is None:
        return None
    call = messages[ref[0]].tool_calls[ref[1]]
    return ref[1], call.name, canonical_json(call.arguments)


def _details(sa: Side, i: int, sb: Side, j: int) -> list[str]:
    """What differs between message ``i`` of ``a`` and message ``j`` of ``b`` (same role)."""
    a, b = sa.messages[i], sb.messages[j]
    out = []
    if a.content != b.content:
        out.append({"tool": "tool result changed", "system": "system prompt changed"}.get(a.role, "text changed"))
    out += _call_changes(a, b)
    if a.name != b.name:
        out.append(f"name {a.name!r} -> {b.name!r}")
    if a.role == "tool":
        got_a = _answers(list(sa.messages), sa.refs, i)
        got_b = _answers(list(sb.messages), sb.refs, j)
        if got_a != got_b:
            # the same position and tool with other arguments is the changed call (reported on its
            # assistant row); another position or tool is a result answering a different call
            same = got_a is not None and got_b is not None and got_a[:2] == got_b[:2]
            out.append("answers the changed call" if same else "answers another call")
    meta = _changed_keys(dict(a.metadata), dict(b.metadata))
    if meta:
        out.append(f"metadata changed: {', '.join(meta)}")
    va, vb = message_value(a, ids=False), message_value(b, ids=False)
    extra = [k for k in _changed_keys(va, vb) if k not in _COVERED]
    if extra:
        out.append(f"fields changed: {', '.join(extra)}")
    if not out:  # the keys differ, so something does: never a silent "same"
        out.append("JSON differs")
    return out


@dataclass
class ThreadDiff:
    """The result of :func:`diff_threads` (see the module docstring).

    ``divergence_index`` is the index in ``a`` of the first change after the system prompt (where
    ``b``'s messages go in, for an added one); ``divergence_turn`` its turn (``b``'s numbering for a
    turn only ``b`` has), None when nothing after the system prompt differs -- then
    ``divergence_index`` is ``n_a``. ``fork_index``: the message index a fork was cut at, from the
    branch's save metadata (None when neither thread is a fork of the other).
    """

    thread_a: str
    thread_b: str
    ancestor: tuple[str, str] | None
    method: str
    divergence_index: int
    divergence_call: int
    changes: list[MessageChange]
    n_a: int
    n_b: int
    tokens_a: int
    tokens_b: int
    final_a: str
    final_b: str
    rows: list[MessageChange] = field(default_factory=list)
    system_changed: bool = False
    divergence_turn: int | None = None
    fork_index: int | None = None
    turns_a: int = 0
    turns_b: int = 0

    @property
    def identical(self) -> bool:
        return not self.changes

    @property
    def token_delta(self) -> int:
        return self.tokens_b - self.tokens_a

    def counts(self) -> dict[str, int]:
        """Rows of each kind: ``changed``, ``removed``, ``added``, ``same``."""
        out = dict.fromkeys(("changed", "removed", "added", "same"), 0)
        for r in self.rows:
            out[r.kind] += 1
        return out

    def final_answer_diff(self) -> str:
        """Unified diff of the two final answers (empty when equal)."""
        lines = difflib.unified_diff(
            self.final_a.splitlines(), self.final_b.splitlines(), self.thread_a, self.thread_b, lineterm=""
        )
        return "\n".join(lines)

    def hunks(self, context: int = 3) -> list[Hunk]:
        """The changed rows in runs, each with up to ``context`` same rows before and after it
        (runs closer than ``2 * context`` rows are one hunk), as ``diff -u`` groups lines."""
        if context < 0:
            raise ValueError(f"context must be 0 or more rows, got {context}")
        at_a, at_b = [], []
        pa = pb = 0
        for r in self.rows:  # where each row sits in a and in b
            at_a.append(pa)
            at_b.append(pb)
            pa += r.index_a is not None
            pb += r.index_b is not None
        spans: list[list[int]] = []
        for k, r in enumerate(self.rows):
            if r.kind == "same":
                continue
            lo, hi = max(0, k - context), min(len(self.rows), k + context + 1)
            if spans and lo <= spans[-1][1]:
                spans[-1][1] = hi
            else:
                spans.append([lo, hi])
        out = []
        for lo, hi in spans:
            rows = self.rows[lo:hi]
            n_a = sum(r.index_a is not None for r in rows)
            n_b = sum(r.index_b is not None for r in rows)
            out.append(Hunk(rows, at_a[lo], n_a, at_b[lo], n_b))
        return out

    def summary(self) -> str:
        """A few lines for humans: ancestor, system prompt, divergence point, counts, tokens, answers."""
        head = (
            f"{self.thread_a} ({_count(self.n_a, 'message')}, {_count(self.turns_a, 'turn')}) vs "
            f"{self.thread_b} ({_count(self.n_b, 'message')}, {_count(self.turns_b, 'turn')})"
        )
        if self.identical:
            return f"{head}: identical"
        kinds = self.counts()
        anc = (
            f"common ancestor {self.ancestor[1]} in {self.ancestor[0]} (by lineage)"
            if self.ancestor
            else "no common ancestor in lineage; aligned by content"
        )
        if self.fork_index is not None:
            anc += f", forked at message {self.fork_index}"
        lines = [f"{head}: {anc}"]
        if self.system_changed:
            lines.append("system prompt changed")
        if self.divergence_turn is None:
            lines.append("no change after the system prompt: the turns are the same")
        else:
            lines.append(
                f"diverge at message {self.divergence_index} "
                f"(turn {self.divergence_turn}, model call {self.divergence_call})"
            )
        lines += [
            f"{kinds['changed']} changed, {kinds['removed']} removed, {kinds['added']} added",
            f"tokens {self.tokens_a:,} -> {self.tokens_b:,} ({self.token_delta:+,})",
            "final answer: " + ("same" if self.final_a == self.final_b else "differs"),
        ]
        return "\n".join(lines)

    def to_frame(self, text_diff: bool = False) -> pd.DataFrame:
        """One row per differing message: kind, index_a, index_b, turn_a, turn_b, role, text_a,
        text_b, tool calls, details, tokens_a, tokens_b, token_delta (and ``text_diff`` when asked)."""
        pd = require("pandas")

        cols = [
            "kind",
            "index_a",
            "index_b",
            "turn_a",
            "turn_b",
            "role",
            "text_a",
            "text_b",
            "calls_a",
            "calls_b",
            "details",
            "tokens_a",
            "tokens_b",
            "token_delta",
        ] + (["text_diff"] if text_diff else [])
        rows = []
        for c in self.changes:
            row: dict[str, Any] = {
                "kind": c.kind,
                "index_a": c.index_a,
                "index_b": c.index_b,
                "turn_a": c.turn_a if c.index_a is not None else None,
                "turn_b": c.turn_b if c.index_b is not None else None,
                "role": c.role,
                "text_a": c.a.content if c.a is not None else None,
                "text_b": c.b.content if c.b is not None else None,
                "calls_a": call_text(c.a) if c.a is not None else None,
                "calls_b": call_text(c.b) if c.b is not None else None,
                "details": "; ".join(c.details),
                "tokens_a": c.tokens_a,
                "tokens_b": c.tokens_b,
                "token_delta": c.token_delta,
            }
            if text_diff:
                row["text_diff"] = c.text_diff()
            rows.append(row)
        return pd.DataFrame(rows, columns=cols)

    def _repr_html_(self, limit: int = 50, context: int = 3) -> str:
        """The summary, then the hunks: changed rows highlighted (up to ``limit`` of them), context
        rows grey, the same messages between hunks collapsed into one line."""

        def cell(m: Message | None) -> str:
            if m is None:
                return "<td></td>"
            extra = f"<br><i>{esc(short(call_text(m), 200))}</i>" if m.tool_calls else ""
            return f"<td style='text-align:left'><b>{esc(m.role)}</b> {esc(short(m.content, 300))}{extra}</td>"

        colors = {"added": "#e6ffed", "removed": "#ffeef0", "changed": "#fff5b1"}
        body: list[str] = []
        shown = 0
        end_a = 0  # a's messages before the next hunk that no hunk shows: the same in both
        for h in self.hunks(context):
            if shown >= limit:
                break
            if h.start_a > end_a:
                body.append(_gap_row(h.start_a - end_a))
            end_a = h.start_a + h.count_a
            body.append(
                f"<tr class='tnb-hunk'><td colspan='7' style='text-align:left'><code>{esc(h.header())}</code></td></tr>"
            )
            for c in h.rows:
                if c.kind == "same":
                    body.append(
                        f"<tr class='tnb-ctx' bgcolor='#fafafa'><td>same</td><td>{esc(c.index_a)}</td>{cell(c.a)}"
                        f"<td>{esc(c.index_b)}</td>{cell(c.b)}<td></td><td></td></tr>"
                    )
                    continue
                if shown >= limit:
                    break
                shown += 1
                body.append(
                    f"<tr style='background:{colors[c.kind]}'><td>{esc(c.kind)}</td>"
                    f"<td>{esc(c.index_a)}</td>{cell(c.a)}"
                    f"<td>{esc(c.index_b)}</td>{cell(c.b)}<td>{esc('; '.join(c.details))}</td>"
                    f"<td>{c.token_delta:+d}</td></tr>"
                )
        if shown < limit and self.n_a > end_a and not self.identical:
            body.append(_gap_row(self.n_a - end_a))
        left = len(self.changes) - shown
        more = f"<p>… {left} more rows in .to_frame()</p>" if left > 0 else ""
        summary = "<br>".join(esc(x) for x in self.summary().splitlines())
        return (
            f"<div class='tulip-nb-diff'><p>{summary}</p><table><thead><tr><th>kind</th><th>#a</th>"
            f"<th>{esc(self.thread_a)}</th><th>#b</th><th>{esc(self.thread_b)}</th><th>what</th>"
            f"<th>Δ tokens</th></tr></thead><tbody>{''.join(body)}</tbody></table>{more}</div>"
        )


def _gap_row(n: int) -> str:
    """The collapsed run of same messages between two hunks."""
    return f"<tr class='tnb-gap'><td colspan='7'><i>… {n:,} same message{'s' if n != 1 else ''} …</i></td></tr>"


def _final(msgs: list[Message]) -> str:
    m = next((m for m in reversed(msgs) if m.role == "assistant" and m.content), None)
    return m.content or "" if m is not None else ""


def _fork_point(a: Thread, b: Thread) -> tuple[int, bool] | None:
    """``(fork_message_index, a is the source)`` when one thread is a fork of the other, from the
    branch's first save metadata; None otherwise."""
    for src, branch, a_is_source in ((a, b, True), (b, a, False)):
        up = origin(branch.infos)
        if up is None or up[2] != "parent" or up[0] != src.thread_id:
            continue
        index = branch.infos[-1].metadata.get(FORK_INDEX_KEY)
        if isinstance(index, int) and not isinstance(index, bool) and index >= 0:
            return index, a_is_source
    return None


def _rows(sa: Side, sb: Side, rows: list[Row], counts_a: list[int], counts_b: list[int]) -> list[MessageChange]:
    starts_a, starts_b = turn_starts(sa.messages), turn_starts(sb.messages)
    out = []
    for r in rows:
        i, j, kind = r.index_a, r.index_b, r.kind
        details: list[str] = []
        if kind == "changed" and i is not None and j is not None:
            if sa.keys[i] != sb.keys[j]:
                details = _details(sa, i, sb, j)
            if r.note:
                details.append(r.note)
            if not details:  # paired in a replaced run but equal: not a change
                kind = "same"
        out.append(
            MessageChange(
                kind,
                i,
                j,
                sa.messages[i] if i is not None else None,
                sb.messages[j] if j is not None else None,
                counts_a[i] if i is not None else 0,
                counts_b[j] if j is not None else 0,
                details,
                turn_index(starts_a, i) if i is not None else None,
                turn_index(starts_b, j) if j is not None else None,
            )
        )
    return out


def _divergence(rows: list[MessageChange], n_pre: int, n_a: int) -> tuple[int, int | None]:
    """(index in a, turn) of the first change after the system prompt; ``(n_a, None)`` if none."""
    pos = 0
    for k, r in enumerate(rows):
        if r.kind != "same" and not (k < n_pre and r.role == "system"):
            return pos, (r.turn_a if r.index_a is not None else r.turn_b)
        pos += r.index_a is not None
    return n_a, None


async def adiff_threads(
    a: Thread | str, b: Thread | str, *, checkpointer: BaseCheckpointer | str | None = None
) -> ThreadDiff:
    """Compare two threads (module docstring); ``a`` is the reference, ``b`` the other side (a
    :class:`Thread`, or a thread id of ``a``'s checkpointer). ``a`` may be a thread id too, with
    ``checkpointer=`` (a checkpointer or its URL): then both ids are opened there."""
    a = await aas_thread(a, checkpointer, what="diff_threads")
    if not isinstance(b, Thread):  # a thread id: opened in a's checkpointer (which checks it)
        b = await aopen_thread(a.checkpointer, b, counter=a.counter)
    # Across checkpointers too: an export keeps the checkpoint ids, so a copy shares them.
    ancestor = await common_ancestor(
        a.checkpointer, a.thread_id, b.thread_id, a.infos, b.infos, checkpointer_b=b.checkpointer
    )
    ma, mb = a.final_messages, b.final_messages
    sa, sb = side(ma, a.latest.state.metadata), side(mb, b.latest.state.metadata)
    fork = _fork_point(a, b) if ancestor is not None else None
    paired = lineage_turns(sa, sb, fork[0] + 1, fork[1]) if fork is not None else 0
    aligned, n_pre = align(sa, sb, paired)
    counts_a = a.counter.message_counts(ma)
    counts_b = a.counter.message_counts(mb)
    rows = _rows(sa, sb, aligned, counts_a, counts_b)
    d, turn = _divergence(rows, n_pre, len(ma))
    return ThreadDiff(
        thread_a=a.thread_id,
        thread_b=b.thread_id,
        ancestor=ancestor,
        method="lineage" if ancestor else "content",
        divergence_index=d,
        divergence_call=calls_before(ma, d),
        changes=[r for r in rows if r.kind != "same"],
        n_a=len(ma),
        n_b=len(mb),
        tokens_a=sum(counts_a),
        tokens_b=sum(counts_b),
        final_a=_final(ma),
        final_b=_final(mb),
        rows=rows,
        system_changed=any(r.kind != "same" and r.role == "system" for r in rows[:n_pre]),
        divergence_turn=turn,
        fork_index=fork[0] if fork is not None else None,
        turns_a=len(sa.turns),
        turns_b=len(sb.turns),
    )


diff_threads = sync_twin(adiff_threads)
