"""The README's main job: an offline refund-case agent whose thread survives a process restart.

    tulip-nb demo [THREADS_DIR]                 # default ./demo_threads
    python -m tulip_nb._demo [THREADS_DIR]      # the same; `make demo` runs this

The agent is the support desk's: its tools (:data:`TOOLS`) and scripted model
(:func:`support_model`) are the ones the synthetic corpus (:mod:`tulip_nb.lab._synthetic`) is
written with. Day 1 and Day 2 (seed 000) each run in their **own Python process**: the first process looks into
the refund and exits; the second one knows nothing but the ``thread_id``, rehydrates the thread
from the FileCheckpointer directory and continues the conversation. The model is a ScriptedModel
that decides from the conversation, so no API key or network is needed. At the end the script
prints the conversation and the checkpoint files on disk (tulip's format: a tulip agent can
resume this thread).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tulip_nb.agent import Agent
from tulip_nb.core import Message
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import Interrupt, tool

THREAD = "ticket-8912-refund"
DAY_1 = "Look into the refund request on order ord-4821."
DAY_2 = "What did we conclude?"

_ORDER = re.compile(r"ord-\d+")


# -- the support desk's tools (the demo's and the synthetic corpus's) ---------------------------


def _order_record(order_id: str) -> dict[str, Any]:
    n = int(order_id.removeprefix("ord-")) if order_id.removeprefix("ord-").isdigit() else 0
    items = [
        {"sku": f"SKU-{(n * 7 + k) % 997:03d}", "qty": 1 + (n + k) % 3, "price": 9.5 + (n * (k + 3)) % 90}
        for k in range(2 + n % 3)
    ]
    return {
        "order_id": order_id,
        "status": ("delivered", "delivered", "in transit", "returned")[n % 4],
        "days_since_delivery": 3 + n % 45,
        "items": items,
        "notes": "Customer contacted support before about this order." if n % 5 == 0 else "",
    }


@tool(idempotent=True)
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order: status, items and days since delivery.

    Args:
        order_id: The order id, e.g. ``ord-4821``.
    """
    return _order_record(order_id)


@tool
def refund_status(order_id: str) -> str:
    """The state of the refund of an order in the payments system.

    Args:
        order_id: The order id.
    """
    n = int(order_id.removeprefix("ord-")) if order_id.removeprefix("ord-").isdigit() else 0
    if n % 3 == 0:
        raise ConnectionError(f"payments service timed out looking up {order_id}")
    return f"{order_id}: refund {'issued' if n % 2 else 'pending approval'}"


@tool
def add_note(order_id: str, note: str) -> str:
    """Attach a note to the case.

    Args:
        order_id: The order id.
        note: The note's text.
    """
    return f"note saved on {order_id} ({len(note)} characters)"


@tool
def escalate(order_id: str, reason: str) -> str:
    """Hand the case to a manager; a human must approve first.

    Args:
        order_id: The order id.
        reason: Why the case needs a manager.
    """
    raise Interrupt(f"Approve escalating {order_id} to a manager? Reason: {reason}", payload={"order_id": order_id})


@tool(idempotent=True)
def check_return_policy(order_id: str, days_since_delivery: int) -> str:
    """Whether an order is still inside the 30-day return window.

    Args:
        order_id: The order id.
        days_since_delivery: Days between delivery and today.
    """
    verdict = "eligible" if days_since_delivery <= 30 else "not eligible"
    return f"{order_id}: {verdict} ({days_since_delivery} days since delivery, limit 30)"


TOOLS = [lookup_order, check_return_policy, refund_status, add_note, escalate]
"""The support desk's tools: the demo's agent and the synthetic corpus's (:mod:`tulip_nb.lab._synthetic`)."""


# -- the scripted model -------------------------------------------------------------------------


def _turn_order(messages: list[Message]) -> str:
    for m in messages:
        if m.role == "user" and m.content:
            found = _ORDER.search(m.content)
            if found:
                return found.group(0)
    return "ord-0"


