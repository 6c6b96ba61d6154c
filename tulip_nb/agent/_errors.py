"""Errors the agent raises, in the one tree rooted at :class:`~tulip_nb.core.errors.TulipNBError`.

::

    TulipNBError
    ├── UserError
    │   ├── NothingToResume        resume() on a thread with no pending interrupt or unfinished turn
    │   ├── ResumeNeedsResponse    resume() of an interrupt without an answer (or an answer to nothing)
    │   └── NotACheckpointer       a storage backend passed as checkpointer= (also a TypeError)
    └── AgentError                 the run itself failed (the cause is chained)

Tool failures never raise: they become error results the model reads. Model failures raise
:class:`~tulip_nb.models._base.ModelError` after the thread is saved with the error in ``errors``.
"""

from __future__ import annotations

from typing import ClassVar

from tulip_nb.core.errors import TulipNBError, UserError

__all__ = ["AgentError", "NotACheckpointer", "NothingToResume", "ResumeNeedsResponse"]


class AgentError(TulipNBError):
    """The agent run failed for a reason that is not the caller's misuse."""


class NothingToResume(UserError):
    """``resume()`` on a thread that has neither a pending interrupt nor an unfinished turn."""

    http_status: ClassVar[int] = 404


class ResumeNeedsResponse(UserError):
    """An interrupt needs an answer to resume, and an unfinished turn takes none."""

    http_status: ClassVar[int] = 409


class NotACheckpointer(UserError, TypeError):
    """``checkpointer=`` got an object that is not a checkpointer (e.g. a storage backend)."""
