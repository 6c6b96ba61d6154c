"""tulip_nb: a notebook-first research toolkit for durable agent conversations.

Everyday names are exported here; optional stacks (S3, SQL, Redis, pandas, widgets) are never
imported by ``import tulip_nb``.
"""

from __future__ import annotations

from tulip_nb.agent import Agent, AgentResult, Interrupt, tool
from tulip_nb.core import (
    AgentState,
    BackendUnavailable,
    CapabilityNotSupported,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    InvalidThreadId,
    Message,
    ReasoningStep,
    ToolCall,
    ToolExecution,
    TulipNBError,
    UserError,
)
from tulip_nb.memory import BaseCheckpointer, Capabilities, Checkpoint, CheckpointInfo
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentResult",
    "AgentState",
    "BackendUnavailable",
    "BaseCheckpointer",
    "Capabilities",
    "CapabilityNotSupported",
    "Checkpoint",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointNotFound",
    "FileCheckpointer",
    "Interrupt",
    "InvalidThreadId",
    "MemoryCheckpointer",
    "Message",
    "ReasoningStep",
    "ToolCall",
    "ToolExecution",
    "TulipNBError",
    "UserError",
    "__version__",
    "tool",
]
