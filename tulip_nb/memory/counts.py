"""Counters kept at save time: what a thread's newest header says about the whole thread.

A corpus summary wants, per thread, how many turns ended how, how many tool calls failed, how
many idempotent hits and interrupts the thread had. Computing that from states means loading the
latest state, and for the counts that span runs (idempotent hits live in each run's
``tool_executions``), one state per run: the cost grows with the thread. So every agent save that
ends a turn or stops it (``final``, ``error``, ``stopped``, ``interrupt``; also ``Agent.fork`` and
``update_state``) writes the thread's **counters** into its save metadata
(:data:`~tulip_nb.core.keys.COUNTS_KEY`), and a summary reads the newest header instead
(``tulip_nb.lab._corpus_rows``). Mid-turn ``iteration`` saves carry none: counting is a pass over
the messages, so it is paid once per turn, not at every model call (a 300-turn thread's 1,198
saves); a thread whose newest save is mid-turn (a run killed in its turn) is read from its state.

Two kinds of counters:

- **of the state** (:func:`state_counts`): turns by outcome, model calls, messages, tokens, tool
  calls, tool errors, compactions -- a function of the saved state alone, so they are right after
  any history edit or fork;
- **of the lineage** (:class:`Lineage`): interrupts (saves of kind ``interrupt``) and idempotent
  hits (distinct call positions answered from the record) over the thread's saves and, for a fork,
  its source's up to the branch point. Each save adds its own to its parent's; the parent's come
  from its header, or, when that header has none (a tulip save, a lab branch), from the nearest
  header that has them plus what the saves in between recorded (:func:`alineage`). ``None`` when
  nothing can tell (a thread started by another writer): then a summary reads that thread's states.

>>> from tulip_nb.core import AgentState
>>> from tulip_nb.core import Message
>>> state = AgentState(messages=[Message.user("hi"), Message.assistant("hello")])
>>> c = save_counts(state, Lineage.new(), "final")
>>> c["turns"], c["model_calls"], c["interrupts"], c["idempotent_hits"]
(1, 1, 0, 0)
>>> read_counts({COUNTS_KEY: c}) == c, read_counts({"source": "tulip"})
(True, None)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tulip_nb.core.calls import answered_by, execution_position
from tulip_nb.core.keys import COUNTS_KEY as COUNTS_KEY
from tulip_nb.core.keys import FORKED_FROM_KEY, MESSAGES_KEY, PARENT_KEY, RUN_ID_KEY, SOURCE_KEY
from tulip_nb.core.state import AgentState, ToolExecution
from tulip_nb.core.turns import FAILED_OUTCOMES, OUTCOMES, split_turns
from tulip_nb.memory.conversation import EVENTS_KEY, compaction_events, saved_token_counts
from tulip_nb.tokens import get_counter

if TYPE_CHECKING:
    from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, CheckpointInfo

__all__ = [
    "COUNTS_VERSION",
    "LINEAGE_COUNTS",
    "STATE_COUNTS",
    "Lineage",
    "alineage",
    "hit_keys",
    "read_counts",
    "save_counts",
    "state_counts",
]

COUNTS_VERSION = 1
STATE_COUNTS: tuple[str, ...] = (
    "turns",
    "failed_turns",
    *(f"turns_{o}" for o in OUTCOMES),
    "turns_unknown",
    "model_calls",
    "messages",
    "tokens",
    "tool_calls",
    "tool_errors",
    "compactions",
)
"""Counters that are a function of the saved state (plus ``has_events``: whether it records events)."""
LINEAGE_COUNTS: tuple[str, ...] = ("interrupts", "idempotent_hits")
"""Counters over the thread's saves (and a fork's source's up to the branch point); None: unknown.
With them, ``native``: whether every save of that lineage carries tulip_nb's message mark (a
tulip-written lineage has no interrupts or hits tulip_nb can vouch for)."""


def _is_error(content: str | None) -> bool:
    """Whether a tool result is the agent's record of a failed call (``"Error: <Type>: <msg>"``)."""
    return (content or "").startswith("Error:")


