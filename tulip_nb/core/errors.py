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
    ├── MissingDependency            an optional package (pandas, matplotlib, ipywidgets, ...) is not
    │                                installed; names the extra: ``pip install 'tulip_nb[notebook]'``
    │                                (also an ``ImportError``)
    ├── ContextWindowExceeded        a request cannot fit the model's context window: what must be
    │                                kept does not fit (raised by a manager before the model is
    │                                called; the provider's report, models.base.ContextWindowExceeded,
    │                                is a subclass)
    └── CapabilityNotSupported       an optional operation this backend does not offer
                                     (also a ``NotImplementedError``)

Each class has the HTTP status a server answers it with (``http_status``: 400 user error, 422
invalid thread id or corrupt data, 404, 409, 503, 501, 500 otherwise); :func:`problem_from` is the
one mapping both servers use, and the HTTP client maps such responses back to the class.

Every error carries the context it knows (``thread_id``, ``checkpoint_id``, ``path``) as
attributes, and its message names them, so a traceback says what was wrong and where.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["problem_from"]


class TulipNBError(Exception):
    """Root of every error tulip_nb raises on purpose."""

    http_status: ClassVar[int] = 500
    """The HTTP status a server answers this error with (:func:`problem_from`); subclasses set theirs."""

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

    http_status: ClassVar[int] = 400
    """Bad request."""


class InvalidThreadId(UserError, ValueError):
    """A thread id that cannot be stored safely (empty, contains NUL, escapes the store)."""

    http_status: ClassVar[int] = 422
    """An identifier the server will not store."""


class CheckpointError(TulipNBError):
    """Something about one stored checkpoint."""


class CheckpointNotFound(CheckpointError, LookupError):
    """An explicitly requested checkpoint (or thread) does not exist."""

    http_status: ClassVar[int] = 404
    """Not found."""


class CheckpointCorrupt(CheckpointError):
    """Stored bytes that do not decode to a valid checkpoint (truncated, invalid JSON, bad fields)."""

    http_status: ClassVar[int] = 422
    """Stored data that does not decode."""


class CheckpointConflict(CheckpointError):
    """A compare-and-swap save lost: the thread's latest checkpoint is not the expected one.

    ``expected`` is what the caller passed as ``expected_parent``; ``actual`` is the thread's
    latest checkpoint id at the time of the save (``None`` for an empty thread).
    """

    http_status: ClassVar[int] = 409
    """Conflict: the thread moved on."""

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

    http_status: ClassVar[int] = 503
    """The store behind the server is unavailable."""


class MissingDependency(TulipNBError, ImportError):
    """An optional package a call needs is not installed.

    ``module`` is the missing top-level module, ``extra`` the ``tulip_nb[...]`` extra that
    installs it and ``install`` the command (``pip install 'tulip_nb[notebook]'``); the message
    names both. Also an ``ImportError``, so ``except ImportError`` still catches it.
    """

    def __init__(self, module: str, extra: str, *, feature: str | None = None) -> None:
        self.module = module
        self.extra = extra
        self.feature = feature
        self.install = f"pip install 'tulip_nb[{extra}]'"
        what = feature or "this call"
        super().__init__(f"{what} needs {module}, which is not installed: {self.install}")
        self.name = module  # ImportError.name

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.args, self.__dict__))


class ContextWindowExceeded(TulipNBError):
    """A request does not fit the model's context window.

    A token-aware conversation manager raises it before the model is called, when what it must
    keep (the system prompt, the protected head, the current turn's user message and its newest
    unit: see :mod:`tulip_nb.memory.compactor`) cannot fit; the message names the numbers:

    - ``tokens_needed``: prompt tokens of the smallest view the manager may send;
    - ``window``: the limit it had to meet (the context length, or less after an overflow report);
    - ``largest``: the largest message of that view, ``(index in the thread, role, tokens)``.

    The provider's own report of an overflow (:class:`tulip_nb.models._base.ContextWindowExceeded`)
    is a subclass, so ``except ContextWindowExceeded`` (this class) catches both; any of the three
    may then be ``None`` (the provider did not say).
    """

    http_status: ClassVar[int] = 422
    """The request cannot fit the model's window."""

    def __init__(
        self,
        message: str | None = None,
        *,
        tokens_needed: int | None = None,
        window: int | None = None,
        largest: tuple[int, str, int] | None = None,
        **context: Any,
    ) -> None:
        self.tokens_needed = tokens_needed
        self.window = window
        self.largest = largest
        parts = []
        if tokens_needed is not None:
            parts.append(f"needs {tokens_needed:,} tokens")
        if window is not None:
            parts.append(f"window {window:,} tokens")
        if largest is not None:
            index, role, tokens = largest
            parts.append(f"largest message #{index} ({role}, {tokens:,} tokens)")
        text = message or "the request does not fit the model's context window"
        super().__init__(f"{text}: {'; '.join(parts)}" if parts else text, **context)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments do not survive Exception's default pickling; keep every attribute.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[BaseException], args: tuple[Any, ...], attrs: dict[str, Any]) -> BaseException:
    err = cls.__new__(cls)
    BaseException.__init__(err, *args)
    err.__dict__.update(attrs)
    return err


class CapabilityNotSupported(TulipNBError, NotImplementedError):
    """An optional checkpointer operation whose capability flag is off for this backend."""

    http_status: ClassVar[int] = 501
    """Not implemented by this backend."""

    def __init__(self, backend: str, capability: str, operation: str) -> None:
        self.backend = backend
        self.capability = capability
        self.operation = operation
        super().__init__(f"{backend} does not support {operation}() (capability {capability!r} is off)")


def problem_from(error: TulipNBError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body both servers answer ``error`` with.

    The status is the class's :attr:`~TulipNBError.http_status`; the body is ``{"error": <class
    name>, "message": ..., "thread_id"/"checkpoint_id" when known}`` plus ``expected``/``actual``
    for a :class:`CheckpointConflict` and ``capability`` for :class:`CapabilityNotSupported`.
    :class:`~tulip_nb.memory.backends.HTTPCheckpointer` turns such a response back into the class.

    >>> problem_from(CheckpointNotFound("no such checkpoint", thread_id="t"))
    (404, {'error': 'CheckpointNotFound', 'message': 'no such checkpoint', 'thread_id': 't'})
    """
    body: dict[str, Any] = {"error": type(error).__name__, "message": error.message}
    if isinstance(error, CapabilityNotSupported):
        body["message"] = str(error)
        body["capability"] = error.capability
    for key in ("thread_id", "checkpoint_id"):
        value = getattr(error, key, None)
        if value is not None:
            body[key] = value
    if isinstance(error, CheckpointConflict):
        body.update({k: v for k, v in (("expected", error.expected), ("actual", error.actual)) if v is not None})
    return type(error).http_status, body
