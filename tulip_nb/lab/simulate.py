"""The compaction simulator: try conversation-manager settings on a saved thread, no model calls.

For every model call a thread recorded, the simulator hands the history as it was at that call to
a real conversation manager (the same :class:`~tulip_nb.memory.compactor.LLMCompactor`,
:class:`~tulip_nb.memory.managers.SlidingWindowManager`, ... an agent runs), exactly as the agent
does (``await manager.aapply(history, tools=..., state=...)``), and reads back what it decided:
the plan in effect and the compaction events it recorded. A summariser in a config is replaced by
a *length model* (a stub whose summary is 10 % of what it replaces, at most 2000 tokens; it keeps
no facts) unless you pass ``summarizer=``. So the per-call numbers are the ones the agent would
have recorded with that config on that thread::

    from tulip_nb.lab import simulate_compaction, compaction_grid
    from tulip_nb.memory.compactor import LLMCompactor, SlidingWindowManager

    sim = simulate_compaction(thread, {
        "compact 32k": LLMCompactor(context_length=32_000),
        "window 40": SlidingWindowManager(window_size=40),
    }, probes=[("order id", "ord-4821")])
    sim.groupby("config")["compacted"].sum()
    compaction_grid(thread, context_length=32_000)       # one row per trigger/tail fraction

Columns per (config, call): ``call`` (0-based model call), ``turn``, ``iteration`` (in the turn),
``n_messages``, ``full_tokens`` (everything), ``context_tokens`` (what the model is sent),
``compacted``, ``trigger``, ``tokens_before`` / ``tokens_after`` (the event's), ``kept_tokens``,
``pruned_tokens``, ``summarized_tokens``, ``dropped_tokens`` (original tokens of the messages in
each state), ``summary_tokens``, the composition ``c_system``, ``c_tools``, ``c_user``,
``c_assistant``, ``c_tool``, ``c_summary``, ``trigger_tokens`` / ``context_length`` (compactors),
``context_window`` (the window the call is bound by: ``context_window=`` if you give it, else a
compactor's ``context_length``, else the registered window of the manager's ``model``; None when
unknown), ``over_window`` (True: the call sends more than that window, which a real model rejects,
or the manager raised :class:`~tulip_nb.core.errors.ContextWindowExceeded` — then ``trigger`` is
``"window exceeded"`` and ``context_tokens`` the smallest request it could have sent; None: window
unknown) and one ``probe: <label>`` column per probe (True: the text is in the model's
view; False: it was said but is no longer seen; None: not said yet).

Calls where a manager provably changes nothing (below an LLMCompactor's trigger, inside a
window, a null manager) are not sent to it: the plan in effect already gives the view. With
``exact=True`` every call goes to the manager (slower; the tests check both agree).

A fork is simulated on its own history, with its own tool schemas: a fork that edited its system
prompt (or any inherited message) or changed a tool is simulated with the change from its first
call, while its inherited calls ran with the source's and the agent re-planned at the branch point,
so compactions near the branch point can differ from the record (simulate the source for its
part).
"""

from __future__ import annotations

import difflib
import inspect
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from tulip_nb._deps import require
from tulip_nb._sync import sync_twin
from tulip_nb.core import Message
from tulip_nb.core.errors import ContextWindowExceeded, UserError
from tulip_nb.core.state import AgentState
from tulip_nb.core.turns import split_turns
from tulip_nb.lab._recorded import RecordedSummaries, check_choice, recorded_config, recorded_tools, summarizer_of
from tulip_nb.lab._thread import Thread, aas_thread
from tulip_nb.lab._window import Window, over_window, saved_window, window_for
from tulip_nb.memory.conversation import (
    EVENTS_KEY,
    ConversationManager,
    LLMCompactor,
    NullManager,
    Plan,
    PlanningManager,
    SlidingWindowManager,
    SummarizingConversationManager,
)
from tulip_nb.memory.conversation.plan import fingerprint, stub
from tulip_nb.tokens import REPLY_PRIMING, TokenCounter, get_counter

if TYPE_CHECKING:
    import pandas as pd

    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["RECORDED", "normalize_probes"]

