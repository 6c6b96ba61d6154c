"""``tulip-nb demo``: the offline two-process agent conversation of the README's quick start."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="run the offline refund-case demo (two processes, file checkpointer)")
    parser.add_argument(
        "directory", nargs="?", default="demo_threads", help="where to keep the thread (default: %(default)s)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tulip_nb._demo import main

    return main([args.directory])
