"""A recorded thread for the lab tests: an offline agent, a tool, and compaction that fires."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from tulip_nb.agent import Agent
from tulip_nb.core._messages import Message
from tulip_nb.lab import Thread, open_thread
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import Tool, tool

THREAD = "ticket-8912-refund"
TURNS = 8


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order id, like ord-4821.
    """
    return f"order {order_id}: status shipped, " + "items: widget, gadget, gizmo; notes: fragile. " * 30


def make_reply(tag: str = "Answer") -> Any:
    def reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        last = messages[-1]
        if last.role == "user":
            oid = re.search(r"ord-\d+", last.content or "")
            found = oid.group(0) if oid else "ord-0"
            return tool_call("lookup_order", call_id=f"call-{found}-{tag}", order_id=found)
        oid = re.search(r"ord-\d+", last.content or "")
        return text(f"{tag}: {oid.group(0) if oid else '?'} has shipped.")

    return reply


def manager() -> LLMCompactor:
    return LLMCompactor(context_length=1500, trigger_fraction=0.8, head_turns=1, tool_output_ttl_turns=3)


def make_agent(cp: Any, model: Any = None, tools: list[Tool] | None = None) -> Agent:
    return Agent(
        model if model is not None else ScriptedModel(make_reply()),
        tools if tools is not None else [lookup_order],
        system_prompt="You are a support agent. <be kind>",
        checkpointer=cp,
        conversation_manager=manager(),
    )


class RaisingModel:
    """A model that must never be called."""

    name = "raising"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kw: Any) -> Any:
        self.calls += 1
        raise AssertionError("a model was called")


@dataclass
class Recorded:
    cp: MemoryCheckpointer
    agent: Agent
    thread: Thread


@pytest.fixture
def recorded() -> Recorded:
    cp = MemoryCheckpointer()
    agent = make_agent(cp)
    for i in range(TURNS):
        agent.run_sync(f"Please check ord-48{i:02d} for the customer.", thread_id=THREAD)
    return Recorded(cp, agent, open_thread(cp, THREAD))
