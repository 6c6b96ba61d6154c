"""Seed import path for the conversation managers (``tulip_nb.memory.managers``).

The implementations live in :mod:`tulip_nb.memory.conversation` (read its docstring first); this
module only re-exports them. ``default_manager`` is another name for
:func:`~tulip_nb.memory.conversation.compactor.default_conversation_manager`.

>>> from tulip_nb.memory.managers import SlidingWindowManager
>>> SlidingWindowManager().window_size
40
"""

from __future__ import annotations

from tulip_nb.memory.conversation.base import (
    ConversationManager,
    NullConversationManager,
    NullManager,
    PlanningManager,
    saved_token_counts,
)
from tulip_nb.memory.conversation.compactor import default_conversation_manager
from tulip_nb.memory.conversation.events import EVENTS_KEY, STATE_KEY
from tulip_nb.memory.conversation.window import SlidingWindowConversationManager, SlidingWindowManager

default_manager = default_conversation_manager

__all__ = [
    "EVENTS_KEY",
    "STATE_KEY",
    "ConversationManager",
    "NullConversationManager",
    "NullManager",
    "PlanningManager",
    "SlidingWindowConversationManager",
    "SlidingWindowManager",
    "default_manager",
    "saved_token_counts",
]