RECORDED = "recorded"
"""A config that stands for the manager the thread ran with (its saved settings), e.g.
``{"as ran": "recorded", "32k": LLMCompactor(context_length=32_000)}``; ``configs=None`` is
``{"recorded": "recorded"}``."""

_ROLES = ("system", "user", "assistant", "tool")
Probe = tuple[str, str]
Probes = Mapping[str, str] | Sequence[Probe | str]
"""Facts to follow: ``[(label, text), ...]``, ``{label: text}`` or ``[text, ...]`` (label = text)."""
Configs = ConversationManager | Mapping[str, Any] | Sequence[ConversationManager | Mapping[str, Any]] | str
"""Managers to simulate: one manager or config dict, a list of them (named by the manager's repr),
``{name: manager or config dict}``; :data:`RECORDED` (alone or as a value) is the manager the
thread ran with."""
Summarizer = Any
"""``summarizer=``: a name in :data:`~tulip_nb.lab._recorded.SUMMARIZERS`, a function, None
(``"auto"``), or ``{config name: one of those}``."""


def length_summarizer(
    counter: TokenCounter | None = None, ratio: float = 0.1, max_tokens: int = 2000
) -> Callable[[list[Message], str | None], str]:
    """A stub summariser: text of ``ratio`` x the tokens it replaces (previous summary included),
    at most ``max_tokens``. It calls no model and keeps no facts."""
    c = counter or get_counter()

    def summarize(messages: list[Message], previous: str | None) -> str:
        tokens = sum(c.message_counts(messages)) + (c.count_text(previous) if previous else 0)
        n = max(16, min(max_tokens, int(tokens * ratio)))
        return f"[simulated summary of {len(messages)} messages]" + " summary" * n

    summarize.__name__ = "length_summarizer"
    return summarize


def _messages_of(source: Thread | AgentState | Sequence[Message]) -> list[Message]:
    if isinstance(source, AgentState):
        return list(source.messages)
    if isinstance(source, Sequence):
        return list(source)
    return list(source.final_messages)


def _state_of(source: Thread | AgentState | Sequence[Message]) -> AgentState | None:
    """The latest state of ``source`` (None for bare messages: nothing is recorded)."""
    if isinstance(source, AgentState):
        return source
    if isinstance(source, Sequence):
        return None
    return source.latest.state


_FACTORIES: dict[str, type[ConversationManager]] = {
    "compactor": LLMCompactor,
    "llm": LLMCompactor,
    "window": SlidingWindowManager,
    "null": NullManager,
    "summarizing": SummarizingConversationManager,
}
"""Config-dict ``kind`` -> manager class (the other keys are its constructor's arguments)."""


def normalize_probes(probes: Probes) -> list[Probe]:
    """``[(label, text), ...]`` from any :data:`Probes` form; a bad entry raises :class:`UserError`."""
    if isinstance(probes, str):
        probes = [probes]
    items: list[tuple[Any, Any]] = []
    if isinstance(probes, Mapping):
        items = list(probes.items())
    else:
        for p in probes:
            if isinstance(p, str):
                items.append((p, p))
            elif isinstance(p, Sequence) and len(p) == 2:
                items.append((p[0], p[1]))
            else:
                raise UserError(f"probe {p!r}: give (label, text), a text, or probes={{label: text}}")
    for label, text in items:
        if not isinstance(label, str) or not label:
            raise UserError(f"probe label {label!r} must be a non-empty str")
        if not isinstance(text, str) or not text:
            raise UserError(f"probe {label!r} needs a non-empty text to look for")
    labels = [label for label, _ in items]
    if len(set(labels)) != len(labels):
        raise UserError(f"probe labels must be unique, got {labels}")
    return [(str(label), str(text)) for label, text in items]


def _one_config(spec: Mapping[str, Any]) -> bool:
    """Whether a mapping is one config dict (``{"kind": ..., "context_length": ...}``) rather than
    ``{name: config}``: it has a ``kind`` or a value that is neither a manager, a dict nor
    :data:`RECORDED`."""
    if isinstance(spec.get("kind"), str):
        return True
    return any(not isinstance(v, (ConversationManager, Mapping)) and v != RECORDED for v in spec.values())


