"""What a messy thread is generated from: :class:`MessySpec`, and the summariser its threads run with.

The spec and :func:`keep_facts` sit below the planner (:mod:`tulip_nb.testing._messy_plan`), the
runner (:mod:`tulip_nb.testing._messy_run`) and the generator (:mod:`tulip_nb.testing._messy`),
which all read them; they are public as ``tulip_nb.testing.MessySpec`` and ``keep_facts``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.memory.conversation import ConversationManager, LLMCompactor, NullManager

__all__ = ["OUTCOME_RATES", "MessySpec", "keep_facts"]

OUTCOME_RATES = {
    "error": "error_rate",
    "context_exceeded": "context_rate",
    "max_iterations": "max_iterations_rate",
    "interrupted": "interrupt_rate",
    "tulip": "tulip_rate",
}
"""The spec field holding each failing outcome's per-turn probability."""

_FACT = re.compile(r"fact F\d+ = \d+")
_MIN_WINDOW_FOR_REPORTS = 8_000
"""A 30 kB report is ~5.9k tokens: with a smaller window its unit cannot be shown at all."""


# -- the summariser -----------------------------------------------------------------------------


def keep_facts(messages: Sequence[Message], previous_summary: str | None) -> str:
    """The messy threads' ``summarize_fn``: keeps every ``fact F<n> = <value>`` it has seen.

    Pure and module-level, so a simulator can re-import it by name and reproduce the record.

    >>> keep_facts([Message.user("T4: hi, fact F4 = 1234.")], "Facts: fact F0 = 77.")
    'Facts: fact F0 = 77; fact F4 = 1234.'
    """
    found = _FACT.findall(previous_summary or "")
    for m in messages:
        if m.content:
            found.extend(_FACT.findall(m.content))
    kept = list(dict.fromkeys(found))
    return "Facts: " + "; ".join(kept) + "." if kept else "Facts: none yet."


# -- the spec ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessySpec:
    """What to generate: the seed, the number of turns, how often each kind of turn happens.

    The ``*_rate`` outcome fields are per-turn probabilities (the rest of the turns are
    ``answered``; turn 0 always is, so the compactor's protected head stays small); they must sum
    to at most 1. ``resume_rate``: share of interrupts answered with ``agent.resume`` (the others
    stay pending). ``tool_error_rate``: share of ``query_metric`` calls that raise.
    ``big_output_rate``: share of tool-calling answered turns that fetch a 5-30 kB report (needs
    ``context_length >= 8000`` with the compactor). ``manager``: ``"compactor"``
    (``LLMCompactor(context_length, head_turns=1, summarize_fn=keep_facts)``) or ``"null"``.
    ``checkpoint_every`` and ``max_iterations`` go to the :class:`~tulip_nb.agent.Agent`.
    ``forks``: forks of the finished thread, each continued for ``fork_turns`` turns.
    ``tulip_deletes_iteration_saves``: a tulip turn also deletes the checkpoints named in
    ``state.metadata["_tulip_iteration_checkpoints"]``, as tulip does at a turn end.
    """

    seed: int = 0
    turns: int = 20
    error_rate: float = 0.05
    context_rate: float = 0.03
    max_iterations_rate: float = 0.03
    interrupt_rate: float = 0.05
    tulip_rate: float = 0.05
    resume_rate: float = 0.5
    tool_error_rate: float = 0.2
    big_output_rate: float = 0.1
    forks: int = 0
    fork_turns: int = 2
    manager: Literal["compactor", "null"] = "compactor"
    context_length: int = 8_000
    checkpoint_every: int | None = 1
    max_iterations: int = 4
    tulip_deletes_iteration_saves: bool = False

    def __post_init__(self) -> None:
        rates = {f: getattr(self, f) for f in OUTCOME_RATES.values()}
        for name in (*rates, "resume_rate", "tool_error_rate", "big_output_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise UserError(f"MessySpec.{name} must be a probability in [0, 1], got {value!r}")
        if sum(rates.values()) > 1.0 + 1e-9:
            raise UserError(f"MessySpec: the outcome rates sum to {sum(rates.values()):.3f}, more than 1: {rates}")
        for name, low in (("turns", 1), ("forks", 0), ("fork_turns", 1), ("max_iterations", 3)):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < low:
                raise UserError(f"MessySpec.{name} must be an int >= {low}, got {getattr(self, name)!r}")
        if self.manager not in ("compactor", "null"):
            raise UserError(f"MessySpec.manager must be 'compactor' or 'null', got {self.manager!r}")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise UserError(f"MessySpec.checkpoint_every must be None or >= 1, got {self.checkpoint_every!r}")
        if self.manager == "compactor" and self.big_output_rate > 0 and self.context_length < _MIN_WINDOW_FOR_REPORTS:
            raise UserError(
                f"MessySpec.context_length={self.context_length} cannot show a 30 kB report: use "
                f"context_length >= {_MIN_WINDOW_FOR_REPORTS} or big_output_rate=0"
            )
        if self.context_length < 1_000:
            raise UserError(f"MessySpec.context_length must be >= 1000, got {self.context_length}")

    def make_manager(self) -> ConversationManager:
        """A fresh conversation manager configured as the spec's threads run with."""
        if self.manager == "null":
            return NullManager()
        return LLMCompactor(context_length=self.context_length, head_turns=1, summarize_fn=keep_facts)
