"""Seed import path for the conversation managers (``tulip_nb.memory.managers``).

The implementations live in :mod:`tulip_nb.memory.conversation` (read its docstring first); this
module only re-exports them. ``default_manager`` is another name for
:func:`~tulip_nb.memory.conversation.compactor.default_conversation_manager`.

>>> from tulip_nb.memory.managers import SlidingWindowManager
>>> SlidingWindowManager().window_size
40
"""

from __future__ import annotations

from tulip_nb.memory.conversation.base import ConversationManager as ConversationManager
from tulip_nb.memory.conversation.base import NullConversationManager as NullConversationManager
from tulip_nb.memory.conversation.base import NullManager as NullManager
from tulip_nb.memory.conversation.base import PlanningManager as PlanningManager
from tulip_nb.memory.conversation.base import saved_token_counts as saved_token_counts
from tulip_nb.memory.conversation.compactor import default_conversation_manager
from tulip_nb.memory.conversation.events import EVENTS_KEY as EVENTS_KEY
from tulip_nb.memory.conversation.events import STATE_KEY as STATE_KEY
from tulip_nb.memory.conversation.window import SlidingWindowConversationManager as SlidingWindowConversationManager
from tulip_nb.memory.conversation.window import SlidingWindowManager as SlidingWindowManager

default_manager = default_conversation_manager

__all__ = ["default_manager"]
