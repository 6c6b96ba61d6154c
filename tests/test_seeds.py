"""Every snippet of the seed pages (../shared/seeds/) runs as written, `tulip` -> `tulip_nb`.

The only substitutions are the ones the mission allows: a ScriptedModel in place of a paid model,
and the test servers' addresses (moto, the local PostgreSQL/MariaDB/Redis) in place of production
hosts. Each test quotes its snippet's code with those substitutions and nothing else.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.core import Message
from tulip_nb.models import ScriptedModel, text, tool_call

from .backends.factories.remote import moto_endpoint
from .conftest import require_service


def support_model() -> ScriptedModel:
    """Decides from the conversation, so it answers the same in any process or order."""

    def reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        last = messages[-1]
        if last.role == "tool":
            return text(f"Noted: {last.content}")
        prompt = last.content or ""
        history = " ".join(m.content or "" for m in messages)
        if "refund request" in prompt:
            return tool_call("lookup_order", order_id="ord-4821")
        if "What did we conclude" in prompt:
            return text("The return on ord-4821 is eligible. Want me to draft the refund for manager approval?")
        if "What is my name" in prompt and "Alice" in history:
            return text("Your name is Alice.")
        if "What did I just ask" in prompt:
            asked = [m.content for m in messages if m.role == "user"]
            return text(f"You asked: {asked[-2] if len(asked) > 1 else 'nothing'}")
        return text(f"ok: {prompt[:40]}")

    return ScriptedModel(reply)


def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"{order_id}: delivered 12 days ago, eligible for return"


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point boto3 at the local moto server, as AWS_ENDPOINT_URL would in production."""
    url = moto_endpoint()
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    yield url


# -- seed 000: Conversation management --------------------------------------------------------


def test_seed_000_the_minimum_day_1_day_2(s3_env: str) -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends import S3Backend

    bucket = f"tulip-threads-{uuid.uuid4().hex[:8]}"
    agent = Agent(
        model=support_model(),
        tools=[lookup_order],
        checkpointer=S3Backend(
            bucket=bucket,
            prefix="<your-prefix>/",
        ),
    )

    # Day 1
    agent.run_sync("Look into the refund request on order ord-4821.", thread_id="ticket-8912-refund")

    # Day 2 — same thread_id, conversation continues
    result = agent.run_sync("What did we conclude?", thread_id="ticket-8912-refund")
    assert result.text == "The return on ord-4821 is eligible. Want me to draft the refund for manager approval?"
    from tulip_nb.agent import run_sync

    state = run_sync(agent.get_state("ticket-8912-refund"))
    assert [m.role for m in state.messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]


async def test_seed_000_thread_lifecycle(tmp_path: Path) -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends.file import FileCheckpointer

    checkpointer = FileCheckpointer(base_dir=str(tmp_path))
    agent = Agent(model=support_model(), tools=[lookup_order], checkpointer=checkpointer)
    for thread in ("ticket-8912-refund", "case-7731-triage"):
        await agent.run("Look into the refund request on order ord-4821.", thread_id=thread)

    # List all threads in a bucket
    threads = await checkpointer.list_threads()
    # → ["ticket-8912-refund", "case-7731-triage", ...]
    assert sorted(threads) == ["case-7731-triage", "ticket-8912-refund"]

    # Inspect one
    state = await checkpointer.load("case-7731-triage")
    print(len(state.messages), "messages")

    # Branch — new thread, copy of an existing one
    await checkpointer.copy_thread(
        source_thread_id="case-7731-triage",
        dest_thread_id="case-7731-triage-replay",
    )

    # Drop
    await checkpointer.delete("case-7731-triage-replay")
    assert sorted(await checkpointer.list_threads()) == ["case-7731-triage", "ticket-8912-refund"]


def test_seed_000_llm_compactor() -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.compactor import LLMCompactor

    async def summarise(messages: list, previous_summary: str | None) -> str:
        """Your summarise function — typically a small-model call."""
        return f"{previous_summary or ''} {len(messages)} messages".strip()

    # Every argument has a default. Set context_length to your model's window:
    # an LLMCompactor you pass yourself does not look it up (default 128_000).
    agent = Agent(
        model=support_model(),
        conversation_manager=LLMCompactor(
            context_length=128_000,  # the model's context window
            trigger_fraction=0.85,  # compact when usage hits 85% (default 0.8)
            head_turns=2,  # first 2 turns kept verbatim (default)
            tail_token_fraction=0.4,  # ~40% of budget for recent turns (default 0.5)
            summarize_fn=summarise,  # optional; without it the middle is dropped
        ),
    )
    # In short threads it never fires.
    assert agent("hello").text == "ok: hello"


