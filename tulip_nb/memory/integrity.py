"""Tamper-evident threads: verify that a thread is exactly what was saved, and what that cannot show.

Every tulip_nb save signs the checkpoint: its save metadata carries ``tulip_nb_hash``, a sha256 over
the checkpoint's canonical content (the whole state and the caller's save metadata) and over its
parent's hash, ``tulip_nb_parent_hash``, so the hashes form a chain along the thread's lineage.
Since ``sha256-chain/2`` the hashed metadata also holds ``tulip_nb_created_at`` (the checkpoint's
``created_at``) and ``tulip_nb_seq`` (the thread's running count of saves: the latest's + 1).
(What is hashed, and why ids are not: :mod:`tulip_nb.memory._signing`.) Checkpoints signed with
``sha256-chain/1`` verify under ``/1`` rules: their ``created_at`` and save order are not bound.

:func:`verify_thread` recomputes every hash from scratch and reports, checkpoint by checkpoint
(oldest first), one of:

==================  ===========================================================================
``ok``              the content matches its hash and the hash chains to the parent's
``mismatch``        the content no longer matches the stored hash (edited after the save), or
                    ``created_at`` differs from the signed ``tulip_nb_created_at``, or the hash
                    keys were removed and the remaining tulip_nb marks contradict the content, or
                    (with an :class:`Anchor` from ``expect=``) the checkpoint no longer has the
                    hash the anchor recorded for its id (replaced, even if re-signed)
``broken_chain``    the recorded parent hash is not the parent's hash (parent edited, removed,
                    replaced), or the parent is signed and the link was not recorded, or the
                    save order (``tulip_nb_seq``) does not fit: two identical checkpoints claim
                    one seq (a copy), or it skips saves with no prune record in the thread
``origin_gone``     a fork's first checkpoint whose parent is gone from the ``forked_from``
                    thread (the source deleted or vacuumed): its content verified, and its hash
                    binds ``forked_from`` and the parent's hash, so the chain starts at that
                    recorded origin. Not a failure
``unsigned``        no hash at all: written by tulip, by tulip_nb before signing existed, or by a
                    checkpointer built with ``sign=False`` (or its hash keys were removed and
                    nothing left contradicts its content: the detail says "hash keys removed")
``unreadable``      the checkpoint cannot be loaded
==================  ===========================================================================

and, with ``expect=`` (an anchor recorded elsewhere: the latest ``tulip_nb_hash``, the latest
``tulip_nb_seq``, or an :class:`Anchor`), :attr:`ThreadVerification.anchor`: ``ok``, or
``rolled_back`` when the thread no longer reaches the anchor. :attr:`ThreadVerification.head_anchor`
is the anchor to keep after a good verify; an :class:`~tulip_nb.memory.audit.AuditTrail` built
with ``checkpointer=`` records every save's hash and seq, and ``await trail.anchor(thread_id)`` is
an anchor too.

**Detected:**

- an edit of a signed checkpoint's messages, state, save metadata or (``/2``) ``created_at``;
- a checkpoint removed from the middle of the chain (its child's parent hash), re-ordered or
  swapped checkpoints, and (``/2``) a removed checkpoint nothing chains to (a gap in
  ``tulip_nb_seq``, e.g. another branch's leaf);
- (``/2``) a checkpoint copied over another, e.g. an older one over the newest: with its own
  ``created_at`` two checkpoints claim one seq (the copy, the one no checkpoint chains to, is
  ``broken_chain``); moved to the replaced one's ``created_at`` it is a ``mismatch``;
- an edited checkpoint whose hash keys were stripped, in a thread with signed checkpoints, even
  with ``strict=False``: as the parent of a signed checkpoint its child is ``broken_chain``; as the
  newest it is a ``mismatch`` when its ``tulip_nb_messages`` mark no longer matches its messages or
  its ``tulip_nb_created_at`` its ``created_at``;
- a fork's own first checkpoints removed: the oldest left names a parent that is not in the
  thread and (``/2``) starts its seq above 1 (``broken_chain``), whether the source exists or not;
- with an anchor (``expect=``): a rollback (the newest checkpoints deleted, or the whole thread)
  below it (``rolled_back``); with an :class:`Anchor` that lists saves (``head_anchor``, an audit
  trail's), also a checkpoint replaced under an anchored id (``mismatch``) and the newest
  replaced by a consistently re-signed one (its anchored hash is gone: ``rolled_back``), even by
  someone who recomputes the hashes.

**Not detected:**

- a rollback of the newest checkpoints without an anchor: what remains is a consistent, older
  thread (keep :attr:`ThreadVerification.head_anchor`, ``tulip-nb verify --anchor``, or an
  :class:`~tulip_nb.memory.audit.AuditTrail` with ``checkpointer=``, and pass it as ``expect=``);
- the newest checkpoint with its hash keys *and* tulip_nb marks removed (``tulip_nb_messages``,
  ``tulip_nb_seq``, ``tulip_nb_created_at``), without an anchor: it looks like a save by tulip,
  which continues tulip_nb threads legitimately; ``strict=True`` reports every unsigned
  checkpoint after a signed one; and an edit of anything but its messages and ``created_at``
  once its hash keys are gone;
- a seq gap in a thread that holds a prune record (a prune does not record which saves it cut),
  even with an anchor (an anchored id that is gone is not judged: a prune removes those too); a
  copy across a restart of the count (after a checkpoint without a seq);
- that a fork whose source is gone really started from that source: with ``origin_gone`` the
  recorded origin hash is trusted, since nothing is left to compare it with (the fork's own
  content is still checked); a lab branch saved without the link names no origin hash at all;
- on ``/1`` checkpoints: ``created_at`` edits, copies over the newest, seq gaps;
- without an anchor kept elsewhere, anyone who recomputes the hashes: the chain is not a
  signature with a secret key.

Unsigned checkpoints are not failures (tulip writes them); with ``strict=True`` an unsigned
checkpoint that follows signed ones is one (its hash may have been stripped). A checkpoint whose
parent a prune or vacuum removed carries a record of the cut (``tulip_nb_pruned``,
:mod:`tulip_nb.memory.retention`) and is checked against its new parent's hash instead.

    >>> import asyncio
    >>> from tulip_nb.core import AgentState, Message
    >>> from tulip_nb.memory.backends import MemoryCheckpointer
    >>> cp = MemoryCheckpointer()
    >>> _ = asyncio.run(cp.save(AgentState(messages=[Message.user("Refund ord-4821?")]), "t"))
    >>> report = asyncio.run(verify_thread(cp, "t", expect=1))
    >>> report.ok, report.counts()
    (True, {'ok': 1})
    >>> asyncio.run(verify_thread(cp, "t", expect=2)).anchor.status
    'rolled_back'
    >>> keep = report.head_anchor                      # after a good verify
    >>> keep.seq, asyncio.run(verify_thread(cp, "t", expect=keep)).ok
    (1, True)
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tulip_nb.core import parse_datetime
from tulip_nb.core.errors import CheckpointNotFound
from tulip_nb.core.keys import CREATED_AT_KEY, FORKED_FROM_KEY, MESSAGES_KEY, PARENT_KEY, PRUNED_KEY, SEQ_KEY
from tulip_nb.core.state import MessageBlobCache
from tulip_nb.memory._integrity_anchor import Anchor, as_anchor, check_anchor, head_anchor
from tulip_nb.memory._signing import ALG, ALGS, checkpoint_hash
from tulip_nb.memory._signing import ALG_KEY as ALG_KEY
from tulip_nb.memory._signing import HASH_KEY as HASH_KEY
from tulip_nb.memory._signing import PARENT_HASH_KEY as PARENT_HASH_KEY
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, CheckpointInfo, messages_mark

__all__ = [
    "ALG",
    "ALGS",
    "FAILURES",
    "Anchor",
    "CheckpointVerdict",
    "checkpoint_hash",
    "recompute_hash",
    "unsigned_metadata",
]

Status = Literal["ok", "mismatch", "broken_chain", "unsigned", "unreadable", "rolled_back", "origin_gone"]
FAILURES: frozenset[str] = frozenset(("mismatch", "broken_chain", "unreadable", "rolled_back"))


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
    anchor: CheckpointVerdict | None = None
    """The check against ``verify_thread(..., expect=)`` (None without an anchor): ``ok``, or
    ``rolled_back`` on the thread's newest checkpoint (id ``""`` when the thread is empty)."""
    head_anchor: Anchor | None = field(default=None, repr=False, compare=False)
    """The anchor to keep after a good verify (None when no checkpoint is signed): the newest
    signed checkpoint's hash and id, the highest seq, every signed checkpoint's hash. Keep it
    only when :attr:`ok`; pass it as ``expect=`` next time."""

    @property
    def ok(self) -> bool:
        """No checkpoint failed (unsigned ones do not count as failures), nor the anchor check."""
        return self.first_failure is None

    @property
    def first_failure(self) -> CheckpointVerdict | None:
        """The oldest failing checkpoint: where the thread stops being trustworthy (else a failed anchor)."""
        return next((v for v in self.failures), None)

    @property
    def failures(self) -> list[CheckpointVerdict]:
        out = [v for v in self.verdicts if v.failed]
        return [*out, self.anchor] if self.anchor is not None and self.anchor.failed else out

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
    """The save metadata without the hash keys, seq and signed stamp (what the caller and the lineage put there).

    >>> unsigned_metadata({"k": 1, "tulip_nb_hash": "ab", "tulip_nb_parent_hash": None, "tulip_nb_hash_alg": ALG})
    {'k': 1}
    """
    dropped = (HASH_KEY, PARENT_HASH_KEY, ALG_KEY, SEQ_KEY, CREATED_AT_KEY)
    return {k: v for k, v in (metadata or {}).items() if k not in dropped}


