"""Thread views from the checkpoint headers: .checkpoints, .messages and fork(at=int) load no state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tulip_nb.agent import Agent
from tulip_nb.core.keys import MESSAGES_KEY
from tulip_nb.lab import fork, open_thread
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tokens import get_counter


class Counting(FileCheckpointer):
    """A FileCheckpointer that counts the states it loads."""

    loads = 0

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        type(self).loads += 1
        return await super().load_checkpoint(thread_id, checkpoint_id)


def lookup(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order id.
    """
    return f"{order_id}: delivered " + "x" * 50


async def _thread(cp: BaseCheckpointer, turns: int = 12) -> None:
    script: list[Any] = []
    for t in range(turns):
        script += [tool_call("lookup", order_id=f"o-{t}-{k}") for k in range(t % 3)] + [text(f"answer {t}")]
    agent = Agent(ScriptedModel(script), [lookup], checkpointer=cp, checkpoint_every_n_iterations=1)
    for t in range(turns):
        await agent.run(f"question {t}", thread_id="h")
    await agent.update_state("h", [*((await cp.load("h")) or _never()).messages[:-1]])  # an edit: not a prefix


def _never() -> Any:
    raise AssertionError("no state")


def _truth(cp: BaseCheckpointer) -> list[dict[str, Any]]:
    """The checkpoint rows computed the old way: every state loaded."""
    import asyncio

    async def rows() -> list[dict[str, Any]]:
        counter = get_counter()
        out = []
        for info in reversed(await cp.list_checkpoint_infos("h", None)):
            ck = await cp.load_checkpoint("h", info.checkpoint_id)
            assert ck is not None
            msgs = ck.state.messages
            out.append(
                {
                    "id": ck.checkpoint_id,
                    "iteration": ck.state.iteration,
                    "messages": len(msgs),
                    "tokens": sum(counter.message_counts(msgs)),
                }
            )
        return out

    return asyncio.run(rows())


def test_views_read_headers_only(tmp_path: Path) -> None:
    import asyncio

    cp = Counting(tmp_path)
    asyncio.run(_thread(cp))
    truth = _truth(FileCheckpointer(tmp_path))
    Counting.loads = 0
    t = open_thread(Counting(tmp_path), "h")
    assert Counting.loads == 1  # the latest
    frame = t.checkpoints
    assert frame[["id", "iteration", "messages", "tokens"]].to_dict("records") == truth
    messages = t.messages
    assert len(messages) == len(t.final_messages) and messages["checkpoint"].notna().all()
    # only what the headers cannot describe was loaded: the last turn end, whose final answer
    # the edit removed (so it is not a prefix of the latest); the edit itself is the latest
    assert Counting.loads == 2, Counting.loads
    before = Counting.loads
    branch = fork(t, at=5)
    assert Counting.loads - before == 1  # the new thread's own latest, nothing of the source
    assert branch.checkpoints.iloc[0]["parent"] in set(frame["id"])
    assert len(branch.final_messages) == 6


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_threads_without_marks_give_the_same_frames(kind: str, tmp_path: Path) -> None:
    """A thread written without the message mark (by tulip, say) is loaded, with the same result."""
    import asyncio

    source = FileCheckpointer(tmp_path / "src")
    asyncio.run(_thread(source))
    plain: BaseCheckpointer = MemoryCheckpointer() if kind == "memory" else FileCheckpointer(tmp_path / "plain")

    async def strip() -> None:
        for info in reversed(await source.list_checkpoint_infos("h", None)):
            ck = await source.load_checkpoint("h", info.checkpoint_id)
            assert ck is not None
            meta = {k: v for k, v in ck.metadata.items() if k != MESSAGES_KEY}
            await plain.put_checkpoint(Checkpoint(ck.checkpoint_id, "h", ck.created_at, ck.state, meta))

    asyncio.run(strip())
    marked, unmarked = open_thread(source, "h"), open_thread(plain, "h")
    cols = ["id", "parent", "iteration", "messages", "tokens", "source"]
    assert marked.checkpoints[cols].to_dict("records") == unmarked.checkpoints[cols].to_dict("records")
    assert marked.messages.to_dict("records") == unmarked.messages.to_dict("records")
    a, b = fork(marked, at=7), fork(unmarked, at=7)
    assert a.checkpoints.iloc[0]["parent"] == b.checkpoints.iloc[0]["parent"]