def support_model(messages: list[Message]) -> Message:
    """The scripted 'LLM' of the support desk: it reads the conversation and picks the next step.

    The demo's two days and every prompt kind of the synthetic corpus take a branch here.
    """
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    turn = messages[last_user:]
    ask = turn[0].content or ""
    done = [c.name for m in turn for c in m.tool_calls]
    results = {m.name: m.content or "" for m in turn if m.role == "tool"}
    order = _turn_order(messages)
    if ask == DAY_2:
        verdict = next(m.content for m in reversed(messages) if m.name == "check_return_policy")
        return text(f"We concluded: {verdict}. Want me to draft the refund for manager approval?")
    if (ask.startswith("Customer ") and "asks for a refund" in ask) or ask.startswith("Look into the refund"):
        if "lookup_order" not in done:
            return tool_call("lookup_order", order_id=order)
        if "check_return_policy" not in done:
            days = int(re.search(r'"days_since_delivery":\s*(\d+)', results["lookup_order"]).group(1))  # type: ignore[union-attr]
            return tool_call("check_return_policy", order_id=order, days_since_delivery=days)
        return text(f"I checked {order}: {results['check_return_policy']}.")
    if ask.startswith("Check the refund"):
        if "refund_status" not in done:
            return tool_call("refund_status", order_id=order)
        got = results["refund_status"]
        if got.startswith("Error:"):
            return text(f"The payments system did not answer for {order}; I will retry later.")
        return text(f"Refund status: {got}.")
    if ask.startswith("Remind me"):
        if "lookup_order" not in done:
            return tool_call("lookup_order", order_id=order)
        return text(f"Order {order} again: {results['lookup_order'][:120]}")
    if ask.startswith("Escalate"):
        if "escalate" not in done:
            return tool_call("escalate", order_id=order, reason="customer asked for a manager")
        return text(f"Escalation of {order}: {results.get('escalate', 'no answer')}.")
    if ask.startswith("Note:"):
        if "add_note" not in done:
            return tool_call("add_note", order_id=order, note=ask.removeprefix("Note:").strip())
        return text("Noted on the case.")
    if ask.startswith("Customer writes:"):
        said = ask.removeprefix("Customer writes:").strip()
        return text(f"Understood, I have added this to the case file of {order}: {said[:400]} I will follow up.")
    return text(f"Understood. I have added this to the case file of {order} and will follow up.")


# -- the demo -------------------------------------------------------------------------------------


def make_agent(base_dir: Path) -> Agent:
    return Agent(
        model=ScriptedModel(support_model),
        tools=TOOLS,
        system_prompt="You are a support agent handling refund cases.",
        checkpointer=FileCheckpointer(base_dir=base_dir),
    )


def run_turn(base_dir: Path, prompt: str) -> None:
    """One process, one turn: everything it knows about the case comes from the checkpoint."""
    result = make_agent(base_dir).run_sync(prompt, thread_id=THREAD)
    print(f"  > {prompt}\n  < {result.text}")
    n, calls = result.iterations, len(result.tool_calls)
    counts = f"{n} iteration{'s' * (n != 1)}, {calls} tool call{'s' * (calls != 1)}"
    print(f"    ({counts}, saved {result.checkpoint_id})")


def show(base_dir: Path) -> None:
    cp = FileCheckpointer(base_dir=base_dir)
    state = asyncio.run(cp.load(THREAD))
    assert state is not None
    print(f"\nConversation {THREAD!r} ({len(state.messages)} messages):")
    for m in state.messages:
        if m.tool_calls:
            body = ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            print(f"  [{m.role}] calls {body}")
        else:
            print(f"  [{m.role}] {m.content}")
    print(f"\nCheckpoints of {THREAD!r} (newest first):")
    for info in asyncio.run(cp.list_checkpoint_infos(THREAD)):
        source = info.metadata.get("source", "")
        print(f"  {info.checkpoint_id}  {info.created_at:%H:%M:%S}  {source:<9}  parent={info.parent_checkpoint_id}")
    directory = cp.thread_dir(THREAD)
    print(
        f"\nOn disk under {base_dir}/ (the SQLite history holds every checkpoint; the .json is tulip's copy of"
        " the latest turn):"
    )
    store = base_dir.resolve() / ".tulip_nb"
    history = [p for p in sorted(store.iterdir()) if p.name in ("history.sqlite3", "history.sqlite3-wal")]
    for path in [*history, *sorted(directory.iterdir())]:
        if path in history or path.name.endswith(".json"):
            print(f"  {path.relative_to(base_dir.resolve())}  {path.stat().st_size:>6} bytes")


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--turn":
        run_turn(Path(argv[2]), DAY_1 if argv[1] == "1" else DAY_2)
        return 0
    base_dir = Path(argv[0] if argv else "demo_threads")
    asyncio.run(FileCheckpointer(base_dir=base_dir).delete(THREAD))  # a fresh case on every demo run
    for day in ("1", "2"):
        print(f"Day {day} (a new Python process):")
        subprocess.run([sys.executable, "-m", "tulip_nb._demo", "--turn", day, str(base_dir)], check=True)
    show(base_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