def test_seed_000_default_managers() -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.compactor import LLMCompactor, NullManager, SlidingWindowManager
    from tulip_nb.models.metadata import register_metadata

    known = Agent(model=ScriptedModel([text("hi")], name="gpt-4o-mini"))
    assert isinstance(known.conversation_manager, LLMCompactor)
    assert known.conversation_manager.context_length == 128_000
    assert isinstance(
        Agent(model=ScriptedModel([text("hi")]), max_iterations=15).conversation_manager, SlidingWindowManager
    )
    assert Agent(model=ScriptedModel([text("hi")]), max_iterations=15).conversation_manager.window_size == 30
    assert isinstance(
        Agent(model=support_model(), conversation_manager=NullManager()).conversation_manager, NullManager
    )
    register_metadata("my-lab-model", context_window=32_000)

    assert Agent(model=ScriptedModel([text("hi")], name="my-lab-model")).conversation_manager.context_length == 32_000


# -- seed 001: Checkpointers ------------------------------------------------------------------


def test_seed_001_file_checkpointer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends.file import FileCheckpointer

    monkeypatch.chdir(tmp_path)
    agent = Agent(
        model=support_model(),
        tools=[lookup_order],
        checkpointer=FileCheckpointer(base_dir="./threads"),
    )
    agent.run_sync("Triage alert A-42 and contain the affected host.", thread_id="case-4821")
    agent.run_sync("What host did we isolate, and on what evidence?", thread_id="case-4821")
    case = tmp_path / "threads" / "case-4821"
    # The history layout (the default): every checkpoint in the store's SQLite history, one grep-able
    # tulip envelope (the latest turn end); layout="tulip" keeps the seed's "a JSON file per checkpoint".
    assert len(list(case.glob("*.json"))) == 1 and (tmp_path / "threads" / ".tulip_nb" / "history.sqlite3").exists()
    assert len(agent.get_state_history_sync("case-4821")) == 2
    tulip_layout = Agent(
        model=support_model(), tools=[lookup_order], checkpointer=FileCheckpointer(base_dir="./tl", layout="tulip")
    )
    tulip_layout.run_sync("Triage alert A-42 and contain the affected host.", thread_id="case-4821")
    tulip_layout.run_sync("What host did we isolate, and on what evidence?", thread_id="case-4821")
    assert len(list((tmp_path / "tl" / "case-4821").glob("*.json"))) == 2


def test_seed_001_production_s3backend(s3_env: str) -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends import S3Backend

    agent = Agent(
        model=support_model(),
        tools=[lookup_order],
        # S3Backend implements BaseCheckpointer directly — no adapter needed.
        checkpointer=S3Backend(
            bucket=f"agent-thread-checkpoints-{uuid.uuid4().hex[:8]}",
            endpoint_url=s3_env,  # or a MinIO / R2 endpoint
            prefix="prod/",
        ),
    )
    agent.run_sync("Look into the refund request on order ord-4821.", thread_id="case-4821")
    assert agent.run_sync("What did we conclude?", thread_id="case-4821").text.startswith("The return")


def test_seed_001_sql_and_redis_factories() -> None:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("MariaDB", "127.0.0.1", 3306)
    require_service("Redis", "127.0.0.1", 6379)
    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends import mysql_checkpointer, postgresql_checkpointer, redis_checkpointer

    suffix = uuid.uuid4().hex[:8]
    checkpointers = [
        postgresql_checkpointer(
            dsn="postgresql://postgres@127.0.0.1:5432/test", schema_name="public", table_name=f"tulip_threads_{suffix}"
        ),
        mysql_checkpointer(
            dsn="mysql://root@127.0.0.1:3306/test?ssl_disabled=true", table_name=f"tulip_threads_{suffix}"
        ),
        redis_checkpointer(url="redis://127.0.0.1:6379/15", ttl_seconds=86_400, prefix=f"seed-{suffix}:"),
    ]
    for checkpointer in checkpointers:
        agent = Agent(model=support_model(), tools=[lookup_order], checkpointer=checkpointer)
        agent.run_sync("Look into the refund request on order ord-4821.", thread_id="case-4821")
        assert agent.run_sync("What did we conclude?", thread_id="case-4821").text.startswith("The return")
    import asyncio

    async def cleanup() -> None:
        for cp in checkpointers:
            await cp.delete("case-4821")
            await cp.close()

    asyncio.run(cleanup())


def test_seed_001_storage_backend_gotcha() -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends.redis import RedisBackend

    # WRONG — passing a storage backend directly fails
    with pytest.raises(TypeError, match="redis_checkpointer"):
        Agent(model=support_model(), checkpointer=RedisBackend(url="redis://127.0.0.1:6379/15"))


