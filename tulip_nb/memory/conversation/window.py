"""SlidingWindowManager: the model sees the system prompt and the most recent messages.

Two names, two defaults (both seed-mandated): :class:`SlidingWindowManager` (tulip, seed 000)
keeps ``window_size=40`` messages by default; :class:`SlidingWindowConversationManager` (seed 002's
name, the same class otherwise) keeps ``window_size=20``. An agent given no manager and whose model
window is unknown gets ``window_size=max(20, max_iterations * 2)`` (see
:func:`~tulip_nb.memory.conversation.compactor.default_conversation_manager`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.memory.conversation.base import PlanningManager
from tulip_nb.memory.conversation.plan import Plan, fingerprint, render
from tulip_nb.tokens import REPLY_PRIMING

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState
    from tulip_nb.tokens import TokenCounter

__all__: list[str] = []


class SlidingWindowManager(PlanningManager):
    """Keep the system prompt and the most recent ``window_size`` messages (seed 000 / 002).

    ``window_size`` defaults to **40** here (tulip's default). Seed 002's name for this class,
    :class:`SlidingWindowConversationManager`, defaults to **20**; an agent without a manager and
    without a known model window gets ``max(20, max_iterations * 2)``.

    The cut never splits a tool call from its results (it moves forward to the next whole unit),
    nor a turn from its user message: a window that starts inside a turn starts at the next turn
    instead, and when the window holds no user message at all (one long turn), that turn's user
    message is shown just before it. A context overflow halves the window for this thread. The
    window counts messages, not tokens: this manager never raises
    :class:`~tulip_nb.core.errors.ContextWindowExceeded`.

    >>> m = SlidingWindowManager(window_size=2, token_counter=lambda msg: 1)
    >>> [x.content for x in m.apply([Message.system("s"), Message.user("a"),
    ...                              Message.assistant("b"), Message.user("c"), Message.assistant("d")])]
    ['s', 'c', 'd']
    """

    def __init__(
        self,
        window_size: int = 40,
        *,
        token_counter: TokenCounter | Callable[[Message], int] | None = None,
        model: str | None = None,
    ) -> None:
        if window_size < 1:
            raise UserError(f"window_size must be at least 1, got {window_size}")
        super().__init__(token_counter=token_counter, model=model)
        self.window_size = window_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(window_size={self.window_size})"

    def effective_window(self) -> int:
        """``window_size``, halved once per context overflow reported on this thread."""
        return max(1, self.window_size >> self._overflows)

    def plan_for(self, messages: Sequence[Message]) -> Plan | None:
        """The window's plan for ``messages`` (``None`` when everything fits)."""
        n = len(messages)
        body = 1 if n and messages[0].role == "system" else 0
        window = self.effective_window()
        if n - body <= window:
            return None
        idx = self._indexed(messages)
        starts, unit_list = idx.starts, idx.units
        # First unit starting at or after the nominal cut; at least the last unit is kept.
        k = min(idx.unit_at(n - window), len(starts) - 1)
        kept = [(0, body)] if body else []
        # A kept turn keeps its user message: a window that starts inside a turn starts at the next
        # turn instead; when it holds no turn start, the user message of its turn is shown first.
        t = bisect_left(idx.turns, k)
        if messages[starts[k]].role != "user":
            if t < len(idx.turns):
                k = idx.turns[t]
            elif t > 0:
                kept.append(unit_list[idx.turns[t - 1]])
        kept.append((starts[k], n))
        return Plan(n=n, fp=fingerprint(messages, n), kept=kept)

    def _same_cut(self, plan: Plan, messages: Sequence[Message]) -> bool:
        """Whether the plan in effect, with the new messages appended, is already ``plan``'s view."""
        old = self._plan
        if old is None or old.pruned or old.summarized or old.summary is not None or not old.matches(messages):
            return False
        return (
            old.kept[:-1] == plan.kept[:-1]
            and old.kept[-1] == (plan.kept[-1][0], old.n)
            and not plan.pruned
            and not plan.summarized
        )

    def _view(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, state: AgentState | None
    ) -> list[Message]:
        plan = self.plan_for(messages)
        trigger = "overflow" if self._reduce_pending else "window"
        self._reduce_pending = False
        if plan is None:
            self._plan = None
            self.last_view_tokens = None
            return messages
        view = render(plan, messages)
        counter = self.counter
        fixed = counter.count_tools(tools) + REPLY_PRIMING
        after = sum(counter.message_counts(view)) + fixed
        self.last_view_tokens = after
        if trigger == "window" and self._same_cut(plan, messages):
            # The cut did not move: the recorded plan still gives this view (no new event).
            self._flush(state)
            return view
        self._plan = plan
        before = self._index.prefix[-1] + fixed
        self._record(state, trigger, plan, messages, before, after)
        return view

    def clone_for_spawn(self) -> SlidingWindowManager:
        return type(self)(window_size=self.window_size, token_counter=self.token_counter, model=self.model)


class SlidingWindowConversationManager(SlidingWindowManager):
    """Seed 002's name for :class:`SlidingWindowManager`; ``window_size`` defaults to **20** here.

    Everything else is :class:`SlidingWindowManager`'s (whose own default is 40): the cut keeps the
    system prompt, whole tool units and each kept turn's user message.

    >>> SlidingWindowConversationManager().window_size, SlidingWindowManager().window_size
    (20, 40)
    """

    def __init__(
        self,
        window_size: int = 20,
        *,
        token_counter: TokenCounter | Callable[[Message], int] | None = None,
        model: str | None = None,
    ) -> None:
        super().__init__(window_size, token_counter=token_counter, model=model)
