"""The Redis history store's data: its keys, its row format, its Lua scripts (:mod:`._redis_history`).

Keys, all under the backend's prefix in the namespace ``<prefix>\\x00h:`` (thread ids cannot hold
NUL, so no key of tulip's layout ``<prefix><tid>:...`` starts there)::

    \\x00h:e          hash  entry id (32 bytes) -> parent id (32 bytes, zeros for the first) + message JSON
    \\x00h:n          hash  entry id -> reference count (rows whose head it is + entries whose parent it is)
    \\x00h:v          string  the store's version: every write transaction WATCHes it and INCRs it
    \\x00h:t          set   the threads that have rows
    \\x00h:r:<tid>    hash  checkpoint id -> row header (head, digests, counts, created_at, base) + save metadata
    \\x00h:f:<tid>    hash  checkpoint id -> the state's other fields, whole or a patch (rest_delta)
    \\x00h:o:<tid>    zset  checkpoint id scored by created_at in microseconds (the listing order)
    \\x00h:m:<tid>    list  the thread's main line: the entry ids of its latest save's history, oldest first

A row header is binary (:data:`HEADER`), so the Lua scripts read a row's head entry, message
count and patch base without parsing JSON.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from tulip_nb.core import parse_datetime
from tulip_nb.memory.history import row_digest

__all__ = [
    "EPOCH",
    "HEADER",
    "LOAD",
    "RELEASE",
    "ROOT",
    "Head",
    "Keys",
    "Queue",
    "meta_bytes",
    "micros",
    "parse_head",
]

ROOT = b"\x00" * 32
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HEADER = struct.Struct(">32s32s32sIIIHH")
"""A row header's fixed part: head entry (zeros: none), fields hash, digest, message count, patch
depth and chain, the lengths of ``created_at`` (ISO) and of the base's id, which follow it, then
the save metadata's JSON (the Lua scripts read the head, the count and the base the same way)."""

_HISTORY = """
local root = string.rep('\\0', 32)
-- the entries' values of the history that ends at entry eid (n of them), head first, down to (not
-- including) entry stop, the m-th message, when it is on that history (a batch loads each message
-- once); from the thread's main line (a list of entry ids) when it holds that history, else by the
-- parent links (n + 1 at most: a longer walk is a damaged link); what is missing is left out
local function history(entries, line, eid, n, stop, m)
  local out = {}
  if n > 0 and redis.call('LINDEX', line, n - 1) == eid then
    local from = 1
    if stop ~= '' and m > 0 and m <= n and redis.call('LINDEX', line, m - 1) == stop then from = m + 1 end
    if from > n then return out end
    local ids = redis.call('LRANGE', line, from - 1, n - 1)
    local values = {}
    for i = 1, #ids, 1000 do
      local got = redis.call('HMGET', entries, unpack(ids, i, math.min(i + 999, #ids)))
      for j = 1, #got do values[i + j - 1] = got[j] end
    end
    for k = #ids, 1, -1 do
      if not values[k] then return out end
      table.insert(out, values[k])
    end
    return out
  end
  for k = 1, n + 1 do
    if eid == stop then break end
    local value = redis.call('HGET', entries, eid)
    if not value then break end
    table.insert(out, value)
    if #value < 32 or string.sub(value, 1, 32) == root then break end
    eid = string.sub(value, 1, 32)
  end
  return out
end
"""

RELEASE = """
local entries, refs = KEYS[1], KEYS[2]
local root = string.rep('\\0', 32)
for i = 1, #ARGV do
  local eid = ARGV[i]
  while eid do
    if redis.call('HINCRBY', refs, eid, -1) > 0 then break end
    local value = redis.call('HGET', entries, eid)
    redis.call('HDEL', entries, eid)
    redis.call('HDEL', refs, eid)
    if not value or #value < 32 or string.sub(value, 1, 32) == root then break end
    eid = string.sub(value, 1, 32)
  end
end
return 0
"""
"""One reference fewer to each head in ARGV; entries that reach zero go, and so on down the chain."""

