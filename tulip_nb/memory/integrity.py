"""Tamper-evident threads: verify that a thread is exactly what was saved.

Every tulip_nb save signs the checkpoint: its save metadata carries ``tulip_nb_hash``, a sha256 over
the checkpoint's canonical content (the whole state and the caller's save metadata) and over its
parent's hash, ``tulip_nb_parent_hash``, so the hashes form a chain along the thread's lineage.
Editing one byte of a checkpoint's messages, counters or metadata makes its hash disagree with its
content; deleting, re-ordering or swapping checkpoints breaks the chain at the next one.
(What is hashed, and why ids and timestamps are not: :mod:`tulip_nb.memory._signing`.)

:func:`verify_thread` recomputes every hash from scratch and reports, checkpoint by checkpoint
(oldest first), one of:

==================  ===========================================================================
``ok``              the content matches its hash and the hash chains to the parent's
``mismatch``        the content no longer matches the stored hash (edited after the save)
``broken_chain``    the recorded parent hash is not the parent's hash (parent edited, removed,
                    replaced), or the parent is signed and the link was not recorded
``unsigned``        no hash at all: written by tulip, by tulip_nb before signing existed, or by a
                    checkpointer built with ``sign=False``
``unreadable``      the checkpoint cannot be loaded
==================  ===========================================================================

Unsigned checkpoints are not failures (tulip writes them); with ``strict=True`` an unsigned
checkpoint that follows signed ones is one (its hash may have been stripped). A checkpoint whose
parent a prune or vacuum removed carries a record of the cut (``tulip_nb_pruned``,
:mod:`tulip_nb.memory.retention`) and is checked against its new parent's hash instead.

    >>> import asyncio
    >>> from tulip_nb.core import AgentState, Message
    >>> from tulip_nb.memory.backends import MemoryCheckpointer
    >>> cp = MemoryCheckpointer()
    >>> _ = asyncio.run(cp.save(AgentState(messages=[Message.user("Refund ord-4821?")]), "t"))
    >>> report = asyncio.run(verify_thread(cp, "t"))
    >>> report.ok, report.counts()
    (True, {'ok': 1})

The hashes protect against edits by anything that does not recompute them (a bug, a tool, a hand
edit, a partial restore); someone rewriting a whole thread can recompute the chain, so anchor the
latest hash elsewhere (an :class:`~tulip_nb.memory.audit.AuditTrail` entry, say) when that matters.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tulip_nb.core.keys import PRUNED_KEY
from tulip_nb.core.state import MessageBlobCache
from tulip_nb.memory._signing import (
    ALG,
    ALG_KEY,
    HASH_KEY,
    PARENT_HASH_KEY,
    checkpoint_hash,
)
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, CheckpointInfo

__all__ = [
    "ALG",
    "ALG_KEY",
    "HASH_KEY",
    "PARENT_HASH_KEY",
    "CheckpointVerdict",
    "ThreadVerification",
    "checkpoint_hash",
    "recompute_hash",
    "unsigned_metadata",
    "verify_thread",
]

Status = Literal["ok", "mismatch", "broken_chain", "unsigned", "unreadable"]
FAILURES: frozenset[str] = frozenset(("mismatch", "broken_chain", "unreadable"))


@dataclass(frozen=True)
class CheckpointVerdict:
    """What :func:`verify_thread` found for one checkpoint."""

    checkpoint_id: str
    status: Status
    detail: str = ""
    created_at: datetime | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILURES

    def __str__(self) -> str:
        return f"{self.checkpoint_id}: {self.status}{': ' + self.detail if self.detail else ''}"


@dataclass(frozen=True)
class ThreadVerification:
    """The report of :func:`verify_thread`: one verdict per checkpoint, oldest first."""

    thread_id: str
    verdicts: list[CheckpointVerdict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No checkpoint failed (unsigned ones do not count as failures)."""
        return self.first_failure is None

    @property
    def first_failure(self) -> CheckpointVerdict | None:
        """The oldest failing checkpoint: where the thread stops being trustworthy."""
        return next((v for v in self.verdicts if v.failed), None)

    @property
    def failures(self) -> list[CheckpointVerdict]:
        return [v for v in self.verdicts if v.failed]

    def counts(self) -> dict[str, int]:
        """How many checkpoints got each status."""
        out: dict[str, int] = {}
        for v in self.verdicts:
            out[v.status] = out.get(v.status, 0) + 1
        return out

    def __str__(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts().items()))
        head = f"{self.thread_id}: {'ok' if self.ok else 'FAILED'} ({counts or 'no checkpoints'})"
        first = self.first_failure
        return head if first is None else f"{head}; first failure {first}"