def recompute_hash(ckpt: Checkpoint | tuple[Any, Mapping[str, Any]]) -> str | None:
    """The hash a signed checkpoint should carry, from its content and recorded parent hash.

    None when the checkpoint is unsigned (no ``tulip_nb_hash``).
    """
    state, meta = (ckpt.state, ckpt.metadata) if isinstance(ckpt, Checkpoint) else ckpt
    if not isinstance(meta.get(HASH_KEY), str):
        return None
    parent_hash = meta.get(PARENT_HASH_KEY)
    alg = meta.get(ALG_KEY)
    return checkpoint_hash(
        state, meta, parent_hash if isinstance(parent_hash, str) else None, alg=alg if alg in ALGS else ALG
    )


@dataclass(frozen=True)
class _Parent:
    """Where a checkpoint's parent was looked up: its save metadata (None when not found)."""

    meta: Mapping[str, Any] | None
    foreign: bool = False
    """The parent lives in the ``forked_from`` thread (a fork's first checkpoint)."""
    gone: str = ""
    """For a foreign parent not found: why (the source thread, or the parent in it, is gone)."""
    error: str = ""
    """For a foreign parent that could not be read: the error."""


async def _parent_of(
    cp: BaseCheckpointer, info: CheckpointInfo, meta: Mapping[str, Any], local: dict[str, Mapping[str, Any]]
) -> _Parent:
    parent = meta.get(PARENT_KEY)
    if not isinstance(parent, str):
        return _Parent(None)
    if parent in local:
        return _Parent(local[parent])
    source = meta.get(FORKED_FROM_KEY)
    if not isinstance(source, str) or source == info.thread_id:
        return _Parent(None)
    try:
        other = await cp.load_checkpoint(source, parent)
    except CheckpointNotFound:
        other = None
    except Exception as e:  # an unreadable source is not a gone one: reported as such
        return _Parent(None, True, error=f"{type(e).__name__}: {e}")
    if other is not None:
        return _Parent(other.metadata, True)
    try:
        thread_gone = not await cp.exists(source)
    except Exception:  # only the wording depends on it
        thread_gone = False
    where = f"source thread {source!r} is gone" if thread_gone else f"{source!r} no longer holds {parent}"
    return _Parent(None, True, gone=where)