def _keywords(factory: type[ConversationManager]) -> set[str] | None:
    """The keyword arguments ``factory`` takes (None: any)."""
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _build(where: str, spec: Mapping[str, Any]) -> ConversationManager:
    kind = spec.get("kind", "compactor")
    factory = _FACTORIES.get(kind) if isinstance(kind, str) else None
    if factory is None:
        raise UserError(f"config {where}: unknown kind {kind!r}; one of {sorted(_FACTORIES)}")
    kw = {k: v for k, v in spec.items() if k != "kind"}
    valid = _keywords(factory)
    bad = sorted(set(kw) - valid) if valid is not None else []
    if valid is not None and bad:
        close = {b: difflib.get_close_matches(str(b), sorted(valid), n=1) for b in bad}
        hint = "".join(f"; {b!r}: did you mean {m[0]!r}?" for b, m in close.items() if m)
        raise UserError(
            f"config {where}: unknown key{'s' if len(bad) > 1 else ''} {bad} for kind {kind!r} "
            f"({factory.__name__}){hint}; valid keys: {['kind', *sorted(valid)]}"
        )
    try:
        return factory(**kw)
    except (TypeError, ValueError) as e:
        raise UserError(f"config {where}: {factory.__name__}(...) refused it: {e}") from e


def _recorded_manager(state: AgentState | None) -> ConversationManager:
    """The manager the thread ran with, rebuilt from the settings it saved."""
    config = recorded_config(state)
    if config is None:
        raise UserError(
            "configs='recorded': this thread saved no manager settings (run by tulip, by an older "
            "tulip_nb, with a sliding window or no manager, or only messages were given); pass the "
            "config it ran with, e.g. configs={'as ran': LLMCompactor(context_length=..., summarize_fn=...)}"
        )
    return _build("'recorded' (the thread's saved settings)", config)


def _configs(configs: Configs | None, state: AgentState | None = None, *, defer: bool = False) -> list[tuple[str, Any]]:
    """``[(name, manager)]``, each a fresh clone. :data:`RECORDED` becomes the thread's manager
    (``state``'s saved settings), or stays the string with ``defer=True`` (resolved per thread)."""
    if configs is None or configs == RECORDED:
        configs = {RECORDED: RECORDED}
    if isinstance(configs, ConversationManager) or (isinstance(configs, Mapping) and _one_config(configs)):
        configs = [configs]
    items: list[tuple[str | None, Any]]
    if isinstance(configs, Mapping):
        items = [(str(name), spec) for name, spec in configs.items()]
    elif isinstance(configs, Sequence) and not isinstance(configs, (str, bytes)):
        items = [(None, spec) for spec in configs]
    else:
        raise UserError(
            "configs must be a manager, a config dict, a list of them or {name: manager or dict}, "
            f"got {type(configs).__name__}"
        )
    out = []
    for name, spec in items:
        where = repr(name) if name is not None else repr(spec)
        if spec == RECORDED:
            out.append((name or RECORDED, RECORDED if defer else _recorded_manager(state)))
        elif isinstance(spec, ConversationManager):
            manager = spec.clone_for_spawn()
            out.append((name if name is not None else repr(spec), manager))
        elif isinstance(spec, Mapping):
            manager = _build(where, spec)
            out.append((name if name is not None else repr(manager), manager))
        else:
            raise UserError(f"config {where} must be a ConversationManager or a dict, got {type(spec).__name__}")
    if len({n for n, _ in out}) != len(out):
        raise UserError("config names must be unique")
    return out


def _choice_for(name: str, summarizer: Summarizer) -> Any:
    """The ``summarizer=`` choice for config ``name`` (a mapping gives one per config)."""
    if isinstance(summarizer, Mapping):
        choice = summarizer.get(name)
        check_choice(f"config {name!r}", choice)
        return choice
    return summarizer


