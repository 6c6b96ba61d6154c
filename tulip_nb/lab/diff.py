"""Diff two threads: where they part, and what differs message by message.

:func:`diff_threads` first looks for the **common ancestor** by lineage (the newest checkpoint
both threads descend from: a fork's ``forked_from`` / ``parent_checkpoint_id``, a copy's shared
checkpoint ids); without one it falls back to the longest common message prefix. The
**divergence point** is the first message index where the histories differ. Messages are equal
when their canonical JSON is (keys sorted, numbers as parsed values: :func:`~tulip_nb.lab._common.message_key`),
so a copy in a store that reorders keys (PostgreSQL ``jsonb``) is identical to its source; threads
in two checkpointers share lineage through their checkpoint ids (an export keeps them). After the
divergence point, the two tails are aligned (difflib over those keys) into rows: ``added`` (only in
b), ``removed`` (only in a), ``changed`` (same role at the same place, different content: a text
diff, tool-call name/argument changes by call index, a tool-result change; a result answers the
call at its position, :mod:`tulip_nb.core.calls`, never the call with its id)::

    d = diff_threads(original, branch)
    d.divergence_index, d.divergence_call      # message index, model call (0-based)
    print(d.summary())
    d.to_frame()                               # one row per differing message
    d                                          # side-by-side HTML in a notebook
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tulip_nb._deps import require
from tulip_nb._sync import sync_twin
from tulip_nb.core.calls import CallRef, answered_by, calls_before
from tulip_nb.core.messages import Message
from tulip_nb.lab._common import call_text, canonical_json, esc, message_key, short
from tulip_nb.lab.lineage import common_ancestor

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.lab.thread import Thread
    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["MessageChange", "ThreadDiff", "adiff_threads", "diff_threads"]


@dataclass
class MessageChange:
    """One differing message: ``kind`` is ``added``, ``removed`` or ``changed``."""

    kind: str
    index_a: int | None
    index_b: int | None
    a: Message | None
    b: Message | None
    tokens_a: int = 0
    tokens_b: int = 0
    details: list[str] = field(default_factory=list)

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


def _call_changes(a: Message, b: Message) -> list[str]:
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
    return out


Answered = tuple[list[Message], list[CallRef | None]]
"""A thread's messages and, for each, the call it answers (:func:`tulip_nb.core.calls.answered_by`)."""


def _answers(side: Answered, i: int) -> tuple[int, str, bytes] | None:
    """The call ``side``'s message ``i`` answers, as (call index, tool, canonical arguments)."""
    msgs, refs = side
    ref = refs[i]
    if ref is None:
        return None
    call = msgs[ref[0]].tool_calls[ref[1]]
    return ref[1], call.name, canonical_json(call.arguments)


def _details(a: Message, b: Message, where: tuple[Answered, int, Answered, int] | None = None) -> list[str]:
    out = []
    if a.content != b.content:
        out.append("tool result changed" if a.role == "tool" else "text changed")
    out += _call_changes(a, b)
    if a.name != b.name:
        out.append(f"name {a.name!r} -> {b.name!r}")
    if a.role == "tool" and where is not None:
        side_a, i, side_b, j = where
        got_a, got_b = _answers(side_a, i), _answers(side_b, j)
        if got_a != got_b:
            # the same position and tool with other arguments is the changed call (reported on its
            # assistant row); another position or tool is a result answering a different call
            same = got_a is not None and got_b is not None and got_a[:2] == got_b[:2]
            out.append("answers the changed call" if same else "answers another call")
    if a.role == "tool" and a.tool_call_id != b.tool_call_id:
        out.append(f"call id {a.tool_call_id!r} -> {b.tool_call_id!r}")
    if not out:
        out.append("metadata changed")
    return out


