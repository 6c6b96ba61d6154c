"""AuditTrail: decisions recorded by agent hooks, verified on their own, tampering found in place."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tulip_nb.agent import Agent
from tulip_nb.memory.audit import AuditTrail
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.memory.integrity import verify_thread
from tulip_nb.memory.store import InMemoryStore
from tulip_nb.models.scripted import ScriptedModel, text, tool_call
from tulip_nb.tools import Interrupt, tool


@tool
def lookup(order: str) -> dict[str, object]:
    """Look an order up."""
    return {"order": order, "total": 612.5}


@tool
def refund(order: str, amount: float) -> str:
    """Refund an order (asks a manager above $500)."""
    raise Interrupt("Refund over $500: approve?", payload={"amount": amount})


def _agent(cp: FileCheckpointer, audit: AuditTrail) -> Agent:
    model = ScriptedModel(
        [
            tool_call("lookup", order="ord-4821"),
            tool_call("refund", order="ord-4821", amount=612.5),
            text("Refunded."),
        ]
    )
    return Agent(model, tools=[lookup, refund], checkpointer=cp, hooks=[audit])


async def test_agent_decisions_are_recorded_and_verify(tmp_path: Path) -> None:
    audit = AuditTrail(tmp_path / "audit" / "t.jsonl")
    cp = FileCheckpointer(tmp_path / "threads")
    agent = _agent(cp, audit)
    first = await agent.run("Refund ord-4821?", thread_id="ticket")
    assert first.interrupt is not None
    await agent.resume("approved by M. Chen", thread_id="ticket")
    entries = await audit.entries()
    kinds = [e.kind for e in entries]
    assert kinds[:3] == ["tool_call", "interrupt", "checkpoint"]
    assert "interrupt_answer" in kinds and kinds[-1] == "checkpoint"
    call = entries[0].data
    assert call["tool"] == "lookup" and call["arguments"] == {"order": "ord-4821"}
    assert orjson.loads(call["result"]) == {"order": "ord-4821", "total": 612.5}  # as the model saw it
    answer = next(e for e in entries if e.kind == "interrupt_answer").data
    assert answer["response"] == "approved by M. Chen" and answer["question"].startswith("Refund over")
    assert (await audit.verify()).ok
    assert (await verify_thread(cp, "ticket")).ok
    # another process (a fresh trail on the same file) continues the chain
    again = AuditTrail(tmp_path / "audit" / "t.jsonl")
    await again.record("note", "ticket", {"by": "reviewer"})
    report = await again.verify()
    assert report.ok and report.entries == len(entries) + 1


@pytest.mark.parametrize("edit", ["data", "rehash", "delete", "swap"])
async def test_tampering_is_detected_at_that_entry(tmp_path: Path, edit: str) -> None:
    path = tmp_path / "a.jsonl"
    audit = AuditTrail(path, fsync=False)
    for i in range(6):
        await audit.record("tool_call", "t", {"tool": "refund", "arguments": {"amount": 100 + i}})
    lines = path.read_bytes().splitlines()
    entry = orjson.loads(lines[3])
    from tulip_nb.memory.audit import entry_hash

    if edit == "data":
        entry["data"]["arguments"]["amount"] = 1
        lines[3] = orjson.dumps(entry)
        where = 3
    elif edit == "rehash":  # the forger recomputes that entry's hash: the next one no longer links
        entry["data"]["arguments"]["amount"] = 1
        entry["hash"] = entry_hash(entry)
        lines[3] = orjson.dumps(entry)
        where = 4
    elif edit == "delete":
        del lines[3]
        where = 3
    else:
        lines[2], lines[3] = lines[3], lines[2]
        where = 2
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = await AuditTrail(path).verify()
    assert not report.ok and report.first_bad == where, report


async def test_torn_last_line_is_reported_then_cut(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    audit = AuditTrail(path)
    for i in range(3):
        await audit.record("tool_call", "t", {"i": i})
    with open(path, "ab") as f:  # noqa: ASYNC230
        f.write(b'{"seq": 3, "at": "2026')  # a crash mid-append
    report = await AuditTrail(path).verify()
    assert not report.ok and report.first_bad == 3
    await AuditTrail(path).record("tool_call", "t", {"i": 3})
    report = await AuditTrail(path).verify()
    assert report.ok and report.entries == 4


async def test_store_trail() -> None:
    store = InMemoryStore()
    audit = AuditTrail(store=store, namespace=("audit", "t"))
    for i in range(4):
        await audit.record("tool_call", "t", {"i": i})
    assert (await audit.verify()).ok
    item = await store.get(("audit", "t"), f"{1:012d}")
    item["data"]["i"] = 99
    await store.put(("audit", "t"), f"{1:012d}", item)
    report = await AuditTrail(store=store, namespace=("audit", "t")).verify()
    assert not report.ok and report.first_bad == 1
