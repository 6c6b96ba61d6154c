"""tulip's S3 object layout, as pure functions: key parsing, object bodies, the lifecycle rule.

No I/O here, so the layout can be tested (and read) on its own. See ``s3.py`` for the picture.
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from tulip_nb.core import iso_offset
from tulip_nb.core.errors import CheckpointCorrupt, UserError
from tulip_nb.memory._envelope import decode_envelope, info_from_head, read_head
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo

__all__ = [
    "LATEST",
    "KeyKind",
    "ParsedKey",
    "ckpt_body",
    "copy_body",
    "decode_checkpoint",
    "info_from_object",
    "lifecycle_rule",
    "meta_body",
    "parse_key",
]

LATEST = "_latest"


class KeyKind(enum.Enum):
    CHECKPOINT = "checkpoint"  # <cid>.json
    META = "meta"  # <cid>.meta.json
    LATEST = "latest"  # _latest


@dataclass(frozen=True)
class ParsedKey:
    thread_id: str
    kind: KeyKind
    checkpoint_id: str  # "" for _latest


def parse_key(key: str, prefix: str) -> ParsedKey | None:
    """Split ``{prefix}{thread_id}/{name}`` into its parts; None for keys that are not ours.

    The thread id is everything between the prefix and the last ``/``, so ids that contain ``/``
    (``user/42``) come back whole.
    """
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix) :]
    thread_id, sep, name = rest.rpartition("/")
    if not sep or not thread_id or not name:
        return None
    if name == LATEST:
        return ParsedKey(thread_id, KeyKind.LATEST, "")
    if name.endswith(".meta.json") and len(name) > len(".meta.json"):
        return ParsedKey(thread_id, KeyKind.META, name[: -len(".meta.json")])
    if name.endswith(".json") and len(name) > len(".json"):
        return ParsedKey(thread_id, KeyKind.CHECKPOINT, name[: -len(".json")])
    return None


def _head(checkpoint_id: str, thread_id: str, created_at: datetime) -> bytes:
    return (
        b'{"checkpoint_id":'
        + orjson.dumps(checkpoint_id)
        + b',"thread_id":'
        + orjson.dumps(thread_id)
        + b',"created_at":'
        + orjson.dumps(iso_offset(created_at))
    )


def ckpt_body(checkpoint_id: str, thread_id: str, created_at: datetime, state_bytes: bytes) -> bytes:
    """``<cid>.json``: tulip's four keys, ``checkpoint_id`` first, the state's cached JSON reused."""
    return _head(checkpoint_id, thread_id, created_at) + b',"state":' + state_bytes + b"}"


def meta_body(checkpoint_id: str, thread_id: str, created_at: datetime, metadata: dict[str, Any]) -> bytes:
    """``<cid>.meta.json``: the same three keys plus the save metadata."""
    meta = orjson.dumps(metadata, option=orjson.OPT_NON_STR_KEYS)
    return _head(checkpoint_id, thread_id, created_at) + b',"metadata":' + meta + b"}"


def decode_checkpoint(body: bytes, thread_id: str, *, where: str) -> Checkpoint:
    """Parse ``<cid>.json``; the key's thread id wins over the envelope's.

    (tulip's ``copy_thread`` copies envelopes without rewriting ``thread_id``, so the object's
    location is the trustworthy answer.)
    """
    ckpt = decode_envelope(body, where=where, thread_id=thread_id)
    ckpt.thread_id = thread_id
    return ckpt


def info_from_object(body: bytes, thread_id: str, *, where: str, partial: bool = False) -> CheckpointInfo | None:
    """A checkpoint's info from its ``.meta.json`` (or, ``partial``, the first bytes of its ``.json``).

    An unreadable object is skipped with a ``RuntimeWarning`` naming it (None), so one bad object
    never hides a thread's other checkpoints.
    """
    obj: Any = read_head(body) if partial else None
    if obj is None:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            _warn_skip(where, f"invalid JSON: {e}")
            return None
    if not isinstance(obj, dict):
        _warn_skip(where, "not a JSON object")
        return None
    try:
        info = info_from_head(obj, where=where)
    except CheckpointCorrupt as e:
        _warn_skip(where, e.message)
        return None
    return CheckpointInfo(info.checkpoint_id, thread_id, info.created_at, info.metadata)


def copy_body(body: bytes, dest_thread_id: str, *, where: str) -> bytes:
    """A ``<cid>.json`` body re-addressed to ``dest_thread_id``; every other key kept verbatim."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise CheckpointCorrupt(f"cannot copy, invalid JSON: {e}", path=where) from e
    if not isinstance(obj, dict) or "state" not in obj:
        raise CheckpointCorrupt("cannot copy, not a checkpoint envelope", path=where)
    out = {"checkpoint_id": obj.get("checkpoint_id"), "thread_id": dest_thread_id, "created_at": obj.get("created_at")}
    out.update((k, v) for k, v in obj.items() if k not in out)
    return orjson.dumps(out, option=orjson.OPT_NON_STR_KEYS)


def lifecycle_rule(
    rule_id: str,
    prefix: str,
    days_until_archive: int | None,
    days_until_delete: int | None,
    storage_class: str,
) -> dict[str, Any] | None:
    """The S3 lifecycle rule for ``prefix`` (None when both day counts are None)."""
    for name, days in (("days_until_archive", days_until_archive), ("days_until_delete", days_until_delete)):
        if days is not None and (not isinstance(days, int) or isinstance(days, bool) or days < 1):
            raise UserError(f"{name} must be a positive whole number of days, got {days!r}")
    if days_until_archive is None and days_until_delete is None:
        return None
    if days_until_archive is not None and days_until_delete is not None and days_until_delete <= days_until_archive:
        raise UserError(
            f"days_until_delete ({days_until_delete}) must be later than days_until_archive ({days_until_archive})"
        )
    rule: dict[str, Any] = {"ID": rule_id, "Filter": {"Prefix": prefix}, "Status": "Enabled"}
    if days_until_archive is not None:
        rule["Transitions"] = [{"Days": days_until_archive, "StorageClass": storage_class}]
    if days_until_delete is not None:
        rule["Expiration"] = {"Days": days_until_delete}
    return rule


def _warn_skip(where: str, reason: str) -> None:
    warnings.warn(f"skipping unreadable S3 object {where}: {reason}", RuntimeWarning, stacklevel=4)
