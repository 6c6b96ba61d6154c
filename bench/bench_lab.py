"""The research layer (tulip_nb.lab) at 2000 messages, against the issue's targets.

    python -m bench.bench_lab [--repeat 5]

Prints a Markdown table of medians (ms). tulip-agents has no research layer, so there is no peer
column. Token counts are warm (each message counted once before, as an agent that wrote the thread
did) unless the row says cold. Machines here are shared and noisy: quote medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable

from bench.workload import build_conversation, build_state
from tulip_nb.core import AgentState
from tulip_nb.lab import diff_threads, open_thread, simulate_compaction
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.compactor import STATE_KEY, LLMCompactor, NullManager, SlidingWindowManager
from tulip_nb.tokens import TokenCounter, get_counter


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def grid_configs() -> dict[str, object]:
    """What compaction_grid sweeps by default, at a 128k window: 5 triggers x 2 tails."""
    return {
        f"t{tf} tail{tail}": LLMCompactor(context_length=128_000, trigger_fraction=tf, tail_token_fraction=tail)
        for tf in (0.6, 0.7, 0.8, 0.9, 0.95)
        for tail in (0.2, 0.4)
    }


def degenerate_configs() -> dict[str, object]:
    """The old grid: half its configs keep a tail (0.5) at or above the trigger, so they compact
    on every call and the manager's own O(n) compaction dominates."""
    return {
        f"t{tf} tail{tail}": LLMCompactor(context_length=128_000, trigger_fraction=tf, tail_token_fraction=tail)
        for tf in (0.5, 0.6, 0.7, 0.8, 0.9)
        for tail in (0.3, 0.5)
    }


def mixed_configs() -> dict[str, object]:
    """Harder: small windows (a compaction every few calls), a summariser, a sliding window."""
    out: dict[str, object] = {
        f"{cl // 1000}k t{tf}": LLMCompactor(context_length=cl, trigger_fraction=tf)
        for cl in (32_000, 64_000, 128_000)
        for tf in (0.6, 0.8)
    }
    out["32k summary"] = LLMCompactor(context_length=32_000, summarize_fn=lambda m, p: "s")
    out["64k ttl 0"] = LLMCompactor(context_length=64_000, tool_output_ttl_turns=0)
    out["null"] = NullManager()
    out["window 40"] = SlidingWindowManager(window_size=40)
    return out


async def _as_agent_saves(state: AgentState) -> None:
    """Run the default manager over ``state``'s calls as the agent does (its state lands in the metadata)."""
    manager = LLMCompactor(context_length=128_000)
    msgs = list(state.messages)
    for j, m in enumerate(msgs):
        if m.role == "assistant":
            await manager.aapply(msgs[:j], state=state)
    state.metadata[STATE_KEY] = manager.get_state()  # as the agent does before each save


def measure(rep: int = 5, *, per_config: bool = True) -> list[tuple[str, float, str]]:
    """Rows ``(measure, median ms, target)`` at 2000 messages (``per_config``: one row per mixed config)."""
    state = build_state(2000)
    get_counter().message_counts(state.messages)  # warm: the agent that wrote it counted them
    rows: list[tuple[str, float, str]] = []

    # -- open_thread + messages DataFrame ---------------------------------------------------------
    mem = MemoryCheckpointer()
    asyncio.run(mem.save(state, "one"))
    msgs = state.messages
    ends = [*[j for j, m in enumerate(msgs) if j and m.role == "user"][::40], len(msgs)]
    for end in ends:  # a thread saved at turn ends every ~40 turns (10 checkpoints)
        asyncio.run(mem.save(AgentState(messages=msgs[:end]), "ten"))
    rows.append(
        (
            "open_thread + .messages, Memory, 1 checkpoint",
            median_ms(lambda: open_thread(mem, "one").messages, rep),
            "<= 100",
        )
    )
    rows.append(
        (
            f"open_thread + .messages, Memory, {len(ends)} checkpoints",
            median_ms(lambda: open_thread(mem, "ten").messages, rep),
            "<= 100",
        )
    )
    rows.append(
        (
            "open_thread + .messages, Memory, 1 checkpoint, cold token cache",
            median_ms(lambda: open_thread(mem, "one", counter=TokenCounter("o200k_base")).messages, 3),
            "<= 100",
        )
    )
    # The same thread as an agent leaves it: its manager's state carries the exact per-message counts.
    agent_state = AgentState(messages=list(msgs))
    asyncio.run(_as_agent_saves(agent_state))
    mem2 = MemoryCheckpointer()
    asyncio.run(mem2.save(agent_state, "agent"))
    with tempfile.TemporaryDirectory() as d:
        fcp2 = FileCheckpointer(d, fsync=False)
        asyncio.run(fcp2.save(agent_state, "agent"))
        rows.append(
            (
                "open_thread + .messages, File, cold token cache, thread saved by an agent (counts saved with it)",
                median_ms(
                    lambda: open_thread(FileCheckpointer(d), "agent", counter=TokenCounter("o200k_base")).messages, 3
                ),
                "<= 100",
            )
        )
    with tempfile.TemporaryDirectory() as d:
        fcp = FileCheckpointer(d, fsync=False)
        asyncio.run(fcp.save(state, "one"))
        rows.append(
            (
                "open_thread + .messages, File, 1 checkpoint",
                median_ms(lambda: open_thread(FileCheckpointer(d), "one").messages, rep),
                "<= 100",
            )
        )

    # -- diff of two 2000-message threads ---------------------------------------------------------
    other = build_conversation(2000, seed=1)
    branch = AgentState(messages=[*msgs[:1000], msgs[1000].model_copy(update={"content": "edited"}), *other[1001:2000]])
    cp = MemoryCheckpointer()
    asyncio.run(cp.save(state, "a"))
    base = open_thread(cp, "a")
    asyncio.run(cp.save(branch, "b", metadata={"forked_from": "a", "parent_checkpoint_id": base.latest.checkpoint_id}))
    a, b = base, open_thread(cp, "b")
    get_counter().message_counts(b.final_messages)
    d = diff_threads(a, b)
    rows.append(
        (
            f"diff_threads, 2000 vs 2000 messages, diverge at 1000 ({len(d.changes)} rows)",
            median_ms(lambda: diff_threads(a, b), rep),
            "<= 200",
        )
    )
    rows.append(("diff_threads + .to_frame()", median_ms(lambda: diff_threads(a, b).to_frame(), rep), "—"))

    # -- simulator --------------------------------------------------------------------------------
    for label, make in (
        ("default grid: 10 LLMCompactor configs at 128k", grid_configs),
        ("mixed: 32k-128k, summariser, null, window 40", mixed_configs),
    ):
        rows.append(
            (
                f"simulate_compaction, 10 configs, {label}",
                median_ms(lambda make=make: simulate_compaction(state, make()), max(3, rep // 2)),
                "<= 1000",
            )
        )
    for name, mgr in mixed_configs().items() if per_config else ():
        rows.append(
            (f"  one config: {name}", median_ms(lambda mgr=mgr: simulate_compaction(state, {"x": mgr}), 3), "—")
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rep = args.repeat
    rows = measure(rep)
    print(f"### lab (2000 messages; medians of {rep} runs)\n")
    print("| measure | tulip_nb (ms) | target (ms) | tulip-agents |")
    print("|---|---:|---:|---|")
    for label, ms, target in rows:
        print(f"| {label} | {ms:.1f} | {target} | N/A (no lab) |")


if __name__ == "__main__":
    main()
