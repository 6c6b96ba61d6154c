"""A checkpoint row's non-message state, serialised by part and stored as a patch (pure).

Between two saves of a thread the state's other fields barely change, but some grow: ``metadata``
holds the turn log and the compaction events. Stored whole at every save, a 300-turn thread's rows
hold ~97 MB of them for 3 MB of messages, and re-encoding them through pydantic's ``Any`` path costs
more than the rest of the save. So the fields are handled as **parts**, each the canonical JSON
(``orjson``) of one value: every top-level field but ``metadata``, and each key of ``metadata``
(:func:`state_parts`; the field's JSON is the parts joined, ``metadata`` last: :func:`joined`).

A row stores either

- a **snapshot**: the joined canonical JSON, or
- a **patch** against a *base* row of the same thread (usually its parent)::

      {"s": {key: value}, "d": [key], "a": {key: [items]}, "p": {key: patch}}

  ``s`` sets a key, ``d`` drops keys, ``a`` appends items to a list that grew by appending (found
  on the bytes: the old JSON array is a prefix of the new one), ``p`` patches an object key by key:
  ``metadata``, and the objects inside it down to three levels (a manager's state). Empty parts
  are left out.

The diff compares bytes, so it is exact (``1``, ``1.0`` and ``true`` differ), and a patch applied
to its base's parsed fields dumps to exactly :func:`joined` of the new parts (a key order that a
patch would not reproduce is written as a snapshot). A snapshot is also written every
:data:`MAX_DEPTH` patches, and when the patches since the last one would outweigh it, so a load
applies a bounded number of them.

>>> old = {"iteration": b"1", "metadata": {"turns": b'[{"t":0}]', "user": b'"u42"'}}
>>> new = {"iteration": b"2", "metadata": {"turns": b'[{"t":0},{"t":1}]', "user": b'"u42"'}}
>>> patch = orjson.loads(diff(old, new) or b"")
>>> patch
{'s': {'iteration': 2}, 'p': {'metadata': {'a': {'turns': [{'t': 1}]}}}}
>>> orjson.dumps(apply(orjson.loads(joined(old)), patch)) == joined(new)
True
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson
import pydantic_core

from tulip_nb.core.state import AgentState

__all__ = [
    "MAX_DEPTH",
    "META",
    "Encoded",
    "Parts",
    "PatchError",
    "apply",
    "decode",
    "diff",
    "encode",
    "joined",
    "pack",
    "parts_of_json",
    "state_parts",
    "unpack",
]

MAX_DEPTH = 32
"""At most this many patches between two snapshots."""
META = "metadata"
_COMPRESS_MIN = 512
"""Blobs of at least this many bytes are stored zlib-compressed."""
_NATIVE = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
_SERIALIZER = AgentState.__pydantic_serializer__
_EXCLUDE = {"messages", META}

Parts = dict[str, Any]
"""Top-level key -> canonical JSON bytes; ``"metadata"`` -> its key -> canonical JSON bytes."""


class PatchError(ValueError):
    """A stored snapshot or patch cannot be read (corrupt bytes, or a patch that does not fit)."""


def _canonical(value: Any) -> bytes:
    """``value``'s JSON as pydantic writes it, in orjson's canonical form.

    orjson writes JSON-native values (what metadata almost always holds) ~15x faster than
    pydantic's ``Any`` path, and the same JSON; anything else (a datetime, a model, a set, a dict
    with non-string keys, a subclass) goes through pydantic, as a save always did.
    """
    try:
        return orjson.dumps(value, option=_NATIVE)
    except TypeError:
        return orjson.dumps(orjson.loads(pydantic_core.to_json(value)))


def state_parts(state: AgentState) -> Parts:
    """The parts of ``state``'s fields other than its messages."""
    top = orjson.loads(_SERIALIZER.to_json(state, exclude=_EXCLUDE))
    parts: Parts = {key: orjson.dumps(value) for key, value in top.items()}
    parts[META] = {key: _canonical(value) for key, value in state.metadata.items()}
    return parts