_BATCH = 64
"""Checkpoints :func:`verify_thread` loads per :meth:`~BaseCheckpointer.load_checkpoints` call."""


async def _loaded_in_order(
    checkpointer: BaseCheckpointer, thread_id: str, infos: list[CheckpointInfo]
) -> AsyncIterator[tuple[CheckpointInfo, Checkpoint | Exception]]:
    """Each checkpoint of ``infos`` (oldest first) loaded, or the error loading it raised.

    In batches (a store that keeps the history once reads each message once per batch); a batch
    that fails whole (an outage, say) is loaded again one checkpoint at a time, so each gets its
    own verdict and at most one batch of states is held at a time.
    """
    for start in range(0, len(infos), _BATCH):
        batch = infos[start : start + _BATCH]
        try:
            got: list[Checkpoint | Exception] = list(
                await checkpointer.load_checkpoints(thread_id, [i.checkpoint_id for i in batch])
            )
        except Exception:  # one at a time: each failure is its own checkpoint's verdict
            got = []
            for info in batch:
                try:
                    one = await checkpointer.load_checkpoint(thread_id, info.checkpoint_id)
                except Exception as e:
                    got.append(e)
                    continue
                got.append(one if one is not None else CheckpointNotFound("listed but missing", thread_id=thread_id))
        for info, result in zip(batch, got, strict=True):
            yield info, result