def _check_summarizer(summarizer: Summarizer, names: Sequence[str]) -> None:
    if isinstance(summarizer, Mapping):
        unknown = sorted(set(map(str, summarizer)) - set(names))
        if unknown:
            raise UserError(
                f"summarizer={{...}} names configs that are not simulated: {unknown}; configs: {list(names)}"
            )
        for name in summarizer:
            check_choice(f"config {name!r}", summarizer[name])
    else:
        check_choice("simulate_compaction", summarizer)


class _Sums:
    """Prefix sums of token counts (all, per role, with tool output stubbed) for one counter."""

    def __init__(self, msgs: list[Message], counter: TokenCounter) -> None:
        self.msgs = msgs
        self.counter = counter
        counts = counter.message_counts(msgs)
        self.all = _prefix(counts)
        self.role = {r: _prefix([c if m.role == r else 0 for m, c in zip(msgs, counts, strict=True)]) for r in _ROLES}
        self._stub: list[int] | None = None

    def stubbed(self) -> list[int]:
        """Prefix sums of what each message costs when pruned (tool output stubbed)."""
        if self._stub is None:
            count = self.counter.count_message
            self._stub = _prefix([count(stub(m)) if m.role == "tool" else count(m) for m in self.msgs])
        return self._stub

    def span(self, s: int, e: int) -> int:
        return self.all[e] - self.all[s]

    def roles(self, s: int, e: int) -> dict[str, int]:
        return {r: p[e] - p[s] for r, p in self.role.items()}


def _prefix(values: list[int]) -> list[int]:
    out = [0]
    acc = 0
    for v in values:
        acc += v
        out.append(acc)
    return out


@dataclass
class _PlanPart:
    """What a plan shows of ``messages[:plan.n]``: token totals and probe visibility (computed once)."""

    n: int
    view: int
    kept: int
    pruned: int
    summarized: int
    dropped: int
    summary: int
    comp: dict[str, int]
    seen: list[bool]


def _plan_part(plan: Plan | None, sums: _Sums, probes: list[tuple[str, list[int]]]) -> _PlanPart:
    zero = dict.fromkeys(_ROLES, 0)
    if plan is None:
        return _PlanPart(0, 0, 0, 0, 0, 0, 0, zero, [False] * len(probes))
    allp = sums.all
    rp = [sums.role[r] for r in _ROLES]
    comp = [0, 0, 0, 0]
    kept = 0
    for s, e in plan.kept:
        kept += allp[e] - allp[s]
        for k in range(4):
            comp[k] += rp[k][e] - rp[k][s]
    pruned = view_pruned = 0
    if plan.pruned:
        stubbed = sums.stubbed()
        for s, e in plan.pruned:
            pruned += allp[e] - allp[s]
            shown = stubbed[e] - stubbed[s]
            view_pruned += shown
            other = 0
            for k in range(3):  # system, user, assistant are shown as they are
                v = rp[k][e] - rp[k][s]
                comp[k] += v
                other += v
            comp[3] += shown - other
    summarized = sum(allp[e] - allp[s] for s, e in plan.summarized)
    dropped = sum(allp[e] - allp[s] for s, e in plan.dropped())
    msg = plan.summary_msg()
    summary = sums.counter.count_message(msg) if msg is not None else 0
    seen = []
    for text, hits in probes:
        vis = any(_shown(plan, sums.msgs, i) for i in hits if i < plan.n)
        seen.append(vis or (plan.summary is not None and text in plan.summary))
    roles = dict(zip(_ROLES, comp, strict=True))
    return _PlanPart(plan.n, kept + view_pruned + summary, kept, pruned, summarized, dropped, summary, roles, seen)


def _shown(plan: Plan, msgs: list[Message], i: int) -> bool:
    if any(s <= i < e for s, e in plan.kept):
        return True
    return msgs[i].role != "tool" and any(s <= i < e for s, e in plan.pruned)


def _probe_hits(msgs: list[Message], probes: Sequence[Probe]) -> list[tuple[str, list[int]]]:
    out = []
    for label, text in probes:
        if not isinstance(text, str) or not text:
            raise UserError(f"probe {label!r} needs a non-empty text to look for")
        hits = [
            i
            for i, m in enumerate(msgs)
            if text in (m.content or "") or any(text in str(c.arguments) for c in m.tool_calls)
        ]
        out.append((text, hits))
    return out