async def test_seed_001_capabilities(tmp_path: Path) -> None:
    from tulip_nb.memory.backends.file import FileCheckpointer

    checkpointer = FileCheckpointer(base_dir=tmp_path)
    from tulip_nb.core import AgentState

    await checkpointer.save(AgentState(messages=[Message.user("error handling in retries")]), "main")

    caps = checkpointer.capabilities

    if caps.search:
        hits = await checkpointer.search("error handling")
        assert hits[0]["thread_id"] == "main"

    if caps.branching:
        await checkpointer.copy_thread("main", "experiment")

    if caps.vacuum:
        await checkpointer.vacuum(older_than_days=30)

    if caps.list_threads:
        threads = await checkpointer.list_threads()
        assert threads == ["experiment", "main"]


def test_seed_001_s3_lifecycle(s3_env: str) -> None:
    import asyncio

    from tulip_nb.memory.backends import S3Backend, s3_checkpointer

    backend = S3Backend(bucket=f"tulip-threads-{uuid.uuid4().hex[:8]}", endpoint_url=s3_env)
    assert s3_checkpointer is not None
    asyncio.run(backend.configure_lifecycle(days_until_archive=30, days_until_delete=365))


# -- seed 002: Conversation Management (elsai -> tulip_nb) ----------------------------------


def test_seed_002_examples() -> None:
    from tulip_nb import Agent
    from tulip_nb.agent.conversation_manager import (
        NullConversationManager,
        SlidingWindowConversationManager,
        SummarizingConversationManager,
    )

    agent = Agent(model=support_model())  # Uses SlidingWindowConversationManager by default
    assert isinstance(agent.conversation_manager, SlidingWindowConversationManager)
    agent("Message 1")
    agent("Message 2")
    agent("Message 3")
    assert len(agent.messages) == 6

    manager = SlidingWindowConversationManager(
        window_size=20,  # Keep last 20 messages
    )
    agent = Agent(model=support_model(), conversation_manager=manager)

    manager = SummarizingConversationManager(
        summary_ratio=0.3,  # Summarise oldest 30% when context overflows
        preserve_recent_messages=10,  # Always keep at least 10 recent messages
    )
    agent = Agent(model=support_model(), conversation_manager=manager)

    agent = Agent(model=support_model(), conversation_manager=NullConversationManager())

    agent("Tell me your name")
    agent("What did I just ask?")
    lines = []
    for msg in agent.messages:
        role = msg["role"]
        text_ = "".join(block.get("text", "") for block in msg["content"] if "text" in block)
        lines.append(f"[{role}] {text_[:80]}")
    assert lines[-1] == "[assistant] You asked: Tell me your name"

    agent.messages = []  # Clear all history
    assert agent.messages == []

    agent.messages = []
    agent.system_prompt = "New instructions here."
    agent("Fresh start!")
    assert agent.messages[0].content == "New instructions here."

    agent = Agent(
        model=support_model(),
        messages=[
            {"role": "user", "content": [{"text": "My name is Alice."}]},
            {"role": "assistant", "content": [{"text": "Nice to meet you, Alice!"}]},
        ],
    )
    result = agent("What is my name?")
    # → "Your name is Alice."
    assert result.text == "Your name is Alice."


def test_seed_002_custom_manager_and_spawn(tmp_path: Path) -> None:
    from tulip_nb import Agent
    from tulip_nb.agent import AgentBase, ConversationManager

    saved: list[int] = []

    class DatabaseConversationManager(ConversationManager):
        def __init__(self, db_url: str):
            self.db_url = db_url

        def apply_management(self, agent: AgentBase) -> None:
            # Called after each turn; trim or persist messages
            self._save_to_db(agent.messages)

        def _save_to_db(self, messages: list) -> None:
            saved.append(len(messages))

        def reduce_context(self, agent: AgentBase, e: Exception | None = None) -> None:
            # Called when context window overflows; remove old messages
            agent.messages = agent.messages[-10:]

        def get_state(self) -> dict:
            return {}

        def restore_from_session(self, state: dict) -> None:
            pass

        def clone_for_spawn(self) -> DatabaseConversationManager:
            """Fresh manager per spawn worker — same config, isolated instance."""
            return DatabaseConversationManager(db_url=self.db_url)

    manager = DatabaseConversationManager(db_url=os.fspath(tmp_path / "db"))
    worker = Agent(model=support_model(), conversation_manager=manager)
    worker("hello")
    assert saved == [2]
    clone = manager.clone_for_spawn()
    assert clone is not manager and clone.db_url == manager.db_url
    lead = Agent(
        model=ScriptedModel([tool_call("worker", prompt="hi"), text("done")]),
        tools=[worker.as_tool(name="worker", mode="spawn")],
    )
    assert lead("delegate").text == "done"
