"""The history model: messages stored once as entries, checkpoints as rows that name a head.

A thread's messages only ever grow (a message never changes once appended), so storing every
checkpoint's whole state repeats the history at every save. Here, as in pydantic-ai's
``ConversationStore`` and LangGraph's ``DeltaChannel``, the history is data, not mechanism:

**Entry**
    one message, stored once: its canonical JSON bytes and its parent entry (the message before
    it). An entry's id is a sha256 over its parent's id and its bytes, so an id names the whole
    prefix that ends there (a hash chain, like a git commit), the same prefix saved by two threads
    is one set of entries, and a flipped bit anywhere in a history no longer matches its id.
**Checkpoint row**
    one checkpoint: thread, checkpoint id, parent checkpoint id, the *head* entry (the last message;
    it names the whole message list), the state's other fields as one JSON blob, the save
    metadata, ``created_at`` and a content digest over all of it (:func:`row_digest`). A save
    writes one row plus the entries its state adds; a fork or copy writes rows that point at
    entries already there.

A backend implements the primitives of :class:`HistoryStore`, each one transaction (or
compare-and-swap) in its store: save (the plan runs inside the transaction with the thread's
latest, so compare-and-swap on ``expected_parent`` is exact), load, list rows, copy, rewrite
(prune / delete checkpoints / re-link, in one transaction), delete a thread. Entries no row reaches
are collected in the same transaction (each entry counts the rows and child entries that point at
it). Every load checks every entry's id and the row's digest: corruption raises
:class:`~tulip_nb.core.errors.CheckpointCorrupt`, never an older state.

>>> from tulip_nb.core import AgentState, Message
>>> cache = ChainCache()
>>> history = [Message.user("Refund ord-4821?"), Message.assistant("Done.")]
>>> chain = cache.chain("t", history)
>>> chain.n, len(chain.head or b"")
(2, 32)
>>> longer = cache.chain("t", [*history, Message.user("Thanks")])  # only the new message is hashed
>>> longer.ids[:2] == chain.ids[:2], longer.known  # known: entries stored so far (none yet)
(True, 0)
>>> state = AgentState(messages=history, metadata={"user": "u42"})
>>> from tulip_nb.memory.rest_delta import joined
>>> rest = state_rest(state)  # the other fields, by part
>>> again = join_state(joined(rest), [m.json_bytes() for m in history], where="example")
>>> again.model_dump() == state.model_dump()
True
"""

from __future__ import annotations

import hashlib
import operator
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from tulip_nb.core import Message, iso_offset
from tulip_nb.core.errors import CheckpointCorrupt
from tulip_nb.core.fastload import gc_paused
from tulip_nb.core.state import AgentState
from tulip_nb.memory._envelope import state_from_obj
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.rest_delta import Parts, state_parts

__all__ = [
    "ENTRY_ALG",
    "PROJECTION_KEY",
    "ChainCache",
    "HistoryStore",
    "MessageChain",
    "Rewrite",
    "Row",
    "RowWrite",
    "StoredCheckpoint",
    "entry_id",
    "fields_hash",
    "join_fields",
    "join_state",
    "state_with",
    "row_digest",
    "state_rest",
    "verify_chain",
]

ENTRY_ALG = "sha256-entry/1"
PROJECTION_KEY = "tulip_nb_projection"
"""Top-level key of a tulip envelope written as a projection of the history (value: the history's
file name). tulip ignores it; an envelope without it in a thread's directory is tulip's own."""

_ENTRY_TAG = b"tulip_nb-entry/1\x00"
_ROOT = b"\x00" * 32


def entry_id(parent: bytes | None, data: bytes) -> bytes:
    """The 32-byte id of an entry: sha256 over its parent's id and its message's JSON bytes.

    >>> entry_id(None, b'{"role":"user"}') != entry_id(entry_id(None, b"x"), b'{"role":"user"}')
    True
    """
    return hashlib.sha256(_ENTRY_TAG + (parent or _ROOT) + data).digest()


@dataclass(frozen=True)
class MessageChain:
    """The entry ids of one message list, and how to get each message's bytes.

    ``ids[i]`` is the entry of ``messages[i]``; only ``ids[:n]`` belong to this chain (the list
    may be shared and only ever grows). ``known``: how many leading entries the writer believes
    are stored already (a hint a store checks inside its transaction, never trusts).
    """

    ids: Sequence[bytes]
    n: int
    messages: Sequence[Message]
    known: int = 0

    @property
    def head(self) -> bytes | None:
        return self.ids[self.n - 1] if self.n else None

    def data(self, i: int) -> bytes:
        return self.messages[i].json_bytes()


@dataclass
class _Chained:
    messages: list[Message]
    ids: list[bytes]
    stored: int = 0


