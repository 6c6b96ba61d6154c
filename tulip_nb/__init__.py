"""tulip_nb: a notebook-first research toolkit for durable agent conversations.

Everyday names are importable from here (``from tulip_nb import Agent``) as shortcuts: each one's
home, where ``__all__`` lists it, is its subpackage (``tulip_nb.agent``, ``tulip_nb.core``,
``tulip_nb.memory``, ``tulip_nb.memory.backends``, ``tulip_nb.tools``). Optional stacks (S3, SQL,
Redis, pandas, widgets) are never imported by ``import tulip_nb``.
"""

from __future__ import annotations

from tulip_nb.agent import Agent as Agent
from tulip_nb.agent import AgentResult as AgentResult
from tulip_nb.agent import Interrupt as Interrupt
from tulip_nb.agent import tool as tool
from tulip_nb.core import AgentState as AgentState
from tulip_nb.core import BackendUnavailable as BackendUnavailable
from tulip_nb.core import CapabilityNotSupported as CapabilityNotSupported
from tulip_nb.core import CheckpointConflict as CheckpointConflict
from tulip_nb.core import CheckpointCorrupt as CheckpointCorrupt
from tulip_nb.core import CheckpointError as CheckpointError
from tulip_nb.core import CheckpointNotFound as CheckpointNotFound
from tulip_nb.core import InvalidThreadId as InvalidThreadId
from tulip_nb.core import Message as Message
from tulip_nb.core import ReasoningStep as ReasoningStep
from tulip_nb.core import ToolCall as ToolCall
from tulip_nb.core import ToolExecution as ToolExecution
from tulip_nb.core import TulipNBError as TulipNBError
from tulip_nb.core import UserError as UserError
from tulip_nb.memory import BaseCheckpointer as BaseCheckpointer
from tulip_nb.memory import Capabilities as Capabilities
from tulip_nb.memory import Checkpoint as Checkpoint
from tulip_nb.memory import CheckpointInfo as CheckpointInfo
from tulip_nb.memory.backends import FileCheckpointer as FileCheckpointer
from tulip_nb.memory.backends import MemoryCheckpointer as MemoryCheckpointer

__version__ = "0.1.0"

__all__ = ["__version__"]
