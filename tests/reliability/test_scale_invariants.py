"""Invariants of a whole agent run at research scale, on generated threads (hypothesis).

Each example runs a real :class:`~tulip_nb.Agent` (offline function model, an in-memory store) for
up to 320 turns of 0-3 tool rounds with 1-3 parallel calls, tool results of 0-50,000 characters,
and ids that are minted, reused by the "provider" (``call_0`` in every response), empty, or the
same for every call of a response. For every built-in conversation manager and a grid of
settings, it checks what the issue "correct on long threads" asks:

- every request the model was sent is a valid conversation (system first, each kept turn keeps its
  user message, every tool result right after its call, no call without its results);
- a token-aware manager never sends more than its window, or raises ``ContextWindowExceeded``
  before the model is called, with the state saved;
- every tool result is its own call's: an idempotent tool answers with the value for *its*
  arguments, a non-idempotent one with its own fresh result;
- ``Replay(thread).run_to()`` with no agent reports 0 divergences;
- what the model saw can be rebuilt from the saved thread (``Thread.model_view``), and the
  compaction simulator's per-call tokens equal the tokens of what the agent sent.

Hypothesis draws the shape (turns, id mode, sizes, manager) and a seed; the thread is generated
from the seed, so one example is one long thread. Derandomised, so CI runs the same examples.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb import Agent, tool
from tulip_nb.core._messages import Message, ToolCall
from tulip_nb.core.calls import answered_by, results_of
from tulip_nb.core.errors import ContextWindowExceeded
from tulip_nb.lab import Replay, open_thread, simulate_compaction
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import (
    LLMCompactor,
    NullManager,
    SlidingWindowManager,
    SummarizingConversationManager,
)
from tulip_nb.memory.managers import PlanningManager
from tulip_nb.models import ScriptedModel
from tulip_nb.tokens import get_counter

SIZES = (0, 1, 60, 400, 2_000, 8_000, 50_000)
KEYS = tuple(f"k{i}" for i in range(10))


def chars4(m: Message) -> int:
    """A fast deterministic counter: ~4 characters a token, plus the per-message overhead."""
    n = len(m.content or "") + sum(len(c.name) + len(str(c.arguments)) for c in m.tool_calls)
    return n // 4 + 4


@dataclass
class Shape:
    seed: int
    turns: int
    id_mode: str  # minted | call_0 | empty | same
    big: bool  # whether the 50,000-character results can appear
    script: list[list[list[tuple[str, str]]]] = field(default_factory=list)  # turn -> rounds -> calls

    def build(self) -> Shape:
        r = random.Random(self.seed)
        for _ in range(self.turns):
            rounds = [
                [(r.choice(("lookup", "fetch")), r.choice(KEYS)) for _ in range(r.choice((1, 1, 2, 3)))]
                for _ in range(r.choice((0, 1, 1, 2, 3)))
            ]
            self.script.append(rounds)
        return self


def size_of(key: str, big: bool) -> int:
    pool = SIZES if big else SIZES[:-1]
    return pool[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(pool)]


def lookup_value(key: str, big: bool) -> str:
    n = size_of(key, big)
    return f"value of {key}: " + ("abcd " * (n // 5 + 1))[:n]


TURN = re.compile(r"^T(\d+) ")
ROUND = re.compile(r"^t(\d+) r(\d+)$")


def make_agent(shape: Shape, manager: Any, cp: MemoryCheckpointer) -> tuple[Agent, ScriptedModel, dict[str, int]]:
    fetched = {"n": 0}

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Look a key up (the same value every time)."""
        return lookup_value(key, shape.big)

    @tool
    def fetch(key: str) -> str:
        """Fetch a key's latest log (different every time)."""
        fetched["n"] += 1
        return f"fetch #{fetched['n']} of {key}"

    def ident(k: int) -> str:
        return {"call_0": f"call_{k}", "empty": "", "same": "dup"}.get(shape.id_mode, "")

    def reply(messages: list[Message], tools: Any) -> Message:
        last = next(m for m in reversed(messages) if m.role in ("user", "assistant"))
        done = ROUND.match(last.content or "") if last.role == "assistant" else None
        if done:
            t = int(done.group(1))
        else:
            opened = TURN.match(last.content or "")
            assert opened, f"the model cannot tell which turn this is: {last.content!r}"
            t = int(opened.group(1))
        r = int(done.group(2)) + 1 if done else 0
        rounds = shape.script[t]
        if r >= len(rounds):
            return Message.assistant(f"answer to T{t}")
        calls = [ToolCall(id=ident(k), name=name, arguments={"key": key}) for k, (name, key) in enumerate(rounds[r])]
        return Message.assistant(f"t{t} r{r}", calls)

    model = ScriptedModel(reply)
    agent = Agent(
        model,
        [lookup, fetch],
        system_prompt="You work through numbered turns.",
        checkpointer=cp,
        conversation_manager=manager,
        max_iterations=10,
    )
    return agent, model, fetched


