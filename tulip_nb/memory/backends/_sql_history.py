"""The history model (:mod:`tulip_nb.memory.history`) in a SQL database, whatever the engine.

:class:`SQLHistory` holds every query of the history store; a :class:`Dialect` says how to reach
one engine: how a connection is had, how a transaction starts (a write takes the store's write
lock first, so writers are serialised as SQLite's ``BEGIN IMMEDIATE`` serialises them; a read sees
one snapshot), how the two tables are named and how a driver error becomes tulip_nb's. SQLite
(:mod:`._sqlite_history`, the file store), PostgreSQL and MySQL / MariaDB (:mod:`._sql_server`)
are dialects. Queries are written once, in SQLite's spelling (``?`` placeholders, the tables named
``entries`` and ``checkpoints``); a dialect rewrites them for its engine once per statement.

Tables::

    entries(rowid, id BLOB UNIQUE, parent -> entries.rowid, refs, data)
    checkpoints(seq, thread, cid, parent, head -> entries.rowid, n, at_us, created_at, turn_end,
                metadata, rest, base, depth, chain, fields, digest, UNIQUE(thread, cid))

``rest`` holds the state's other fields, whole or as a patch against the row ``base`` of the same
thread (:mod:`tulip_nb.memory.rest_delta`); ``fields`` is the hash of the whole fields, which the
row's digest covers, so a copy re-binds a row to its new thread without rebuilding it. A row that
others use as their base is rewritten whole before it is dropped, in the dropping transaction.

``refs`` counts the rows whose head an entry is and the entries whose parent it is; a drop
decrements along the chain and deletes what reaches zero, in the dropping transaction. So an
entry exists only while a committed row reaches it, and when an entry exists so does its whole
prefix (a save checks one entry to know what it may skip). This is safe because every write holds
the store's write lock: no two transactions change reference counts at once.

A checkpointer that writes more than the history in the same transaction (tulip's keys, on the
SQL servers) composes its own: :meth:`SQLHistory.write_sync` runs a function in one write
transaction, and the ``*_in`` methods are the primitives inside one.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import orjson
from pydantic import ValidationError

from tulip_nb.core import Message, iso_offset, parse_datetime
from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.fastload import gc_paused, messages_from_json
from tulip_nb.core.keys import PARENT_KEY
from tulip_nb.memory.backends._history_dir import is_turn_end
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
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
    state_with,
)
from tulip_nb.memory.rest_delta import MAX_DEPTH, Parts, PatchError, decode, encode, pack, parts_of_json

__all__ = ["Conn", "Cursor", "Dialect", "SQLHistory", "micros"]

_T = TypeVar("_T")

_COLS = "seq, thread, cid, head, n, created_at, metadata, rest, digest, base, fields, at_us, turn_end"
_ORDER = "ORDER BY at_us DESC, cid DESC"
# every walk is bounded by a depth counter: a damaged parent link (a loop) ends, and engines that
# build a recursive CTE whole before the outer LIMIT (MySQL, MariaDB) never run away
_WALK = """
WITH RECURSIVE walk(rid, id, parent, data, k) AS (
    SELECT rowid, id, parent, data, 1 FROM entries WHERE rowid = ?
    UNION ALL
    SELECT e.rowid, e.id, e.parent, e.data, w.k + 1 FROM entries e JOIN walk w ON e.rowid = w.parent
    WHERE w.k < ?)
SELECT id, data FROM walk ORDER BY k
"""
_WALK_TO = """
WITH RECURSIVE walk(rid, id, parent, data, k) AS (
    SELECT rowid, id, parent, data, 1 FROM entries WHERE rowid = ?
    UNION ALL
    SELECT e.rowid, e.id, e.parent, e.data, w.k + 1 FROM entries e JOIN walk w ON e.rowid = w.parent
    WHERE w.rid != ? AND w.k < ?)
SELECT rid, id, data FROM walk ORDER BY k
"""
"""A head's walk that stops after the entry ``rowid = ?`` (the head of a history already verified)."""
_WALK_ROWS = """
WITH RECURSIVE walk(rid, id, parent, data, k) AS (
    SELECT rowid, id, parent, data, 1 FROM entries WHERE rowid = ?
    UNION ALL
    SELECT e.rowid, e.id, e.parent, e.data, w.k + 1 FROM entries e JOIN walk w ON e.rowid = w.parent
    WHERE w.k < ?)
SELECT rid, id, data FROM walk ORDER BY k
"""
Blobs = tuple[tuple[str, bytes], ...]
"""(checkpoint id, stored ``rest``) of the rows from a snapshot to a patch, snapshot first."""
_CACHED_THREADS = 64
"""Threads whose newest saved fields an instance keeps parsed (the base of their next patch)."""
_CACHED_MESSAGES = 16_384
"""Verified entries an instance keeps as message objects (reused by the loads that share them)."""


def micros(when: datetime) -> int:
    """``when`` as microseconds since the epoch (the rows' order key, ``at_us``)."""
    delta = when.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_micros = micros


class Cursor(Protocol):
    """What a statement returns: rows as tuples (binary values as ``bytes``)."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """One connection inside one transaction, speaking SQLite's spelling (see the module docstring)."""

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        """Run one statement."""

    def insert(self, sql: str, args: Sequence[Any]) -> int:
        """Run an ``INSERT INTO entries`` and return the new row's ``rowid``."""


