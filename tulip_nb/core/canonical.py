"""When two messages (or two states) are the same: their canonical JSON.

A message is stored as JSON, and the stores hand it back spelled their own way: PostgreSQL
``jsonb`` reorders object keys, a second run of the same replies through another provider writes
tool arguments ``{"n": 3.0}`` where the first wrote ``{"n": 3}``. Every comparison of messages in
tulip_nb (the diff, export verification, replay, the corpus sweep's divergence) goes through one
form, :func:`canonical_json`:

- object keys sorted at every level;
- numbers by value, as Python compares them: an integral float is its int (``1.0`` is ``1``), an
  int beyond 64 bits a float (what a JSON parser without big ints makes of it); ``1.5`` stays;
- a message is its JSON value (:func:`message_value`): every field, its extra keys (what another
  SDK added), fields at their default left out (``"metadata": {}`` and no ``metadata`` are one).

:func:`message_key` is the sha256 of that form, :func:`same_message` the test built on it; both
take ``ids=False`` to leave out tool-call ids (a call is its position, ARCHITECTURE decision 10).

**The hash chain is stricter, on purpose.** :func:`tulip_nb.core.state.message_digest` (the leaf of
a thread's hash, signed and persisted with every signed save, :mod:`tulip_nb.memory.integrity`)
hashes :func:`written_json`: keys sorted, but numbers *as written*. That format is already in the
stores; hashing by value would fail the verification of every signed thread saved with a float.
It is a refinement of the canonical form: equal digests mean equal keys, never the reverse (a
respelled copy is the same message, and a different chain). No store of ours respells numbers
(each keeps a signed chain verifiable), so a copy verifies under both.

>>> from tulip_nb.core import ToolCall
>>> one = Message.assistant(None, [ToolCall(id="call_1", name="get", arguments={"b": 1.0, "a": 2})])
>>> two = Message.assistant(None, [ToolCall(id="call_1", name="get", arguments={"a": 2, "b": 1})])
>>> canonical_json(one.tool_calls[0].arguments), same_message(one, two), written_json(one) == written_json(two)
(b'{"a":2,"b":1}', True, False)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

import orjson

from tulip_nb.core._frozen import FrozenDict, FrozenList
from tulip_nb.core._messages import Message, ToolCall

__all__ = [
    "canonical_json",
    "canonical_json_of",
    "message_key",
    "message_value",
    "same_message",
    "written_json",
]

_BIG = 2**63


def _normal(value: Any) -> Any:
    """``value`` with numbers by value (module docstring) and keys as strings."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_BIG < value < _BIG else value
    if isinstance(value, int):
        return value if -_BIG < value < _BIG else float(value)
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """The canonical JSON of a JSON value: keys sorted at every level, numbers by value.

    >>> canonical_json({"b": [1.0, 2.5], "a": {"d": 1, "c": None}})
    b'{"a":{"c":null,"d":1},"b":[1,2.5]}'
    """
    data = _normal(value)
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS, default=str)
    except (orjson.JSONEncodeError, TypeError):  # e.g. a NaN/inf spelled by another serialiser
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def _loads(raw: bytes | bytearray) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # an int beyond 64 bits
        return json.loads(raw)


def canonical_json_of(raw: bytes | bytearray) -> bytes:
    """:func:`canonical_json` of serialised JSON (a state's :meth:`~tulip_nb.core.state.AgentState.to_json_bytes`:
    what export verification compares and checksums).

    >>> canonical_json_of(b'{"y": 2.0, "x": [1]}')
    b'{"x":[1],"y":2}'
    """
    return canonical_json(_loads(raw))


_FIELD_DEFAULTS: dict[str, Any] = {
    "content": None,
    "tool_calls": [],
    "tool_call_id": None,
    "name": None,
    "metadata": {},
}
"""Message fields whose default value means "not there": ``{}`` and a missing key are the same."""

_CALL_DEFAULTS: dict[str, Any] = {"arguments": {}, "malformed_arguments": None}


