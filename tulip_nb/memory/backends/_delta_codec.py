"""The body codec of the file store's delta log: checkpoint contents, snapshots and deltas.

The log itself (the file, its index, appends) is :mod:`._delta_log`, compaction
:mod:`._delta_compact`, and the record format (framing, headers, scanning) :mod:`._delta_frame`,
whose names are re-exported here. This module is pure.

A checkpoint's content is its messages plus the JSON of every other :class:`AgentState` field
(:class:`Content`). A body is either

- a **snapshot**: the state's whole compact JSON, exactly what :func:`state_json_parts` writes
  (``{"messages":[...],"run_id":...}``), or
- a **delta** against a base checkpoint's content::

      u32 len(M) | M | R
      M = JSON array of the messages after the first ``keep`` ones shared with the base
      R = {"keep": k, "set": {field: value}, "append": {field: [items]}, "drop": [field],
           "order": [field], "patch": {field: {"set", "append", "drop", "order"}}}
      (``patch``: an object field such as ``metadata`` changed key by key)

  ``set`` holds the full value of each field that changed; ``append`` the items added to a list
  field that grew by appending (``tool_executions``, ``reasoning_steps``, ``errors``, ...);
  ``drop`` the fields the base has and the state has not (unknown keys); ``order`` the state's
  field order, only when it is not the base's order with new fields last. Empty parts are left
  out.

Messages are immutable and shared between saves, so the shared prefix is found by identity
(~20 ns a message), with equality of the messages' JSON as the fallback (a state rebuilt from
another store); only the new messages are serialised, so encoding costs the change, not the
history. Fields are compared by their JSON bytes, which is exact (``1``, ``1.0`` and ``true``
differ) and cheap: the state without its messages is small.

"""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from tulip_nb.core.fastload import gc_paused, messages_from_json
from tulip_nb.core.messages import Message
from tulip_nb.core.state import AgentState
from tulip_nb.memory._envelope import state_from_obj
from tulip_nb.memory.backends._delta_frame import (
    FORMAT,
    MAGIC,
    PREFIX,
    RECORD_COST,
    VERSION,
    ForeignBase,
    Frame,
    Gap,
    Header,
    Kind,
    file_header,
    file_ok,
    frame,
    frame_at,
    header_json,
    header_of,
    last_frame,
    latest_chain,
    read_bodies,
    scan_frames,
)

__all__ = [
    "FORMAT",
    "MAGIC",
    "PREFIX",
    "RECORD_COST",
    "VERSION",
    "Content",
    "DecodeError",
    "ForeignBase",
    "Frame",
    "Gap",
    "Header",
    "Kind",
    "apply_chain",
    "apply_delta",
    "choose_body",
    "common_prefix",
    "content_of_state",
    "decode_snapshot",
    "encode_delta",
    "encode_snapshot",
    "file_header",
    "frame",
    "frame_at",
    "header_json",
    "file_ok",
    "header_of",
    "latest_chain",
    "last_frame",
    "read_bodies",
    "scan_frames",
    "state_of",
]

_T = TypeVar("_T")
_EXCLUDE_MESSAGES = {"messages"}
_U32 = struct.Struct("<I")
_SNAPSHOT_HEAD = b'{"messages":['


class DecodeError(ValueError):
    """A body that does not decode (the log turns it into ``CheckpointCorrupt`` with its offset)."""

    index = 0
    """Which body of a chain (:func:`apply_chain`)."""


