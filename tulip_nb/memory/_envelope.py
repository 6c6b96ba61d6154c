"""The checkpoint envelope: tulip's file/HTTP record around one AgentState. Pure, no I/O.

Written as compact JSON with ``checkpoint_id`` FIRST (tulip finds it by reading the first KiB)::

    {"checkpoint_id": ..., "thread_id": ..., "created_at": "...+00:00", "metadata": {...},
     "state": {...}}

tulip writes ``metadata`` after ``state``; tulip_nb writes it before, so listing a thread's
history (ids, times, lineage) reads a few hundred bytes per checkpoint instead of whole files.
Both orders are read.
"""

from __future__ import annotations

import fnmatch
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from tulip_nb.core import iso_offset, parse_datetime
from tulip_nb.core.errors import CheckpointCorrupt
from tulip_nb.core.fastload import gc_paused, messages_from_json
from tulip_nb.core.state import AgentState, MessageBlobCache, state_json_parts
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo

__all__ = [
    "checkpoint_from_obj",
    "decode_envelope",
    "encode_envelope",
    "encode_envelope_parts",
    "info_from_head",
    "info_row",
    "matches_pattern",
    "metadata_matches",
    "read_head",
    "search_hit",
    "search_state",
    "state_from_obj",
]

HEAD_BYTES = 4096
_ENVELOPE_KEYS = frozenset(("checkpoint_id", "thread_id", "created_at", "metadata", "state"))


def encode_envelope_parts(
    checkpoint_id: str,
    thread_id: str,
    created_at: datetime,
    state: AgentState,
    metadata: dict[str, Any],
    extra: dict[str, Any] | None = None,
    *,
    cache: MessageBlobCache | None = None,
) -> list[bytes | bytearray]:
    """One envelope as chunks (for ``os.writev``); the state reuses cached message JSON."""
    head = [
        b'{"checkpoint_id":',
        orjson.dumps(checkpoint_id),
        b',"thread_id":',
        orjson.dumps(thread_id),
        b',"created_at":',
        orjson.dumps(iso_offset(created_at)),
        b',"metadata":',
        orjson.dumps(metadata, option=orjson.OPT_NON_STR_KEYS),
    ]
    if extra:
        head += [b",", orjson.dumps(extra, option=orjson.OPT_NON_STR_KEYS)[1:-1]]
    head.append(b',"state":')
    state_parts = state_json_parts(state, cache=cache, key=thread_id)
    return [b"".join(head) + state_parts[0], state_parts[1], state_parts[2] + b"}"]


def encode_envelope(
    checkpoint_id: str,
    thread_id: str,
    created_at: datetime,
    state: AgentState,
    metadata: dict[str, Any],
    extra: dict[str, Any] | None = None,
    *,
    cache: MessageBlobCache | None = None,
) -> bytes:
    """Bytes of one envelope (see :func:`encode_envelope_parts`)."""
    return b"".join(encode_envelope_parts(checkpoint_id, thread_id, created_at, state, metadata, extra, cache=cache))


def decode_envelope(data: bytes, *, where: str, thread_id: str | None = None) -> Checkpoint:
    """Parse and validate an envelope; :class:`CheckpointCorrupt` naming ``where`` if it is not one."""
    with gc_paused():
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise CheckpointCorrupt(f"invalid JSON: {e}", path=where, thread_id=thread_id) from e
        if not isinstance(obj, dict):
            raise CheckpointCorrupt("envelope is not a JSON object", path=where, thread_id=thread_id)
        return checkpoint_from_obj(obj, where=where, thread_id=thread_id)


def checkpoint_from_obj(obj: dict[str, Any], *, where: str, thread_id: str | None = None) -> Checkpoint:
    """A :class:`Checkpoint` from a parsed envelope dict (which it may consume)."""
    info = info_from_head(obj, where=where)
    raw_state = obj.get("state")
    if not isinstance(raw_state, dict):
        raise CheckpointCorrupt("envelope has no state object", path=where, thread_id=thread_id)
    return Checkpoint(
        info.checkpoint_id,
        info.thread_id,
        info.created_at,
        state_from_obj(raw_state, where=where, thread_id=thread_id),
        info.metadata,
        {k: v for k, v in obj.items() if k not in _ENVELOPE_KEYS},
    )


