"""What sweeps share for live models: resumable branch ids, budgets, the tokens / cost / cached columns.

**Resumable.** A branch's thread id is ``<thread>-sweep-<12 hex>``, the hex a hash of what decides
the branch: the source thread, the checkpoint and message index it forks at, the variant's name
and a fingerprint of its spec (model name and settings, system prompt, edit, manager type and
settings, tool names) and of the base agent, and the prompt. Re-running the same sweep (after a
crash, a kernel restart, or just again) finds the branches already saved: a finished one
(its turn ``complete`` or ``interrupted``, with messages after the branch point) is **reused**
as it is, nothing runs; an unfinished one (the process died mid-run, or the run failed) is
deleted and run again from the fork, its model calls already made served by the response cache.

**Columns.** ``tokens`` and ``cost`` come from the branch's saved token counters (per turn: its
final state's, minus the fork point's when it continued the fork point's turn), so a reused row
equals the row of the run that made it; ``cost`` prices those tokens with the variant model's
price (:func:`~tulip_nb.models.pricing.model_cost`; NA when unknown). ``cached`` is True when
nothing was sent for the branch in this run (every model call a cache hit, or the branch reused).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from tulip_nb.agent import Agent
from tulip_nb.agent.events import Hooks, ModelCall
from tulip_nb.agent.turns import RUN_KEY
from tulip_nb.core import Message
from tulip_nb.core.calls import execution_position
from tulip_nb.core.state import AgentState
from tulip_nb.models import Usage
from tulip_nb.models.budget import Budget, BudgetExceeded, BudgetMeter, as_budget, metered
from tulip_nb.models.pricing import model_cost
from tulip_nb.tools import Tool

__all__ = [
    "SweepBudget",
    "Tally",
    "branch_id",
    "executions_after",
    "fingerprint",
    "finished",
    "live_columns",
    "saved_branch",
    "state_usage",
]

_SIMPLE = (str, int, float, bool, type(None))


def fingerprint(value: Any, depth: int = 0) -> Any:
    """A JSON description of a spec value that is the same in every process (no addresses).

    >>> fingerprint({"model": "openai:gpt-4o", "system_prompt": "Be terse.", "n": (1, 2)})
    {'model': 'openai:gpt-4o', 'n': [1, 2], 'system_prompt': 'Be terse.'}
    """
    if isinstance(value, _SIMPLE):
        return value
    if depth > 4:
        return type(value).__qualname__
    if isinstance(value, Message):
        return json.loads(value.json_bytes())
    if isinstance(value, Mapping):
        return {str(k): fingerprint(v, depth + 1) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [fingerprint(v, depth + 1) for v in value]
    if callable(getattr(value, "complete", None)):  # a model: what it is, never its counters
        inner = getattr(value, "model", None)
        return {
            "model": type(value).__qualname__,
            "name": getattr(value, "name", None),
            "params": fingerprint(getattr(value, "params", None), depth + 1),
            "epoch": getattr(value, "epoch", None),
            "base_url": url if isinstance(url := getattr(value, "base_url", None), str) else None,
            "inner": fingerprint(inner, depth + 1),
        }
    if isinstance(value, Tool):
        return {"tool": value.name, "fn": getattr(value.fn, "__qualname__", None)}
    if callable(value) and hasattr(value, "__qualname__"):
        return {"fn": f"{getattr(value, '__module__', '')}.{value.__qualname__}"}
    attrs = (
        {
            k: fingerprint(v, depth + 1)
            for k, v in sorted(vars(value).items())
            if not k.startswith("_") and (isinstance(v, (_SIMPLE, Mapping, list, tuple)))
        }
        if hasattr(value, "__dict__")
        else {}
    )
    return {"type": type(value).__qualname__, **attrs}


def _agent_fingerprint(agent: Agent | None) -> Any:
    if agent is None:
        return None
    return {
        "model": fingerprint(agent.model),
        "tools": sorted(agent.tools_by_name),
        "system_prompt": agent.system_prompt,
        "manager": type(agent.conversation_manager).__qualname__,
        "max_iterations": agent.max_iterations,
    }


def branch_id(
    thread_id: str,
    parent: str,
    index: int,
    name: str,
    spec: Mapping[str, Any],
    base: Agent | None,
    prompt: str | None,
) -> str:
    """The branch's thread id (see the module docstring)."""
    what = {
        "thread": thread_id,
        "parent": parent,
        "index": index,
        "variant": name,
        "spec": fingerprint(spec),
        "base": _agent_fingerprint(base),
        "prompt": prompt,
    }
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    return f"{thread_id}-sweep-{digest[:12]}"


