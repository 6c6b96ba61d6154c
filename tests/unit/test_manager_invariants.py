"""Every built-in manager, fed a long generated thread call by call as the agent does, sends a valid
conversation, and a token-aware one stays within its window or raises ContextWindowExceeded exactly
when what it must keep cannot fit.

The threads: up to 340 turns, 0-3 tool rounds per turn, 1-3 parallel calls per assistant message,
ids that are unique, restart at ``call_0`` in each response, are empty or all the same; tool results
of 0 to 50,000 characters; sometimes one message larger than any window. The counter is a fast
function (chars // 4 + 3) so the generated runs are quick; test_window_bound.py has the exact one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, ContextWindowExceeded, Message, ToolCall
from tulip_nb.core.calls import answered_by, block_end
from tulip_nb.memory.compactor import (
    EVENTS_KEY,
    LLMCompactor,
    NullManager,
    SlidingWindowManager,
    SummarizingConversationManager,
)
from tulip_nb.memory.conversation.plan import stub, summary_message
from tulip_nb.memory.managers import ConversationManager, PlanningManager
from tulip_nb.tokens import REPLY_PRIMING, FunctionCounter, TokenCounter

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the corpus.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]


def quick(m: Message) -> int:
    return len(m.content or "") // 4 + 3 + 6 * len(m.tool_calls)


def fast_counter() -> TokenCounter:
    return FunctionCounter(quick)


# -- generated threads ---------------------------------------------------------------------------


class Thread:
    """A generated history, what answers what (as generated), and where the model is called."""

    def __init__(self, messages: list[Message], answers: dict[int, tuple[int, int]], calls: list[int]) -> None:
        self.messages = messages
        self.answers = answers  # tool message -> (assistant index, call index)
        self.calls = calls  # history lengths at which the model is called (each assistant message)
        self.spec = ""
        self.turns = sum(m.role == "user" for m in messages)

    def __repr__(self) -> str:  # hypothesis prints failing examples: the recipe, not 100 kB of text
        return f"Thread({self.spec}: {len(self.messages)} messages)"


IDS = ("unique", "call_0", "empty", "same")


@st.composite
def threads(draw: st.DrawFn, max_turns: int = 340) -> Thread:
    turns = draw(st.one_of(st.integers(1, 8), st.integers(9, 60), st.integers(250, max_turns)))
    seed = draw(st.integers(0, 2**32 - 1))
    ids = draw(st.sampled_from(IDS))
    system = draw(st.sampled_from([None, 0, 200, 3000]))
    big = draw(st.sampled_from([None, "user", "tool", "assistant"]))
    thread = generate(random.Random(seed), turns, ids, system, big)
    thread.spec = f"generate(random.Random({seed}), {turns}, {ids!r}, {system}, {big!r})"
    return thread


def _size(rnd: random.Random, small: int) -> int:
    r = rnd.random()
    if r < 0.05:
        return 0
    if r < 0.9:
        return rnd.randint(1, small)
    if r < 0.98:
        return rnd.randint(small, 12_000)
    return rnd.randint(12_000, 50_000)


def generate(rnd: random.Random, turns: int, ids: str, system: int | None, big: str | None) -> Thread:
    msgs: list[Message] = [Message.system("s" * system)] if system is not None else []
    answers: dict[int, tuple[int, int]] = {}
    calls: list[int] = []
    big_turn = rnd.randrange(turns) if big else -1
    for t in range(turns):
        huge = 400_000 if t == big_turn else 0
        msgs.append(Message.user("u" * (huge if big == "user" else rnd.randint(1, 1500))))
        for r in range(rnd.choice((0, 0, 1, 1, 2, 3))):
            k = rnd.randint(1, 3)
            if ids == "unique":
                cids = [f"c{t}_{r}_{j}" for j in range(k)]
            elif ids == "call_0":
                cids = [f"call_{j}" for j in range(k)]
            elif ids == "empty":
                cids = [""] * k
            else:
                cids = ["call_0"] * k
            calls.append(len(msgs))
            i = len(msgs)
            text = "thinking " * rnd.randint(0, 20) or None
            msgs.append(
                Message.assistant(
                    text, [ToolCall(id=c, name="search", arguments={"q": f"{t}.{r}.{j}"}) for j, c in enumerate(cids)]
                )
            )
            order = list(range(k))
            if ids == "unique":
                rnd.shuffle(order)  # results in completion order: they pair by id
            for j in order:
                size = huge if big == "tool" and r == 0 and j == order[0] else _size(rnd, 3000)
                answers[len(msgs)] = (i, j)
                msgs.append(Message.tool("r" * size, tool_call_id=cids[j], name="search"))
        calls.append(len(msgs))
        msgs.append(Message.assistant("a" * (huge if big == "assistant" else rnd.randint(1, 1500))))
    return Thread(msgs, answers, calls)


# -- the checker ---------------------------------------------------------------------------------


class HistoryMaps:
    """What the checker needs to know of a history, built once (``extend`` adds new messages)."""

    def __init__(self) -> None:
        self.history: list[Message] = []
        self.where: dict[int, int] = {}  # id of a message, or of its stub, -> index
        self.turn_user: list[int | None] = []
        self.block: dict[int, int] = {}  # assistant with calls -> end of its block

    def extend(self, history: Sequence[Message]) -> None:
        start = len(self.history)
        assert list(history[:start]) == self.history, "the history was not extended"
        user = self.turn_user[-1] if self.turn_user else None
        for i in range(start, len(history)):
            m = history[i]
            self.history.append(m)
            self.where[id(m)] = i
            if m.role == "tool":
                self.where[id(stub(m))] = i
            if m.role == "user":
                user = i
            self.turn_user.append(user)
        # blocks can only grow at the end: recompute the last few
        for i in range(max(0, start - 4), len(history)):
            if history[i].role == "assistant" and history[i].tool_calls:
                self.block[i] = block_end(history, i)


def assert_valid_view(view: Sequence[Message], history: Sequence[Message], maps: HistoryMaps | None = None) -> None:
    """``view`` is a valid conversation made of ``history`` (the rules of decision 2):

    - the system prompt comes first, verbatim; the newest message is last, verbatim;
    - every message is one of the history's, verbatim, a tool result with its output cleared, or
      the one summary message; history order is kept;
    - a kept turn keeps its user message (verbatim);
    - every call is shown with all its results, right after it (its whole block, by position, in
      order); no tool result is shown anywhere else.
    """
    if maps is None:
        maps = HistoryMaps()
        maps.extend(history)
    assert len(maps.history) == len(history)
    if not history:
        assert not view
        return
    if history[0].role == "system":
        assert view and view[0] is history[0], "the system prompt is not first"
    assert view[-1] is history[-1], "the newest message is not last"
    index: list[int | None] = []
    summaries = 0
    for m in view:
        i = maps.where.get(id(m))
        if i is None:
            assert m.role == "user" and m.metadata.get("tulip_compaction_summary"), f"foreign message {m!r}"
            summaries += 1
        elif m is not history[i]:
            assert m.role == "tool" and m.metadata.get("tulip_compaction_cleared"), "a changed message"
        index.append(i)
    assert summaries <= 1
    shown = [i for i in index if i is not None]
    assert shown == sorted(set(shown)), "history order is not kept"
    verbatim = {i for i, m in zip(index, view, strict=True) if i is not None and m is history[i]}
    for i in shown:
        u = maps.turn_user[i]
        assert u is None or u in verbatim, f"message {i} is shown without its turn's user message {u}"
    p = 0
    while p < len(view):
        i = index[p]
        if i is not None and i in maps.block:
            end = maps.block[i]
            assert index[p + 1 : p + 1 + end - i - 1] == list(range(i + 1, end)), f"the block of call {i} is broken"
            p += end - i
            continue
        assert view[p].role != "tool", f"tool result {i} is not right after its call"
        p += 1


def check_history(thread: Thread) -> None:
    """The generator's pairing is the one core.calls finds by position, and every call is answered."""
    got = answered_by(thread.messages)
    assert {t: ref for t, ref in enumerate(got) if ref is not None} == thread.answers


