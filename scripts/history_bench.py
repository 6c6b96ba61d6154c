"""Figures for issue 26: the history layout beside the peers, on the issue's workload.

A thin front for the bench's ``conversation`` section (:mod:`bench.bench_conversation`, where the
cases live; the workload is :mod:`bench.research`): the offline research agent of
``storage_growth.py`` (300 turns, 2-3 tool rounds of 1-3 kB each, a save after every model call),
recorded once as the sequence of saves it makes, then replayed into every store with message
objects of its own, interleaved save by save in rotating order, ``--rounds`` times:

- ``FileCheckpointer(base, layout="history")`` (SQLite WAL, synchronous=FULL), fsync on and off;
- history with fresh message objects at every save, beside tulip-agents' FileCheckpointer (the
  "faster than tulip-agents" ratio without the serialisation cache);
- OpenAI Agents ``SQLiteSession`` and LangGraph ``SqliteSaver`` + ``DeltaChannel``, run in
  ``--peers-python`` (a separate venv; :mod:`bench.peers`);
- the floor: append the new messages' JSON + fdatasync.

Reported per case: the durable conversation (sum of the save calls), disk after close divided by
the messages' JSON, load latest from a fresh instance, and the same-run ratios against the issue's
targets. Fork and copy (at 500 and 2,000 messages) are the bench's ``forks`` section::

    python scripts/history_bench.py --peers-python /tmp/peers-venv/bin/python
    python -m bench --sections conversation,checkpoints10k,forks --peers-python /tmp/peers-venv/bin/python
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_conversation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300, help="the workload's turns (the issue's: 300)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loads", type=int, default=7, help="fresh-instance loads per case and round")
    parser.add_argument("--peers-python", default=None, help="a python with openai-agents and langgraph installed")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="history_bench_"))
    try:
        got = bench_conversation.measure(tmp, args.rounds, args.loads, args.peers_python, args.turns)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n".join(bench_conversation.tables(got)))


if __name__ == "__main__":
    main()
