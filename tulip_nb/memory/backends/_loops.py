"""One resource per event loop: :class:`PerLoop` lives in :mod:`tulip_nb.memory._pools`.

Kept so ``from tulip_nb.memory.backends._loops import PerLoop`` still works inside this package.
"""

from __future__ import annotations

from tulip_nb.memory._pools import PerLoop

__all__ = ["PerLoop"]
