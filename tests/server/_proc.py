"""Start ``tulip-nb serve`` as a real process on a free loopback port, and stop it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.backends.factories.remote import free_port
from tests.conftest import ROOT


@contextlib.contextmanager
def serve(
    *args: str, log_dir: Path, env: dict[str, str] | None = None, timeout: float = 30.0
) -> Iterator[tuple[str, int]]:
    """Run ``tulip-nb serve ARGS --port <free>``; yield (base URL, pid) once /health answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "tulip_nb.cli", "serve", *args, "--port", str(port)]
    full_env = dict(os.environ)
    full_env.pop("TULIP_NB_SERVER_API_KEY", None)
    full_env.update(env or {})
    out = (log_dir / f"serve-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"serve exited with {proc.returncode}: {(log_dir / f'serve-{port}.log').read_text()}"
                )
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("serve did not come up in time")
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its workers (its own session)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out.close()


def children(pid: int) -> list[int]:
    """Child process ids of ``pid`` (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found