class ChainCache:
    """Per thread, the entry ids of the messages last saved or loaded, so a save hashes only new ones.

    Correct by construction: messages are frozen (immutable all the way down), the cache keeps the
    message objects it hashed alive, and a state whose messages are those same objects (checked by
    identity) plus new ones at the end reuses their ids. Anything else (a message replaced) hashes
    from the first difference on. At most ``capacity`` threads are kept, least recently used out.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._threads: OrderedDict[str, _Chained] = OrderedDict()
        self._lock = threading.Lock()

    def chain(self, thread_id: str, messages: Sequence[Message]) -> MessageChain:
        """The chain of ``messages``, extending what this cache holds for ``thread_id``."""
        with self._lock:
            have = self._threads.get(thread_id)
            if have is None:  # a fork or a copy of a thread cached here shares its message objects
                have = self._shared_prefix(messages)
            n = min(len(have.messages), len(messages))
            same = n if all(map(operator.is_, messages[:n], have.messages[:n])) else _first_difference(have, messages)
            if same < len(have.messages):
                if same >= len(messages):  # a prefix of what is cached: share it
                    self._keep(thread_id, have)
                    return MessageChain(have.ids, len(messages), have.messages, min(have.stored, len(messages)))
                have = _Chained(have.messages[:same], have.ids[:same], min(have.stored, same))
            parent = have.ids[-1] if have.ids else None
            for msg in messages[len(have.messages) :]:
                parent = entry_id(parent, msg.json_bytes())
                have.messages.append(msg)
                have.ids.append(parent)
            self._keep(thread_id, have)
            return MessageChain(have.ids, len(messages), have.messages, have.stored)

    def _shared_prefix(self, messages: Sequence[Message]) -> _Chained:
        """The longest prefix of ``messages`` (by identity) some cached thread holds, as a new chain."""
        best = _Chained([], [])
        if not messages:
            return best
        for other in self._threads.values():
            if other.messages and other.messages[0] is messages[0]:
                same = _first_difference(other, messages)
                if same > len(best.messages):
                    best = _Chained(other.messages[:same], other.ids[:same], min(other.stored, same))
        return best

    def stored(self, thread_id: str, chain: MessageChain) -> None:
        """Record that ``chain`` is stored (after a commit, or a verified load)."""
        with self._lock:
            have = self._threads.get(thread_id)
            if have is not None and have.ids is chain.ids:
                have.stored = max(have.stored, chain.n)

    def remember(self, thread_id: str, messages: list[Message], ids: list[bytes]) -> MessageChain:
        """Adopt a loaded, verified history: its messages and their stored entry ids."""
        have = _Chained(list(messages), list(ids), len(ids))
        with self._lock:
            self._keep(thread_id, have)
        return MessageChain(have.ids, len(ids), have.messages, len(ids))

    def forget(self, thread_id: str) -> None:
        with self._lock:
            self._threads.pop(thread_id, None)

    def _keep(self, thread_id: str, have: _Chained) -> None:
        self._threads[thread_id] = have
        self._threads.move_to_end(thread_id)
        while len(self._threads) > self.capacity:
            self._threads.popitem(last=False)


def _first_difference(have: _Chained, messages: Sequence[Message]) -> int:
    for i, (a, b) in enumerate(zip(have.messages, messages, strict=False)):
        if a is not b:
            return i
    return min(len(have.messages), len(messages))


def state_rest(state: AgentState) -> Parts:
    """The state's fields other than its messages, as the parts a row stores (:mod:`.rest_delta`)."""
    return state_parts(state)


def join_state(rest: bytes, messages: Sequence[bytes], *, where: str, thread_id: str | None = None) -> AgentState:
    """The state from a row's ``rest`` and its messages' JSON, oldest first (validated)."""
    tail = b"]}" if rest == b"{}" else b"]," + rest[1:]
    with gc_paused():
        try:
            obj = orjson.loads(b'{"messages":[' + b",".join(messages) + tail)
        except orjson.JSONDecodeError as e:
            raise CheckpointCorrupt(f"stored state is not JSON: {e}", path=where, thread_id=thread_id) from e
        return state_from_obj(obj, where=where, thread_id=thread_id)


def row_digest(
    thread_id: str,
    checkpoint_id: str,
    created_at: datetime,
    metadata: bytes,
    head: bytes | None,
    n_messages: int,
    fields_hash: bytes,
) -> bytes:
    """The content digest of a checkpoint row: sha256 over every field, each length-prefixed.

    The head entry's id stands for the whole message list (it chains every message) and
    ``fields_hash`` (:func:`fields_hash`) for the state's other fields, however the row stores
    them (whole or as a patch), so this is a digest of the whole state, its save metadata and
    ``created_at``, bound to its thread and id: a row edited, or moved in from another thread, no
    longer matches.
    """
    h = hashlib.sha256(b"tulip_nb-row/2\x00")
    parts = (
        thread_id.encode(),
        checkpoint_id.encode(),
        iso_offset(created_at).encode(),
        metadata,
        head or b"",
        str(n_messages).encode(),
        fields_hash,
    )
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def fields_hash(canonical_fields: bytes) -> bytes:
    """The sha256 of the state's other fields, as canonical JSON (:func:`~.rest_delta.canonical`)."""
    return hashlib.sha256(b"tulip_nb-fields/1\x00" + canonical_fields).digest()


