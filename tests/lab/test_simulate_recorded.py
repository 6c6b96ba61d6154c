"""The simulator starts from what the thread ran (issue 25, items 3 and 4).

Simulating the recorded configuration reproduces the recorded compactions and the facts the model
saw exactly — with the summariser the config carries, the one re-imported from the thread's
record, or the thread's recorded summaries served by position — and says which one it used. An
unknown window is NA, never 0, and configs are not ranked without one.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.agent import Agent
from tulip_nb.core._messages import Message
from tulip_nb.core.errors import UserError
from tulip_nb.lab import Thread, open_thread, simulate_compaction, summarize_simulation
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor, NullManager
from tulip_nb.memory.conversation import compaction_events, model_views
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import tool


def keep_facts(messages: list[Message], previous: str | None) -> str:
    """A fact-keeping summariser (module level: the simulator can re-import it)."""
    lines = [line for line in (previous or "").splitlines() if "fact:" in line]
    for m in messages:
        lines += [line for line in (m.content or "").splitlines() if "fact:" in line]
    return "\n".join(dict.fromkeys(lines)) or "nothing yet"


@tool
def fetch_report(n: int, size: int = 60) -> str:
    """Fetch a report.

    Args:
        n: report number.
        size: filler lines.
    """
    return f"report {n}\nfact: code-{n:04d}\n" + "filler line of the report body. " * size


def _reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
    last = messages[-1]
    if last.role == "user":
        n, size = (int(v) for v in re.findall(r"\d+", last.content or "0 0")[:2])
        return tool_call("fetch_report", call_id=f"c{n}", n=n, size=size)
    return text("noted " + (last.content or "")[:16])


def _build(manager: Any, sizes: list[int]) -> Thread:
    cp = MemoryCheckpointer()
    agent = Agent(
        ScriptedModel(_reply),
        [fetch_report],
        system_prompt="You are an analyst.",
        checkpointer=cp,
        conversation_manager=manager,
        checkpoint_every_n_iterations=1,
    )
    for i, size in enumerate(sizes):
        agent.run_sync(f"Look at report {i} size {size}", thread_id="t")
    return open_thread(cp, "t")


def _probes(turns: int) -> list[tuple[str, str]]:
    return [(f"f{i}", f"fact: code-{i:04d}") for i in range(0, turns, 3)]


def _recorded_probes(t: Thread, probes: list[tuple[str, str]]) -> dict[str, list[bool | None]]:
    """Per probe and model call, from the views the agent actually sent (the record)."""
    state = t.state()
    msgs = state.messages
    calls = [j for j, m in enumerate(msgs) if m.role == "assistant"]
    out: dict[str, list[bool | None]] = {}
    for label, needle in probes:
        said = next((i for i, m in enumerate(msgs) if needle in (m.content or "")), None)
        out[label] = [
            None if said is None or said >= j else any(needle in (m.content or "") for m in view)
            for j, view in zip(calls, model_views(state), strict=True)
        ]
    return out


def _facts_kept(per_probe: dict[str, list[bool | None]]) -> float:
    checks = [v for col in per_probe.values() for v in col if v is not None]
    return sum(checks) / len(checks)


def _assert_reproduces(t: Thread, sim: pd.DataFrame, probes: list[tuple[str, str]]) -> None:
    events = compaction_events(t.state())
    fired = sim[sim["compacted"]]
    assert list(fired["call"]) == [e["call"] for e in events]
    assert list(fired["n_messages"]) == [e["n_messages"] for e in events]
    assert list(fired["tokens_after"]) == [e["tokens_after"] for e in events]
    record = _recorded_probes(t, probes)
    for label, _ in probes:
        got = [None if v is None else bool(v) for v in sim[f"probe: {label}"]]
        assert got == record[label], label


TOOLS = [fetch_report]
"""The tool schemas the agent sent (a thread does not record them; they count in every request)."""
SIZES = [40 + (i * 37) % 90 for i in range(60)]


@pytest.fixture(scope="module")
def facts_thread() -> Thread:
    return _build(LLMCompactor(context_length=6000, summarize_fn=keep_facts), SIZES)


def test_the_recorded_config_with_defaults_reproduces_the_record(facts_thread: Thread) -> None:
    """Bullet: defaults gave other compactions and 'facts kept 4 %' for a run that kept them all."""
    t, probes = facts_thread, _probes(len(SIZES))
    assert len(compaction_events(t.state())) > 10
    sim = simulate_compaction(
        t, {"as ran": LLMCompactor(context_length=6000, summarize_fn=keep_facts)}, probes=probes, tools=TOOLS
    )
    _assert_reproduces(t, sim, probes)
    assert set(sim["summarizer"]) == {"callable"}
    summary = summarize_simulation(sim).iloc[0]
    assert summary["facts_kept"] == _facts_kept(_recorded_probes(t, probes)) == 1.0
    assert summary["compactions"] == len(compaction_events(t.state())) and summary["summarizer"] == "callable"


def test_configs_none_is_the_thread_s_own_manager_and_summariser(facts_thread: Thread) -> None:
    """The thread saved its settings and its summariser's import path: nothing to pass."""
    t, probes = facts_thread, _probes(len(SIZES))
    sim = simulate_compaction(t, probes=probes, tools=TOOLS)
    assert set(sim["config"]) == {"recorded"} and set(sim["summarizer"]) == {"callable"}  # re-imported
    _assert_reproduces(t, sim, probes)
    # a config without a summariser (the tuner's sliders) gets the thread's, not none
    sliders = simulate_compaction(t, {"sliders": LLMCompactor(context_length=6000)}, probes=probes, tools=TOOLS)
    _assert_reproduces(t, sliders, probes)


