"""OpenSearch, on the osmem-server emulator the tests start themselves (no real server here).

One emulator per test session: started on first use by :func:`opensearch_url` on a port it picks
itself (``-addr 127.0.0.1:0``; it prints its URL as the first line of JSON), stopped at exit. Its
stdin is a pipe we hold, so if pytest dies the emulator exits too. Each test gets a fresh index
(random name), deleted afterwards.

Needs ``pip install osmem-server opensearch-py aiohttp``; without them the tests skip (or fail
under ``TULIP_NB_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from ...conftest import REQUIRE_SERVICES
from . import Factory, Opener, opener

__all__ = ["FACTORIES", "drop_index", "new_index", "opensearch_url", "start_emulator", "stop_emulator"]

_emulator: dict[str, Any] = {}
_lock = threading.Lock()


def stop_emulator(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(Exception):
        if proc.stdin is not None:
            proc.stdin.close()  # the emulator exits when its stdin closes
    with contextlib.suppress(Exception):
        proc.terminate()
        proc.wait(timeout=5)
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=5)
    if proc.stdout is not None:
        proc.stdout.close()


def _require_modules() -> None:
    missing = [m for m in ("osmem_server", "opensearchpy", "aiohttp") if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (pip install osmem-server opensearch-py aiohttp)"
        if REQUIRE_SERVICES:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def start_emulator() -> tuple[subprocess.Popen[bytes], str]:
    """Start an osmem-server on a port it picks; (process, URL). Stop it with :func:`stop_emulator`."""
    import osmem_server

    proc = subprocess.Popen(
        [osmem_server.resolve_binary(), "-addr", "127.0.0.1:0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # {"url": "http://127.0.0.1:PORT", "pid": ..., ...}
    try:
        return proc, str(orjson.loads(line)["url"])
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        stop_emulator(proc)
        raise RuntimeError(f"osmem-server did not start: {line!r}") from e


def opensearch_url() -> str:
    """The URL of this session's osmem-server emulator, started on first call."""
    _require_modules()
    with _lock:
        if "url" not in _emulator:
            proc, url = start_emulator()
            atexit.register(stop_emulator, proc)
            _emulator.update(proc=proc, url=url)
        return str(_emulator["url"])


def new_index() -> str:
    return f"tnb-test-{uuid.uuid4().hex[:12]}"


async def drop_index(url: str, index: str) -> None:
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(hosts=[url])
    try:
        await client.indices.delete(index=index, params={"ignore_unavailable": "true"})
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def opensearch_backend(tmp_path: Path) -> AsyncIterator[Opener]:
    url = opensearch_url()
    from tulip_nb.memory.backends import opensearch_checkpointer

    index = new_index()
    try:
        yield opener(lambda: opensearch_checkpointer(hosts=[url], index_name=index))
    finally:
        await drop_index(url, index)


FACTORIES: dict[str, Factory] = {"opensearch": opensearch_backend}