@dataclass
class ThreadDiff:
    """The result of :func:`diff_threads` (see the module docstring)."""

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

    @property
    def identical(self) -> bool:
        return not self.changes

    @property
    def token_delta(self) -> int:
        return self.tokens_b - self.tokens_a

    def final_answer_diff(self) -> str:
        """Unified diff of the two final answers (empty when equal)."""
        lines = difflib.unified_diff(
            self.final_a.splitlines(), self.final_b.splitlines(), self.thread_a, self.thread_b, lineterm=""
        )
        return "\n".join(lines)

    def summary(self) -> str:
        """A few lines for humans: ancestor, divergence point, counts, tokens, final answers."""
        if self.identical:
            return f"{self.thread_a} and {self.thread_b}: identical ({self.n_a} messages)"
        kinds = {k: sum(1 for c in self.changes if c.kind == k) for k in ("changed", "removed", "added")}
        anc = (
            f"common ancestor {self.ancestor[1]} in {self.ancestor[0]} (by lineage)"
            if self.ancestor
            else "no common ancestor in lineage; longest common prefix used"
        )
        lines = [
            f"{self.thread_a} ({self.n_a} messages) vs {self.thread_b} ({self.n_b} messages): {anc}",
            f"diverge at message {self.divergence_index} (model call {self.divergence_call})",
            f"{kinds['changed']} changed, {kinds['removed']} removed, {kinds['added']} added",
            f"tokens {self.tokens_a:,} -> {self.tokens_b:,} ({self.token_delta:+,})",
            "final answer: " + ("same" if self.final_a == self.final_b else "differs"),
        ]
        return "\n".join(lines)

    def to_frame(self, text_diff: bool = False) -> pd.DataFrame:
        """One row per differing message: kind, index_a, index_b, role, text_a, text_b, tool calls,
        details, tokens_a, tokens_b, token_delta (and ``text_diff`` when asked)."""
        pd = require("pandas")

        rows = []
        for c in self.changes:
            row: dict[str, Any] = {
                "kind": c.kind,
                "index_a": c.index_a,
                "index_b": c.index_b,
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
        cols = [
            "kind",
            "index_a",
            "index_b",
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
        return pd.DataFrame(rows, columns=cols)

    def _repr_html_(self, limit: int = 50) -> str:
        def cell(m: Message | None) -> str:
            if m is None:
                return "<td></td>"
            extra = f"<br><i>{esc(short(call_text(m), 200))}</i>" if m.tool_calls else ""
            return f"<td style='text-align:left'><b>{esc(m.role)}</b> {esc(short(m.content, 300))}{extra}</td>"

        colors = {"added": "#e6ffed", "removed": "#ffeef0", "changed": "#fff5b1"}
        rows = [
            f"<tr style='background:{colors[c.kind]}'><td>{esc(c.kind)}</td><td>{esc(c.index_a)}</td>{cell(c.a)}"
            f"<td>{esc(c.index_b)}</td>{cell(c.b)}<td>{esc('; '.join(c.details))}</td>"
            f"<td>{c.token_delta:+d}</td></tr>"
            for c in self.changes[:limit]
        ]
        more = f"<p>… {len(self.changes) - limit} more rows in .to_frame()</p>" if len(self.changes) > limit else ""
        summary = "<br>".join(esc(x) for x in self.summary().splitlines())
        return (
            f"<div class='tulip-nb-diff'><p>{summary}</p><table><thead><tr><th>kind</th><th>#a</th>"
            f"<th>{esc(self.thread_a)}</th><th>#b</th><th>{esc(self.thread_b)}</th><th>what</th>"
            f"<th>Δ tokens</th></tr></thead><tbody>{''.join(rows)}</tbody></table>{more}</div>"
        )


def _align(
    a: list[Message], b: list[Message], start: int, counts_a: list[int], counts_b: list[int]
) -> list[MessageChange]:
    ka = [message_key(m) for m in a[start:]]
    kb = [message_key(m) for m in b[start:]]
    side_a: Answered = (a, answered_by(a))
    side_b: Answered = (b, answered_by(b))
    out: list[MessageChange] = []
    sm = difflib.SequenceMatcher(None, ka, kb, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        i, j = start + i1, start + j1
        ie, je = start + i2, start + j2
        while i < ie and j < je and a[i].role == b[j].role:
            details = _details(a[i], b[j], (side_a, i, side_b, j))
            out.append(MessageChange("changed", i, j, a[i], b[j], counts_a[i], counts_b[j], details))
            i, j = i + 1, j + 1
        out += [MessageChange("removed", x, None, a[x], None, counts_a[x], 0) for x in range(i, ie)]
        out += [MessageChange("added", None, y, None, b[y], 0, counts_b[y]) for y in range(j, je)]
    return out


def _final(msgs: list[Message]) -> str:
    m = next((m for m in reversed(msgs) if m.role == "assistant" and m.content), None)
    return m.content or "" if m is not None else ""


async def adiff_threads(
    a: Thread | str, b: Thread | str, *, checkpointer: BaseCheckpointer | str | None = None
) -> ThreadDiff:
    """Compare two threads (module docstring); ``a`` is the reference, ``b`` the other side (a
    :class:`Thread`, or a thread id of ``a``'s checkpointer). ``a`` may be a thread id too, with
    ``checkpointer=`` (a checkpointer or its URL): then both ids are opened there."""
    from tulip_nb.lab.thread import Thread, aas_thread, aopen_thread

    a = await aas_thread(a, checkpointer, what="diff_threads")
    if not isinstance(b, Thread):  # a thread id: opened in a's checkpointer (which checks it)
        b = await aopen_thread(a.checkpointer, b, counter=a.counter)
    # Across checkpointers too: an export keeps the checkpoint ids, so a copy shares them.
    ancestor = await common_ancestor(
        a.checkpointer, a.thread_id, b.thread_id, a.infos, b.infos, checkpointer_b=b.checkpointer
    )
    ma, mb = a.final_messages, b.final_messages
    d = 0
    limit = min(len(ma), len(mb))
    while d < limit and (ma[d] is mb[d] or message_key(ma[d]) == message_key(mb[d])):
        d += 1
    counts_a = a.counter.message_counts(ma)
    counts_b = a.counter.message_counts(mb)
    changes = _align(ma, mb, d, counts_a, counts_b) if (d < len(ma) or d < len(mb)) else []
    return ThreadDiff(
        thread_a=a.thread_id,
        thread_b=b.thread_id,
        ancestor=ancestor,
        method="lineage" if ancestor else "prefix",
        divergence_index=d,
        divergence_call=calls_before(ma, d),
        changes=changes,
        n_a=len(ma),
        n_b=len(mb),
        tokens_a=sum(counts_a),
        tokens_b=sum(counts_b),
        final_a=_final(ma),
        final_b=_final(mb),
    )


diff_threads = sync_twin(adiff_threads)