def message_value(msg: Message, *, ids: bool = True) -> dict[str, Any]:
    """A message as a plain JSON value, the form :func:`message_key` hashes.

    Fields at their default (``content`` None, no ``tool_calls``, no ``tool_call_id``, no ``name``,
    empty ``metadata``) are left out. ``ids=False`` also leaves out every tool-call id and
    ``tool_call_id``. Extra fields (``extra="allow"``) are kept.

    >>> m = Message.assistant(None, [ToolCall(id="call_7", name="get", arguments={"n": 1.0})])
    >>> message_value(m, ids=False)
    {'role': 'assistant', 'tool_calls': [{'name': 'get', 'arguments': {'n': 1.0}}]}
    """
    value = _loads(msg.json_bytes())
    if not isinstance(value, dict):  # pragma: no cover - a Message always dumps an object
        return {"value": value}
    out = {k: v for k, v in value.items() if not (k in _FIELD_DEFAULTS and v == _FIELD_DEFAULTS[k])}
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_call_value(c, ids) for c in calls]
    if not ids:
        out.pop("tool_call_id", None)
    return out


def _call_value(call: Any, ids: bool) -> Any:
    if not isinstance(call, dict):
        return call
    return {
        k: v for k, v in call.items() if not (k in _CALL_DEFAULTS and v == _CALL_DEFAULTS[k]) and (ids or k != "id")
    }


def message_key(msg: Message, *, ids: bool = True) -> bytes:
    """What makes two messages "the same": the sha256 of the canonical JSON of :func:`message_value`.

    With ``ids=False`` (the diff, the corpus sweep's divergence) tool-call ids do not count either;
    the default keeps them, for callers that compare a record with its own replay.

    >>> one = Message.assistant(None, [ToolCall(id="call_1", name="get", arguments={"b": 1.0})])
    >>> two = Message.assistant(None, [ToolCall(id="call_9", name="get", arguments={"b": 1})])
    >>> message_key(one) == message_key(two), message_key(one, ids=False) == message_key(two, ids=False)
    (False, True)
    """
    return hashlib.sha256(canonical_json(message_value(msg, ids=ids))).digest()


def same_message(a: Message, b: Message, *, ids: bool = True) -> bool:
    """Whether ``a`` and ``b`` are the same message (equal :func:`message_key`); the same object or
    the same bytes answer without hashing."""
    return a is b or a.json_bytes() == b.json_bytes() or message_key(a, ids=ids) == message_key(b, ids=ids)


# -- the hash chain's bytes ------------------------------------------------------------------------


def written_json(message: Message) -> bytes:
    """The bytes :func:`~tulip_nb.core.state.message_digest` hashes: the message's JSON with keys
    sorted at every level and numbers as written (module docstring). Persisted through the digests
    of signed saves: this function's output must never change.

    An int beyond 64 bits (which orjson cannot write) leaves the serialiser's JSON as it is.
    """
    try:  # fast: dump the fields as they are, when they are plain JSON values (always, once loaded)
        return orjson.dumps(_plain_message(message), option=_WRITTEN, default=_not_plain)
    except (orjson.JSONEncodeError, TypeError):  # anything else: the serialiser's JSON, re-sorted
        data = message.json_bytes()
        with contextlib.suppress(orjson.JSONDecodeError, orjson.JSONEncodeError):  # an int beyond 64 bits
            data = orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS)
        return data


# Plain JSON values only: datetimes, dataclasses and subclasses of str/int/dict/list go to
# ``_not_plain`` and so to the slow path, whose pydantic serialisation decides their JSON form.
_WRITTEN = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _not_plain(value: Any) -> Any:
    kind = type(value)
    if kind is FrozenDict:  # a message's read-only containers are plain JSON underneath
        return dict(value)
    if kind is FrozenList:
        return list(value)
    raise TypeError(f"not a plain JSON value: {kind.__name__}")


def _plain_message(message: Message) -> dict[str, Any]:
    """The message's fields (and extra keys) as the dict its JSON decodes to."""
    fields = message.__dict__
    calls = []
    for call in fields["tool_calls"]:
        if type(call) is not ToolCall:
            raise TypeError("not a ToolCall")
        plain = {k: call.__dict__[k] for k in _CALL_FIELDS}
        if call.__pydantic_extra__:
            plain.update(call.__pydantic_extra__)
        calls.append(plain)
    out = {k: fields[k] for k in _MESSAGE_FIELDS}
    out["tool_calls"] = calls
    if message.__pydantic_extra__:
        out.update(message.__pydantic_extra__)
    return out


_MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name", "metadata")
_CALL_FIELDS = ("id", "name", "arguments", "malformed_arguments")