def state_from_obj(raw_state: dict[str, Any], *, where: str, thread_id: str | None = None) -> AgentState:
    """Validate a parsed AgentState dict; messages take the fast path of :mod:`tulip_nb.core.fastload`."""
    rest = {k: v for k, v in raw_state.items() if k != "messages"}
    try:
        state = AgentState.model_validate(rest)
        state.messages = messages_from_json(raw_state.get("messages", []))
    except ValidationError as e:
        raise CheckpointCorrupt(f"invalid state: {_first_error(e)}", path=where, thread_id=thread_id) from e
    return state


def _first_error(e: ValidationError) -> str:
    errs = e.errors(include_url=False)
    if not errs:
        return str(e)
    first = errs[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"{loc or '<root>'}: {first.get('msg')}{more}"


def read_head(head: bytes) -> dict[str, Any] | None:
    """Parse the keys before ``"state"`` from the first bytes of an envelope, if they are all there.

    Returns a dict with ``checkpoint_id``, ``thread_id``, ``created_at`` (and ``metadata`` when it
    precedes the state), or None when the head cannot be read this way (then parse the whole file).
    """
    pos = head.find(b'"state"')
    while pos > 0:
        prefix = head[:pos].rstrip()
        if prefix.endswith(b","):
            try:
                obj = orjson.loads(prefix[:-1] + b"}")
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict) and {"checkpoint_id", "thread_id", "created_at"} <= obj.keys():
                return obj
        pos = head.find(b'"state"', pos + 1)
    return None


def info_from_head(obj: dict[str, Any], *, where: str) -> CheckpointInfo:
    try:
        cid, tid = obj["checkpoint_id"], obj["thread_id"]
        if not isinstance(cid, str) or not isinstance(tid, str):
            raise TypeError("checkpoint_id and thread_id must be strings")
        created = parse_datetime(obj["created_at"])
        meta = obj.get("metadata")
        meta = {} if meta is None else meta  # not ``or {}``: a list or "" is a corrupt envelope, not empty
        if not isinstance(meta, dict):
            raise TypeError("metadata must be an object")
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointCorrupt(f"bad envelope header: {e}", path=where) from e
    return CheckpointInfo(cid, tid, created, meta)


def matches_pattern(thread_id: str, pattern: str) -> bool:
    """Glob match (``*``, ``?``, ``[...]``) on the whole thread id; ``"*"`` matches everything."""
    return pattern in ("*", "") or fnmatch.fnmatchcase(thread_id, pattern)


def metadata_matches(info_metadata: dict[str, Any], state: AgentState | None, key: str, value: Any) -> bool:
    """``key == value`` in the save metadata, else in the state's application metadata."""
    if key in info_metadata:
        return bool(info_metadata[key] == value)
    return state is not None and key in state.metadata and state.metadata[key] == value


def search_state(state: AgentState, query: str) -> tuple[float, list[int], str]:
    """Score a state against a case-insensitive all-terms query.

    Returns (score, indices of matching messages, a snippet around the first hit); score 0 means
    not every term occurs.
    """
    terms = [t for t in query.lower().split() if t]
    if not terms:
        return 0.0, [], ""
    found: set[str] = set()
    hits: list[int] = []
    score = 0.0
    snippet = ""
    for i, msg in enumerate(state.messages):
        text = (msg.content or "").lower()
        if msg.tool_calls:
            text += " " + " ".join(
                c.name.lower() + " " + orjson.dumps(c.arguments).decode().lower() for c in msg.tool_calls
            )
        counts = [(t, text.count(t)) for t in terms]
        matched = [t for t, c in counts if c]
        if matched:
            hits.append(i)
            found.update(matched)
            score += sum(c for _, c in counts)
            if not snippet:
                at = text.find(matched[0])
                raw = msg.content or text
                snippet = raw[max(0, at - 60) : at + 100]
    if found != set(terms):
        return 0.0, [], ""
    return score, hits, snippet


def info_row(info: CheckpointInfo) -> dict[str, Any]:
    """A checkpoint's id, thread, time and save metadata as a plain dict."""
    return {
        "thread_id": info.thread_id,
        "checkpoint_id": info.checkpoint_id,
        "created_at": iso_offset(info.created_at),
        "metadata": dict(info.metadata),
    }


def search_hit(ckpt: Checkpoint, score: float, hits: list[int], snippet: str) -> dict[str, Any]:
    return {
        "thread_id": ckpt.thread_id,
        "checkpoint_id": ckpt.checkpoint_id,
        "created_at": iso_offset(ckpt.created_at),
        "score": score,
        "message_indices": hits,
        "snippet": snippet,
        "metadata": ckpt.metadata,
    }
