"""The history's objects on S3, as data: a thread's head, its checkpoint rows, a run of messages.

No I/O here (see :mod:`._s3_history` for the store and the picture): each record knows its JSON
form and how to read it back, and reading it back refuses anything malformed with
:class:`~tulip_nb.core.errors.CheckpointCorrupt` naming where it was found.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from tulip_nb.core import Message, iso_offset, parse_datetime
from tulip_nb.core.errors import CheckpointCorrupt
from tulip_nb.memory.backends._history_dir import is_turn_end
from tulip_nb.memory.checkpointer import CheckpointInfo
from tulip_nb.memory.history import Row
from tulip_nb.memory.rest_delta import PatchError, pack, unpack

__all__ = ["Head", "Rec", "RunContent", "by_key", "hex_id", "run_body", "thread_key", "unhex_id"]


def thread_key(thread_id: str) -> str:
    """The name of a thread in the history's keys (its id may hold anything)."""
    return hashlib.sha256(thread_id.encode()).hexdigest()[:40]


def hex_id(b: bytes | None) -> str | None:
    return b.hex() if b is not None else None


def unhex_id(s: Any, *, where: str) -> bytes | None:
    if s is None:
        return None
    try:
        return bytes.fromhex(s)
    except (TypeError, ValueError):
        raise CheckpointCorrupt(f"a stored entry id is not hex: {s!r}", path=where) from None


@dataclass(slots=True)
class Rec:
    """One checkpoint row as stored (in the head's tail or a segment)."""

    cid: str
    at: datetime
    meta: bytes
    head: bytes | None
    n: int
    fh: bytes
    digest: bytes
    inline: bytes | None
    blob: str | None
    base: str | None
    depth: int
    chain: int

    @property
    def key(self) -> tuple[datetime, str]:
        return (self.at, self.cid)

    @property
    def turn_end(self) -> bool:
        return is_turn_end(orjson.loads(self.meta))

    def obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "c": self.cid,
            "t": iso_offset(self.at),
            "m": self.meta.decode(),
            "h": hex_id(self.head),
            "n": self.n,
            "fh": self.fh.hex(),
            "d": self.digest.hex(),
            "b": self.base,
            "dp": self.depth,
            "ch": self.chain,
        }
        if self.blob is not None:
            out["k"] = self.blob
        else:
            out["x"] = base64.b64encode(self.inline or b"").decode()
        return out

    @classmethod
    def parse(cls, o: Any, *, where: str) -> Rec:
        try:
            inline = base64.b64decode(o["x"]) if "x" in o else None
            return cls(
                str(o["c"]),
                parse_datetime(o["t"]),
                str(o["m"]).encode(),
                unhex_id(o["h"], where=where),
                int(o["n"]),
                bytes.fromhex(o["fh"]),
                bytes.fromhex(o["d"]),
                inline,
                str(o["k"]) if "k" in o else None,
                o["b"] if o["b"] is None else str(o["b"]),
                int(o["dp"]),
                int(o["ch"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointCorrupt(f"a stored checkpoint row cannot be read: {e!r}", path=where) from e

    def row(self, thread_id: str) -> Row:
        return Row(thread_id, self.cid, self.at, orjson.loads(self.meta), self.n)

    def info(self, thread_id: str) -> CheckpointInfo:
        return CheckpointInfo(self.cid, thread_id, self.at, orjson.loads(self.meta))


@dataclass
class Head:
    """A thread's head object as read (``etag`` None: there is none)."""

    thread: str
    etag: str | None = None
    gone: bool = False
    segs: list[dict[str, Any]] = field(default_factory=list)
    tail: list[Rec] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)
    top: str | None = None
    """The id of the newest row (by ``created_at``, then id): a load of the latest reads only it."""
    end: str | None = None
    """The id of the newest turn end (what the default projection shows tulip)."""

    def settle(self, recs: Sequence[Rec]) -> None:
        """Name the newest row and the newest turn end among ``recs`` (the head's rows)."""
        self.top = max(recs, key=lambda r: r.key).cid if recs else None
        ends = [r for r in recs if r.turn_end]
        self.end = max(ends, key=lambda r: r.key).cid if ends else None

    @property
    def has_rows(self) -> bool:
        return bool(self.segs or self.tail)

    def body(self) -> bytes:
        """The head's JSON, packed (``rest_delta.pack``: zlib over 512 bytes; its hex ids halve)."""
        return pack(
            orjson.dumps(
                {
                    "v": 1,
                    "thread": self.thread,
                    "gone": self.gone,
                    "segs": self.segs,
                    "tail": [r.obj() for r in self.tail],
                    "runs": self.runs,
                    "uses": sorted(set(self.uses)),
                    "users": sorted(set(self.users)),
                    "keep": sorted(set(self.keep)),
                    "top": self.top,
                    "end": self.end,
                }
            )
        )

    @classmethod
    def parse(cls, body: bytes, etag: str, thread_id: str | None, *, where: str) -> Head:
        try:
            o = orjson.loads(unpack(body))
            if not isinstance(o, dict) or o.get("v") != 1:
                raise ValueError("not a version-1 head object")
            head = cls(
                str(o["thread"]),
                etag,
                bool(o["gone"]),
                list(o["segs"]),
                [Rec.parse(r, where=where) for r in o["tail"]],
                list(o["runs"]),
                [str(u) for u in o["uses"]],
                [str(u) for u in o["users"]],
                [str(k) for k in o["keep"]],
                None if o["top"] is None else str(o["top"]),
                None if o["end"] is None else str(o["end"]),
            )
        except (PatchError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise CheckpointCorrupt(f"the thread's head object cannot be read: {e}", path=where) from e
        if thread_id is not None and head.thread != thread_id:
            raise CheckpointCorrupt(f"the head object belongs to thread {head.thread!r}", path=where)
        return head


@dataclass(frozen=True)
class RunContent:
    """A run's content, verified: its entry ids and messages (oldest first)."""

    parent: bytes | None
    ids: list[bytes]
    data: list[bytes]
    messages: list[Message]
    size: int


def run_body(parent: bytes | None, data: Sequence[bytes]) -> bytes:
    header = orjson.dumps({"v": 1, "p": hex_id(parent), "lens": [len(d) for d in data]})
    return pack(header + b"\n" + b"".join(data))


def by_key(recs: list[Rec]) -> list[Rec]:
    return sorted(recs, key=lambda r: r.key)