def _no_op(manager: ConversationManager, plan: Plan | None, view_tokens: int, n: int, body: int) -> bool:
    """Whether ``manager`` provably keeps the plan in effect for this call (so it need not run)."""
    kind = type(manager)
    if kind is NullManager:
        return True
    if kind is LLMCompactor:
        assert isinstance(manager, LLMCompactor)
        return not manager._reduce_pending and view_tokens <= manager.trigger_tokens
    if kind is SlidingWindowManager or kind.__name__ == "SlidingWindowConversationManager":
        assert isinstance(manager, SlidingWindowManager)
        return n - body <= manager.effective_window()
    return False


async def _simulate_one(
    name: str,
    manager: ConversationManager,
    msgs: list[Message],
    ends: list[CallPoint],
    tools: list[dict[str, Any]] | None,
    sums_for: Callable[[TokenCounter], _Sums],
    probes: list[tuple[str, list[int]]],
    labels: list[str],
    exact: bool,
    context_window: Window = None,
    *,
    saved: int | None = None,
    used: str | None = None,
    served: RecordedSummaries | None = None,
) -> list[dict[str, Any]]:
    bound = window_for(manager, context_window) or saved
    counter = manager.counter if isinstance(manager, PlanningManager) else get_counter()
    sums = sums_for(counter)
    fixed = counter.count_tools(tools) + REPLY_PRIMING
    scratch = AgentState()
    plan: Plan | None = None
    part = _plan_part(None, sums, probes)
    body = 1 if msgs and msgs[0].role == "system" else 0
    trigger = manager.trigger_tokens if isinstance(manager, LLMCompactor) else None
    window = manager.context_length if isinstance(manager, LLMCompactor) else None
    rows = []
    for j, turn, iteration, call, kind in ends:
        view = fixed + part.view + sums.span(part.n, j)
        event = None
        refused: ContextWindowExceeded | None = None
        source = used
        if kind != "tulip" and (exact or not _no_op(manager, plan, view, j, body)):
            before = len(scratch.metadata.get(EVENTS_KEY, ()))
            scratch.iteration = iteration
            if served is not None:
                served.at, served.last_source = j, None
            try:
                await manager.aapply(msgs[:j], tools=tools, state=scratch)
            except ContextWindowExceeded as e:  # what must be kept cannot fit: the agent stops here
                refused = e
            events = scratch.metadata.get(EVENTS_KEY, ())
            event = events[-1] if len(events) > before else None
            raw = manager.get_state().get("plan") if isinstance(manager, PlanningManager) else None
            new = Plan.from_json(raw) if raw else None
            if new != plan:
                plan, part = new, _plan_part(new, sums, probes)
            view = fixed + part.view + sums.span(part.n, j)
            if refused is not None and refused.tokens_needed is not None:
                view = int(refused.tokens_needed)  # the smallest request it could have sent
            if served is not None and event is not None and served.last_source is not None:
                source = served.last_source  # where this compaction's summary came from
        tail = sums.roles(part.n, j)
        row: dict[str, Any] = {
            "config": name,
            "call": call,
            "failed": kind == "failed",
            "tulip": kind == "tulip",
            "turn": turn,
            "iteration": iteration,
            "n_messages": j,
            "full_tokens": sums.all[j] + fixed,
            "context_tokens": view,
            "compacted": event is not None,
            "trigger": event.get("trigger") if event else ("window exceeded" if refused is not None else None),
            "tokens_before": event.get("tokens_before") if event else None,
            "tokens_after": event.get("tokens_after") if event else None,
            "kept_tokens": part.kept + sums.span(part.n, j),
            "pruned_tokens": part.pruned,
            "summarized_tokens": part.summarized,
            "dropped_tokens": part.dropped,
            "summary_tokens": part.summary,
            "c_system": part.comp["system"] + tail["system"],
            "c_tools": fixed - REPLY_PRIMING,
            "c_user": part.comp["user"] + tail["user"],
            "c_assistant": part.comp["assistant"] + tail["assistant"],
            "c_tool": part.comp["tool"] + tail["tool"],
            "c_summary": part.summary,
            "trigger_tokens": trigger,
            "context_length": window,
            "context_window": bound,
            "over_window": True if refused is not None else over_window(view, bound),
            "summarizer": source,
        }
        for label, (_, hits), seen in zip(labels, probes, part.seen, strict=True):
            k = bisect_left(hits, j)  # hits before this call
            said = k > 0
            row[f"probe: {label}"] = (seen or (k > 0 and hits[k - 1] >= part.n)) if said else None
        rows.append(row)
    return rows


