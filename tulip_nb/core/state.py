"""AgentState: everything a checkpoint holds, in tulip's format.

An ``AgentState`` is what a checkpointer saves for one thread at one moment: the full message
history plus the per-turn bookkeeping (iterations, tool executions, token counters, errors) and the
application's ``metadata``. Every field and default of tulip-agents 2.28 is here, and unknown keys
are kept and written back, so loading and re-saving a foreign checkpoint loses nothing.

Counters, ``tool_executions``, ``reasoning_steps``, ``errors`` and ``iteration`` describe the last
turn; ``messages``, ``metadata`` and ``provider_state`` carry across turns.
"""

from __future__ import annotations

import hashlib
import operator
import threading
import uuid
from collections import OrderedDict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tulip_nb.core._messages import DIGEST_CACHE, Message, ToolCall
from tulip_nb.core._time import AwareDatetime, utcnow
from tulip_nb.core.canonical import written_json

__all__ = ["message_digest", "messages_digest", "prefix_digests"]

DEFAULT_READ_ONLY_TOOLS: tuple[str, ...] = (
    "cat",
    "find_files",
    "glob",
    "grep",
    "list_dir",
    "list_directory",
    "list_files",
    "ls",
    "read",
    "read_file",
    "search_files",
    "todo_read",
    "view",
)
DEFAULT_TERMINAL_TOOLS: tuple[str, ...] = ("complete", "done", "finish", "submit")


def _new_run_id() -> str:
    return uuid.uuid4().hex


class ToolExecution(BaseModel):
    """The record of one tool call executed by the agent (also the idempotency ledger)."""

    model_config = ConfigDict(extra="allow")

    tool_name: str
    tool_call_id: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: str | None = None
    error: str | None = None
    duration_ms: float | None = None
    timestamp: AwareDatetime = Field(default_factory=utcnow)
    idempotent_cache_hit: bool = False


class ReasoningStep(BaseModel):
    """One loop iteration's thought, tool calls and results."""

    model_config = ConfigDict(extra="allow")

    iteration: int
    thought: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[ToolExecution] = Field(default_factory=list)
    reflection: str | None = None
    confidence_delta: float = 0.0
    timestamp: AwareDatetime = Field(default_factory=utcnow)


class AgentState(BaseModel):
    """The persisted state of one thread (see the module docstring)."""

    model_config = ConfigDict(extra="allow", validate_assignment=False)

    run_id: str = Field(default_factory=_new_run_id)
    agent_id: str | None = None
    messages: list[Message] = Field(default_factory=list)
    iteration: int = 0
    max_iterations: int = 20
    tool_executions: list[ToolExecution] = Field(default_factory=list)
    reasoning_steps: list[ReasoningStep] = Field(default_factory=list)
    confidence: float = 0.0
    confidence_threshold: float = 0.85
    confidence_history: list[float] = Field(default_factory=list)
    tool_history: list[str] = Field(default_factory=list)
    tool_loop_threshold: int = 3
    tool_loop_read_only_threshold: int | None = None
    tool_loop_read_only_tools: list[str] = Field(default_factory=lambda: list(DEFAULT_READ_ONLY_TOOLS))
    tool_loop_warnings: list[tuple[str, int]] = Field(default_factory=list)
    terminal_tools: list[str] = Field(default_factory=lambda: list(DEFAULT_TERMINAL_TOOLS))
    total_tokens_used: int = 0
    prompt_tokens_used: int = 0
    completion_tokens_used: int = 0
    cache_creation_tokens_used: int = 0
    cache_read_tokens_used: int = 0
    cached_tokens_used: int = 0
    cache_write_tokens_used: int = 0
    reported_cost_usd: float = 0.0
    reported_cost_calls: int = 0
    token_budget: int | None = None
    input_price_per_mtok: float | None = None
    output_price_per_mtok: float | None = None
    cost_usd_used: float = 0.0
    cost_budget_usd: float | None = None
    completion_mode: str = "auto"
    """``"auto"`` or ``"explicit"``; other values from newer writers are kept as they are."""
    errors: list[str] = Field(default_factory=list)
    provider_state: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    started_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)

    @property
    def extra(self) -> dict[str, Any]:
        """Keys this version does not know, kept verbatim for the next save."""
        return dict(self.__pydantic_extra__ or {})

    def to_json_bytes(self) -> bytes:
        """Compact JSON of the whole state; see :func:`state_json_bytes`."""
        return state_json_bytes(self)


_EXCLUDE_MESSAGES = {"messages"}


class _BlobEntry:
    """One thread's cached messages: their refs, joined bytes (or None) and running digest."""

    __slots__ = ("blob", "checked", "hashed", "hasher", "refs")

    def __init__(self, refs: list[Message], blob: bytearray | None) -> None:
        self.refs = refs
        self.blob = blob
        self.hasher: Any = None  # hashlib sha256 over the leaf digests of refs[:hashed]
        self.hashed = 0
        self.checked: list[Message] | None = None  # the list digest() just checked, for blob()

    def extends(self, messages: list[Message]) -> bool:
        """Whether ``messages`` starts with exactly the cached message objects (identity)."""
        refs = self.refs
        return len(refs) <= len(messages) and all(map(operator.is_, refs, messages))

    def append(self, new: list[Message]) -> None:
        blob = self.blob
        if blob is not None:
            for message in new:
                if blob:
                    blob += b","
                blob += message.json_bytes()
        self.refs.extend(new)


