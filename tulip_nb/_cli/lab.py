"""``tulip-nb lab``: open JupyterLab on the project's notebooks (``--dry-run`` prints the command)."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tulip_nb.core.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("lab", help="open JupyterLab on the notebooks")
    parser.add_argument(
        "--notebooks", default="notebooks", help="directory of notebooks to open (default: %(default)s)"
    )
    parser.add_argument("--port", type=int, default=None, help="JupyterLab's port")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    parser.set_defaults(handler=run)


def command(notebooks: Path, port: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={notebooks}"]
    return cmd + ([f"--port={port}"] if port else [])


def run(args: argparse.Namespace) -> int:
    notebooks = Path(args.notebooks).resolve()
    if not notebooks.is_dir():
        raise UserError(f"no notebooks directory at {notebooks} (run from the project root or pass --notebooks)")
    cmd = command(notebooks, args.port)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    if importlib.util.find_spec("jupyterlab") is None:
        raise UserError("JupyterLab is not installed: pip install 'tulip_nb[notebook]'")
    return subprocess.call(cmd)
