"""The checkpointer conformance suite: every backend must pass it.

The suite itself ships as :mod:`tulip_nb.testing` (so users run it on their own backends); this
module re-exports its states for the other test packages. Each backend module registers factories
in ``tests/backends/factories/`` (see ``conftest.py``), and ``test_conformance.py`` runs the suite
once per backend.
"""

from __future__ import annotations

from tulip_nb.testing import ODD_THREAD_IDS, full_state

__all__ = ["ODD_THREAD_IDS", "full_state"]
