"""Agent scenarios run in child processes by ``test_agent_processes.py`` (one turn per process).

``python -m tests.unit.agent_scenarios <scenario> <threads_dir> [args...]`` prints one JSON line
describing the result. The scripted model decides from the conversation (not from a counter), so a
fresh process continues a thread exactly where the previous one left it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tulip_nb.agent import Agent, AgentResult, Interrupt, NullManager, tool
from tulip_nb.core import Message
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call, tool_calls

LEDGER = Path(os.environ.get("SCENARIO_LEDGER", "ledger.txt"))


def _log(line: str) -> None:
    with LEDGER.open("a") as f:
        f.write(line + "\n")


@tool(idempotent=True)
def lookup_order(order_id: str) -> str:
    """Look up an order's return eligibility."""
    _log(f"lookup {order_id}")
    return f"{order_id}: delivered 12 days ago, within the 30-day return window"


@tool(idempotent=True)
def charge(amount: int) -> str:
    """Charge a card (side effect: must not run twice)."""
    _log(f"charge {amount}")
    return f"charged {amount}"


@tool
def note(text: str) -> str:
    """Add a case note."""
    _log(f"note {text}")
    return "noted"


@tool
def explode() -> str:
    """Dies mid-iteration when CRASH=1 (the process is killed, nothing is saved)."""
    if os.environ.get("CRASH") == "1":
        os._exit(17)
    return "survived"


@tool
def ask_manager(amount: int) -> str:
    """Ask a manager to approve a refund."""
    raise Interrupt(f"Approve a refund of {amount}?")


def _turn(messages: list[Message]) -> list[Message]:
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    return messages[last_user:]


def support_model(messages: list[Message]) -> Message:
    turn = _turn(messages)
    prompt = turn[0].text
    if prompt.startswith("What did we conclude"):
        finding = next(m.text for m in messages if m.role == "tool")
        return text(f"We concluded: {finding}. Want me to draft the refund for manager approval?")
    if turn[-1].role == "user":
        return tool_call("lookup_order", order_id="ord-4821")
    return text("The return on ord-4821 is eligible.")


def crash_model(messages: list[Message]) -> Message:
    done = sum(1 for m in _turn(messages) if m.role == "assistant")
    script = [
        tool_call("charge", amount=10),
        tool_call("note", text="charged"),
        tool_calls(("charge", {"amount": 10}), ("explode", {})),
        text("All done."),
    ]
    return script[done]


def approval_model(messages: list[Message]) -> Message:
    turn = _turn(messages)
    if turn[-1].role == "user":
        return tool_call("ask_manager", amount=120)
    return text(f"Manager said: {turn[-1].text}")


def _summary(result: AgentResult) -> dict[str, Any]:
    return {
        "text": result.text,
        "stop_reason": result.stop_reason,
        "iterations": result.iterations,
        "pending": result.interrupt.question if result.interrupt else None,
        "tool_calls": [[e.tool_name, e.idempotent_cache_hit] for e in result.tool_calls],
        "messages": [[m.role, m.content] for m in result.state.messages],
        "checkpoint_id": result.checkpoint_id,
    }


def main(argv: list[str]) -> None:
    scenario, base = argv[0], argv[1]
    cp = FileCheckpointer(base)
    common: dict[str, Any] = {"checkpointer": cp, "conversation_manager": NullManager()}
    if scenario == "day":
        agent = Agent(ScriptedModel(support_model), [lookup_order], system_prompt="You handle refunds.", **common)
        result = agent.run_sync(argv[2], thread_id="ticket-8912-refund")
    elif scenario in ("crash", "crash-resume"):
        agent = Agent(ScriptedModel(crash_model), [charge, note, explode], checkpoint_every_n_iterations=1, **common)
        if scenario == "crash":
            result = agent.run_sync("Charge the customer and note it.", thread_id="case-4821")
        else:
            result = agent.resume_sync(thread_id="case-4821")
    elif scenario == "interrupt":
        agent = Agent(ScriptedModel(approval_model), [ask_manager], **common)
        result = agent.run_sync("Refund 120 on ord-4821.", thread_id="ticket-1")
    elif scenario == "interrupt-resume":
        agent = Agent(ScriptedModel(approval_model), [ask_manager], **common)
        result = agent.resume_sync(argv[2], thread_id="ticket-1")
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps(_summary(result)))


if __name__ == "__main__":
    main(sys.argv[1:])