class Dialect(ABC):
    """How :class:`SQLHistory` reaches one engine (see the module docstring)."""

    where: str
    """Where the store is, for errors (a path, a DSN without its password)."""

    @abstractmethod
    def txn(self, *, write: bool) -> contextlib.AbstractContextManager[Conn]:
        """One transaction: a write holds the store's write lock; a read sees one snapshot."""

    @abstractmethod
    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` off the event loop, its errors as tulip_nb's (and retried when the engine
        aborted a transaction that may simply be run again: a deadlock, a serialization failure)."""

    def exists(self) -> bool:
        """Whether the store's tables may hold anything (reads of a store never written create nothing)."""
        return True

    def integrity(self, conn: Conn) -> list[str]:
        """The engine's own consistency check ([] when it has none or all is well)."""
        return []

    @abstractmethod
    def close_sync(self) -> None:
        """Release this process's connections."""


class SQLHistory(HistoryStore):
    """The history store in the database a :class:`Dialect` reaches (see the module docstring)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.where = dialect.where
        # thread -> (checkpoint id, fields hash, parts, depth, chain, stored chain) of its newest save
        self._fields: OrderedDict[str, tuple[str, bytes, Parts, int, int, Blobs]] = OrderedDict()
        # entry id -> (stored bytes, parent id, message) of the entries this instance verified
        self._messages: OrderedDict[bytes, tuple[bytes, bytes | None, Message]] = OrderedDict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where!r})"

    def exists(self) -> bool:
        return self.dialect.exists()

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on the store's worker (:meth:`Dialect.run`): how a checkpointer runs its
        synchronous transactions from async code."""
        return await self.dialect.run(fn, *args)

    def close_sync(self) -> None:
        self.dialect.close_sync()

    async def close(self) -> None:
        self.close_sync()

    def write_sync(self, fn: Callable[[Conn], _T]) -> _T:
        """``fn(conn)`` in one write transaction (holding the store's write lock)."""
        with self.dialect.txn(write=True) as conn:
            return fn(conn)

    def read_sync(self, fn: Callable[[Conn], _T]) -> _T:
        """``fn(conn)`` in one read transaction (one snapshot)."""
        with self.dialect.txn(write=False) as conn:
            return fn(conn)

    # -- rows ---------------------------------------------------------------------------------
    def _row(self, r: tuple[Any, ...], *, strict: bool = True) -> Row:
        """A row's header. ``strict=False`` (listings, the latest a save chains after): a damaged
        header is listed with no metadata and its order key's time, so the thread stays listable
        and writable and the row's load (and verify) report it; strict: CheckpointCorrupt."""
        try:
            meta = orjson.loads(r[6])
            when = parse_datetime(r[5])
            if not isinstance(meta, dict):
                raise ValueError("save metadata is not an object")
        except (ValueError, TypeError) as e:  # orjson.JSONDecodeError is a ValueError
            if not strict and len(r) > 11 and isinstance(r[11], int):
                return Row(r[1], r[2], datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=r[11]), {}, r[4])
            raise CheckpointCorrupt(
                f"checkpoint row cannot be read: {e}", path=self.where, thread_id=r[1], checkpoint_id=r[2]
            ) from e
        return Row(r[1], r[2], when, meta, r[4])

    def _check_derived(self, r: tuple[Any, ...]) -> None:
        """The columns derived from digested ones (the order key, the turn-end flag) still match."""
        row = self._row(r)
        if r[11] != _micros(row.created_at) or r[12] != int(is_turn_end(row.metadata)):
            raise CheckpointCorrupt(
                "checkpoint row's order or turn-end columns do not match its created_at and metadata",
                path=self.where,
                thread_id=row.thread_id,
                checkpoint_id=row.checkpoint_id,
            )

    def _latest(self, conn: Conn, thread_id: str) -> CheckpointInfo | None:
        r = conn.execute(f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)).fetchone()
        return self._row(r, strict=False).info if r else None

    def rows_sync(self, thread_id: str, limit: int | None = None) -> list[Row]:
        if not self.dialect.exists():
            return []
        with self.dialect.txn(write=False) as conn:
            sql = f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER}" + (
                " LIMIT ?" if limit is not None else ""
            )
            args: tuple[Any, ...] = (thread_id, limit) if limit is not None else (thread_id,)
            return [self._row(r, strict=False) for r in conn.execute(sql, args)]

    def span_sync(self, thread_id: str) -> tuple[int, Row, Row] | None:
        """How many rows ``thread_id`` has, its oldest and its newest (None: no rows): a count over
        the thread's index range and two rows, whatever the thread's length."""
        if not self.dialect.exists():
            return None
        with self.dialect.txn(write=False) as conn:
            count = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread = ?", (thread_id,)).fetchone()[0]
            if not count:
                return None
            newest = conn.execute(
                f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)
            ).fetchone()
            oldest = conn.execute(
                f"SELECT {_COLS} FROM checkpoints WHERE thread = ? ORDER BY at_us ASC, cid ASC LIMIT 1", (thread_id,)
            ).fetchone()
            return int(count), self._row(oldest, strict=False), self._row(newest, strict=False)

    def all_rows_sync(self) -> dict[str, list[Row]]:
        if not self.dialect.exists():
            return {}
        out: dict[str, list[Row]] = {}
        with self.dialect.txn(write=False) as conn:
            for r in conn.execute(f"SELECT {_COLS} FROM checkpoints ORDER BY thread, at_us DESC, cid DESC"):
                row = self._row(r, strict=False)
                out.setdefault(row.thread_id, []).append(row)
        return out

    def threads_sync(self) -> list[str]:
        if not self.dialect.exists():
            return []
        with self.dialect.txn(write=False) as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT thread FROM checkpoints")]

    # -- save ---------------------------------------------------------------------------------
    def save_sync(self, thread_id: str, plan: SavePlanFn) -> tuple[Row, RowWrite]:
        with self.dialect.txn(write=True) as conn:
            write = plan(self._latest(conn, thread_id))
            self._insert(conn, thread_id, write)
        return Row(thread_id, write.checkpoint_id, write.created_at, write.metadata, write.chain.n), write

    def _insert(self, conn: Conn, thread_id: str, write: RowWrite) -> None:
        head = self._store_chain(conn, write.chain)
        if head is not None:  # referenced before the row it replaces lets go of a shared prefix
            conn.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (head,))
        self._drop_rows(conn, thread_id, [write.checkpoint_id])  # saving an id again replaces it
        base = conn.execute(
            f"SELECT cid, fields FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)
        ).fetchone()
        base_parts, depth, chain, blobs = self._base_parts(conn, thread_id, base)
        enc, parts, fields_bytes = encode(write.rest, base_parts, depth, chain)
        blobs = (*blobs, (write.checkpoint_id, enc.blob)) if enc.patch else ((write.checkpoint_id, enc.blob),)
        digest_of_fields = fields_hash(fields_bytes)
        meta = orjson.dumps(write.metadata, option=orjson.OPT_NON_STR_KEYS)
        digest = row_digest(
            thread_id, write.checkpoint_id, write.created_at, meta, write.chain.head, write.chain.n, digest_of_fields
        )
        parent = write.metadata.get(PARENT_KEY)
        conn.execute(
            "INSERT INTO checkpoints(thread, cid, parent, head, n, at_us, created_at, turn_end, metadata, rest,"
            " base, depth, chain, fields, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                thread_id,
                write.checkpoint_id,
                parent if isinstance(parent, str) else None,
                head,
                write.chain.n,
                _micros(write.created_at),
                iso_offset(write.created_at),
                int(is_turn_end(write.metadata)),
                meta,
                enc.blob,
                base[0] if enc.patch and base is not None else None,
                enc.depth,
                enc.chain,
                digest_of_fields,
                digest,
            ),
        )
        self._remember(thread_id, (write.checkpoint_id, digest_of_fields, parts, enc.depth, enc.chain, blobs))

    def _remember(self, thread_id: str, value: tuple[str, bytes, Parts, int, int, Blobs]) -> None:
        self._fields[thread_id] = value
        self._fields.move_to_end(thread_id)
        while len(self._fields) > _CACHED_THREADS:
            self._fields.popitem(last=False)

    def _base_parts(
        self, conn: Conn, thread_id: str, base: tuple[str, bytes] | None
    ) -> tuple[Parts | None, int, int, Blobs]:
        """The parts, depth, chain and stored chain of the row a new save patches against (None: none).

        The instance's own newest save when the row is still that one (same id and fields hash,
        whoever else wrote meanwhile), else rebuilt from the store; a base that cannot be rebuilt
        (corrupt) gives None, so the save is written whole and never depends on it.
        """
        if base is None:
            return None, 0, 0, ()
        cached = self._fields.get(thread_id)
        if (
            cached is not None
            and cached[0] == base[0]
            and cached[1] == base[1]
            and self._same_blobs(conn, thread_id, cached[5])
        ):
            return cached[2], cached[3], cached[4], cached[5]
        r = conn.execute(
            "SELECT rest, base, depth, chain, fields FROM checkpoints WHERE thread = ? AND cid = ?",
            (thread_id, base[0]),
        ).fetchone()
        try:
            with gc_paused():
                fields, blobs = self._rebuild_chain(conn, thread_id, base[0], r[0], r[1], r[4])
                parts = parts_of_json(orjson.dumps(fields))
        except CheckpointCorrupt:
            return None, 0, 0, ()
        return parts, int(r[2]), int(r[3]), blobs

    def _same_blobs(self, conn: Conn, thread_id: str, blobs: Blobs) -> bool:
        """Whether the rows of a cached base chain still hold the bytes the cache was built from (a
        row damaged since is never patched against: the save is written whole instead)."""
        if not blobs:
            return True
        marks = ",".join("?" * len(blobs))
        stored = dict(
            conn.execute(
                f"SELECT cid, rest FROM checkpoints WHERE thread = ? AND cid IN ({marks})",
                (thread_id, *(cid for cid, _ in blobs)),
            ).fetchall()
        )
        return all(stored.get(cid) == blob for cid, blob in blobs)

    def _rebuild(
        self, conn: Conn, thread_id: str, cid: str, blob: bytes, base: str | None, want: bytes
    ) -> dict[str, Any]:
        """A row's whole fields: its snapshot, or its base's rebuilt and its patch applied; verified."""
        return self._rebuild_chain(conn, thread_id, cid, blob, base, want)[0]

    def _rebuild_chain(
        self, conn: Conn, thread_id: str, cid: str, blob: bytes, base: str | None, want: bytes
    ) -> tuple[dict[str, Any], Blobs]:
        """:meth:`_rebuild`, and the (id, stored blob) of each row it read, snapshot first."""
        where = self.where
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": cid}
        blobs = [blob]
        cids = [cid]
        while base is not None:
            if len(blobs) > MAX_DEPTH + 1:
                raise CheckpointCorrupt("the row's fields patch a chain with no snapshot", path=where, **ctx)
            r = conn.execute(
                "SELECT rest, base FROM checkpoints WHERE thread = ? AND cid = ?", (thread_id, base)
            ).fetchone()
            if r is None:
                raise CheckpointCorrupt(f"the row's fields patch missing checkpoint {base}", path=where, **ctx)
            blobs.append(r[0])
            cids.append(base)
            base = r[1]
        try:
            fields = decode(blobs[-1], None)
            for patch in reversed(blobs[:-1]):
                fields = decode(patch, fields)
        except PatchError as e:
            raise CheckpointCorrupt(str(e), path=where, **ctx) from e
        if fields_hash(orjson.dumps(fields)) != want:
            raise CheckpointCorrupt("the row's state fields do not match their hash", path=where, **ctx)
        return fields, tuple(zip(reversed(cids), reversed(blobs), strict=True))

    def _entry_rowid(self, conn: Conn, eid: bytes) -> int | None:
        r = conn.execute("SELECT rowid FROM entries WHERE id = ?", (eid,)).fetchone()
        return int(r[0]) if r else None

    def _store_chain(self, conn: Conn, chain: MessageChain) -> int | None:
        """The rowid of the chain's head, inserting the entries the store lacks (in this transaction).

        An entry's presence implies its whole prefix's, so the longest stored prefix is found by a
        binary search (usually two lookups: the head, then the writer's ``known`` hint).
        """
        if chain.n == 0:
            return None
        ids = chain.ids
        head = self._entry_rowid(conn, ids[chain.n - 1])
        if head is not None:
            self._check_stored(conn, chain, head, chain.n)
            return head
        lo, hi = 0, chain.n - 1  # entries [0, lo) stored; [hi, n) not
        parent: int | None = None
        if 0 < chain.known < chain.n:
            hint = self._entry_rowid(conn, ids[chain.known - 1])
            if hint is not None:
                lo, parent = chain.known, hint
            else:
                hi = chain.known - 1
        while lo < hi:
            mid = (lo + hi) // 2
            found = self._entry_rowid(conn, ids[mid])
            if found is not None:
                lo, parent = mid + 1, found
            else:
                hi = mid
        if lo and parent is None:
            parent = self._entry_rowid(conn, ids[lo - 1])
        if parent is not None:
            self._check_stored(conn, chain, parent, lo)
            conn.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (parent,))
        for i in range(lo, chain.n):
            refs = 0 if i == chain.n - 1 else 1
            parent = conn.insert(
                "INSERT INTO entries(id, parent, refs, data) VALUES (?, ?, ?, ?)", (ids[i], parent, refs, chain.data(i))
            )
        return parent

    def _check_stored(self, conn: Conn, chain: MessageChain, top: int, upto: int) -> None:
        """Check the stored entries ``[chain.known, upto)`` (``top``: the rowid of entry ``upto - 1``)
        against the writer's messages before a save builds on them; a damaged entry (its id still
        names the writer's bytes) is repaired with them, so a save never extends a damaged history.
        Entries this instance wrote or loaded (``known``) are not read again."""
        want = upto - chain.known
        if want <= 0:
            return
        rows = conn.execute(_WALK_ROWS, (top, want)).fetchall()
        for k, (rowid, eid, data) in enumerate(rows):
            i = upto - 1 - k
            if eid != chain.ids[i]:
                raise CheckpointCorrupt(
                    f"stored history differs from the saved state's at message {i} (a damaged parent link)",
                    path=self.where,
                )
            mine = chain.data(i)
            if data != mine:
                conn.execute("UPDATE entries SET data = ? WHERE rowid = ?", (mine, rowid))
        if len(rows) != want:
            raise CheckpointCorrupt("stored history is shorter than its entry ids say", path=self.where)

    # -- drop ---------------------------------------------------------------------------------
    def _release(self, conn: Conn, rowid: int | None) -> None:
        """One reference fewer to entry ``rowid``; entries nothing reaches any more are deleted."""
        while rowid is not None:
            conn.execute("UPDATE entries SET refs = refs - 1 WHERE rowid = ?", (rowid,))
            r = conn.execute("SELECT refs, parent FROM entries WHERE rowid = ?", (rowid,)).fetchone()
            if r is None or r[0] > 0:
                return
            conn.execute("DELETE FROM entries WHERE rowid = ?", (rowid,))
            rowid = r[1]

    def _drop_rows(self, conn: Conn, thread_id: str, cids: list[str] | None) -> int:
        if cids is None:
            found = conn.execute("SELECT seq, head FROM checkpoints WHERE thread = ?", (thread_id,)).fetchall()
        else:
            found = []
            for cid in cids:
                r = conn.execute(
                    "SELECT seq, head FROM checkpoints WHERE thread = ? AND cid = ?", (thread_id, cid)
                ).fetchone()
                if r is not None:
                    found.append(r)
        if cids is not None and found:
            self._rebase(conn, thread_id, set(cids))
        for seq, head in found:
            conn.execute("DELETE FROM checkpoints WHERE seq = ?", (seq,))
            self._release(conn, head)
        return len(found)

    def _rebase(self, conn: Conn, thread_id: str, dropped: set[str]) -> None:
        """Rewrite whole the surviving rows whose fields patch a row about to be dropped.

        All are rebuilt before any is rewritten (one may patch another). A row that cannot be
        rebuilt is corrupt already; it is left as it is (``verify`` reports it).
        """
        rebuilt: list[tuple[bytes, int]] = []
        for cid in sorted(dropped):
            for seq, dep, blob, base, want in conn.execute(
                "SELECT seq, cid, rest, base, fields FROM checkpoints WHERE thread = ? AND base = ?", (thread_id, cid)
            ).fetchall():
                if dep in dropped:
                    continue
                with contextlib.suppress(CheckpointCorrupt):
                    rebuilt.append((orjson.dumps(self._rebuild(conn, thread_id, dep, blob, base, want)), seq))
        for fields_bytes, seq in rebuilt:
            whole = pack(fields_bytes)
            conn.execute(
                "UPDATE checkpoints SET rest = ?, base = NULL, depth = 0, chain = 0 WHERE seq = ?", (whole, seq)
            )
        if rebuilt:
            self._fields.pop(thread_id, None)

    def delete_sync(self, thread_id: str, cids: list[str] | None) -> int:
        with self.dialect.txn(write=True) as conn:
            return self._drop_rows(conn, thread_id, cids)

    def rewrite_sync(self, thread_id: str, plan: RewritePlanFn) -> int:
        with self.dialect.txn(write=True) as conn:
            return self.rewrite_in(conn, thread_id, plan)

    def _set_metadata(self, conn: Conn, thread_id: str, cid: str, meta: dict[str, Any]) -> None:
        r = conn.execute(
            "SELECT c.seq, c.n, c.created_at, c.fields, e.id, c.metadata, c.digest FROM checkpoints c"
            " LEFT JOIN entries e ON e.rowid = c.head WHERE c.thread = ? AND c.cid = ?",
            (thread_id, cid),
        ).fetchone()
        if r is None:
            return
        seq, n, created, fields, head, old_meta, old_digest = r
        with contextlib.suppress(CheckpointCorrupt, ValueError):
            if row_digest(thread_id, cid, parse_datetime(created), old_meta, head, n, fields) != old_digest:
                return  # a damaged or moved-in row is never re-signed (verify keeps reporting it)
        blob = orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS)
        digest = row_digest(thread_id, cid, parse_datetime(created), blob, head, n, fields)
        parent = meta.get(PARENT_KEY)
        conn.execute(
            "UPDATE checkpoints SET metadata = ?, digest = ?, parent = ?, turn_end = ? WHERE seq = ?",
            (blob, digest, parent if isinstance(parent, str) else None, int(is_turn_end(meta)), seq),
        )

    # -- copy ---------------------------------------------------------------------------------
    def copy_sync(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        with self.dialect.txn(write=True) as conn:
            return self._copy(conn, source, dest, metadata)

    def _copy(self, conn: Conn, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        rows = conn.execute(
            "SELECT c.seq, c.cid, c.head, c.n, c.at_us, c.created_at, c.turn_end, c.metadata, c.rest, e.id,"
            " c.base, c.depth, c.chain, c.fields, c.digest FROM checkpoints c"
            " LEFT JOIN entries e ON e.rowid = c.head"
            " WHERE c.thread = ? ORDER BY c.seq",
            (source,),
        ).fetchall()
        if not rows:
            raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
        if conn.execute("SELECT 1 FROM checkpoints WHERE thread = ? LIMIT 1", (dest,)).fetchone():
            raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
        for _, cid, head, n, at_us, created, turn_end, meta, rest, head_id, base, depth, chain, fields, old in rows:
            try:
                src_row = self._row((None, source, cid, None, n, created, meta))
                intact = row_digest(source, cid, src_row.created_at, meta, head_id, n, fields) == old
            except CheckpointCorrupt:
                src_row, intact = Row(source, cid, datetime.now(UTC), {}, n), False
            new_meta = orjson.dumps(metadata(src_row), option=orjson.OPT_NON_STR_KEYS)
            # a damaged (or moved-in) row is copied as it is, its digest still failing: a copy
            # never re-signs it into a valid one (the copy's loads and verify report it)
            digest = row_digest(dest, cid, src_row.created_at, new_meta, head_id, n, fields) if intact else old
            parent = orjson.loads(new_meta).get(PARENT_KEY)
            conn.execute(
                "INSERT INTO checkpoints(thread, cid, parent, head, n, at_us, created_at, turn_end, metadata,"
                " rest, base, depth, chain, fields, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    dest,
                    cid,
                    parent if isinstance(parent, str) else None,
                    head,
                    n,
                    at_us,
                    created,
                    turn_end,
                    new_meta,
                    rest,
                    base,
                    depth,
                    chain,
                    fields,
                    digest,
                ),
            )
            if head is not None:
                conn.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (head,))
        return len(rows)

    # -- load ---------------------------------------------------------------------------------
    def load_sync(self, thread_id: str, checkpoint_id: str | None) -> StoredCheckpoint | None:
        if not self.dialect.exists():
            if checkpoint_id is not None:
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
            return None
        with self.dialect.txn(write=False) as conn:
            return self._load(conn, thread_id, checkpoint_id)

    def _load(self, conn: Conn, thread_id: str, checkpoint_id: str | None) -> StoredCheckpoint | None:
        if checkpoint_id is None:
            r = conn.execute(
                f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)
            ).fetchone()
            if r is None:
                return None
        else:
            r = conn.execute(
                f"SELECT {_COLS} FROM checkpoints WHERE thread = ? AND cid = ?", (thread_id, checkpoint_id)
            ).fetchone()
            if r is None:
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        head_rowid = r[3]
        # bounded: a damaged parent link (a loop) must end in an error, not run forever
        walk = conn.execute(_WALK, (head_rowid, int(r[4]) + 1)).fetchall() if head_rowid is not None else []
        head_id = walk[0][0] if walk else None
        return self._verified(conn, r, walk, head_id, head_rowid)

    def load_many_sync(
        self, thread_id: str, checkpoint_ids: Sequence[str]
    ) -> list[StoredCheckpoint | CheckpointCorrupt | CheckpointNotFound]:
        """Several checkpoints of one thread in one read transaction, each verified as :meth:`load_sync` does.

        Each history is walked from its head only down to the head of the checkpoint loaded just
        before it (consecutive checkpoints extend each other), and each row's fields are patched
        onto its base's when that was loaded just before, so loading a thread's checkpoints in
        order costs each message and each patch once (``verify_thread`` of a long thread is linear,
        not quadratic). The snapshot is the transaction's, so nothing verified can change under
        it. A checkpoint that is missing or corrupt is its error in the list; the others still load.
        """
        if not self.dialect.exists():
            return [
                CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=c) for c in checkpoint_ids
            ]
        out: list[StoredCheckpoint | CheckpointCorrupt | CheckpointNotFound] = []
        known: tuple[int, list[bytes], list[Message]] | None = None  # the last head: rowid, ids, messages
        fields_of: OrderedDict[str, bytes] = OrderedDict()
        # a batch builds many objects and no cycles: no collection until it is done (measured: the
        # collector re-traversing a long thread's live messages took 10 of 14 s at 1,198 checkpoints)
        with self.dialect.txn(write=False) as conn, gc_paused():
            for cid in checkpoint_ids:
                try:
                    stored, known = self._load_after(conn, thread_id, cid, known, fields_of)
                except (CheckpointCorrupt, CheckpointNotFound) as e:
                    out.append(e)
                    continue
                out.append(stored)
        return out

    def _load_after(
        self,
        conn: Conn,
        thread_id: str,
        cid: str,
        known: tuple[int, list[bytes], list[Message]] | None,
        fields_of: OrderedDict[str, bytes],
    ) -> tuple[StoredCheckpoint, tuple[int, list[bytes], list[Message]] | None]:
        r = conn.execute(f"SELECT {_COLS} FROM checkpoints WHERE thread = ? AND cid = ?", (thread_id, cid)).fetchone()
        if r is None:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=cid)
        _, _, _, head_rowid, n, _, meta, rest_blob, digest, base, want, _, _ = r
        n = int(n)
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": cid}
        where = self.where
        ids: list[bytes] = []
        messages: list[Message] = []
        if head_rowid is not None:
            stop = known[0] if known is not None else -1
            walk = conn.execute(_WALK_TO, (head_rowid, stop, n + 1)).fetchall()
            if not walk:
                raise CheckpointCorrupt("the checkpoint's head entry is missing", path=where, **ctx)
            if known is not None and walk[-1][0] == stop and len(known[1]) + len(walk) - 1 == n:
                ids, messages = self._extend(known, walk[:-1], where, ctx)
            else:
                pairs = [(eid, data) for _, eid, data in walk]
                messages = self._verified_messages(pairs[0][0] if pairs else None, pairs, n, where, ctx)
                ids = [eid for eid, _ in reversed(pairs)]
        head_id = ids[-1] if ids else None
        when = self._row(r).created_at
        if row_digest(thread_id, cid, when, meta, head_id, n, want) != digest:
            raise CheckpointCorrupt("checkpoint row does not match its content digest", path=where, **ctx)
        self._check_derived(r)
        fields = self._fields_after(conn, thread_id, cid, rest_blob, base, want, fields_of)
        state = state_with(fields, list(messages), where=where, thread_id=thread_id)
        ckpt = Checkpoint(cid, thread_id, when, state, orjson.loads(meta))
        return StoredCheckpoint(ckpt, ids), ((int(head_rowid), ids, messages) if head_rowid is not None else known)

    def _extend(
        self,
        known: tuple[int, list[bytes], list[Message]],
        walk: list[tuple[int, bytes, bytes]],
        where: str,
        ctx: dict[str, Any],
    ) -> tuple[list[bytes], list[Message]]:
        """A verified history plus the entries ``walk`` adds on top of it (head first), each checked."""
        _, ids, messages = known
        if not walk:
            return ids, messages
        parent = ids[-1] if ids else None
        for k, (_, eid, data) in enumerate(walk):
            below = walk[k + 1][1] if k + 1 < len(walk) else parent
            if entry_id(below, data) != eid:
                raise CheckpointCorrupt(
                    f"message {len(ids) + len(walk) - 1 - k} no longer matches its entry id (stored bytes changed)",
                    path=where,
                    **ctx,
                )
        with gc_paused():
            try:
                added = messages_from_json(orjson.loads(b"[" + b",".join(d for _, _, d in reversed(walk)) + b"]"))
            except (orjson.JSONDecodeError, ValidationError) as e:
                raise CheckpointCorrupt(f"stored messages cannot be read: {e}", path=where, **ctx) from e
        return [*ids, *(eid for _, eid, _ in reversed(walk))], [*messages, *added]

    def _fields_after(
        self,
        conn: Conn,
        thread_id: str,
        cid: str,
        blob: bytes,
        base: str | None,
        want: bytes,
        fields_of: OrderedDict[str, bytes],
    ) -> dict[str, Any]:
        """A row's fields, patched onto its base's when that was rebuilt in this batch (checked by hash).

        The batch keeps the fields' canonical bytes, not objects, so no two loaded states share a
        mutable value.
        """
        have = fields_of.get(base) if base is not None else None
        if have is None:
            fields = self._rebuild(conn, thread_id, cid, blob, base, want)
            data = orjson.dumps(fields)
        else:
            try:
                fields = decode(blob, orjson.loads(have))
            except PatchError as e:
                raise CheckpointCorrupt(str(e), path=self.where, thread_id=thread_id, checkpoint_id=cid) from e
            data = orjson.dumps(fields)
            if fields_hash(data) != want:
                raise CheckpointCorrupt(
                    "the row's state fields do not match their hash",
                    path=self.where,
                    thread_id=thread_id,
                    checkpoint_id=cid,
                )
        fields_of[cid] = data
        while len(fields_of) > 4:
            fields_of.popitem(last=False)
        return fields

    # -- the projection -----------------------------------------------------------------------
    def _latest_turn_end(self, conn: Conn, thread_id: str) -> str | None:
        r = conn.execute(
            f"SELECT cid FROM checkpoints WHERE thread = ? AND turn_end = 1 {_ORDER} LIMIT 1", (thread_id,)
        ).fetchone()
        return str(r[0]) if r else None

    def latest_turn_end_sync(self, thread_id: str) -> str | None:
        """The id of the thread's newest turn end (the checkpoint tulip is shown), if any."""
        if not self.dialect.exists():
            return None
        with self.dialect.txn(write=False) as conn:
            return self._latest_turn_end(conn, thread_id)

    def project_sync(self, thread_id: str, fn: Callable[[str | None, Callable[[str], StoredCheckpoint]], _T]) -> _T:
        """Run ``fn(latest turn end id, loader)`` holding the store's write lock (no row changes).

        Writers of the projection are serialised by the same lock as the saves they follow, so
        the envelope tulip sees is always the latest committed turn end's, whoever wrote last.
        """
        with self.dialect.txn(write=True) as conn:

            def load(cid: str) -> StoredCheckpoint:
                got = self._load(conn, thread_id, cid)
                assert got is not None
                return got

            return fn(self._latest_turn_end(conn, thread_id), load)

    def project_every_sync(
        self, thread_id: str, fn: Callable[[list[str], Callable[[str], StoredCheckpoint]], _T]
    ) -> _T:
        """:meth:`project_sync` for ``layout="tulip"``: ``fn(every checkpoint id of the thread, loader)``."""
        with self.dialect.txn(write=True) as conn:

            def load(cid: str) -> StoredCheckpoint:
                got = self._load(conn, thread_id, cid)
                assert got is not None
                return got

            ids = [str(r[0]) for r in conn.execute("SELECT cid FROM checkpoints WHERE thread = ?", (thread_id,))]
            return fn(ids, load)

    def _verified(
        self,
        conn: Conn,
        r: tuple[Any, ...],
        walk: list[tuple[bytes, bytes]],
        head_id: bytes | None,
        head_rowid: int | None,
    ) -> StoredCheckpoint:
        _, thread_id, cid, _, n, _, meta, rest_blob, digest, base, want, _, _ = r
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": cid}
        where = self.where
        if head_rowid is not None and not walk:
            raise CheckpointCorrupt("the checkpoint's head entry is missing", path=where, **ctx)
        messages = self._verified_messages(head_id, walk, n, where, ctx)
        when = self._row(r).created_at
        if row_digest(thread_id, cid, when, meta, head_id, n, want) != digest:
            raise CheckpointCorrupt("checkpoint row does not match its content digest", path=where, **ctx)
        self._check_derived(r)
        fields = self._rebuild(conn, thread_id, cid, rest_blob, base, want)
        walk.reverse()
        state = state_with(fields, messages, where=where, thread_id=thread_id)
        metadata = orjson.loads(meta)
        return StoredCheckpoint(Checkpoint(cid, thread_id, when, state, metadata), [i for i, _ in walk])

    def _verified_messages(
        self, head: bytes | None, walk: list[tuple[bytes, bytes]], n: int, where: str, ctx: dict[str, Any]
    ) -> list[Message]:
        """The messages of an entry walk (head first), oldest first, each checked against its id.

        An entry this instance verified before (same id, same stored bytes, same parent) is not
        hashed or parsed again: its message object is reused (messages are immutable), so loading
        the consecutive checkpoints of a thread (``verify_thread``, a replay) costs each message
        once, not once per checkpoint; a stored byte that changed since is hashed and caught.
        """
        if len(walk) != n:
            raise CheckpointCorrupt(f"history has {len(walk)} messages, the checkpoint says {n}", path=where, **ctx)
        if n and walk[0][0] != head:
            raise CheckpointCorrupt("history does not start at the checkpoint's head entry", path=where, **ctx)
        cache = self._messages
        out: list[Message | None] = [None] * n
        fresh: list[int] = []
        for k, (eid, data) in enumerate(walk):
            parent = walk[k + 1][0] if k + 1 < n else None
            hit = cache.get(eid)
            if hit is not None and hit[0] == data and hit[1] == parent:
                out[n - 1 - k] = hit[2]
                continue
            if entry_id(parent, data) != eid:
                raise CheckpointCorrupt(
                    f"message {n - 1 - k} no longer matches its entry id (stored bytes changed)", path=where, **ctx
                )
            fresh.append(k)
        if fresh:
            with gc_paused():
                try:
                    parsed = messages_from_json(orjson.loads(b"[" + b",".join(walk[k][1] for k in fresh) + b"]"))
                except (orjson.JSONDecodeError, ValidationError) as e:
                    raise CheckpointCorrupt(f"stored messages cannot be read: {e}", path=where, **ctx) from e
            for k, message in zip(fresh, parsed, strict=True):
                out[n - 1 - k] = message
                parent = walk[k + 1][0] if k + 1 < n else None
                cache[walk[k][0]] = (walk[k][1], parent, message)
            while len(cache) > _CACHED_MESSAGES:
                cache.popitem(last=False)
        return [m for m in out if m is not None]

    # -- inside a transaction (for checkpointers that write more in the same one) -------------
    def latest_in(self, conn: Conn, thread_id: str) -> CheckpointInfo | None:
        """The thread's newest row (a damaged header listed with its order key's time)."""
        return self._latest(conn, thread_id)

    def rows_in(self, conn: Conn, thread_id: str) -> list[Row]:
        """The thread's rows, newest first."""
        return [
            self._row(r, strict=False)
            for r in conn.execute(f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER}", (thread_id,))
        ]

    def rows_in_limit(self, conn: Conn, thread_id: str, limit: int) -> list[Row]:
        """The thread's newest ``limit`` rows, newest first."""
        sql = f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER} LIMIT ?"
        return [self._row(r, strict=False) for r in conn.execute(sql, (thread_id, limit)).fetchall()]

    def all_rows_in(self, conn: Conn) -> list[Row]:
        """Every row of every thread (by thread, newest first)."""
        sql = f"SELECT {_COLS} FROM checkpoints ORDER BY thread, at_us DESC, cid DESC"
        return [self._row(r, strict=False) for r in conn.execute(sql).fetchall()]

    def insert_in(self, conn: Conn, thread_id: str, write: RowWrite) -> Row:
        """Write one row (replacing a row with its id) and the entries it adds."""
        self._insert(conn, thread_id, write)
        return Row(thread_id, write.checkpoint_id, write.created_at, write.metadata, write.chain.n)

    def drop_in(self, conn: Conn, thread_id: str, cids: list[str] | None) -> int:
        """Remove the rows ``cids`` (every row for None) and the entries only they reached."""
        return self._drop_rows(conn, thread_id, cids)

    def rewrite_in(self, conn: Conn, thread_id: str, plan: RewritePlanFn) -> int:
        """:meth:`rewrite` inside ``conn``'s transaction."""
        rows = self.rows_in(conn, thread_id)
        change = plan([r.info for r in rows])
        for cid, meta in change.metadata.items():
            if cid not in change.drop:
                self._set_metadata(conn, thread_id, cid, meta)
        return self._drop_rows(conn, thread_id, sorted(change.drop))

    def load_in(self, conn: Conn, thread_id: str, checkpoint_id: str | None) -> StoredCheckpoint | None:
        """:meth:`load` inside ``conn``'s transaction."""
        return self._load(conn, thread_id, checkpoint_id)

    def latest_turn_end_in(self, conn: Conn, thread_id: str) -> str | None:
        """The id of the thread's newest turn end, if any."""
        return self._latest_turn_end(conn, thread_id)

    def copy_in(self, conn: Conn, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        """:meth:`copy` inside ``conn``'s transaction."""
        return self._copy(conn, source, dest, metadata)

    def threads_in(self, conn: Conn) -> list[str]:
        return [str(r[0]) for r in conn.execute("SELECT DISTINCT thread FROM checkpoints")]

    # -- async primitives ---------------------------------------------------------------------
    async def save(self, thread_id: str, plan: SavePlanFn) -> Row:
        return (await self.run(self.save_sync, thread_id, plan))[0]

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> StoredCheckpoint | None:
        return await self.run(self.load_sync, thread_id, checkpoint_id)

    async def rows(self, thread_id: str, limit: int | None = None) -> list[Row]:
        return await self.run(self.rows_sync, thread_id, limit)

    async def all_rows(self) -> dict[str, list[Row]]:
        return await self.run(self.all_rows_sync)

    async def copy(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        return await self.run(self.copy_sync, source, dest, metadata)

    async def rewrite(self, thread_id: str, plan: RewritePlanFn) -> int:
        return await self.run(self.rewrite_sync, thread_id, plan)

    async def delete_thread(self, thread_id: str) -> int:
        return await self.run(self.delete_sync, thread_id, None)

    def integrity_sync(self) -> list[str]:
        """The engine's own check plus the entry reference counts; [] when all is well."""
        with self.dialect.txn(write=False) as conn:
            problems = self.dialect.integrity(conn)
            bad = conn.execute(
                "SELECT rid, refs, want FROM (SELECT e.rowid AS rid, e.refs AS refs,"
                " (SELECT COUNT(*) FROM entries c WHERE c.parent = e.rowid)"
                " + (SELECT COUNT(*) FROM checkpoints k WHERE k.head = e.rowid) AS want FROM entries e) x"
                " WHERE refs != want"
            ).fetchall()
            problems += [f"entry {rid}: refs {refs}, reached {want} times" for rid, refs, want in bad]
            for r in conn.execute(f"SELECT {_COLS} FROM checkpoints ORDER BY thread, seq").fetchall():
                try:
                    self._check_derived(r)
                except CheckpointCorrupt as e:
                    problems.append(f"thread {r[1]!r} checkpoint {r[2]}: {e.message}")
            dangling = conn.execute(
                "SELECT COUNT(*) FROM checkpoints k WHERE k.head IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.rowid = k.head)"
            ).fetchone()[0]
            if dangling:
                problems.append(f"{dangling} checkpoints name a head entry that is missing")
        return problems
