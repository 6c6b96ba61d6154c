"""The history model on PostgreSQL and MySQL, with tulip's keys as a projection: ``SQLHistoryCheckpointer``.

The history (:mod:`tulip_nb.memory.history`) lives in side tables beside tulip's key-value table
(:mod:`._sql_server`): a save is one transaction that writes a small row and the messages it adds,
so a save costs what changed (not the whole state, a full ``:latest`` copy and an index of every
checkpoint, as tulip's layout does), and a fork or copy is rows on the same entries.

What tulip reads is written **in the same transaction, by the same connection**
(:mod:`._kv_projection`): the thread's latest turn end as ``<tid>:<cid>``, ``<tid>:latest`` and
the ``<tid>:_checkpoints`` index (``layout="history"``, the default), or every checkpoint
(``layout="tulip"``: tulip lists and loads each one). A tulip agent resumes any thread written
here. The records a tulip agent writes into the index (no projection mark, not a row of the
history) are checkpoints of the thread: its latest is the newest of the rows and those, and the
next save chains after it. tulip deleting its own checkpoints (or the projection) takes nothing
from the history: the next write projects the thread again.

Every row carries a content digest checked on load; ``sign=True`` hash-chains the saves.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence, Set
from typing import Any, Literal

import orjson

from tulip_nb.core import parse_datetime
from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, UserError
from tulip_nb.core.state import AgentState, message_digest, state_json_parts
from tulip_nb.memory.backends._base import newest_first
from tulip_nb.memory.backends._history_common import (
    BlockingHistoryCheckpointer,
    PendingSave,
    copied_metadata,
    newest,
    put_write,
    rewrite_plan,
)
from tulip_nb.memory.backends._history_dir import is_turn_end
from tulip_nb.memory.backends._kv import (
    INDEX_SUFFIX,
    IndexEntry,
    KVStore,
    Op,
    check_checkpoint_id,
    decode_record,
    encode_record,
    index_key,
    parse_index,
    record_key,
)
from tulip_nb.memory.backends._kv_projection import changes, ops
from tulip_nb.memory.backends._sql_history import Conn, SQLHistory
from tulip_nb.memory.backends._sql_server import ServerDialect
from tulip_nb.memory.checkpointer import (
    Checkpoint,
    CheckpointInfo,
    validate_checkpoint_id,
    validate_thread_id,
)
from tulip_nb.memory.history import PROJECTION_KEY, StoredCheckpoint

__all__ = ["SQLHistoryCheckpointer"]

Layout = Literal["history", "tulip"]
_OWN_CACHE = 100_000
"""How many verdicts "tulip's own record" an instance remembers before it starts over."""


def mark_record(record: bytes, checkpoint_id: str) -> bytes:
    """A flattened record (:func:`~._kv.encode_record`) marked as the projection of ``checkpoint_id``."""
    return record[:-1] + b',"' + PROJECTION_KEY.encode() + b'":' + orjson.dumps(checkpoint_id) + b"}"


def tulips_own(
    thread_id: str, entries: Sequence[IndexEntry], rows: Set[str], marks: Mapping[str, str | None]
) -> list[IndexEntry]:
    """The index entries a tulip agent wrote: not a row of the history, and a record that exists
    and is not marked as the projection of its own id (``marks``: record key -> its mark, for the
    records that exist). An entry whose record tulip already deleted is nobody's checkpoint.

    >>> from datetime import UTC, datetime
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> ours, theirs = IndexEntry("c1", at), IndexEntry("t1", at.replace(hour=1))
    >>> [e.checkpoint_id for e in tulips_own("t", [theirs, ours], rows={"c1"}, marks={"t:t1": None})]
    ['t1']
    """
    out = []
    for e in entries:
        if e.checkpoint_id in rows:
            continue
        key = record_key(thread_id, e.checkpoint_id)
        if key in marks and marks[key] != e.checkpoint_id:
            out.append(e)
    return out


def _projection_ops(
    thread_id: str,
    current: Sequence[IndexEntry],
    tulip: Sequence[IndexEntry],
    want: Sequence[IndexEntry],
    records: Mapping[str, bytes],
    drop: Collection[str] = (),
) -> list[Op]:
    """The writes that make tulip's keys of ``thread_id`` show ``want`` beside ``tulip``'s own
    (:func:`~._kv_projection.changes`, :func:`~._kv_projection.ops`).

    ``current``: the index as read; ``tulip``: tulip's own entries that stay; ``records``:
    checkpoint id -> the marked record to (re)write; ``drop``: ids gone from the thread (rows,
    or tulip's own), whose records go too. Every other index entry is a projection: kept when
    wanted, else removed. ``:latest`` is rewritten every time (a repair of a hand-edited one).
    """
    theirs = {e.checkpoint_id for e in tulip}
    ours = {e.checkpoint_id for e in current if e.checkpoint_id not in theirs} | {e.checkpoint_id for e in want}
    change = changes(
        current, ours=ours | set(drop), want=want, drop_foreign=drop, rewrite=set(records), refresh_latest=True
    )
    return ops(thread_id, change, records, current)


def _info(e: IndexEntry, thread_id: str) -> CheckpointInfo:
    return CheckpointInfo(e.checkpoint_id, thread_id, e.created_at, dict(e.metadata))


def _entry(i: CheckpointInfo) -> IndexEntry:
    return IndexEntry(i.checkpoint_id, i.created_at, dict(i.metadata))


class SQLHistoryCheckpointer(BlockingHistoryCheckpointer):
    """Threads in a SQL database: the history in side tables, tulip's keys as its projection.

    Made by :func:`~tulip_nb.memory.backends.postgresql_checkpointer` and
    :func:`~tulip_nb.memory.backends.mysql_checkpointer` (module docstring). ``expected_parent=``
    is an exact compare-and-swap among tulip_nb writers (every write holds the store's write lock);
    tulip takes no lock, so its records are read as the thread's newest, not ordered against a
    save in flight.
    """

    def __init__(
        self, dialect: ServerDialect, *, layout: Layout = "history", sign: bool = True, backend: KVStore | None = None
    ) -> None:
        if layout not in ("history", "tulip"):
            raise UserError(f"layout must be 'history' or 'tulip', got {layout!r}")
        self.layout = layout
        self.every = layout == "tulip"
        self.dialect = dialect
        self.backend = backend
        """The storage backend of tulip's table (raw keys: ``list_threads``, ``load``, ``vacuum`` of
        rows), sharing nothing with the history but the table; None when not given."""
        self.store = SQLHistory(dialect)
        self._start(sign=sign)
        self._own: set[tuple[str, str]] = set()
        """(thread, checkpoint id) of records known to be tulip's own (see :meth:`_tulip`)."""

    def __repr__(self) -> str:
        return f"SQLHistoryCheckpointer({self.dialect.where!r}, layout={self.layout!r})"

    # -- tulip's keys, inside a transaction ---------------------------------------------------
    def _index(self, conn: Conn, thread_id: str) -> list[IndexEntry]:
        key = index_key(thread_id)
        return parse_index(self.dialect.kv_get_many(conn, [key]).get(key), where=f"{self.dialect.where}:{key}")

    def _tulip(self, conn: Conn, thread_id: str, entries: list[IndexEntry]) -> list[IndexEntry]:
        """tulip's own entries of the index (not rows of the history, not our projections).

        A record's mark is read once per instance: a record tulip wrote is never rewritten under
        its id by us (we write records for rows only), so its verdict is remembered (reading the
        mark reads the whole record on the server).
        """
        if not entries:
            return []
        cids = [e.checkpoint_id for e in entries]
        marks = ", ".join("?" * len(cids))
        rows = {
            str(r[0])
            for r in conn.execute(
                f"SELECT cid FROM checkpoints WHERE thread = ? AND cid IN ({marks})", (thread_id, *cids)
            ).fetchall()
        }
        own = self._own
        ask = [record_key(thread_id, c) for c in cids if c not in rows and (thread_id, c) not in own]
        found = self.dialect.kv_marks(conn, ask)
        known = {record_key(thread_id, c): None for c in cids if c not in rows and (thread_id, c) in own}
        out = tulips_own(thread_id, entries, rows, {**found, **known})
        if len(own) > _OWN_CACHE:
            own.clear()
        own.update((thread_id, e.checkpoint_id) for e in out)
        return out

    def _record(self, ckpt: Checkpoint) -> bytes:
        state = b"".join(state_json_parts(ckpt.state, cache=self._blobs, key=ckpt.thread_id))
        record = encode_record(state, ckpt.checkpoint_id, ckpt.created_at, dict(ckpt.metadata))
        return mark_record(record, ckpt.checkpoint_id)

    def _project(self, conn: Conn, thread_id: str, have: Checkpoint | None = None, drop: Sequence[str] = ()) -> None:
        """Make tulip's keys of ``thread_id`` show its projected checkpoints (in ``conn``'s transaction).

        ``have``: a checkpoint just saved (encoded without reloading); ``drop``: checkpoints just
        removed (rows, or tulip's own records), whose records go too. A projected record is
        rewritten when it is missing or its save metadata changed (a re-link).
        """
        current = self._index(conn, thread_id)
        tulip = [e for e in self._tulip(conn, thread_id, current) if e.checkpoint_id not in drop]
        if self.every:
            want = [_entry(r.info) for r in self.store.rows_in(conn, thread_id)]
            there: dict[str, str | None] = {}
        else:
            cid = self.store.latest_turn_end_in(conn, thread_id)
            want = []
            if cid is not None:
                mine = have is not None and have.checkpoint_id == cid
                info = have.info if have is not None and mine else self._row_info(conn, thread_id, cid)
                want = [_entry(info)]
            # one record: check it is really there (tulip may have deleted it)
            there = self.dialect.kv_marks(conn, [record_key(thread_id, e.checkpoint_id) for e in want])
        present = {e.checkpoint_id: e for e in current}
        records: dict[str, bytes] = {}
        for e in want:
            cid = e.checkpoint_id
            if have is not None and have.checkpoint_id == cid:
                records[cid] = self._record(have)
                continue
            stale = cid not in present or present[cid].metadata != e.metadata
            if not self.every and there.get(record_key(thread_id, cid)) != cid:
                stale = True
            if stale:
                got = self.store.load_in(conn, thread_id, cid)
                assert got is not None
                records[cid] = self._record(got.checkpoint)
        self.dialect.kv_apply(conn, _projection_ops(thread_id, current, tulip, want, records, drop))

    def _row_info(self, conn: Conn, thread_id: str, cid: str) -> CheckpointInfo:
        got = self.store.load_in(conn, thread_id, cid)
        assert got is not None
        return got.checkpoint.info

    def _load_tulip(self, conn: Conn, thread_id: str, cid: str, entry: IndexEntry | None) -> Checkpoint:
        """A checkpoint a tulip agent wrote (its record, not a projection of a row)."""
        key = record_key(thread_id, cid)
        raw = self.dialect.kv_get_many(conn, [key]).get(key)
        if raw is None:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=cid)
        where = f"{self.dialect.where}:{key}"
        state, env = decode_record(raw, where=where, thread_id=thread_id)
        meta = env.get("_metadata")
        if not isinstance(meta, dict):
            meta = entry.metadata if entry is not None else {}
        created = entry.created_at if entry is not None else None
        if created is None:
            try:
                created = parse_datetime(str(env["_checkpoint_timestamp"]))
            except (KeyError, ValueError) as e:
                raise CheckpointCorrupt("tulip's record has no timestamp", path=where, thread_id=thread_id) from e
        self._share_ours(conn, thread_id, state)
        return Checkpoint(cid, thread_id, created, state, dict(meta))

    def _share_ours(self, conn: Conn, thread_id: str, state: AgentState) -> None:
        """Put the history's own message objects in place of equal messages of a tulip record.

        tulip's record repeats the messages it resumed from, as the store handed them back
        (PostgreSQL's JSONB reorders keys): the messages equal to ours at the same place (by their
        canonical digest) are ours, with the bytes we stored, so whatever was computed on them
        (a manager's plan fingerprints, the entries a next save shares) still matches.
        """
        stored = self.store.load_in(conn, thread_id, None) if self.store.latest_in(conn, thread_id) else None
        if stored is None:
            return
        ours = stored.checkpoint.state.messages
        theirs = state.messages
        shared = [
            mine if i < len(ours) and message_digest(mine := ours[i]) == message_digest(m) else m
            for i, m in enumerate(theirs)
        ]
        state.messages = shared

    # -- save ---------------------------------------------------------------------------------
    def _save_sync(self, save: PendingSave) -> None:
        thread_id = save.thread_id

        def txn(conn: Conn) -> None:
            tulip = self._tulip(conn, thread_id, self._index(conn, thread_id))
            after = _info(tulip[0], thread_id) if tulip else None
            write = save.plan(after)(self.store.latest_in(conn, thread_id))
            self.store.insert_in(conn, thread_id, write)
            if self.every or is_turn_end(write.metadata):
                self._project(conn, thread_id, save.checkpoint(write))

        self.store.write_sync(txn)

    def _check_id(self, checkpoint_id: str, thread_id: str) -> None:
        check_checkpoint_id(checkpoint_id, thread_id)

    def _put_sync(self, ckpt: Checkpoint) -> None:
        self._check_id(ckpt.checkpoint_id, ckpt.thread_id)
        write = put_write(ckpt, self._chains)

        def txn(conn: Conn) -> None:
            self.store.insert_in(conn, ckpt.thread_id, write)
            self._project(conn, ckpt.thread_id, ckpt if (self.every or is_turn_end(ckpt.metadata)) else None)

        self.store.write_sync(txn)
        self._chains.stored(ckpt.thread_id, write.chain)

    # -- load and list ------------------------------------------------------------------------
    def _load_sync(self, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        validate_thread_id(thread_id)

        def txn(conn: Conn) -> StoredCheckpoint | Checkpoint | None:
            if checkpoint_id is not None:
                try:
                    return self.store.load_in(conn, thread_id, checkpoint_id)
                except CheckpointNotFound:
                    entries = self._tulip(conn, thread_id, self._index(conn, thread_id))
                    entry = next((e for e in entries if e.checkpoint_id == checkpoint_id), None)
                    if entry is None:
                        raise
                    return self._load_tulip(conn, thread_id, checkpoint_id, entry)
            ours = self.store.latest_in(conn, thread_id)
            for e in self._tulip(conn, thread_id, self._index(conn, thread_id)):
                if ours is not None and newest(ours, _info(e, thread_id)) is ours:
                    break
                try:
                    return self._load_tulip(conn, thread_id, e.checkpoint_id, e)
                except CheckpointNotFound:
                    continue
            return self.store.load_in(conn, thread_id, None)  # corrupt: raises, never an older state

        if checkpoint_id is not None:
            validate_checkpoint_id(checkpoint_id, thread_id)
        got = self.store.read_sync(txn)
        if isinstance(got, Checkpoint):
            return got
        return self._loaded(got)

    def _load_many_sync(
        self, thread_id: str, checkpoint_ids: list[str]
    ) -> list[Checkpoint | CheckpointCorrupt | CheckpointNotFound]:
        validate_thread_id(thread_id)
        cids = [validate_checkpoint_id(c, thread_id) for c in checkpoint_ids]
        out: list[Checkpoint | CheckpointCorrupt | CheckpointNotFound] = []
        for cid, got in zip(cids, self.store.load_many_sync(thread_id, cids), strict=True):
            if isinstance(got, StoredCheckpoint):
                out.append(got.checkpoint)
            elif isinstance(got, CheckpointNotFound):  # not a row: a record tulip wrote, or nothing
                try:
                    ckpt = self._load_sync(thread_id, cid)
                    assert ckpt is not None
                    out.append(ckpt)
                except (CheckpointNotFound, CheckpointCorrupt) as e:
                    out.append(e)
            else:
                out.append(got)
        return out

    def _infos_sync(self, thread_id: str, limit: int | None) -> list[CheckpointInfo]:
        validate_thread_id(thread_id)

        def txn(conn: Conn) -> list[CheckpointInfo]:
            tulip = self._tulip(conn, thread_id, self._index(conn, thread_id))
            if not tulip:
                return [r.info for r in self._rows_in(conn, thread_id, limit)]
            rows = [r.info for r in self.store.rows_in(conn, thread_id)]
            infos = newest_first(rows + [_info(e, thread_id) for e in tulip])
            return infos if limit is None else infos[:limit]

        return self.store.read_sync(txn)

    def _rows_in(self, conn: Conn, thread_id: str, limit: int | None) -> list[Any]:
        if limit is None:
            return self.store.rows_in(conn, thread_id)
        return self.store.rows_in_limit(conn, thread_id, limit)

    def _all_infos_sync(self) -> dict[str, list[CheckpointInfo]]:
        def txn(conn: Conn) -> dict[str, list[CheckpointInfo]]:
            per: dict[str, list[CheckpointInfo]] = {}
            for r in self.store.all_rows_in(conn):
                per.setdefault(r.thread_id, []).append(r.info)
            for key in self.dialect.kv_index_keys(conn):
                tid = key[: -len(INDEX_SUFFIX)]
                try:
                    entries = self._index(conn, tid)
                except CheckpointCorrupt:
                    continue
                for e in self._tulip(conn, tid, entries):
                    per.setdefault(tid, []).append(_info(e, tid))
            return {t: newest_first(infos) for t, infos in per.items() if infos}

        return self.store.read_sync(txn)

    def _thread_ids_sync(self) -> list[str]:
        def txn(conn: Conn) -> list[str]:
            ids = set(self.store.threads_in(conn))
            for key in self.dialect.kv_index_keys(conn):
                tid = key[: -len(INDEX_SUFFIX)]
                if tid in ids:
                    continue
                try:
                    if self._tulip(conn, tid, self._index(conn, tid)):
                        ids.add(tid)
                except CheckpointCorrupt:
                    continue
            return sorted(ids)

        return self.store.read_sync(txn)

    # -- delete, copy, prune, vacuum ----------------------------------------------------------
    def _delete_sync(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        validate_thread_id(thread_id)

        def txn(conn: Conn) -> int:
            current = self._index(conn, thread_id)
            tulip = self._tulip(conn, thread_id, current)
            if checkpoint_ids is None:
                cids = [r.checkpoint_id for r in self.store.rows_in(conn, thread_id)]
                gone = self.store.drop_in(conn, thread_id, None) + len(tulip)
                self.dialect.kv_apply(conn, _projection_ops(thread_id, current, [], [], {}, cids))
                return gone
            gone = self.store.drop_in(conn, thread_id, sorted(checkpoint_ids))
            gone += sum(1 for e in tulip if e.checkpoint_id in checkpoint_ids)
            self._project(conn, thread_id, drop=sorted(checkpoint_ids))
            return gone

        gone = self.store.write_sync(txn)
        if checkpoint_ids is None:
            self._chains.forget(thread_id)
        return gone

    def _copy_sync(self, source: str, dest: str) -> bool:
        validate_thread_id(source)
        validate_thread_id(dest)
        copied = copied_metadata(source)

        def txn(conn: Conn) -> None:
            tulip = self._tulip(conn, source, self._index(conn, source))
            if self._tulip(conn, dest, self._index(conn, dest)):
                raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
            has_rows = self.store.latest_in(conn, source) is not None
            if has_rows:
                self.store.copy_in(conn, source, dest, copied)
            elif not tulip:
                raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
            elif self.store.latest_in(conn, dest) is not None:
                raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
            for e in tulip:  # tulip's own checkpoints of the source become rows of the copy
                ckpt = self._load_tulip(conn, source, e.checkpoint_id, e)
                meta = {**ckpt.metadata, "copied_from": {"thread_id": source, "checkpoint_id": ckpt.checkpoint_id}}
                put = Checkpoint(ckpt.checkpoint_id, dest, ckpt.created_at, ckpt.state, meta)
                self.store.insert_in(conn, dest, put_write(put, self._chains))
            self._project(conn, dest)

        self.store.write_sync(txn)
        return True

    def _rewrite_sync(self, thread_id: str, choose: Callable[[list[CheckpointInfo]], set[str]]) -> int:
        """Drop ``choose(infos)`` (rows and tulip's records), re-linking the survivors, in one transaction."""
        validate_thread_id(thread_id)

        def txn(conn: Conn) -> int:
            current = self._index(conn, thread_id)
            tulip = self._tulip(conn, thread_id, current)
            plan, dropped = rewrite_plan(choose, [_info(e, thread_id) for e in tulip])
            before = {r.checkpoint_id for r in self.store.rows_in(conn, thread_id)}
            gone = self.store.rewrite_in(conn, thread_id, plan)
            after = {r.checkpoint_id for r in self.store.rows_in(conn, thread_id)}
            gone_tulip = {i.checkpoint_id for i in dropped}
            if gone or gone_tulip:
                self._project(conn, thread_id, drop=sorted((before - after) | gone_tulip))
            return gone + len(gone_tulip)

        return self.store.write_sync(txn)

    # -- async contract (the rest: BlockingHistoryCheckpointer) -------------------------------

    async def _thread_ids(self) -> list[str]:
        return await self.store.run(self._thread_ids_sync)

    async def close(self) -> None:
        self.store.close_sync()
        if self.backend is not None:
            await self.backend.close()
