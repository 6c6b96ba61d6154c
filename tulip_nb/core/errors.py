"""The one exception tree of tulip_nb.

::

    TulipNBError
    ├── UserError                    misuse of the API (wrong argument, wrong object)
    │   └── InvalidThreadId          empty, NUL-containing or unsafe thread id
    ├── CheckpointError              anything about one stored checkpoint
    │   ├── CheckpointNotFound       an explicitly requested checkpoint does not exist
    │   ├── CheckpointCorrupt        stored bytes that do not decode to a checkpoint
    │   └── CheckpointConflict       compare-and-swap lost: the thread moved on
    ├── BackendUnavailable           the store could not be reached or refused the I/O
    └── CapabilityNotSupported       an optional operation this backend does not offer
                                     (also a ``NotImplementedError``)

Every error carries the context it knows (``thread_id``, ``checkpoint_id``, ``path``) as
attributes, and its message names them, so a traceback says what was wrong and where.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendUnavailable",
    "CapabilityNotSupported",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointNotFound",
    "InvalidThreadId",
    "TulipNBError",
    "UserError",
]


class TulipNBError(Exception):
    """Root of every error tulip_nb raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        path: str | None = None,
        **context: Any,
    ) -> None:
        self.message = message
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.path = path
        self.context = context
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.thread_id is not None:
            where.append(f"thread {self.thread_id!r}")
        if self.checkpoint_id is not None:
            where.append(f"checkpoint {self.checkpoint_id!r}")
        if self.path is not None:
            where.append(f"path {self.path}")
        for key, value in self.context.items():
            where.append(f"{key} {value!r}")
        return f"{self.message} ({', '.join(where)})" if where else self.message


class UserError(TulipNBError):
    """The API was called wrongly; fix the call, not the data."""


class InvalidThreadId(UserError, ValueError):
    """A thread id that cannot be stored safely (empty, contains NUL, escapes the store)."""


class CheckpointError(TulipNBError):
    """Something about one stored checkpoint."""


class CheckpointNotFound(CheckpointError, LookupError):
    """An explicitly requested checkpoint (or thread) does not exist."""


class CheckpointCorrupt(CheckpointError):
    """Stored bytes that do not decode to a valid checkpoint (truncated, invalid JSON, bad fields)."""


class CheckpointConflict(CheckpointError):
    """A compare-and-swap save lost: the thread's latest checkpoint is not the expected one.

    ``expected`` is what the caller passed as ``expected_parent``; ``actual`` is the thread's
    latest checkpoint id at the time of the save (``None`` for an empty thread).
    """

    def __init__(
        self,
        message: str,
        *,
        expected: str | None = None,
        actual: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(message, **kwargs)


class BackendUnavailable(TulipNBError, OSError):
    """The store could not be reached or refused the I/O (network, permissions, disk full).

    Never turned into "no thread": a storage outage is an error.
    """


class CapabilityNotSupported(TulipNBError, NotImplementedError):
    """An optional checkpointer operation whose capability flag is off for this backend."""

    def __init__(self, backend: str, capability: str, operation: str) -> None:
        self.backend = backend
        self.capability = capability
        self.operation = operation
        super().__init__(f"{backend} does not support {operation}() (capability {capability!r} is off)")
