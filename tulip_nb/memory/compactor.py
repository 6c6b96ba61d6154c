"""Seed import path for ``LLMCompactor`` and every other conversation manager (seed 000).

>>> from tulip_nb.memory.compactor import LLMCompactor
>>> LLMCompactor().context_length      # every argument has a default
128000

The implementations live in :mod:`tulip_nb.memory.conversation` (read its docstring first; the
compaction rules are in :mod:`tulip_nb.memory.conversation.compactor`); this module only
re-exports them.
"""

from __future__ import annotations

from tulip_nb.memory.conversation.base import ConversationManager as ConversationManager
from tulip_nb.memory.conversation.base import NullConversationManager as NullConversationManager
from tulip_nb.memory.conversation.base import NullManager
from tulip_nb.memory.conversation.base import PlanningManager as PlanningManager
from tulip_nb.memory.conversation.compactor import LLMCompactor, SummarizeFn, default_conversation_manager
from tulip_nb.memory.conversation.events import EVENTS_KEY as EVENTS_KEY
from tulip_nb.memory.conversation.events import STATE_KEY as STATE_KEY
from tulip_nb.memory.conversation.events import model_view as model_view
from tulip_nb.memory.conversation.events import model_views as model_views
from tulip_nb.memory.conversation.summarizing import SummarizingConversationManager as SummarizingConversationManager
from tulip_nb.memory.conversation.window import SlidingWindowConversationManager as SlidingWindowConversationManager
from tulip_nb.memory.conversation.window import SlidingWindowManager

__all__ = [
    "LLMCompactor",
    "NullManager",
    "SlidingWindowManager",
    "SummarizeFn",
    "default_conversation_manager",
]
