"""Read-only containers: what makes a :class:`~tulip_nb.core.Message` immutable all the way down.

A message never changes once appended to a thread: its JSON is serialised once and reused, its
token count and digest are cached, and :class:`~tulip_nb.memory.backends.MemoryCheckpointer`
shares message objects between checkpoints. A message is a frozen pydantic model, and its nested
fields (``metadata``, ``tool_calls``, each call's ``arguments``, and anything nested in them) are
these containers: a :class:`FrozenDict` or :class:`FrozenList` is a real ``dict`` / ``list`` (JSON
encoders, ``isinstance`` checks, equality and reading all work) whose mutating methods raise
:class:`ReadOnlyError`. To change a message, make a new one::

    >>> from tulip_nb.core import Message
    >>> m = Message.user("hi")
    >>> m.metadata["edited"] = True  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tulip_nb.core._frozen.ReadOnlyError: a message's metadata is read-only: make a new message with ...
    >>> m.model_copy(update={"metadata": {**m.metadata, "edited": True}}).metadata
    {'edited': True}

``dict(x)`` / ``list(x)`` / ``x.copy()`` give ordinary, mutable copies.
"""

from __future__ import annotations

from typing import Any, NoReturn, SupportsIndex

__all__ = ["EMPTY", "FrozenDict", "FrozenList", "ReadOnlyError", "freeze", "thaw"]


class ReadOnlyError(TypeError):
    """An attempt to change part of a message in place (messages never change once appended)."""


def _refuse(what: str) -> NoReturn:
    raise ReadOnlyError(f"a message's {what} is read-only: make a new message with msg.model_copy(update={{...}})")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses changes (see the module docstring)."""

    __slots__ = ()

    def __setitem__(self, key: str, value: Any) -> NoReturn:
        _refuse("metadata")

    def __delitem__(self, key: str) -> NoReturn:
        _refuse("metadata")

    def __ior__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        _refuse("metadata")

    def clear(self) -> NoReturn:
        _refuse("metadata")

    def pop(self, *args: Any) -> NoReturn:
        _refuse("metadata")

    def popitem(self) -> NoReturn:
        _refuse("metadata")

    def setdefault(self, *args: Any) -> NoReturn:
        _refuse("metadata")

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("metadata")

    def copy(self) -> dict[str, Any]:
        """An ordinary (mutable, shallow) copy."""
        return dict(self)

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


class FrozenList(list[Any]):
    """A ``list`` that refuses changes (see the module docstring)."""

    __slots__ = ()

    def _no(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("tool calls or nested values")

    __setitem__ = _no
    __delitem__ = _no
    __iadd__ = _no
    __imul__ = _no
    append = _no
    extend = _no
    insert = _no
    remove = _no
    clear = _no
    reverse = _no

    def pop(self, index: SupportsIndex = -1) -> NoReturn:
        _refuse("tool calls or nested values")

    def sort(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("tool calls or nested values")

    def copy(self) -> list[Any]:
        """An ordinary (mutable, shallow) copy."""
        return list(self)

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (list(self),))


EMPTY = FrozenDict()
"""The shared empty metadata (most messages have none)."""


def freeze(value: Any) -> Any:
    """``value`` with every dict and list in it made read-only (already frozen parts are reused)."""
    kind = type(value)
    if kind is FrozenDict or kind is FrozenList:
        return value
    if isinstance(value, dict):
        if not value:
            return EMPTY
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList([freeze(v) for v in value])
    if isinstance(value, tuple) and kind is tuple:  # already immutable; its contents may not be
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """An ordinary, mutable deep copy of ``value`` (the inverse of :func:`freeze`)."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value