def parts_of_json(fields: bytes) -> Parts:
    """The parts of the fields' JSON (an object; ``metadata`` an object when present)."""
    obj = orjson.loads(fields)
    if not isinstance(obj, dict):
        raise PatchError("the state's fields are not a JSON object")
    parts: Parts = {key: orjson.dumps(value) for key, value in obj.items() if key != META}
    meta = obj.get(META, {})
    if not isinstance(meta, dict):
        raise PatchError("the state's metadata is not a JSON object")
    parts[META] = {key: orjson.dumps(value) for key, value in meta.items()}
    return parts


def _object(items: dict[str, bytes]) -> bytes:
    return b"{" + b",".join(orjson.dumps(k) + b":" + v for k, v in items.items()) + b"}"


def joined(parts: Parts) -> bytes:
    """The fields' canonical JSON: each part in order, ``metadata`` (if any) as an object."""
    flat = {k: (_object(v) if k == META else v) for k, v in parts.items()}
    return _object(flat)


def _appended(was: bytes, value: bytes) -> bytes | None:
    """The JSON array of the items ``value`` adds to the non-empty array ``was``, else None."""
    n = len(was)
    if n > 2 and was[:1] == b"[" and len(value) > n and value[: n - 1] == was[:-1] and value[n - 1 : n] == b",":
        return b"[" + value[n:]
    return None


