"""The history model (:mod:`tulip_nb.memory.history`) in dicts: the store of ``MemoryCheckpointer``.

The same data as on SQLite (:mod:`._sqlite_history`), in this process's memory:

- **entries**: entry id -> (parent entry id, the message, a reference count). The count is the
  rows whose head the entry is plus the entries whose parent it is; a drop decrements along the
  chain and removes what reaches zero, in the same operation. So an entry exists exactly while a
  row reaches it, and when an entry exists so does its whole prefix (a save walks back from its
  head only over the entries it adds).
- **rows**, per thread: checkpoint id -> the row (head entry, message count, ``created_at``, save
  metadata as JSON, the state's other fields as a snapshot or a patch against another row of the
  thread (:mod:`~tulip_nb.memory.rest_delta`), their hash, the row's content digest), an index
  sorted by ``(created_at, id)`` (the latest is its last item) and, per row, the rows whose fields
  patch it (rewritten whole before it is dropped).

Each primitive holds one :class:`threading.Lock` and never awaits, so it is atomic for coroutines
and threads alike; what can fail (the plan, the save metadata's JSON) is decided before anything
changes. A load walks the history from the head, re-hashes every message against its entry id,
checks the row's digest and the fields' hash: a changed entry or row is
:class:`~tulip_nb.core.errors.CheckpointCorrupt`, never another state.

>>> import asyncio
>>> from datetime import UTC, datetime
>>> from tulip_nb.core import AgentState, Message
>>> from tulip_nb.memory.history import ChainCache, RowWrite, state_rest
>>> store, chains = DictHistory(), ChainCache()
>>> state = AgentState(messages=[Message.user("hi")])
>>> write = RowWrite("c1", datetime(2026, 1, 1, tzinfo=UTC), {}, state_rest(state), chains.chain("t", state.messages))
>>> row = asyncio.run(store.save("t", lambda latest: write))
>>> asyncio.run(store.load("t")).checkpoint.state.messages[0].content
'hi'
>>> store.integrity_sync()
[]
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from tulip_nb.core import Message
from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound
from tulip_nb.memory._envelope import state_from_obj
from tulip_nb.memory.checkpointer import Checkpoint
from tulip_nb.memory.history import (
    HistoryStore,
    MessageChain,
    RewritePlanFn,
    Row,
    RowWrite,
    SavePlanFn,
    StoredCheckpoint,
    entry_id,
    fields_hash,
    row_digest,
)
from tulip_nb.memory.rest_delta import MAX_DEPTH, Parts, PatchError, decode, encode, pack, parts_of_json

__all__ = ["WHERE", "DictHistory"]

WHERE = "memory"
"""The ``path`` of the errors this store raises."""
_CACHED_THREADS = 64
"""Threads whose newest saved fields the store keeps parsed (the base of their next patch)."""
_Key = tuple[datetime, str]


@dataclass(slots=True)
class _Entry:
    parent: bytes | None
    message: Message
    refs: int
    checked: tuple[bytes, bytes | None, Message] | None = None
    """(id, parent, message) as last verified by a load (see :meth:`DictHistory._verified`)."""


@dataclass(slots=True)
class _Row:
    row: Row
    """What listings return (its metadata parsed from ``meta``)."""
    meta: bytes
    head: bytes | None
    rest: bytes
    base: str | None
    depth: int
    chain: int
    fields: bytes
    digest: bytes

    @property
    def key(self) -> _Key:
        return (self.row.created_at, self.row.checkpoint_id)


@dataclass(slots=True)
class _Thread:
    rows: dict[str, _Row] = field(default_factory=dict)
    order: list[_Key] = field(default_factory=list)
    """``(created_at, id)`` of every row, ascending: the latest is the last."""
    dependents: dict[str, set[str]] = field(default_factory=dict)
    """Row id -> the ids of the rows whose fields patch it."""

    def latest(self) -> _Row | None:
        return self.rows[self.order[-1][1]] if self.order else None

    def newest_first(self, limit: int | None = None) -> list[_Row]:
        keys = self.order[::-1] if limit is None else self.order[: -limit - 1 : -1] if limit > 0 else []
        return [self.rows[cid] for _, cid in keys]

    def add(self, r: _Row) -> None:
        self.rows[r.row.checkpoint_id] = r
        bisect.insort(self.order, r.key)
        if r.base is not None:
            self.dependents.setdefault(r.base, set()).add(r.row.checkpoint_id)

    def remove(self, r: _Row) -> None:
        cid = r.row.checkpoint_id
        del self.rows[cid]
        key, i = r.key, bisect.bisect_left(self.order, r.key)
        if i < len(self.order) and self.order[i] == key:
            del self.order[i]
        else:  # the row's created_at was changed in place (corruption): find it by id
            self.order = [k for k in self.order if k[1] != cid]
        self.unbase(r)
        self.dependents.pop(cid, None)

    def unbase(self, r: _Row) -> None:
        if r.base is not None:
            deps = self.dependents.get(r.base)
            if deps is not None:
                deps.discard(r.row.checkpoint_id)
                if not deps:
                    del self.dependents[r.base]


def _meta_bytes(metadata: dict[str, Any], thread_id: str, checkpoint_id: str) -> bytes:
    """The save metadata's JSON, in a bytes object of its own size (orjson's keeps a 4 kB buffer)."""
    try:
        return memoryview(orjson.dumps(metadata, option=orjson.OPT_NON_STR_KEYS)).tobytes()
    except TypeError as e:
        raise TypeError(f"the save metadata of checkpoint {checkpoint_id!r} of {thread_id!r} is not JSON: {e}") from e


class DictHistory(HistoryStore):
    """The history store in dicts (see the module docstring); one instance is one store."""

    def __init__(self) -> None:
        self._entries: dict[bytes, _Entry] = {}
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.Lock()
        # thread -> (checkpoint id, fields hash, parts) of its newest save
        self._fields: OrderedDict[str, tuple[str, bytes, Parts]] = OrderedDict()

    def __repr__(self) -> str:
        return f"DictHistory(threads={len(self._threads)}, entries={len(self._entries)})"

    # -- rows ---------------------------------------------------------------------------------
    def rows_sync(self, thread_id: str, limit: int | None = None) -> list[Row]:
        with self._lock:
            th = self._threads.get(thread_id)
            return [r.row for r in th.newest_first(limit)] if th else []

    def all_rows_sync(self) -> dict[str, list[Row]]:
        with self._lock:
            return {tid: [r.row for r in th.newest_first()] for tid, th in self._threads.items()}

    def threads_sync(self) -> list[str]:
        with self._lock:
            return list(self._threads)

    def __len__(self) -> int:
        """How many threads have rows."""
        return len(self._threads)

    # -- save ---------------------------------------------------------------------------------
    def save_sync(self, thread_id: str, plan: SavePlanFn) -> Row:
        with self._lock:
            th = self._threads.get(thread_id)
            latest = th.latest() if th else None
            write = plan(latest.row.info if latest else None)
            return self._insert(thread_id, write)

    def _insert(self, thread_id: str, write: RowWrite) -> Row:
        """Write one row (replacing a row with its id); everything that can fail comes first."""
        cid, chain = write.checkpoint_id, write.chain
        meta = _meta_bytes(write.metadata, thread_id, cid)
        th = self._threads.get(thread_id) or _Thread()
        base = next((r for r in th.newest_first(2) if r.row.checkpoint_id != cid), None)
        base_parts = self._base_parts(thread_id, th, base)
        if base is None or base_parts is None:
            enc, parts, fields_bytes = encode(write.rest, None)
        else:
            enc, parts, fields_bytes = encode(write.rest, base_parts, base.depth, base.chain)
        hash_of_fields = fields_hash(fields_bytes)
        digest = row_digest(thread_id, cid, write.created_at, meta, chain.head, chain.n, hash_of_fields)
        row = Row(thread_id, cid, write.created_at, orjson.loads(meta), chain.n)
        # from here on nothing fails: the write is whole or absent
        head = self._store_chain(chain)
        if head is not None:  # referenced before the row it replaces lets go of a shared prefix
            self._entries[head].refs += 1
        self._drop(thread_id, th, [cid])
        based_on = base.row.checkpoint_id if enc.patch and base is not None else None
        th.add(_Row(row, meta, head, enc.blob, based_on, enc.depth, enc.chain, hash_of_fields, digest))
        self._threads[thread_id] = th
        self._remember(thread_id, (cid, hash_of_fields, parts))
        return row

    def _remember(self, thread_id: str, value: tuple[str, bytes, Parts]) -> None:
        self._fields[thread_id] = value
        self._fields.move_to_end(thread_id)
        while len(self._fields) > _CACHED_THREADS:
            self._fields.popitem(last=False)

    def _base_parts(self, thread_id: str, th: _Thread, base: _Row | None) -> Parts | None:
        """The parts of the row a new save patches against: cached when it is the newest save
        (same id and fields hash), else rebuilt; None when there is no base or it is corrupt."""
        if base is None:
            return None
        cached = self._fields.get(thread_id)
        if cached is not None and cached[0] == base.row.checkpoint_id and cached[1] == base.fields:
            return cached[2]
        try:
            return parts_of_json(orjson.dumps(self._rebuild(thread_id, th, base)))
        except (CheckpointCorrupt, PatchError):
            return None

    def _store_chain(self, chain: MessageChain) -> bytes | None:
        """The chain's head, adding the entries the store lacks (an entry present means its prefix is)."""
        n = chain.n
        if n == 0:
            return None
        ids, entries = chain.ids, self._entries
        have = n - 1
        while have >= 0 and ids[have] not in entries:
            have -= 1
        if have == n - 1:
            return ids[have]
        parent = ids[have] if have >= 0 else None
        if parent is not None:
            entries[parent].refs += 1
        for i in range(have + 1, n):
            entries[ids[i]] = _Entry(parent, chain.messages[i], 0 if i == n - 1 else 1)
            parent = ids[i]
        return parent

    # -- fields -------------------------------------------------------------------------------
    def _rebuild(self, thread_id: str, th: _Thread, r: _Row) -> dict[str, Any]:
        """A row's whole fields: its snapshot, or its base's rebuilt and its patch applied; verified."""
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": r.row.checkpoint_id}
        blobs, base = [r.rest], r.base
        while base is not None:
            if len(blobs) > MAX_DEPTH + 1:
                raise CheckpointCorrupt("the row's fields patch a chain with no snapshot", path=WHERE, **ctx)
            b = th.rows.get(base)
            if b is None:
                raise CheckpointCorrupt(f"the row's fields patch missing checkpoint {base}", path=WHERE, **ctx)
            blobs.append(b.rest)
            base = b.base
        try:
            fields = decode(blobs[-1], None)
            for patch in reversed(blobs[:-1]):
                fields = decode(patch, fields)
        except PatchError as e:
            raise CheckpointCorrupt(str(e), path=WHERE, **ctx) from e
        if fields_hash(orjson.dumps(fields)) != r.fields:
            raise CheckpointCorrupt("the row's state fields do not match their hash", path=WHERE, **ctx)
        return fields

    # -- drop ---------------------------------------------------------------------------------
    def _release(self, eid: bytes | None) -> None:
        """One reference fewer to entry ``eid``; entries nothing reaches any more are removed."""
        entries = self._entries
        while eid is not None:
            e = entries.get(eid)
            if e is None:
                return
            e.refs -= 1
            if e.refs > 0:
                return
            del entries[eid]
            eid = e.parent

    def _drop(self, thread_id: str, th: _Thread, cids: Iterable[str] | None) -> int:
        """Remove rows of ``th`` (all for None), rewriting whole the survivors that patch them."""
        if cids is None:
            found = list(th.rows.values())
        else:
            found = [th.rows[c] for c in dict.fromkeys(cids) if c in th.rows]
            if found:
                self._rebase(thread_id, th, {r.row.checkpoint_id for r in found})
        for r in found:
            th.remove(r)
            self._release(r.head)
        if not th.rows:
            self._threads.pop(thread_id, None)
            self._fields.pop(thread_id, None)
        return len(found)

    def _rebase(self, thread_id: str, th: _Thread, dropped: set[str]) -> None:
        """Rewrite whole the surviving rows whose fields patch a row about to be dropped.

        All are rebuilt before any is rewritten (one may patch another). A row that cannot be
        rebuilt is corrupt already; it is left as it is (a load reports it).
        """
        rebuilt: list[tuple[_Row, bytes]] = []
        for cid in sorted(dropped):
            for dep in sorted(th.dependents.get(cid, ())):
                if dep in dropped:
                    continue
                r = th.rows[dep]
                try:
                    rebuilt.append((r, orjson.dumps(self._rebuild(thread_id, th, r))))
                except CheckpointCorrupt:
                    continue
        for r, fields_bytes in rebuilt:
            th.unbase(r)
            r.rest, r.base, r.depth, r.chain = pack(fields_bytes), None, 0, 0

    def delete_sync(self, thread_id: str, cids: list[str] | None) -> int:
        """Remove the thread's rows ``cids`` (every row for None); how many were removed."""
        with self._lock:
            th = self._threads.get(thread_id)
            return self._drop(thread_id, th, cids) if th else 0

    def rewrite_sync(self, thread_id: str, plan: RewritePlanFn) -> int:
        with self._lock:
            th = self._threads.get(thread_id) or _Thread()
            change = plan([r.row.info for r in th.newest_first()])
            updates = []
            for cid, metadata in change.metadata.items():
                r = th.rows.get(cid)
                if r is not None and cid not in change.drop:
                    meta = _meta_bytes(metadata, thread_id, cid)
                    updates.append((r, meta, self._digest(thread_id, r, meta)))
            for r, meta, digest in updates:
                r.meta, r.digest = meta, digest
                r.row = Row(thread_id, r.row.checkpoint_id, r.row.created_at, orjson.loads(meta), r.row.n_messages)
            return self._drop(thread_id, th, sorted(change.drop)) if th.rows else 0

    def _digest(self, thread_id: str, r: _Row, meta: bytes) -> bytes:
        row = r.row
        return row_digest(thread_id, row.checkpoint_id, row.created_at, meta, r.head, row.n_messages, r.fields)

    # -- copy ---------------------------------------------------------------------------------
    def copy_sync(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        with self._lock:
            src = self._threads.get(source)
            if not src:
                raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
            if dest in self._threads:
                raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
            copy = _Thread()
            for r in src.rows.values():
                cid = r.row.checkpoint_id
                meta = _meta_bytes(metadata(r.row), dest, cid)
                row = Row(dest, cid, r.row.created_at, orjson.loads(meta), r.row.n_messages)
                digest = self._digest(dest, r, meta)
                copy.add(_Row(row, meta, r.head, r.rest, r.base, r.depth, r.chain, r.fields, digest))
            for r in copy.rows.values():  # the copy shares every entry: one reference more each head
                if r.head is not None:
                    self._entries[r.head].refs += 1
            self._threads[dest] = copy
            return len(copy.rows)

    # -- load ---------------------------------------------------------------------------------
    def load_sync(self, thread_id: str, checkpoint_id: str | None = None) -> StoredCheckpoint | None:
        with self._lock:
            th = self._threads.get(thread_id)
            if checkpoint_id is None:
                r = th.latest() if th else None
                if r is None:
                    return None
            else:
                r = th.rows.get(checkpoint_id) if th else None
                if r is None:
                    raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
            assert th is not None
            messages, ids = self._verified(thread_id, r)
            fields = self._rebuild(thread_id, th, r)
            meta = r.meta
            row = r.row
        # validated outside the lock: everything here is this call's own or immutable
        state = state_from_obj({"messages": [], **fields}, where=WHERE, thread_id=thread_id)
        state.messages = messages
        ckpt = Checkpoint(row.checkpoint_id, thread_id, row.created_at, state, orjson.loads(meta))
        return StoredCheckpoint(ckpt, ids)

    def _verified(self, thread_id: str, r: _Row) -> tuple[list[Message], list[bytes]]:
        """The row's messages and entry ids (oldest first), every entry and the digest checked.

        An entry is re-hashed unless it was verified before as the very same (id, parent, message
        object): ids and messages are immutable, so a check can only go stale when the entry is
        changed or replaced, which is what the memo compares (by identity for the message).
        """
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": r.row.checkpoint_id}
        n = i = r.row.n_messages
        messages: list[Any] = [None] * n
        ids: list[Any] = [None] * n
        get, eid = self._entries.get, r.head
        while eid is not None:  # filled from the newest message back
            e = get(eid)
            if e is None or not i:  # an entry missing, or a longer history (a cycle, say)
                if i == n:
                    raise CheckpointCorrupt("the checkpoint's head entry is missing", path=WHERE, **ctx)
                got = f"more than {n}" if e is not None else f"{n - i}"
                raise CheckpointCorrupt(f"history has {got} messages, the checkpoint says {n}", path=WHERE, **ctx)
            message, parent, memo = e.message, e.parent, e.checked
            if memo is None or memo[2] is not message or memo[0] != eid or memo[1] != parent:
                if entry_id(parent, message.json_bytes()) != eid:
                    raise CheckpointCorrupt(
                        f"message {i - 1} no longer matches its entry id (stored bytes changed)", path=WHERE, **ctx
                    )
                e.checked = (eid, parent, message)
            i -= 1
            messages[i], ids[i] = message, eid
            eid = parent
        if i:
            raise CheckpointCorrupt(f"history has {n - i} messages, the checkpoint says {n}", path=WHERE, **ctx)
        if self._digest(thread_id, r, r.meta) != r.digest:
            raise CheckpointCorrupt("checkpoint row does not match its content digest", path=WHERE, **ctx)
        return messages, ids

    # -- checks -------------------------------------------------------------------------------
    def integrity_sync(self) -> list[str]:
        """The entries' reference counts and every head present; [] when all is well."""
        with self._lock:
            want: dict[bytes, int] = dict.fromkeys(self._entries, 0)
            problems: list[str] = []
            for eid, e in self._entries.items():
                if e.parent is not None:
                    if e.parent not in want:
                        problems.append(f"entry {eid.hex()[:12]}: its parent entry is missing")
                        continue
                    want[e.parent] += 1
            for tid, th in self._threads.items():
                for r in th.rows.values():
                    if r.head is None:
                        continue
                    if r.head not in want:
                        problems.append(f"{tid}/{r.row.checkpoint_id}: its head entry is missing")
                        continue
                    want[r.head] += 1
            for eid, e in self._entries.items():
                if e.refs != want[eid]:
                    problems.append(f"entry {eid.hex()[:12]}: refs {e.refs}, reached {want[eid]} times")
            return problems

    def entry_count(self) -> int:
        """How many entries (messages stored once) the store holds."""
        with self._lock:
            return len(self._entries)

    # -- async primitives (none awaits inside its lock) ---------------------------------------
    async def save(self, thread_id: str, plan: SavePlanFn) -> Row:
        return self.save_sync(thread_id, plan)

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> StoredCheckpoint | None:
        return self.load_sync(thread_id, checkpoint_id)

    async def rows(self, thread_id: str, limit: int | None = None) -> list[Row]:
        return self.rows_sync(thread_id, limit)

    async def all_rows(self) -> dict[str, list[Row]]:
        return self.all_rows_sync()

    async def copy(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        return self.copy_sync(source, dest, metadata)

    async def rewrite(self, thread_id: str, plan: RewritePlanFn) -> int:
        return self.rewrite_sync(thread_id, plan)

    async def delete_thread(self, thread_id: str) -> int:
        return self.delete_sync(thread_id, None)
