"""MemoryCheckpointer keeps one copy of a conversation however often it is saved (issue: storage)."""

from __future__ import annotations

import gc
import tracemalloc

from bench.workload import build_conversation, iteration_ends
from tulip_nb.core import AgentState, state_json_bytes
from tulip_nb.memory.backends import MemoryCheckpointer


async def test_every_save_of_a_conversation_shares_its_messages() -> None:
    """The 2000-message conversation saved after each model call holds ~1x its messages in RAM."""
    msgs = build_conversation(2000)
    ends = iteration_ends(msgs)
    cp = MemoryCheckpointer(sign=False)  # signing is measured elsewhere; this is about the states
    state = AgentState(messages=[])
    size = len(state_json_bytes(AgentState(messages=msgs)))
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        done = 0
        for end in ends:
            state.messages.extend(msgs[done:end])
            done = end
            await cp.save(state, "conv")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    saves = len(await cp.list_checkpoints("conv", limit=None))
    print(f"{saves} saves of {size / 1e6:.2f} MB of messages hold {held / 1e6:.2f} MB")
    assert saves == len(ends) > 900
    # The messages were allocated before tracing: what is held is per-save bookkeeping, about
    # 2 kB a checkpoint (the state's other fields, the save metadata), never a copy of the history
    # (a list of references per checkpoint alone would be ~7.5 MB here).
    assert held < 1.5 * size, f"{held} bytes held for {saves} saves of {size} bytes of messages"
