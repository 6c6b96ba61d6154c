"""Outages, a full disk, read-only storage: a clear error naming the store, the last good
checkpoint intact, and saving resumes once the fault clears.

Servers here are private (started by the fixtures) so they can be killed; the shared ones of
services.md are never touched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import BackendUnavailable
from tulip_nb.memory.backends import FileCheckpointer, checkpointer_from_url
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.memory.integrity import verify_thread

from .conftest import ITERATIONS, RedisServer, pg_restart, pg_stop, record_figure


def _state(n: int) -> AgentState:
    return AgentState(messages=[Message.user(f"turn {i}") for i in range(n)], metadata={"n": n})


async def _outage_round(cp: BaseCheckpointer, thread: str, n: int, stop: Any, start: Any, name: str) -> None:
    """Save, stop the server, fail clearly, restart, find the last good checkpoint, save again."""
    good = await cp.save(_state(n), thread)
    stop()
    with pytest.raises(BackendUnavailable, match=name):
        await cp.save(_state(n + 1), thread)
    with pytest.raises(BackendUnavailable, match=name):
        await cp.load(thread)
    start()
    ckpt = None
    for _ in range(50):  # a pool may hand out one dead connection after the restart
        try:
            ckpt = await cp.load_checkpoint(thread)
            break
        except BackendUnavailable:
            continue
    assert ckpt is not None and ckpt.checkpoint_id == good and ckpt.state.metadata["n"] == n
    assert (await verify_thread(cp, thread)).ok
    assert await cp.save(_state(n + 2), thread, expected_parent=good)
    record_figure("faults", 1)


async def test_redis_outage(tmp_path: Path) -> None:
    from tests.backends.factories.remote import free_port

    data = tmp_path / "redis"
    data.mkdir()
    server = RedisServer(free_port())
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed")

    def start() -> None:  # AOF with fsync always: a killed server keeps what it acknowledged
        server.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(server.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(data),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        from .conftest import _wait_port

        _wait_port(server.port, up=True)

    start()
    cp = checkpointer_from_url(server.url)
    try:
        for i in range(max(2, ITERATIONS // 5)):
            await _outage_round(cp, "t", i + 1, server.stop, start, "Redis")
    finally:
        await cp.close()
        server.stop()


async def test_postgresql_outage(private_pg: Any) -> None:
    cp = checkpointer_from_url(private_pg.dsn() + "?table_name=faults")
    try:
        for i in range(max(2, ITERATIONS // 10)):
            await _outage_round(
                cp, "t", i + 1, lambda: pg_stop(private_pg), lambda: pg_restart(private_pg), "PostgreSQL"
            )
    finally:
        await cp.close()


async def test_s3_outage(private_moto: Any) -> None:
    """moto keeps nothing across a restart: the error and the recovery of the client are checked."""
    from tests.backends.factories.remote import S3_CREDENTIALS
    from tulip_nb.memory.backends._s3 import S3Backend

    cp = S3Backend("faults", endpoint_url=private_moto.endpoint, max_attempts=1, connect_timeout=1, **S3_CREDENTIALS)
    try:
        await cp.save(_state(1), "t")
        private_moto.stop()
        with pytest.raises(BackendUnavailable, match="S3Backend"):
            await cp.save(_state(2), "t")
        with pytest.raises(BackendUnavailable, match="S3Backend"):
            await cp.load("t")
        private_moto.start()
        with pytest.raises(BackendUnavailable, match="NoSuchBucket"):  # a new, empty moto: said so
            await cp.load("t")
        import boto3

        boto3.client("s3", endpoint_url=private_moto.endpoint, **S3_CREDENTIALS).create_bucket(Bucket="faults")
        cid = await cp.save(_state(3), "t")  # the same client works again, on the empty store:
        ckpt = await cp.load_checkpoint("t")  # its stale head pointer is re-read, not trusted
        assert ckpt is not None and ckpt.checkpoint_id == cid and ckpt.parent_checkpoint_id is None
        assert (await verify_thread(cp, "t")).ok
        record_figure("faults", 1)
    finally:
        await cp.close()


# -- disk full, read-only ------------------------------------------------------------------------------
@contextlib.contextmanager
def _inject(monkeypatch: Any, name: str, code: int) -> Iterator[None]:
    real = getattr(os, name)

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, name, failing)
    try:
        yield
    finally:
        monkeypatch.setattr(os, name, real)


@pytest.mark.parametrize("layout", ["history", "tulip"])
@pytest.mark.parametrize(("call", "code"), [("writev", errno.ENOSPC), ("open", errno.EROFS), ("rename", errno.EACCES)])
async def test_a_failed_tulip_envelope_never_fails_a_committed_save(
    tmp_path: Path, monkeypatch: Any, call: str, code: int, layout: Any
) -> None:
    """The save is the SQLite commit; tulip's envelope is written after it. A fault there (a full
    disk, a read-only or unwritable directory) is a warning (a save reported failed would be
    retried: a duplicate turn), and the envelope is repaired when the thread is next opened; the
    last good checkpoint stays what a fresh instance loads until then."""
    cp = FileCheckpointer(tmp_path, layout=layout)
    first = await cp.save(_state(3), "t")
    with _inject(monkeypatch, call, code), pytest.warns(RuntimeWarning) as seen:
        new = await cp.save(_state(4), "t")
    assert any("could not be written" in str(w.message) and errno.errorcode[code] in str(w.message) for w in seen)
    fresh = FileCheckpointer(tmp_path, layout=layout)
    ckpt = await fresh.load_checkpoint("t")
    assert ckpt is not None and ckpt.checkpoint_id == new
    assert fresh.check_mirror("t") == []  # repaired on first touch
    names = sorted(p.name for p in (tmp_path / "t").iterdir())  # no temp file left
    assert names == (sorted([f"{new}.json", f"{first}.json"]) if layout == "tulip" else [f"{new}.json"])
    assert (await verify_thread(fresh, "t")).ok
    assert await cp.save(_state(5), "t", expected_parent=new)
    record_figure("faults", 1)


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)):
        pytest.skip("cannot mount a tmpfs here (needs root and mount rights)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


_ENVELOPE_WARNING = "ignore:tulip_nb. tulip's envelope:RuntimeWarning"  # history: the envelope fills the disk first


@pytest.mark.filterwarnings(_ENVELOPE_WARNING)
@pytest.mark.parametrize("layout", ["history", "tulip"])
async def test_real_full_disk_and_read_only_remount(tiny_tmpfs: Path, layout: Any) -> None:
    cp = FileCheckpointer(tiny_tmpfs, layout=layout)
    # SQLite writes a delete to its WAL first: on a disk full to the last byte the history store
    # cannot delete (docs/history-model.md), so here the user frees room by removing another file
    filler = tiny_tmpfs / "other-file"
    filler.write_bytes(b"\0" * 300_000)
    state = AgentState(messages=[Message.system("s")])
    good = None
    with pytest.raises(BackendUnavailable, match="ENOSPC"):
        for i in range(1000):
            state.messages.append(Message.user(f"{i}:" + "x" * 20_000))
            good = await cp.save(state, "t")
    fresh = FileCheckpointer(tiny_tmpfs, layout=layout)
    ckpt = await fresh.load_checkpoint("t")
    assert ckpt is not None and ckpt.checkpoint_id == good
    assert (await verify_thread(fresh, "t", limit=5)).ok
    await fresh.close()  # an open database, even deleted, keeps a mount from going read-only
    # free space, then make the mount read-only (root ignores file modes; a ro mount does not)
    filler.unlink()
    await cp.delete("t")
    good = await cp.save(_state(2), "t")
    await cp.close()  # the open database is a file open for writing: a mount with one cannot go read-only
    assert _mount("-o", "remount,ro", str(tiny_tmpfs))
    try:
        with pytest.raises(BackendUnavailable, match="EROFS"):
            await cp.save(_state(3), "t")
        assert (await FileCheckpointer(tiny_tmpfs, layout=layout).load_checkpoint("t")).checkpoint_id == good  # type: ignore[union-attr]
    finally:
        assert _mount("-o", "remount,rw", str(tiny_tmpfs))
    assert await cp.save(_state(4), "t", expected_parent=good)
    record_figure("faults", 2)
