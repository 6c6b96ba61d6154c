"""The checkpointer contract.

A **thread** is one conversation, named by a string ``thread_id`` that you choose
(``"ticket-8912-refund"``). A **checkpoint** is the thread's :class:`~tulip_nb.core.AgentState`
saved at one moment, under a ``checkpoint_id``. Each save adds a checkpoint; the newest one is the
thread's *latest*, which is what an agent loads to continue the conversation. Earlier checkpoints
stay until deleted or vacuumed, so a thread's history can be listed, loaded, diffed and forked.

Every save records, in the checkpoint's *save metadata*, ``parent_checkpoint_id``: the thread's
latest checkpoint before this save. That lineage is what replay, diff and fork walk.

Concurrency is last-write-wins by default. Pass ``expected_parent=`` to :meth:`save` for
compare-and-swap: the save raises :class:`~tulip_nb.core.errors.CheckpointConflict` instead of
silently racing when the thread's latest is not the one you expected.

Every built-in backend also signs each save (``tulip_nb_hash`` in the save metadata, a hash chain
along the lineage; see :mod:`tulip_nb.memory.integrity`), inside the same lock or transaction
that picks the parent, so the chain stays exact under concurrent writers.

Writing your own checkpointer: subclass :class:`BaseCheckpointer`, implement ``save``, ``load``
and ``list_checkpoints``, override ``delete`` / ``exists`` if the defaults don't fit, and advertise
what else you support through :attr:`BaseCheckpointer.capabilities`. To sign your saves, build the
stored metadata with ``save_metadata(metadata, latest_id, state=state, parent_metadata=latest_meta,
thread_id=thread_id)`` where you pick the parent (unsigned checkpoints verify as "unsigned")::

    class DictCheckpointer(BaseCheckpointer):
        def __init__(self):
            self.data = {}  # thread id -> {checkpoint id: state}, oldest first

        async def save(self, state, thread_id, checkpoint_id=None, metadata=None, **kw):
            validate_thread_id(thread_id)
            cid = checkpoint_id or new_checkpoint_id()
            thread = self.data.setdefault(thread_id, {})
            thread.pop(cid, None)  # saving an id again replaces it (and makes it the newest)
            thread[cid] = state.model_copy(deep=True)
            return cid

        async def load(self, thread_id, checkpoint_id=None):
            thread = self.data.get(validate_thread_id(thread_id), {})
            if checkpoint_id is None:
                return next(reversed(thread.values())).model_copy(deep=True) if thread else None
            if checkpoint_id not in thread:
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
            return thread[checkpoint_id].model_copy(deep=True)

        async def list_checkpoints(self, thread_id, limit=10):
            ids = list(reversed(self.data.get(validate_thread_id(thread_id), {})))
            return ids if limit is None else ids[:limit]

(``docs/own-backend.md`` has it complete, with ``delete`` and the suite run on it.) Then run the
shipped conformance suite on it (:mod:`tulip_nb.testing`, ``CheckpointerSuite``):
the same checks every built-in backend passes, including re-reading the store through a fresh
instance after every write. The built-in backends share one more internal base
(``tulip_nb.memory.backends._base``) that derives ``load``, ``list_checkpoints``, ``exists``,
``get_metadata`` and the scans from a few primitives; it is not part of the public contract.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from tulip_nb.core.errors import CapabilityNotSupported, CheckpointCorrupt, CheckpointNotFound, InvalidThreadId
from tulip_nb.core.keys import (
    ALG_KEY,
    CREATED_AT_KEY,
    HASH_KEY,
    MESSAGES_KEY,
    PARENT_HASH_KEY,
    PARENT_KEY,
    PRUNED_KEY,
    SEQ_KEY,
)
from tulip_nb.core.state import AgentState, MessageBlobCache
from tulip_nb.memory._signing import running_digest, sign_metadata
from tulip_nb.memory.retention import plan_prune, relink

__all__ = [
    "ADDED_KEYS",
    "MAX_THREAD_ID_LENGTH",
    "caller_metadata",
    "check_expected_parent",
    "messages_mark",
    "next_created_at",
    "save_metadata",
    "ThreadSpan",
    "validate_checkpoint",
    "validate_checkpoint_id",
    "validate_thread_id",
]

MAX_THREAD_ID_LENGTH = 4096


def new_checkpoint_id() -> str:
    """A fresh checkpoint id: uuid4 hex, as tulip mints them."""
    return uuid.uuid4().hex


def validate_thread_id(thread_id: object) -> str:
    """Return ``thread_id`` if it can be stored safely, else raise :class:`InvalidThreadId`."""
    if not isinstance(thread_id, str):
        raise InvalidThreadId(f"thread_id must be a str, got {type(thread_id).__name__}")
    if not thread_id:
        raise InvalidThreadId("thread_id must not be empty")
    if "\x00" in thread_id:
        raise InvalidThreadId("thread_id must not contain NUL", thread_id=thread_id)
    if len(thread_id) > MAX_THREAD_ID_LENGTH:
        raise InvalidThreadId(
            f"thread_id is {len(thread_id)} characters, more than {MAX_THREAD_ID_LENGTH}",
            thread_id=thread_id[:40] + "...",
        )
    if not thread_id.isascii():
        try:
            thread_id.encode()
        except UnicodeEncodeError as e:  # a lone surrogate: no store can hold it as text
            raise InvalidThreadId(
                f"thread_id is not valid Unicode text (surrogate at {e.start})", thread_id=repr(thread_id)
            ) from None
    return thread_id


def validate_checkpoint_id(checkpoint_id: object, thread_id: str | None = None) -> str:
    """Return ``checkpoint_id`` if usable as a key, else raise :class:`InvalidThreadId`."""
    if not isinstance(checkpoint_id, str) or not checkpoint_id or "\x00" in checkpoint_id:
        raise InvalidThreadId(
            f"checkpoint_id must be a non-empty str without NUL, got {checkpoint_id!r}",
            thread_id=thread_id,
        )
    if len(checkpoint_id) > 512:
        raise InvalidThreadId("checkpoint_id is longer than 512 characters", thread_id=thread_id)
    if not checkpoint_id.isascii():
        try:
            checkpoint_id.encode()
        except UnicodeEncodeError:
            raise InvalidThreadId(
                f"checkpoint_id is not valid Unicode text: {checkpoint_id!r}", thread_id=thread_id
            ) from None
    return checkpoint_id


@dataclass(frozen=True)
class Capabilities:
    """Which optional operations a checkpointer supports (all off by default).

    An operation whose flag is off raises :class:`~tulip_nb.core.errors.CapabilityNotSupported`
    (a ``NotImplementedError``) naming the capability.
    """

    search: bool = False
    metadata_query: bool = False
    vacuum: bool = False
    branching: bool = False
    ttl: bool = False
    list_threads: bool = False
    list_with_metadata: bool = False
    persistent_checkpoint_ids: bool = False

    def enabled(self) -> list[str]:
        """Names of the capabilities that are on."""
        return [f.name for f in fields(self) if getattr(self, f.name)]


@dataclass(frozen=True)
class CheckpointInfo:
    """What is known about one checkpoint without loading its state."""

    checkpoint_id: str
    thread_id: str
    created_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def parent_checkpoint_id(self) -> str | None:
        parent = self.metadata.get(PARENT_KEY)
        return parent if isinstance(parent, str) else None


@dataclass(frozen=True)
class ThreadSpan:
    """A thread's extent from its headers: how many checkpoints, the oldest and the newest."""

    checkpoints: int
    first: CheckpointInfo
    latest: CheckpointInfo