LOAD = (
    _HISTORY
    + """
local rows, rests, order, entries, line = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local cid = ARGV[1]
if cid == '' then
  local top = redis.call('ZREVRANGE', order, 0, 0)
  if #top == 0 then return {} end
  cid = top[1]
end
local header = redis.call('HGET', rows, cid)
if not header then return {cid} end
local function parse(h)
  if #h < 112 then return nil end
  local n, depth, chain, lc, lb = struct.unpack('>I4I4I4I2I2', string.sub(h, 97, 112))
  if #h < 112 + lc + lb then return nil end
  local base = nil
  if lb > 0 then base = string.sub(h, 113 + lc, 112 + lc + lb) end
  return {head = string.sub(h, 1, 32), n = n, base = base}
end
local row = parse(header)
local out = {cid, header}
local chain = {}
local at, h = cid, row
for k = 1, 35 do
  table.insert(chain, at)
  table.insert(chain, redis.call('HGET', rests, at) or false)
  if not h or type(h.base) ~= 'string' then break end
  at = h.base
  local bh = redis.call('HGET', rows, at)
  h = bh and parse(bh) or nil
  if not bh then
    table.insert(chain, at)
    table.insert(chain, false)
    break
  end
end
table.insert(out, #chain / 2)
for _, v in ipairs(chain) do table.insert(out, v) end
if ARGV[2] == '1' or not row or row.head == root then return out end
for _, v in ipairs(history(entries, line, row.head, row.n, ARGV[3] or '', tonumber(ARGV[4] or '0'))) do
  table.insert(out, v)
end
return out
"""
)
"""A row, its fields' patch chain ((id, stored blob) pairs, the row's own first) and, unless ARGV[2]
is '1', its history's entries from the head down (at most n + 1: a longer walk is a damaged link)."""


class Queue:
    """The writes of one transaction, as (command, arguments, options), sent in its ``MULTI``."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def add(self, command: str, *args: Any, **options: Any) -> None:
        self.commands.append((command, args, options))

    def before(self, other: Queue) -> None:
        """Put ``other``'s writes first."""
        self.commands[0:0] = other.commands

    def send(self, pipe: Any) -> None:
        for command, args, options in self.commands:
            getattr(pipe, command)(*args, **options)


def micros(when: datetime) -> int:
    return (when - EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class Keys:
    """The store's Redis keys under one prefix."""

    base: str

    @property
    def entries(self) -> str:
        return self.base + "e"

    @property
    def refs(self) -> str:
        return self.base + "n"

    @property
    def version(self) -> str:
        return self.base + "v"

    @property
    def threads(self) -> str:
        return self.base + "t"

    def rows(self, thread_id: str) -> str:
        return self.base + "r:" + thread_id

    def rests(self, thread_id: str) -> str:
        return self.base + "f:" + thread_id

    def order(self, thread_id: str) -> str:
        return self.base + "o:" + thread_id

    def line(self, thread_id: str) -> str:
        return self.base + "m:" + thread_id


@dataclass(frozen=True)
class Head:
    """A stored row's header (everything but the fields' blob)."""

    cid: str
    n: int
    created: str
    head: bytes | None
    base: str | None
    depth: int
    chain: int
    fields: bytes
    digest: bytes
    meta: bytes

    @property
    def created_at(self) -> datetime:
        return parse_datetime(self.created)

    def encode(self) -> bytes:
        created, base = self.created.encode(), (self.base or "").encode()
        fixed = HEADER.pack(
            self.head or ROOT, self.fields, self.digest, self.n, self.depth, self.chain, len(created), len(base)
        )
        return fixed + created + base + self.meta

    def digest_for(self, thread_id: str, meta: bytes | None = None) -> bytes:
        m = self.meta if meta is None else meta
        return row_digest(thread_id, self.cid, self.created_at, m, self.head, self.n, self.fields)


def parse_head(cid: str, raw: bytes) -> Head:
    """A row header (:data:`HEADER`, ``created_at``, base id, save metadata); ValueError when it
    cannot be read."""
    try:
        head, fields, digest, n, depth, chain, lc, lb = HEADER.unpack_from(raw)
    except struct.error as e:
        raise ValueError(f"row header: {e}") from e
    at = HEADER.size
    if len(raw) < at + lc + lb:
        raise ValueError("row header is cut short")
    created = raw[at : at + lc].decode()
    base = raw[at + lc : at + lc + lb].decode() or None
    return Head(
        cid, n, created, None if head == ROOT else head, base, depth, chain, fields, digest, raw[at + lc + lb :]
    )


def meta_bytes(metadata: Mapping[str, Any], thread_id: str, checkpoint_id: str) -> bytes:
    try:
        return orjson.dumps(metadata, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as e:
        raise TypeError(f"the save metadata of checkpoint {checkpoint_id!r} of {thread_id!r} is not JSON: {e}") from e
