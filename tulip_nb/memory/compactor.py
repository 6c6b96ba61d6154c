"""Seed import path for ``LLMCompactor`` and every other conversation manager (seed 000).

>>> from tulip_nb.memory.compactor import LLMCompactor
>>> LLMCompactor().context_length      # every argument has a default
128000

The implementations live in :mod:`tulip_nb.memory.conversation` (read its docstring first; the
compaction rules are in :mod:`tulip_nb.memory.conversation.compactor`); this module only
re-exports them.
"""

from __future__ import annotations

from tulip_nb.memory.conversation.base import (
    ConversationManager,
    NullConversationManager,
    NullManager,
    PlanningManager,
)
from tulip_nb.memory.conversation.compactor import LLMCompactor, SummarizeFn, default_conversation_manager
from tulip_nb.memory.conversation.events import EVENTS_KEY, STATE_KEY, model_view, model_views
from tulip_nb.memory.conversation.summarizing import SummarizingConversationManager
from tulip_nb.memory.conversation.window import SlidingWindowConversationManager, SlidingWindowManager

__all__ = [
    "EVENTS_KEY",
    "STATE_KEY",
    "ConversationManager",
    "LLMCompactor",
    "NullConversationManager",
    "NullManager",
    "PlanningManager",
    "SlidingWindowConversationManager",
    "SlidingWindowManager",
    "SummarizeFn",
    "SummarizingConversationManager",
    "default_conversation_manager",
    "model_view",
    "model_views",
]
