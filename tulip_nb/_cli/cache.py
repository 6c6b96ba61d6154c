"""``tulip-nb cache ls|prune|clear PATH``: list and trim a model response cache file.

A :class:`~tulip_nb.models.ModelCache` is one SQLite file (share it by copying). ``ls`` prints one
line per entry (created, model, epoch, size, key prefix) and a total; ``--model`` keeps one model's.
``prune`` deletes entries older than ``--older-than`` (``30d``, ``12h``, ``90m``, ``45s``) and/or of
``--model``; ``--dry-run`` lists them instead. ``clear`` deletes every entry. A path that does not
exist is an error (never an empty cache created by a typo)::

    tulip-nb cache ls notebooks/data/08_live_models.sqlite
    tulip-nb cache prune responses.sqlite --older-than 30d
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tulip_nb.core.errors import UserError

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("cache", help="list, prune or clear a model response cache file")
    sub = parser.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    ls = sub.add_parser("ls", help="list the entries")
    ls.add_argument("path", help="the cache file")
    ls.add_argument("--model", default=None, help="only this model's entries (e.g. openai:gpt-4o-mini)")
    prune = sub.add_parser("prune", help="delete old entries and/or one model's")
    prune.add_argument("path", help="the cache file")
    prune.add_argument("--older-than", default=None, metavar="AGE", help="e.g. 30d, 12h, 90m, 45s")
    prune.add_argument("--model", default=None, help="only this model's entries")
    prune.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    clear = sub.add_parser("clear", help="delete every entry")
    clear.add_argument("path", help="the cache file")
    parser.set_defaults(handler=run)


def parse_age(text: str) -> timedelta:
    """``"30d"`` -> 30 days (units s, m, h, d, w).

    >>> parse_age("12h"), parse_age("1.5d")
    (datetime.timedelta(seconds=43200), datetime.timedelta(days=1, seconds=43200))
    """
    found = _AGE.match(text)
    if not found:
        raise UserError(f"--older-than must look like 30d, 12h, 90m or 45s, got {text!r}")
    return timedelta(**{_UNITS[found.group(2)]: float(found.group(1))})


def _open(path: str) -> Any:
    from tulip_nb.models import ModelCache

    if not Path(path).is_file():
        raise UserError("no such cache file", path=path)
    return ModelCache(path)


def _line(e: Any) -> str:
    when = datetime.fromtimestamp(e.created, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{when}  {e.model}  epoch={e.epoch}  {e.size:,} B  {e.key[:16]}"


def run(args: argparse.Namespace) -> int:
    cache = _open(args.path)
    try:
        if args.cache_command == "ls":
            entries = cache.entries(args.model)
            for e in entries:
                print(_line(e))
            total = sum(e.size for e in entries)
            print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {total:,} B", file=sys.stderr)
        elif args.cache_command == "prune":
            age = parse_age(args.older_than) if args.older_than is not None else None
            if age is None and args.model is None:
                raise UserError("prune: give --older-than AGE and/or --model NAME (clear deletes everything)")
            if args.dry_run:
                cutoff = cache.clock() - age.total_seconds() if age is not None else None
                doomed = [e for e in cache.entries(args.model) if cutoff is None or e.created <= cutoff]
                for e in doomed:
                    print("would delete " + _line(e))
                print(f"would delete {len(doomed)} of {len(cache)} entries", file=sys.stderr)
            else:
                before = len(cache)
                n = cache.prune(older_than=age, model=args.model)
                print(f"deleted {n} of {before} entries", file=sys.stderr)
        else:
            n = cache.clear()
            print(f"deleted {n} entries", file=sys.stderr)
    finally:
        cache.close()
    return 0
