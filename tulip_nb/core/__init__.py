"""tulip_nb.core: the data model (messages, AgentState), the persisted metadata keys (:mod:`tulip_nb.core.keys`), the
error tree, and the rules every layer shares: tool-call and model-call positions (:mod:`tulip_nb.core.calls`) and
per-object caches (:class:`~tulip_nb.core._identity.IdentityCache`). No I/O."""

from __future__ import annotations

from tulip_nb.core._identity import IdentityCache
from tulip_nb.core._messages import Message, Role, ToolCall
from tulip_nb.core._time import AwareDatetime, ensure_aware, iso_offset, parse_datetime, utcnow
from tulip_nb.core.errors import (
    BackendUnavailable,
    CapabilityNotSupported,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    ContextWindowExceeded,
    InvalidThreadId,
    MissingDependency,
    TulipNBError,
    UserError,
)
from tulip_nb.core.state import (
    AgentState,
    MessageBlobCache,
    ReasoningStep,
    ToolExecution,
    state_json_bytes,
    state_json_parts,
)

__all__ = [
    "AgentState",
    "AwareDatetime",
    "BackendUnavailable",
    "CapabilityNotSupported",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointNotFound",
    "ContextWindowExceeded",
    "IdentityCache",
    "InvalidThreadId",
    "Message",
    "MessageBlobCache",
    "MissingDependency",
    "ReasoningStep",
    "Role",
    "ToolCall",
    "ToolExecution",
    "TulipNBError",
    "UserError",
    "ensure_aware",
    "iso_offset",
    "parse_datetime",
    "state_json_bytes",
    "state_json_parts",
    "utcnow",
]
