"""tulip_nb.memory: checkpointers (per-thread state) and, later, conversation managers and stores."""

from __future__ import annotations

from tulip_nb.memory.checkpointer import (
    BaseCheckpointer,
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    new_checkpoint_id,
)
from tulip_nb.memory.integrity import ThreadVerification, verify_thread

__all__ = [
    "BaseCheckpointer",
    "Capabilities",
    "Checkpoint",
    "CheckpointInfo",
    "ThreadVerification",
    "new_checkpoint_id",
    "verify_thread",
]
