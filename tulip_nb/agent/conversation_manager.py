"""Seed 002's import path for conversation managers.

>>> from tulip_nb.agent.conversation_manager import SlidingWindowConversationManager
>>> SlidingWindowConversationManager(window_size=20).window_size
20

The implementations live in :mod:`tulip_nb.memory` (``managers``, ``compactor``); this module only
re-exports them under the names the seed uses.
"""

from __future__ import annotations

from tulip_nb.memory.compactor import (
    LLMCompactor,
    SummarizingConversationManager,
    default_conversation_manager,
)
from tulip_nb.memory.managers import (
    ConversationManager,
    NullConversationManager,
    NullManager,
    SlidingWindowConversationManager,
    SlidingWindowManager,
)

__all__ = [
    "ConversationManager",
    "LLMCompactor",
    "NullConversationManager",
    "NullManager",
    "SlidingWindowConversationManager",
    "SlidingWindowManager",
    "SummarizingConversationManager",
    "default_conversation_manager",
]