async def verify_thread(
    checkpointer: BaseCheckpointer,
    thread_id: str,
    *,
    limit: int = 1_000_000,
    strict: bool = False,
    expect: str | int | Anchor | None = None,
) -> ThreadVerification:
    """Recompute every checkpoint's hash and check the chain; see the module docstring.

    Loads each checkpoint of ``thread_id`` (at most ``limit``, the newest) once; when the thread
    has more, the oldest one checked is not linked to its (unchecked) parent. Backends that keep
    the save metadata twice (a listing index and the record) must agree on the hash as well.

    ``expect`` is an anchor recorded outside the store: a ``tulip_nb_hash`` (the thread must still
    hold that checkpoint, or a prune record of it), a ``tulip_nb_seq`` (the newest checkpoint's
    seq must be at least that), or an :class:`Anchor` (both, and each checkpoint it names must
    still have the hash it records: from :attr:`ThreadVerification.head_anchor` of an earlier
    verify, or :meth:`AuditTrail.anchor <tulip_nb.memory.audit.AuditTrail.anchor>`). Otherwise
    :attr:`ThreadVerification.anchor` is ``rolled_back``: the newest checkpoints were removed,
    which the remaining chain alone cannot show; an anchored checkpoint whose hash changed is a
    ``mismatch``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unreadable files are reported below, not warned about
        infos = await checkpointer.list_checkpoint_infos(thread_id, limit=limit)
    infos = sorted(infos, key=lambda i: (i.created_at, i.checkpoint_id))  # oldest first
    # Pass 1 loads each checkpoint once and keeps only its save metadata and content verdict, so
    # memory and time stay linear in the thread's length (no state is held after its hash).
    content: dict[str, CheckpointVerdict | None] = {}
    metas: dict[str, Mapping[str, Any]] = {}
    stripped: dict[str, str] = {}  # unsigned checkpoints whose tulip_nb marks contradict their content
    digests = MessageBlobCache(capacity=1)  # consecutive checkpoints extend each other: hash the new messages only
    for info, got in [pair async for pair in _loaded_in_order(checkpointer, thread_id, infos)]:
        cid = info.checkpoint_id
        if isinstance(got, CheckpointNotFound):
            content[cid] = CheckpointVerdict(cid, "unreadable", "listed but missing", info.created_at)
            continue
        if isinstance(got, Exception):  # any failure to read is the verdict
            content[cid] = CheckpointVerdict(cid, "unreadable", f"{type(got).__name__}: {got}", info.created_at)
            continue
        ckpt = got
        metas[cid] = ckpt.metadata or info.metadata
        sha = digests.digest(thread_id, ckpt.state.messages)
        content[cid] = _content_verdict(info, ckpt, metas[cid], sha)
        if metas[cid].get(HASH_KEY) is None:
            edit = _stripped_edit(info, ckpt, metas[cid], sha)
            if edit:
                stripped[cid] = edit
    any_signed = any(isinstance(m.get(HASH_KEY), str) for m in metas.values())
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
        if verdict.status == "unsigned" and any_signed and cid in stripped:
            verdict = CheckpointVerdict(cid, "mismatch", stripped[cid], verdict.created_at)
        elif verdict.status == "unsigned" and cid in metas and _carries_signed_keys(metas[cid]):
            verdict = CheckpointVerdict(
                cid, "unsigned", "hash keys removed (its marks still match)", verdict.created_at
            )
        verdicts.append(verdict)
        if cid in metas:
            seen_signed = seen_signed or isinstance(metas[cid].get(HASH_KEY), str)
    # Pass 3 checks the save order (tulip_nb_seq), then the anchor.
    verdicts = _seq_verdicts(infos, verdicts, metas, complete=complete)
    anchor = None
    if expect is not None:
        verdicts, anchor = _apply_anchor(infos, verdicts, metas, expect)
    return ThreadVerification(thread_id, verdicts, anchor, head_anchor(thread_id, infos, metas))


def _seq(meta: Mapping[str, Any] | None) -> int | None:
    seq = meta.get(SEQ_KEY) if meta is not None else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _carries_signed_keys(meta: Mapping[str, Any]) -> bool:
    """Whether an unsigned checkpoint carries keys only a signing save writes (its hash was stripped)."""
    return SEQ_KEY in meta or CREATED_AT_KEY in meta or ALG_KEY in meta or PARENT_HASH_KEY in meta


def _stamp_problem(info: CheckpointInfo, ckpt: Checkpoint, stamp: Any) -> str:
    """Why ``created_at`` disagrees with the signed ``tulip_nb_created_at`` ("" when it agrees)."""
    try:
        signed = parse_datetime(stamp) if isinstance(stamp, str) else None
    except ValueError:
        signed = None
    if signed is None:
        return f"unreadable {CREATED_AT_KEY}={stamp!r}"
    for where, at in (("", ckpt.created_at), ("the listing's ", info.created_at)):
        if at != signed:
            return f"{where}created_at is {at.isoformat()}, signed {stamp}"
    return ""


def _stripped_edit(info: CheckpointInfo, ckpt: Checkpoint, meta: Mapping[str, Any], messages_sha: bytes) -> str:
    """For an unsigned checkpoint: why its tulip_nb marks say it was edited ("" when they agree).

    ``tulip_nb_messages`` (every tulip_nb save) must match its messages, and ``tulip_nb_created_at``
    (only a signed save writes it) its ``created_at``.
    """
    mark = meta.get(MESSAGES_KEY)
    if mark is not None and mark != messages_mark(len(ckpt.state.messages), messages_sha):
        return f"hash keys removed, and the messages no longer match {MESSAGES_KEY}"
    stamp = meta.get(CREATED_AT_KEY)
    if stamp is not None and (problem := _stamp_problem(info, ckpt, stamp)):
        return f"hash keys removed, and {problem}"
    return ""


def _seq_verdicts(
    infos: list[CheckpointInfo],
    verdicts: list[CheckpointVerdict],
    metas: dict[str, Mapping[str, Any]],
    *,
    complete: bool,
) -> list[CheckpointVerdict]:
    """Check ``tulip_nb_seq`` along the save order; turn ok/unsigned verdicts that break it into failures.

    Within a run of checkpoints that carry a seq: no two with one hash claim the same seq (a copy
    of a checkpoint, e.g. an older one copied over the newest), and a gap (a checkpoint removed
    from the middle of the save order) is a failure unless the thread holds a prune record. Two
    different checkpoints with one seq are saves after the same latest (a crashed save's retry).
    A checkpoint without a seq (tulip, unsigned, ``/1``) ends a run; the next save restarts at 1.
    """
    pruned = any(PRUNED_KEY in m for m in metas.values())
    named = {m.get(PARENT_KEY) for m in metas.values()}  # the ids some checkpoint chains to
    claims: dict[int, int] = {}  # seq -> index in out
    last: int | None = None
    out: list[CheckpointVerdict] = list(verdicts)

    def fail(i: int, problem: str) -> None:
        if out[i].status in ("ok", "unsigned", "origin_gone"):
            out[i] = CheckpointVerdict(infos[i].checkpoint_id, "broken_chain", problem, out[i].created_at)

    for n, info in enumerate(infos):
        cid = info.checkpoint_id
        seq = _seq(metas.get(cid))
        if seq is None:
            if cid in metas:
                last = None  # a run ends (a restart at 1 follows)
            continue
        if last is None and seq == 1:
            claims = {}  # a new run
        if seq in claims:
            k = claims[seq]
            other = infos[k].checkpoint_id
            if metas[cid].get(HASH_KEY) == metas[other].get(HASH_KEY):
                # the copy is the one nothing chains to (the original has its child), else the later one
                copy, original = (k, n) if other not in named and cid in named else (n, k)
                fail(copy, f"{SEQ_KEY} {seq} is not unique: a copy of {infos[original].checkpoint_id}")
            # different checkpoints with one seq: saves after the same latest (a save a crash left
            # unacknowledged, then its retry), two children of one parent: not a failure
            continue
        if last is not None and seq > last + 1 and not pruned:
            fail(n, f"{SEQ_KEY} jumps from {last} to {seq}: {seq - last - 1} saves missing (no prune record)")
        elif last is None and seq != 1 and n == 0 and complete and not pruned:
            fail(n, f"{SEQ_KEY} {seq} on the oldest checkpoint: {seq - 1} older saves are missing")
        claims[seq] = n
        last = seq if last is None else max(last, seq)
    return out


def _apply_anchor(
    infos: list[CheckpointInfo],
    verdicts: list[CheckpointVerdict],
    metas: dict[str, Mapping[str, Any]],
    expect: str | int | Anchor,
) -> tuple[list[CheckpointVerdict], CheckpointVerdict]:
    """``verify_thread(..., expect=)``: does the thread still reach the anchored save, and does each
    anchored checkpoint still hold the anchored hash? (the verdicts, the anchor's verdict)"""
    anchor = as_anchor(expect)
    rolled, replaced = check_anchor(anchor, infos, metas)
    out = [
        CheckpointVerdict(v.checkpoint_id, "mismatch", replaced[v.checkpoint_id], v.created_at)
        if v.checkpoint_id in replaced and not v.failed
        else v
        for v in verdicts
    ]
    newest = infos[-1] if infos else None
    cid, when = (newest.checkpoint_id, newest.created_at) if newest is not None else ("", None)
    if rolled:
        return out, CheckpointVerdict(cid, "rolled_back", "; ".join(rolled), when)
    return out, CheckpointVerdict(cid, "ok", f"reaches the anchor ({anchor.describe()})", when)


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
    alg = meta.get(ALG_KEY)
    if not isinstance(stored, str) or alg not in ALGS:
        return CheckpointVerdict(cid, "mismatch", f"unknown hash {ALG_KEY}={alg!r}", when)
    listed = info.metadata.get(HASH_KEY)
    if listed is not None and listed != stored:
        return CheckpointVerdict(cid, "mismatch", "the listing's hash differs from the record's", when)
    parent_hash = meta.get(PARENT_HASH_KEY)
    actual = checkpoint_hash(
        ckpt.state, meta, parent_hash if isinstance(parent_hash, str) else None, messages_sha=messages_sha, alg=alg
    )
    if actual != stored:
        return CheckpointVerdict(cid, "mismatch", f"content hashes to {actual}, stored {stored}", when)
    stamp = meta.get(CREATED_AT_KEY)
    if stamp is not None and (problem := _stamp_problem(info, ckpt, stamp)):
        return CheckpointVerdict(cid, "mismatch", problem, when)
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
    parent_id = meta.get(PARENT_KEY)
    parent = await _parent_of(cp, info, meta, metas)
    pruned = meta.get(PRUNED_KEY)
    if pruned is not None:
        return _pruned_verdict(info, pruned, recorded, parent_id, parent.meta)
    if parent.gone:
        # a fork whose source was deleted or vacuumed: its own signed metadata binds forked_from and
        # the parent's hash, so the chain starts at that recorded origin (the fork's own first
        # checkpoints removed leave a local parent missing and a seq gap instead: broken_chain)
        origin = (
            f"the chain starts at the recorded origin {recorded}"
            if isinstance(recorded, str)
            else "the fork link was not hashed"
        )
        return CheckpointVerdict(cid, "origin_gone", f"{parent.gone}: {origin}", when)
    if parent.meta is None:
        if parent.error:
            return CheckpointVerdict(
                cid, "broken_chain", f"parent {parent_id} cannot be read in its source thread: {parent.error}", when
            )
        if isinstance(recorded, str):
            where = "in its source thread" if parent.foreign else "in the thread"
            return CheckpointVerdict(cid, "broken_chain", f"parent {parent_id} is not {where}", when)
        return CheckpointVerdict(cid, "ok", "", when)
    parent_hash = parent.meta.get(HASH_KEY)
    if recorded is None and parent_hash is not None:
        if parent.foreign:  # a branch saved without the link (lab branches): the source verifies on its own
            return CheckpointVerdict(cid, "ok", "fork link not hashed", when)
        return CheckpointVerdict(cid, "broken_chain", f"parent {parent_id} is signed but the link is not", when)
    if recorded != parent_hash:
        return CheckpointVerdict(
            cid, "broken_chain", f"parent {parent_id} hash is {parent_hash}, recorded {recorded}", when
        )
    return CheckpointVerdict(cid, "ok", "", when)
