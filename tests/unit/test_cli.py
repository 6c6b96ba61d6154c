"""The tulip-nb command line, through a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tulip_nb.core import UserError
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer, checkpointer_from_url


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tulip_nb.cli", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_help_lists_commands() -> None:
    out = cli("--help")
    assert out.returncode == 0 and "demo" in out.stdout


@pytest.mark.slow
def test_demo_command(tmp_path: Path) -> None:
    out = cli("demo", str(tmp_path / "threads"))
    assert out.returncode == 0, out.stderr
    assert "We concluded" in out.stdout
    assert list((tmp_path / "threads" / "ticket-8912-refund").glob("*.json"))


@pytest.mark.parametrize(
    ("url", "kind", "where"),
    [
        ("file:./x", FileCheckpointer, "x"),
        ("./y", FileCheckpointer, "y"),
        ("file:///tmp/z", FileCheckpointer, "/tmp/z"),
        ("memory:", MemoryCheckpointer, None),
    ],
)
def test_local_urls(url: str, kind: type, where: str | None) -> None:
    cp = checkpointer_from_url(url)
    assert isinstance(cp, kind)
    if where is not None:
        assert str(cp.base_dir) == where  # type: ignore[attr-defined]


def test_unknown_scheme_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="unknown checkpointer URL scheme 'ftp'"):
        checkpointer_from_url("ftp://host/x")
    with pytest.raises(UserError, match="needs a bucket"):
        checkpointer_from_url("s3:///prefix")
