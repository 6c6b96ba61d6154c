"""What a saved thread ran with: its manager's settings, its summariser, the summaries it wrote.

The compaction simulator and the tuner start from what the thread ran (decision 12). A
token-aware manager saves, with every checkpoint, its settings (``"config"`` in the manager state:
the keys of a lab config dict) and its summariser's import path (``"summarizer"``:
``{"module", "qualname"}``); every compaction event keeps the summary it showed. From those, for
each config simulated, the summariser is chosen by ``summarizer=`` (:data:`SUMMARIZERS`):

- ``"auto"`` (the default): the config's own summariser when it carries one (a manager passed with
  its ``summarize_fn``), else the thread's, re-imported from its recorded path, else the
  thread's **recorded summaries served by position** (:class:`RecordedSummaries`), else none (an
  :class:`~tulip_nb.memory.compactor.LLMCompactor` then drops the middle, as the thread did);
- ``"config"``: exactly what the config carries (none: the middle is dropped);
- ``"recorded"``: the recorded summaries, whatever the config carries;
- ``"length"``: the length model (:func:`~tulip_nb.lab.simulate.length_summarizer`; keeps no
  facts);
- ``"none"``: no summariser;
- a function ``(messages, previous_summary) -> str``: that one.

The simulator's ``summarizer`` column says which one wrote each config's summaries:
``"callable"`` (a function ran), ``"recorded"`` (the summary the thread recorded for that very
compaction), ``"recorded (earlier)"`` (no summary was recorded there: the newest one recorded
before it stood in), ``"length"``, ``"none"``; None for a manager that never summarises.
"""

from __future__ import annotations

import importlib
from bisect import bisect_right
from collections.abc import Callable, Mapping
from typing import Any

from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.core.state import AgentState
from tulip_nb.memory.conversation import (
    STATE_KEY,
    ConversationManager,
    LLMCompactor,
    Plan,
    SummarizingConversationManager,
    compaction_events,
)
from tulip_nb.memory.conversation.plan import fingerprint

__all__ = [
    "SUMMARIZERS",
    "RecordedSummaries",
    "check_choice",
    "import_path",
    "import_summarizer",
    "recorded_config",
    "recorded_summarizer_ref",
    "summarizer_note",
    "summarizer_of",
]

SUMMARIZERS = ("auto", "config", "recorded", "length", "none")
"""The named ``summarizer=`` choices (a function is the other one)."""

Summarize = Callable[[list[Message], str | None], Any]


def _manager_state(state: AgentState | None) -> dict[str, Any]:
    saved = state.metadata.get(STATE_KEY) if state is not None else None
    return saved if isinstance(saved, dict) else {}


def recorded_config(state: AgentState | None) -> dict[str, Any] | None:
    """The settings the thread's manager saved (``{"kind": "compactor", "context_length": ...}``,
    the form :func:`~tulip_nb.lab.simulate_compaction` takes), or None (none saved: a thread run
    with a manager that saves none, or by tulip)."""
    config = _manager_state(state).get("config")
    return dict(config) if isinstance(config, dict) and isinstance(config.get("kind"), str) else None


def recorded_tools(state: AgentState | None) -> list[dict[str, Any]] | None:
    """The tool schemas the agent sent with its requests, as its manager saved them (``"tools"``),
    or None (none saved: no tools, a manager that saves none, an older tulip_nb, tulip)."""
    tools = _manager_state(state).get("tools")
    if isinstance(tools, list) and tools and all(isinstance(t, dict) for t in tools):
        return [dict(t) for t in tools]
    return None


def recorded_summarizer_ref(state: AgentState | None) -> dict[str, str] | None:
    """The summariser's import path the thread's manager saved (``{"module", "qualname"}``), or None."""
    ref = _manager_state(state).get("summarizer")
    if isinstance(ref, dict) and isinstance(ref.get("module"), str) and isinstance(ref.get("qualname"), str):
        return {"module": ref["module"], "qualname": ref["qualname"]}
    return None


# Modules a recorded summariser may name that moved since it was recorded (issue 31 made the messy
# generator's module private; threads generated before name ``tulip_nb.testing._messy.keep_facts``).
_MOVED = {"tulip_nb.testing._messy": "tulip_nb.testing"}


def import_summarizer(ref: Mapping[str, str] | None) -> Summarize | None:
    """The function at ``ref`` (``{"module", "qualname"}``), or None when it cannot be imported
    (a lambda, a nested function, a module that is not installed here)."""
    if not ref or "<" in ref.get("qualname", "<"):
        return None
    try:
        obj: Any = importlib.import_module(_MOVED.get(ref["module"], ref["module"]))
        for part in ref["qualname"].split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return obj if callable(obj) else None


