"""The delta log's body codec: a delta applied to its base gives the target, byte for byte."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tulip_nb.core import AgentState, Message, ToolCall
from tulip_nb.memory.backends._delta_codec import (
    Content,
    ForeignBase,
    Header,
    Kind,
    apply_delta,
    common_prefix,
    content_of_state,
    decode_snapshot,
    encode_delta,
    encode_snapshot,
    frame,
    header_json,
    header_of,
    scan_frames,
    state_of,
)

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=6,
)


def message(i: int, kind: int) -> Message:
    if kind == 0:
        return Message.user(f"question {i} " + "x" * (i % 7))
    if kind == 1:
        return Message.assistant(
            None, [ToolCall(id=f"call_{i}", name="grep", arguments={"q": i, "deep": [i, {"a": None}]})]
        )
    if kind == 2:
        return Message.tool(f"result {i}", tool_call_id=f"call_{i}", name="grep")
    return Message(role="assistant", content=f"answer {i}", metadata={"tulip_at": "2026-01-01T00:00:00Z"}, future=[i])


def same(a: Content, b: Content) -> None:
    assert [m.json_bytes() for m in a.messages] == [m.json_bytes() for m in b.messages]
    assert list(a.fields.items()) == list(b.fields.items())


def roundtrip(base: Content, target: Content) -> Content:
    got = apply_delta(base, encode_delta(base, target))
    same(got, target)
    return got


fields = st.dictionaries(
    st.sampled_from(["iteration", "errors", "tool_history", "metadata", "extra_a", "extra_b", "provider_state"]),
    json_value,
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=12),
    st.integers(0, 12),
    st.lists(st.integers(0, 3), max_size=6),
    fields,
    fields,
    st.lists(json_value, max_size=3),
)
def test_delta_of_any_two_states_applies_back(
    kinds: list[int], cut: int, more: list[int], f1: dict[str, Any], f2: dict[str, Any], appended: list[Any]
) -> None:
    old = [message(i, k) for i, k in enumerate(kinds)]
    new = old[: min(cut, len(old))] + [message(100 + i, k) for i, k in enumerate(more)]
    if "errors" in f1 and isinstance(f1["errors"], list):
        f2 = {**f2, "errors": f1["errors"] + appended}  # a list that grew by appending
    base = Content(tuple(old), {k: orjson.dumps(v) for k, v in f1.items()}, 0)
    target = Content(tuple(new), {k: orjson.dumps(v) for k, v in f2.items()}, 0)
    roundtrip(base, target)
    same(decode_snapshot(encode_snapshot(target)), target)


def test_shared_prefix_by_identity_then_by_equality() -> None:
    msgs = [message(i, i % 4) for i in range(6)]
    assert common_prefix(msgs[:4], msgs) == 4
    rebuilt = [Message.model_validate(orjson.loads(m.json_bytes())) for m in msgs]  # equal, not the same objects
    assert common_prefix(rebuilt[:5], msgs) == 5
    changed = [*msgs[:2], msgs[2].model_copy(update={"content": "edited"}), *msgs[3:]]
    assert common_prefix(msgs, changed) == 2


def test_a_save_encodes_only_its_new_messages_and_what_changed() -> None:
    msgs = [message(i, i % 4) for i in range(200)]
    state = AgentState(messages=msgs[:199], errors=["a"], metadata={"k": 1})
    base, _ = content_of_state(state, None)
    state.messages.append(msgs[199])
    state.errors.append("b")
    state.iteration = 7
    target, keep = content_of_state(state, base)
    body = encode_delta(base, target, keep)
    assert keep == 199
    ops = orjson.loads(body[4 + int.from_bytes(body[:4], "little") :])
    assert ops == {"keep": 199, "set": {"iteration": 7}, "append": {"errors": ["b"]}}
    assert len(body) < 400
    assert state_of(apply_delta(base, body), where="test") == state


def test_one_json_value_differs_from_an_equal_python_value() -> None:
    base = Content((), {"x": b"1", "y": b"[1,2]"}, 0)
    target = Content((), {"x": b"true", "y": b"[1,2.0]"}, 0)  # 1 == True and 2 == 2.0 in Python
    assert roundtrip(base, target).fields == {"x": b"true", "y": b"[1,2.0]"}


def test_field_order_and_dropped_fields_come_back() -> None:
    base = Content((), {"a": b"1", "b": b"2", "c": b"3"}, 0)
    target = Content((), {"c": b"3", "a": b"1", "d": b"4"}, 0)
    assert list(roundtrip(base, target).fields) == ["c", "a", "d"]


def test_snapshot_is_the_state_json() -> None:
    state = AgentState(messages=[message(i, i % 4) for i in range(5)], surprise={"kept": [1, 2]})
    content, _ = content_of_state(state, None)
    assert encode_snapshot(content) == state.to_json_bytes()
    assert abs(content.size - len(state.to_json_bytes())) <= 2
    back = state_of(decode_snapshot(encode_snapshot(content)), where="test")
    assert back == state and back.to_json_bytes() == state.to_json_bytes()


def test_headers_round_trip_and_frames_scan() -> None:
    from datetime import UTC, datetime

    h = Header(
        "c1",
        datetime(2026, 1, 1, tzinfo=UTC),
        "c0",
        {"k": [1]},
        3,
        42,
        Kind.DELTA,
        ForeignBase("other", "p", "2025-01-01T00:00:00+00:00"),
        0,
        0,
        100,
        2000,
        3,
    )
    raw = header_json(h, Kind.DELTA, h.base, 2000, 3)
    record = frame(Kind.DELTA, raw, b"body") + b"body"
    back = header_of(orjson.loads(raw), Kind.DELTA, 0, len(record))
    assert back == Header(**{**h._asdict(), "length": len(record), "metadata": back.metadata})
    data = record * 3 + record[:-2]  # a torn tail
    items = list(scan_frames(lambda at, n: data[at : at + n], 0, len(data)))
    assert [i.offset for i in items] == [0, len(record), 2 * len(record)]


def test_extra_is_in_the_header_only_when_not_empty() -> None:
    from datetime import UTC, datetime

    h = Header("c1", datetime(2026, 1, 1, tzinfo=UTC), None, {}, 0, None, Kind.SNAPSHOT)
    raw = header_json(h, Kind.SNAPSHOT, None, 10, 0)
    assert b'"extra"' not in raw and header_of(orjson.loads(raw), Kind.SNAPSHOT, 0, 0).extra == {}
    with_extra = h._replace(extra={"future": {"v": [1, 2.5, None]}, "k": "x"})
    back = header_of(orjson.loads(header_json(with_extra, Kind.SNAPSHOT, None, 10, 0)), Kind.SNAPSHOT, 0, 0)
    assert dict(back.extra) == {"future": {"v": [1, 2.5, None]}, "k": "x"}


def test_scan_records_holds_back_a_torn_last_record() -> None:
    import itertools

    from tulip_nb.memory.backends._delta_frame import Frame, Gap, scan_records

    record = frame(Kind.PRUNE, b'{"ids":[]}', b"") + frame(Kind.SNAPSHOT, b"{}", b"body") + b"body"
    stale = record[:-1] + b"x"  # the last body fails its crc: a torn append
    items = list(scan_records(lambda at, n: stale[at : at + n], 0, len(stale)))
    assert [type(i) for i in items] == [Frame] and items[-1].end < len(stale)
    junk = record + b"\0" * 7 + record
    items = list(scan_records(lambda at, n: junk[at : at + n], 0, len(junk)))
    assert [type(i).__name__ for i in items] == ["Frame", "Frame", "Gap", "Frame", "Frame"]
    assert items[-1].end == len(junk) and all(a.end == b.offset for a, b in itertools.pairwise(items))
    assert not any(isinstance(i, Gap) and i.offset != len(record) for i in items)


nested = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from("abcdef"), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def edited(draw: Any, value: Any, depth: int = 0) -> Any:
    """``value`` edited the way a state changes: lists grow or change, keys come, go, reorder."""
    if isinstance(value, dict) and depth < 4:
        out = {k: draw(edited(v, depth + 1)) if draw(st.booleans()) else v for k, v in value.items()}
        for k in draw(st.lists(st.sampled_from("abcdefgh"), max_size=2)):
            out[k] = draw(nested)
        if out and draw(st.booleans()):
            out.pop(draw(st.sampled_from(sorted(out))))
        if draw(st.booleans()):
            out = dict(reversed(list(out.items())))
        return out
    if isinstance(value, list) and draw(st.booleans()):
        return value + draw(st.lists(nested, max_size=3))
    return draw(nested) if draw(st.booleans()) else value


@settings(max_examples=200, deadline=None)
@given(data=st.data(), meta=st.dictionaries(st.sampled_from("abcdef"), nested, max_size=5))
def test_nested_objects_are_patched_key_by_key_and_come_back_byte_for_byte(data: Any, meta: dict[str, Any]) -> None:
    msgs = (message(0, 0),)
    changed = data.draw(edited(meta))
    base = Content(msgs, {"metadata": orjson.dumps(meta), "iteration": b"1"}, 0)
    target = Content(msgs, {"metadata": orjson.dumps(changed), "iteration": b"2"}, 0)
    roundtrip(base, target)


def test_a_growing_list_inside_metadata_costs_its_new_items() -> None:
    events = [{"call": i, "tokens_before": 1000 + i, "trigger": "x" * 200} for i in range(300)]
    state = AgentState(
        messages=[message(0, 0)], metadata={"tulip_nb_compaction_events": events, "m": {"plan": [1] * 50}}
    )
    base, _ = content_of_state(state, None)
    state.metadata = {
        "tulip_nb_compaction_events": [*events, {"call": 300, "tokens_before": 1300, "trigger": "y"}],
        "m": {"plan": [1] * 51},
    }
    target, keep = content_of_state(state, base)
    body = encode_delta(base, target, keep)
    assert len(body) < 300 < len(target.fields["metadata"]) // 100
    assert state_of(apply_delta(base, body), where="test") == state
