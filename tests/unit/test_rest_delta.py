"""The history rows' field patches (:mod:`tulip_nb.memory.rest_delta`): exact on any evolution."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, Message
from tulip_nb.memory.rest_delta import (
    MAX_DEPTH,
    META,
    PatchError,
    apply,
    decode,
    diff,
    encode,
    joined,
    pack,
    parts_of_json,
    state_parts,
    unpack,
)

json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False), st.text(max_size=8)
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12,
)
keys = st.sampled_from(["a", "b", "c", "turns", "events", "n", "é", 'q"'])


def _bytes(value: Any) -> bytes:
    return orjson.dumps(value)


@st.composite
def evolutions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A sequence of fields objects (each with a metadata object), each a random edit of the last."""
    state: dict[str, Any] = {"iteration": 0, "tool_executions": [], META: {"turns": [1]}}
    out = [state]
    for _ in range(draw(st.integers(1, 12))):
        state = {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()}
        target = state[META] if draw(st.booleans()) else state
        op = draw(st.sampled_from(["set", "append", "drop", "reorder", "same", "swap_type"]))
        key = draw(keys)
        if op == "set":
            target[key] = draw(json_value)
        elif op == "append":
            was = target.get(key)
            target[key] = (was if isinstance(was, list) else [0]) + draw(st.lists(json_value, min_size=1, max_size=3))
        elif op == "drop" and key in target and key != META:
            del target[key]
        elif op == "reorder" and len(target) > 1:
            items = list(target.items())
            target.clear()
            target.update(items[1:] + items[:1])
        elif op == "swap_type" and key in target and target[key] in (0, 1):
            target[key] = bool(target[key])  # 1 -> true: equal in Python, not in JSON
        out.append(state)
    return out


def _parts(obj: dict[str, Any]) -> dict[str, Any]:
    return parts_of_json(orjson.dumps(obj))


@settings(max_examples=examples(3), deadline=None)
@given(evolutions())
def test_a_patch_rebuilds_the_new_fields_exactly(states: list[dict[str, Any]]) -> None:
    for old, new in itertools.pairwise(states):
        a, b = _parts(old), _parts(new)
        patch = diff(a, b)
        if patch is None:  # a key order change: only a snapshot reproduces it
            continue
        assert orjson.dumps(apply(orjson.loads(joined(a)), orjson.loads(patch))) == joined(b)


@settings(max_examples=examples(2), deadline=None)
@given(evolutions())
def test_a_chain_of_encodings_decodes_to_every_state(states: list[dict[str, Any]]) -> None:
    stored: list[tuple[bytes, bool]] = []
    base, depth, chain = None, 0, 0
    for obj in states:
        enc, parts, data = encode(_parts(obj), base, depth, chain)
        stored.append((enc.blob, enc.patch))
        base, depth, chain = parts, enc.depth, enc.chain
        assert enc.depth <= MAX_DEPTH
        fields: dict[str, Any] | None = None
        for blob, is_patch in stored:
            fields = decode(blob, fields if is_patch else None)
        assert orjson.dumps(fields) == data == joined(_parts(obj))


def test_growing_lists_are_stored_as_their_new_items() -> None:
    turns = [{"turn": i, "outcome": "answered"} for i in range(300)]
    old = {"iteration": b"1", META: {"tulip_nb_turns": _bytes(turns), "user": b'"u"'}}
    new = {"iteration": b"1", META: {"tulip_nb_turns": _bytes([*turns, {"turn": 300}]), "user": b'"u"'}}
    patch = diff(old, new)
    assert patch is not None and orjson.loads(patch) == {"p": {META: {"a": {"tulip_nb_turns": [{"turn": 300}]}}}}
    assert len(patch) < 80 < len(joined(new)) // 100


def test_json_unequal_values_that_python_calls_equal_are_set() -> None:
    old = {"x": b"1", META: {}}
    new = {"x": b"true", META: {}}
    patch = diff(old, new)
    assert patch is not None and orjson.loads(patch) == {"s": {"x": True}}


def test_state_parts_match_pydantic_for_values_orjson_cannot_write() -> None:
    when = dt.datetime(2026, 12, 2, 1, 2, 3, tzinfo=dt.UTC)
    state = AgentState(
        messages=[Message.user("hi")],
        metadata={"when": when, "nested": {1: "int key"}, "big": 2**70, "plain": [1, 2.5, "é"]},
    )
    parts = state_parts(state)
    want = orjson.loads(AgentState.__pydantic_serializer__.to_json(state, exclude={"messages"}))
    assert orjson.loads(joined(parts)) == want
    assert orjson.loads(joined(parts)) == orjson.loads(joined(parts_of_json(joined(parts))))


def test_bad_blobs_are_patch_errors() -> None:
    with pytest.raises(PatchError, match="unknown encoding"):
        unpack(b"\x07data")
    with pytest.raises(PatchError, match="decompressed"):
        unpack(b"\x01not zlib")
    with pytest.raises(PatchError, match="not JSON"):
        decode(pack(b"{nope"), None)
    with pytest.raises(PatchError, match="drops 'x'"):
        apply({}, {"d": ["x"]})
    with pytest.raises(PatchError, match="appends to 'x'"):
        apply({"x": 1}, {"a": {"x": [2]}})
