"""tulip_nb.lab: the research layer — plain Python returning pandas DataFrames and matplotlib Figures.

Thread handles, cell-by-cell replay, what-if forks and sweeps, lineage-aware diff, the compaction
simulator and plots (:mod:`tulip_nb.lab` issue), verified export between checkpointers, and corpora
(:func:`open_corpus`: summaries and simulations over many threads, in process or on Dask). The
widgets in :mod:`tulip_nb.widgets` only arrange these calls. Names are imported on first use, so
``import tulip_nb.lab`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from tulip_nb.lab._ids import add_principal, principal_for_api_key, strip_principal
    from tulip_nb.lab.branches import afork, asweep, fork, sweep
    from tulip_nb.lab.corpus import Corpus, aopen_corpus, open_corpus, summarize_corpus_simulation
    from tulip_nb.lab.corpus_plots import plot_corpus_distributions, plot_facts_kept
    from tulip_nb.lab.corpus_sweep import asweep_corpus, sweep_corpus
    from tulip_nb.lab.diff import MessageChange, ThreadDiff, adiff_threads, diff_threads
    from tulip_nb.lab.executors import amap_threads, map_threads
    from tulip_nb.lab.export import aexport_threads, export_threads
    from tulip_nb.lab.plots import InlineFigure, plot_composition, plot_sweep, plot_token_usage, to_png
    from tulip_nb.lab.replay import LiveBranch, Replay
    from tulip_nb.lab.simulate import (
        asimulate_compaction,
        compaction_grid,
        length_summarizer,
        simulate_compaction,
        summarize_simulation,
    )
    from tulip_nb.lab.synthetic import abuild_corpus, build_corpus, corpus_facts
    from tulip_nb.lab.thread import (
        Thread,
        ThreadLike,
        aas_thread,
        aopen_thread,
        as_thread,
        athreads,
        open_thread,
        threads,
    )

# public name -> module that defines it (each module adds its own lines)
_LAZY: dict[str, str] = {
    "aexport_threads": "tulip_nb.lab.export",
    "export_threads": "tulip_nb.lab.export",
    "add_principal": "tulip_nb.lab._ids",
    "strip_principal": "tulip_nb.lab._ids",
    "principal_for_api_key": "tulip_nb.lab._ids",
    "Thread": "tulip_nb.lab.thread",
    "open_thread": "tulip_nb.lab.thread",
    "aopen_thread": "tulip_nb.lab.thread",
    "threads": "tulip_nb.lab.thread",
    "athreads": "tulip_nb.lab.thread",
    "as_thread": "tulip_nb.lab.thread",
    "aas_thread": "tulip_nb.lab.thread",
    "ThreadLike": "tulip_nb.lab.thread",
    "Replay": "tulip_nb.lab.replay",
    "LiveBranch": "tulip_nb.lab.replay",
    "fork": "tulip_nb.lab.branches",
    "afork": "tulip_nb.lab.branches",
    "sweep": "tulip_nb.lab.branches",
    "asweep": "tulip_nb.lab.branches",
    "diff_threads": "tulip_nb.lab.diff",
    "adiff_threads": "tulip_nb.lab.diff",
    "ThreadDiff": "tulip_nb.lab.diff",
    "MessageChange": "tulip_nb.lab.diff",
    "simulate_compaction": "tulip_nb.lab.simulate",
    "asimulate_compaction": "tulip_nb.lab.simulate",
    "compaction_grid": "tulip_nb.lab.simulate",
    "summarize_simulation": "tulip_nb.lab.simulate",
    "length_summarizer": "tulip_nb.lab.simulate",
    "plot_token_usage": "tulip_nb.lab.plots",
    "InlineFigure": "tulip_nb.lab.plots",
    "plot_composition": "tulip_nb.lab.plots",
    "plot_sweep": "tulip_nb.lab.plots",
    "to_png": "tulip_nb.lab.plots",
    "Corpus": "tulip_nb.lab.corpus",
    "open_corpus": "tulip_nb.lab.corpus",
    "aopen_corpus": "tulip_nb.lab.corpus",
    "summarize_corpus_simulation": "tulip_nb.lab.corpus",
    "map_threads": "tulip_nb.lab.executors",
    "amap_threads": "tulip_nb.lab.executors",
    "build_corpus": "tulip_nb.lab.synthetic",
    "abuild_corpus": "tulip_nb.lab.synthetic",
    "corpus_facts": "tulip_nb.lab.synthetic",
    "sweep_corpus": "tulip_nb.lab.corpus_sweep",
    "asweep_corpus": "tulip_nb.lab.corpus_sweep",
    "plot_corpus_distributions": "tulip_nb.lab.corpus_plots",
    "plot_facts_kept": "tulip_nb.lab.corpus_plots",
}

__all__ = [
    "Corpus",
    "InlineFigure",
    "LiveBranch",
    "MessageChange",
    "Replay",
    "Thread",
    "ThreadDiff",
    "ThreadLike",
    "aas_thread",
    "abuild_corpus",
    "add_principal",
    "adiff_threads",
    "aexport_threads",
    "afork",
    "amap_threads",
    "aopen_corpus",
    "aopen_thread",
    "as_thread",
    "asimulate_compaction",
    "asweep",
    "asweep_corpus",
    "athreads",
    "build_corpus",
    "compaction_grid",
    "corpus_facts",
    "diff_threads",
    "export_threads",
    "fork",
    "length_summarizer",
    "map_threads",
    "open_corpus",
    "open_thread",
    "plot_composition",
    "plot_corpus_distributions",
    "plot_facts_kept",
    "plot_sweep",
    "plot_token_usage",
    "principal_for_api_key",
    "simulate_compaction",
    "strip_principal",
    "summarize_corpus_simulation",
    "summarize_simulation",
    "sweep",
    "sweep_corpus",
    "threads",
    "to_png",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