@dataclass(frozen=True, slots=True, eq=False)
class Content:
    """What one checkpoint holds: its messages and the JSON of each other field, in order.

    Never changed once built (every operation makes a new one), so it is shared freely between
    caches and logs. ``messages_bytes`` is the length of the messages' JSON joined with commas
    (an estimate when messages came from disk: only the snapshot rule uses it).
    """

    messages: tuple[Message, ...]
    fields: dict[str, bytes]
    messages_bytes: int
    size: int = field(init=False)
    """About the length of the state's JSON (what a snapshot of it costs to write and read)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", len(_SNAPSHOT_HEAD) + self.messages_bytes + _rest_size(self.fields) + 1)


@functools.lru_cache(maxsize=4096)
def _key(name: str) -> bytes:
    return orjson.dumps(name)


def _rest_size(fields: dict[str, bytes]) -> int:
    return 2 + sum(len(_key(k)) + 1 + len(v) for k, v in fields.items()) + max(0, len(fields) - 1)


def _rest_json(fields: dict[str, bytes]) -> bytes:
    return b"{" + b",".join([_key(k) + b":" + v for k, v in fields.items()]) + b"}"


def _joined_size(messages: Sequence[Message]) -> int:
    return sum(len(m.json_bytes()) for m in messages) + max(0, len(messages) - 1)


def common_prefix(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many leading messages ``new`` shares with ``old``: by identity, then by JSON equality."""
    if len(old) <= len(new) and all(map(operator.is_, old, new)):
        return len(old)
    keep = 0
    for a, b in zip(old, new, strict=False):
        if a is not b and a.json_bytes() != b.json_bytes():
            break
        keep += 1
    return keep


def _prefix_bytes(messages: Sequence[Message], total: int, keep: int) -> int:
    """``messages_bytes`` of the first ``keep`` of ``messages`` (all of which take ``total``)."""
    if keep >= len(messages):
        return total
    if keep == 0:
        return 0
    return max(0, total - _joined_size(messages[keep:]) - 1)


def content_of_state(state: AgentState, base: Content | None) -> tuple[Content, int]:
    """The content of ``state`` and how many leading messages it shares with ``base``.

    Only the messages after the shared prefix are serialised (their bytes are cached on the
    message objects for the body and every later save).
    """
    messages = tuple(state.messages)
    keep = common_prefix(base.messages, messages) if base is not None else 0
    new = messages[keep:]
    size = _prefix_bytes(base.messages, base.messages_bytes, keep) if base is not None else 0
    if new:
        size += _joined_size(new) + (1 if keep else 0)
    rest = AgentState.__pydantic_serializer__.to_json(state, exclude=_EXCLUDE_MESSAGES)
    fields = {k: orjson.dumps(v) for k, v in orjson.loads(rest).items()}
    return Content(messages, fields, size), keep


def choose_body(
    target: Content, keep: int, base: Content | None, base_header: Header | None, *, max_chain: int, load_factor: float
) -> tuple[Kind, bytes, int, int]:
    """The snapshot rule: ``(kind, body, load_bytes, depth)`` of the record for ``target``.

    A delta of ``base`` when the chain it ends stays within ``max_chain`` deltas and costs at most
    ``load_factor`` times the state (bodies plus :data:`RECORD_COST` a record), and is smaller
    than a snapshot; otherwise a snapshot. O(1): the base's header carries its chain's cost.
    """
    if base is not None and base_header is not None and base_header.depth < max_chain:
        body = encode_delta(base, target, keep)
        cost = base_header.load_bytes + len(body) + RECORD_COST
        if cost <= load_factor * (target.size + RECORD_COST) and len(body) < target.size:
            return Kind.DELTA, body, cost, base_header.depth + 1
    body = encode_snapshot(target)
    return Kind.SNAPSHOT, body, len(body) + RECORD_COST, 0


def encode_snapshot(content: Content) -> bytes:
    """The state's whole JSON, as :func:`~tulip_nb.core.state.state_json_parts` writes it."""
    joined = b",".join([m.json_bytes() for m in content.messages])
    rest = _rest_json(content.fields)
    return b"".join([_SNAPSHOT_HEAD, joined, b"]}" if rest == b"{}" else b"]," + rest[1:]])


