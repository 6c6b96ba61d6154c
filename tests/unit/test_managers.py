"""Conversation managers: the seed-002 interface, sliding window, summarising, null, defaults."""

from __future__ import annotations

import json

import pytest

from tulip_nb.core import AgentState, Message, ToolCall
from tulip_nb.memory.compactor import LLMCompactor, default_conversation_manager, model_view
from tulip_nb.memory.managers import (
    EVENTS_KEY,
    STATE_KEY,
    ConversationManager,
    NullManager,
    SlidingWindowManager,
    default_manager,
)


def one_token(msg: Message) -> int:
    return 1


def thread(turns: int, tools_per_turn: int = 1, system: bool = True) -> list[Message]:
    out = [Message.system("you are helpful")] if system else []
    for t in range(turns):
        out.append(Message.user(f"question {t}"))
        for k in range(tools_per_turn):
            cid = f"call_{t}_{k}"
            out.append(Message.assistant(None, [ToolCall(id=cid, name="lookup", arguments={"q": t})]))
            out.append(Message.tool(f"result {t}.{k}", tool_call_id=cid, name="lookup"))
        out.append(Message.assistant(f"answer {t}"))
    return out


def assert_paired(view: list[Message]) -> None:
    calls = {c.id for m in view for c in m.tool_calls}
    results = {m.tool_call_id for m in view if m.role == "tool"}
    assert calls == results


class StandIn:
    """The part of an agent a manager touches."""

    def __init__(self, messages: list[Message], model: object = None) -> None:
        self.messages = messages
        self.system_prompt = messages[0].content if messages and messages[0].role == "system" else None
        self.model = model
        self.state = AgentState(messages=messages)


# -- interface ---------------------------------------------------------------------------------------


def test_seed_002_names_import() -> None:
    from tulip_nb.agent.conversation_manager import (
        ConversationManager as CM,
    )
    from tulip_nb.agent.conversation_manager import (
        NullConversationManager,
        SlidingWindowConversationManager,
        SummarizingConversationManager,
    )

    assert CM is ConversationManager
    assert SlidingWindowConversationManager().window_size == 20
    s = SummarizingConversationManager(summary_ratio=0.3, preserve_recent_messages=10)
    assert s.clone_for_spawn() is not s
    assert isinstance(NullConversationManager(), NullManager)


def test_custom_manager_from_seed_002() -> None:
    class DatabaseConversationManager(ConversationManager):
        def __init__(self, db_url: str) -> None:
            self.db_url = db_url
            self.saved: list[int] = []

        def apply_management(self, agent: StandIn) -> None:
            self.saved.append(len(agent.messages))

        def reduce_context(self, agent: StandIn, e: BaseException | None = None) -> None:
            agent.messages = agent.messages[-10:]

        def get_state(self) -> dict:
            return {}

        def restore_from_session(self, state: dict) -> None:
            pass

        def clone_for_spawn(self) -> DatabaseConversationManager:
            return DatabaseConversationManager(db_url=self.db_url)

    m = DatabaseConversationManager("sqlite://")
    agent = StandIn(thread(5))
    m.apply_management(agent)
    m.reduce_context(agent)
    assert m.saved == [21] and len(agent.messages) == 10
    assert m.apply(agent.messages) == agent.messages
    clone = m.clone_for_spawn()
    assert clone is not m and clone.db_url == "sqlite://"


async def test_null_manager_changes_nothing() -> None:
    msgs = thread(30)
    state = AgentState(messages=msgs)
    assert await NullManager().aapply(msgs, state=state) == msgs
    assert EVENTS_KEY not in state.metadata


def test_default_manager_follows_seed_000() -> None:
    m = default_manager(200_000, max_iterations=20)
    assert isinstance(m, LLMCompactor) and m.context_length == 200_000 and m.summarize_fn is None
    s = default_conversation_manager(None, max_iterations=30)
    assert isinstance(s, SlidingWindowManager) and s.window_size == 60
    assert default_conversation_manager(None, 5).window_size == 20


# -- sliding window ------------------------------------------------------------------------------------


async def test_sliding_window_keeps_system_recent_and_pairs() -> None:
    msgs = thread(10)
    m = SlidingWindowManager(window_size=7, token_counter=one_token)
    state = AgentState(messages=msgs)
    view = await m.aapply(msgs, state=state)
    assert view[0] is msgs[0]
    assert len(view) - 1 <= 7
    assert view[-1] is msgs[-1]
    assert_paired(view)
    assert any(v.role == "user" for v in view)
    event = state.metadata[EVENTS_KEY][-1]
    assert event["trigger"] == "window" and event["tokens_after"] < event["tokens_before"]
    assert [v.json_bytes() for v in model_view(state)] == [v.json_bytes() for v in view]


def test_sliding_window_never_starts_with_a_tool_result() -> None:
    msgs = thread(6, tools_per_turn=3)
    for w in range(1, 20):
        view = SlidingWindowManager(window_size=w, token_counter=one_token).apply(msgs)
        assert view[1].role != "tool"
        assert_paired(view)


