"""Tool-call identity: a call is its *position* in the thread, never its id.

Providers reuse tool-call ids (OpenAI-compatible local servers number the calls of each response
from ``call_0``; some send empty ids), so an id names a call only inside one assistant message, and
not always there. tulip_nb therefore names a call by ``(i, k)``: the index ``i`` of the assistant
message in ``state.messages`` and the index ``k`` of the call in its ``tool_calls`` (a
:data:`CallRef`). Everything that pairs a call with its result pairs by position, with one rule:

- The results of the calls of the assistant message at ``i`` are the **tool messages directly after
  it** (its *block*: ``messages[i+1:j]``, every one of role ``tool``).
- Inside a block, each result, in order, answers the first still-unanswered call whose id equals
  its ``tool_call_id``; when no unanswered call has that id (empty, reused, rewritten by a store),
  the first unanswered call in order. A result left over when every call is answered answers none.
- A tool message that is not in a block (after a user message, say) answers no call.

The ids are kept and sent back to the provider exactly as it issued them; they only break ties.

>>> from tulip_nb.core.messages import Message, ToolCall
>>> call = lambda: Message.assistant(None, [ToolCall(id="call_0", name="get", arguments={})])
>>> msgs = [Message.user("a"), call(), Message.tool("r1", tool_call_id="call_0"),
...         Message.user("b"), call(), Message.tool("r2", tool_call_id="call_0")]
>>> answered_by(msgs)
[None, None, (1, 0), None, None, (4, 0)]
>>> results_of(msgs, 4)
[5]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tulip_nb.core.keys import POSITION_KEY
from tulip_nb.core.messages import Message

if TYPE_CHECKING:
    from tulip_nb.core.state import ToolExecution

__all__ = [
    "POSITION_KEY",
    "CallRef",
    "answered_by",
    "block_end",
    "call_results",
    "execution_position",
    "pair_block",
    "results_of",
    "unanswered_calls",
]

CallRef = tuple[int, int]
"""``(index of the assistant message, index of the call in its tool_calls)``."""


def block_end(messages: Sequence[Message], i: int) -> int:
    """End (exclusive) of the run of tool messages directly after ``messages[i]``."""
    j, n = i + 1, len(messages)
    while j < n and messages[j].role == "tool":
        j += 1
    return j


def pair_block(calls_ids: Sequence[str], result_ids: Sequence[str | None]) -> list[int | None]:
    """For each result of a block, the index of the call it answers (``None``: a left-over result).

    ``calls_ids`` are the call ids of the assistant message in order, ``result_ids`` the
    ``tool_call_id`` of each tool message of its block, in order (see the module docstring).
    """
    open_calls = list(range(len(calls_ids)))
    out: list[int | None] = []
    for rid in result_ids:
        if not open_calls:
            out.append(None)
            continue
        pick = 0
        if rid:
            for pos, k in enumerate(open_calls):
                if calls_ids[k] == rid:
                    pick = pos
                    break
        out.append(open_calls.pop(pick))
    return out


def _block(messages: Sequence[Message], i: int) -> tuple[int, list[int | None]]:
    calls = messages[i].tool_calls
    end = block_end(messages, i)
    ks = pair_block([c.id for c in calls], [messages[t].tool_call_id for t in range(i + 1, end)])
    return end, ks


def results_of(messages: Sequence[Message], i: int) -> list[int | None]:
    """For each call of the assistant message ``messages[i]``, the index of its result (or None)."""
    calls = messages[i].tool_calls
    out: list[int | None] = [None] * len(calls)
    if not calls:
        return out
    _, ks = _block(messages, i)
    for t, k in enumerate(ks, i + 1):
        if k is not None:
            out[k] = t
    return out


def answered_by(messages: Sequence[Message], start: int = 0) -> list[CallRef | None]:
    """For each message of ``messages[start:]``, the call it answers (tool results) or ``None``. O(n)."""
    n = len(messages)
    out: list[CallRef | None] = [None] * (n - start)
    i = start
    while i < n:
        m = messages[i]
        if m.role == "assistant" and m.tool_calls:
            end, ks = _block(messages, i)
            for t, k in enumerate(ks, i + 1):
                if k is not None:
                    out[t - start] = (i, k)
            i = end
        else:
            i += 1
    return out


def call_results(messages: Sequence[Message]) -> dict[CallRef, int]:
    """``{(i, k): index of the result}`` for every answered call of the thread."""
    return {ref: t for t, ref in enumerate(answered_by(messages)) if ref is not None}


def unanswered_calls(messages: Sequence[Message], i: int) -> list[int]:
    """Indices ``k`` of the calls of ``messages[i]`` that have no result in its block."""
    return [k for k, t in enumerate(results_of(messages, i)) if t is None]


def execution_position(ex: ToolExecution) -> CallRef | None:
    """The call position an execution was recorded for (None: recorded by another SDK)."""
    raw = (ex.__pydantic_extra__ or {}).get(POSITION_KEY)
    if isinstance(raw, list | tuple) and len(raw) == 2 and all(type(x) is int for x in raw):
        return (raw[0], raw[1])
    return None
