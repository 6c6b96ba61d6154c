"""Seed 002's import path for conversation managers.

>>> from tulip_nb.agent.conversation_manager import SlidingWindowConversationManager
>>> SlidingWindowConversationManager(window_size=20).window_size
20

The implementations live in :mod:`tulip_nb.memory.conversation`; this module only re-exports them
under the names the seed uses.
"""

from __future__ import annotations

from tulip_nb.memory.conversation import ConversationManager as ConversationManager
from tulip_nb.memory.conversation import LLMCompactor as LLMCompactor
from tulip_nb.memory.conversation import (
    NullConversationManager,
    SlidingWindowConversationManager,
    SummarizingConversationManager,
)
from tulip_nb.memory.conversation import NullManager as NullManager
from tulip_nb.memory.conversation import SlidingWindowManager as SlidingWindowManager
from tulip_nb.memory.conversation import default_conversation_manager as default_conversation_manager

__all__ = [
    "NullConversationManager",
    "SlidingWindowConversationManager",
    "SummarizingConversationManager",
]