def join_fields(
    fields: dict[str, Any], messages: Sequence[bytes], *, where: str, thread_id: str | None = None
) -> AgentState:
    """The state from its other fields (parsed) and its messages' JSON, oldest first (validated)."""
    with gc_paused():
        try:
            parsed = orjson.loads(b"[" + b",".join(messages) + b"]")
        except orjson.JSONDecodeError as e:
            raise CheckpointCorrupt(f"stored messages are not JSON: {e}", path=where, thread_id=thread_id) from e
        return state_from_obj({"messages": parsed, **fields}, where=where, thread_id=thread_id)


def state_with(
    fields: dict[str, Any], messages: list[Message], *, where: str, thread_id: str | None = None
) -> AgentState:
    """The state from its other fields (parsed, validated here) and its messages (objects, oldest first)."""
    state = state_from_obj({"messages": [], **fields}, where=where, thread_id=thread_id)
    state.messages = messages
    return state


def verify_chain(head: bytes | None, walk: Sequence[tuple[bytes, bytes]], n: int, *, where: str, **ctx: Any) -> None:
    """Check an entry walk (``(id, data)`` from the head back to the first message) against ``head``.

    Raises :class:`CheckpointCorrupt` when an entry's bytes no longer hash to its id, the walk
    does not start at ``head``, or it holds a number of messages other than ``n``.
    """
    if len(walk) != n:
        raise CheckpointCorrupt(f"history has {len(walk)} messages, the checkpoint says {n}", path=where, **ctx)
    if not n:
        return
    if walk[0][0] != head:
        raise CheckpointCorrupt("history does not start at the checkpoint's head entry", path=where, **ctx)
    for i, (eid, data) in enumerate(walk):
        parent = walk[i + 1][0] if i + 1 < n else None
        if entry_id(parent, data) != eid:
            raise CheckpointCorrupt(
                f"message {n - 1 - i} no longer matches its entry id (stored bytes changed)", path=where, **ctx
            )


@dataclass(frozen=True)
class RowWrite:
    """What a save (or an import) writes: one row and the message chain it points at."""

    checkpoint_id: str
    created_at: datetime
    metadata: dict[str, Any]
    rest: Parts
    chain: MessageChain


@dataclass(frozen=True)
class Row:
    """One stored checkpoint row (without its messages)."""

    thread_id: str
    checkpoint_id: str
    created_at: datetime
    metadata: dict[str, Any]
    n_messages: int

    @property
    def info(self) -> CheckpointInfo:
        return CheckpointInfo(self.checkpoint_id, self.thread_id, self.created_at, dict(self.metadata))


@dataclass(frozen=True)
class StoredCheckpoint:
    """A loaded, verified checkpoint and the entry ids of its messages (oldest first)."""

    checkpoint: Checkpoint
    ids: list[bytes] = field(default_factory=list)


@dataclass(frozen=True)
class Rewrite:
    """What a rewrite does to one thread in one transaction: new save metadata, rows dropped."""

    metadata: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    drop: frozenset[str] = frozenset()


SavePlanFn = Callable[[CheckpointInfo | None], RowWrite]
"""Called inside the save's transaction with the thread's latest row; returns the write (or
raises, e.g. :class:`~tulip_nb.core.errors.CheckpointConflict`, to abort it)."""
RewritePlanFn = Callable[[list[CheckpointInfo]], Rewrite]
"""Called inside the rewrite's transaction with the thread's rows, newest first."""


class HistoryStore(ABC):
    """The primitives every history backend implements, each one transaction in its store."""

    @abstractmethod
    async def save(self, thread_id: str, plan: SavePlanFn) -> Row:
        """Write ``plan(latest)`` as a row of ``thread_id`` (a row with its id is replaced).

        Stores the entries of the write's chain that are missing (checked inside the transaction:
        a concurrent delete may have collected entries the writer believed stored).
        """

    @abstractmethod
    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> StoredCheckpoint | None:
        """The row (the latest for None) with its messages, verified; None when there is none.

        Raises :class:`CheckpointCorrupt` when a digest does not match.
        """

    @abstractmethod
    async def rows(self, thread_id: str, limit: int | None = None) -> list[Row]:
        """The thread's rows, newest ``created_at`` first (ties: the greater id first)."""

    @abstractmethod
    async def all_rows(self) -> dict[str, list[Row]]:
        """Every thread's rows, newest first."""

    @abstractmethod
    async def copy(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        """Rows of ``source`` as rows of ``dest`` on the same entries (``dest`` must be empty).

        Raises :class:`CheckpointNotFound` for an empty source, :class:`CheckpointConflict` for
        a destination with rows.
        """

    @abstractmethod
    async def rewrite(self, thread_id: str, plan: RewritePlanFn) -> int:
        """Apply ``plan(rows)`` (new metadata, rows to drop) in one transaction; rows dropped."""

    @abstractmethod
    async def delete_thread(self, thread_id: str) -> int:
        """Remove every row of the thread (and the entries only it reached); rows removed."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the store's connections."""
