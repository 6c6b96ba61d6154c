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

>>> from tulip_nb.core import Message, ToolCall
>>> call = lambda: Message.assistant(None, [ToolCall(id="call_0", name="get", arguments={})])
>>> msgs = [Message.user("a"), call(), Message.tool("r1", tool_call_id="call_0"),
...         Message.user("b"), call(), Message.tool("r2", tool_call_id="call_0")]
>>> answered_by(msgs)
[None, None, (1, 0), None, None, (4, 0)]
>>> results_of(msgs, 4)
[5]

A *model call* is an assistant message: the ``k``-th call of a thread (0-based) is the request
that produced its ``k``-th assistant message, and saw the messages before it. The helpers
:func:`model_calls`, :func:`model_call_count`, :func:`model_call_index`, :func:`calls_before` and
:func:`last_model_call` are the one definition of that numbering.

>>> model_calls(msgs), model_call_index(msgs, -1), calls_before(msgs, 4)
([1, 4], 4, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tulip_nb.core._messages import Message
from tulip_nb.core.keys import POSITION_KEY as POSITION_KEY

if TYPE_CHECKING:
    from tulip_nb.core.state import ToolExecution

__all__ = [
    "CallRef",
    "answered_by",
    "block_end",
    "calls_before",
    "execution_position",
    "last_model_call",
    "model_call_count",
    "model_call_index",
    "model_calls",
    "pair_block",
    "results_of",
    "unanswered_calls",
]

CallRef = tuple[int, int]
"""``(index of the assistant message, index of the call in its tool_calls)``."""


# -- model calls -----------------------------------------------------------------------------------


def model_calls(messages: Sequence[Message]) -> list[int]:
    """Indices of the assistant messages of ``messages``: one per model call, in order.

    >>> from tulip_nb.core import Message
    >>> model_calls([Message.system("s"), Message.user("a"), Message.assistant("b"), Message.assistant("c")])
    [2, 3]
    """
    return [i for i, m in enumerate(messages) if m.role == "assistant"]


def model_call_count(messages: Sequence[Message]) -> int:
    """How many model calls (assistant messages) ``messages`` records.

    >>> from tulip_nb.core import Message
    >>> model_call_count([Message.user("a"), Message.assistant("b")]), model_call_count([])
    (1, 0)
    """
    return sum(1 for m in messages if m.role == "assistant")


def model_call_index(messages: Sequence[Message], k: int) -> int:
    """Index in ``messages`` of the assistant message of model call ``k`` (0-based; a negative
    ``k`` counts from the end, as for a list: ``-1`` is the last call).

    Raises :class:`IndexError` naming ``k`` and the number of calls when there is no call ``k``.

    >>> from tulip_nb.core import Message
    >>> msgs = [Message.user("a"), Message.assistant("b"), Message.user("c"), Message.assistant("d")]
    >>> model_call_index(msgs, 0), model_call_index(msgs, 1), model_call_index(msgs, -2)
    (1, 3, 1)
    >>> model_call_index(msgs, 2)
    Traceback (most recent call last):
    ...
    IndexError: no model call 2: the messages record 2 model calls
    """
    if k >= 0:
        seen = 0
        for i, m in enumerate(messages):
            if m.role == "assistant":
                if seen == k:
                    return i
                seen += 1
    else:
        seen = 0
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].role == "assistant":
                seen += 1
                if seen == -k:
                    return i
    raise IndexError(f"no model call {k}: the messages record {model_call_count(messages)} model calls")


def calls_before(messages: Sequence[Message], j: int) -> int:
    """Model calls made before message ``j``: the assistant messages in ``messages[:j]`` (so the
    number of the call that message ``j`` is, when it is an assistant message).

    >>> from tulip_nb.core import Message
    >>> msgs = [Message.user("a"), Message.assistant("b"), Message.user("c"), Message.assistant("d")]
    >>> [calls_before(msgs, j) for j in range(len(msgs) + 1)]
    [0, 0, 1, 1, 2]
    """
    return model_call_count(messages[:j])


def last_model_call(messages: Sequence[Message], end: int | None = None) -> int | None:
    """Index of the last assistant message of ``messages[:end]`` (the latest model call), or
    ``None`` when there is none. Scans from the end, so it costs what follows that message.

    >>> from tulip_nb.core import Message
    >>> msgs = [Message.user("a"), Message.assistant("b"), Message.user("c")]
    >>> last_model_call(msgs), last_model_call(msgs, 1)
    (1, None)
    """
    stop = slice(None, end).indices(len(messages))[1]  # exactly the end of messages[:end]
    for i in range(stop - 1, -1, -1):
        if messages[i].role == "assistant":
            return i
    return None


# -- call/result pairing ---------------------------------------------------------------------------


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


def unanswered_calls(messages: Sequence[Message], i: int) -> list[int]:
    """Indices ``k`` of the calls of ``messages[i]`` that have no result in its block."""
    return [k for k, t in enumerate(results_of(messages, i)) if t is None]


def execution_position(ex: ToolExecution) -> CallRef | None:
    """The call position an execution was recorded for (None: recorded by another SDK)."""
    raw = (ex.__pydantic_extra__ or {}).get(POSITION_KEY)
    if isinstance(raw, list | tuple) and len(raw) == 2 and all(type(x) is int for x in raw):
        return (raw[0], raw[1])
    return None
