"""AuditTrail: an append-only, hash-chained record of what an agent decided.

Checkpoints are the agent's working memory: mutable JSON that anything with write access can edit.
An audit trail is the opposite: every decision (a tool call with its arguments and result, an
interrupt and the human's answer, a checkpoint saved: its id, kind and iteration) is appended as one
entry whose ``hash`` covers the entry and the previous entry's hash. Editing, removing or
re-ordering any entry breaks the chain at that entry, and :meth:`AuditTrail.verify` says which.
It is verified on its own, independently of the checkpoints.

**An anchor for the threads.** Built with ``checkpointer=`` (the agent's), each ``checkpoint``
entry also carries the save's ``tulip_nb_hash`` and ``tulip_nb_seq``, read back from the store
right after the save. The trail then knows every save of a thread, outside the thread's store:
``await trail.anchor(thread_id)`` (an :class:`~tulip_nb.memory.integrity.Anchor`) passed to
:func:`~tulip_nb.memory.integrity.verify_thread` as ``expect=`` reports a rollback of the newest
checkpoints, and a checkpoint replaced under its id, even when the thread was rewritten
consistently (hashes recomputed): the hashes the trail holds are no longer there. From a shell:
``tulip-nb verify URL THREAD --expect-from-audit audit.jsonl``. Saves the agent does not make
(a lab branch, a script) can be recorded with :meth:`AuditTrail.record_save`. Without
``checkpointer=`` the entries name each save (id, kind, iteration) but carry no hash, and
:meth:`AuditTrail.anchor` refuses.

Attach it to an agent as a hook; it writes JSON lines to a file, or entries to any
:class:`~tulip_nb.memory.store.BaseStore`::

    audit = AuditTrail("audit/ticket-8912.jsonl", checkpointer=cp)
    agent = Agent(model, tools=[refund], checkpointer=cp, hooks=[audit])
    await agent.run("Refund ord-4821?", thread_id="ticket-8912")
    report = await audit.verify()          # AuditVerification(ok=True, entries=4, ...)
    check = await verify_thread(cp, "ticket-8912", expect=await audit.anchor("ticket-8912"))

One entry (one JSON line)::

    {"seq": 3, "at": "2026-...+00:00", "kind": "tool_call", "thread_id": "ticket-8912",
     "data": {"tool": "refund", "arguments": {...}, "result": "...", "error": null, ...},
     "prev": "<hash of entry 2>", "hash": "<sha256 of this entry without 'hash', keys sorted>"}

and a save (``checkpoint_hash`` / ``checkpoint_seq``: the save's ``tulip_nb_hash`` and
``tulip_nb_seq``, with ``checkpointer=``; null for an unsigned save)::

    {"seq": 4, "kind": "checkpoint", "thread_id": "ticket-8912",
     "data": {"checkpoint_id": "9c1…", "kind": "final", "iteration": 2,
              "checkpoint_hash": "5be…", "checkpoint_seq": 3}, ...}

File trails are safe across processes (appends hold an ``flock`` and re-read the tail when another
process wrote). A crash can tear the last line; the next append cuts that torn tail off, and
:meth:`verify` reports it until then. Store trails assume one writer per namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tulip_nb.core import iso_offset, utcnow
from tulip_nb.core.errors import BackendUnavailable, CheckpointNotFound, UserError
from tulip_nb.core.keys import HASH_KEY, SEQ_KEY
from tulip_nb.memory.integrity import Anchor

__all__ = ["AuditEntry", "AuditTrail", "AuditVerification"]

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (anything else becomes its ``str``)."""
    return orjson.loads(orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS))