def message_digest(message: Message) -> bytes:
    """sha256 of a message's :func:`~tulip_nb.core.canonical.written_json` (keys sorted at every
    level, numbers as written), the leaf of a thread's hash.

    Sorting keys makes the digest independent of the key order a store hands back (PostgreSQL
    ``jsonb`` reorders keys, tulip writes its own order), so a checkpoint verifies on every backend.
    Computed once per message object (messages are immutable) and kept beside its JSON bytes, so
    verifying the consecutive checkpoints of a thread, which share message objects, hashes each
    message once. Numbers are hashed as written, not by value as :mod:`tulip_nb.core.canonical`
    compares messages: these digests are persisted in signed saves (that module says why).
    """
    cached: bytes | None = message.__dict__.get(DIGEST_CACHE)
    if cached is not None:
        return cached
    digest = hashlib.sha256(written_json(message)).digest()
    message.__dict__[DIGEST_CACHE] = digest
    return digest


class MessageBlobCache:
    """The joined JSON of the messages last encoded per key (a thread), so a save appends only.

    A thread grows by appending messages, and each save of it re-emits the whole history. With this
    cache the history is not even re-joined: when the messages are the same objects as last time
    plus new ones at the end (checked by identity, ~20 ns each), only the new messages' bytes are
    appended to a ``bytearray`` (amortised O(new)). Anything else (a message replaced or removed)
    rebuilds the blob. At most ``capacity`` threads are kept, least recently used first out.

    The cache also keeps a running sha256 over the messages' :func:`message_digest` (see
    :meth:`digest`), so signing a save (``tulip_nb.memory.integrity``) hashes only the new messages.

    Not thread-safe per key for :meth:`blob`: callers serialise saves of one thread (the backends
    hold a lock). :meth:`digest` is thread-safe.

    >>> from tulip_nb.core import Message
    >>> cache = MessageBlobCache()
    >>> msgs = [Message.user("hi")]
    >>> bytes(cache.blob("t", msgs))
    b'{"role":"user","content":"hi","tool_calls":[],"tool_call_id":null,"name":null,"metadata":{}}'
    >>> cache.digest("t", msgs) == messages_digest(msgs)
    True
    """

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, _BlobEntry] = OrderedDict()
        self._lock = threading.Lock()

    def _store(self, key: str, entry: _BlobEntry) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def blob(self, key: str, messages: list[Message]) -> bytearray:
        """The messages' JSON joined with commas (no brackets); valid until the next call for ``key``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None and entry.blob is not None:
            checked, entry.checked = entry.checked, None
            if (
                checked is messages
                and len(messages) == len(entry.refs)
                and (not messages or entry.refs[-1] is messages[-1])
            ):
                return entry.blob  # digest() checked this very list a moment ago, in the same save
            if entry.extends(messages):
                entry.append(messages[len(entry.refs) :])
                return entry.blob
        if entry is not None and entry.blob is None and entry.extends(messages):  # digest-only so far
            entry.blob = bytearray(b",".join([m.json_bytes() for m in entry.refs]))
            entry.append(messages[len(entry.refs) :])
            return entry.blob
        blob = bytearray(b",".join([m.json_bytes() for m in messages]))
        self._store(key, _BlobEntry(list(messages), blob))
        return blob

    def digest(self, key: str, messages: list[Message]) -> bytes:
        """:func:`messages_digest` of ``messages``, hashing only those not seen last time for ``key``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not entry.extends(messages):
                entry = _BlobEntry(list(messages), None)
                self._entries[key] = entry
                while len(self._entries) > self.capacity:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(key)
                if len(entry.refs) < len(messages):
                    entry.append(messages[len(entry.refs) :])
            if entry.hasher is None:
                entry.hasher, entry.hashed = hashlib.sha256(_MESSAGES_TAG), 0
            for message in entry.refs[entry.hashed :]:
                entry.hasher.update(message_digest(message))
            entry.hashed = len(entry.refs)
            entry.checked = messages if entry.blob is not None else None
            return bytes(entry.hasher.copy().digest())

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)


_MESSAGES_TAG = b"tulip_nb messages sha256/1\n"


def messages_digest(messages: list[Message]) -> bytes:
    """sha256 over the :func:`message_digest` of each message, in order (computed from scratch)."""
    h = hashlib.sha256(_MESSAGES_TAG)
    for message in messages:
        h.update(message_digest(message))
    return h.digest()


def prefix_digests(messages: list[Message]) -> list[bytes]:
    """:func:`messages_digest` of every prefix: item ``n`` is the digest of ``messages[:n]`` (one pass)."""
    h = hashlib.sha256(_MESSAGES_TAG)
    out = [h.digest()]
    for message in messages:
        h.update(message_digest(message))
        out.append(h.digest())
    return out


def state_json_parts(
    state: AgentState, *, cache: MessageBlobCache | None = None, key: str | None = None
) -> list[bytes | bytearray]:
    """The compact JSON of ``state`` as chunks to write or join, reusing each message's cached bytes.

    The cost of a save is then the new messages plus the small per-turn fields, not the whole
    history: a message is serialised the first time it is saved and never again. With a
    :class:`MessageBlobCache` (and the thread as ``key``) the history is not even re-joined. Callers
    hand the chunks to ``os.writev`` or join them once.
    """
    rest = AgentState.__pydantic_serializer__.to_json(state, exclude=_EXCLUDE_MESSAGES)
    if cache is not None and key is not None:
        messages: bytes | bytearray = cache.blob(key, state.messages)
    else:
        messages = b",".join([m.json_bytes() for m in state.messages])
    return [b'{"messages":[', messages, b"]}" if rest == b"{}" else b"]," + rest[1:]]


def state_json_bytes(state: AgentState) -> bytes:
    """Serialise ``state`` to compact JSON (see :func:`state_json_parts`)."""
    return b"".join(state_json_parts(state))
