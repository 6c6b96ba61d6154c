"""Caches keyed by object identity: a value computed once per *object*, safe against reused ids.

A message never changes once appended (:class:`~tulip_nb.core._messages.Message` is frozen), so
whatever is derived from it — its token count, its cleared-content stub — can be computed once and
looked up by ``id(message)``: one dict lookup, no hashing of content. An id alone is not a safe key,
though: CPython reuses the id of a dead object for the next one allocated, so a plain
``{id(obj): value}`` can hand a new object the value of a dead one. :class:`IdentityCache` keeps,
beside each value, a weak reference to its object, and

- returns a value only when that reference still points at the very object asked about (a reused
  id is a miss, never a stale value), and
- drops the entry when the object dies (the reference's callback), so the cache never keeps an
  object alive and never outgrows the live objects it has seen.

This is correct by construction, not by call order: a hit is proven by ``ref() is obj``. Every
operation is one dict operation, atomic under the GIL (and per dict in free-threaded builds); a lost
race between two writers or with a dying object's callback can only cost a later miss, never a
wrong value, so no lock is taken on the hot path. Keys must be weak-referenceable (pydantic models,
instances of ordinary classes; not ``int``, ``str`` or ``tuple``).

>>> class Doc:
...     def __init__(self, text: str) -> None:
...         self.text = text
>>> lengths: IdentityCache[Doc, int] = IdentityCache()
>>> doc = Doc("hello")
>>> lengths.get_or_compute(doc, lambda d: len(d.text))
5
>>> doc in lengths, lengths.get(Doc("hello")), len(lengths)
(True, None, 1)
>>> del doc                      # the entry goes with its object
>>> len(lengths)
0
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar, overload

__all__: list[str] = []

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class _Ref(weakref.ref[K]):
    """A weak reference that knows the key it is filed under (so one callback serves a cache)."""

    __slots__ = ("key",)
    key: int


class IdentityCache(Generic[K, V]):
    """``obj -> value`` by object identity, guarded by a weak reference (see the module docstring).

    ``get`` / ``put`` / ``get_or_compute`` for one object, :meth:`get_or_compute_many` for a
    sequence (the hot loop, kept here so callers do not re-write it), ``len``, ``in`` and
    :meth:`clear`.
    """

    __slots__ = ("_entries", "_forget")

    def __init__(self) -> None:
        entries: dict[int, tuple[_Ref[K], V]] = {}

        def forget(ref: _Ref[K]) -> None:
            # The object died and its id may be reused: drop the entry only if it is still its own.
            key = ref.key
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                entries.pop(key, None)

        self._entries = entries
        self._forget = forget

    def __repr__(self) -> str:
        return f"IdentityCache({len(self._entries)} entries)"

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, obj: object) -> bool:
        entry = self._entries.get(id(obj))
        return entry is not None and entry[0]() is obj

    @overload
    def get(self, obj: K) -> V | None: ...
    @overload
    def get(self, obj: K, default: D) -> V | D: ...
    def get(self, obj: K, default: D | None = None) -> V | D | None:
        """The value cached for this very object, else ``default``."""
        entry = self._entries.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        return default

    def put(self, obj: K, value: V) -> None:
        """Cache ``value`` for ``obj`` (replacing any value for it), until ``obj`` dies."""
        ref = _Ref(obj, self._forget)
        ref.key = ident = id(obj)
        self._entries[ident] = (ref, value)

    def get_or_compute(self, obj: K, compute: Callable[[K], V]) -> V:
        """The cached value for ``obj``, or ``compute(obj)``, cached and returned."""
        entries = self._entries
        entry = entries.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        value = compute(obj)
        ref = _Ref(obj, self._forget)
        ref.key = ident = id(obj)
        entries[ident] = (ref, value)
        return value

    def get_or_compute_many(self, objs: Iterable[K], compute: Callable[[K], V]) -> list[V]:
        """``[get_or_compute(o, compute) for o in objs]``, inlined: a hit costs one dict lookup
        and one weakref call."""
        entries = self._entries
        get = entries.get
        forget = self._forget
        out: list[V] = []
        append = out.append
        for obj in objs:
            entry = get(id(obj))
            if entry is not None and entry[0]() is obj:
                append(entry[1])
            else:
                value = compute(obj)
                ref = _Ref(obj, forget)
                ref.key = ident = id(obj)
                entries[ident] = (ref, value)
                append(value)
        return out

    def clear(self) -> None:
        """Forget every entry (the weak references' callbacks then find nothing to drop)."""
        self._entries.clear()
