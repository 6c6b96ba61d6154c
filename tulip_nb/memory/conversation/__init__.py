"""Conversation management: what the model sees of a thread, one request at a time.

The checkpoint keeps every message; a *conversation manager* computes the view sent to the model
and records each change of it as an event in the thread's metadata. The parts, from the bottom:

- :mod:`~tulip_nb.memory.conversation.plan` -- the shape of a history (units, turns, the
  incremental :class:`HistoryIndex`) and :class:`Plan`, what the model sees of it (:func:`render`);
- :mod:`~tulip_nb.memory.conversation.events` -- compaction events in ``state.metadata`` and
  :func:`model_view` / :func:`model_views`, which rebuild a past view from a saved thread;
- :mod:`~tulip_nb.memory.conversation.base` -- the :class:`ConversationManager` contract,
  :class:`NullManager` and :class:`PlanningManager` (the base of the built-in managers);
- :mod:`~tulip_nb.memory.conversation.window` -- :class:`SlidingWindowManager` (default 40
  messages) and seed 002's :class:`SlidingWindowConversationManager` (default 20);
- :mod:`~tulip_nb.memory.conversation.compactor` -- :class:`LLMCompactor` (token-aware, seed 000)
  and :func:`default_conversation_manager`;
- :mod:`~tulip_nb.memory.conversation.summarizing` -- :class:`SummarizingConversationManager`.

Seed code imports these from :mod:`tulip_nb.memory.compactor`, :mod:`tulip_nb.memory.managers` or
:mod:`tulip_nb.agent.conversation_manager`; they are the same objects.

>>> from tulip_nb.memory.conversation import SlidingWindowManager
>>> SlidingWindowManager(window_size=2)
SlidingWindowManager(window_size=2)
"""

from __future__ import annotations

from tulip_nb.memory.conversation.base import ConversationManager as ConversationManager
from tulip_nb.memory.conversation.base import NullConversationManager as NullConversationManager
from tulip_nb.memory.conversation.base import NullManager as NullManager
from tulip_nb.memory.conversation.base import PlanningManager, saved_token_counts
from tulip_nb.memory.conversation.compactor import LLMCompactor as LLMCompactor
from tulip_nb.memory.conversation.compactor import SummarizeFn as SummarizeFn
from tulip_nb.memory.conversation.compactor import default_conversation_manager as default_conversation_manager
from tulip_nb.memory.conversation.events import EVENTS_KEY as EVENTS_KEY
from tulip_nb.memory.conversation.events import STATE_KEY as STATE_KEY
from tulip_nb.memory.conversation.events import TulipView, compaction_events, model_view, model_views
from tulip_nb.memory.conversation.plan import HistoryIndex, Plan
from tulip_nb.memory.conversation.summarizing import SummarizingConversationManager as SummarizingConversationManager
from tulip_nb.memory.conversation.window import SlidingWindowConversationManager as SlidingWindowConversationManager
from tulip_nb.memory.conversation.window import SlidingWindowManager as SlidingWindowManager

__all__ = [
    "HistoryIndex",
    "Plan",
    "PlanningManager",
    "TulipView",
    "compaction_events",
    "model_view",
    "model_views",
    "saved_token_counts",
]