CallPoint = tuple[int, int, int, int, str]
"""``(history length, turn, iteration in the turn, call, kind)`` of one model call; ``kind``:
``"answered"``, ``"failed"`` or ``"tulip"`` (see :func:`_call_points`)."""


def _call_points(msgs: list[Message], state: AgentState | None = None) -> list[CallPoint]:
    """Every model call of the thread: one per assistant message (``call`` numbers them), plus
    the **failed calls the thread recorded a compaction for** (a request sent, no answer: the
    model raised after the manager compacted). Those are ``"failed"`` and share the ``call``
    number of the next answered call (the event's own ``call``); replaying them keeps the
    simulated manager where the agent's was, so the record is reproduced. Calls in turns a tulip
    agent wrote are ``"tulip"``: tulip's own manager made them, so the simulated one is not run
    there (its plan in effect is shown)."""
    tulip: list[tuple[int, int]] = []
    if state is not None:
        tulip = [(t.first, t.last) for t in split_turns(msgs, state.metadata) if t.outcome == "tulip"]
    out: list[CallPoint] = []
    turn, it, k = 0, 0, 0
    turn_at: list[tuple[int, int]] = []  # (position, turn) of each user message
    for j, m in enumerate(msgs):
        if m.role == "user":
            turn, it = turn + 1, 0
            turn_at.append((j, turn))
        elif m.role == "assistant":
            it += 1
            by_tulip = any(first <= j <= last for first, last in tulip)
            out.append((j, turn, it, k, "tulip" if by_tulip else "answered"))
            k += 1
    if state is None:
        return out
    answered = {p[0] for p in out}
    extra: list[CallPoint] = []
    for event in state.metadata.get(EVENTS_KEY) or ():
        n = event.get("n_messages") if isinstance(event, dict) else None
        if type(n) is not int or n in answered or not 0 < n <= len(msgs) or not _of_history(event, msgs):
            continue
        t = turn_at[bisect_left(turn_at, (n, 0)) - 1][1] if turn_at and turn_at[0][0] < n else 0
        calls = bisect_left([p[0] for p in out], n)
        iteration = event.get("iteration")
        extra.append((n, t, iteration if type(iteration) is int else 0, calls, "failed"))
        answered.add(n)
    return sorted(out + extra, key=lambda p: (p[0], p[4] != "failed"))


def _of_history(event: Mapping[str, Any], msgs: list[Message]) -> bool:
    """Whether a recorded event was made on a prefix of ``msgs`` (not a fork source's past)."""
    try:
        plan = Plan.from_json(event["plan"])
    except (KeyError, TypeError, ValueError):
        return False
    return plan.n <= len(msgs) and plan.fp == fingerprint(msgs, plan.n)


