"""Test-only: append records in the previous release's delta-log format (``_legacy_delta`` reads them).

The committed store of that release (``tests/data/legacy_store/``) is what the converter is checked
against; this writes the few records a test needs beyond it (an extra in a log record, a save by
an old-release writer between the phases, a torn or damaged tail), snapshots and PRUNE records
only, byte for byte in the format the module docstring of :mod:`tulip_nb.memory.backends._legacy_delta`
describes.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import orjson

from tulip_nb.core import iso_offset
from tulip_nb.memory.checkpointer import Checkpoint

MAGIC = b"\xd7\x1b"
FILE, SNAPSHOT, DELTA, PRUNE = 1, 2, 3, 4


def record(kind: int, header: dict[str, Any], body: bytes = b"") -> bytes:
    """One framed record."""
    h = orjson.dumps(header)
    lengths = struct.pack("<2sBII", MAGIC, kind, len(h), len(body))
    return lengths + struct.pack("<II", zlib.crc32(h, zlib.crc32(lengths)), zlib.crc32(body)) + h + body


def snapshot(ckpt: Checkpoint, extra: dict[str, Any] | None = None) -> bytes:
    parent = ckpt.metadata.get("parent_checkpoint_id")
    header: dict[str, Any] = {
        "checkpoint_id": ckpt.checkpoint_id,
        "created_at": iso_offset(ckpt.created_at),
        "parent": parent if isinstance(parent, str) else None,
        "messages": len(ckpt.state.messages),
        "tokens": None,
        "metadata": dict(ckpt.metadata),
        "base": None,
        "state_bytes": 0,
        "load_bytes": 0,
        "depth": 0,
    }
    if extra:
        header["extra"] = extra
    return record(SNAPSHOT, header, ckpt.state.to_json_bytes())


def append(log: Path, thread_id: str, *records: bytes) -> None:
    """Append ``records`` to the log at ``log`` (its FILE record first when it is new)."""
    head = b"" if log.exists() else record(FILE, {"format": "tulip_nb delta log", "version": 1, "thread_id": thread_id})
    with open(log, "ab") as f:
        f.write(head + b"".join(records))