@dataclass
class Checkpoint:
    """One stored checkpoint: its state plus the envelope around it."""

    checkpoint_id: str
    thread_id: str
    created_at: datetime
    state: AgentState
    metadata: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    """Envelope keys this version does not know, kept verbatim."""

    @property
    def info(self) -> CheckpointInfo:
        return CheckpointInfo(self.checkpoint_id, self.thread_id, self.created_at, self.metadata)

    @property
    def parent_checkpoint_id(self) -> str | None:
        return self.info.parent_checkpoint_id


def save_metadata(
    metadata: dict[str, Any] | None,
    parent: str | None,
    *,
    state: AgentState | None = None,
    parent_metadata: Mapping[str, Any] | None = None,
    thread_id: str | None = None,
    cache: MessageBlobCache | None = None,
    sign: bool = True,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """The save metadata to store: the caller's keys plus ``parent_checkpoint_id``, signed.

    A caller-given ``parent_checkpoint_id`` (a fork, an import) wins over the computed one. With
    ``state`` (and ``thread_id``) the metadata also gets the thread's hash chain
    (``tulip_nb_hash``, see :mod:`tulip_nb.memory.integrity`): pass the save metadata of the
    thread's latest checkpoint as ``parent_metadata``, read in the same lock or transaction that
    chose ``parent``, so the chain is exact under concurrent writers. Every built-in backend calls
    this inside its critical section; a custom checkpointer does the same to sign its saves::

        meta = save_metadata(metadata, latest_id, state=state, parent_metadata=latest_meta,
                             thread_id=thread_id, sign=self.sign)

    Pass the ``created_at`` the backend will store with the checkpoint (exactly that value): the
    hash then binds it (``tulip_nb_created_at``); without it a ``created_at`` edit goes unseen.
    The signed metadata also gets ``tulip_nb_seq``, the latest's + 1.

    ``sign=False`` (each built-in checkpointer takes it as a constructor argument) stores no hash
    keys, for benchmarks or a store whose writers are all trusted; such saves verify as
    ``unsigned``.
    """
    out = dict(metadata) if metadata else {}
    out.setdefault(PARENT_KEY, parent)
    if state is not None and thread_id is not None:
        sha = running_digest(thread_id, state.messages, cache)
        out[MESSAGES_KEY] = messages_mark(len(state.messages), sha)
        sign_metadata(
            out,
            state,
            given=metadata,
            latest_id=parent,
            latest_metadata=parent_metadata,
            key=thread_id,
            cache=cache,
            sign=sign,
            messages_sha=sha,
            created_at=created_at,
        )
    return out


ADDED_KEYS = frozenset((MESSAGES_KEY, HASH_KEY, PARENT_HASH_KEY, ALG_KEY, SEQ_KEY, CREATED_AT_KEY))
"""The save-metadata keys every tulip_nb save adds on its own (the message mark, the hash chain)."""


def caller_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The save metadata without :data:`ADDED_KEYS`: what the caller and the lineage put there.

    A prune record (``tulip_nb_pruned``) keeps its lineage (``parent``, ``dropped``) without the
    hashes it carries: hashes bind ``created_at``, so the same saves in two stores differ there.

    >>> caller_metadata({"k": 1, "parent_checkpoint_id": None, "tulip_nb_messages": {"n": 2, "sha": "ab"}})
    {'k': 1, 'parent_checkpoint_id': None}
    """
    out = {k: v for k, v in (metadata or {}).items() if k not in ADDED_KEYS}
    pruned = out.get(PRUNED_KEY)
    if isinstance(pruned, Mapping):
        out[PRUNED_KEY] = {k: v for k, v in pruned.items() if k not in ("parent_hash", "base_hash")}
    return out


def messages_mark(count: int, digest: bytes) -> dict[str, Any]:
    """The :data:`~tulip_nb.core.keys.MESSAGES_KEY` value: ``{"n": count, "sha": first 32 hex of digest}``.

    An object, not a pair: a document store maps each field of an array to one type.
    """
    return {"n": count, "sha": digest.hex()[:32]}


def validate_checkpoint(checkpoint: object) -> Checkpoint:
    """Check a :class:`Checkpoint` before :meth:`BaseCheckpointer.put_checkpoint` writes it.

    Returns it with a timezone-aware ``created_at`` (a naive one is taken as UTC); raises
    :class:`InvalidThreadId` for bad ids and ``TypeError`` for anything that is not a checkpoint.
    """
    if not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"put_checkpoint takes a Checkpoint, got {type(checkpoint).__name__}")
    validate_thread_id(checkpoint.thread_id)
    validate_checkpoint_id(checkpoint.checkpoint_id, checkpoint.thread_id)
    if not isinstance(checkpoint.state, AgentState):
        raise TypeError(f"Checkpoint.state must be an AgentState, got {type(checkpoint.state).__name__}")
    if not isinstance(checkpoint.created_at, datetime):
        raise TypeError(f"Checkpoint.created_at must be a datetime, got {type(checkpoint.created_at).__name__}")
    if not isinstance(checkpoint.metadata, dict):
        raise TypeError(f"Checkpoint.metadata must be a dict, got {type(checkpoint.metadata).__name__}")
    if checkpoint.created_at.tzinfo is None:
        checkpoint = replace(checkpoint, created_at=checkpoint.created_at.replace(tzinfo=UTC))
    return checkpoint


def check_expected_parent(expected_parent: str | None, latest_id: str | None, thread_id: str) -> None:
    """The compare-and-swap test every backend runs under its lock before writing.

    ``expected_parent=None`` is last-write-wins (no check); ``""`` means "the thread must be empty".
    """
    from tulip_nb.core.errors import CheckpointConflict

    if expected_parent is not None and (expected_parent or None) != latest_id:
        raise CheckpointConflict(
            "thread's latest checkpoint is not the expected parent",
            thread_id=thread_id,
            expected=expected_parent,
            actual=latest_id,
        )


_TICK = timedelta(microseconds=1)


def next_created_at(latest: datetime | None) -> datetime:
    """Now, or just after the thread's latest ``created_at`` if the clock has not passed it.

    Keeps every thread's checkpoints strictly ordered by ``created_at`` (how latest is decided)
    even when two saves land in the same microsecond or the clock steps back.
    """
    now = datetime.now(UTC)
    return latest + _TICK if latest is not None and now <= latest else now


class BaseCheckpointer(ABC):
    """Persists :class:`~tulip_nb.core.AgentState` per thread; see the module docstring."""

    sign: bool = True
    """Whether saves add the hash chain (:mod:`tulip_nb.memory.integrity`); the built-in
    checkpointers take ``sign=`` in their constructor, a subclass may set it too."""

    # -- capabilities -------------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """The optional operations this backend supports (none by default)."""
        return Capabilities()

    def _require(self, capability: str, operation: str) -> None:
        if not getattr(self.capabilities, capability):
            raise CapabilityNotSupported(type(self).__name__, capability, operation)

    def _unimplemented(self, capability: str, operation: str) -> CapabilityNotSupported:
        self._require(capability, operation)
        # The flag is on but the subclass did not implement the operation: still say so plainly.
        return CapabilityNotSupported(type(self).__name__, capability, operation)

    # -- the three required operations --------------------------------------------------------
    @abstractmethod
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        """Save ``state`` as a new checkpoint of ``thread_id`` and return its id.

        ``metadata`` is stored as the checkpoint's save metadata, with ``parent_checkpoint_id``
        (the thread's latest before this save) added. ``expected_parent`` turns the save into a
        compare-and-swap: :class:`CheckpointConflict` unless the thread's latest is that id
        (``""`` means "the thread must be empty").
        """

    @abstractmethod
    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> AgentState | None:
        """Load the latest state of ``thread_id`` (or one checkpoint); ``None`` for no thread.

        An explicitly requested ``checkpoint_id`` that does not exist raises
        :class:`CheckpointNotFound`; a storage outage raises :class:`BackendUnavailable`.
        """

    @abstractmethod
    async def list_checkpoints(self, thread_id: str, limit: int | None = 10) -> list[str]:
        """Checkpoint ids of ``thread_id``, newest first."""

    # -- defaults built on the three ----------------------------------------------------------
    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        """Delete one checkpoint, or the whole thread when ``checkpoint_id`` is None."""
        raise CapabilityNotSupported(type(self).__name__, "delete", "delete")

    async def exists(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        """Whether the thread (or one of its checkpoints) exists."""
        if checkpoint_id is None:
            return bool(await self.list_checkpoints(thread_id, limit=1))
        from tulip_nb.core.errors import CheckpointNotFound

        try:
            return await self.load(thread_id, checkpoint_id) is not None
        except CheckpointNotFound:
            return False

    async def latest_checkpoint_id(self, thread_id: str) -> str | None:
        """The id of the thread's latest checkpoint, or None for an empty thread."""
        ids = await self.list_checkpoints(thread_id, limit=1)
        return ids[0] if ids else None

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        """Like :meth:`load`, with the envelope (id, created_at, save metadata) around the state."""
        cid = checkpoint_id or await self.latest_checkpoint_id(thread_id)
        if cid is None:
            return None
        state = await self.load(thread_id, cid)
        if state is None:
            return None
        meta = await self.get_metadata(thread_id, cid) if self.capabilities.metadata_query else {}
        return Checkpoint(cid, thread_id, state.updated_at, state, meta or {})

    async def load_checkpoints(
        self, thread_id: str, checkpoint_ids: Sequence[str]
    ) -> list[Checkpoint | CheckpointCorrupt | CheckpointNotFound]:
        """Several checkpoints of ``thread_id``, in the order asked; a missing or corrupt one is its error.

        For reading a thread's checkpoints in order (``verify_thread``, a replay of every
        checkpoint): a store that keeps the history once (the file store) reads each message once
        for the whole batch instead of once per checkpoint. The default loads them one by one.
        An outage (:class:`~tulip_nb.core.errors.BackendUnavailable`) raises, as a load does.
        """
        out: list[Checkpoint | CheckpointCorrupt | CheckpointNotFound] = []
        for cid in checkpoint_ids:
            try:
                got = await self.load_checkpoint(thread_id, cid)
            except (CheckpointCorrupt, CheckpointNotFound) as e:
                out.append(e)
                continue
            out.append(
                got
                if got is not None
                else CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=cid)
            )
        return out

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        """Checkpoint ids with created_at and save metadata, newest first."""
        out = []
        for cid in await self.list_checkpoints(thread_id, limit=limit):
            ckpt = await self.load_checkpoint(thread_id, cid)
            if ckpt is not None:
                out.append(ckpt.info)
        return out

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write ``checkpoint`` verbatim: an import, not a save.

        Unlike :meth:`save`, nothing is minted or added: the checkpoint keeps its id, its
        ``created_at`` and its save metadata exactly as given (no ``parent_checkpoint_id`` is
        computed), so a thread copied checkpoint by checkpoint, oldest first, arrives with its
        history and lineage intact. A checkpoint with the same id in the thread is replaced; the
        thread's latest stays the newest ``created_at``. Each checkpoint is written whole or not at
        all, so an import that dies midway can be re-run.

        Backends override this natively. This fallback goes through :meth:`save`, which keeps the
        id, state and given metadata but stamps ``created_at`` anew (and adds
        ``parent_checkpoint_id`` when the metadata lacks it): a verified export reports that.

        >>> import asyncio
        >>> from datetime import UTC, datetime, timedelta
        >>> from tulip_nb.core import AgentState
        >>> from tulip_nb.memory.backends import MemoryCheckpointer
        >>> cp = MemoryCheckpointer()
        >>> when = datetime(2026, 1, 2, tzinfo=UTC)
        >>> asyncio.run(cp.put_checkpoint(Checkpoint("c1", "t", when, AgentState(), {"k": 1})))
        >>> asyncio.run(cp.list_checkpoint_infos("t"))[0].metadata
        {'k': 1}
        """
        checkpoint = validate_checkpoint(checkpoint)
        await self.save(checkpoint.state, checkpoint.thread_id, checkpoint.checkpoint_id, dict(checkpoint.metadata))

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release connections and files; the checkpointer is unusable afterwards."""

    async def __aenter__(self) -> BaseCheckpointer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- capability-gated operations ----------------------------------------------------------
    async def search(self, query: str, limit: int | None = 10) -> list[dict[str, Any]]:
        """Full-text search over stored threads (capability ``search``)."""
        raise self._unimplemented("search", "search")

    async def query_by_metadata(self, key: str, value: Any, limit: int | None = 100) -> list[dict[str, Any]]:
        """Checkpoints whose save metadata has ``key == value`` (capability ``metadata_query``)."""
        raise self._unimplemented("metadata_query", "query_by_metadata")

    async def get_metadata(self, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any] | None:
        """A checkpoint's save metadata (capability ``metadata_query``)."""
        raise self._unimplemented("metadata_query", "get_metadata")

    async def vacuum(self, older_than_days: float = 30) -> int:
        """Drop, in every thread, each checkpoint created more than ``older_than_days`` days ago;
        how many went (capability ``vacuum``).

        The contract every in-tree checkpointer keeps (docs/storage-layouts.md, "One vacuum
        contract"): a prune by age, each thread's drop one transaction that re-links the survivors
        first, so what is left verifies; a thread left with no checkpoint is gone.
        """
        raise self._unimplemented("vacuum", "vacuum")

    async def prune(self, thread_id: str, keep_last: int | None = None, keep_turn_ends: bool = True) -> int:
        """Drop checkpoints the thread no longer needs; returns how many were dropped.

        By default, the iteration (mid-turn) checkpoints of every turn that has ended, which is what
        tulip does itself; ``keep_last=N`` keeps the N newest checkpoints and ``keep_turn_ends``
        whether every turn end is kept too (rules: :mod:`tulip_nb.memory.retention`, which reads
        headers only). Survivors whose parent goes are re-linked to their nearest surviving
        ancestor first, recording the cut, so :func:`~tulip_nb.memory.integrity.verify_thread`
        still accepts the thread, and a prune interrupted by a crash can simply be run again.

        A backend re-links through :meth:`put_checkpoint`; one that only has the fallback (a
        user's three-method checkpointer) drops without re-linking.
        """
        validate_thread_id(thread_id)
        infos = await self.list_checkpoint_infos(thread_id, None)
        return await self._drop(thread_id, infos, plan_prune(infos, keep_last, keep_turn_ends))

    async def _drop(self, thread_id: str, infos: list[CheckpointInfo], dropped: set[str]) -> int:
        """Re-link the survivors of ``dropped``, then delete ``dropped``; how many went."""
        if not dropped:
            return 0
        await self._relink_survivors(thread_id, infos, dropped)
        return await self._delete_checkpoints(thread_id, dropped)

    async def _relink_survivors(self, thread_id: str, infos: list[CheckpointInfo], dropped: set[str]) -> None:
        """Rewrite the save metadata of each survivor whose parent is in ``dropped`` (retention.relink).

        Through :meth:`put_checkpoint`, when the backend has a native one (else nothing is done).
        """
        if type(self).put_checkpoint is BaseCheckpointer.put_checkpoint:
            return
        for cid, meta in relink(infos, dropped).items():
            ckpt = await self.load_checkpoint(thread_id, cid)
            if ckpt is not None:
                relinked = Checkpoint(cid, thread_id, ckpt.created_at, ckpt.state, meta, dict(ckpt.extra))
                await self.put_checkpoint(relinked)

    async def _delete_checkpoints(self, thread_id: str, checkpoint_ids: set[str]) -> int:
        """Delete several checkpoints of one thread (backends override with one pass)."""
        return sum([await self.delete(thread_id, cid) for cid in sorted(checkpoint_ids)])

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        """Copy a thread with its whole history to a new id (capability ``branching``)."""
        raise self._unimplemented("branching", "copy_thread")

    async def list_threads(self, limit: int | None = 100, pattern: str = "*") -> list[str]:
        """Thread ids matching the glob ``pattern`` (capability ``list_threads``)."""
        raise self._unimplemented("list_threads", "list_threads")

    async def thread_span(self, thread_id: str) -> ThreadSpan | None:
        """How many checkpoints ``thread_id`` has, its oldest and its newest header (None: no
        thread) -- what a corpus summary reads besides the newest header's counters.

        The default lists every header (:meth:`list_checkpoint_infos`); a backend with an index
        answers it with a count and two rows, so a summary costs the same for any thread length.

        >>> import asyncio
        >>> from tulip_nb.core import AgentState
        >>> from tulip_nb.memory.backends import MemoryCheckpointer
        >>> cp = MemoryCheckpointer()
        >>> first = asyncio.run(cp.save(AgentState(), "t"))
        >>> last = asyncio.run(cp.save(AgentState(), "t"))
        >>> span = asyncio.run(cp.thread_span("t"))
        >>> (span.checkpoints, span.first.checkpoint_id == first, span.latest.checkpoint_id == last)
        (2, True, True)
        """
        infos = await self.list_checkpoint_infos(thread_id, limit=None)
        return ThreadSpan(len(infos), infos[-1], infos[0]) if infos else None

    async def list_unreadable(self, pattern: str = "*") -> dict[str, str]:
        """What the store holds under names matching ``pattern`` that :meth:`list_threads` cannot
        list because nothing of it can be read (a thread directory whose every file is corrupt, an
        object that does not parse): ``{name: why}``, so a corpus gives each one a row with its
        error instead of dropping it. ``name`` is the best the store can say (its directory or key
        name). The default finds nothing: the primitives only see what reads; a backend whose
        listing skips unreadable data overrides it.

        >>> import asyncio
        >>> from tulip_nb.memory.backends import MemoryCheckpointer
        >>> asyncio.run(MemoryCheckpointer().list_unreadable())
        {}
        """
        return {}

    async def list_with_metadata(self, limit: int | None = 100) -> list[dict[str, Any]]:
        """Each thread's latest checkpoint with its metadata (capability ``list_with_metadata``)."""
        raise self._unimplemented("list_with_metadata", "list_with_metadata")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
