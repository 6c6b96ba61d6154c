"""S3 (on moto's server) and HTTP (our checkpoint_app under uvicorn): servers the tests start.

Both servers run in this process on 127.0.0.1 and a free port, spoken to over real HTTP:

- one ``moto.server.ThreadedMotoServer`` for the whole session (started on first use, stopped at
  exit), a fresh bucket per test;
- one uvicorn server per test, serving :func:`tulip_nb.server.checkpoint_app` over a fresh
  :class:`MemoryCheckpointer`.

When moto, boto3, uvicorn, starlette or httpx is not installed the factory skips (or fails under
``TULIP_NB_REQUIRE_SERVICES=1``), naming the extra to install.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.memory.checkpointer import BaseCheckpointer

from ...conftest import REQUIRE_SERVICES
from . import Factory, Opener, opener

__all__ = ["FACTORIES", "free_port", "moto_endpoint", "serve_app", "skip_without"]


def skip_without(*modules: str, extra: str) -> None:
    """Skip (or fail under TULIP_NB_REQUIRE_SERVICES=1) when a module is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (pip install 'tulip_nb[{extra}]')"
        if REQUIRE_SERVICES:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_moto: dict[str, Any] = {}
_moto_lock = threading.Lock()


def moto_endpoint() -> str:
    """The URL of this session's moto S3 server, started on first call."""
    skip_without("moto", "flask", "boto3", extra="s3,dev")
    with _moto_lock:
        if "url" not in _moto:
            from moto.server import ThreadedMotoServer

            port = free_port()
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            server.start()
            atexit.register(server.stop)
            _moto.update(server=server, url=f"http://127.0.0.1:{port}")
        return str(_moto["url"])


S3_CREDENTIALS = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def new_bucket() -> str:
    return f"tnb-{uuid.uuid4().hex[:20]}"


@contextlib.asynccontextmanager
async def s3_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    url = moto_endpoint()
    from tulip_nb.memory.backends._s3 import S3Backend

    bucket = new_bucket()
    yield opener(lambda: S3Backend(bucket, endpoint_url=url, **S3_CREDENTIALS))


@contextlib.asynccontextmanager
async def s3_tulip_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    """S3 with every checkpoint projected as tulip's objects (``layout="tulip"``)."""
    url = moto_endpoint()
    from tulip_nb.memory.backends._s3 import S3Backend

    bucket = new_bucket()
    yield opener(lambda: S3Backend(bucket, endpoint_url=url, layout="tulip", **S3_CREDENTIALS))


@contextlib.contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Run an ASGI app under uvicorn on 127.0.0.1 in a thread; yield its base URL."""
    skip_without("uvicorn", "starlette", "httpx", extra="server")
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.asynccontextmanager
async def http_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    skip_without("uvicorn", "starlette", "httpx", extra="server")
    from tulip_nb.memory.backends import MemoryCheckpointer
    from tulip_nb.memory.backends.http import HTTPCheckpointer
    from tulip_nb.server import checkpoint_app

    with serve_app(checkpoint_app(MemoryCheckpointer())) as url:

        @contextlib.asynccontextmanager
        async def open_client() -> AsyncIterator[BaseCheckpointer]:
            async with HTTPCheckpointer(url) as cp:  # discovers the server's capabilities
                yield cp

        yield open_client


FACTORIES: dict[str, Factory] = {"s3": s3_backend, "s3-tulip": s3_tulip_backend, "http": http_backend}