def entry_hash(entry: dict[str, Any]) -> str:
    """sha256 of an entry's canonical JSON without its ``hash`` key."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return hashlib.sha256(orjson.dumps(body, option=_OPTS)).hexdigest()


@dataclass(frozen=True)
class AuditEntry:
    """One decision as recorded."""

    seq: int
    at: str
    kind: str
    thread_id: str | None
    data: dict[str, Any]
    prev: str
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "kind": self.kind,
            "thread_id": self.thread_id,
            "data": self.data,
            "prev": self.prev,
            "hash": self.hash,
        }


@dataclass(frozen=True)
class AuditVerification:
    """The result of :meth:`AuditTrail.verify`: ``first_bad`` is the seq of the first broken entry."""

    ok: bool
    entries: int
    first_bad: int | None = None
    reason: str = ""

    def __str__(self) -> str:
        if self.ok:
            return f"audit trail ok: {self.entries} entries"
        return f"audit trail broken at entry {self.first_bad}: {self.reason} ({self.entries} entries read)"


class AuditTrail:
    """An append-only, hash-chained decision log; see the module docstring.

    Args:
        path: a JSON-lines file (created with its directory).
        store: or a :class:`~tulip_nb.memory.store.BaseStore`; entries go under ``namespace``,
            keyed by their zero-padded seq.
        fsync: fsync each file append (default True: an entry acknowledged is on disk).
        checkpointer: the store the agent saves to: each ``checkpoint`` entry then records the
            save's ``tulip_nb_hash`` and ``tulip_nb_seq``, so :meth:`anchor` can anchor a thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        store: Any = None,
        namespace: tuple[str, ...] = ("tulip_nb_audit",),
        fsync: bool = True,
        checkpointer: Any = None,
    ) -> None:
        if (path is None) == (store is None):
            raise UserError("AuditTrail needs exactly one of path= or store=")
        self.path = Path(path) if path is not None else None
        self.store = store
        self.namespace = namespace
        self.fsync = fsync
        self.checkpointer = checkpointer
        self._lock = threading.Lock()
        self._alock: asyncio.Lock | None = None
        self._tail: tuple[int, str, int] | None = None  # (last seq, last hash, file size after it)

    def __repr__(self) -> str:
        where = f"path={str(self.path)!r}" if self.path is not None else f"store={type(self.store).__name__}"
        return f"AuditTrail({where})"

    # -- agent hooks --------------------------------------------------------------------------
    async def on_tool_call(self, event: Any) -> None:
        call = event.call
        await self.record(
            "tool_call",
            event.thread_id,
            {
                "iteration": event.iteration,
                "tool": call.name,
                "tool_call_id": call.id,
                "arguments": call.arguments,
                "result": event.result,
                "error": event.error,
                "cache_hit": event.cache_hit,
            },
        )

    async def on_interrupt(self, event: Any) -> None:
        await self.record(
            "interrupt",
            event.thread_id,
            {
                "iteration": event.iteration,
                "question": event.question,
                "tool": event.tool_name,
                "tool_call_id": event.tool_call_id,
                "arguments": event.arguments,
                "payload": event.payload,
            },
        )

    async def on_interrupt_answered(self, event: Any) -> None:
        await self.record(
            "interrupt_answer",
            event.thread_id,
            {
                "iteration": event.iteration,
                "question": event.question,
                "tool": event.tool_name,
                "tool_call_id": event.tool_call_id,
                "response": event.response,
            },
        )

    async def on_checkpoint_saved(self, event: Any) -> None:
        data = {"checkpoint_id": event.checkpoint_id, "kind": event.kind, "iteration": event.iteration}
        if self.checkpointer is not None:
            await self.record_save(event.thread_id, event.checkpoint_id, self.checkpointer, data=data)
        else:
            await self.record("checkpoint", event.thread_id, data)

    async def record_save(
        self, thread_id: str, checkpoint_id: str, checkpointer: Any = None, *, data: dict[str, Any] | None = None
    ) -> AuditEntry:
        """Append a ``checkpoint`` entry for one save, with its ``tulip_nb_hash`` and ``tulip_nb_seq``.

        Read back from ``checkpointer`` (default: the one the trail was built with); ``data``
        adds fields (the hook passes the kind and iteration). :class:`CheckpointNotFound` when the
        save is not in the store.
        """
        cp = checkpointer if checkpointer is not None else self.checkpointer
        if cp is None:
            raise UserError("record_save needs a checkpointer (AuditTrail(..., checkpointer=cp) or the argument)")
        meta = await _saved_metadata(cp, thread_id, checkpoint_id)
        digest, seq = meta.get(HASH_KEY), meta.get(SEQ_KEY)
        entry = {"checkpoint_id": checkpoint_id, **(data or {})}
        entry["checkpoint_hash"] = digest if isinstance(digest, str) else None
        entry["checkpoint_seq"] = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        return await self.record("checkpoint", thread_id, entry)

    # -- writing ------------------------------------------------------------------------------
    async def record(self, kind: str, thread_id: str | None, data: dict[str, Any]) -> AuditEntry:
        """Append one entry and return it (the hook methods call this)."""
        if not isinstance(kind, str) or not kind:
            raise UserError(f"audit entry kind must be a non-empty str, got {kind!r}")
        payload = _jsonable(data)
        if self.path is not None:
            return await asyncio.to_thread(self._append_file, kind, thread_id, payload)
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:
            return await self._append_store(kind, thread_id, payload)

    def _entry(self, seq: int, prev: str, kind: str, thread_id: str | None, data: Any) -> dict[str, Any]:
        entry = {"seq": seq, "at": iso_offset(utcnow()), "kind": kind, "thread_id": thread_id, "data": data}
        entry["prev"] = prev
        entry["hash"] = entry_hash(entry)
        return entry

    @contextlib.contextmanager
    def _file_locked(self) -> Iterator[int]:
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            raise BackendUnavailable(
                f"audit trail file cannot be opened: {e.strerror or e}", path=str(self.path)
            ) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def _append_file(self, kind: str, thread_id: str | None, data: Any) -> AuditEntry:
        with self._lock, self._file_locked() as fd:
            try:
                size = os.fstat(fd).st_size
                tail = self._tail
                if tail is None or tail[2] != size:  # first append, or another process wrote
                    tail = self._read_tail(fd, size)
                    size = tail[2]
                entry = self._entry(tail[0] + 1, tail[1], kind, thread_id, data)
                line = orjson.dumps(entry, option=orjson.OPT_NON_STR_KEYS) + b"\n"
                written = os.write(fd, line)
                if written != len(line):
                    os.ftruncate(fd, size)
                    raise OSError(28, "short write")
                if self.fsync:
                    os.fsync(fd)
            except OSError as e:
                self._tail = None
                raise BackendUnavailable(f"audit trail append failed: {e.strerror or e}", path=str(self.path)) from e
            self._tail = (entry["seq"], entry["hash"], size + len(line))
            return AuditEntry(**entry)

    def _read_tail(self, fd: int, size: int) -> tuple[int, str, int]:
        """(seq, hash, size) of the last complete line; cuts off a torn last line (a crash)."""
        if size == 0:
            return -1, "", 0
        chunk = 1 << 16
        start = max(0, size - chunk)
        data = os.pread(fd, size - start, start)
        while start > 0 and data.count(b"\n") < 2:
            start = max(0, start - chunk)
            data = os.pread(fd, size - start, start)
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n")
            keep = start + cut + 1 if cut >= 0 else start
            os.ftruncate(fd, keep)
            data, size = data[: cut + 1] if cut >= 0 else b"", keep
            if size == 0:
                return -1, "", 0
        last = data[:-1].rsplit(b"\n", 1)[-1]
        try:
            obj = orjson.loads(last)
            return int(obj["seq"]), str(obj["hash"]), size
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise BackendUnavailable("audit trail's last entry is unreadable; run verify()", path=str(self.path)) from e

    async def _append_store(self, kind: str, thread_id: str | None, data: Any) -> AuditEntry:
        if self._tail is None:
            head = await self.store.get(self.namespace, "head")
            self._tail = (int(head["seq"]), str(head["hash"]), 0) if isinstance(head, dict) else (-1, "", 0)
        seq, prev, _ = self._tail
        entry = self._entry(seq + 1, prev, kind, thread_id, data)
        await self.store.put(self.namespace, f"{entry['seq']:012d}", entry)
        await self.store.put(self.namespace, "head", {"seq": entry["seq"], "hash": entry["hash"]})
        self._tail = (entry["seq"], entry["hash"], 0)
        return AuditEntry(**entry)

    # -- reading ------------------------------------------------------------------------------
    async def raw_entries(self) -> list[Any]:
        """Every stored entry as parsed (a torn or unparsable line becomes its bytes)."""
        if self.path is not None:
            return await asyncio.to_thread(self._read_file)
        keys = sorted(k for k in await self.store.list_keys(self.namespace, limit=None) if k != "head")
        values = [await self.store.get(self.namespace, k) for k in keys]
        return values

    def _read_file(self) -> list[Any]:
        assert self.path is not None
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise BackendUnavailable(f"audit trail cannot be read: {e.strerror or e}", path=str(self.path)) from e
        out: list[Any] = []
        for line in data.split(b"\n"):
            if not line:
                continue
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                out.append(line)
        if data and not data.endswith(b"\n") and out and not isinstance(out[-1], bytes):
            out[-1] = data.rsplit(b"\n", 1)[-1]  # a last line without its newline is torn
        return out

    async def entries(self) -> list[AuditEntry]:
        """The entries, oldest first (raises :class:`UserError` if one cannot be parsed: verify)."""
        out = []
        for raw in await self.raw_entries():
            try:
                out.append(AuditEntry(**raw))
            except TypeError as e:
                raise UserError("audit trail has an unparsable entry; run verify()", path=str(self.path)) from e
        return out

    async def anchor(self, thread_id: str) -> Anchor:
        """What the trail knows of ``thread_id``'s saves, as an anchor for ``verify_thread(expect=)``.

        The newest recorded save (highest ``checkpoint_seq``, the later entry on a tie) gives the
        hash and seq; every recorded save its id's hash. The trail is verified first: a broken
        trail anchors nothing (:class:`UserError`, naming the entry), and so does a trail with no
        hashed save of the thread (built without ``checkpointer=``).
        """
        report = await self.verify()
        if not report.ok:
            raise UserError(
                f"cannot anchor {thread_id!r} on a broken audit trail: {report}",
                path=str(self.path) if self.path else None,
            )
        saves: dict[str, str] = {}
        newest: tuple[int, str, str] | None = None  # (seq, checkpoint id, hash)
        for entry in await self.entries():
            data = entry.data
            digest, cid, seq = data.get("checkpoint_hash"), data.get("checkpoint_id"), data.get("checkpoint_seq")
            if entry.kind != "checkpoint" or entry.thread_id != thread_id:
                continue
            if not isinstance(digest, str) or not isinstance(cid, str):
                continue
            saves[cid] = digest
            n = seq if isinstance(seq, int) and not isinstance(seq, bool) else 0
            if newest is None or n >= newest[0]:
                newest = (n, cid, digest)
        if newest is None:
            raise UserError(
                f"the audit trail records no hashed save of {thread_id!r} (build it with checkpointer=)",
                thread_id=thread_id,
                path=str(self.path) if self.path else None,
            )
        return Anchor(thread_id, newest[1], newest[2], newest[0] or None, saves)

    async def verify(self) -> AuditVerification:
        """Recompute the chain from the first entry; report the first entry that does not fit."""
        raws = await self.raw_entries()
        prev = ""
        for i, raw in enumerate(raws):
            if not isinstance(raw, dict):
                return AuditVerification(False, len(raws), i, "not a JSON object (torn or edited line)")
            if raw.get("seq") != i:
                return AuditVerification(False, len(raws), i, f"seq is {raw.get('seq')!r}, expected {i}")
            if raw.get("prev") != prev:
                return AuditVerification(False, len(raws), i, "prev does not match the previous entry's hash")
            if entry_hash(raw) != raw.get("hash"):
                return AuditVerification(False, len(raws), i, "content does not match its hash")
            prev = str(raw["hash"])
        if self.store is not None and raws:
            head = await self.store.get(self.namespace, "head")
            if not isinstance(head, dict) or head.get("hash") != prev:
                return AuditVerification(False, len(raws), len(raws) - 1, "head does not name the last entry")
        return AuditVerification(True, len(raws))


async def _saved_metadata(cp: Any, thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    """The save metadata of one checkpoint: the listing's head when it is that one, else its record."""
    infos = await cp.list_checkpoint_infos(thread_id, 1)
    if infos and infos[0].checkpoint_id == checkpoint_id and HASH_KEY in infos[0].metadata:
        return dict(infos[0].metadata)
    ckpt = await cp.load_checkpoint(thread_id, checkpoint_id)
    if ckpt is None:
        raise CheckpointNotFound(
            "the saved checkpoint is not in the store", thread_id=thread_id, checkpoint_id=checkpoint_id
        )
    return dict(ckpt.metadata)
