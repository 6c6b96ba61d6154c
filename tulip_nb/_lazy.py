"""Lazy exports for a package ``__init__`` (PEP 562): a name's module is imported on first use.

Packages whose names pull in optional or heavy stacks (pandas, starlette, pytest, drivers) keep
``import tulip_nb.<package>`` cheap this way::

    _LAZY = {"Thread": "._thread", "open_thread": "._thread"}     # name -> module (relative ok)
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

and list the same names under ``if TYPE_CHECKING:`` imports for type checkers and IDEs. A name is
looked up in its module once, then cached in the package's namespace (later lookups skip
``__getattr__``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]

ImportErrorHook = Callable[[str, ImportError], BaseException | None]
"""``(name, error) -> the error to raise instead`` (from ``error``), or ``None`` to re-raise it."""


def lazy_exports(
    package: str,
    names: Mapping[str, str],
    *,
    on_import_error: ImportErrorHook | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, exporting ``names`` (name -> module that defines
    it, absolute or relative to ``package``)."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            value = getattr(importlib.import_module(module, package), name)
        except ImportError as e:
            replacement = on_import_error(name, e) if on_import_error is not None else None
            if replacement is None:
                raise
            raise replacement from e
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
