"""FileCheckpointer's header caches follow the files: every writer keeps every index.

The in-process heads and the persistent ``.tulip_nb_index`` hold each header with the stamp
``(inode, mtime_ns, size)`` of its file, so a file replaced under the same name by anyone (another
process, tulip, a hand edit) is read again instead of trusted from the cache.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.memory.checkpointer import Checkpoint
from tulip_nb.testing import full_state


def _replace_by_hand(path: Path, **changes: object) -> None:
    """Rewrite an envelope the way a foreign writer would: temp file + rename, no index line."""
    raw = orjson.loads(path.read_bytes())
    raw.update(changes)
    tmp = path.with_name(".foreign.tmp")
    tmp.write_bytes(orjson.dumps(raw))
    os.replace(tmp, path)


async def test_every_write_path_appends_an_index_line(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, fsync=False, layout="tulip")
    cid = await cp.save(full_state(), "t", metadata={"v": 1})
    when = datetime(2025, 1, 1, tzinfo=UTC)
    await cp.put_checkpoint(Checkpoint("p", "t", when, full_state(marker="p"), {"v": 2}))
    await cp.copy_thread("t", "u")
    rows = [orjson.loads(line) for line in (tmp_path / "t" / ".tulip_nb_index").read_bytes().splitlines()]
    assert [(r["c"], r["m"].get("v")) for r in rows] == [(cid, 1), ("p", 2)]
    assert all(len(r["s"]) == 3 for r in rows)
    copied = (tmp_path / "u" / ".tulip_nb_index").read_bytes().splitlines()
    assert len(copied) == 2


async def test_a_replaced_file_is_read_again_by_a_warm_and_a_fresh_instance(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, fsync=False, layout="tulip")
    old = await cp.save(full_state(marker="a"), "t", metadata={"v": 1})
    # not chained to ``old`` (the parent chain would order it first whatever created_at says)
    new = await cp.save(full_state(marker="b"), "t", metadata={"v": 2, "parent_checkpoint_id": None})
    assert [i.checkpoint_id for i in await cp.list_checkpoint_infos("t")] == [new, old]  # caches warm
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    _replace_by_hand(tmp_path / "t" / f"{old}.json", created_at=later, metadata={"v": "edited"})
    for reader in (cp, FileCheckpointer(tmp_path, layout="tulip")):
        infos = await reader.list_checkpoint_infos("t")
        assert [i.checkpoint_id for i in infos] == [old, new]
        assert infos[0].metadata == {"v": "edited"}
        latest = await reader.load_checkpoint("t")
        assert latest is not None and latest.checkpoint_id == old


async def test_a_stale_index_line_never_decides_the_latest(tmp_path: Path) -> None:
    """The bug this fixes: put_checkpoint wrote no index line, so a fresh process listed the old
    ``created_at`` of a replaced checkpoint and chose the wrong latest."""
    cp = FileCheckpointer(tmp_path, fsync=False, layout="tulip")
    first = await cp.save(full_state(marker="a"), "t")
    second = await cp.save(full_state(marker="b"), "t")
    back = (await cp.list_checkpoint_infos("t"))[-1].created_at - timedelta(hours=1)
    await cp.put_checkpoint(Checkpoint(second, "t", back, full_state(marker="c"), {"moved": True}))
    fresh = FileCheckpointer(tmp_path, layout="tulip")
    assert await fresh.list_checkpoints("t") == [first, second]
    assert await fresh.latest_checkpoint_id("t") == first
    assert await fresh.get_metadata("t", second) == {"moved": True}
