"""The fast message builder gives exactly what pydantic validation gives, or the same error."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import Message
from tulip_nb.core.fastload import messages_from_json

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8))
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6,
)
maybe_str = st.one_of(st.none(), st.text(max_size=10), st.integers(-5, 5))

tool_call = st.fixed_dictionaries(
    {"id": st.one_of(st.text(max_size=6), st.integers(-5, 5)), "name": st.text(max_size=6)},
    optional={
        "arguments": st.one_of(st.dictionaries(st.text(max_size=4), json_value, max_size=3), st.text(max_size=4)),
        "malformed_arguments": maybe_str,
        "args": st.dictionaries(st.text(max_size=4), json_value, max_size=2),
        "extra": json_value,
    },
)
message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["system", "user", "assistant", "tool", "robot"]),
        "content": maybe_str,
        "tool_calls": st.one_of(st.lists(tool_call, max_size=2), st.none()),
        "tool_call_id": maybe_str,
        "name": maybe_str,
        "metadata": st.one_of(st.dictionaries(st.text(max_size=4), json_value, max_size=3), st.none()),
        "future": json_value,
    },
)


def slow(raw: Any) -> Message | Exception:
    try:
        return Message.model_validate(raw)
    except pydantic.ValidationError as e:
        return e


@settings(max_examples=examples(4), deadline=None)
@given(message)
def test_fast_path_equals_pydantic(raw: dict[str, Any]) -> None:
    expected = slow(orjson.loads(orjson.dumps(raw)))
    try:
        got: Message | Exception = messages_from_json([raw])[0]
    except pydantic.ValidationError as e:
        got = e
    if isinstance(expected, Exception):
        assert isinstance(got, pydantic.ValidationError)
        assert [err["loc"][2:] for err in got.errors()] == [err["loc"] for err in expected.errors()]
        return
    assert isinstance(got, Message)
    assert got == expected
    assert got.model_extra == expected.model_extra
    assert got.model_fields_set == expected.model_fields_set
    assert orjson.loads(got.json_bytes()) == orjson.loads(expected.json_bytes())
    assert got.model_dump() == expected.model_dump()


def test_typical_messages_take_the_fast_path() -> None:
    raw = {"role": "tool", "content": "x", "tool_calls": [], "tool_call_id": "c", "name": "f", "metadata": {}}
    [msg] = messages_from_json([raw])
    assert msg.json_bytes() == orjson.dumps(raw)
    changed = msg.model_copy(update={"content": "y"})
    assert orjson.loads(changed.json_bytes())["content"] == "y"


def test_errors_name_the_message_index() -> None:
    good = {"role": "user", "content": "hi"}
    with pytest.raises(pydantic.ValidationError) as err:
        messages_from_json([good, good, {"role": "user", "content": 5}])
    assert err.value.errors()[0]["loc"] == ("messages", 2, "content")


def slow_digest(message: Message) -> bytes:
    import hashlib

    data = message.json_bytes()
    with contextlib.suppress(orjson.JSONDecodeError, orjson.JSONEncodeError):
        data = orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).digest()


@settings(max_examples=examples(4), deadline=None)
@given(message)
def test_message_digest_fast_path_equals_the_canonical_json(raw: dict[str, Any]) -> None:
    from tulip_nb.core.state import message_digest

    try:
        [fast] = messages_from_json([orjson.loads(orjson.dumps(raw))])
    except pydantic.ValidationError:
        return
    built = Message.model_validate(orjson.loads(orjson.dumps(raw)))  # the pydantic path, no raw dict
    assert message_digest(fast) == slow_digest(fast) == message_digest(built) == slow_digest(built)


def test_message_digest_falls_back_for_values_json_cannot_hold() -> None:
    from datetime import UTC, datetime

    from tulip_nb.core.state import message_digest

    odd = Message(role="user", content="x", metadata={"at": datetime(2026, 1, 1, tzinfo=UTC), "n": {"big": 2**70}})
    assert message_digest(odd) == slow_digest(odd)
    reloaded = messages_from_json([orjson.loads(odd.json_bytes())])[0]
    assert message_digest(reloaded) == message_digest(odd)  # verifies after a round trip


def test_an_extra_key_is_kept_and_the_parsed_dict_is_the_json() -> None:
    raw = {"role": "user", "content": "x", "tool_calls": [], "tool_call_id": None, "name": None, "metadata": {}}
    raw["_fields_set"] = 1
    [got] = messages_from_json([raw])
    expected = Message.model_validate(raw)
    assert got == expected and got.model_extra == expected.model_extra == {"_fields_set": 1}
    assert orjson.loads(got.json_bytes()) == orjson.loads(expected.json_bytes()) == raw


def test_only_the_first_bad_message_is_reported() -> None:
    good = {"role": "user", "content": "hi"}
    with pytest.raises(pydantic.ValidationError) as err:
        messages_from_json([good, {"role": "robot"}, good, {"role": "user", "content": 5}])
    assert [e["loc"] for e in err.value.errors()] == [("messages", 1, "role")]


def test_messages_of_a_messy_thread_equal_pydantic_validation() -> None:
    from tulip_nb.agent import run_sync
    from tulip_nb.memory.backends import MemoryCheckpointer
    from tulip_nb.testing import MessySpec, build_messy_thread

    cp = MemoryCheckpointer()
    spec = MessySpec(seed=5, turns=10, error_rate=0.2, tulip_rate=0.2, interrupt_rate=0.1, big_output_rate=0.3)
    thread = build_messy_thread(cp, "messy-fastload", spec)
    state = run_sync(cp.load(thread.thread_id))
    assert state is not None and len(state.messages) > 10
    raw = orjson.loads(orjson.dumps([m.model_dump(mode="json") for m in state.messages]))
    fast = messages_from_json(raw)
    slow_path = [Message.model_validate(item) for item in orjson.loads(orjson.dumps(raw))]
    assert fast == slow_path == list(state.messages)
    assert [m.model_fields_set for m in fast] == [m.model_fields_set for m in slow_path]
    assert [m.json_bytes() for m in fast] == [m.json_bytes() for m in slow_path]


def test_fastload_uses_only_public_pydantic() -> None:
    import inspect

    import tulip_nb.core.fastload as fastload

    source = inspect.getsource(fastload)
    assert "__pydantic" not in source and "__setattr__" not in source
