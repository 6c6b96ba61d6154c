"""The ``tulip-nb`` command line.

Each subcommand lives in its own module under :mod:`tulip_nb._cli` with a
``register(subparsers)`` function that adds its parser and sets ``handler`` (a function of the
parsed arguments returning an exit code). Handlers import what they need when they run, so
``tulip-nb --help`` stays fast and never imports an optional stack.

Every ``TulipNBError`` prints one line to stderr, never a traceback: errors a user can fix (a bad
URL, an unknown thread, a missing extra such as ``pip install 'tulip_nb[notebook]'``) exit 2; a
storage outage exits 3. Exit 1 is a command's own "not clean" answer (``diff``: the threads differ;
``export``: a thread failed).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tulip_nb.core.errors import BackendUnavailable, TulipNBError

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: tuple[str, ...] = (
    "demo",
    "export",
    "serve",
    "threads",
    "diff",
    "verify",
    "prune",
    "convert",
    "lab",
    "cache",
    "share",
)
"""Modules under ``tulip_nb._cli`` that register a subcommand, in --help order."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tulip-nb",
        description="Research tools for durable agent conversations (threads, checkpoints, replay).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tulip_nb._cli.{name}").register(subparsers)
    return parser


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except BackendUnavailable as e:
        print(f"tulip-nb {args.command}: storage unavailable: {_one_line(e)}", file=sys.stderr)
        return 3
    except (TulipNBError, ValueError, OSError) as e:
        print(f"tulip-nb {args.command}: {_one_line(e)}", file=sys.stderr)
        return 2
    except ImportError as e:  # an optional module outside tulip_nb's own guards
        print(f"tulip-nb {args.command}: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