def import_path(fn: Any) -> tuple[str, str] | None:
    """``(module, qualname)`` that imports ``fn`` itself again, or None (a lambda, a closure)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    return (module, qualname) if import_summarizer({"module": module, "qualname": qualname}) is fn else None


class RecordedSummaries:
    """A summariser that serves the summaries a thread recorded, by position.

    Each compaction event of the thread keeps the summary it showed and the history length it was
    made on. Asked for a summary while the simulator is at history length ``at`` (it sets
    :attr:`at` before each call), it returns the summary recorded at that very length
    (:attr:`last_source` ``"recorded"``), so simulating the recorded configuration reproduces
    the recorded compactions exactly; elsewhere, the newest summary recorded before it
    (``"recorded (earlier)"``: what the thread's summariser had written by then), and before the
    first one the length model's text (``"length"``). It calls no model.
    """

    def __init__(self, state: AgentState, fallback: Summarize) -> None:
        msgs = state.messages
        by_n: dict[int, str] = {}
        for event in compaction_events(state):
            raw = event.get("plan")
            try:
                plan = Plan.from_json(raw) if raw else None
            except (KeyError, TypeError, ValueError):
                continue
            if plan is None or plan.summary is None or plan.n > len(msgs) or plan.fp != fingerprint(msgs, plan.n):
                continue  # not this history's (a fork's source past the branch point) or no summary
            by_n[plan.n] = plan.summary
        self._ns = sorted(by_n)
        self._texts = [by_n[n] for n in self._ns]
        self._fallback = fallback
        self.at: int | None = None
        """The history length of the call being simulated."""
        self.last_source: str | None = None
        """Where the last summary served came from (see the class docstring)."""

    def __len__(self) -> int:
        return len(self._ns)

    def __call__(self, messages: list[Message], previous: str | None) -> str:
        at = self.at if self.at is not None else 0
        k = bisect_right(self._ns, at)
        if k and self._ns[k - 1] == at:
            self.last_source = "recorded"
            return self._texts[k - 1]
        if k:
            self.last_source = "recorded (earlier)"
            return self._texts[k - 1]
        self.last_source = "length"
        return str(self._fallback(messages, previous))


def _summarises(manager: ConversationManager) -> bool:
    return isinstance(manager, (LLMCompactor, SummarizingConversationManager))


def _own(manager: ConversationManager) -> Any:
    if isinstance(manager, LLMCompactor):
        return manager.summarize_fn
    if isinstance(manager, SummarizingConversationManager):
        return manager.summarizer
    return None


def _set(manager: ConversationManager, fn: Any) -> None:
    if isinstance(manager, LLMCompactor):
        manager.summarize_fn = fn
    elif isinstance(manager, SummarizingConversationManager):
        manager.summarizer = fn


def check_choice(where: str, choice: Any) -> None:
    """Raise :class:`UserError` unless ``choice`` is one of :data:`SUMMARIZERS`, None or a function."""
    if choice is None or callable(choice) or (isinstance(choice, str) and choice in SUMMARIZERS):
        return
    raise UserError(
        f"{where}: summarizer={choice!r} is not a choice; give one of {list(SUMMARIZERS)}, a function "
        "(messages, previous_summary) -> str, or {config name: choice}"
    )


def summarizer_of(
    manager: ConversationManager, choice: Any, state: AgentState | None, length: Callable[[], Summarize]
) -> tuple[str | None, RecordedSummaries | None]:
    """Give ``manager`` the summariser ``choice`` names (module docstring) and return its label
    (None: the manager never summarises) and the :class:`RecordedSummaries` it uses, if any.

    ``state``: the thread's latest state (None: only messages were given, nothing is recorded);
    ``length``: makes the length model.
    """
    if not _summarises(manager):
        return None, None
    choice = "auto" if choice is None else choice
    if callable(choice) and not isinstance(choice, str):
        _set(manager, choice)
        return "callable", None
    if choice == "config":
        own = _own(manager)
        if own is None and isinstance(manager, SummarizingConversationManager):
            raise UserError(
                "summarizer='config': this SummarizingConversationManager config has no summarizer=; "
                "give it one, or choose summarizer='recorded' or 'length'"
            )
        return ("callable" if own is not None else "none"), None
    if choice == "length":
        _set(manager, length())
        return "length", None
    if choice == "none":
        if isinstance(manager, SummarizingConversationManager):
            raise UserError("summarizer='none': a SummarizingConversationManager cannot run without a summariser")
        _set(manager, None)
        return "none", None
    if choice == "auto":
        if _own(manager) is not None:
            return "callable", None
        imported = import_summarizer(recorded_summarizer_ref(state))
        if imported is not None:
            _set(manager, imported)
            return "callable", None
    # "recorded", or "auto" without a function to run: the summaries the thread wrote
    served = RecordedSummaries(state, length()) if state is not None else None
    if served is not None and (len(served) or recorded_summarizer_ref(state) is not None):
        _set(manager, served)
        return "recorded", served
    if choice == "recorded":
        raise UserError(
            "summarizer='recorded': the thread recorded no summary (no compaction event of it shows one); "
            "choose summarizer='length' or pass a function"
        )
    if isinstance(manager, SummarizingConversationManager):  # it needs one to run at all
        _set(manager, length())
        return "length", None
    _set(manager, None)  # the thread summarised nothing: its middle was dropped
    return "none", None


def summarizer_note(frame: Any) -> str:
    """``" (summaries: length)"`` for a plot title when a simulated frame's summaries were not
    written by a summariser function (the recorded ones, the length model, none); else ``""``."""
    columns = getattr(frame, "columns", ())
    if "summarizer" not in columns or not len(frame):
        return ""
    used = [v for v in dict.fromkeys(frame["summarizer"]) if isinstance(v, str) and v != "callable"]
    return f" (summaries: {', '.join(used)})" if used else ""
