"""The page of one thread: turns and outcomes, the token plot, the replay of what the model saw
at every call (a slider and the keyboard, in plain JavaScript), compaction events, and every
message with tool calls and results collapsed.

The transcript and the tables are escaped HTML written here; the replay is data (one JSON block)
that ``assets/thread.js`` renders with ``textContent``. The replay's rows are the ReplayPlayer's
(:meth:`~tulip_nb.lab.controllers.PlayerController.rows`: shown, stubbed, summarised, dropped, the
summary where it stands), with runs of shown messages merged so a call that sent the whole
history is one row of data, and the summaries and stubs stored once each.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tulip_nb.core.canonical import canonical_json
from tulip_nb.lab._common import call_text, short
from tulip_nb.lab._pages._document import page
from tulip_nb.lab._pages._figure import svg_img
from tulip_nb.lab._pages._text import clip, clipped_pre, esc, plain
from tulip_nb.lab.controllers import PlayerController
from tulip_nb.memory.conversation import model_views

if TYPE_CHECKING:
    from tulip_nb.core import Message
    from tulip_nb.lab._thread import Thread

__all__ = ["PREVIEW", "thread_body", "thread_data", "thread_page"]

PREVIEW = 200
"""Characters of a message the replay table shows (the transcript shows up to ``max_chars``)."""

_KIND = {"shown": "k", "stubbed": "p", "summarised": "s", "dropped": "d", "summary": "S"}
_WORD = re.compile(r"[^a-z_]")


def _cls(value: object) -> str:
    """A CSS class from a value that a thread wrote (only ``a-z`` and ``_`` survive)."""
    return _WORD.sub("", str(value).lower())[:30]


def _counts(thread: Thread) -> list[int]:
    """Exact token counts of the thread's messages (cached per message by the counter)."""
    return thread.counter.message_counts(thread.final_messages)


def _calls_text(m: Message) -> str:
    return call_text(m) if m.tool_calls else ""


class _Texts:
    """Summaries and stubs, each stored once; rows refer to them by position."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: list[list[Any]] = []
        self._at: dict[str, int] = {}

    def ref(self, text: str | None) -> int:
        key = text or ""
        if key not in self._at:
            shown, full = clip(key, self.limit)
            self._at[key] = len(self.items)
            self.items.append([shown, full])
        return self._at[key]


def _call_rows(pc: PlayerController, k: int, view: list[Message], texts: _Texts) -> list[list[int | str]]:
    """The aligned rows of call ``k`` (which was sent ``view``) as data."""
    out: list[list[int | str]] = []
    for r in pc.rows(k):
        kind = _KIND[r.kind]
        v = -1 if r.view_index is None else r.view_index
        ref = -1
        if r.kind in ("summary", "stubbed") and 0 <= v < len(view):
            ref = texts.ref(view[v].content)
        last = out[-1] if out else None
        if (
            kind == "k"
            and last is not None
            and last[0] == "k"
            and last[2] == r.start
            and int(last[3]) + int(last[2]) - int(last[1]) == v
        ):
            last[2] = r.end
            last[4] = int(last[4]) + r.tokens
            continue
        out.append([kind, r.start, r.end, v, r.tokens, ref])
    return out


def thread_data(thread: Thread, *, max_chars: int) -> dict[str, Any]:
    """What ``assets/thread.js`` needs: messages (role, preview, tokens, turn, calls), and per
    model call its end, turn, token counts, trigger, notes on failed turns and aligned rows (none
    for a call a tulip agent made: what it was sent is not recorded)."""
    msgs = thread.final_messages
    counts = _counts(thread)
    messages = [
        [
            m.role,
            short(m.content, PREVIEW),
            counts[i],
            -1 if (t := thread.turn_of(i)) is None else t,
            short(_calls_text(m), PREVIEW),
        ]
        for i, m in enumerate(msgs)
    ]
    views = model_views(thread.latest.state)  # all at once: one pass over the events
    pc = PlayerController(thread)
    texts = _Texts(max_chars)
    calls = []
    for k, u in enumerate(thread.usage.itertuples(index=False)):
        view = views[k]
        calls.append(
            {
                "end": int(u.n_messages),
                "turn": plain(u.turn),
                "tulip": view is None,
                "sent": None if view is None else len(view),
                "history": int(u.n_messages),
                "context_tokens": plain(u.context_tokens),
                "full_tokens": plain(u.full_tokens),
                "trigger": plain(u.trigger),
                "over_window": plain(u.over_window),
                "notes": pc.turn_notes(k),
                "rows": [] if view is None else _call_rows(pc, k, view, texts),
            }
        )
    return {"thread_id": thread.thread_id, "messages": messages, "calls": calls, "texts": texts.items}


def _n(n: int, word: str) -> str:
    """``1 turn``, ``2 turns``, ``1,166 messages``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _facts(thread: Thread) -> str:
    msgs = thread.final_messages
    failed: dict[str, int] = {}
    for t in thread.turn_list:
        if t.failed:
            failed[t.outcome or "unknown"] = failed.get(t.outcome or "unknown", 0) + 1
    parts = [
        _n(len(thread.infos), "checkpoint"),
        _n(len(msgs), "message"),
        _n(len(thread.turn_list), "turn"),
        _n(thread.n_calls, "model call"),
        _n(len(thread.events), "compaction event"),
        _n(sum(_counts(thread)), "token"),
    ]
    text = " · ".join(parts)
    if failed:
        text += " · ended without an answer: " + ", ".join(f"{n} {k}" for k, n in failed.items())
    return f"<p class='facts' id='tnb-facts'>{esc(text)}</p>"