def unsigned_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The save metadata without the three hash keys (what the caller and the lineage put there).

    >>> unsigned_metadata({"k": 1, "tulip_nb_hash": "ab", "tulip_nb_parent_hash": None, "tulip_nb_hash_alg": ALG})
    {'k': 1}
    """
    return {k: v for k, v in (metadata or {}).items() if k not in (HASH_KEY, PARENT_HASH_KEY, ALG_KEY)}


def recompute_hash(ckpt: Checkpoint | tuple[Any, Mapping[str, Any]]) -> str | None:
    """The hash a signed checkpoint should carry, from its content and recorded parent hash.

    None when the checkpoint is unsigned (no ``tulip_nb_hash``).
    """
    state, meta = (ckpt.state, ckpt.metadata) if isinstance(ckpt, Checkpoint) else ckpt
    if not isinstance(meta.get(HASH_KEY), str):
        return None
    parent_hash = meta.get(PARENT_HASH_KEY)
    return checkpoint_hash(state, meta, parent_hash if isinstance(parent_hash, str) else None)


async def _parent_metadata(
    cp: BaseCheckpointer, info: CheckpointInfo, meta: Mapping[str, Any], local: dict[str, Mapping[str, Any]]
) -> tuple[Mapping[str, Any] | None, bool]:
    """(the parent's save metadata or None if it is gone, whether it lives in another thread)."""
    parent = meta.get("parent_checkpoint_id")
    if not isinstance(parent, str):
        return None, False
    if parent in local:
        return local[parent], False
    source = meta.get("forked_from")
    if isinstance(source, str) and source != info.thread_id:
        try:
            other = await cp.load_checkpoint(source, parent)
        except Exception:  # a missing or unreadable source is reported as such
            return None, True
        return (other.metadata if other is not None else None), True
    return None, False


async def verify_thread(
    checkpointer: BaseCheckpointer, thread_id: str, *, limit: int = 1_000_000, strict: bool = False
) -> ThreadVerification:
    """Recompute every checkpoint's hash and check the chain; see the module docstring.

    Loads each checkpoint of ``thread_id`` (at most ``limit``, the newest) once; when the thread
    has more, the oldest one checked is not linked to its (unchecked) parent. Backends that keep
    the save metadata twice (a listing index and the record) must agree on the hash as well.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unreadable files are reported below, not warned about
        infos = await checkpointer.list_checkpoint_infos(thread_id, limit=limit)
    infos = sorted(infos, key=lambda i: (i.created_at, i.checkpoint_id))  # oldest first
    # Pass 1 loads each checkpoint once and keeps only its save metadata and content verdict, so
    # memory and time stay linear in the thread's length (no state is held after its hash).
    content: dict[str, CheckpointVerdict | None] = {}
    metas: dict[str, Mapping[str, Any]] = {}
    digests = MessageBlobCache(capacity=1)  # consecutive checkpoints extend each other: hash the new messages only
    for info in infos:
        cid = info.checkpoint_id
        try:
            ckpt = await checkpointer.load_checkpoint(thread_id, cid)
        except Exception as e:  # any failure to read is the verdict
            content[cid] = CheckpointVerdict(cid, "unreadable", f"{type(e).__name__}: {e}", info.created_at)
            continue
        if ckpt is None:
            content[cid] = CheckpointVerdict(cid, "unreadable", "listed but missing", info.created_at)
            continue
        metas[cid] = ckpt.metadata or info.metadata
        content[cid] = _content_verdict(info, ckpt, metas[cid], digests.digest(thread_id, ckpt.state.messages))
    # Pass 2 checks the links, from the metadata alone.
    verdicts: list[CheckpointVerdict] = []
    complete = len(infos) < limit
    seen_signed = False
    for info in infos:
        cid = info.checkpoint_id
        verdict = content[cid]
        if verdict is None or verdict.status == "unsigned":
            verdict = await _link_verdict(checkpointer, info, metas, seen_signed=seen_signed, strict=strict)
        if not complete and verdict.status == "broken_chain" and "is not in the thread" in verdict.detail:
            verdict = CheckpointVerdict(cid, "ok", "parent older than the limit, not checked", verdict.created_at)
        verdicts.append(verdict)
        if cid in metas:
            seen_signed = seen_signed or isinstance(metas[cid].get(HASH_KEY), str)
    return ThreadVerification(thread_id, verdicts)


def _pruned_verdict(
    info: CheckpointInfo,
    pruned: Any,
    recorded: Any,
    parent_id: Any,
    parent_meta: Mapping[str, Any] | None,
) -> CheckpointVerdict:
    """A checkpoint whose parent a prune or vacuum removed (``tulip_nb_pruned``, see core.keys).

    The record must match the link this checkpoint's hash binds (``tulip_nb_parent_hash``), and
    its new parent must be the one the record names by hash (or none, when nothing older survived).
    """
    cid, when = info.checkpoint_id, info.created_at
    if not isinstance(pruned, Mapping) or pruned.get("parent_hash") != recorded:
        return CheckpointVerdict(cid, "broken_chain", "the prune record does not match the recorded parent hash", when)
    dropped = pruned.get("dropped")
    if parent_id is None:
        if pruned.get("base_hash") is None:
            return CheckpointVerdict(cid, "ok", f"{dropped} older checkpoints pruned", when)
        return CheckpointVerdict(cid, "broken_chain", "the prune record names a parent that is gone", when)
    if parent_meta is None:
        return CheckpointVerdict(cid, "broken_chain", f"parent {parent_id} (after a prune) is not in the thread", when)
    if parent_meta.get(HASH_KEY) != pruned.get("base_hash"):
        return CheckpointVerdict(cid, "broken_chain", f"parent {parent_id} is not the one the prune recorded", when)
    return CheckpointVerdict(cid, "ok", f"{dropped} checkpoints pruned before it", when)


def _content_verdict(
    info: CheckpointInfo, ckpt: Checkpoint, meta: Mapping[str, Any], messages_sha: bytes
) -> CheckpointVerdict | None:
    """The verdict on the checkpoint's own content, or None when it matches its hash.

    ``messages_sha`` is :func:`~tulip_nb.core.state.messages_digest` of its messages (computed
    incrementally by the caller; the same value, from scratch, as :func:`recompute_hash` uses).
    """
    cid, when = info.checkpoint_id, info.created_at
    stored = meta.get(HASH_KEY)
    if stored is None:
        return CheckpointVerdict(cid, "unsigned", "", when)
    if not isinstance(stored, str) or meta.get(ALG_KEY) != ALG:
        return CheckpointVerdict(cid, "mismatch", f"unknown hash {ALG_KEY}={meta.get(ALG_KEY)!r}", when)
    listed = info.metadata.get(HASH_KEY)
    if listed is not None and listed != stored:
        return CheckpointVerdict(cid, "mismatch", "the listing's hash differs from the record's", when)
    parent_hash = meta.get(PARENT_HASH_KEY)
    actual = checkpoint_hash(
        ckpt.state, meta, parent_hash if isinstance(parent_hash, str) else None, messages_sha=messages_sha
    )
    if actual != stored:
        return CheckpointVerdict(cid, "mismatch", f"content hashes to {actual}, stored {stored}", when)
    return None


async def _link_verdict(
    cp: BaseCheckpointer,
    info: CheckpointInfo,
    metas: dict[str, Mapping[str, Any]],
    *,
    seen_signed: bool,
    strict: bool,
) -> CheckpointVerdict:
    """The verdict on the link to the parent of a checkpoint whose content verified (or is unsigned)."""
    cid, when = info.checkpoint_id, info.created_at
    meta = metas[cid]
    if meta.get(HASH_KEY) is None:
        if strict and seen_signed:
            return CheckpointVerdict(cid, "broken_chain", "unsigned after signed checkpoints", when)
        return CheckpointVerdict(cid, "unsigned", "", when)
    recorded = meta.get(PARENT_HASH_KEY)
    parent_id = meta.get("parent_checkpoint_id")
    parent_meta, foreign = await _parent_metadata(cp, info, meta, metas)
    pruned = meta.get(PRUNED_KEY)
    if pruned is not None:
        return _pruned_verdict(info, pruned, recorded, parent_id, parent_meta)
    if parent_meta is None:
        if isinstance(recorded, str):
            where = "in its source thread" if foreign else "in the thread"
            return CheckpointVerdict(cid, "broken_chain", f"parent {parent_id} is not {where}", when)
        return CheckpointVerdict(cid, "ok", "", when)
    parent_hash = parent_meta.get(HASH_KEY)
    if recorded is None and parent_hash is not None:
        if foreign:  # a branch saved without the link (lab branches): the source verifies on its own
            return CheckpointVerdict(cid, "ok", "fork link not hashed", when)
        return CheckpointVerdict(cid, "broken_chain", f"parent {parent_id} is signed but the link is not", when)
    if recorded != parent_hash:
        return CheckpointVerdict(
            cid, "broken_chain", f"parent {parent_id} hash is {parent_hash}, recorded {recorded}", when
        )
    return CheckpointVerdict(cid, "ok", "", when)