# -- the run ---------------------------------------------------------------------------------------


def view_tokens(counter: TokenCounter, view: Sequence[Message]) -> int:
    total = sum(counter.message_counts(view)) + counter.count_tools(TOOLS) + REPLY_PRIMING
    assert total == counter.count_request(view, TOOLS)
    return total


def compactor_must_keep(c: LLMCompactor, history: list[Message]) -> tuple[int, list[int]]:
    """Tokens of the must-keep part, computed from the rules (not from the compactor's code), and
    the indices it holds: system, head (first head_turns turns before the current, and any prefix
    before the first user message; tool output stubbed), current user message, newest unit."""
    counter = c.counter
    body = 1 if history[0].role == "system" else 0
    users = [i for i in range(body, len(history)) if history[i].role == "user"]
    newest = len(history) - 1
    while history[newest].role == "tool":
        newest -= 1
    current = users[-1] if users else None
    head_end = min(
        users[c.head_turns] if len(users) > c.head_turns else len(history), current if current is not None else newest
    )
    keep = list(range(head_end))
    if current is not None and current < newest:
        keep.append(current)
    keep += range(newest, len(history))
    verbatim = sum(counter.count_message(history[i]) for i in keep)
    fixed = counter.count_tools(TOOLS) + REPLY_PRIMING
    if verbatim + fixed <= c.effective_context:
        return verbatim + fixed, keep
    stubbed = sum(
        counter.count_message(stub(history[i]) if i < head_end and history[i].role == "tool" else history[i])
        for i in keep
    )
    return stubbed + fixed, keep