def _same_order(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a patch reproduces ``new``'s key order: kept keys in ``old``'s order, new ones last."""
    kept = [k for k in new if k in old]
    return kept == [k for k in old if k in new] and all(k in old for k in list(new)[: len(kept)])


_NEST = 3
"""Object values inside ``metadata`` are patched key by key this many levels down (a manager's
state, say); deeper ones are set whole."""


@functools.lru_cache(maxsize=64)
def _object_parts(value: bytes) -> Mapping[str, bytes] | None:
    """An object's JSON as key -> canonical value bytes (None: not an object).

    Memoised by value: a save's new object is the next save's old one, so each object inside
    ``metadata`` (a manager's state, say) is split once, not twice. The result is read-only.
    """
    if value[:1] != b"{":
        return None
    obj = orjson.loads(value)
    return MappingProxyType({k: orjson.dumps(v) for k, v in obj.items()}) if isinstance(obj, dict) else None


def _level(old: Mapping[str, Any], new: Mapping[str, Any], depth: int) -> dict[str, Any] | None:
    """The patch of one object level (``depth`` 0: the fields, 1: metadata, 2+: objects in it)."""
    if not _same_order(old, new):
        return None
    sets: dict[str, Any] = {}
    appends: dict[str, Any] = {}
    patches: dict[str, Any] = {}
    for key, value in new.items():
        was = old.get(key)
        if depth == 0 and key == META:
            sub = _level(was, value, 1) if isinstance(was, dict) else None
            if sub is None:
                return None
            if sub:
                patches[META] = sub
            continue
        if was == value:
            continue
        if was is None:
            sets[key] = orjson.Fragment(value)
            continue
        tail = _appended(was, value)
        if tail is not None:
            appends[key] = orjson.Fragment(tail)
            continue
        if 1 <= depth < _NEST:
            old_obj, new_obj = _object_parts(was), _object_parts(value)
            sub = _level(old_obj, new_obj, depth + 1) if old_obj is not None and new_obj is not None else None
            if sub is not None:
                patches[key] = sub
                continue
        sets[key] = orjson.Fragment(value)
    drops = [key for key in old if key not in new]
    return {
        **({"s": sets} if sets else {}),
        **({"d": drops} if drops else {}),
        **({"a": appends} if appends else {}),
        **({"p": patches} if patches else {}),
    }


def diff(old: Parts, new: Parts) -> bytes | None:
    """The patch (JSON) that turns ``old``'s fields into ``new``'s, or None when only a snapshot can."""
    patch = _level(old, new, 0)
    return None if patch is None else orjson.dumps(patch)


def apply(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` applied, as a new object (``base`` and its values are never mutated)."""
    if not isinstance(patch, dict) or not isinstance(base, dict):
        raise PatchError("a patch and its base must be JSON objects")
    out = dict(base)
    for key in patch.get("d", ()):
        if key not in out:
            raise PatchError(f"the patch drops {key!r}, which its base does not have")
        del out[key]
    for key, items in patch.get("a", {}).items():
        was = out.get(key)
        if not isinstance(was, list) or not isinstance(items, list):
            raise PatchError(f"the patch appends to {key!r}, which is not a list in its base")
        out[key] = was + items
    for key, sub in patch.get("p", {}).items():
        was = out.get(key)
        if not isinstance(was, dict):
            raise PatchError(f"the patch patches {key!r}, which is not an object in its base")
        out[key] = apply(was, sub)
    out.update(patch.get("s", {}))
    return out


@dataclass(frozen=True)
class Encoded:
    """How a row stores its fields: ``blob`` is a packed snapshot (``patch`` False) or patch."""

    blob: bytes
    patch: bool
    depth: int
    """Patches since the last snapshot, this one included (0 for a snapshot)."""
    chain: int
    """Bytes of those patches (0 for a snapshot)."""


def _is_canonical(data: bytes) -> bool:
    try:
        return orjson.dumps(orjson.loads(data)) == data
    except orjson.JSONDecodeError:
        return False


def encode(new: Parts, base: Parts | None, depth: int = 0, chain: int = 0) -> tuple[Encoded, Parts, bytes]:
    """``new``'s fields as a patch against ``base`` (``depth``/``chain``: the base's) or a snapshot.

    Returns the encoding, the parts and the joined bytes it stores (the ones to hash and to patch
    the next save against). A patch is used within :data:`MAX_DEPTH` while the patches since the
    snapshot stay well under a snapshot's size. What is written is checked to be canonical (its
    new bytes only: a patch's, or a snapshot's whole), so a reader rebuilds exactly these bytes; a
    value orjson would write differently on reading is canonicalised first (never seen in
    practice: pydantic and orjson write JSON-native values alike).
    """
    new_bytes = joined(new)
    if base is not None and depth < MAX_DEPTH:
        patch = diff(base, new)
        if patch is not None and chain + len(patch) < len(new_bytes) // 2 and _is_canonical(patch):
            blob = pack(patch)
            return Encoded(blob, True, depth + 1, chain + len(blob)), new, new_bytes
    if not _is_canonical(new_bytes):
        new = parts_of_json(new_bytes)
        new_bytes = joined(new)
    return Encoded(pack(new_bytes), False, 0, 0), new, new_bytes


def decode(blob: bytes, base: dict[str, Any] | None) -> dict[str, Any]:
    """The fields a stored ``blob`` holds: a snapshot (``base`` None) or a patch applied to ``base``."""
    try:
        obj = orjson.loads(unpack(blob))
    except orjson.JSONDecodeError as e:
        raise PatchError(f"stored state fields are not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise PatchError("stored state fields are not a JSON object")
    return obj if base is None else apply(base, obj)


def pack(data: bytes) -> bytes:
    """``data`` with a one-byte encoding prefix: ``\\x00`` raw, ``\\x01`` zlib."""
    return b"\x01" + zlib.compress(data, 1) if len(data) >= _COMPRESS_MIN else b"\x00" + data


def unpack(blob: bytes) -> bytes:
    """The bytes :func:`pack` packed; :class:`PatchError` for an unknown prefix or bad zlib data."""
    if blob[:1] == b"\x00":
        return blob[1:]
    if blob[:1] == b"\x01":
        try:
            return zlib.decompress(blob[1:])
        except zlib.error as e:
            raise PatchError(f"stored state fields cannot be decompressed: {e}") from e
    raise PatchError("stored state fields have an unknown encoding")