async def saved_branch(checkpointer: Any, thread_id: str) -> AgentState | None:
    """The latest state of a branch thread, or None when it does not exist."""
    state: AgentState | None = await checkpointer.load(thread_id)
    return state


def finished(state: AgentState, fork_length: int) -> bool:
    """Whether a saved branch ran to the end of its turn (see the module docstring)."""
    status = (state.metadata.get(RUN_KEY) or {}).get("status")
    return status in ("complete", "interrupted") and len(state.messages) > fork_length


def state_usage(before: AgentState, after: AgentState) -> Usage:
    """The tokens a branch used, from its saved per-turn counters: the end state's when the branch
    ran a new turn (they start from 0 at a turn), else the end minus the fork point."""
    new_turn = any(m.role == "user" for m in after.messages[len(before.messages) :])
    fields = ("prompt_tokens_used", "completion_tokens_used", "total_tokens_used", "cached_tokens_used")
    values = [getattr(after, f) - (0 if new_turn else getattr(before, f)) for f in fields]
    return Usage(*values)


def live_columns(model: Any, before: AgentState, after: AgentState, tally: Tally | None) -> dict[str, Any]:
    """``tokens``, ``cost``, ``cached`` of a branch (``tally`` None: reused, nothing sent)."""
    usage = state_usage(before, after)
    return {
        "tokens": usage.total_tokens,
        "cost": model_cost(model, usage),
        "cached": True if tally is None else tally.sent == 0,
    }


def executions_after(before: AgentState, after: AgentState) -> list[str]:
    """Tool names of the executions the branch made (not in its fork-point state), in order."""
    old = {tuple(p) for ex in before.tool_executions if (p := execution_position(ex)) is not None}
    out = []
    for ex in after.tool_executions:
        pos = execution_position(ex)
        if pos is not None and tuple(pos) not in old:
            out.append(ex.tool_name)
    return out


class Tally(Hooks):
    """Counts a branch's model calls and those that were sent (not cache hits)."""

    def __init__(self) -> None:
        self.calls = 0
        self.sent = 0
        self._lock = threading.Lock()

    def on_model_call(self, event: ModelCall) -> None:
        with self._lock:
            self.calls += 1
            self.sent += event.usage.requests - event.usage.cache_hits if event.usage.requests else 1


class SweepBudget:
    """One sweep's budget: its meter, its models held to it, and how far the sweep got."""

    def __init__(self, budget: Budget | int | None) -> None:
        found = as_budget(budget)
        self.meter = BudgetMeter(found) if found is not None else None
        self.done = 0
        self.total = 0

    def hold(self, agent: Agent) -> Agent:
        """``agent`` with its model held to the budget (unchanged without one)."""
        if self.meter is not None:
            agent.model = metered(agent.model, self.meter)
        return agent

    @property
    def stopped(self) -> bool:
        return self.meter is not None and self.meter.refused > 0

    def progress(self) -> str:
        assert self.meter is not None
        spent = self.meter.spent
        cost = f"${spent.cost:.4f}" if spent.cost is not None else "cost unknown"
        return (
            f"budget of {self.meter.budget.describe()}: {spent.total_tokens:,} tokens ({cost}) spent; "
            f"{self.done} of {self.total} branches finished"
        )

    def not_run(self) -> str:
        return f"{BudgetExceeded.__name__}: not run, the sweep stopped at its {self.progress()}"

    def attrs(self) -> dict[str, Any]:
        """What ``frame.attrs["budget"]`` says (empty without a budget)."""
        if self.meter is None:
            return {}
        b, spent = self.meter.budget, self.meter.spent
        return {
            "tokens": b.tokens,
            "cost": b.cost,
            "spent_tokens": spent.total_tokens,
            "spent_cost": spent.cost,
            "stopped": self.stopped,
            "branches_finished": self.done,
            "branches": self.total,
            "summary": self.progress(),
        }