def summarizing_floor(m: SummarizingConversationManager, history: list[Message], summary_tokens: int) -> int:
    """Tokens of the smallest view the summarising manager may send (constant-size summaries)."""
    counter = m.counter
    body = 1 if history[0].role == "system" else 0
    limit = len(history) - m.preserve_recent_messages
    starts = [s for s in range(body + 1, min(limit + 1, len(history))) if history[s].role != "tool"]
    fixed = counter.count_tools(TOOLS) + REPLY_PRIMING
    if starts == [body + 1] and history[body].role == "user" and history[body + 1].role != "user":
        starts = []  # the only block would hold just the first user message, which stays
    if not starts:
        return sum(counter.message_counts(history)) + fixed
    cut = starts[-1]
    pin: list[Message] = []
    if history[cut].role != "user":
        pin = [history[u] for u in range(cut - 1, body - 1, -1) if history[u].role == "user"][:1]
    kept = history[:body] + pin + history[cut:]
    return sum(counter.message_counts(kept)) + summary_tokens + fixed


SUMMARY = "S" * 40


def constant_summary(messages: list[Message], previous: str | None) -> str:
    assert messages, "a summary of nothing"
    return SUMMARY


async def drive(
    make: Any, thread: Thread, *, overflow_at: int | None = None, restart_at: int | None = None
) -> dict[str, int]:
    """Feed ``thread`` call by call (``aapply`` before each assistant message) and check each view.

    ``overflow_at``: the model reports an overflow at that call (``reduce_context``, then the retry).
    ``restart_at``: the manager is rebuilt from its saved state (JSON) at that call.
    Returns counts of views, raises and compactions seen.
    """
    check_history(thread)
    manager: ConversationManager = make()
    state = AgentState()
    maps = HistoryMaps()
    stats = {"views": 0, "raised": 0, "events": 0}
    for call, j in enumerate(thread.calls):
        history = thread.messages[:j]
        maps.extend(history)
        if call == restart_at:
            saved = json.loads(json.dumps(manager.get_state()))
            manager = make()
            manager.restore_from_session(saved)
        if call == overflow_at:
            manager.reduce_context(object(), RuntimeError("context_length_exceeded"))
        state.messages = history
        before = len(state.metadata.get(EVENTS_KEY, ()))
        try:
            view = await manager.aapply(history, tools=TOOLS, state=state)
        except ContextWindowExceeded as e:
            stats["raised"] += 1
            check_raise(manager, history, e)
            continue
        stats["views"] += 1
        assert_valid_view(view, history, maps)
        events = state.metadata.get(EVENTS_KEY, ())
        new_event = events[-1] if len(events) > before else None
        stats["events"] += new_event is not None
        check_tokens(manager, history, view, new_event)
    return stats


def note(thread: Thread, stats: dict[str, int]) -> None:
    """What the examples covered (``pytest --hypothesis-show-statistics``)."""
    event(f"turns: {'1-8' if thread.turns <= 8 else '9-60' if thread.turns <= 60 else '250+'}")
    raised = stats["raised"] / max(1, len(thread.calls))
    event(f"raised: {'none' if not raised else 'some' if raised < 0.5 else 'most'}; compacted: {bool(stats['events'])}")


def check_tokens(manager: ConversationManager, history: list[Message], view: list[Message], event: Any) -> None:
    if not isinstance(manager, PlanningManager):
        assert view == history
        return
    counter = manager.counter
    tokens = view_tokens(counter, view)
    if event is not None:
        assert event["tokens_after"] == tokens
    if isinstance(manager, LLMCompactor):
        assert manager.last_view_tokens == tokens  # what the compactor believes is what it sends
        assert tokens <= manager.effective_context
        if event is None:
            return  # between compactions the plan in effect holds (it was checked when made)
        need, keep = compactor_must_keep(manager, history)
        assert need <= manager.effective_context
        shown = {id(m) for m in view}
        for i in keep:  # the must-keep part is shown (the head's tool output may be stubbed)
            m = history[i]
            assert id(m) in shown or (m.role == "tool" and id(stub(m)) in shown), f"must-keep message {i} missing"
    elif isinstance(manager, SummarizingConversationManager) and manager.context_length is not None:
        assert manager.last_view_tokens == tokens
        assert tokens <= manager.context_length


