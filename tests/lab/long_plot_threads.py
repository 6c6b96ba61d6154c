"""400-turn threads for the long-thread plot tests (issue 25, item 7), recorded by a real agent.

``compact``: ``LLMCompactor(context_length=6000)`` (its defaults otherwise: trigger 4,800), a tool
whose output is 100-900 tokens, so the full history grows to ~250k tokens while what is sent
stays under the trigger; ``null``: the same conversation under a ``NullManager`` (no window is
known). In both, turn ``i`` with ``i % 97 == 50`` fails (the model raises ``ModelError``), so each
thread has :data:`FAILED` failed turns.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from tulip_nb.agent import Agent
from tulip_nb.core._messages import Message
from tulip_nb.lab import Thread, open_thread
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.memory.managers import ConversationManager, NullManager
from tulip_nb.models import ModelError, ScriptedModel, text, tool_call
from tulip_nb.tools import tool

TURNS = 400
WINDOW = 6000
TRIGGER = LLMCompactor(context_length=WINDOW).trigger_tokens  # 4,800
FAILING = [i for i in range(TURNS) if i % 97 == 50]
FAILED = len(FAILING)


@tool
def lookup(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order id, like ord-1042.
    """
    return f"order {order_id}: shipped. " + "tracking line. " * (40 + (int(order_id[4:]) * 37) % 300)


def reply(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
    last = messages[-1]
    if last.role == "user" and "fail" in (last.content or ""):
        raise ModelError("provider 500")
    oid = re.search(r"ord-\d+", last.content or "")
    found = oid.group(0) if oid else "ord-0"
    if last.role == "user":
        return tool_call("lookup", call_id="call_0", order_id=found)
    return text(f"{found} has shipped.")


def record(cp: MemoryCheckpointer, thread_id: str, manager: ConversationManager) -> None:
    agent = Agent(
        ScriptedModel(reply),
        [lookup],
        system_prompt="You are an analyst.",
        checkpointer=cp,
        conversation_manager=manager,
    )
    failed = []
    for i in range(TURNS):
        prompt = f"Turn {i}: where is ord-{1000 + i}?" + (" fail please" if i in FAILING else "")
        try:
            agent.run_sync(prompt, thread_id=thread_id)
        except ModelError:
            failed.append(i)
    assert failed == FAILING, failed


@dataclass
class LongThreads:
    cp: MemoryCheckpointer
    compact: Thread
    null: Thread


@functools.cache  # one recording per test process: the lab and widget tests only read them
def long_threads() -> LongThreads:
    cp = MemoryCheckpointer()
    record(cp, "compact", LLMCompactor(context_length=WINDOW))
    record(cp, "null", NullManager())
    return LongThreads(cp, open_thread(cp, "compact"), open_thread(cp, "null"))