async def asimulate_compaction(
    thread: Thread | str | AgentState | Sequence[Message],
    configs: Configs | None = None,
    *,
    checkpointer: BaseCheckpointer | str | None = None,
    probes: Probes = (),
    tools: Sequence[Any] | None = None,
    summarizer: Summarizer = None,
    exact: bool = False,
    context_window: Window = None,
) -> pd.DataFrame:
    """Replay only the conversation-manager logic of ``thread`` for each config (module docstring).

    ``thread``: a :class:`Thread`, a state, its messages, or a thread id with ``checkpointer=``
    (a checkpointer or its URL, ``"file:./threads"``).

    ``configs``: ``{name: manager or {"kind": "compactor"|"window"|"null"|"summarizing", **kwargs}}``,
    or one manager or config dict, or a list of them (named by the manager's repr); each is cloned,
    so yours are untouched. A config dict's keys are the manager's constructor arguments (a wrong
    key raises :class:`UserError` naming the config and listing the valid keys). None, or
    :data:`RECORDED` as a value: the manager the thread ran with, from the settings it saved.
    ``probes``: facts to follow, ``[(label, text), ...]``, ``{label: text}`` or ``[text, ...]``.
    ``tools``: the tool schemas (or :class:`~tulip_nb.tools.Tool` objects) the agent sent; by
    default the ones the thread's manager saved (``[]``: count none).
    ``summarizer``: who writes the summaries (:mod:`tulip_nb.lab._recorded`): ``"auto"`` (None,
    the default: the config's function, else the thread's — re-imported, else its recorded
    summaries served by position), ``"config"``, ``"recorded"``, ``"length"`` (the length
    model), ``"none"``, a ``(messages, previous) -> str`` function, or ``{config name: choice}``.
    The ``summarizer`` column says which one wrote each config's summaries.
    ``context_window``: the model's window (tokens, or a registered model name) for the
    ``over_window`` column; by default a compactor's ``context_length``, else the window
    registered for the manager's ``model``, else the one the thread's manager saved; unknown:
    ``over_window`` is None.
    """
    pd = require("pandas")

    if isinstance(thread, str):  # a thread id, opened in ``checkpointer`` (a str is a Sequence too)
        thread = await aas_thread(thread, checkpointer, what="simulate_compaction")
    msgs = _messages_of(thread)
    state = _state_of(thread)
    saved = saved_window(state) if state is not None else None
    schemas = _schemas(tools) if tools is not None else recorded_tools(state)
    ends = _call_points(msgs, state)
    probe_list = normalize_probes(probes)
    hits = _probe_hits(msgs, probe_list)
    labels = [label for label, _ in probe_list]
    cache: dict[int, _Sums] = {}

    def sums_for(counter: TokenCounter) -> _Sums:
        got = cache.get(id(counter))
        if got is None:
            got = cache[id(counter)] = _Sums(msgs, counter)
        return got

    named = _configs(configs, state)
    _check_summarizer(summarizer, [n for n, _ in named])
    rows: list[dict[str, Any]] = []
    for name, manager in named:
        counter = manager.counter if isinstance(manager, PlanningManager) else get_counter()
        label, served = summarizer_of(
            manager, _choice_for(name, summarizer), state, partial(length_summarizer, counter)
        )
        rows += await _simulate_one(
            name,
            manager,
            msgs,
            ends,
            schemas,
            sums_for,
            hits,
            labels,
            exact,
            context_window,
            saved=saved,
            used=label,
            served=served,
        )
    return pd.DataFrame(rows)


simulate_compaction = sync_twin(asimulate_compaction)