def check_raise(manager: ConversationManager, history: list[Message], e: ContextWindowExceeded) -> None:
    assert isinstance(manager, LLMCompactor | SummarizingConversationManager)
    assert e.tokens_needed is not None and e.window is not None and e.largest is not None
    assert e.tokens_needed > e.window
    assert f"{e.tokens_needed:,}" in str(e) and f"{e.window:,}" in str(e)
    index, role, tokens = e.largest
    if isinstance(manager, LLMCompactor):
        need, keep = compactor_must_keep(manager, history)
        assert e.window == manager.effective_context
        assert e.tokens_needed == need > manager.effective_context  # raised only when it truly cannot fit
        assert index in keep and history[index].role == role and tokens >= 1
    else:
        assert manager.context_length is not None and e.window == manager.context_length
        summary_tokens = manager.counter.count_message(summary_message(SUMMARY))
        assert summarizing_floor(manager, history, summary_tokens) > manager.context_length


# -- the properties --------------------------------------------------------------------------------

compactor_params = st.fixed_dictionaries(
    {
        "context_length": st.sampled_from([1500, 6000, 32_000]),
        "trigger_fraction": st.sampled_from([0.5, 0.8, 1.0]),
        "head_turns": st.sampled_from([0, 1, 2]),
        "tail_token_fraction": st.sampled_from([0.2, 0.5, 0.7]),
        "tool_output_ttl_turns": st.sampled_from([0, 2, 10]),
        "summarize_fn": st.sampled_from([None, constant_summary]),
    }
)
events_at = st.one_of(st.none(), st.integers(0, 400))
BASE = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.slow
@settings(BASE, max_examples=examples(2))
@given(thread=threads(), kw=compactor_params, overflow_at=events_at, restart_at=events_at)
async def test_compactor_views_are_valid_and_bounded(
    thread: Thread, kw: dict[str, Any], overflow_at: int | None, restart_at: int | None
) -> None:
    def make() -> LLMCompactor:
        return LLMCompactor(token_counter=quick, **kw)

    note(thread, await drive(make, thread, overflow_at=overflow_at, restart_at=restart_at))


@settings(BASE, max_examples=examples(0.6))
@given(
    thread=threads(),
    window=st.sampled_from([1, 2, 5, 20, 40]),
    overflow_at=events_at,
    restart_at=events_at,
)
async def test_sliding_window_views_are_valid_and_never_raise(
    thread: Thread, window: int, overflow_at: int | None, restart_at: int | None
) -> None:
    def make() -> SlidingWindowManager:
        return SlidingWindowManager(window_size=window, token_counter=quick)

    stats = await drive(make, thread, overflow_at=overflow_at, restart_at=restart_at)
    note(thread, stats)
    assert stats["raised"] == 0


@pytest.mark.slow
@settings(BASE, max_examples=examples(1.2))
@given(
    thread=threads(),
    context_length=st.sampled_from([None, 1500, 6000, 32_000]),
    ratio=st.sampled_from([0.1, 0.3, 1.0]),
    preserve=st.sampled_from([0, 2, 10]),
    overflow_at=events_at,
    restart_at=events_at,
)
async def test_summarizing_views_are_valid_and_bounded_when_token_aware(
    thread: Thread,
    context_length: int | None,
    ratio: float,
    preserve: int,
    overflow_at: int | None,
    restart_at: int | None,
) -> None:
    def make() -> SummarizingConversationManager:
        return SummarizingConversationManager(
            summary_ratio=ratio,
            preserve_recent_messages=preserve,
            summarizer=constant_summary,
            context_length=context_length,
            token_counter=quick,
        )

    stats = await drive(make, thread, overflow_at=overflow_at, restart_at=restart_at)
    note(thread, stats)
    if context_length is None:
        assert stats["raised"] == 0  # not token-aware


@settings(BASE, max_examples=examples(0.1))
@given(thread=threads())
async def test_null_manager_sends_the_history(thread: Thread) -> None:
    stats = await drive(NullManager, thread)
    note(thread, stats)
    assert stats["raised"] == 0 and stats["events"] == 0


# -- the checker catches what it should ------------------------------------------------------------


def test_checker_rejects_invalid_views() -> None:
    import pytest

    thread = generate(random.Random(7), 6, "call_0", 10, None)
    h = thread.messages
    check_history(thread)
    assert_valid_view(h, h)
    calls = [i for i, m in enumerate(h) if m.tool_calls]
    users = [i for i, m in enumerate(h) if m.role == "user"]
    i = calls[-1]
    bad_views = {
        "system not first": h[1:],
        "newest not last": h[:-1],
        "foreign message": [*h[:-1], Message.user("?"), h[-1]],
        "order": [h[0], h[2], h[1], *h[3:]],
        "user message dropped, its call kept": [m for k, m in enumerate(h) if k != users[-1] or k == len(h) - 1],
        "result without its call": [m for k, m in enumerate(h) if k != i],
        "call without a result": [m for k, m in enumerate(h) if k != i + 1],
    }
    for name, view in bad_views.items():
        with pytest.raises(AssertionError):
            assert_valid_view(view, h)
            raise RuntimeError(f"the checker accepted: {name}")