def _table(headers: list[str], rows: list[list[str]], *, cls: str = "", row_cls: list[str] | None = None) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, r in enumerate(rows):
        rc = f" class='{row_cls[i]}'" if row_cls and row_cls[i] else ""
        body.append(f"<tr{rc}>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
    return f"<table class='{esc(cls)}'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _na(value: Any) -> str:
    v = plain(value)
    return "—" if v is None else esc(f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else v)


def _turns_table(thread: Thread) -> str:
    rows, classes = [], []
    for t in thread.turns.itertuples(index=False):
        outcome = plain(t.outcome)
        rows.append(
            [
                f"<a href='#turn-{int(t.turn)}'>{int(t.turn)}</a>",
                f"{int(t.first)}-{int(t.last)}",
                f"<span class='outcome o-{_cls(outcome or 'unknown')}'>{esc(outcome or 'unknown')}</span>",
                esc(plain(t.error) or ""),
                _na(t.model_calls),
                _na(t.tool_calls),
                _na(t.tokens),
            ]
        )
        classes.append("failed" if outcome not in (None, "answered", "tulip") else "")
    headers = ["turn", "messages", "outcome", "error", "model calls", "tool calls", "tokens"]
    return _table(headers, rows, cls="turns", row_cls=classes)


def _events_table(thread: Thread) -> str:
    ev = thread.events
    if not len(ev):
        return "<p class='note'>no compaction event was recorded</p>"
    rows = [
        [
            *(_na(e.call), _na(e.iteration), esc(plain(e.manager) or ""), esc(plain(e.trigger) or "")),
            *(_na(e.n_messages), _na(e.tokens_before), _na(e.tokens_after)),
        ]
        for e in ev.itertuples(index=False)
    ]
    headers = ["call", "iteration", "manager", "trigger", "messages", "tokens before", "tokens after"]
    return _table(headers, rows, cls="events")


def _message(i: int, m: Message, tokens: int, max_chars: int) -> str:
    role = _cls(m.role)
    head = f"<span class='idx'>#{i}</span> <b>{esc(m.role)}</b> <span class='tok'>{tokens:,} tokens</span>"
    if m.role == "tool":
        _, full = clip(m.content, max_chars)
        name = f" · {esc(m.name)}" if m.name else ""
        return (
            f"<details class='msg r-tool' id='m{i}'><summary>{head} · tool result{name} · {full:,} characters"
            f"</summary>{clipped_pre(m.content, max_chars)}</details>"
        )
    calls = ""
    for ci, c in enumerate(m.tool_calls):
        args = c.malformed_arguments if c.malformed_arguments is not None else canonical_json(c.arguments).decode()
        calls += (
            f"<details class='call'><summary>→ tool call {ci}: <code>{esc(c.name)}</code></summary>"
            f"{clipped_pre(args, max_chars)}</details>"
        )
    text = clipped_pre(m.content, max_chars) if m.content else ""
    return f"<div class='msg r-{role}' id='m{i}'><div class='mh'>{head}</div>{text}{calls}</div>"


def _transcript(thread: Thread, max_chars: int) -> str:
    msgs = thread.final_messages
    counts = _counts(thread)
    turns = thread.turn_list
    parts = []
    first = turns[0].first if turns else len(msgs)
    if first:
        parts.append("<section class='turn' id='turn-pre'><h3>before the first turn</h3>")
        parts += [_message(i, msgs[i], counts[i], max_chars) for i in range(first)]
        parts.append("</section>")
    for t in turns:
        outcome = t.outcome or "unknown"
        err = f" — {esc(t.error)}" if t.error else ""
        parts.append(
            f"<section class='turn' id='turn-{t.turn}'><h3>turn {t.turn} · "
            f"<span class='outcome o-{_cls(outcome)}'>{esc(outcome)}</span>{err}</h3>"
        )
        parts += [_message(i, msgs[i], counts[i], max_chars) for i in range(t.first, t.last + 1)]
        parts.append("</section>")
    return "".join(parts)


def _replay(n_calls: int) -> str:
    if not n_calls:
        return "<p class='note'>this thread has no model calls</p>"
    last = n_calls - 1
    return (
        "<div class='controls'><button id='tnb-prev' type='button' title='previous call (←)'>◀</button>"
        f"<input id='tnb-slider' type='range' min='0' max='{last}' value='{last}' aria-label='model call'>"
        "<button id='tnb-next' type='button' title='next call (→)'>▶</button> "
        "<span id='tnb-pos'></span> <span class='hint'>← / → step, Home / End</span></div>"
        "<p id='tnb-head' class='note'></p><div id='tnb-notes'></div>"
        "<div class='scroll'><table id='tnb-view' class='aligned'><thead><tr><th>#</th>"
        "<th>history (newest first)</th><th>what the model saw</th></tr></thead><tbody></tbody></table></div>"
        "<noscript><p class='note'>the replay needs JavaScript; the messages are below</p></noscript>"
    )


def thread_body(thread: Thread, *, max_chars: int, plot: bool = True, back: str | None = None) -> str:
    """The escaped HTML body of a thread's page (the replay is filled in by the script); ``back``:
    a link to the page that lists it (a corpus index)."""
    figure = ""
    if plot and thread.n_calls:
        from tulip_nb.lab._plots import plot_token_usage

        fig = plot_token_usage(thread)
        figure = (
            "<section id='plot'><h2>Tokens per model call</h2>"
            + svg_img(fig, f"tokens sent per model call of {thread.thread_id}")
            + "</section>"
        )
    nav = " · ".join(
        f"<a href='#{a}'>{w}</a>" for a, w in (("replay", "replay"), ("turns", "turns"), ("events", "compactions"))
    )
    up = f"<a href='{esc(back)}'>← corpus</a> · " if back else ""
    return (
        f"<header><h1>Thread <code>{esc(thread.thread_id)}</code></h1>{_facts(thread)}<nav>{up}{nav} · "
        "<a href='#messages'>messages</a></nav></header>"
        f"{figure}<section id='replay'><h2>What the model saw, call by call</h2>{_replay(thread.n_calls)}</section>"
        f"<section id='turns'><h2>Turns ({len(thread.turn_list):,})</h2>{_turns_table(thread)}</section>"
        f"<section id='events'><h2>Compaction events ({len(thread.events):,})</h2>{_events_table(thread)}</section>"
        f"<section id='messages'><h2>Messages ({len(thread.final_messages):,})</h2>"
        f"<p class='note'>tool calls and results are collapsed: click to open; texts over {max_chars:,} "
        f"characters are truncated, with their full length shown</p>{_transcript(thread, max_chars)}</section>"
    )


def thread_page(thread: Thread, *, max_chars: int = 4000, plot: bool = True, back: str | None = None) -> str:
    """The whole self-contained page of ``thread``."""
    thread.turns  # noqa: B018 - first: primes the counter with the counts the agent saved (no re-encoding)
    return page(
        f"{thread.thread_id} · tulip_nb thread",
        "<main>" + thread_body(thread, max_chars=max_chars, plot=plot, back=back) + "</main>",
        scripts=["thread.js"],
        data={"thread": thread_data(thread, max_chars=max_chars)},
    )
