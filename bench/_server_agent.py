"""The agent ``bench.bench_server`` serves: an instant ScriptedModel (echo), no tools, no compaction."""

from __future__ import annotations

from tulip_nb.agent import Agent, NullManager
from tulip_nb.core._messages import Message
from tulip_nb.models import ScriptedModel, text


def reply(messages: list[Message]) -> Message:
    return text(f"noted: {messages[-1].content}")


agent = Agent(ScriptedModel(reply), conversation_manager=NullManager())
