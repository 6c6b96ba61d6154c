"""Token accounting and LLMCompactor cost at 2000 messages, beside tulip-agents in the same run.

    python -m bench.bench_tokens [--repeat 7]

Prints a Markdown table of medians (ms). Machines here are shared and noisy: compare ratios
taken in one run, not absolute times across runs (see /work/shared/BENCH.md).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.workload import build_conversation, to_tulip_messages
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.tokens import TokenCounter, get_counter


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def measure(n: int = 2000, repeat: int = 7) -> tuple[list[tuple[str, str, float]], int]:
    """The rows ``(measure, implementation, median ms)`` at ``n`` messages, and the thread's tokens."""
    msgs = build_conversation(n)
    counter = get_counter("gpt-4o")
    enc = counter._encoder
    assert enc is not None, "needs tiktoken (pip install 'tulip_nb[tokens]')"

    rows: list[tuple[str, str, float]] = []
    whole = median_ms(lambda: sum(counter._count_uncached(m) for m in msgs), repeat)
    rows.append(("count whole thread, tiktoken, no cache", "tulip_nb", whole))
    cold = TokenCounter("o200k_base")
    first = median_ms(lambda: cold.count_messages(msgs), 1)
    rows.append(("count whole thread, first time (fills cache)", "tulip_nb", first))
    counter.count_messages(msgs)
    warm = median_ms(lambda: counter.count_messages(msgs), repeat)
    rows.append(("count whole thread, per-message cache warm", "tulip_nb", warm))
    new = [*msgs, msgs[5].model_copy(update={"content": "one more message"})]
    rows.append(("count before a call (1 new message)", "tulip_nb", median_ms(lambda: counter.count_messages(new), 1)))

    ours = median_ms(lambda: LLMCompactor(context_length=128_000).apply(msgs), repeat)
    rows.append(("LLMCompactor call, fresh plan (warm counts)", "tulip_nb", ours))
    steady = LLMCompactor(context_length=128_000)
    steady.apply(msgs)
    rows.append(
        (
            "LLMCompactor call, plan kept (between compactions)",
            "tulip_nb",
            median_ms(lambda: steady.apply(msgs), repeat),
        )
    )

    from tulip.memory.compactor import LLMCompactor as TulipCompactor

    tmsgs = to_tulip_messages(msgs)
    tk = TulipCompactor(context_length=128_000, token_counter=tiktoken_counter(enc))
    rows.append(
        (
            "LLMCompactor call (tiktoken counter)",
            "tulip-agents 2.28",
            median_ms(lambda: tk.apply(tmsgs), max(3, repeat // 2)),
        )
    )
    ch = TulipCompactor(context_length=128_000)
    rows.append(("LLMCompactor call (char/4 counter)", "tulip-agents 2.28", median_ms(lambda: ch.apply(tmsgs), repeat)))
    return rows, counter.count_messages(msgs)


def tiktoken_counter(enc: Any) -> Callable[[object], int]:
    """An exact counter for tulip-agents' ``token_counter=`` (tiktoken over text and tool calls)."""

    def tiktoken_count(m: object) -> int:
        text = (getattr(m, "content", None) or "") + "".join(
            f"{c.name}{c.arguments}" for c in (getattr(m, "tool_calls", None) or [])
        )
        return 3 + len(enc.encode(text, disallowed_special=()))

    return tiktoken_count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()
    rows, tokens = measure(args.messages, args.repeat)
    print(f"\n{args.messages} messages, {tokens:,} o200k tokens, median of {args.repeat}\n")
    print("| measure | implementation | median ms |")
    print("|---|---|---|")
    for name, impl, ms in rows:
        print(f"| {name} | {impl} | {ms:.2f} |")


if __name__ == "__main__":
    main()