def test_sliding_window_keeps_a_user_message() -> None:
    msgs = thread(2, tools_per_turn=6)
    view = SlidingWindowManager(window_size=3, token_counter=one_token).apply(msgs)
    assert any(v.role == "user" for v in view)
    assert_paired(view)


def test_sliding_window_without_system_prompt_and_after_reset() -> None:
    m = SlidingWindowManager(window_size=4, token_counter=one_token)
    preloaded = [Message.user("My name is Alice."), Message.assistant("Nice to meet you, Alice!")]
    assert m.apply(preloaded) == preloaded
    assert m.apply([]) == []  # agent.messages = []
    fresh = [Message.system("New instructions here."), Message.user("Fresh start!")]
    assert m.apply(fresh) == fresh


def test_sliding_window_overflow_halves_window() -> None:
    msgs = thread(10)
    m = SlidingWindowManager(window_size=20, token_counter=one_token)
    before = len(m.apply(msgs))
    m.reduce_context(StandIn(msgs), RuntimeError("context_length_exceeded"))
    after = len(m.apply(msgs))
    assert after < before
    restored = SlidingWindowManager(window_size=20, token_counter=one_token)
    restored.restore_from_session(json.loads(json.dumps(m.get_state())))
    assert restored.effective_window() == 10
    assert m.clone_for_spawn().effective_window() == 20


# -- summarising -----------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str | None]] = []

    async def __call__(self, messages: list[Message], previous: str | None) -> str:
        self.calls.append((len(messages), previous))
        return f"summary#{len(self.calls)} of {len(messages)}"


async def test_summarizing_on_overflow_and_survives_restart() -> None:
    from tulip_nb.agent.conversation_manager import SummarizingConversationManager

    msgs = thread(10)  # 41 messages
    summarise = Recorder()
    m = SummarizingConversationManager(summary_ratio=0.3, preserve_recent_messages=10, summarizer=summarise)
    state = AgentState(messages=msgs)
    assert await m.aapply(msgs, state=state) == msgs  # no overflow yet
    m.reduce_context(StandIn(msgs), RuntimeError("context_length_exceeded"))
    view = await m.aapply(msgs, state=state)
    assert view[0] is msgs[0] and view[1].metadata.get("tulip_compaction_summary")
    assert len(view) < len(msgs)
    assert_paired(view)
    assert summarise.calls[0][1] is None
    assert view[-10:] == msgs[-10:]
    event = state.metadata[EVENTS_KEY][-1]
    assert event["trigger"] == "overflow" and event["plan"]["summary"] == "summary#1 of 12"

    # A new process: the state comes back from the saved thread's metadata (as JSON).
    saved = json.loads(json.dumps(state.metadata[STATE_KEY]))
    again = SummarizingConversationManager(summarizer=summarise)
    again.restore_from_session(saved)
    more = [*msgs, *thread(2, system=False)]
    view2 = await again.aapply(more, state=state)
    assert view2[1].content == view[1].content  # the summary is shown without a model call
    assert len(summarise.calls) == 1
    again.reduce_context(StandIn(more))
    await again.aapply(more, state=state)
    assert summarise.calls[1][1] == "summary#1 of 12"  # the previous summary compounds


async def test_summarizing_uses_agent_model() -> None:
    from tulip_nb.memory.compactor import SummarizingConversationManager

    class Reply:
        def __init__(self, content: str) -> None:
            self.message = Message.assistant(content)

    class FakeModel:
        def __init__(self) -> None:
            self.requests: list[list[Message]] = []

        async def complete(self, messages: list[Message], tools: object = None) -> Reply:
            self.requests.append(messages)
            return Reply("the user asked ten questions")

    model = FakeModel()
    msgs = thread(10)
    m = SummarizingConversationManager(preserve_recent_messages=4)
    m.reduce_context(StandIn(msgs, model=model))
    view = await m.aapply(msgs)
    assert "ten questions" in (view[1].content or "")
    assert model.requests[0][0].role == "system"


async def test_summarizing_without_summariser_is_a_clear_error() -> None:
    from tulip_nb.core import UserError
    from tulip_nb.memory.compactor import SummarizingConversationManager

    m = SummarizingConversationManager()
    m.reduce_context(StandIn(thread(10)))
    with pytest.raises(UserError, match="summariser"):
        await m.aapply(thread(10))


async def test_summarizing_threshold_with_context_length() -> None:
    from tulip_nb.memory.compactor import SummarizingConversationManager

    msgs = thread(20)
    m = SummarizingConversationManager(
        summarizer=Recorder(), context_length=60, trigger_fraction=0.8, token_counter=one_token
    )
    view = await m.aapply(msgs)
    assert len(view) < len(msgs) and m.last_event is not None and m.last_event["trigger"] == "threshold"
