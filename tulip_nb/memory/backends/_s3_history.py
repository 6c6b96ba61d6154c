"""The history model (:mod:`tulip_nb.memory.history`) on S3: immutable objects plus a conditional head.

S3 has no transaction across objects, but it has compare-and-swap on one: a PUT with ``If-Match``
(the ETag read) or ``If-None-Match: *`` (create), and a DELETE with ``If-Match``. So each thread
has one small **head** object, and every read-modify-write of the thread (save, copy, prune,
delete) reads it, writes the immutable objects it needs, and swaps the head conditionally; a
lost race (HTTP 412) re-reads the head and runs the plan again. Everything else is immutable::

    {root}h/<tk>                  the head of thread <tk> (sha256 of its id): JSON, rewritten by CAS
    {root}o/<tk>/b<hash><nonce>   a run: messages (their canonical JSON bytes) a save added,
                                  with the entry id of the message before them
    {root}o/<tk>/s<hash><nonce>   a segment: 16 checkpoint rows, flushed out of the head
    {root}o/<tk>/f<hash><nonce>   a row's other fields when too large to sit in the row

The head holds the thread's rows not yet in a segment (at most 15), the id of the newest, the
list of its segments and the list of its runs (key, first index, count, the entry before it, its
last entry). A save writes one run (the messages it adds, found by matching the state's entry ids
against the ends of the runs and the heads of the rows) and the head; every 8 runs of one level in
a row are merged into one of the next (three levels: a run holds at most 512 saves' messages, each
message is written at most four times), so a load reads a handful
of runs, not one per save. A load walks the runs back from the row's head entry, re-hashes every
message against its entry id, and checks the row's digest: corruption is
:class:`~tulip_nb.core.errors.CheckpointCorrupt`, never an older state.

**Sharing.** A copy writes new rows (re-bound to the destination: their digest names the thread)
and points at the source's runs and field objects: no message byte is copied. The source then
records the copy among its ``users`` (a CAS on the source's head, conditional on the head the copy
read, so a copy and a delete or prune of the source are ordered); the copy records its ``uses``.
An object is deleted only by its owner, only when no head references it any more and the owner
has no users; a deleted thread with users stays as a *tombstone* head (no rows) that keeps its
objects until its last user is deleted. Object names carry a random nonce, so an object a writer
lost a race with is never shared, and the writer removes it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from pydantic import ValidationError

from tulip_nb.core import Message
from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.fastload import gc_paused, messages_from_json
from tulip_nb.core.keys import FORKED_FROM_KEY
from tulip_nb.memory.backends._s3_io import S3IO, Listed, PreconditionFailed
from tulip_nb.memory.backends._s3_records import (
    Head,
    Rec,
    RunContent,
    by_key,
    hex_id,
    run_body,
    thread_key,
    unhex_id,
)
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.history import (
    HistoryStore,
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
from tulip_nb.memory.rest_delta import MAX_DEPTH, Parts, PatchError, decode, encode, pack, parts_of_json, unpack

__all__ = ["S3History"]

SEGMENT_ROWS = 16
"""Rows the head holds before they are flushed into an immutable segment."""
FANOUT = 8
"""Runs of one level merged into one of the next."""
MAX_LEVEL = 3
"""Runs are merged up to this level (a level-3 run holds FANOUT**3 saves' messages)."""
INLINE_FIELDS = 512
"""A row's packed fields up to this size sit in the row; larger ones get an object of their own."""
_ATTEMPTS = 50
_CACHE_BYTES = 64 << 20
_HEAD_TYPE = "application/octet-stream"
_BLOB_TYPE = "application/octet-stream"


class _Missing(Exception):
    """An object the head names is gone (a concurrent writer collected it, or it was lost)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class S3History(HistoryStore):
    """The history store on S3 (see the module docstring); blocking calls, run in worker threads.

    ``run``: how the async primitives run a blocking call (the backend's pool, which also makes
    sure the bucket exists).
    """

    def __init__(self, io: S3IO, root: str, run: Callable[..., Any], *, fetchers: int = 16) -> None:
        self.io = io
        self.root = root
        self._run = run
        self._fetch = ThreadPoolExecutor(max_workers=fetchers, thread_name_prefix="tulip-nb-s3-get")
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[int, Any]] = OrderedDict()
        self._cache_bytes = 0
        self._cache_lock = threading.Lock()
        self._heads: dict[str, Head] = {}  # thread key -> the head this instance last wrote or read
        # thread key -> (cid, fields hash, parts) of this instance's newest save (its next patch's base)
        self._fields: OrderedDict[str, tuple[str, bytes, Parts]] = OrderedDict()
        self._fields_lock = threading.Lock()
        self._listed: dict[str, tuple[str, Head]] = {}  # head key -> (ETag, head) as last listed and read

    def __repr__(self) -> str:
        return f"S3History(bucket={self.io.bucket!r}, root={self.root!r})"

    # -- keys and plumbing --------------------------------------------------------------------
    def head_key(self, tk: str) -> str:
        return f"{self.root}h/{tk}"

    def owner_prefix(self, tk: str) -> str:
        return f"{self.root}o/{tk}/"

    def _new_key(self, tk: str, kind: str, body: bytes) -> str:
        return f"{self.owner_prefix(tk)}{kind}{hashlib.sha256(body).hexdigest()[:32]}{secrets.token_hex(4)}"

    def _where(self, key: str) -> str:
        return f"s3://{self.io.bucket}/{key}"

    @contextlib.contextmanager
    def _locked(self, tk: str) -> Iterator[None]:
        """In-process writers of one thread queue up (no 412 retries among ourselves)."""
        with self._locks_lock:
            lock = self._locks.setdefault(tk, threading.Lock())
        with lock:
            yield

    def _cached(self, key: str) -> Any:
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is None:
                return None
            self._cache.move_to_end(key)
            return hit[1]

    def _remember(self, key: str, size: int, value: Any) -> None:
        with self._cache_lock:
            if key in self._cache:
                return
            self._cache[key] = (size, value)
            self._cache_bytes += size
            while self._cache_bytes > _CACHE_BYTES and len(self._cache) > 1:
                _, (old, _) = self._cache.popitem(last=False)
                self._cache_bytes -= old

    def _get_blob(self, key: str) -> bytes:
        got = self.io.get(key)
        if got is None:
            raise _Missing(key)
        return got.body

    def _put_blobs(self, puts: list[tuple[str, bytes]]) -> None:
        list(self._fetch.map(lambda kv: self.io.put(kv[0], kv[1], _BLOB_TYPE), puts))

    def _delete_quiet(self, keys: list[str]) -> None:
        """Remove objects nothing references (a lost race's, or collected ones)."""
        if keys:
            self.io.delete_keys(keys)

    # -- heads --------------------------------------------------------------------------------
    def read_head(self, thread_id: str) -> Head:
        tk = thread_key(thread_id)
        key = self.head_key(tk)
        got = self.io.get(key)
        if got is None:
            self._heads.pop(tk, None)
            return Head(thread_id)
        head = Head.parse(got.body, got.etag, thread_id, where=self._where(key))
        self._heads[tk] = head
        return head

    def _read_head_by_key(self, tk: str) -> Head | None:
        key = self.head_key(tk)
        got = self.io.get(key)
        return Head.parse(got.body, got.etag, None, where=self._where(key)) if got is not None else None

    def _swap(self, tk: str, head: Head, was: str | None) -> Head:
        """Write ``head`` if the stored head is still ``was`` (None: there is none); PreconditionFailed if not."""
        key = self.head_key(tk)
        try:
            if was is None:
                etag = self.io.put(key, head.body(), _HEAD_TYPE, if_none_match=True)
            else:
                etag = self.io.put(key, head.body(), _HEAD_TYPE, if_match=was)
        except PreconditionFailed:
            self._heads.pop(tk, None)
            raise
        head.etag = etag
        self._heads[tk] = head
        return head

    def _remove_head(self, tk: str, was: str) -> None:
        try:
            self.io.delete_if(self.head_key(tk), was)
        finally:
            self._heads.pop(tk, None)

    # -- rows ---------------------------------------------------------------------------------
    def _segment(self, key: str) -> list[Rec]:
        hit = self._cached(key)
        if hit is not None:
            return list(hit)
        body = self._get_blob(key)
        try:
            obj = orjson.loads(unpack(body))
            recs = [Rec.parse(r, where=self._where(key)) for r in obj["rows"]]
        except (PatchError, orjson.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointCorrupt(f"a segment of checkpoint rows cannot be read: {e}", path=self._where(key)) from e
        self._remember(key, len(body) * 4, recs)
        return list(recs)

    def lookup(self, head: Head) -> Callable[[str], Rec | None]:
        """Find a row by id: the head's rows first, then its segments newest first, each read only
        when needed (a load of a recent checkpoint reads the head and a segment or two)."""
        found: dict[str, Rec] = {r.cid: r for r in head.tail}
        pending = [s["k"] for s in head.segs]

        def get(cid: str) -> Rec | None:
            while cid not in found and pending:
                found.update((r.cid, r) for r in self._segment(pending.pop()))
            return found.get(cid)

        return get

    def recs(self, head: Head) -> list[Rec]:
        """Every row of the thread (segments in parallel, cached: they never change)."""
        out: list[Rec] = []
        for recs in self._fetch.map(self._segment, [s["k"] for s in head.segs]):
            out.extend(recs)
        out.extend(head.tail)
        return out

    def rows_sync(self, thread_id: str, limit: int | None = None) -> list[Row]:
        recs = self._fresh_recs(thread_id)[1]
        ordered = by_key(recs)[::-1]
        return [r.row(thread_id) for r in (ordered if limit is None else ordered[: max(limit, 0)])]

    def _fresh_recs(self, thread_id: str) -> tuple[Head, list[Rec]]:
        """The head and its rows, re-read when a segment vanished under a concurrent rewrite."""
        for _ in range(_ATTEMPTS):
            head = self.read_head(thread_id)
            try:
                return head, self.recs(head)
            except _Missing as e:
                self._missing(thread_id, head, e)
        raise CheckpointConflict("the thread kept changing while it was read", thread_id=thread_id)

    def _missing(self, thread_id: str, head: Head, e: _Missing) -> None:
        """An object the head names is gone: fine if the head moved on meanwhile, else corruption."""
        again = self.read_head(thread_id)
        if again.etag == head.etag:
            raise CheckpointCorrupt(
                "an object the thread's head names is missing", path=self._where(e.key), thread_id=thread_id
            ) from None

    def projected_sync(self, thread_id: str, every: bool) -> list[CheckpointInfo]:
        """What tulip is shown: every row (``every``), else the newest turn end (read from the head
        and, for its row, a segment at most)."""
        if every:
            return [r.info for r in self.rows_sync(thread_id)]
        for _ in range(_ATTEMPTS):
            head = self.read_head(thread_id)
            if head.end is None:
                return []
            try:
                rec = self.lookup(head)(head.end)
            except _Missing as e:
                self._missing(thread_id, head, e)
                continue
            if rec is None:
                raise CheckpointCorrupt("the head names a turn end it does not hold", thread_id=thread_id)
            return [rec.info(thread_id)]
        raise CheckpointConflict("the thread kept changing while it was read", thread_id=thread_id)

    def heads_sync(self) -> dict[str, Head]:
        """Every thread with rows: thread id -> its head (listing the heads, reading each)."""
        listed = list(self.io.list_keys(f"{self.root}h/"))

        def one(obj: Any) -> Head | None:
            seen = self._listed.get(obj.key)
            if seen is not None and seen[0] == obj.etag:  # unchanged since it was last read
                return seen[1]
            head = self._read_head_by_key(obj.key.rsplit("/", 1)[-1])
            if head is not None and head.etag is not None:
                self._listed[obj.key] = (head.etag, head)
            return head

        out: dict[str, Head] = {}
        for head in self._fetch.map(one, listed):
            if head is not None and head.has_rows:
                out[head.thread] = head
        return out

    def threads_sync(self) -> list[str]:
        return sorted(self.heads_sync())

    def all_rows_sync(self) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {}
        for tid, head in self.heads_sync().items():
            try:
                recs = self.recs(head)
            except _Missing:
                head, recs = self._fresh_recs(tid)
            if recs:
                out[tid] = [r.row(tid) for r in by_key(recs)[::-1]]
        return out

    # -- runs (messages) ----------------------------------------------------------------------
    def _run_content(self, run: dict[str, Any], thread_id: str, body: bytes | None = None) -> RunContent:
        """A run's messages, every one re-hashed against the chain of entry ids (cached: it never changes)."""
        key = str(run["k"])
        hit = self._cached(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        where = self._where(key)
        if body is None:
            body = self._get_blob(key)
        try:
            raw = unpack(body)
            nl = raw.index(b"\n")
            header = orjson.loads(raw[:nl])
            lens = [int(x) for x in header["lens"]]
            parent = unhex_id(header["p"], where=where)
        except (PatchError, ValueError, KeyError, TypeError, orjson.JSONDecodeError) as e:
            raise CheckpointCorrupt(f"a batch of messages cannot be read: {e}", path=where, thread_id=thread_id) from e
        data: list[bytes] = []
        pos = nl + 1
        for n in lens:
            data.append(raw[pos : pos + n])
            pos += n
        if pos != len(raw) or len(data) != int(run["n"]) or parent != unhex_id(run["p"], where=where):
            raise CheckpointCorrupt("a batch of messages does not match its record", path=where, thread_id=thread_id)
        ids: list[bytes] = []
        eid = parent
        for d in data:
            eid = entry_id(eid, d)
            ids.append(eid)
        if ids and ids[-1] != unhex_id(run["h"], where=where):
            raise CheckpointCorrupt(
                "a batch of messages no longer matches its entry ids (stored bytes changed)",
                path=where,
                thread_id=thread_id,
            )
        with gc_paused():
            try:
                messages = messages_from_json(orjson.loads(b"[" + b",".join(data) + b"]"))
            except (orjson.JSONDecodeError, ValidationError) as e:
                raise CheckpointCorrupt(f"stored messages cannot be read: {e}", path=where, thread_id=thread_id) from e
        content = RunContent(parent, ids, data, messages, len(raw))
        self._remember(key, len(raw) * 3, content)
        return content

    def _messages(self, thread_id: str, head: Head, rec: Rec) -> tuple[list[Message], list[bytes]]:
        """The row's messages and entry ids (oldest first), walked back from its head entry."""
        n = rec.n
        if n == 0:
            if rec.head is not None:
                raise CheckpointCorrupt("an empty history names a head entry", thread_id=thread_id)
            return [], []
        runs = [r for r in head.runs if int(r["i"]) < n]
        fetched = self._fetch.map(lambda r: self._run_content(r, thread_id), runs)
        contents = dict(zip([r["k"] for r in runs], fetched, strict=True))
        pieces: list[tuple[RunContent, int]] = []
        pos, want = n, rec.head
        while pos > 0:
            found = None
            for r in runs:
                i, c = int(r["i"]), contents[r["k"]]
                if i < pos <= i + len(c.ids) and c.ids[pos - 1 - i] == want:
                    found = (i, c)
                    break
            if found is None:
                raise CheckpointCorrupt(
                    f"message {pos - 1} of the checkpoint is in no stored batch (or its bytes changed)",
                    thread_id=thread_id,
                    checkpoint_id=rec.cid,
                )
            i, c = found
            pieces.append((c, pos - i))
            want, pos = c.parent, i
        if want is not None:
            raise CheckpointCorrupt("the history does not start at its first message", thread_id=thread_id)
        messages: list[Message] = []
        ids: list[bytes] = []
        for c, upto in reversed(pieces):
            messages.extend(c.messages[:upto])
            ids.extend(c.ids[:upto])
        return messages, ids

    # -- fields -------------------------------------------------------------------------------
    def _fields_blob(self, rec: Rec, thread_id: str) -> bytes:
        if rec.blob is None:
            return rec.inline or b""
        hit = self._cached(rec.blob)
        if hit is None:
            hit = self._get_blob(rec.blob)
            self._remember(rec.blob, len(hit), hit)
        return hit  # type: ignore[no-any-return]

    def _rebuild(self, thread_id: str, by_id: Callable[[str], Rec | None], rec: Rec) -> dict[str, Any]:
        """A row's whole fields: its snapshot, or its base's rebuilt and its patch applied; verified."""
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": rec.cid}
        chain, base = [rec], rec.base
        while base is not None:
            if len(chain) > MAX_DEPTH + 1:
                raise CheckpointCorrupt("the row's fields patch a chain with no snapshot", **ctx)
            b = by_id(base)
            if b is None:
                raise CheckpointCorrupt(f"the row's fields patch missing checkpoint {base}", **ctx)
            chain.append(b)
            base = b.base
        blobs = list(self._fetch.map(lambda r: self._fields_blob(r, thread_id), chain))
        try:
            fields = decode(blobs[-1], None)
            for patch in reversed(blobs[:-1]):
                fields = decode(patch, fields)
        except PatchError as e:
            raise CheckpointCorrupt(str(e), **ctx) from e
        if fields_hash(orjson.dumps(fields)) != rec.fh:
            raise CheckpointCorrupt("the row's state fields do not match their hash", **ctx)
        return fields

    # -- load ---------------------------------------------------------------------------------
    def load_sync(self, thread_id: str, checkpoint_id: str | None = None) -> StoredCheckpoint | None:
        for _ in range(_ATTEMPTS):
            head = self.read_head(thread_id)
            try:
                return self._load(thread_id, head, checkpoint_id)
            except _Missing as e:
                self._missing(thread_id, head, e)
        raise CheckpointConflict("the thread kept changing while it was loaded", thread_id=thread_id)

    def _load(self, thread_id: str, head: Head, checkpoint_id: str | None) -> StoredCheckpoint | None:
        by_id = self.lookup(head)
        if checkpoint_id is None:
            if not head.has_rows:
                return None
            found = by_id(head.top) if head.top is not None else None
            if found is None:
                raise CheckpointCorrupt("the head names no row as the newest", thread_id=thread_id)
        else:
            found = by_id(checkpoint_id)
            if found is None:
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        rec = found
        where = self._where(self.head_key(thread_key(thread_id)))
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": rec.cid}
        try:
            messages, ids = self._messages(thread_id, head, rec)
        except CheckpointCorrupt as e:
            e.checkpoint_id = e.checkpoint_id or rec.cid
            raise
        if row_digest(thread_id, rec.cid, rec.at, rec.meta, rec.head, rec.n, rec.fh) != rec.digest:
            raise CheckpointCorrupt("checkpoint row does not match its content digest", path=where, **ctx)
        fields = self._rebuild(thread_id, by_id, rec)
        state = state_with(fields, list(messages), where=where, thread_id=thread_id)
        ckpt = Checkpoint(rec.cid, thread_id, rec.at, state, orjson.loads(rec.meta))
        return StoredCheckpoint(ckpt, ids)

    # -- save ---------------------------------------------------------------------------------
    def save_sync(self, thread_id: str, plan: SavePlanFn) -> tuple[Row, RowWrite]:
        tk = thread_key(thread_id)
        with self._locked(tk):
            cached = self._heads.get(tk)  # the head this instance last wrote or read: the CAS says if it moved
            head, fresh = (cached, False) if cached is not None else (self.read_head(thread_id), True)
            for _ in range(_ATTEMPTS):
                try:
                    recs = self.recs(head)
                    latest = max(recs, key=lambda r: r.key) if recs else None
                    try:
                        write = plan(latest.info(thread_id) if latest else None)
                    except CheckpointConflict:
                        if fresh:
                            raise
                        head, fresh = self.read_head(thread_id), True  # decided on a cached head: ask again
                        continue
                    new, puts, dropped = self._with_row(thread_id, tk, head, recs, write)
                except _Missing:
                    head, fresh = self.read_head(thread_id), True
                    continue
                self._put_blobs(puts)
                try:
                    self._swap(tk, new, head.etag)
                except PreconditionFailed:
                    self._delete_quiet([k for k, _ in puts])
                    head, fresh = self.read_head(thread_id), True
                    continue
                self._collect(new, dropped)
                return Row(thread_id, write.checkpoint_id, write.created_at, write.metadata, write.chain.n), write
        raise CheckpointConflict(f"gave up after {_ATTEMPTS} racing writers", thread_id=thread_id)

    def _stored_prefix(self, head: Head, recs: list[Rec], ids: Sequence[bytes], n: int) -> int:
        """How many leading messages of the chain the thread's runs hold already (ends of runs and
        heads of rows are the entries a save can recognise without reading any run)."""
        have = 0
        for k, h in [(r.n, r.head) for r in recs] + [(int(r["i"]) + int(r["n"]), r["h"]) for r in head.runs]:
            if have < k <= n:
                hb = h if isinstance(h, bytes) or h is None else bytes.fromhex(h)
                if ids[k - 1] == hb:
                    have = k
        return have

    def _with_row(
        self, thread_id: str, tk: str, head: Head, recs: list[Rec], write: RowWrite
    ) -> tuple[Head, list[tuple[str, bytes]], list[str]]:
        """The head after ``write``, the objects to PUT first, and the own objects it stops naming."""
        cid, chain = write.checkpoint_id, write.chain
        try:
            meta = memoryview(orjson.dumps(write.metadata, option=orjson.OPT_NON_STR_KEYS)).tobytes()
        except TypeError as e:
            raise TypeError(f"the save metadata of checkpoint {cid!r} of {thread_id!r} is not JSON: {e}") from e
        puts: list[tuple[str, bytes]] = []
        new = replace(head, segs=list(head.segs), tail=list(head.tail), runs=list(head.runs), gone=False)
        if not head.has_rows:
            new.runs = []  # a new thread (or a tombstone's successor): its rows start here
            self._share_fork(thread_id, tk, new, write)
        dropped: list[str] = []
        if any(r.cid == cid for r in recs):  # saving an id again replaces its row
            recs, dropped = self._drop(thread_id, tk, new, recs, {cid}, puts)
        have = self._stored_prefix(new, recs, chain.ids, chain.n)
        if have < chain.n:
            data = [chain.data(i) for i in range(have, chain.n)]
            parent = chain.ids[have - 1] if have else None
            body = run_body(parent, data)
            key = self._new_key(tk, "b", body)
            puts.append((key, body))
            ids = list(chain.ids[have : chain.n])
            messages = list(chain.messages[have : chain.n])
            self._remember(key, sum(map(len, data)) * 3, RunContent(parent, ids, data, messages, sum(map(len, data))))
            new.runs.append(
                {"k": key, "i": have, "n": chain.n - have, "p": hex_id(parent), "h": ids[-1].hex(), "l": 0, "o": tk}
            )
            dropped += self._merge_runs(thread_id, tk, new, puts)
        by_id = {r.cid: r for r in recs}
        base = max((r for r in recs if r.cid != cid), key=lambda r: r.key, default=None)
        base_parts = self._base_parts(thread_id, tk, by_id.get, base)
        if base is None or base_parts is None:
            enc, parts, fields_bytes = encode(write.rest, None)
        else:
            enc, parts, fields_bytes = encode(write.rest, base_parts, base.depth, base.chain)
        fh = fields_hash(fields_bytes)
        digest = row_digest(thread_id, cid, write.created_at, meta, chain.head, chain.n, fh)
        inline, blob = self._fields_object(tk, enc.blob, puts)
        based = base.cid if enc.patch and base is not None else None
        rec = Rec(
            cid, write.created_at, meta, chain.head, chain.n, fh, digest, inline, blob, based, enc.depth, enc.chain
        )
        new.tail.append(rec)
        new.settle([*recs, rec])
        self._flush_tail(thread_id, tk, new, puts)
        with self._fields_lock:
            self._fields[tk] = (cid, fh, parts)
            self._fields.move_to_end(tk)
            while len(self._fields) > 64:
                self._fields.popitem(last=False)
        return self._keep_for_users(tk, new, dropped), puts, dropped

    def _fields_object(self, tk: str, packed: bytes, puts: list[tuple[str, bytes]]) -> tuple[bytes | None, str | None]:
        if len(packed) <= INLINE_FIELDS:
            return packed, None
        key = self._new_key(tk, "f", packed)
        puts.append((key, packed))
        self._remember(key, len(packed), packed)
        return None, key

    def _flush_tail(self, thread_id: str, tk: str, new: Head, puts: list[tuple[str, bytes]]) -> None:
        while len(new.tail) >= SEGMENT_ROWS:
            chunk, new.tail = new.tail[:SEGMENT_ROWS], new.tail[SEGMENT_ROWS:]
            body = pack(orjson.dumps({"v": 1, "thread": thread_id, "rows": [r.obj() for r in chunk]}))
            key = self._new_key(tk, "s", body)
            puts.append((key, body))
            self._remember(key, len(body) * 4, list(chunk))
            new.segs.append({"k": key, "n": len(chunk)})

    def _merge_runs(self, thread_id: str, tk: str, new: Head, puts: list[tuple[str, bytes]]) -> list[str]:
        """Merge the last FANOUT runs while they are this thread's, of one level and contiguous."""
        dropped: list[str] = []
        while len(new.runs) >= FANOUT:
            last = new.runs[-FANOUT:]
            level = int(last[0].get("l", 0))
            if level >= MAX_LEVEL or any(r.get("o") != tk or int(r.get("l", 0)) != level for r in last):
                break
            if any(b["p"] != a["h"] or int(b["i"]) != int(a["i"]) + int(a["n"]) for a, b in itertools.pairwise(last)):
                break
            pending = dict(puts)
            contents = list(self._fetch.map(functools.partial(self._run_content_pending, pending, thread_id), last))
            data = [d for c in contents for d in c.data]
            parent = contents[0].parent
            body = run_body(parent, data)
            key = self._new_key(tk, "b", body)
            merged = RunContent(
                parent, [i for c in contents for i in c.ids], data, [m for c in contents for m in c.messages], 0
            )
            self._remember(key, sum(map(len, data)) * 3, merged)
            old = {r["k"] for r in last}
            puts[:] = [(k, b) for k, b in puts if k not in old]  # a run merged before it was written
            puts.append((key, body))
            dropped += [k for k in old if k not in pending]
            first = last[0]
            new.runs[-FANOUT:] = [
                {
                    "k": key,
                    "i": first["i"],
                    "n": len(data),
                    "p": first["p"],
                    "h": last[-1]["h"],
                    "l": level + 1,
                    "o": tk,
                }
            ]
        return dropped

    def _run_content_pending(self, pending: dict[str, bytes], thread_id: str, run: dict[str, Any]) -> RunContent:
        """A run's content, from the bytes this save is about to write when it is one of them."""
        return self._run_content(run, thread_id, pending.get(run["k"]))

    def _base_parts(
        self, thread_id: str, tk: str, by_id: Callable[[str], Rec | None], base: Rec | None
    ) -> Parts | None:
        """The parts of the row a new save patches against: this instance's newest save when it is
        still that row (same id and fields hash), else rebuilt; None when it cannot be (corrupt)."""
        if base is None:
            return None
        cached = self._fields.get(tk)
        if cached is not None and cached[0] == base.cid and cached[1] == base.fh:
            return cached[2]
        try:
            return parts_of_json(orjson.dumps(self._rebuild(thread_id, by_id, base)))
        except (CheckpointCorrupt, PatchError):
            return None

    def _share_fork(self, thread_id: str, tk: str, new: Head, write: RowWrite) -> None:
        """A fork's first save (``forked_from`` names a thread): point at the source's runs instead
        of writing its messages again, when the source (read now) holds them. The source records
        the fork among its users first (a CAS conditional on the head just read), so a delete or
        prune of the source racing the fork either comes first (nothing shared) or keeps them."""
        source = write.metadata.get(FORKED_FROM_KEY)
        if not isinstance(source, str) or source == thread_id or not write.chain.n:
            return
        sk = thread_key(source)
        for _ in range(_ATTEMPTS):
            try:
                src = self.read_head(source)
                if not src.has_rows:
                    return
                recs = self.recs(src)
            except (_Missing, CheckpointCorrupt):
                return
            if not self._stored_prefix(src, recs, write.chain.ids, write.chain.n):
                return
            if tk not in src.users:
                src.users = [*src.users, tk]
                try:
                    self._swap(sk, src, src.etag)
                except PreconditionFailed:
                    continue
            self._register(src.uses, tk)
            new.runs = list(src.runs)
            new.uses = sorted({*new.uses, sk, *src.uses})
            return

    def _keep_for_users(self, tk: str, new: Head, dropped: list[str]) -> Head:
        """Own objects the new head stops naming are kept (named in ``keep``) while others use them."""
        own = [k for k in dropped if k.startswith(self.owner_prefix(tk))]
        if new.users and own:
            new.keep = sorted({*new.keep, *own})
        return new

    def _collect(self, new: Head, dropped: list[str]) -> None:
        """After a committed swap: delete the own objects no head names any more (none while others use them)."""
        if new.users:
            return
        tk = thread_key(new.thread)
        own = [k for k in dropped if k.startswith(self.owner_prefix(tk))] + list(new.keep)
        if own:
            self._delete_quiet(sorted(set(own)))
            if new.keep:
                self._forget_keep(tk)

    def _forget_keep(self, tk: str) -> None:
        """Clear a head's ``keep`` list once its objects are deleted (best effort: a later pass repeats it)."""
        head = self._read_head_by_key(tk)
        if head is None or head.users or not head.keep:
            return
        head.keep = []
        with contextlib.suppress(PreconditionFailed):
            self._swap(tk, head, head.etag)

    # -- drop and rewrite ---------------------------------------------------------------------
    def _drop(
        self, thread_id: str, tk: str, new: Head, recs: list[Rec], cids: set[str], puts: list[tuple[str, bytes]]
    ) -> tuple[list[Rec], list[str]]:
        """Rows without ``cids``: survivors that patch a dropped row are written whole first; the
        head's rows are re-laid (segments of the survivors) and its runs cut to those still reached."""
        by_id = {r.cid: r for r in recs}
        dropped_keys: list[str] = []
        rebuilt: dict[str, Rec] = {}
        for r in recs:
            if r.cid in cids or r.base not in cids:
                continue
            try:
                fields_bytes = orjson.dumps(self._rebuild(thread_id, by_id.get, r))
            except CheckpointCorrupt:
                continue  # damaged already: left as it is (its load reports it)
            inline, blob = self._fields_object(tk, pack(fields_bytes), puts)
            rebuilt[r.cid] = replace(r, inline=inline, blob=blob, base=None, depth=0, chain=0)
        survivors = [rebuilt.get(r.cid, r) for r in recs if r.cid not in cids]
        new.settle(survivors)
        for r in recs:
            if (r.cid in cids or r.cid in rebuilt) and r.blob is not None:
                dropped_keys.append(r.blob)
        dropped_keys += [s["k"] for s in new.segs]
        new.segs, new.tail = [], list(survivors)
        self._flush_tail(thread_id, tk, new, puts)
        top = max((r.n for r in survivors), default=0)
        kept = [r for r in new.runs if int(r["i"]) < top]
        dropped_keys += [r["k"] for r in new.runs if int(r["i"]) >= top]
        new.runs = kept
        with self._fields_lock:
            cached = self._fields.get(tk)
            if cached is not None and cached[0] in cids:
                del self._fields[tk]
        return survivors, dropped_keys

    def rewrite_sync(self, thread_id: str, plan: RewritePlanFn) -> int:
        tk = thread_key(thread_id)
        with self._locked(tk):
            for _ in range(_ATTEMPTS):
                head, recs = self._fresh_recs(thread_id)
                ordered = by_key(recs)[::-1]
                change = plan([r.info(thread_id) for r in ordered])
                drop = {c for c in change.drop if any(r.cid == c for r in recs)}
                updates: dict[str, Rec] = {}
                for cid, metadata in change.metadata.items():
                    r = next((x for x in recs if x.cid == cid), None)
                    if r is None or cid in drop:
                        continue
                    meta = memoryview(orjson.dumps(metadata, option=orjson.OPT_NON_STR_KEYS)).tobytes()
                    digest = self._redigest(thread_id, r, meta)
                    updates[cid] = replace(r, meta=meta, digest=digest)
                if not drop and not updates:
                    return 0
                if drop and len(drop) == len(recs):
                    if self._delete_thread(thread_id, tk, head, recs):
                        return len(drop)
                    continue
                recs = [updates.get(r.cid, r) for r in recs]
                new = replace(head, segs=list(head.segs), tail=list(head.tail), runs=list(head.runs))
                puts: list[tuple[str, bytes]] = []
                try:
                    _, dropped = self._drop(thread_id, tk, new, recs, drop, puts)
                except _Missing:
                    continue
                self._keep_for_users(tk, new, dropped)
                self._put_blobs(puts)
                try:
                    self._swap(tk, new, head.etag)
                except PreconditionFailed:
                    self._delete_quiet([k for k, _ in puts])
                    continue
                self._collect(new, dropped)
                return len(drop)
        raise CheckpointConflict(f"gave up after {_ATTEMPTS} racing writers", thread_id=thread_id)

    def _redigest(self, thread_id: str, r: Rec, meta: bytes) -> bytes:
        """The row's digest with new save metadata, unless its stored digest fails already (a moved-in
        or edited row stays refused: never re-signed)."""
        if row_digest(thread_id, r.cid, r.at, r.meta, r.head, r.n, r.fh) != r.digest:
            return r.digest
        return row_digest(thread_id, r.cid, r.at, meta, r.head, r.n, r.fh)

    # -- delete -------------------------------------------------------------------------------
    def delete_sync(self, thread_id: str, cids: list[str] | None) -> int:
        if cids is not None:
            want = set(cids)
            return self.rewrite_sync(thread_id, lambda _infos: _drop_only(want))
        tk = thread_key(thread_id)
        with self._locked(tk):
            for _ in range(_ATTEMPTS):
                head, recs = self._fresh_recs(thread_id)
                if not recs:
                    return 0
                if self._delete_thread(thread_id, tk, head, recs):
                    return len(recs)
        raise CheckpointConflict(f"gave up after {_ATTEMPTS} racing writers", thread_id=thread_id)

    def _own_objects(self, tk: str, head: Head, recs: list[Rec]) -> list[str]:
        mine = self.owner_prefix(tk)
        keys = [s["k"] for s in head.segs] + [r["k"] for r in head.runs] + [r.blob for r in recs if r.blob] + head.keep
        return sorted({k for k in keys if k.startswith(mine)})

    def _delete_thread(self, thread_id: str, tk: str, head: Head, recs: list[Rec]) -> bool:
        """Remove the thread's rows (one CAS); False when the head moved on (the caller retries)."""
        own = self._own_objects(tk, head, recs)
        assert head.etag is not None
        with self._fields_lock:
            self._fields.pop(tk, None)
        if head.users:  # others reach our objects: a tombstone keeps them until the last user goes
            tomb = Head(thread_id, gone=True, uses=head.uses, users=head.users, keep=own)
            try:
                self._swap(tk, tomb, head.etag)
            except PreconditionFailed:
                return False
            return True
        try:
            self._remove_head(tk, head.etag)
        except PreconditionFailed:
            return False
        self._delete_quiet(own)
        for owner in head.uses:
            self._unregister(owner, tk)
        return True

    def _register(self, owners: Sequence[str], user: str) -> None:
        """Record ``user`` among the users of each owner (all reached through a live thread, so present)."""
        for owner in owners:
            for _ in range(_ATTEMPTS):
                head = self._read_head_by_key(owner)
                if head is None or user in head.users:
                    break
                head.users = [*head.users, user]
                try:
                    self._swap(owner, head, head.etag)
                except PreconditionFailed:
                    continue
                break

    def _unregister(self, owner: str, user: str) -> None:
        """``user`` no longer reaches ``owner``'s objects; a tombstone left without users goes."""
        for _ in range(_ATTEMPTS):
            head = self._read_head_by_key(owner)
            if head is None or user not in head.users:
                return
            head.users = [u for u in head.users if u != user]
            assert head.etag is not None
            try:
                if head.gone and not head.users:
                    self._remove_head(owner, head.etag)
                    self._delete_quiet(sorted(set(head.keep)))
                    for o in head.uses:
                        self._unregister(o, owner)
                    return
                self._swap(owner, head, head.etag)
                if not head.users and head.keep:
                    self._delete_quiet(sorted(set(head.keep)))
                    self._forget_keep(owner)
                return
            except PreconditionFailed:
                continue

    # -- copy ---------------------------------------------------------------------------------
    def copy_sync(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        sk, dk = thread_key(source), thread_key(dest)
        if sk == dk:
            raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
        with self._locked(dk):
            for _ in range(_ATTEMPTS):
                src, recs = self._fresh_recs(source)
                if not recs:
                    raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
                dst = self.read_head(dest)
                if dst.has_rows:
                    raise CheckpointConflict(
                        "destination thread already has checkpoints; delete it first", thread_id=dest
                    )
                rows = [self._copied(source, dest, r, metadata) for r in recs]
                new = Head(dest, runs=list(src.runs), uses=sorted({*dst.uses, sk, *src.uses}))
                new.users, new.keep = list(dst.users), list(dst.keep)
                new.tail, new.top, new.end = rows, src.top, src.end
                puts: list[tuple[str, bytes]] = []
                self._flush_tail(dest, dk, new, puts)
                self._put_blobs(puts)
                if dk not in src.users:  # the source records the copy, if it is still what was read
                    src.users = [*src.users, dk]
                    try:
                        self._swap(sk, src, src.etag)
                    except PreconditionFailed:
                        self._delete_quiet([k for k, _ in puts])
                        continue
                self._register(src.uses, dk)
                try:
                    self._swap(dk, new, dst.etag)
                except PreconditionFailed:
                    self._delete_quiet([k for k, _ in puts])
                    for owner in {sk, *src.uses}:
                        self._unregister(owner, dk)
                    raise CheckpointConflict(
                        "another writer created the destination thread while copying", thread_id=dest
                    ) from None
                return len(rows)
        raise CheckpointConflict(f"gave up after {_ATTEMPTS} racing writers", thread_id=dest)

    def _copied(self, source: str, dest: str, r: Rec, metadata: Callable[[Row], dict[str, Any]]) -> Rec:
        meta = memoryview(orjson.dumps(metadata(r.row(source)), option=orjson.OPT_NON_STR_KEYS)).tobytes()
        ok = row_digest(source, r.cid, r.at, r.meta, r.head, r.n, r.fh) == r.digest
        # a row whose digest already fails is never re-signed: it stays refused in the copy
        digest = row_digest(dest, r.cid, r.at, meta, r.head, r.n, r.fh) if ok else r.digest
        return replace(r, meta=meta, digest=digest)

    # -- checks -------------------------------------------------------------------------------
    def _census(self) -> tuple[dict[str, Listed], set[str], list[str]]:
        """Every object (listed first), the objects the heads name (read after), and problems."""
        listed = {o.key: o for o in self.io.list_keys(self.root)}
        heads: dict[str, Head] = {}
        problems: list[str] = []
        for key in sorted(k for k in listed if k.startswith(f"{self.root}h/")):
            tk = key.rsplit("/", 1)[-1]
            try:
                head = self._read_head_by_key(tk)
            except CheckpointCorrupt as e:
                problems.append(f"head {tk}: {e.message}")
                continue
            if head is not None:
                heads[tk] = head
        named: set[str] = set()
        for tk, head in heads.items():
            try:
                recs = self.recs(head)
            except (_Missing, CheckpointCorrupt) as e:
                problems.append(f"{head.thread!r}: a segment cannot be read ({e})")
                recs = list(head.tail)
            keys = [s["k"] for s in head.segs] + [r["k"] for r in head.runs] + [r.blob for r in recs if r.blob]
            for key in [*keys, *head.keep]:
                named.add(key)
                if key not in listed and key in keys:
                    problems.append(f"{head.thread!r}: names missing object {key}")
            for owner in head.uses:
                if owner not in heads or tk not in heads[owner].users:
                    problems.append(f"{head.thread!r}: uses {owner}, which does not list it among its users")
        return listed, named, problems

    def _unnamed(self, listed: dict[str, Listed], named: set[str]) -> list[str]:
        return sorted(k for k in listed.keys() - named if k.startswith(f"{self.root}o/"))

    def integrity_sync(self) -> list[str]:
        """The store's bookkeeping, checked ([] when all is well): every object a head names exists,
        every object is named by its owner's head (an unnamed one was left by a writer killed before
        its commit: a leak, not a wrong answer), and each ``uses`` is matched by the owner's ``users``."""
        listed, named, problems = self._census()
        unnamed = self._unnamed(listed, named)
        return problems + [f"unreferenced object {k} (a writer stopped before its commit)" for k in unnamed]

    def collect_sync(self, older_than: timedelta) -> int:
        """Delete the objects no head names that were written more than ``older_than`` ago (a writer
        killed between its objects and its commit left them); how many went.

        A writer swaps its head seconds after writing its objects, so an unnamed object younger than
        ``older_than`` may be one about to be committed and is left alone: keep ``older_than`` far
        above the longest save (an hour by default in :meth:`S3Backend.collect`)."""
        listed, named, _ = self._census()
        cutoff = datetime.now(UTC) - older_than
        old = [k for k in self._unnamed(listed, named) if (m := listed[k].modified) is not None and m < cutoff]
        self._delete_quiet(old)
        return len(old)

    def close_sync(self) -> None:
        self._fetch.shutdown(wait=True)

    # -- async primitives ---------------------------------------------------------------------
    async def save(self, thread_id: str, plan: SavePlanFn) -> Row:
        row, _ = await self._run(self.save_sync, thread_id, plan)
        return row  # type: ignore[no-any-return]

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> StoredCheckpoint | None:
        return await self._run(self.load_sync, thread_id, checkpoint_id)  # type: ignore[no-any-return]

    async def rows(self, thread_id: str, limit: int | None = None) -> list[Row]:
        return await self._run(self.rows_sync, thread_id, limit)  # type: ignore[no-any-return]

    async def all_rows(self) -> dict[str, list[Row]]:
        return await self._run(self.all_rows_sync)  # type: ignore[no-any-return]

    async def copy(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        return await self._run(self.copy_sync, source, dest, metadata)  # type: ignore[no-any-return]

    async def rewrite(self, thread_id: str, plan: RewritePlanFn) -> int:
        return await self._run(self.rewrite_sync, thread_id, plan)  # type: ignore[no-any-return]

    async def delete_thread(self, thread_id: str) -> int:
        return await self._run(self.delete_sync, thread_id, None)  # type: ignore[no-any-return]


def _drop_only(cids: set[str]) -> Any:
    from tulip_nb.memory.history import Rewrite

    return Rewrite({}, frozenset(cids))
