"""The one numbering of model calls (:mod:`tulip_nb.core.calls`): call ``k`` is the ``k``-th
assistant message. Checked against the naive definition on random role sequences."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tulip_nb.core._messages import Message
from tulip_nb.core.calls import calls_before, last_model_call, model_call_count, model_call_index, model_calls
from tulip_nb.memory.conversation.events import model_view

ROLES = ("system", "user", "assistant", "tool")


def _msg(role: str, i: int) -> Message:
    if role == "tool":
        return Message.tool(f"r{i}", tool_call_id=f"c{i}")
    return Message(role=role, content=f"{role} {i}")


def _thread(roles: list[str]) -> list[Message]:
    return [_msg(r, i) for i, r in enumerate(roles)]


threads = st.lists(st.sampled_from(ROLES), max_size=30).map(_thread)


@given(threads)
def test_calls_and_count_match_the_naive_definition(msgs: list[Message]) -> None:
    naive = [i for i, m in enumerate(msgs) if m.role == "assistant"]
    assert model_calls(msgs) == naive
    assert model_call_count(msgs) == len(naive)
    assert model_calls(tuple(msgs)) == naive  # any sequence


@given(threads, st.integers(-35, 35))
def test_call_index_is_list_indexing_of_the_calls(msgs: list[Message], k: int) -> None:
    naive = [i for i, m in enumerate(msgs) if m.role == "assistant"]
    if -len(naive) <= k < len(naive):
        assert model_call_index(msgs, k) == naive[k]
    else:
        with pytest.raises(IndexError, match=rf"no model call {k}: the messages record {len(naive)} model calls"):
            model_call_index(msgs, k)


@given(threads, st.integers(-35, 35))
def test_calls_before_and_last_call_match_the_naive_definition(msgs: list[Message], j: int) -> None:
    head = msgs[:j]
    assert calls_before(msgs, j) == sum(1 for m in head if m.role == "assistant")
    naive_last = max((i for i, m in enumerate(head) if m.role == "assistant"), default=None)
    assert last_model_call(msgs, j) == naive_last
    assert last_model_call(msgs) == max((i for i, m in enumerate(msgs) if m.role == "assistant"), default=None)


@given(threads)
def test_calls_before_numbers_each_call(msgs: list[Message]) -> None:
    for k, i in enumerate(model_calls(msgs)):
        assert calls_before(msgs, i) == k
        assert model_call_index(msgs, k) == i


def test_empty_thread() -> None:
    assert model_calls([]) == []
    assert model_call_count([]) == 0
    assert calls_before([], 3) == 0
    assert last_model_call([]) is None
    with pytest.raises(IndexError, match="no model call 0: the messages record 0 model calls"):
        model_call_index([], 0)


def test_model_view_uses_the_same_numbering() -> None:
    from tulip_nb.core.keys import RUN_KEY
    from tulip_nb.core.state import AgentState

    msgs = _thread(["system", "user", "assistant", "user", "assistant"])
    state = AgentState(messages=msgs, metadata={RUN_KEY: {"status": "complete"}})  # a tulip_nb thread
    assert model_view(state, call=1) == msgs[:4]
    # with no mark of tulip_nb the calls are tulip's: unknown unless told tulip sent the whole history
    assert model_view(AgentState(messages=msgs), call=1, tulip_view="full") == msgs[:4]
    assert model_view(state, call=-1) == model_view(state, call=1)
    with pytest.raises(IndexError, match="no model call 2: the messages record 2 model calls"):
        model_view(state, call=2)