def window_of(manager: Any) -> int | None:
    if isinstance(manager, LLMCompactor):
        return manager.context_length
    if isinstance(manager, SummarizingConversationManager):
        return manager.context_length
    return None


def assert_valid_view(view: list[Message], history: list[Message], where: str) -> None:
    """The checks of a valid conversation, by position (see the module docstring)."""
    if history and history[0].role == "system":
        assert view and view[0] == history[0], f"{where}: system prompt not first"
    pairs = answered_by(view)
    for j, m in enumerate(view):
        if m.role == "tool":
            assert pairs[j] is not None, f"{where}: tool result at view[{j}] answers no call before it"
        if m.role == "assistant" and m.tool_calls:
            missing = [k for k, t in enumerate(results_of(view, j)) if t is None]
            assert not missing, f"{where}: calls {missing} of view[{j}] have no result"
    # A kept turn keeps its user message (a summary, a user message too, may stand for it).
    pos = {id(m): i for i, m in enumerate(history)}
    opener = []
    current = None
    for i, m in enumerate(history):
        if m.role == "user":
            current = i
        opener.append(current)
    shown = {pos[id(m)] for m in view if id(m) in pos}
    summary_seen = False
    for m in view:
        if m.metadata.get("tulip_compaction_summary"):
            summary_seen = True
            continue
        i = pos.get(id(m))
        if i is None or m.role in ("system", "user"):
            continue
        o = opener[i]
        assert o is None or o in shown or summary_seen, f"{where}: history[{i}] kept without its user message"


def check_results(messages: list[Message], shape: Shape, where: str) -> None:
    """Every tool result is its own call's (paired by position)."""
    for i, m in enumerate(messages):
        if m.role != "assistant" or not m.tool_calls:
            continue
        for k, t in enumerate(results_of(messages, i)):
            call = m.tool_calls[k]
            assert t is not None, f"{where}: call ({i}, {k}) unanswered"
            got = messages[t].content or ""
            key = call.arguments["key"]
            if call.name == "lookup":
                assert got == lookup_value(key, shape.big), f"{where}: lookup({key}) at ({i}, {k}) got {got[:40]!r}"
            else:
                assert got.startswith("fetch #") and got.endswith(f" of {key}"), f"{where}: fetch({key}) got {got!r}"


MANAGERS = st.one_of(
    st.builds(
        lambda cl, tf, ht, tail, ttl, summ: LLMCompactor(
            context_length=cl,
            trigger_fraction=tf,
            head_turns=ht,
            tail_token_fraction=tail,
            tool_output_ttl_turns=ttl,
            summarize_fn=(lambda msgs, prev: f"summary of {len(msgs)} messages") if summ else None,
            token_counter=chars4,
        ),
        st.sampled_from((2_000, 6_000, 24_000)),
        st.sampled_from((0.5, 0.8, 1.0)),
        st.sampled_from((0, 1, 2)),
        st.sampled_from((0.2, 0.5)),
        st.sampled_from((0, 3, 10)),
        st.booleans(),
    ),
    st.builds(lambda w: SlidingWindowManager(window_size=w, token_counter=chars4), st.sampled_from((1, 5, 40))),
    st.builds(
        lambda cl: SummarizingConversationManager(
            summarizer=lambda msgs, prev: f"summary of {len(msgs)} messages",
            context_length=cl,
            preserve_recent_messages=4,
            token_counter=chars4,
        ),
        st.sampled_from((None, 6_000, 24_000)),
    ),
    st.just(NullManager()),
)


def run_thread(shape: Shape, manager: Any) -> tuple[MemoryCheckpointer, str, ScriptedModel, int | None]:
    cp = MemoryCheckpointer()
    agent, model, _ = make_agent(shape, manager, cp)
    tid = f"scale-{shape.seed}"
    raised_at = None
    for t in range(shape.turns):
        try:
            agent.run_sync(f"T{t} please work on turn {t}.", thread_id=tid)
        except ContextWindowExceeded as e:
            raised_at = t
            assert e.window is not None and e.tokens_needed is not None and e.tokens_needed > e.window
            saved = asyncio.run(cp.load(tid))
            prompt = f"T{t} please work on turn {t}."
            assert saved is not None and [m.content for m in saved.messages if m.role == "user"][-1] == prompt
            assert any("ContextWindowExceeded" in err for err in saved.errors), "the raise saved the state"
            break
    return cp, tid, model, raised_at