def test_the_recorded_summaries_are_served_by_position(facts_thread: Thread) -> None:
    t, probes = facts_thread, _probes(len(SIZES))
    sim = simulate_compaction(
        t, {"as ran": LLMCompactor(context_length=6000)}, probes=probes, summarizer="recorded", tools=TOOLS
    )
    _assert_reproduces(t, sim, probes)
    assert set(sim["summarizer"]) == {"recorded"}
    # another config compacts elsewhere: the newest summary recorded before stands in, and says so
    other = simulate_compaction(t, {"5k": LLMCompactor(context_length=5000)}, summarizer="recorded")
    assert "recorded (earlier)" in set(other.loc[other["compacted"], "summarizer"])


def test_the_length_model_is_an_explicit_labelled_choice(facts_thread: Thread) -> None:
    t, probes = facts_thread, _probes(len(SIZES))
    sim = simulate_compaction(
        t,
        {"as ran": LLMCompactor(context_length=6000, summarize_fn=keep_facts)},
        probes=probes,
        summarizer="length",
        tools=TOOLS,
    )
    assert set(sim["summarizer"]) == {"length"} and summarize_simulation(sim).iloc[0]["summarizer"] == "length"
    assert summarize_simulation(sim).iloc[0]["facts_kept"] < 1.0  # the stand-in keeps no facts
    none = simulate_compaction(t, {"drop": LLMCompactor(context_length=6000)}, summarizer="none")
    assert set(none["summarizer"]) == {"none"} and (none["summary_tokens"] == 0).all()
    with pytest.raises(UserError, match="summarizer="):
        simulate_compaction(t, {"x": LLMCompactor(context_length=6000)}, summarizer="magic")
    with pytest.raises(UserError, match="not simulated"):
        simulate_compaction(t, {"x": LLMCompactor(context_length=6000)}, summarizer={"y": "length"})


def test_a_lambda_summariser_falls_back_to_the_recorded_summaries() -> None:
    sizes = SIZES[:30]
    t = _build(LLMCompactor(context_length=5000, summarize_fn=lambda m, p: keep_facts(m, p)), sizes)
    probes = _probes(len(sizes))
    sim = simulate_compaction(t, probes=probes, tools=TOOLS)  # its settings were saved; the lambda cannot be imported
    assert set(sim["summarizer"]) == {"recorded"}
    _assert_reproduces(t, sim, probes)


def test_an_unknown_window_is_na_and_ranking_needs_one(facts_thread: Thread) -> None:
    """Bullet: the null manager far over a 6k model counted 0 calls over the window and ranked best."""
    t = facts_thread
    configs = {"null": NullManager(), "as ran": LLMCompactor(context_length=6000, summarize_fn=keep_facts)}
    # the thread saved its window (6000): the null manager is measured against it
    sim = simulate_compaction(t, configs, tools=TOOLS)
    by = summarize_simulation(sim).set_index("config")
    over = int((sim.loc[sim["config"] == "null", "context_tokens"] > 6000).sum())
    assert by.loc["null", "over_window_calls"] == over > 0 and by.loc["null", "context_window"] == 6000
    ranked = summarize_simulation(sim, rank=True)
    assert list(ranked["config"]) == ["as ran", "null"] and list(ranked["rank"]) == [1, 2]
    # bare messages: nothing saved, the window is unknown -> NA, never 0; ranking refused
    bare = summarize_simulation(simulate_compaction(t.final_messages, {"null": NullManager()}))
    assert bare["over_window_calls"].isna().all()
    with pytest.raises(UserError, match="context_window="):
        summarize_simulation(simulate_compaction(t.final_messages, {"null": NullManager()}), rank=True)
    given_window = summarize_simulation(
        simulate_compaction(t.final_messages, {"null": NullManager()}, context_window=6000, tools=TOOLS)
    )
    assert given_window["over_window_calls"].iloc[0] == over


# -- property: generated threads ---------------------------------------------------------------


def _closure_summarizer() -> Any:
    def summarise(messages: list[Message], previous: str | None) -> str:  # nested: not importable
        return keep_facts(messages, previous)

    return summarise


@settings(max_examples=examples(0.06), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(5, 160), min_size=6, max_size=22),
    context_length=st.sampled_from([2500, 3500, 5000]),
    trigger=st.sampled_from([0.6, 0.8, 1.0]),
    tail=st.sampled_from([0.2, 0.4]),
    head=st.integers(0, 2),
    ttl=st.integers(0, 4),
    importable=st.booleans(),
)
def test_simulating_the_recorded_config_reproduces_the_record(
    sizes: list[int], context_length: int, trigger: float, tail: float, head: int, ttl: int, importable: bool
) -> None:
    fn = keep_facts if importable else _closure_summarizer()
    manager = LLMCompactor(
        context_length=context_length,
        trigger_fraction=trigger,
        tail_token_fraction=tail,
        head_turns=head,
        tool_output_ttl_turns=ttl,
        summarize_fn=fn,
    )
    t = _build(manager, sizes)
    probes = _probes(len(sizes))
    sim = simulate_compaction(t, probes=probes, tools=TOOLS)
    _assert_reproduces(t, sim, probes)
    assert set(sim["summarizer"]) == ({"callable"} if importable else {"recorded"})
