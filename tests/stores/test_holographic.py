"""HolographicStore specifics: durability across processes, concurrent writers, the event loop, tulip files."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tulip_nb.core.errors import UserError
from tulip_nb.memory.store_backends import HolographicStore

NS = ("t1", "memory")


def run_py(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


async def test_data_survives_a_process_restart(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    writer = """
        import asyncio, sys
        from tulip_nb.memory.store_backends import HolographicStore

        async def main():
            async with HolographicStore(sys.argv[1]) as store:
                await store.put(("t1", "memory"), "fact", {"content": "prefers store credit"}, {"src": "case-1"})
                await store.put_with_embedding(("t1", "memory"), "vec", {"content": "v"}, [0.6, 0.8])
                await store.put(("t1", "memory"), "fact", {"content": "prefers store credit (confirmed)"})

        asyncio.run(main())
    """
    finish(run_py(writer, str(path)))
    async with HolographicStore(path) as store:
        item = await store.get_item(NS, "fact")
        assert item is not None and item.version == 2
        assert item.value == {"content": "prefers store credit (confirmed)"}
        assert [h.key for h in await store.search(NS, query="confirmed credit")] == ["fact"]
        assert await store.get_embedding(NS, "vec") == pytest.approx([0.6, 0.8])
        assert store.capabilities.durable


async def test_two_processes_write_one_file_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with HolographicStore(path):
        pass  # create the schema first, so both writers start on the same footing
    writer = """
        import asyncio, sys
        from tulip_nb.memory.store_backends import HolographicStore

        async def main():
            async with HolographicStore(sys.argv[1]) as store:
                for i in range(150):
                    await store.put(("t1", "memory"), f"{sys.argv[2]}-{i}", {"content": f"item {i}"})
                    await store.put(("t1", "memory"), "shared-counter", {"by": sys.argv[2]})

        asyncio.run(main())
    """
    procs = [run_py(writer, str(path), name) for name in ("a", "b")]
    for proc in procs:
        finish(proc)
    async with HolographicStore(path) as store:
        keys = await store.list_keys(NS, limit=1000)
        assert len(keys) == 301
        counter = await store.get_item(NS, "shared-counter")
        assert counter is not None and counter.version == 300  # no put was lost
        assert len(await store.search(NS, query="item", limit=1000)) == 300


async def test_calls_do_not_block_the_event_loop(tmp_path: Path) -> None:
    async with HolographicStore(tmp_path / "m.db") as store:
        threads: set[str] = set()
        original = store._run

        async def spy(fn):  # type: ignore[no-untyped-def]
            def wrapped(conn):  # type: ignore[no-untyped-def]
                threads.add(threading.current_thread().name)
                return fn(conn)

            return await original(wrapped)

        store._run = spy  # type: ignore[method-assign]
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        for i in range(30):
            await store.put(NS, f"k{i}", {"content": f"value {i}"})
        task.cancel()
        assert ticks > 0
        assert threads and all(name.startswith("HolographicStore") for name in threads)


async def test_closed_store_says_so(tmp_path: Path) -> None:
    store = HolographicStore(tmp_path / "m.db")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(UserError, match="closed"):
        await store.get(NS, "k")
    sync = HolographicStore()
    sync.close_sync()


@pytest.mark.interop
async def test_reads_a_file_written_by_tulip(tmp_path: Path) -> None:
    pytest.importorskip("tulip.memory.store_backends.holographic")
    path = tmp_path / "tulip.db"
    code = """
        import asyncio, sys, warnings
        warnings.simplefilter("ignore")
        from tulip.memory.store_backends.holographic import HolographicStore

        async def main():
            store = HolographicStore(sys.argv[1])
            await store.put(("t1", "memory"), "fact", {"content": "refunds over 500 need approval"}, {"m": 1})
            await store.close()

        asyncio.run(main())
    """
    finish(run_py(code, str(path)))
    async with HolographicStore(path) as store:
        item = await store.get_item(NS, "fact")
        assert item is not None and item.value == {"content": "refunds over 500 need approval"}
        assert item.metadata == {"m": 1} and item.version == 1
        assert [h.key for h in await store.search(NS, query="approval")] == ["fact"]
        await store.put(NS, "ours", {"content": "written by tulip_nb"})
    check = """
        import asyncio, sys, warnings
        warnings.simplefilter("ignore")
        from tulip.memory.store_backends.holographic import HolographicStore

        async def main():
            store = HolographicStore(sys.argv[1])
            print(await store.get(("t1", "memory"), "ours"))
            await store.close()

        asyncio.run(main())
    """
    assert "written by tulip_nb" in finish(run_py(check, str(path)))
