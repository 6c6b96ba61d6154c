"""The conformance suite every checkpointer passes, shipped for your own backends.

tulip_nb's backends (memory, file, S3, Redis, PostgreSQL, MySQL, OpenSearch, HTTP) all run
:class:`CheckpointerSuite`: round trip of every :class:`~tulip_nb.core.AgentState` field and of
unknown keys, newest-first listing, lineage, latest after a delete, copy isolation, odd thread
ids (``/``, ``:``, ``#``, ``..``, unicode), compare-and-swap under races, concurrent saves, honest
capabilities, verbatim imports, and that a *fresh instance* on the same store (a new process)
sees every write: same latest, same listing, same metadata.

To run it on a checkpointer of your own (``docs/own-backend.md`` walks through one),
write a factory that makes one fresh store per test and yields an *opener*, which opens a new
instance on that store; then subclass the suite in a ``test_*.py`` file (pytest-asyncio runs it)::

    import contextlib
    from tulip_nb.testing import CheckpointerSuite

    @contextlib.asynccontextmanager
    async def my_store(tmp_path):
        data = {}                                   # the store: survives its instances

        @contextlib.asynccontextmanager
        async def opener():
            yield DictCheckpointer(data)            # a fresh instance on the same store

        yield opener

    class TestDictCheckpointer(CheckpointerSuite):
        factory = staticmethod(my_store)
        supports_delete = False                     # only the three required methods
        supports_compare_and_swap = False
        keeps_save_metadata = False

The flags say which parts of the contract beyond ``save`` / ``load`` / ``list_checkpoints`` the
backend keeps (all on by default); optional operations are checked as its
:attr:`~tulip_nb.memory.checkpointer.BaseCheckpointer.capabilities` claim, both ways.

It also ships a generator of **messy threads** (:mod:`tulip_nb.testing._messy`): real agent runs
with injected failures (model errors, context overflow, ``max_iterations``, interrupts, tool
errors, tulip-written turns, forks that change the system prompt or a tool) and their ground
truth, for tests and benchmarks of the research layer: :class:`MessySpec`,
:func:`build_messy_thread`, :func:`build_messy_corpus`, :func:`messy_specs` (a hypothesis
strategy).

This package is for tests: :class:`CheckpointerSuite` imports pytest and pytest-asyncio, and
:func:`messy_specs` hypothesis (on first use; ``import tulip_nb`` never imports this package).

>>> from tulip_nb.testing import full_state
>>> len(full_state().messages)
10
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tulip_nb._lazy import lazy_exports
from tulip_nb.testing._states import ODD_THREAD_IDS, full_state

if TYPE_CHECKING:
    from tulip_nb.testing._messy import (
        MessyFork,
        MessySpec,
        MessyThread,
        MessyTurn,
        abuild_messy_corpus,
        abuild_messy_thread,
        build_messy_corpus,
        build_messy_thread,
        keep_facts,
        messy_agent,
        messy_specs,
    )
    from tulip_nb.testing._suite import CheckpointerFactory, CheckpointerSuite, Opener, store_view

__all__ = [
    "CheckpointerFactory",
    "CheckpointerSuite",
    "MessyFork",
    "MessySpec",
    "MessyThread",
    "MessyTurn",
    "ODD_THREAD_IDS",
    "Opener",
    "abuild_messy_corpus",
    "abuild_messy_thread",
    "build_messy_corpus",
    "build_messy_thread",
    "full_state",
    "keep_facts",
    "messy_agent",
    "messy_specs",
    "store_view",
]

_SUITE = ("CheckpointerFactory", "CheckpointerSuite", "Opener", "store_view")  # import pytest
_MESSY = (  # import the agent
    "MessyFork",
    "MessySpec",
    "MessyThread",
    "MessyTurn",
    "abuild_messy_corpus",
    "abuild_messy_thread",
    "build_messy_corpus",
    "build_messy_thread",
    "keep_facts",
    "messy_agent",
    "messy_specs",
)
_LAZY: dict[str, str] = {**dict.fromkeys(_SUITE, "._suite"), **dict.fromkeys(_MESSY, "._messy")}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