def encode_delta(base: Content, target: Content, keep: int | None = None) -> bytes:
    """``target`` as a delta against ``base`` (``keep``: the shared prefix, when known)."""
    if keep is None:
        keep = common_prefix(base.messages, target.messages)
    msgs = b"[" + b",".join([m.json_bytes() for m in target.messages[keep:]]) + b"]"
    parts = [b'{"keep":' + str(keep).encode()]
    sets, appends, patches = _field_ops(base.fields, target.fields, nest=_NEST)
    if sets:
        parts.append(b'"set":{' + b",".join(sets) + b"}")
    if appends:
        parts.append(b'"append":{' + b",".join(appends) + b"}")
    if patches:
        parts.append(b'"patch":{' + b",".join(patches) + b"}")
    parts += _drop_and_order(base.fields, target.fields)
    return _U32.pack(len(msgs)) + msgs + b",".join(parts) + b"}"


def _appended(was: bytes, value: bytes) -> bool:
    """Whether the JSON array ``value`` is the JSON array ``was`` with items added at the end."""
    return (
        len(was) > 2
        and was[0:1] == b"["
        and len(value) > len(was)
        and value[len(was) - 1] == 0x2C  # ","
        and value.startswith(was[:-1])
    )


_NEST = 3
"""How deep objects are patched key by key (``metadata`` -> the manager's state -> its plan)."""


def _field_ops(
    old: Mapping[str, bytes], new: Mapping[str, bytes], *, nest: int
) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """``(sets, appends, patches)``: each changed field set whole, extended (a list that grew at
    its end), or -- for an object on both sides, ``nest`` levels deep, such as ``metadata`` --
    patched key by key the same way, so a growing list inside it (the compaction events) costs
    its new items."""
    sets: list[bytes] = []
    appends: list[bytes] = []
    patches: list[bytes] = []
    for name, value in new.items():
        was = old.get(name)
        if was == value:
            continue
        if was is not None and _appended(was, value):
            appends.append(_key(name) + b":[" + value[len(was) :])
        elif nest > 0 and was is not None and was[0:1] == b"{" and value[0:1] == b"{":
            inner_old = {k: orjson.dumps(v) for k, v in orjson.loads(was).items()}
            inner_new = {k: orjson.dumps(v) for k, v in orjson.loads(value).items()}
            i_sets, i_appends, i_patches = _field_ops(inner_old, inner_new, nest=nest - 1)
            ops = []
            if i_sets:
                ops.append(b'"set":{' + b",".join(i_sets) + b"}")
            if i_appends:
                ops.append(b'"append":{' + b",".join(i_appends) + b"}")
            if i_patches:
                ops.append(b'"patch":{' + b",".join(i_patches) + b"}")
            ops += _drop_and_order(inner_old, inner_new)
            patch = b"{" + b",".join(ops) + b"}"
            if len(patch) < len(value):
                patches.append(_key(name) + b":" + patch)
            else:
                sets.append(_key(name) + b":" + value)
        else:
            sets.append(_key(name) + b":" + value)
    return sets, appends, patches


def _drop_and_order(old: Mapping[str, bytes], new: Mapping[str, bytes]) -> list[bytes]:
    """The ``drop`` and ``order`` ops that turn ``old``'s keys into ``new``'s, in ``new``'s order."""
    parts = []
    dropped = [k for k in old if k not in new]
    if dropped:
        parts.append(b'"drop":' + orjson.dumps(dropped))
    expected = [k for k in old if k in new] + [k for k in new if k not in old]
    if list(new) != expected:
        parts.append(b'"order":' + orjson.dumps(list(new)))
    return parts


def _messages(raw: Any) -> tuple[Message, ...]:
    try:
        return tuple(messages_from_json(raw))
    except ValidationError as e:
        raise DecodeError(f"invalid messages: {e.errors(include_url=False)[:1]}") from e


