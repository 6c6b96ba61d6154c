"""tulip_nb.lab: the research layer — plain Python returning pandas DataFrames and matplotlib Figures.

Thread handles, cell-by-cell replay, what-if forks and sweeps, lineage-aware diff, the compaction
simulator and plots (:mod:`tulip_nb.lab` issue), and verified export between checkpointers. The
widgets in :mod:`tulip_nb.widgets` only arrange these calls. Names are imported on first use, so
``import tulip_nb.lab`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it (each module adds its own lines)
_LAZY: dict[str, str] = {}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
