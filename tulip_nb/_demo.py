"""The README's main job: an offline refund-case agent whose thread survives a process restart.

    tulip-nb demo [THREADS_DIR]                 # default ./demo_threads
    python -m tulip_nb._demo [THREADS_DIR]      # the same; `make demo` runs this

Day 1 and Day 2 (seed 000) each run in their **own Python process**: the first process looks into
the refund and exits; the second one knows nothing but the ``thread_id``, rehydrates the thread
from the FileCheckpointer directory and continues the conversation. The model is a ScriptedModel
that decides from the conversation, so no API key or network is needed. At the end the script
prints the conversation and the checkpoint files on disk (tulip's format: a tulip agent can
resume this thread).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

from tulip_nb.agent import Agent, tool
from tulip_nb.core import Message
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call

THREAD = "ticket-8912-refund"
DAY_1 = "Look into the refund request on order ord-4821."
DAY_2 = "What did we conclude?"

ORDERS: dict[str, dict[str, Any]] = {
    "ord-4821": {"customer": "cust-4821", "total": 129.0, "delivered": date(2026, 11, 18)}
}


@tool(idempotent=True)
def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order: customer, total and delivery date.

    Args:
        order_id: The order id, e.g. ``ord-4821``.
    """
    order = ORDERS[order_id]
    return {"order_id": order_id, **order, "delivered": order["delivered"].isoformat()}


@tool(idempotent=True)
def check_return_policy(order_id: str, days_since_delivery: int) -> str:
    """Whether an order is still inside the 30-day return window.

    Args:
        order_id: The order id.
        days_since_delivery: Days between delivery and today.
    """
    verdict = "eligible" if days_since_delivery <= 30 else "not eligible"
    return f"{order_id}: {verdict} ({days_since_delivery} days since delivery, limit 30)"


def support_model(messages: list[Message]) -> Message:
    """The scripted 'LLM': it reads the conversation and decides the next step."""
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    turn = messages[last_user:]
    done = [c.name for m in turn for c in m.tool_calls]
    if turn[0].content == DAY_2:
        verdict = next(m.content for m in reversed(messages) if m.name == "check_return_policy")
        return text(f"We concluded: {verdict}. Want me to draft the refund for manager approval?")
    if "lookup_order" not in done:
        return tool_call("lookup_order", order_id="ord-4821")
    if "check_return_policy" not in done:
        return tool_call("check_return_policy", order_id="ord-4821", days_since_delivery=12)
    return text("The return on ord-4821 is eligible. Want me to draft the refund for manager approval?")


def make_agent(base_dir: Path) -> Agent:
    return Agent(
        model=ScriptedModel(support_model),
        tools=[lookup_order, check_return_policy],
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