def decode_snapshot(body: bytes) -> Content:
    """The content of a snapshot body."""
    with gc_paused():
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise DecodeError(f"invalid snapshot JSON: {e}") from e
        if type(obj) is not dict:
            raise DecodeError("snapshot is not a JSON object")
        messages = _messages(obj.pop("messages", []))
        fields = {k: orjson.dumps(v) for k, v in obj.items()}
    size = max(0, len(body) - len(_SNAPSHOT_HEAD) - _rest_size(fields) - 1)
    return Content(messages, fields, size)


def apply_delta(base: Content, body: bytes) -> Content:
    """The content a delta body describes, given its base's."""
    return apply_chain(base, [body])


def apply_chain(start: Content | None, bodies: Sequence[bytes]) -> Content:
    """The content at the end of a chain: ``start`` then each delta body in order.

    With ``start`` None the first body is the chain's snapshot. The work is the deltas' size (one
    working list and dict, one :class:`Content` at the end), not the chain's length times the
    state's. A :class:`DecodeError` carries the ``index`` of the body that does not decode.
    """
    with gc_paused():  # once for the chain: toggling it per body would collect once per body
        first = 0
        if start is None:
            start, first = _at(0, decode_snapshot, bodies[0]), 1
        if first == len(bodies):
            return start
        messages, fields, size = list(start.messages), dict(start.fields), start.messages_bytes
        for i in range(first, len(bodies)):
            size = _at(i, _apply_into, messages, fields, size, bodies[i])
        return Content(tuple(messages), fields, size)


def _at(index: int, fn: Callable[..., _T], *args: Any) -> _T:
    try:
        return fn(*args)
    except DecodeError as e:
        e.index = index
        raise


def _apply_into(messages: list[Message], fields: dict[str, bytes], size: int, body: bytes) -> int:
    """Apply one delta to a working content in place; its new ``messages_bytes``."""
    try:
        (mlen,) = _U32.unpack_from(body)
        raw_msgs = orjson.loads(body[4 : 4 + mlen])
        ops = orjson.loads(body[4 + mlen :])
        keep = ops["keep"]
        if type(keep) is not int or not 0 <= keep <= len(messages) or type(raw_msgs) is not list:
            raise DecodeError(f"bad delta: keep={keep!r} of {len(messages)} base messages")
        new = _messages(raw_msgs)
        size = _prefix_bytes(messages, size, keep)
        del messages[keep:]
        if new:
            size += mlen - 2 + (1 if keep else 0)
            messages.extend(new)
        _apply_ops(fields, ops)
    except (struct.error, orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise DecodeError(f"bad delta: {type(e).__name__}: {e}") from e
    return size


def _apply_ops(fields: dict[str, bytes], ops: Mapping[str, Any]) -> None:
    """Apply ``drop``, ``set``, ``append`` and ``order`` to one level of fields (in place)."""
    for name in ops.get("drop", ()):
        fields.pop(name, None)
    for name, value in ops.get("set", {}).items():
        fields[name] = orjson.dumps(value)
    for name, items in ops.get("append", {}).items():
        fields[name] = fields[name][:-1] + b"," + orjson.dumps(items)[1:]
    for name, patch in ops.get("patch", {}).items():
        inner = {k: orjson.dumps(v) for k, v in orjson.loads(fields[name]).items()}
        _apply_ops(inner, patch)
        fields[name] = b"{" + b",".join([_key(k) + b":" + v for k, v in inner.items()]) + b"}"
    order = ops.get("order")
    if order is not None:
        reordered = {k: fields[k] for k in order}
        fields.clear()
        fields.update(reordered)


def state_of(content: Content, *, where: str, thread_id: str | None = None) -> AgentState:
    """A fresh :class:`AgentState` of ``content`` (validated as the envelope path validates).

    The messages are shared (they are immutable); everything else is decoded anew, so changing the
    state never changes a cache.
    """
    with gc_paused():
        rest = orjson.loads(_rest_json(content.fields))
        state = state_from_obj(rest, where=where, thread_id=thread_id)
    state.messages = list(content.messages)
    return state