def state_counts(state: AgentState) -> dict[str, Any]:
    """The counters of ``state`` alone (:data:`STATE_COUNTS` and ``has_events``).

    Tokens are the default counter's (``tulip_nb.tokens.get_counter()``), reusing the counts the
    manager saved with the state, exactly as the lab counts a thread's full history.
    """
    msgs = state.messages
    counter = get_counter()
    known = saved_token_counts(state, counter) or []
    turns = split_turns(msgs, state.metadata)
    outcomes = Counter(t.outcome for t in turns)
    answers = answered_by(msgs)
    calls = tool_calls = errors = 0
    for m, a in zip(msgs, answers, strict=True):
        if m.role == "assistant":
            calls += 1
            tool_calls += len(m.tool_calls)
        elif a is not None and _is_error(m.content):
            errors += 1
    out: dict[str, Any] = {
        "turns": len(turns),
        "failed_turns": sum(outcomes[o] for o in FAILED_OUTCOMES),
        **{f"turns_{o}": outcomes[o] for o in OUTCOMES},
        "turns_unknown": outcomes[None],
        "model_calls": calls,
        "messages": len(msgs),
        "tokens": sum(known) + sum(counter.message_counts(msgs[len(known) :])),
        "tool_calls": tool_calls,
        "tool_errors": errors,
        "compactions": len(compaction_events(state)),
        "has_events": EVENTS_KEY in state.metadata,
    }
    return out


def hit_keys(executions: Iterable[ToolExecution]) -> frozenset[str]:
    """The identities of the idempotent cache hits among ``executions``: the call position
    (``"i:k"``), or tool, call id and time for an execution recorded without one."""
    keys = set()
    for ex in executions:
        if ex.idempotent_cache_hit:
            pos = execution_position(ex)
            keys.add(f"{pos[0]}:{pos[1]}" if pos is not None else f"{ex.tool_name}|{ex.tool_call_id}|{ex.timestamp}")
    return frozenset(keys)


@dataclass(frozen=True)
class Lineage:
    """The lineage counters as of one save, and the hits its state's executions hold (``seen``).

    :meth:`after` gives the counters of the next save: one more interrupt for an ``interrupt``
    save, plus the hits its state holds that the previous state did not (executions only grow
    within a turn and start empty in a new one, so that is exactly what the save adds)."""

    interrupts: int | None
    idempotent_hits: int | None
    seen: frozenset[str] = frozenset()
    native: bool = True

    @classmethod
    def new(cls) -> Lineage:
        """A new thread's: nothing counted yet."""
        return cls(0, 0)

    def after(self, state: AgentState, kind: str | None) -> Lineage:
        keys = hit_keys(state.tool_executions)
        interrupts = None if self.interrupts is None else self.interrupts + (kind == "interrupt")
        hits = None if self.idempotent_hits is None else self.idempotent_hits + len(keys - self.seen)
        return Lineage(interrupts, hits, keys, self.native)


