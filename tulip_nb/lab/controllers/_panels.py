"""Controllers of the smaller widgets: thread browser, replay player, token budget, diff, export.

Each is plain Python over :mod:`tulip_nb.lab` calls and renders HTML strings; the ipywidgets views
in :mod:`tulip_nb.widgets` only put those strings into ``HTML`` values::

    from tulip_nb.lab.controllers import BrowserController, PlayerController

    b = BrowserController(checkpointer)
    b.set_filter("ticket-*"); b.ids                       # matching thread ids
    p = PlayerController(b.open("ticket-8912"))
    p.marks(call=3)                                        # kept / pruned / summarised / dropped
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tulip_nb._sync import run_sync
from tulip_nb.core import Message
from tulip_nb.core.calls import calls_before, model_calls
from tulip_nb.core.errors import UserError
from tulip_nb.core.turns import Turn, split_turns
from tulip_nb.lab._budget import failed_turn_positions, recorded_limits
from tulip_nb.lab._common import esc, short
from tulip_nb.lab._plots import plot_token_usage, to_png
from tulip_nb.lab._replay import Replay
from tulip_nb.lab._thread import Thread, open_thread, threads
from tulip_nb.lab._window import Window, over_window, window_for
from tulip_nb.lab.controllers._aligned import AlignedRow, aligned_html, aligned_rows
from tulip_nb.lab.controllers._html import message_cell, more_note, note, png_tag, scroll_box, table
from tulip_nb.lab.diff import ThreadDiff, diff_threads
from tulip_nb.lab.export import REPORT_COLUMNS, aexport_threads, open_checkpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.memory.conversation.events import compaction_events
from tulip_nb.memory.conversation.plan import Plan, fingerprint
from tulip_nb.memory.managers import ConversationManager

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from tulip_nb.agent import Agent
    from tulip_nb.lab.controllers.stepper import StepperController

__all__: list[str] = []

DIFF_ROWS = 50
"""Changed messages a diff lists (the rest: ``ThreadDiff.to_frame()``)."""


# -- thread browser -----------------------------------------------------------------------------
class BrowserController:
    """The threads of a checkpointer (or its URL) as a table, with a filter (a glob, or a substring)."""

    def __init__(self, checkpointer: BaseCheckpointer | str) -> None:
        self.checkpointer, _ = open_checkpointer(checkpointer)  # a URL: one store for the list and opens
        self.filter = ""
        self.frame: pd.DataFrame = threads(self.checkpointer)

    def refresh(self) -> None:
        """Read the thread list again."""
        self.frame = threads(self.checkpointer)

    def set_filter(self, text: str) -> None:
        self.filter = text.strip()

    @property
    def rows(self) -> pd.DataFrame:
        """The rows matching the filter (``*?[`` make it a glob, otherwise a substring)."""
        f = self.filter
        if not f:
            return self.frame
        if set(f) & set("*?["):
            mask = [fnmatch.fnmatchcase(t, f) for t in self.frame["thread_id"]]
        else:
            mask = [f.lower() in t.lower() for t in self.frame["thread_id"]]
        return self.frame[mask]

    @property
    def ids(self) -> list[str]:
        return [str(t) for t in self.rows["thread_id"]]

    def open(self, thread_id: str) -> Thread:
        return open_thread(self.checkpointer, thread_id)

    def html(self, selected: str | None = None) -> str:
        matching = self.rows
        rows = matching.head(BROWSER_ROWS)  # a corpus of thousands stays one bounded, scrolling table
        cells = [
            (
                f"<code>{esc(r.thread_id)}</code>",
                str(r.checkpoints),
                str(r.messages),
                f"{int(r.tokens):,}",
                esc(str(r.last_update)[:19]),
                esc(r.forked_from if isinstance(r.forked_from, str) and r.forked_from else "—"),  # NaN: not a fork
            )
            for r in rows.itertuples()
        ]
        marks = ["summary" if r.thread_id == selected else "" for r in rows.itertuples()]
        head = note(
            f"{len(matching)} of {len(self.frame)} threads" + (f" matching {self.filter}" if self.filter else "")
        )
        headers = ["thread", "checkpoints", "messages", "tokens", "last update", "forked from"]
        more = more_note(len(matching) - len(rows), "filter to narrow the list; .frame has every row")
        return head + scroll_box(table(headers, cells, marks=marks)) + more


BROWSER_ROWS = 200
"""Threads the browser table shows at most (the rest: narrow with the filter, or ``.frame``)."""


# -- replay player ------------------------------------------------------------------------------
def plan_at(state: Any, n: int) -> Plan | None:
    """The compaction plan in effect for a model call made on ``messages[:n]`` (None: everything sent)."""
    for event in reversed(compaction_events(state)):
        plan = Plan.from_json(event["plan"])
        if plan.n <= n and plan.fp == fingerprint(state.messages, plan.n):
            return plan
    return None


def failed_turn_line(turn: Turn) -> str:
    """One line saying how a turn ended without an answer: ``"turn 12 ended: error — ModelError:
    provider 500"``."""
    why = {
        "max_iterations": f"stopped at the iteration limit after {turn.model_calls} model calls",
        "interrupted": "a question to a human was left unanswered",
    }.get(turn.outcome or "")
    detail = turn.error or why
    return f"turn {turn.turn} ended: {turn.outcome}" + (f" — {detail}" if detail else "")


def turn_end_positions(thread: Thread) -> dict[int, list[Turn]]:
    """The failed turns of ``thread`` by the model call right before their end (call 0 for one
    that failed before any call)."""
    msgs = thread.final_messages
    out: dict[int, list[Turn]] = {}
    for t in split_turns(msgs, thread.latest.state.metadata):
        if t.failed:
            out.setdefault(max(0, calls_before(msgs, t.last + 1) - 1), []).append(t)
    return out


class PlayerController:
    """Move through a thread's model calls (or checkpoints): the full history aligned by message
    with what the model saw (:meth:`rows`: shown / stubbed / summarised / dropped, long spans
    collapsed, the summary where it stands), rendered newest first in a bounded scroll box; with
    ``agent``, the thread is replayed up to the position (:class:`~tulip_nb.lab.Replay`) and
    divergences are shown. A failed turn's outcome is shown at the call it ended after
    (:meth:`turn_notes`)."""

    def __init__(self, thread: Thread, agent: Agent | None = None) -> None:
        self.thread = thread
        self.agent = agent
        self.mode = "calls"
        self.position = 0
        self.replay: Replay | None = Replay(thread, agent=agent) if agent is not None else None
        self._ends = model_calls(thread.final_messages)
        self._turn_ends = turn_end_positions(thread)

    @property
    def size(self) -> int:
        """Positions in the current mode (model calls or checkpoints)."""
        return len(self._ends) if self.mode == "calls" else len(self.thread.infos)

    def set_mode(self, mode: str) -> None:
        if mode not in ("calls", "checkpoints"):
            raise UserError(f"mode must be 'calls' or 'checkpoints', got {mode!r}")
        self.mode = mode
        self.position = 0

    def seek(self, position: int) -> None:
        if not 0 <= position < max(1, self.size):
            raise UserError(f"position {position} is outside 0..{self.size - 1}", thread_id=self.thread.thread_id)
        self.position = position
        if self.replay is not None and self.mode == "calls":
            target = self.replay.steps_for_calls(position + 1)  # the call, and a failure right after it
            if len(self.replay.steps) < target:
                self.replay.run_to(target)

    def turn_notes(self, call: int | None = None) -> list[str]:
        """How the turns that ended without an answer right after model call ``call`` (default:
        the current position) ended, as the record says: ``"turn 12 ended: error — ModelError:
        provider 500"`` (a turn that failed before any call of its own is told at the call before
        it; one before every call, at call 0)."""
        k = self.position if call is None else call
        return [failed_turn_line(t) for t in self._turn_ends.get(k, [])]

    def tulip_call(self, call: int | None = None) -> bool:
        """Whether model call ``call`` (default: the current position) was made by a tulip agent:
        nothing records what it was sent (:mod:`tulip_nb.memory.conversation.events`)."""
        k = self.position if call is None else call
        if not self._ends:
            return False
        turn = self.thread.turn_of(self._ends[k])
        return turn is not None and self.thread.turn_list[turn].outcome == "tulip"

    def marks(self, call: int | None = None) -> tuple[list[Message], list[str], list[Message]]:
        """``(history, marks, view)`` at model call ``call`` (default: the current position). A call
        a tulip agent made has every message marked ``"unknown"`` and an empty view: what it was
        sent is not recorded."""
        k = self.position if call is None else call
        if not self._ends:
            return [], [], []
        j = self._ends[k]
        state = self.thread.latest.state
        history = state.messages[:j]
        if self.tulip_call(k):
            return history, ["unknown"] * len(history), []
        view = self.thread.model_view(k)
        plan = plan_at(state, j)
        out = ["kept"] * len(history)
        if plan is not None:
            for i in range(plan.n):
                out[i] = "dropped"
            for spans, mark in ((plan.kept, "kept"), (plan.pruned, "pruned"), (plan.summarized, "summarised")):
                for s, e in spans:
                    out[s:e] = [mark] * (e - s)
        return history, out, view

    def rows(self, call: int | None = None) -> list[AlignedRow]:
        """The history at model call ``call`` (default: the current position) aligned with what
        the model saw: one row per shown or stubbed message, one per run of summarised or dropped
        messages, one for the summary (oldest first; see :mod:`._aligned`)."""
        k = self.position if call is None else call
        if not self._ends:
            return []
        j = self._ends[k]
        state = self.thread.latest.state
        return aligned_rows(state.messages[:j], plan_at(state, j), self.thread.counter)

    def divergences(self) -> pd.DataFrame | None:
        return self.replay.divergences if self.replay is not None else None

    def html(self) -> str:
        if self.mode == "checkpoints":
            return self._checkpoint_html()
        if not self._ends:
            return note("this thread has no model calls yet") + "".join(note(x, "warn") for x in self.turn_notes(0))
        history, marks, view = self.marks()
        k = self.position
        if self.tulip_call(k):
            return note(
                f"model call {k} of {len(self._ends)} was made by a tulip agent: what it was sent is not "
                f"recorded ({len(history)} messages of history; Thread.model_view(k, tulip_view='full') "
                "assumes tulip's NullManager sent them all)",
                "warn",
            ) + "".join(note(line, "warn") for line in self.turn_notes())
        rows = self.rows()
        counts = {x: marks.count(x) for x in ("kept", "pruned", "summarised", "dropped")}
        head = note(
            f"model call {k} of {len(self._ends)}: {len(view)} messages sent of {len(history)} — "
            + ", ".join(f"{v} {x}" for x, v in counts.items() if v)
            + f" ({len(rows)} rows, newest first)"
        )
        ended = "".join(note(line, "warn") for line in self.turn_notes())
        div = ""
        if self.replay is not None:
            frame = self.replay.divergences
            frame = frame[frame["step"] < self.replay.steps_for_calls(k + 1)]
            if len(frame):
                found = [
                    (
                        str(r.step),
                        "—" if r.turn is None or r.turn != r.turn else str(int(r.turn)),  # NaN: before any turn
                        str(r.index),
                        esc(r.kind),
                        esc(short(r.expected, 120)),
                        esc(short(r.actual, 120)),
                    )
                    for r in frame.itertuples()
                ]
                div = note(f"the replay diverged at step {int(frame['step'].iloc[0])}", "warn") + table(
                    ["step", "turn", "message", "kind", "recorded", "replayed"], found, marks=["dropped"] * len(found)
                )
            else:
                div = note(f"replayed {len(self.replay.steps)} steps: identical to the record so far", "ok")
        return head + ended + div + aligned_html(history, view, rows)

    def _checkpoint_html(self) -> str:
        # The positions come from the headers (oldest first); only the checkpoint shown is loaded,
        # so a thread of thousands of checkpoints switches mode as fast as it shows one.
        infos = self.thread.infos
        if not infos:
            return note("no checkpoints")
        info = infos[len(infos) - 1 - self.position]
        ck = self.thread.checkpoint(info.checkpoint_id)
        history = infos
        msgs = ck.state.messages
        rows = [(str(i), message_cell(m)) for i, m in enumerate(msgs[-12:], start=max(0, len(msgs) - 12))]
        head = note(
            f"checkpoint {self.position + 1} of {len(history)}: {ck.checkpoint_id[:8]} "
            f"({ck.metadata.get('source', '?')}), iteration {ck.state.iteration}, {len(msgs)} messages"
        )
        return head + scroll_box(table(["#", "message"], rows))


# -- token budget -------------------------------------------------------------------------------
class BudgetController:
    """Token usage per model call against the trigger line and the window, for a thread or a
    stepper (then it follows every step). ``manager`` gives trigger and window (default: the
    stepper's agent's manager; for a saved thread, the trigger and window its own manager
    recorded); ``context_window`` is the model's window when the manager does not know it
    (tokens, or a registered model name; a stepper's agent's model is looked up too). Unknown:
    no line, and the label says "window unknown". Calls that sent more than the window are marked
    red and counted (``over``); a saved thread's failed turns are marked and counted (``failed``).
    The plot's y axis follows what was sent (:func:`~tulip_nb.lab.plot_token_usage`)."""

    def __init__(
        self,
        source: Thread | StepperController,
        *,
        manager: ConversationManager | None = None,
        context_window: Window = None,
    ) -> None:
        from tulip_nb.lab.controllers.stepper import StepperController

        self.source = source
        self.stepper = source if isinstance(source, StepperController) else None
        if manager is None and self.stepper is not None:
            manager = self.stepper.agent.conversation_manager
        model = self.stepper.agent.model if self.stepper is not None else None
        self.trigger = manager.trigger_tokens if isinstance(manager, LLMCompactor) else None
        self.window = window_for(manager, context_window, model)
        self.failed: list[float] = []
        if isinstance(source, Thread):
            if manager is None:  # what the thread's own manager recorded
                recorded = recorded_limits(source.latest.state)
                self.trigger = recorded.trigger
                self.window = self.window or recorded.window
            self.failed = failed_turn_positions(source)
        self.png: bytes | None = None
        self.figure: Figure | None = None  # the last plot drawn (its axes say what the PNG shows)
        self.over = 0
        self.max_tokens = 0
        self.refresh()

    def frame(self) -> pd.DataFrame:
        """``call``, ``full_tokens``, ``context_tokens``, ``compacted``, ``over_window`` (None:
        the window is not known)."""
        import pandas as pd

        cols = ["call", "full_tokens", "context_tokens", "compacted"]
        if self.stepper is None:
            assert isinstance(self.source, Thread)
            frame = self.source.usage[cols].copy()
        else:
            rows = [
                {
                    "call": r.index,
                    "full_tokens": r.full_tokens,
                    "context_tokens": r.context_tokens,
                    "compacted": r.compacted,
                }
                for r in self.stepper.records
            ]
            frame = pd.DataFrame(rows, columns=cols)
        frame["over_window"] = pd.Series(
            [over_window(v, self.window) for v in frame["context_tokens"]], index=frame.index, dtype=object
        )
        return frame

    def refresh(self, *_: Any) -> None:
        frame = self.frame()
        self.rows = len(frame)
        self.over = sum(v is True for v in frame["over_window"])
        if not len(frame):
            self.png = self.figure = None
            return
        name = self.source.thread_id if isinstance(self.source, Thread) else None
        if self.stepper is not None:
            name = self.stepper.thread_id
        fig = plot_token_usage(
            frame, name, trigger_tokens=self.trigger, context_length=self.window, failed_turns=self.failed
        )
        fig.set_size_inches(6.5, 3.0)
        self.figure = fig
        self.png = to_png(fig)
        last = frame.iloc[-1]
        self.last_tokens = int(last["context_tokens"])
        self.max_tokens = int(frame["context_tokens"].max())

    def label(self) -> str:
        if not self.rows:
            return "no model calls yet"
        if self.over and self.window:
            # never "x% of the trigger" then: the model was sent more than it can take
            return (
                f"{self.rows} calls, {self.over} over the window ({self.window:,} tokens): "
                f"up to {self.max_tokens:,} tokens sent, last {self.last_tokens:,}"
            )
        parts = [f"{self.rows} calls", f"last sent {self.last_tokens:,} tokens"]
        if self.trigger:
            parts.append(f"{self.last_tokens / self.trigger:.0%} of the trigger ({self.trigger:,})")
        if self.window:
            parts.append(f"window {self.window:,}")
        else:  # never "0 over": nothing can be said about the window
            parts.append("window unknown (pass context_window=)")
        if self.failed:
            parts.append(f"{len(self.failed)} failed turn{'s' if len(self.failed) != 1 else ''}")
        return ", ".join(parts)

    def html(self) -> str:
        img = png_tag(self.png, "token budget") if self.png else ""
        return f"<div class='tulip-nb-budget'>{note(self.label(), 'error' if self.over else 'info')}{img}</div>"


# -- diff ---------------------------------------------------------------------------------------
class DiffController:
    """Pick two threads of one checkpointer and diff them (:func:`~tulip_nb.lab.diff_threads`):
    the changed rows highlighted in hunks with ``context`` same messages around them, the runs of
    same messages between hunks collapsed into one line -- the rows ``tulip-nb diff`` prints."""

    def __init__(self, a: Thread, b: Thread | None = None, *, context: int = 3) -> None:
        self.checkpointer = a.checkpointer
        self.a = a
        self.b = b
        self.context = context
        self.result: ThreadDiff | None = None
        self.choices = self._choices()
        if b is None:
            self.b = open_thread(self.checkpointer, self._relative())
        self.compute()

    def _relative(self) -> str:
        """A thread to compare ``a`` with: its first fork, else its parent, else another thread."""
        try:
            lineage = self.a.lineage
        except Exception:  # lineage needs list_threads; fall back to the choices
            lineage = None
        if lineage is not None:
            for relation in ("fork", "copy", "parent", "copied_from"):
                hit = lineage[lineage["relation"] == relation]
                if len(hit):
                    return str(hit["thread_id"].iloc[0])
        others = [t for t in self.choices if t != self.a.thread_id]
        return others[0] if others else self.a.thread_id

    def _choices(self) -> list[str]:
        try:
            return sorted(threads(self.checkpointer)["thread_id"])
        except Exception:  # a backend without list_threads: the two threads we were given
            return sorted({self.a.thread_id} | ({self.b.thread_id} if self.b is not None else set()))

    def pick(self, a: str | None = None, b: str | None = None) -> None:
        if a is not None and a != self.a.thread_id:
            self.a = open_thread(self.checkpointer, a)
        if b is not None and (self.b is None or b != self.b.thread_id):
            self.b = open_thread(self.checkpointer, b)
        self.compute()

    def compute(self) -> ThreadDiff:
        assert self.b is not None
        self.result = diff_threads(self.a, self.b)
        return self.result

    def html(self) -> str:
        assert self.result is not None
        return scroll_box(self.result._repr_html_(limit=DIFF_ROWS, context=self.context))


# -- export -------------------------------------------------------------------------------------
class ExportController:
    """Choose threads and a destination (a URL or a checkpointer), dry run, export with progress,
    then show the verification report (:func:`tulip_nb.lab.export_threads`, thread by thread)."""

    def __init__(self, source: BaseCheckpointer | str) -> None:
        self.source = source
        src, opened = open_checkpointer(source)
        try:
            self.choices = sorted(run_sync(src.list_threads(limit=100_000)))
        finally:
            if opened:
                run_sync(src.close())
        self.selected: list[str] = list(self.choices)
        self.report: pd.DataFrame | None = None

    def export(
        self,
        dest: BaseCheckpointer | str,
        *,
        dry_run: bool = False,
        verify: bool = True,
        on_conflict: str = "error",
        progress: Callable[[int, int, str], None] | None = None,
    ) -> pd.DataFrame:
        """Export the selected threads one by one (``progress(done, total, thread_id)`` after each)."""
        import pandas as pd

        if not isinstance(dest, BaseCheckpointer) and not (isinstance(dest, str) and dest.strip()):
            raise UserError("choose a destination: a URL like file:./exported or s3://bucket/prefix")
        if not self.selected:
            raise UserError("choose at least one thread to export")
        frames = []
        total = len(self.selected)

        async def go() -> None:
            src, close_src = open_checkpointer(self.source)
            dst, close_dst = open_checkpointer(dest.strip() if isinstance(dest, str) else dest)
            try:
                for i, tid in enumerate(self.selected):
                    frames.append(
                        await aexport_threads(
                            src,
                            dst,
                            [tid],
                            dry_run=dry_run,
                            verify=verify,
                            on_conflict=on_conflict,  # type: ignore[arg-type]
                            progress=False,
                        )
                    )
                    if progress is not None:
                        progress(i + 1, total, tid)
            finally:
                if close_dst:
                    await dst.close()
                if close_src:
                    await src.close()

        run_sync(go())
        self.report = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(REPORT_COLUMNS))
        self.report.attrs["dry_run"] = dry_run
        if frames:
            self.report.attrs["dest_layout"] = frames[0].attrs.get("dest_layout")
        return self.report

    def html(self) -> str:
        if self.report is None:
            return note(f"{len(self.selected)} of {len(self.choices)} threads selected")
        r = self.report
        ok = r["error"].isna().all() if len(r) else True
        dry = r.attrs.get("dry_run")
        verified = bool(r["verified"].fillna(False).all()) if len(r) else False
        done = "dry run: would copy" if dry else "copied"
        summary = (
            f"{done} {int(r['copied'].sum())} checkpoints of {len(r)} threads, {int(r['skipped'].sum())} already there"
            + ("" if dry else "; verified" if verified else "; NOT verified")
        )
        if len(r) and r.attrs.get("dest_layout"):  # what the destination holds for them, for its layout
            held = int(r["dest_bytes"].sum())
            size = f"{held / 1e6:,.1f} MB" if held >= 100_000 else f"{held / 1e3:,.1f} kB"
            summary += f"; {'would write' if dry else 'wrote'} ~{size} ({r.attrs['dest_layout']})"
        rows = [
            (
                f"<code>{esc(x.thread)}</code>",
                esc(x.status),
                str(x.checkpoints),
                str(x.copied),
                str(x.skipped),
                esc(x.verified),
                esc(x.error or ""),
            )
            for x in r.itertuples()
        ]
        marks = ["dropped" if x.error else "" for x in r.itertuples()]
        headers = ["thread", "status", "checkpoints", "copied", "skipped", "verified", "error"]
        return note(summary, "ok" if ok else "error") + table(headers, rows, marks=marks)
