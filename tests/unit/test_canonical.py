"""One equality for messages (:mod:`tulip_nb.core.canonical`), property-tested.

Equal canonical form <=> the same message for the diff, export verification, replay and sweeps:
the same JSON value, whatever the key order and however integral numbers are spelled (``1.0`` is
``1``; ``True`` is not ``1``). The form is stable across a JSON round trip and tulip's format
(the file checkpointer), on generated messages and on a messy agent thread. The hash chain's
digest (numbers as written, persisted) refines it: equal digests mean equal keys.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tulip_nb.core._messages import Message
from tulip_nb.core.canonical import canonical_json, message_key, message_value, same_message, written_json
from tulip_nb.core.fastload import messages_from_json
from tulip_nb.core.state import AgentState, message_digest
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer
from tulip_nb.testing import MessySpec, build_messy_thread

key_text = st.text(max_size=4)
json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(-1000, 1000).map(float),  # integral floats: the respelling case
    st.text(max_size=6),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(key_text, inner, max_size=3)),
    max_leaves=8,
)
tool_call = st.fixed_dictionaries(
    {"id": st.text(max_size=4), "name": st.sampled_from(["get", "put"])},
    optional={"arguments": st.dictionaries(key_text, json_value, max_size=3)},
)
raw_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
    optional={
        "content": st.one_of(st.none(), st.text(max_size=8)),
        "tool_calls": st.lists(tool_call, max_size=2),
        "tool_call_id": st.one_of(st.none(), st.text(max_size=4)),
        "name": st.one_of(st.none(), st.text(max_size=4)),
        "metadata": st.dictionaries(key_text, json_value, max_size=3),
        "future": json_value,  # a key another SDK added
    },
)


def load(raw: Any) -> Message:
    return messages_from_json([orjson.loads(orjson.dumps(raw))])[0]


def respelled(value: Any, rng: random.Random) -> Any:
    """``value`` as another store or provider may hand it back: keys in another order, integral
    numbers spelled as floats or ints."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value) if rng.random() < 0.5 else value
    if isinstance(value, int) and abs(value) < 2**53:
        return float(value) if rng.random() < 0.5 else value
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: respelled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [respelled(v, rng) for v in value]
    return value


def same_value(x: Any, y: Any) -> bool:
    """The oracle: JSON values equal with numbers by value, and booleans, null and strings by type."""
    if isinstance(x, bool) or isinstance(y, bool) or x is None or y is None or isinstance(x, str) or isinstance(y, str):
        return type(x) is type(y) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return x == y
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same_value(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(same_value(a, b) for a, b in zip(x, y, strict=True))
    return False


@settings(deadline=None)
@given(raw_message, st.integers(0, 2**32))
def test_reordered_keys_and_respelled_numbers_are_the_same_message(raw: dict[str, Any], seed: int) -> None:
    a = load(raw)
    b = load(respelled(raw, random.Random(seed)))
    assert same_message(a, b) and message_key(a) == message_key(b)
    assert canonical_json(message_value(a)) == canonical_json(message_value(b))


@settings(deadline=None)
@given(raw_message, raw_message, st.booleans())
def test_equal_keys_iff_equal_values(one: dict[str, Any], two: dict[str, Any], edit: bool) -> None:
    a = load(one)
    b = load({**one, "metadata": {**one.get("metadata", {}), "k": two.get("future")}} if edit else two)
    equal = same_value(message_value(a), message_value(b))
    assert (message_key(a) == message_key(b)) == equal == same_message(a, b)
    if message_digest(a) == message_digest(b):  # the hash chain refines the key
        assert equal


@settings(deadline=None)
@given(raw_message)
def test_stable_across_a_json_round_trip(raw: dict[str, Any]) -> None:
    m = load(raw)
    for again in (load(orjson.loads(m.json_bytes())), Message.model_validate_json(m.json_bytes())):
        assert message_key(again) == message_key(m) and same_message(again, m)
        assert written_json(again) == written_json(m) and message_digest(again) == message_digest(m)


@settings(deadline=None)
@given(raw_message, st.text(alphabet="abc123", min_size=1, max_size=4))
def test_tool_call_ids_count_only_with_ids(raw: dict[str, Any], new_id: str) -> None:
    m = load(raw)
    calls = [c.model_copy(update={"id": f"{c.id}{new_id}"}) for c in m.tool_calls]
    other = m.model_copy(update={"tool_calls": calls, "tool_call_id": (m.tool_call_id or "") + new_id})
    assert same_message(m, other, ids=False)
    assert not same_message(m, other)  # its tool_call_id changed


def _file_round_trip(messages: list[Message]) -> list[Message]:
    with tempfile.TemporaryDirectory() as d:

        async def go() -> list[Message]:
            cp = FileCheckpointer(d)
            await cp.save(AgentState(messages=messages), "t")
            state = await FileCheckpointer(d).load("t")
            assert state is not None
            return list(state.messages)

        return asyncio.run(go())


@settings(deadline=None)
@given(st.lists(raw_message, min_size=1, max_size=4))
def test_stable_across_tulips_format(raws: list[dict[str, Any]]) -> None:
    msgs = [load(r) for r in raws]
    back = _file_round_trip(msgs)
    assert [message_key(m) for m in back] == [message_key(m) for m in msgs]
    assert [message_digest(m) for m in back] == [message_digest(m) for m in msgs]


def test_a_messy_thread_survives_both_round_trips() -> None:
    cp = MemoryCheckpointer()
    build_messy_thread(cp, "m", MessySpec(seed=5, turns=10, error_rate=0.2, tulip_rate=0.2, interrupt_rate=0.1))
    msgs = list(asyncio.run(cp.load("m")).messages)  # type: ignore[union-attr]
    assert any(m.tool_calls for m in msgs)
    for back in (_file_round_trip(msgs), [load(orjson.loads(m.json_bytes())) for m in msgs]):
        assert all(
            same_message(a, b) and message_digest(a) == message_digest(b) for a, b in zip(msgs, back, strict=True)
        )
    assert len({message_key(m) for m in msgs}) > len(msgs) // 2  # distinct messages stay distinct


def test_one_point_zero_is_one_for_equality_and_not_for_the_chain() -> None:
    a, b = load({"role": "user", "metadata": {"b": 1.0}}), load({"role": "user", "metadata": {"b": 1}})
    assert same_message(a, b) and message_digest(a) != message_digest(b)
    assert not same_message(a, load({"role": "user", "metadata": {"b": True}}))
    assert not same_message(a, load({"role": "user", "metadata": {"b": 1.5}}))