def _schemas(tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [t.schema() if hasattr(t, "schema") else dict(t) for t in tools]


def summarize_simulation(sim: pd.DataFrame, *, rank: bool = False) -> pd.DataFrame:
    """One row per config of a :func:`simulate_compaction` frame.

    Columns: ``config``, ``summarizer`` (who wrote its summaries: the distinct values of the
    frame's column, see :mod:`tulip_nb.lab._recorded`), ``calls``, ``compactions``, mean/max
    context tokens, ``tokens_saved`` (summed over calls) and ``saved_fraction``, ``facts_kept``
    (share of probe checks, after the fact was said, where it was still in view; NaN without
    probes), ``context_window`` (the window the calls were checked against; NA: unknown) and
    ``over_window_calls`` (calls that sent more than it; **NA when the window is unknown**, never
    0 — simulate with ``context_window=`` to know).

    ``rank=True``: best first — fewest calls over the window, then most facts kept, then fewest
    context tokens — with a ``rank`` column (1 = best). A config whose window is unknown cannot be
    ranked (it might send every call over it): :class:`UserError` naming ``context_window=``.
    """
    pd = require("pandas")

    probe_cols = [c for c in sim.columns if str(c).startswith("probe: ")]
    rows = []
    for name, g in sim.groupby("config", sort=False):
        full = float(g["full_tokens"].sum())
        ctx = float(g["context_tokens"].sum())
        checks = [v for c in probe_cols for v in g[c] if v is not None and v == v]
        known = [v for v in g["over_window"] if v is not None and v == v] if "over_window" in g else []
        windows = [int(w) for w in g["context_window"] if w is not None and w == w] if "context_window" in g else []
        used = [str(v) for v in dict.fromkeys(g["summarizer"]) if isinstance(v, str)] if "summarizer" in g else []
        rows.append(
            {
                "config": name,
                "summarizer": ", ".join(used) if used else None,
                "calls": len(g),
                "compactions": int(g["compacted"].sum()),
                "mean_context_tokens": float(g["context_tokens"].mean()),
                "max_context_tokens": int(g["context_tokens"].max()),
                "tokens_saved": int(full - ctx),
                "saved_fraction": (full - ctx) / full if full else 0.0,
                "facts_kept": (sum(bool(v) for v in checks) / len(checks)) if checks else float("nan"),
                "context_window": windows[0] if windows else pd.NA,
                "over_window_calls": sum(v is True for v in known) if known or not len(g) else pd.NA,
            }
        )
    out = pd.DataFrame(rows)
    for col in ("context_window", "over_window_calls"):
        if col in out:
            out[col] = out[col].astype("Int64")
    return _ranked(out) if rank else out


def _ranked(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` best first, with a ``rank`` column (see :func:`summarize_simulation`)."""
    unknown = [str(c) for c in summary.loc[summary["over_window_calls"].isna(), "config"]]
    if unknown:
        raise UserError(
            f"cannot rank configs whose model window is unknown ({unknown}): calls over the window are "
            "not counted for them, so a config that sends everything would look best; simulate with "
            "context_window=<the model's window in tokens, or a registered model name>"
        )
    facts = summary["facts_kept"].fillna(-1.0)
    order = (
        summary.assign(_f=-facts)
        .sort_values(["over_window_calls", "_f", "mean_context_tokens"], kind="stable")
        .drop(columns="_f")
    )
    order = order.reset_index(drop=True)
    order.insert(0, "rank", range(1, len(order) + 1))
    return order


def compaction_grid(
    thread: Thread | str | AgentState | Sequence[Message],
    *,
    checkpointer: BaseCheckpointer | str | None = None,
    context_length: int = 128_000,
    trigger_fractions: Sequence[float] = (0.6, 0.7, 0.8, 0.9, 0.95),
    tail_token_fractions: Sequence[float] = (0.2, 0.4),
    head_turns: int = 2,
    probes: Probes = (),
    tools: Sequence[Any] | None = None,
    summarizer: Summarizer = None,
    context_window: Window = None,
    rank: bool = False,
) -> pd.DataFrame:
    """Sweep LLMCompactor fractions: :func:`summarize_simulation` of every combination, plus the
    ``trigger_fraction`` and ``tail_token_fraction`` columns. ``summarizer``, ``context_window``:
    as for :func:`simulate_compaction` (by default each combination summarises as the thread
    did); ``rank=True`` sorts them best first (:func:`summarize_simulation`).

    A tail fraction near or above the trigger fraction compacts on every call (the kept tail alone
    crosses the trigger again): legal, but slow to simulate and rarely what you want.
    ``thread``: as for :func:`simulate_compaction` (a thread id needs ``checkpointer=``).
    """
    configs: dict[str, Any] = {}
    params: dict[str, tuple[float, float]] = {}
    for tf in trigger_fractions:
        for tail in tail_token_fractions:
            name = f"trigger {tf:g} / tail {tail:g}"
            configs[name] = LLMCompactor(
                context_length=context_length, trigger_fraction=tf, tail_token_fraction=tail, head_turns=head_turns
            )
            params[name] = (tf, tail)
    sim = simulate_compaction(
        thread,
        configs,
        checkpointer=checkpointer,
        probes=probes,
        tools=tools,
        summarizer=summarizer,
        context_window=context_window,
    )
    out = summarize_simulation(sim, rank=rank)
    at = list(out.columns).index("config") + 1
    out.insert(at, "trigger_fraction", [params[c][0] for c in out["config"]])
    out.insert(at + 1, "tail_token_fraction", [params[c][1] for c in out["config"]])
    return out
