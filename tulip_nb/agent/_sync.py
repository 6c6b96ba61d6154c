"""Kept for old imports: :func:`run_sync` lives in :mod:`tulip_nb._sync` (below every layer)."""

from __future__ import annotations

from tulip_nb._sync import background_loop, run_sync

__all__ = ["background_loop", "run_sync"]
