"""Child-process bodies for the reliability suites (started through a forkserver, then killed).

Each runs its own event loop and its own checkpointer, and reports progress through a shared
integer (``acked``) so the parent knows which saves were acknowledged before it sent SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import CheckpointConflict
from tulip_nb.memory.backends import checkpointer_from_url

KEEP = 60  # messages kept per state: the thread slides instead of growing without bound


def body(n: int, rng: random.Random) -> str:
    """Message ``n``'s content: its number, a random-length filler and an end marker."""
    return f"m{n}:" + "x" * rng.randint(200, 12_000) + f":end{n}"


def whole(state: AgentState) -> bool:
    """The invariant a half-written checkpoint would break: counter, length and markers agree."""
    n = state.metadata.get("n")
    if not isinstance(n, int) or not state.messages:
        return False
    last = state.messages[-1].content or ""
    return last.startswith(f"m{n}:") and last.endswith(f":end{n}") and state.iteration == n


async def _save_loop(url: str, thread_id: str, acked: Any, seed: int) -> None:
    rng = random.Random(seed)
    cp = checkpointer_from_url(url)
    try:
        state = await cp.load(thread_id) or AgentState(messages=[Message.system("reliability")])
        n = state.metadata.get("n", 0)
        while True:
            n += 1
            state.messages.append(Message.user(body(n, rng)))
            if len(state.messages) > KEEP:
                state.messages = [state.messages[0], *state.messages[-KEEP // 2 :]]
            state.metadata["n"] = n
            state.iteration = n
            await cp.save(state, thread_id)
            acked.value = n
    finally:
        await cp.close()


def save_loop(url: str, thread_id: str, acked: Any, seed: int) -> None:
    """Save a growing thread as fast as possible until killed."""
    asyncio.run(_save_loop(url, thread_id, acked, seed))


async def _hammer(url: str, worker: int, threads: int, saves: int, shared: str, out: str) -> None:
    """``threads`` own threads (plain saves) + one shared thread (compare-and-swap saves)."""
    cp = checkpointer_from_url(url)
    own: list[str] = []
    conflicts = 0
    shared_ok: list[str] = []
    try:

        async def own_thread(t: int) -> None:
            state = AgentState()
            for i in range(saves):
                state.messages.append(Message.user(f"w{worker} t{t} s{i}"))
                own.append(await cp.save(state, f"own-{worker}-{t}", metadata={"i": i}))

        async def shared_thread() -> None:
            nonlocal conflicts
            for i in range(saves):
                latest = await cp.load_checkpoint(shared)
                state = latest.state if latest else AgentState()
                state.messages.append(Message.user(f"w{worker} s{i}"))
                try:
                    cid = await cp.save(
                        state,
                        shared,
                        metadata={"w": worker, "i": i},
                        expected_parent=latest.checkpoint_id if latest else "",
                    )
                    shared_ok.append(cid)
                except CheckpointConflict:
                    conflicts += 1

        await asyncio.gather(*(own_thread(t) for t in range(threads)), shared_thread())
    finally:
        await cp.close()
    Path(out).write_text(" ".join([str(conflicts), *shared_ok]) + "\n" + " ".join(own))  # noqa: ASYNC240


def hammer(url: str, worker: int, threads: int, saves: int, shared: str, out: str) -> None:
    asyncio.run(_hammer(url, worker, threads, saves, shared, out))


# -- an agent killed mid-run ----------------------------------------------------------------------
TOTAL_EFFECTS = 12


def _model_reply(messages: list[Message]) -> Message:
    """Call ``effect(i)`` for the next i, re-asking for ``i - 1`` too (an idempotent repeat)."""
    from tulip_nb.core._messages import ToolCall

    done = sum(1 for m in messages if m.role == "tool")
    i = len([m for m in messages if m.role == "assistant" and m.tool_calls])
    if i >= TOTAL_EFFECTS:
        return Message.assistant(f"all {done} effects done")
    calls = [ToolCall(id=f"c{i}", name="effect", arguments={"i": i})]
    if i > 0:
        calls.append(ToolCall(id=f"c{i}r", name="effect", arguments={"i": i - 1}))
    return Message.assistant(None, calls)


async def _agent_loop(directory: str, thread_id: str, ledger: str, resume: bool) -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends.file import FileCheckpointer
    from tulip_nb.models.scripted import ScriptedModel
    from tulip_nb.tools import tool

    @tool(idempotent=True)
    async def effect(i: int) -> str:
        """A side effect: append to the ledger (durably), then take a while."""
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{i}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        # long enough that a run outlasts the test's kill window (0.03-0.25 s) on a fast disk
        await asyncio.sleep(0.05)
        return f"effect {i} done"

    agent = Agent(
        ScriptedModel(_model_reply),
        tools=[effect],
        checkpointer=FileCheckpointer(directory),
        checkpoint_every_n_iterations=1,
        max_iterations=TOTAL_EFFECTS + 5,
    )
    if resume:
        await agent.resume(thread_id=thread_id)
    else:
        await agent.run("do the effects", thread_id=thread_id)


def agent_loop(directory: str, thread_id: str, ledger: str, resume: bool) -> None:
    asyncio.run(_agent_loop(directory, thread_id, ledger, resume))
