"""Issue 25's figures on generated messy threads: replay divergences, turn outcomes, the simulator
against the record, a one-row system-prompt diff — on a 300-turn thread and a corpus.

    python scripts/messy_lab.py build STORE [--threads 200] [--turns 50] [--long 300] [--every 1]
    python scripts/messy_lab.py replay STORE                              # per-thread divergences

STORE is a directory (the file store) or a checkpointer URL (``postgresql://...``, ``redis://...``).

``replay`` runs with whatever tulip_nb is importable, so the same store can be replayed by an older
release (``PYTHONPATH=/path/to/old/checkout python scripts/messy_lab.py replay DIR``) for a
before/after. Prints one line per figure; nothing is timed as a pass/fail.
"""

from __future__ import annotations

import argparse
import time


def _open(store: str):  # type: ignore[no-untyped-def]
    from tulip_nb.memory.backends import checkpointer_from_url

    return checkpointer_from_url(store if "://" in store else f"file:{store}")


def build(store: str, threads: int, turns: int, long_turns: int, every: int | None) -> None:
    from tulip_nb.testing import MessySpec, build_messy_corpus, build_messy_thread

    cp = _open(store)
    t0 = time.perf_counter()
    long = build_messy_thread(cp, "long-300", MessySpec(seed=1, turns=long_turns, forks=2, checkpoint_every=every))
    print(f"{long_turns}-turn thread: {long.n_messages} messages, outcomes {long.outcome_counts()}")
    spec = MessySpec(seed=2, turns=turns, forks=1, checkpoint_every=every)
    made = build_messy_corpus(cp, threads, spec, prefix="corpus")
    failed = sum(1 for m in made for t in m.turns if t.outcome not in ("answered", "tulip"))
    total = sum(len(m.turns) for m in made)
    print(
        f"corpus: {len(made)} threads (+{sum(len(m.forks) for m in made)} forks), {total} turns, "
        f"{failed} ended without an answer ({failed / total:.1%}); built in {time.perf_counter() - t0:.0f} s"
    )


def replay(store: str) -> None:
    from tulip_nb._sync import run_sync
    from tulip_nb.lab import Replay, open_thread

    cp = _open(store)
    ids = sorted(run_sync(cp.list_threads(limit=None)))
    with_div = 0
    total = 0
    long_div = None
    t0 = time.perf_counter()
    for tid in ids:
        rp = Replay(open_thread(cp, tid))
        rp.run_to()
        n = len(rp.divergences)
        total += n
        with_div += n > 0
        if tid == "long-300":
            long_div = n
    print(
        f"replay: 300-turn thread {long_div} divergences; {with_div} of {len(ids)} threads diverge "
        f"({with_div / len(ids):.0%}), {total} divergences in all; {time.perf_counter() - t0:.0f} s"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["build", "replay"])
    p.add_argument("store")
    p.add_argument("--threads", type=int, default=200)
    p.add_argument("--turns", type=int, default=50)
    p.add_argument("--long", type=int, default=300, help="turns of the long thread")
    p.add_argument("--every", type=int, default=1, help="checkpoint every N iterations (0: turn ends only)")
    a = p.parse_args()
    if a.what == "build":
        build(a.store, a.threads, a.turns, a.long, a.every or None)
    else:
        replay(a.store)


if __name__ == "__main__":
    main()