def save_counts(state: AgentState, lineage: Lineage, kind: str | None) -> dict[str, Any]:
    """The :data:`COUNTS_KEY` value of saving ``state`` (kind ``kind``) after ``lineage``."""
    after = lineage.after(state, kind)
    return {
        "v": COUNTS_VERSION,
        **state_counts(state),
        "interrupts": after.interrupts,
        "idempotent_hits": after.idempotent_hits,
        "native": after.native,
    }


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_counts(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The counters a header carries, or None when it has none this version can read (every
    state counter a non-negative int, the lineage ones such an int or None)."""
    c = metadata.get(COUNTS_KEY)
    if not isinstance(c, Mapping) or c.get("v") != COUNTS_VERSION:
        return None
    if not isinstance(c.get("has_events"), bool) or not isinstance(c.get("native"), bool):
        return None
    if not all(_count(c.get(k)) for k in STATE_COUNTS):
        return None
    if not all(c.get(k) is None or _count(c.get(k)) for k in LINEAGE_COUNTS):
        return None
    return dict(c)


def _marked(metadata: Mapping[str, Any]) -> bool:
    return isinstance(metadata.get(MESSAGES_KEY), Mapping)


def _lineage_of(counts: Mapping[str, Any], seen: frozenset[str], *, marked: bool = True) -> Lineage:
    """The lineage a header's counters describe (``marked``: that header has tulip_nb's mark)."""
    return Lineage(counts.get("interrupts"), counts.get("idempotent_hits"), seen, bool(counts["native"]) and marked)


_UNKNOWN = Lineage(None, None)


async def _source_counts(cp: BaseCheckpointer, first: CheckpointInfo) -> dict[str, Any] | None:
    """A fork's first checkpoint: the counters of the source checkpoint it was cut from."""
    source, parent = first.metadata.get(FORKED_FROM_KEY), first.metadata.get(PARENT_KEY)
    if not isinstance(source, str) or not isinstance(parent, str):
        return None
    for info in await cp.list_checkpoint_infos(source, limit=None):
        if info.checkpoint_id == parent:
            return read_counts(info.metadata)
    return None


async def alineage(cp: BaseCheckpointer, thread_id: str, latest: Checkpoint | None) -> Lineage:
    """The lineage counters as of ``latest`` (the thread's newest checkpoint; None: a new thread).

    Read from its header; else, for a fork's first checkpoint, from its source checkpoint's; else
    from the nearest header that has them, plus the interrupts and hits of the saves after it (the
    last save of each run among them is loaded, one at a time). Unknown (None) when no header has
    them or a save in between is not tulip_nb's (no message mark)."""
    if latest is None:
        return Lineage.new()
    seen = hit_keys(latest.state.tool_executions)
    counts = read_counts(latest.metadata)
    if counts is not None:
        return _lineage_of(counts, seen, marked=_marked(latest.metadata))
    if not latest.metadata:  # a checkpointer that keeps no save metadata: no header can tell
        return _UNKNOWN
    infos = await cp.list_checkpoint_infos(thread_id, limit=None)
    newer: list[CheckpointInfo] = []
    base: CheckpointInfo | None = None
    for info in infos:
        if read_counts(info.metadata) is not None:
            base = info
            break
        newer.append(info)
    if base is None:
        if not newer or FORKED_FROM_KEY not in newer[-1].metadata:
            return _UNKNOWN
        base_counts = await _source_counts(cp, newer[-1])
        base_keys = hit_keys((await _state(cp, thread_id, newer[-1])).tool_executions)
    else:
        base_counts = read_counts(base.metadata)
        base_keys = hit_keys((await _state(cp, thread_id, base)).tool_executions)
    if base_counts is None or not all(_marked(i.metadata) for i in newer):
        return _UNKNOWN
    base_lineage = _lineage_of(base_counts, base_keys, marked=base is None or _marked(base.metadata))
    if base_lineage.interrupts is None or base_lineage.idempotent_hits is None:
        return _UNKNOWN
    last_of_run: dict[Any, CheckpointInfo] = {}
    for info in newer:  # newest first: the first seen of a run is its last save
        last_of_run.setdefault(info.metadata.get(RUN_ID_KEY) or info.checkpoint_id, info)
    keys: set[str] = set()
    for info in last_of_run.values():
        keys |= hit_keys((await _state(cp, thread_id, info)).tool_executions)
    interrupts = base_lineage.interrupts + sum(1 for i in newer if i.metadata.get(SOURCE_KEY) == "interrupt")
    return Lineage(interrupts, base_lineage.idempotent_hits + len(keys - base_keys), seen, base_lineage.native)


async def _state(cp: BaseCheckpointer, thread_id: str, info: CheckpointInfo) -> AgentState:
    from tulip_nb.core.errors import CheckpointNotFound

    ck = await cp.load_checkpoint(thread_id, info.checkpoint_id)
    if ck is None:
        raise CheckpointNotFound("checkpoint vanished while counting", thread_id=thread_id)
    return ck.state
