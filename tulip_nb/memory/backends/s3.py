"""S3Backend: threads in S3-compatible object storage (AWS S3, MinIO, R2), in tulip's layout.

Each save writes three objects under ``{prefix}{thread_id}/`` (the thread id is used raw, so
``user/42`` makes a sub-folder, exactly as tulip does)::

    tulip/checkpoints/user/42/<cid>.json        {"checkpoint_id", "thread_id", "created_at", "state"}
    tulip/checkpoints/user/42/<cid>.meta.json   {"checkpoint_id", "thread_id", "created_at", "metadata"}
    tulip/checkpoints/user/42/_latest           the bare id of the newest checkpoint (text/plain)

so a thread written here is resumed by tulip-agents' ``S3Backend`` and vice versa. Loading the
latest state is two GETs (``_latest``, then ``<cid>.json``).

Where this differs from tulip, on purpose:

- **Latest is decided by ``created_at``**, never by LastModified (1 s resolution): a save's
  ``created_at`` is kept strictly after the previous latest's, and deleting the newest checkpoint
  re-points ``_latest`` at the newest remaining ``created_at``.
- **Saves are compare-and-swap on ``_latest``**: the pointer is written with ``If-Match`` (its
  ETag) or ``If-None-Match: *`` (new thread). With ``expected_parent=`` a lost race raises
  :class:`CheckpointConflict` and removes what it wrote; without it, the save re-reads the pointer
  and retries, so two processes saving to one thread never lose a turn or fork the lineage.
- ``list_threads`` returns whole thread ids (``a/b`` included) and honours ``pattern``;
  ``copy_thread`` rewrites ``thread_id`` inside the copied objects.
- An unreachable endpoint raises :class:`BackendUnavailable`; it never looks like an empty thread.

Retention belongs to the bucket: :meth:`S3Backend.configure_lifecycle` writes a lifecycle rule for
the prefix, and S3 then archives and expires old checkpoints itself.

>>> cp = S3Backend("tulip-threads", endpoint_url="http://127.0.0.1:5055")  # doctest: +SKIP
>>> await cp.save(state, "ticket-8912-refund")                             # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from tulip_nb.core import iso_offset, parse_datetime
from tulip_nb.core.errors import CheckpointConflict, CheckpointNotFound, InvalidThreadId
from tulip_nb.core.state import AgentState
from tulip_nb.memory.backends._base import InTreeCheckpointer, newest_first, prepare_save
from tulip_nb.memory.backends._s3_layout import (
    LATEST,
    Head,
    KeyKind,
    ckpt_body,
    copy_body,
    decode_checkpoint,
    info_from_object,
    lifecycle_rule,
    meta_body,
    parse_key,
)
from tulip_nb.memory.checkpointer import (
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    new_checkpoint_id,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)

__all__ = ["S3Backend", "s3_checkpointer"]

T = TypeVar("T")
_MAX_KEY_BYTES = 1024  # S3's limit on a key
_HEAD_RANGE = "bytes=0-16383"  # enough for checkpoint_id, thread_id and created_at
_CREATED_AT_META = "tulip-nb-created-at"  # user metadata on _latest; tulip ignores it
_SAVE_ATTEMPTS = 20


class S3Backend(InTreeCheckpointer):
    """Checkpoints as objects in an S3 bucket (see the module docstring for the layout).

    Args:
        bucket: the bucket name.
        prefix: key prefix for every object; ``"tulip/checkpoints/"`` as in tulip.
        endpoint_url: an S3-compatible endpoint (MinIO, R2, moto); path-style addressing is used.
        region_name: the AWS region (also used when creating the bucket).
        aws_access_key_id, aws_secret_access_key: explicit credentials (else boto3's chain).
        create_bucket: create the bucket on first use when it is missing (tulip's default).
        max_concurrency: parallel S3 requests (worker threads and pooled connections).
        connect_timeout, read_timeout, max_attempts: botocore's timeouts and retry budget; an
            endpoint that stays down raises :class:`BackendUnavailable` after them.
        client: a ready boto3 S3 client, instead of building one.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "tulip/checkpoints/",
        *,
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
        sign: bool = True,
    ) -> None:
        from tulip_nb.memory.backends._s3_io import S3IO  # imports boto3, or names the extra

        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self.bucket = bucket
        self.sign = sign
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self._io = S3IO(
            bucket,
            endpoint_url=endpoint_url,
            region_name=region_name,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            max_pool_connections=max_concurrency,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_attempts=max_attempts,
            client=client,
        )
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="tulip-nb-s3")
        self._create_bucket = create_bucket
        self._bucket_ready = False
        self._bucket_lock = threading.Lock()
        # In-process writers to one thread queue up (no 412 retries among ourselves); other
        # processes are kept honest by the conditional PUT on _latest. One lock table per loop,
        # since an asyncio.Lock belongs to the loop that first waits on it.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )
        self._heads: dict[str, Head] = {}  # thread -> last _latest we wrote or read
        self._infos: dict[str, tuple[str, CheckpointInfo]] = {}  # meta key -> (etag, info)
        self._closed = False

    def __repr__(self) -> str:
        where = f", endpoint_url={self.endpoint_url!r}" if self.endpoint_url else ""
        return f"S3Backend(bucket={self.bucket!r}, prefix={self.prefix!r}{where})"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            search=True,
            metadata_query=True,
            vacuum=True,
            branching=True,
            list_threads=True,
            list_with_metadata=True,
            persistent_checkpoint_ids=True,
        )

    # -- plumbing -----------------------------------------------------------------------------
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

    # -- the _latest pointer ------------------------------------------------------------------
    async def _read_head(self, thread_id: str) -> Head | None:
        """The thread's ``_latest`` pointer with its ETag and the checkpoint's ``created_at``."""
        stored = await self._run(self._io.get, self._dir(thread_id) + LATEST)
        if stored is None:
            self._heads.pop(thread_id, None)
            return None
        cid = stored.body.decode("utf-8", "replace").strip()
        created: datetime | None = None
        raw = stored.metadata.get(_CREATED_AT_META)
        if raw:
            try:
                created = parse_datetime(raw)
            except ValueError:
                created = None
        if created is None and cid:  # written by tulip: read the checkpoint's own stamp
            info = await self._info_of(thread_id, cid)
            created = info.created_at if info else None
        head = Head(cid, stored.etag, created, stamped=bool(raw))
        self._heads[thread_id] = head
        return head

    async def _write_head(
        self, thread_id: str, cid: str, created: datetime, *, prev: Head | None, expect: bool = True
    ) -> Head:
        """Point ``_latest`` at ``cid``; conditional on ``prev`` unless ``expect`` is False."""
        from tulip_nb.memory.backends._s3_io import PreconditionFailed

        kwargs: dict[str, Any] = {}
        if expect:
            kwargs = {"if_match": prev.etag} if prev else {"if_none_match": True}
        try:
            etag = await self._run(
                self._io.put,
                self._dir(thread_id) + LATEST,
                cid.encode(),
                "text/plain",
                metadata={_CREATED_AT_META: iso_offset(created)},
                **kwargs,
            )
        except PreconditionFailed:
            self._heads.pop(thread_id, None)
            raise
        head = Head(cid, etag, created)
        self._heads[thread_id] = head
        return head

    # -- checkpoint infos ---------------------------------------------------------------------
    async def _info_of(self, thread_id: str, cid: str, etag: str | None = None) -> CheckpointInfo | None:
        key = self._key(thread_id, cid, ".meta.json")
        cached = self._infos.get(key)
        if cached and (etag is None or cached[0] == etag):
            return cached[1]
        stored = await self._run(self._io.get, key)
        where = f"s3://{self.bucket}/{key}"
        if stored is None:  # no .meta.json (a tulip crash between PUTs): read the envelope head
            stored = await self._run(self._io.get, self._key(thread_id, cid), byte_range=_HEAD_RANGE)
            if stored is None:
                return None
            info = info_from_object(stored.body, thread_id, where=where, partial=True)
            if info is not None:
                info = CheckpointInfo(info.checkpoint_id, thread_id, info.created_at, {})
            return info
        info = info_from_object(stored.body, thread_id, where=where)
        if info is not None:
            self._infos[key] = (stored.etag, info)
        return info

    async def _thread_infos(self, thread_id: str) -> list[CheckpointInfo]:
        """Every readable checkpoint of the thread, newest ``created_at`` first."""
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
        infos = await asyncio.gather(*(self._info_of(thread_id, c, meta_etags.get(c)) for c in cids))
        return newest_first([i for i in infos if i is not None])

    async def _all_infos(self) -> dict[str, list[CheckpointInfo]]:
        """Every checkpoint of every thread under the prefix, per thread, newest first."""
        listed = await self._run(lambda: list(self._io.list_keys(self.prefix)))
        per: dict[str, dict[str, str | None]] = {}
        for obj in listed:
            parsed = parse_key(obj.key, self.prefix)
            if parsed is None or parsed.kind is KeyKind.LATEST:
                continue
            slot = per.setdefault(parsed.thread_id, {})
            if parsed.kind is KeyKind.CHECKPOINT:
                slot.setdefault(parsed.checkpoint_id, None)
            else:
                slot[parsed.checkpoint_id] = obj.etag
        out: dict[str, list[CheckpointInfo]] = {}
        for tid, cids in per.items():
            jsons = {o.key for o in listed}
            live = [c for c in cids if self._key(tid, c) in jsons]
            infos = await asyncio.gather(*(self._info_of(tid, c, cids[c]) for c in live))
            found = newest_first([i for i in infos if i])
            if found:
                out[tid] = found
        return out

    # -- contract -----------------------------------------------------------------------------
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        from tulip_nb.memory.backends._s3_io import PreconditionFailed

        validate_thread_id(thread_id)
        cid = validate_checkpoint_id(checkpoint_id, thread_id) if checkpoint_id else new_checkpoint_id()
        ckpt_key, meta_key = self._key(thread_id, cid), self._key(thread_id, cid, ".meta.json")
        state_bytes = state.to_json_bytes()
        async with self._lock(thread_id):
            # A compare-and-swap decides on a fresh pointer; a plain save trusts the one it last
            # saw and lets the conditional PUT tell it when another process moved on.
            fresh = expected_parent is not None or thread_id not in self._heads
            head = await self._read_head(thread_id) if fresh else self._heads[thread_id]
            for _ in range(_SAVE_ATTEMPTS):
                latest_id = head.checkpoint_id if head else None
                parent_info = await self._info_of(thread_id, latest_id) if latest_id else None
                plan = prepare_save(
                    thread_id,
                    state,
                    metadata,
                    expected_parent=expected_parent,
                    latest_id=latest_id,
                    latest_created_at=head.created_at if head is not None else None,
                    latest_metadata=parent_info.metadata if parent_info else None,
                    sign=self.sign,
                )
                now, meta = plan.created_at, plan.metadata
                await asyncio.gather(
                    self._run(self._io.put, ckpt_key, ckpt_body(cid, thread_id, now, state_bytes), "application/json"),
                    self._run(self._io.put, meta_key, meta_body(cid, thread_id, now, meta), "application/json"),
                )
                try:
                    await self._write_head(thread_id, cid, now, prev=head)
                except PreconditionFailed:
                    if expected_parent is not None:
                        await self._run(self._io.delete_keys, [ckpt_key, meta_key])
                        actual = await self._read_head(thread_id)
                        raise CheckpointConflict(
                            "another writer saved to the thread first",
                            thread_id=thread_id,
                            expected=expected_parent,
                            actual=actual.checkpoint_id if actual else None,
                        ) from None
                    head = await self._read_head(thread_id)
                    continue
                self._infos[meta_key] = ("", CheckpointInfo(cid, thread_id, now, meta))
                return cid
        raise CheckpointConflict(f"gave up after {_SAVE_ATTEMPTS} racing writers", thread_id=thread_id)

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write a checkpoint verbatim (see :meth:`BaseCheckpointer.put_checkpoint`).

        ``.meta.json`` goes first and ``<cid>.json`` second (a checkpoint is listed once its
        ``.json`` exists, so it is never seen without its metadata); ``_latest`` is re-pointed
        only when this checkpoint is the newest, conditionally, re-reading it after a lost race.
        """
        from tulip_nb.memory.backends._s3_io import PreconditionFailed

        ckpt = validate_checkpoint(checkpoint)
        cid, thread_id, created = ckpt.checkpoint_id, ckpt.thread_id, ckpt.created_at
        ckpt_key, meta_key = self._key(thread_id, cid), self._key(thread_id, cid, ".meta.json")
        meta = dict(ckpt.metadata)
        async with self._lock(thread_id):
            await self._run(self._io.put, meta_key, meta_body(cid, thread_id, created, meta), "application/json")
            body = ckpt_body(cid, thread_id, created, ckpt.state.to_json_bytes())
            await self._run(self._io.put, ckpt_key, body, "application/json")
            self._infos[meta_key] = ("", CheckpointInfo(cid, thread_id, created, meta))
            for _ in range(_SAVE_ATTEMPTS):
                head = await self._read_head(thread_id)
                if head is not None and head.checkpoint_id == cid and head.created_at and head.created_at > created:
                    await self._repoint(thread_id)  # the latest was replaced by an older one
                    return
                stale = head is not None and head.checkpoint_id != cid and head.created_at is not None
                if stale and head.created_at >= created:  # type: ignore[union-attr,operator]
                    return  # an older checkpoint: the pointer stays on the newest
                try:
                    await self._write_head(thread_id, cid, created, prev=head)
                except PreconditionFailed:
                    continue
                return
        raise CheckpointConflict(
            f"gave up re-pointing _latest after {_SAVE_ATTEMPTS} racing writers", thread_id=thread_id, checkpoint_id=cid
        )

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        explicit = checkpoint_id is not None
        if checkpoint_id is None:
            head = await self._read_head(thread_id)
            checkpoint_id = head.checkpoint_id if head else None
            if head is not None and not head.stamped:  # tulip's pointer: latest is by created_at
                infos = await self._thread_infos(thread_id)
                if infos and infos[0].checkpoint_id != checkpoint_id:
                    checkpoint_id = infos[0].checkpoint_id
        ckpt = None
        if checkpoint_id:
            ckpt = await self._fetch(thread_id, checkpoint_id)
        if ckpt is None and explicit:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        if ckpt is None:  # no pointer, or a dangling one (lifecycle expiry, a crash): go by created_at
            infos = await self._thread_infos(thread_id)
            for info in infos:
                ckpt = await self._fetch(thread_id, info.checkpoint_id)
                if ckpt is not None:
                    break
        return ckpt

    async def _fetch(self, thread_id: str, cid: str, *, with_meta: bool = True) -> Checkpoint | None:
        key = self._key(thread_id, cid)
        if with_meta:
            stored, info = await asyncio.gather(self._run(self._io.get, key), self._info_of(thread_id, cid))
        else:
            stored, info = await self._run(self._io.get, key), None
        if stored is None:
            return None
        ckpt = decode_checkpoint(stored.body, thread_id, where=f"s3://{self.bucket}/{key}")
        if info is not None:
            ckpt.metadata = dict(info.metadata)
        return ckpt

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        infos = await self._thread_infos(thread_id)
        return infos if limit is None else infos[:limit]

    async def exists(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        if checkpoint_id is not None:  # one HEAD on the checkpoint object, no listing
            return await self._run(self._io.head, self._key(thread_id, checkpoint_id))
        return bool(await self._thread_infos(thread_id))

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        async with self._lock(thread_id):
            if checkpoint_id is None:
                listed = await self._run(lambda: list(self._io.list_keys(self._dir(thread_id), delimiter="/")))
                keys = [o.key for o in listed if (p := parse_key(o.key, self.prefix)) and p.thread_id == thread_id]
                had = any(parse_key(k, self.prefix).kind is KeyKind.CHECKPOINT for k in keys)  # type: ignore[union-attr]
                if keys:
                    await self._run(self._io.delete_keys, keys)
                self._forget(thread_id, keys)
                return had
            key = self._key(thread_id, checkpoint_id)
            if not await self._run(self._io.head, key):
                return False
            meta_key = self._key(thread_id, checkpoint_id, ".meta.json")
            await self._run(self._io.delete_keys, [key, meta_key])
            self._forget(thread_id, [meta_key])
            await self._repoint(thread_id)
            return True

    def _forget(self, thread_id: str, keys: list[str]) -> None:
        self._heads.pop(thread_id, None)
        for key in keys:
            self._infos.pop(key, None)

    async def _repoint(self, thread_id: str) -> None:
        """Point ``_latest`` at the newest remaining ``created_at`` (or remove it)."""
        remaining = await self._thread_infos(thread_id)
        head = await self._read_head(thread_id)
        if not remaining:
            if head is not None:
                await self._run(self._io.delete_keys, [self._dir(thread_id) + LATEST])
            self._heads.pop(thread_id, None)
        elif head is None or head.checkpoint_id != remaining[0].checkpoint_id:
            newest = remaining[0]
            await self._write_head(thread_id, newest.checkpoint_id, newest.created_at, prev=head, expect=False)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)
            self._io.close()

    # -- capabilities (the scans are derived in InTreeCheckpointer) ---------------------------
    async def _checkpoint_info(self, thread_id: str, checkpoint_id: str | None) -> CheckpointInfo | None:
        if checkpoint_id is None:  # the pointer first: no listing for a thread we wrote
            head = await self._read_head(thread_id)
            checkpoint_id = head.checkpoint_id if head else None
            if not checkpoint_id:
                infos = await self._thread_infos(thread_id)
                return infos[0] if infos else None
        return await self._info_of(thread_id, checkpoint_id)

    async def _thread_ids(self) -> list[str]:
        """Thread ids from the key listing alone (no object is read)."""
        listed = await self._run(lambda: list(self._io.list_keys(self.prefix)))
        ids = set()
        for obj in listed:
            parsed = parse_key(obj.key, self.prefix)
            if parsed and parsed.kind is KeyKind.CHECKPOINT:
                ids.add(parsed.thread_id)
        return list(ids)

    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        return await self._all_infos()

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        source = await self._thread_infos(source_thread_id)
        if not source:
            raise CheckpointNotFound("source thread has no checkpoints", thread_id=source_thread_id)
        async with self._lock(dest_thread_id):
            if await self._thread_infos(dest_thread_id):
                raise CheckpointConflict(
                    "destination thread already has checkpoints; delete it first", thread_id=dest_thread_id
                )

            async def one(info: CheckpointInfo) -> None:
                cid = info.checkpoint_id
                stored = await self._run(self._io.get, self._key(source_thread_id, cid))
                if stored is None:
                    return  # deleted while copying
                where = f"s3://{self.bucket}/{self._key(source_thread_id, cid)}"
                meta = {**info.metadata, "copied_from": {"thread_id": source_thread_id, "checkpoint_id": cid}}
                body = copy_body(stored.body, dest_thread_id, where=where)
                await asyncio.gather(
                    self._run(self._io.put, self._key(dest_thread_id, cid), body, "application/json"),
                    self._run(
                        self._io.put,
                        self._key(dest_thread_id, cid, ".meta.json"),
                        meta_body(cid, dest_thread_id, info.created_at, meta),
                        "application/json",
                    ),
                )

            await asyncio.gather(*(one(i) for i in source))
            newest = source[0]
            from tulip_nb.memory.backends._s3_io import PreconditionFailed

            try:
                await self._write_head(dest_thread_id, newest.checkpoint_id, newest.created_at, prev=None)
            except PreconditionFailed:
                raise CheckpointConflict(
                    "another writer created the destination thread while copying", thread_id=dest_thread_id
                ) from None
        return True

    async def vacuum(self, older_than_days: float = 30) -> int:
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        removed = 0
        for tid, infos in (await self._all_infos()).items():
            old = [i for i in infos if i.created_at < cutoff]
            if not old:
                continue
            await self._relink_survivors(tid, infos, {i.checkpoint_id for i in old})  # before the deletes
            async with self._lock(tid):
                keys = [self._key(tid, i.checkpoint_id, s) for i in old for s in (".json", ".meta.json")]
                await self._run(self._io.delete_keys, keys)
                self._forget(tid, keys)
                removed += len(old)
                await self._repoint(tid)
        return removed

    # -- retention ----------------------------------------------------------------------------
    async def configure_lifecycle(
        self,
        days_until_archive: int | None = None,
        days_until_delete: int | None = None,
        *,
        storage_class: str = "GLACIER",
    ) -> dict[str, Any] | None:
        """Write the bucket lifecycle rule that archives and expires this prefix's checkpoints.

        S3 then does the clean-up itself: objects move to ``storage_class`` after
        ``days_until_archive`` days and are deleted after ``days_until_delete`` days. Other rules
        in the bucket are kept; calling again replaces this prefix's rule, and calling with both
        ``None`` removes it. Returns the rule written (or None when removed).

        A thread whose checkpoints all expired loads as ``None``; one whose newest checkpoint
        expired while ``_latest`` survived falls back to the newest remaining ``created_at``.
        """
        rule_id = lifecycle_id(self)
        rule = lifecycle_rule(rule_id, self.prefix, days_until_archive, days_until_delete, storage_class)
        rules = [r for r in await self._run(self._io.get_lifecycle_rules) if r.get("ID") != rule_id]
        if rule is not None:
            rules.append(rule)
        await self._run(self._io.put_lifecycle_rules, rules)
        return rule


def lifecycle_id(backend: S3Backend) -> str:
    """The ID of the lifecycle rule :meth:`S3Backend.configure_lifecycle` owns."""
    return f"tulip_nb:{backend.prefix}"[:255]


def s3_checkpointer(bucket: str, prefix: str = "tulip/checkpoints/", **kwargs: Any) -> S3Backend:
    """An :class:`S3Backend`, returned unchanged: it is already a native checkpointer."""
    return S3Backend(bucket, prefix, **kwargs)
