"""The hash chain that makes a thread tamper-evident: computing one checkpoint's hash. Pure, no I/O.

Every signed save stores these keys in the checkpoint's save metadata (keys tulip ignores)::

    tulip_nb_hash         sha256 over the checkpoint's canonical content and its parent's hash
    tulip_nb_parent_hash  the parent checkpoint's tulip_nb_hash (None: no parent, or an unsigned one)
    tulip_nb_hash_alg     "sha256-chain/2" ("sha256-chain/1" for checkpoints signed before /2)
    tulip_nb_seq          (/2) the thread's running count of saves: the latest's seq + 1, or 1
    tulip_nb_created_at   (/2) the checkpoint's created_at, ISO 8601 with +00:00 (when the backend
                          passed it to save_metadata, as every built-in one does)

``tulip_nb_seq`` and ``tulip_nb_created_at`` are ordinary save-metadata keys, so they are hashed
with the rest of the save metadata: the hash binds the checkpoint's ``created_at`` (verify checks
the stored stamp equals it) and its place in the thread's save order. ``/1`` checkpoints carry
neither and still verify under ``/1`` rules (the ``/1`` tag); stored data is never rewritten.

The content is the whole state (every message, every counter, the application metadata) plus the
caller's save metadata, in a canonical form that survives any store: each message is hashed as JSON
with sorted keys, the per-message digests are chained in order, the rest of the state and the save
metadata are hashed as sorted-key JSON. Left out, because copying or importing a thread rewrites them
legitimately: the checkpoint and thread ids (``created_at`` is kept verbatim by a copy, an import
and an export, and is bound through ``tulip_nb_created_at``), ``parent_checkpoint_id`` (the chain
itself binds the parent, by its hash), ``copied_from`` and ``tulip_nb_pruned`` (written when a prune
re-links a checkpoint to a surviving ancestor, after it was signed).

Saves hash incrementally: the per-message digests are chained in a running sha256 kept per thread
in a :class:`~tulip_nb.core.state.MessageBlobCache` (identity-checked, like the message bytes), so
a save hashes only its new messages plus the small rest of the state. :mod:`tulip_nb.memory.integrity`
recomputes everything from scratch to verify.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from tulip_nb.core import Message, iso_offset
from tulip_nb.core.keys import (
    ALG_KEY,
    COPIED_FROM_KEY,
    CREATED_AT_KEY,
    HASH_KEY,
    PARENT_HASH_KEY,
    PARENT_KEY,
    PRUNED_KEY,
    SEQ_KEY,
)
from tulip_nb.core.state import AgentState, MessageBlobCache, messages_digest

__all__ = [
    "ALG",
    "ALGS",
    "ALG_KEY",
    "ALG_V1",
    "CREATED_AT_KEY",
    "HASH_KEY",
    "PARENT_HASH_KEY",
    "SEQ_KEY",
    "checkpoint_hash",
    "next_seq",
    "running_digest",
    "sign_metadata",
]

ALG = "sha256-chain/2"
"""The algorithm new saves sign with."""
ALG_V1 = "sha256-chain/1"
"""The first algorithm: no ``tulip_nb_seq`` nor ``tulip_nb_created_at``; still verified."""
ALGS = (ALG_V1, ALG)
UNHASHED_KEYS = frozenset((HASH_KEY, PARENT_HASH_KEY, ALG_KEY, PARENT_KEY, PRUNED_KEY, COPIED_FROM_KEY))
_TAGS = {alg: f"tulip_nb checkpoint {alg}\n".encode() for alg in ALGS}
_SIGNED_ONLY = (HASH_KEY, PARENT_HASH_KEY, ALG_KEY, SEQ_KEY, CREATED_AT_KEY)
"""Keys only a signing save writes (an unsigned save removes them from the caller's metadata)."""
_EXCLUDE_MESSAGES = {"messages"}

_DIGESTS = MessageBlobCache(capacity=256)
"""Running message digests for backends that keep no blob cache of their own (digests only)."""


def _canonical(data: bytes | bytearray) -> bytes:
    try:
        return orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return bytes(data)


def state_rest_json(state: AgentState) -> bytes:
    """Canonical JSON of everything in the state except its messages."""
    return _canonical(AgentState.__pydantic_serializer__.to_json(state, exclude=_EXCLUDE_MESSAGES))


def metadata_json(metadata: Mapping[str, Any]) -> bytes:
    """Canonical JSON of the hashed part of the save metadata."""
    kept = {k: v for k, v in metadata.items() if k not in UNHASHED_KEYS}
    try:
        return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except (orjson.JSONEncodeError, TypeError):  # mixed key types cannot be sorted: go through JSON
        return _canonical(orjson.dumps(kept, option=orjson.OPT_NON_STR_KEYS))


def checkpoint_hash(
    state: AgentState,
    metadata: Mapping[str, Any],
    parent_hash: str | None,
    *,
    messages_sha: bytes | None = None,
    alg: str = ALG,
) -> str:
    """The hex ``tulip_nb_hash`` of a checkpoint (``messages_sha``: a cached :func:`messages_digest`).

    ``alg`` is one of :data:`ALGS` (``KeyError`` otherwise); the two differ in the tag only (what
    ``/2`` adds, ``tulip_nb_seq`` and ``tulip_nb_created_at``, is hashed with the save metadata).
    """
    h = hashlib.sha256(_TAGS[alg])
    h.update(messages_sha if messages_sha is not None else messages_digest(state.messages))
    h.update(hashlib.sha256(state_rest_json(state)).digest())
    h.update(hashlib.sha256(metadata_json(metadata)).digest())
    h.update(b"parent:" + (parent_hash or "").encode())
    return h.hexdigest()


def running_digest(key: str, messages: list[Message], cache: MessageBlobCache | None = None) -> bytes:
    """:func:`~tulip_nb.core.state.messages_digest` of a thread's messages, hashing only the new ones."""
    return (cache or _DIGESTS).digest(key, messages)


def next_seq(latest_id: str | None, latest_metadata: Mapping[str, Any] | None) -> int:
    """The ``tulip_nb_seq`` of the next save: the latest's + 1; 1 for a new thread or after a latest
    without one (written by tulip, unsigned, or signed with ``/1``)."""
    seq = latest_metadata.get(SEQ_KEY) if latest_id is not None and latest_metadata is not None else None
    return seq + 1 if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0 else 1


def sign_metadata(
    meta: dict[str, Any],
    state: AgentState,
    *,
    given: Mapping[str, Any] | None,
    latest_id: str | None,
    latest_metadata: Mapping[str, Any] | None,
    key: str,
    cache: MessageBlobCache | None = None,
    sign: bool = True,
    messages_sha: bytes | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """Add the hash keys to ``meta`` (the save metadata about to be stored) and return it.

    The parent's hash is the thread latest's ``tulip_nb_hash`` (``latest_metadata``, which the
    backend read in the same critical section that chose the parent), unless the caller named
    another parent (a fork, an import): then the caller's ``tulip_nb_parent_hash``, if any.
    ``tulip_nb_seq`` is :func:`next_seq` of the latest; ``created_at`` (the one the backend stores)
    becomes ``tulip_nb_created_at``. With ``sign=False`` (a checkpointer built with ``sign=False``)
    the keys are only removed: an unsigned checkpoint never carries them.
    """
    for k in _SIGNED_ONLY:
        meta.pop(k, None)
    if not sign:
        return meta
    parent = meta.get(PARENT_KEY)
    if given is not None and PARENT_KEY in given and parent != latest_id:
        ph = given.get(PARENT_HASH_KEY)
        parent_hash = ph if isinstance(ph, str) else None
    elif parent is not None and parent == latest_id and latest_metadata is not None:
        ph = latest_metadata.get(HASH_KEY)
        parent_hash = ph if isinstance(ph, str) else None
    else:
        parent_hash = None
    meta[SEQ_KEY] = next_seq(latest_id, latest_metadata)
    if created_at is not None:
        meta[CREATED_AT_KEY] = iso_offset(created_at)
    sha = messages_sha if messages_sha is not None else running_digest(key, state.messages, cache)
    meta[HASH_KEY] = checkpoint_hash(state, meta, parent_hash, messages_sha=sha)
    meta[PARENT_HASH_KEY] = parent_hash
    meta[ALG_KEY] = ALG
    return meta