@settings(
    max_examples=examples(0.2),
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    seed=st.integers(0, 10**6),
    turns=st.sampled_from((3, 40, 120, 320)),
    id_mode=st.sampled_from(("minted", "call_0", "empty", "same")),
    big=st.booleans(),
    manager=MANAGERS,
)
def test_long_run_invariants(seed: int, turns: int, id_mode: str, big: bool, manager: Any) -> None:
    check_run(Shape(seed, turns, id_mode, big).build(), manager)


def _summary(msgs: list[Message], prev: str | None) -> str:
    return f"summary of {len(msgs)} messages"


GRID = [
    ("compactor 2k", lambda: LLMCompactor(context_length=2_000, token_counter=chars4), True),
    (
        "compactor 6k ttl 3 summary",
        lambda: LLMCompactor(6_000, 0.8, 1, 0.2, _summary, tool_output_ttl_turns=3, token_counter=chars4),
        True,
    ),
    ("compactor 24k trigger 1.0", lambda: LLMCompactor(24_000, 1.0, 0, 0.5, token_counter=chars4), True),
    ("compactor 24k", lambda: LLMCompactor(24_000, token_counter=chars4), False),
    ("window 1", lambda: SlidingWindowManager(window_size=1, token_counter=chars4), True),
    ("window 40", lambda: SlidingWindowManager(window_size=40, token_counter=chars4), False),
    ("summarizing", lambda: SummarizingConversationManager(summarizer=_summary, token_counter=chars4), True),
    (
        "summarizing 6k",
        lambda: SummarizingConversationManager(
            summarizer=_summary, context_length=6_000, preserve_recent_messages=4, token_counter=chars4
        ),
        False,
    ),
    ("null", NullManager, False),
]


@pytest.mark.parametrize(("name", "make", "big"), GRID, ids=[g[0] for g in GRID])
def test_research_scale_grid(name: str, make: Any, big: bool) -> None:
    """Every built-in manager on one 320-turn thread each (ids cycle through the four modes)."""
    mode = ("minted", "call_0", "empty", "same")[[g[0] for g in GRID].index(name) % 4]
    check_run(Shape(7, 320, mode, big).build(), make())


def check_run(shape: Shape, manager: Any) -> None:
    turns, id_mode = shape.turns, shape.id_mode
    cp, tid, model, raised_at = run_thread(shape, manager)
    window = window_of(manager)
    thread = open_thread(cp, tid)
    history = thread.final_messages
    where = f"{manager!r}, {turns} turns, ids {id_mode}"
    # 1. every request valid and (token-aware managers) within the window
    assistants = [i for i, m in enumerate(history) if m.role == "assistant"]
    assert len(assistants) == len(model.requests), f"{where}: a model call left no assistant message"
    counter = manager.counter if isinstance(manager, PlanningManager) else get_counter()
    for k, (request, tools) in enumerate(model.requests):
        assert_valid_view(request, history, f"{where}, call {k}")
        if window is not None:
            sent = counter.count_request(request, tools)
            assert sent <= window, f"{where}, call {k}: sent {sent} tokens over a window of {window}"
    # 2. every result is its own call's; ids were sent back exactly as issued
    check_results(history, shape, where)
    if id_mode == "call_0":
        assert all(c.id == f"call_{k}" for m in history for k, c in enumerate(m.tool_calls)), where
    # 3. replay with no agent: faithful
    replay = Replay(thread)
    replay.run_to()
    assert len(replay.divergences) == 0, f"{where}: {replay.divergences.head(3).to_dict('records')}"
    # 4. what the model saw, rebuilt from the thread, and the simulator's tokens
    for k in (0, len(assistants) // 2, len(assistants) - 1) if assistants else ():
        assert thread.model_view(k) == model.requests[k][0], f"{where}: model_view({k}) differs from the request"
    if isinstance(manager, LLMCompactor | SlidingWindowManager | NullManager) and assistants:
        sim = simulate_compaction(thread, {"same": manager}, tools=list(model.requests[0][1]), summarizer="config")
        sent = [counter.count_request(req, tools) for req, tools in model.requests]
        assert list(sim["context_tokens"]) == sent, f"{where}: simulator tokens differ from what was sent"
    if raised_at is not None:
        assert window is not None, f"{where}: only a token-aware manager raises"
