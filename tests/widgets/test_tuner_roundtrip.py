"""CompactionTuner starts from what the thread ran, has every LLMCompactor setting and a
summariser choice, and "Copy config" builds a manager equal to the one the sliders show."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tulip_nb.agent import Agent
from tulip_nb.core._messages import Message
from tulip_nb.core.errors import UserError
from tulip_nb.lab import Thread, open_thread
from tulip_nb.lab.controllers import TunerController
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import tool
from tulip_nb.widgets import CompactionTuner


def keep_facts(messages: list[Message], previous: str | None) -> str:
    """A fact-keeping summariser, importable by path."""
    lines = [line for line in (previous or "").splitlines() if "fact:" in line]
    for m in messages:
        lines += [line for line in (m.content or "").splitlines() if "fact:" in line]
    return "\n".join(dict.fromkeys(lines)) or "nothing yet"


@tool
def fetch_report(n: int) -> str:
    """Fetch a report.

    Args:
        n: report number.
    """
    return f"report {n}\nfact: code-{n:04d}\n" + "filler line of the report body. " * 80


def _reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
    last = messages[-1]
    if last.role == "user":
        return tool_call("fetch_report", call_id="c", n=int(re.findall(r"\d+", last.content or "0")[0]))
    return text("noted")


def _thread(fn: Any) -> Thread:
    cp = MemoryCheckpointer()
    manager = LLMCompactor(
        context_length=4000, trigger_fraction=0.7, head_turns=1, tool_output_ttl_turns=3, summarize_fn=fn
    )
    agent = Agent(ScriptedModel(_reply), [fetch_report], checkpointer=cp, conversation_manager=manager)
    for i in range(24):
        agent.run_sync(f"Look at report {i}", thread_id="t")
    return open_thread(cp, "t")


def _settings(m: Any) -> dict[str, Any]:
    """What makes two managers the same agent behaviour (the summariser by identity)."""
    keys = ("context_length", "trigger_fraction", "head_turns", "tail_token_fraction", "tool_output_ttl_turns", "model")
    out = {k: getattr(m, k, None) for k in keys}
    out["type"] = type(m).__name__
    out["summarize_fn"] = id(getattr(m, "summarize_fn", None))
    return out


def _build(code: str) -> Any:
    """Run pasted config code: its import lines, then its expression."""
    *imports, expr = code.splitlines()
    ns: dict[str, Any] = {}
    exec("from tulip_nb.memory.compactor import LLMCompactor, SlidingWindowManager\n" + "\n".join(imports), ns)
    return eval(expr, ns)


def test_copy_config_round_trips_with_an_importable_summariser() -> None:
    t = _thread(keep_facts)
    w = CompactionTuner(t, probes=[("first", "fact: code-0000")])
    c = w.controller
    # it starts from what the thread ran: its settings and its summariser, re-imported
    assert (w.context_length.value, w.trigger_fraction.value, w.head_turns.value) == (4000, 0.7, 1)
    assert w.tool_output_ttl_turns.value == 3 and w.summarizer.value == "callable"
    assert c.summarize_fn is keep_facts and set(c.sim["summarizer"]) == {"callable"}  # type: ignore[index]
    code = w.copy_config()
    assert f"from {__name__} import keep_facts" in code and "summarize_fn=keep_facts" in code
    assert _settings(_build(code)) == _settings(c.manager())
    # every setting moves the manager and the copied code follows
    w.tool_output_ttl_turns.value = 0
    w.trigger_fraction.value = 0.9
    w.debouncer.flush()
    assert c.settings["tool_output_ttl_turns"] == 0 and "tool_output_ttl_turns=0" in w.config.value
    assert _settings(_build(w.copy_config())) == _settings(c.manager())
    # dropping the summariser is a choice the code says (no summarize_fn), and still round-trips
    w.summarizer.value = "none"
    w.debouncer.flush()
    assert "summarize_fn" not in w.copy_config() and c.manager().summarize_fn is None  # type: ignore[attr-defined]
    assert _settings(_build(w.copy_config())) == _settings(c.manager())
    assert "the middle is dropped" in w.summary.value


def test_a_summariser_that_cannot_be_imported_is_said_not_dropped() -> None:
    t = _thread(lambda m, p: keep_facts(m, p))
    c = TunerController(t)
    assert c.settings["summarizer"] == "recorded" and set(c.sim["summarizer"]) == {"recorded"}  # type: ignore[index]
    code = c.config_code()
    assert "cannot be imported" in code and "<lambda>" in code
    with pytest.raises(NameError):  # pasting it fails loudly instead of building another agent
        _build(code)
    # the length model: simulated, labelled, and the code says it is a stand-in
    c.update(summarizer="length")
    assert set(c.sim["summarizer"]) == {"length"} and "length model" in c.config_code()  # type: ignore[index]
    with pytest.raises(NameError):
        _build(c.config_code())
    # your own function: used, and named by its import path
    mine = TunerController(t, summarize_fn=keep_facts)
    assert mine.settings["summarizer"] == "callable"
    assert _settings(_build(mine.config_code())) == _settings(mine.manager())
    with pytest.raises(UserError, match="summarizer="):
        TunerController(t.final_messages, summarizer="recorded")
