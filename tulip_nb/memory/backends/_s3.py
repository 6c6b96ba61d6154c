"""S3Backend: threads in S3-compatible object storage (AWS S3, MinIO, R2), on the history model.

The history (:mod:`tulip_nb.memory.history`) lives in immutable objects plus one small head
object per thread, swapped with S3's conditional writes (``If-Match`` / ``If-None-Match: *``):
see :mod:`._s3_history`. A save writes the messages it adds (one object) and the head; a copy or
fork points at the source's objects; a load reads the head and a handful of message batches and
checks every message against its entry id and the row against its digest.

What tulip reads is a **projection** of it, tulip's own layout (FORMATS.md) under
``{prefix}{thread_id}/`` (the thread id raw, so ``user/42`` makes a sub-folder, as tulip does)::

    tulip/checkpoints/user/42/<cid>.json        {"checkpoint_id", "thread_id", "created_at", "state"}
    tulip/checkpoints/user/42/<cid>.meta.json   {"checkpoint_id", "thread_id", "created_at", "metadata"}
    tulip/checkpoints/user/42/_latest           the bare id of the projected checkpoint (text/plain)

for the thread's latest turn end (``layout="history"``, the default) or for every checkpoint
(``layout="tulip"``: tulip lists and loads each one). The history lives beside it, under
``history_prefix`` (default: the prefix with ``.history/`` in place of its last ``/``: outside
tulip's prefix, so tulip's listing, vacuum and a lifecycle rule on the prefix never touch it).

**No multi-object transaction.** S3 has none: the projection is written after the history's
conditional commit, so a crash between them leaves the projection one save behind; it is repaired
from the history the first time an instance touches the thread (and by every later projected
save). The history alone decides what the thread holds; the projection's objects carry the user
metadata ``tulip-nb-projection`` (tulip ignores it) so they are never mistaken for tulip's.

**tulip's own checkpoints.** Envelopes without that mark (a tulip agent resumed the thread) are
checkpoints of the thread: the latest is the newest of the history's rows and those (by
``created_at``, never LastModified), and the next save chains after it. tulip deleting its own
(interrupted-turn) checkpoints removes only those objects; the history is untouched.

Saves are compare-and-swap on the head: with ``expected_parent=`` a lost race raises
:class:`CheckpointConflict`; without it, the save re-reads the head and runs again, so two
processes saving to one thread never lose a turn or fork the lineage. An unreachable endpoint
raises :class:`BackendUnavailable`; it never looks like an empty thread.

Retention: :meth:`S3Backend.configure_lifecycle` writes a lifecycle rule for the prefix (tulip's
objects, which the history re-projects when one expires); the history's own retention is
:meth:`~S3Backend.prune` / :meth:`~S3Backend.vacuum` (an expiring message batch would break every
later checkpoint, so the history is outside the rule).

>>> cp = S3Backend("tulip-threads", endpoint_url="http://127.0.0.1:5055")  # doctest: +SKIP
>>> await cp.save(state, "ticket-8912-refund")                             # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import functools
import threading
import warnings
import weakref
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Literal, TypeVar

from tulip_nb.core import iso_offset
from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, InvalidThreadId, UserError
from tulip_nb.core.state import state_json_parts
from tulip_nb.memory.backends._base import newest_first
from tulip_nb.memory.backends._history_common import (
    Choose,
    HistoryCheckpointer,
    PendingSave,
    copied_metadata,
    newest,
    put_write,
    rewrite_plan,
)
from tulip_nb.memory.backends._history_dir import is_turn_end
from tulip_nb.memory.backends._s3_layout import (
    LATEST,
    KeyKind,
    ckpt_body,
    decode_checkpoint,
    info_from_object,
    lifecycle_rule,
    meta_body,
    parse_key,
)
from tulip_nb.memory.backends._s3_records import thread_key
from tulip_nb.memory.checkpointer import (
    Checkpoint,
    CheckpointInfo,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)

__all__: list[str] = []

T = TypeVar("T")
_MAX_KEY_BYTES = 1024  # S3's limit on a key
_HEAD_RANGE = "bytes=0-16383"  # enough for checkpoint_id, thread_id and created_at
_CREATED_AT_META = "tulip-nb-created-at"  # user metadata on _latest; tulip ignores it
MARK = "tulip-nb-projection"
"""User metadata on a projected envelope (its value: the history's name of the thread)."""


def default_history_prefix(prefix: str) -> str:
    """Where the history lives for tulip's ``prefix``: beside it, never under it.

    >>> default_history_prefix("tulip/checkpoints/"), default_history_prefix("")
    ('tulip/checkpoints.history/', 'tulip_nb.history/')
    """
    return f"{prefix[:-1]}.history/" if prefix else "tulip_nb.history/"


class S3Backend(HistoryCheckpointer):
    """Checkpoints in an S3 bucket: the history model, projected as tulip's layout (module docstring).

    Args:
        bucket: the bucket name.
        prefix: key prefix of tulip's objects; ``"tulip/checkpoints/"`` as in tulip.
        layout: ``"history"`` (tulip is shown each thread's latest turn end) or ``"tulip"`` (every
            checkpoint, as tulip writes them).
        history_prefix: key prefix of the history (default :func:`default_history_prefix`); must
            not lie under ``prefix`` (with ``prefix=""`` tulip's own listing of the whole bucket
            shows it as a thread: give tulip a prefix).
        endpoint_url: an S3-compatible endpoint (MinIO, R2, moto); path-style addressing is used.
        region_name: the AWS region (also used when creating the bucket).
        aws_access_key_id, aws_secret_access_key: explicit credentials (else boto3's chain).
        create_bucket: create the bucket on first use when it is missing (tulip's default).
        max_concurrency: parallel S3 requests (worker threads and pooled connections).
        connect_timeout, read_timeout, max_attempts: botocore's timeouts and retry budget; an
            endpoint that stays down raises :class:`BackendUnavailable` after them.
        client: a ready boto3 S3 client, instead of building one.
        sign: hash-chain every save (:mod:`tulip_nb.memory.integrity`); opt-in, as on every store of
            the history model (each row's content digest is checked on load either way).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "tulip/checkpoints/",
        *,
        layout: Literal["history", "tulip"] = "history",
        history_prefix: str | None = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        create_bucket: bool = True,
        max_concurrency: int = 32,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        max_attempts: int = 3,
        client: Any = None,
        sign: bool = False,
    ) -> None:
        from tulip_nb.memory.backends._s3_history import S3History
        from tulip_nb.memory.backends._s3_io import S3IO  # imports boto3, or names the extra

        if layout not in ("history", "tulip"):
            raise UserError(f"S3Backend layout must be 'history' or 'tulip', got {layout!r}")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        history_prefix = history_prefix or default_history_prefix(prefix)
        if not history_prefix.endswith("/"):
            history_prefix += "/"
        if history_prefix.startswith(prefix) or prefix.startswith(history_prefix):
            raise UserError(
                f"S3Backend history_prefix {history_prefix!r} must lie outside prefix {prefix!r}"
                " (tulip lists, copies and vacuums everything under its prefix)"
            )
        self.bucket = bucket
        self.prefix = prefix
        self.layout = layout
        self.every = layout == "tulip"
        """Project every checkpoint (``layout="tulip"``), not only the latest turn end."""
        self.history_prefix = history_prefix
        self.endpoint_url = endpoint_url
        self._io = S3IO(
            bucket,
            endpoint_url=endpoint_url,
            region_name=region_name,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            max_pool_connections=max_concurrency + min(16, max_concurrency),  # the pool and the history's fetchers
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_attempts=max_attempts,
            client=client,
        )
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="tulip-nb-s3")
        self.store = S3History(self._io, history_prefix, self._run, fetchers=min(16, max_concurrency))
        self._create_bucket = create_bucket
        self._bucket_ready = False
        self._bucket_lock = threading.Lock()
        # In-process writers to one thread queue up (the history also locks per thread; this keeps
        # the projection in save order). One table per loop: an asyncio.Lock belongs to its loop.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )
        self._infos: dict[str, tuple[str, CheckpointInfo, str | None]] = {}  # meta key -> (etag, info, mark)
        self._start(sign=sign)
        self._repaired: set[str] = set()
        self._failed: set[str] = set()  # threads whose projection write just failed (repaired when next touched)
        self._closed = False

    def __repr__(self) -> str:
        where = f", endpoint_url={self.endpoint_url!r}" if self.endpoint_url else ""
        return f"S3Backend(bucket={self.bucket!r}, prefix={self.prefix!r}, layout={self.layout!r}{where})"

    async def _run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise RuntimeError("S3Backend is closed")
        loop = asyncio.get_running_loop()
        if not self._bucket_ready:
            await loop.run_in_executor(self._pool, self._ensure_bucket)
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def _ensure_bucket(self) -> None:
        with self._bucket_lock:
            if not self._bucket_ready and self._create_bucket:
                self._io.ensure_bucket()
            self._bucket_ready = True

    def _lock(self, thread_id: str) -> asyncio.Lock:
        table = self._locks.setdefault(asyncio.get_running_loop(), {})
        lock = table.get(thread_id)
        if lock is None:
            lock = table[thread_id] = asyncio.Lock()
        return lock

    def _dir(self, thread_id: str) -> str:
        validate_thread_id(thread_id)
        return f"{self.prefix}{thread_id}/"

    def _key(self, thread_id: str, checkpoint_id: str, suffix: str = ".json") -> str:
        validate_checkpoint_id(checkpoint_id, thread_id)
        if "/" in checkpoint_id or checkpoint_id.endswith(".meta") or checkpoint_id == LATEST:
            raise InvalidThreadId(
                "checkpoint_id must not contain '/', end in '.meta' or be '_latest' on S3",
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
            )
        key = f"{self._dir(thread_id)}{checkpoint_id}{suffix}"
        if len(f"{self._dir(thread_id)}{checkpoint_id}.meta.json".encode()) > _MAX_KEY_BYTES:
            raise InvalidThreadId("thread_id is too long for an S3 key (1024 bytes)", thread_id=thread_id[:40])
        return key

    def _mark(self, thread_id: str) -> str:
        return thread_key(thread_id)

    # -- tulip's envelopes (ours marked, tulip's not) ----------------------------------------
    async def _info_of(
        self, thread_id: str, cid: str, etag: str | None = None
    ) -> tuple[CheckpointInfo, str | None] | None:
        """A checkpoint envelope's info and projection mark (None: not readable, or gone)."""
        key = self._key(thread_id, cid, ".meta.json")
        cached = self._infos.get(key)
        if cached and (etag is None or cached[0] == etag):
            return cached[1], cached[2]
        stored = await self._run(self._io.get, key)
        where = f"s3://{self.bucket}/{key}"
        if stored is None:  # no .meta.json (a tulip crash between PUTs): read the envelope head
            stored = await self._run(self._io.get, self._key(thread_id, cid), byte_range=_HEAD_RANGE)
            if stored is None:
                return None
            info = info_from_object(stored.body, thread_id, where=where, partial=True)
            if info is None:
                return None
            return CheckpointInfo(info.checkpoint_id, thread_id, info.created_at, {}), stored.metadata.get(MARK)
        info = info_from_object(stored.body, thread_id, where=where)
        if info is None:
            return None
        mark = stored.metadata.get(MARK)
        self._infos[key] = (stored.etag, info, mark)
        return info, mark

    async def _envelopes(self, thread_id: str) -> dict[str, tuple[CheckpointInfo, bool]]:
        """Checkpoint id -> (info, projected by us) of every readable envelope of the thread."""
        listed = await self._run(lambda: list(self._io.list_keys(self._dir(thread_id), delimiter="/")))
        cids: list[str] = []
        meta_etags: dict[str, str] = {}
        for obj in listed:
            parsed = parse_key(obj.key, self.prefix)
            if parsed is None or parsed.thread_id != thread_id:
                continue
            if parsed.kind is KeyKind.CHECKPOINT:
                cids.append(parsed.checkpoint_id)
            elif parsed.kind is KeyKind.META:
                meta_etags[parsed.checkpoint_id] = obj.etag
        got = await asyncio.gather(*(self._info_of(thread_id, c, meta_etags.get(c)) for c in cids))
        mark = self._mark(thread_id)
        return {i.checkpoint_id: (i, m == mark) for g in got if g is not None for i, m in [g]}

    async def _foreign(self, thread_id: str) -> dict[str, CheckpointInfo]:
        """tulip's own checkpoints of the thread (envelopes we did not project)."""
        return {cid: info for cid, (info, ours) in (await self._envelopes(thread_id)).items() if not ours}

    async def _load_envelope(self, thread_id: str, cid: str) -> Checkpoint:
        """A checkpoint tulip wrote (an envelope without the projection mark)."""
        key = self._key(thread_id, cid)
        got = await asyncio.gather(self._run(self._io.get, key), self._info_of(thread_id, cid))
        stored, info = got
        if stored is None or stored.metadata.get(MARK) == self._mark(thread_id):
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=cid)
        ckpt = decode_checkpoint(stored.body, thread_id, where=f"s3://{self.bucket}/{key}")
        if info is not None:
            ckpt.metadata = dict(info[0].metadata)
        return ckpt

    # -- the projection -----------------------------------------------------------------------
    async def _write_envelope(self, ckpt: Checkpoint) -> None:
        tid, cid = ckpt.thread_id, ckpt.checkpoint_id
        mark = {MARK: self._mark(tid)}
        state_bytes = b"".join(state_json_parts(ckpt.state, cache=self._blobs, key=tid))
        meta = dict(ckpt.metadata)
        meta_key = self._key(tid, cid, ".meta.json")
        # .meta.json first: a checkpoint is listed once its .json exists, never without metadata
        etag = await self._run(
            self._io.put,
            meta_key,
            meta_body(cid, tid, ckpt.created_at, meta),
            "application/json",
            metadata=mark,
        )
        await self._run(
            self._io.put,
            self._key(tid, cid),
            ckpt_body(cid, tid, ckpt.created_at, state_bytes),
            "application/json",
            metadata=mark,
        )
        self._infos[meta_key] = (etag, CheckpointInfo(cid, tid, ckpt.created_at, meta), mark[MARK])

    async def _point_latest(self, thread_id: str, info: CheckpointInfo | None) -> None:
        """Point tulip's ``_latest`` at ``info`` (remove it for None)."""
        key = self._dir(thread_id) + LATEST
        if info is None:
            await self._run(self._io.delete_keys, [key])
            return
        stamp = {_CREATED_AT_META: iso_offset(info.created_at)}
        await self._run(self._io.put, key, info.checkpoint_id.encode(), "text/plain", metadata=stamp)

    async def _project_saved(self, ckpt: Checkpoint) -> None:
        """After a committed save: its envelope and ``_latest``. In the default layout the thread is
        then checked again (listed after the commit, against the head's newest turn end), so a
        writer in another process that projected an older turn end meanwhile is undone by whichever
        of the two checks last: the projection converges on the history's newest turn end."""
        await self._write_envelope(ckpt)
        await self._point_latest(ckpt.thread_id, ckpt.info)
        if not self.every:
            await self._sync_projection(ckpt.thread_id)

    async def _unlink(self, thread_id: str, cids: Sequence[str]) -> int:
        keys = [self._key(thread_id, c, s) for c in cids for s in (".json", ".meta.json")]
        if keys:
            await self._run(self._io.delete_keys, keys)
            for k in keys:
                self._infos.pop(k, None)
        return len(cids)

    async def _sync_projection(self, thread_id: str, *, force: str | None = None, repair: bool = False) -> None:
        """Make the projection what the history says: missing or differing envelopes written, stale
        ones removed, ``_latest`` on the newest of the projection and tulip's own. Writes only what
        differs (a load by a reader with read-only credentials writes nothing when all is in step).
        ``force``: a checkpoint id whose envelope is rewritten (when projected) even if its header
        matches (``put_checkpoint`` may replace a state under the same id and metadata); ``repair``: a
        write that fails is a warning (the history answers either way), a read that fails raises."""
        envs = await self._envelopes(thread_id)
        want = await self._run(self.store.projected_sync, thread_id, self.every)
        projected = {cid for cid, (_, ours) in envs.items() if ours}
        write: list[Checkpoint] = []
        for info in want:
            have = envs.get(info.checkpoint_id)
            same = have is not None and have[1] and have[0].metadata == info.metadata
            if force == info.checkpoint_id or not same or have is None or have[0].created_at != info.created_at:
                try:
                    stored = await self._run(self.store.load_sync, thread_id, info.checkpoint_id)
                except (CheckpointCorrupt, CheckpointNotFound):
                    continue  # a damaged row: its load and verify report it
                if stored is not None:
                    write.append(stored.checkpoint)
        stale = sorted(projected - {i.checkpoint_id for i in want})
        foreign = [info for info, ours in envs.values() if not ours]
        top = newest_first([*want, *foreign])
        pointer = await self._run(self._io.get, self._dir(thread_id) + LATEST) if (top or envs) else None
        named = pointer.body.decode("utf-8", "replace").strip() if pointer is not None else None
        repoint = (bool(top) and named != top[0].checkpoint_id) or (not top and pointer is not None)

        async def writes() -> None:
            for ckpt in write:
                await self._write_envelope(ckpt)
            await self._unlink(thread_id, stale)
            if repoint:
                await self._point_latest(thread_id, top[0] if top else None)

        if repair:
            await self._after_commit(thread_id, writes())
        else:
            await writes()
        if thread_id not in self._failed:
            self._repaired.add(thread_id)
        self._failed.discard(thread_id)

    async def _repair(self, thread_id: str) -> None:
        """The first time this instance touches a thread: put its projection in step with the history."""
        if thread_id not in self._repaired:
            await self._sync_projection(thread_id, repair=True)

    # -- contract -----------------------------------------------------------------------------
    async def _save_row(self, save: PendingSave) -> None:
        thread_id = save.thread_id
        async with self._lock(thread_id):
            await self._repair(thread_id)
            envs = await self._envelopes(thread_id)
            tulip = [info for info, ours in envs.values() if not ours]
            tulip_latest = max(tulip, key=lambda i: (i.created_at, i.checkpoint_id), default=None)
            _, write = await self._run(self.store.save_sync, thread_id, save.plan(tulip_latest))
            self._chains.stored(thread_id, save.chain)
            if self.every or is_turn_end(write.metadata):
                await self._after_commit(thread_id, self._project_saved(save.checkpoint(write)))

    async def _after_commit(self, thread_id: str, projection: Awaitable[None]) -> None:
        """Write the projection after the history committed. A failure is a warning, not a failed
        operation: the history holds it (a save reported failed after its commit would be retried,
        a duplicate turn), and the projection is repaired the next time an instance touches the thread."""
        try:
            await projection
        except OSError as e:  # BackendUnavailable is an OSError
            self._repaired.discard(thread_id)
            self._failed.add(thread_id)
            warnings.warn(
                f"tulip_nb: tulip's objects of thread {thread_id!r} in s3://{self.bucket}/{self._dir(thread_id)} could"
                f" not be written ({e}); the history holds the thread, and they are written again when the thread"
                " is next opened",
                RuntimeWarning,
                stacklevel=3,
            )

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write a checkpoint verbatim (see :meth:`BaseCheckpointer.put_checkpoint`)."""
        ckpt = validate_checkpoint(checkpoint)
        self._check_id(ckpt.checkpoint_id, ckpt.thread_id)
        async with self._lock(ckpt.thread_id):
            write = put_write(ckpt, self._chains)
            await self._run(self.store.save_sync, ckpt.thread_id, lambda _latest: write)
            self._chains.stored(ckpt.thread_id, write.chain)
            await self._after_commit(ckpt.thread_id, self._sync_projection(ckpt.thread_id, force=ckpt.checkpoint_id))

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        validate_thread_id(thread_id)
        await self._repair(thread_id)
        if checkpoint_id is not None:
            cid = validate_checkpoint_id(checkpoint_id, thread_id)
            self._key(thread_id, cid)
            try:
                return self._loaded(await self._run(self.store.load_sync, thread_id, cid))
            except CheckpointNotFound:
                return await self._load_envelope(thread_id, cid)
        stored = await self._run(self.store.load_sync, thread_id, None)  # corrupt: raises, never older
        ours = stored.checkpoint.info if stored is not None else None
        for info in newest_first(list((await self._foreign(thread_id)).values())):
            if ours is not None and newest(ours, info) is ours:
                break
            try:
                return await self._load_envelope(thread_id, info.checkpoint_id)
            except CheckpointNotFound:
                continue  # deleted meanwhile (tulip removing an interrupted turn's checkpoint)
        return self._loaded(stored)

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        validate_thread_id(thread_id)
        rows, foreign = await asyncio.gather(self._run(self.store.rows_sync, thread_id), self._foreign(thread_id))
        infos = [r.info for r in rows]
        ids = {i.checkpoint_id for i in infos}
        extra = [i for cid, i in foreign.items() if cid not in ids]
        if extra:
            infos = newest_first(infos + extra)
        return infos if limit is None else infos[: max(limit, 0)]

    def _check_id(self, checkpoint_id: str, thread_id: str) -> None:
        self._key(thread_id, checkpoint_id, ".meta.json")  # refuse an id S3 cannot hold before anything is written

    async def _delete_rows(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        if checkpoint_ids is None:
            async with self._lock(thread_id):
                gone = await self._run(self.store.delete_sync, thread_id, None)
                listed = await self._run(lambda: list(self._io.list_keys(self._dir(thread_id), delimiter="/")))
                keys = [o.key for o in listed if (p := parse_key(o.key, self.prefix)) and p.thread_id == thread_id]
                had = any(parse_key(k, self.prefix).kind is KeyKind.CHECKPOINT for k in keys)  # type: ignore[union-attr]
                if keys:
                    await self._run(self._io.delete_keys, keys)
                for k in keys:
                    self._infos.pop(k, None)
                self._chains.forget(thread_id)
                self._repaired.discard(thread_id)
                return int(gone) or int(had)
        for cid in checkpoint_ids:
            self._key(thread_id, cid)
        async with self._lock(thread_id):
            gone = await self._run(self.store.delete_sync, thread_id, sorted(checkpoint_ids))
            foreign = await self._foreign(thread_id)
            gone += await self._unlink(thread_id, [c for c in foreign if c in checkpoint_ids])
            await self._after_commit(thread_id, self._sync_projection(thread_id))
            return int(gone)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)
            self.store.close_sync()
            self._io.close()

    # -- capabilities (the scans are derived in InTreeCheckpointer) ---------------------------
    async def _tulip_threads(self) -> dict[str, dict[str, str | None]]:
        """Thread id -> checkpoint id -> its .meta.json ETag (None: none) of every envelope under the prefix."""
        listed = await self._run(lambda: list(self._io.list_keys(self.prefix)))
        per: dict[str, dict[str, str | None]] = {}
        jsons = {o.key for o in listed}
        for obj in listed:
            parsed = parse_key(obj.key, self.prefix)
            if parsed is None or parsed.kind is KeyKind.LATEST:
                continue
            slot = per.setdefault(parsed.thread_id, {})
            if parsed.kind is KeyKind.CHECKPOINT:
                slot.setdefault(parsed.checkpoint_id, None)
            else:
                slot[parsed.checkpoint_id] = obj.etag
        return {
            tid: {c: e for c, e in cids.items() if f"{self.prefix}{tid}/{c}.json" in jsons} for tid, cids in per.items()
        }

    async def _thread_ids(self) -> list[str]:
        """The history's threads and those tulip wrote (from the key listing alone)."""
        history, tulip = await asyncio.gather(self._run(self.store.threads_sync), self._tulip_threads())
        return sorted({*history, *(t for t, cids in tulip.items() if cids)})

    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        rows, tulip = await asyncio.gather(self._run(self.store.all_rows_sync), self._tulip_threads())
        per: dict[str, list[CheckpointInfo]] = {t: [r.info for r in rs] for t, rs in rows.items()}
        for tid, cids in tulip.items():
            mark = self._mark(tid)
            got = await asyncio.gather(*(self._info_of(tid, c, e) for c, e in cids.items()))
            have = {i.checkpoint_id for i in per.get(tid, [])}
            extra = [i for g in got if g is not None for i, m in [g] if m != mark and i.checkpoint_id not in have]
            if extra:
                per[tid] = newest_first(per.get(tid, []) + extra)
        return {t: infos for t, infos in per.items() if infos}

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        validate_thread_id(source_thread_id)
        validate_thread_id(dest_thread_id)
        async with self._lock(dest_thread_id):
            rows = {r.checkpoint_id for r in await self._run(self.store.rows_sync, source_thread_id)}
            tulip = {c: i for c, i in (await self._foreign(source_thread_id)).items() if c not in rows}
            if await self._foreign(dest_thread_id):
                raise CheckpointConflict(
                    "destination thread already has checkpoints; delete it first", thread_id=dest_thread_id
                )
            if rows:
                await self._run(
                    self.store.copy_sync, source_thread_id, dest_thread_id, copied_metadata(source_thread_id)
                )
            elif not tulip:
                raise CheckpointNotFound("source thread has no checkpoints", thread_id=source_thread_id)
            elif await self._run(self.store.rows_sync, dest_thread_id, 1):
                raise CheckpointConflict(
                    "destination thread already has checkpoints; delete it first", thread_id=dest_thread_id
                )
            for cid in tulip:  # tulip's own checkpoints of the source become rows of the copy
                ckpt = await self._load_envelope(source_thread_id, cid)
                meta = {**ckpt.metadata, "copied_from": {"thread_id": source_thread_id, "checkpoint_id": cid}}
                write = put_write(Checkpoint(cid, dest_thread_id, ckpt.created_at, ckpt.state, meta), self._chains)
                await self._run(self.store.save_sync, dest_thread_id, lambda _latest, w=write: w)
            await self._after_commit(dest_thread_id, self._sync_projection(dest_thread_id))
        return True

    # -- retention: each a drop and a re-link in one compare-and-swap -------------------------
    async def _rewrite(self, thread_id: str, choose: Choose) -> int:
        async with self._lock(thread_id):
            foreign = await self._foreign(thread_id)
            plan, dropped = rewrite_plan(choose, list(foreign.values()))
            gone = await self._run(self.store.rewrite_sync, thread_id, plan)
            gone += await self._unlink(thread_id, [i.checkpoint_id for i in dropped])
            await self._after_commit(thread_id, self._sync_projection(thread_id))
            return int(gone)

    # -- retention of tulip's objects ---------------------------------------------------------
    async def configure_lifecycle(
        self,
        days_until_archive: int | None = None,
        days_until_delete: int | None = None,
        *,
        storage_class: str = "GLACIER",
    ) -> dict[str, Any] | None:
        """Write the bucket lifecycle rule that archives and expires this prefix's objects.

        S3 then does the clean-up itself: objects move to ``storage_class`` after
        ``days_until_archive`` days and are deleted after ``days_until_delete`` days. Other rules
        in the bucket are kept; calling again replaces this prefix's rule, and calling with both
        ``None`` removes it. Returns the rule written (or None when removed).

        The rule covers tulip's objects (the projection, and checkpoints tulip wrote), not the
        history (``history_prefix`` lies outside the prefix): an expired projection is written
        again from the history when an instance next touches the thread; the history's retention
        is :meth:`prune` and :meth:`vacuum`.
        """
        rule_id = lifecycle_id(self)
        rule = lifecycle_rule(rule_id, self.prefix, days_until_archive, days_until_delete, storage_class)
        rules = [r for r in await self._run(self._io.get_lifecycle_rules) if r.get("ID") != rule_id]
        if rule is not None:
            rules.append(rule)
        await self._run(self._io.put_lifecycle_rules, rules)
        return rule

    # -- checks -------------------------------------------------------------------------------
    async def check_store(self) -> list[str]:
        """The history's bookkeeping: objects named and present, sharing recorded both ways ([]: all
        is well). ``tulip-nb verify`` runs it."""
        return await self._run(self.store.integrity_sync)

    async def collect(self, older_than_hours: float = 1.0) -> int:
        """Delete the history's objects no head names, written over ``older_than_hours`` ago: what
        a process killed between writing its objects and swapping its head left behind (never read,
        only stored). Younger ones are left: they may belong to a save about to commit. Returns
        how many were deleted."""
        if older_than_hours < 0:
            raise UserError(f"older_than_hours must not be negative, got {older_than_hours!r}")
        return await self._run(self.store.collect_sync, timedelta(hours=older_than_hours))

    async def check_mirror(self, thread_id: str) -> list[str]:
        """Problems with the thread's projection (none: tulip is shown what the history holds)."""
        envs = await self._envelopes(thread_id)
        want = await self._run(self.store.projected_sync, thread_id, self.every)
        projected = {cid for cid, (_, ours) in envs.items() if ours}
        problems = [f"{cid}: stale tulip envelope" for cid in sorted(projected - {i.checkpoint_id for i in want})]
        for info in want:
            have = envs.get(info.checkpoint_id)
            if have is None or not have[1]:
                problems.append(f"{info.checkpoint_id}: no tulip envelope")
            elif have[0].metadata != info.metadata or have[0].created_at != info.created_at:
                problems.append(f"{info.checkpoint_id}: the tulip envelope differs from the history")
        return problems


def lifecycle_id(backend: S3Backend) -> str:
    """The ID of the lifecycle rule :meth:`S3Backend.configure_lifecycle` owns."""
    return f"tulip_nb:{backend.prefix}"[:255]


def s3_checkpointer(bucket: str, prefix: str = "tulip/checkpoints/", **kwargs: Any) -> S3Backend:
    """An :class:`S3Backend`, returned unchanged: it is already a native checkpointer."""
    return S3Backend(bucket, prefix, **kwargs)
