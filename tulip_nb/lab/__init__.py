"""tulip_nb.lab: the research layer — plain Python returning pandas DataFrames and matplotlib Figures.

Thread handles, cell-by-cell replay, what-if forks and sweeps, lineage-aware diff, the compaction
simulator and plots (:mod:`tulip_nb.lab` issue), verified export between checkpointers, and corpora
(:func:`open_corpus`: summaries and simulations over many threads, in process or on Dask). The
widgets in :mod:`tulip_nb.widgets` only arrange these calls. Names are imported on first use, so
``import tulip_nb.lab`` is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tulip_nb._lazy import lazy_exports

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from tulip_nb.lab._corpus_plots import plot_corpus_distributions, plot_facts_kept
    from tulip_nb.lab._corpus_sweep import asweep_corpus, sweep_corpus
    from tulip_nb.lab._executors import amap_threads, map_threads
    from tulip_nb.lab._ids import add_principal, strip_principal
    from tulip_nb.lab._plots import InlineFigure, plot_composition, plot_sweep, plot_token_usage, to_png
    from tulip_nb.lab._replay import LiveBranch, Replay
    from tulip_nb.lab._synthetic import abuild_corpus, build_corpus, corpus_facts
    from tulip_nb.lab._thread import (
        Thread,
        ThreadLike,
        aas_thread,
        aopen_thread,
        as_thread,
        athreads,
        open_thread,
        threads,
    )
    from tulip_nb.lab.branches import afork, asweep, fork, sweep
    from tulip_nb.lab.corpus import Corpus, aopen_corpus, open_corpus, summarize_corpus_simulation
    from tulip_nb.lab.diff import MessageChange, ThreadDiff, adiff_threads, diff_threads
    from tulip_nb.lab.export import aexport_threads, export_threads
    from tulip_nb.lab.share import to_html
    from tulip_nb.lab.simulate import (
        asimulate_compaction,
        compaction_grid,
        length_summarizer,
        simulate_compaction,
        summarize_simulation,
    )

# public name -> module that defines it (each module adds its own lines)
_LAZY: dict[str, str] = {
    "aexport_threads": ".export",
    "export_threads": ".export",
    "add_principal": "._ids",
    "strip_principal": "._ids",
    "Thread": "._thread",
    "open_thread": "._thread",
    "aopen_thread": "._thread",
    "threads": "._thread",
    "athreads": "._thread",
    "as_thread": "._thread",
    "aas_thread": "._thread",
    "ThreadLike": "._thread",
    "Replay": "._replay",
    "LiveBranch": "._replay",
    "fork": ".branches",
    "afork": ".branches",
    "sweep": ".branches",
    "asweep": ".branches",
    "diff_threads": ".diff",
    "adiff_threads": ".diff",
    "ThreadDiff": ".diff",
    "MessageChange": ".diff",
    "simulate_compaction": ".simulate",
    "asimulate_compaction": ".simulate",
    "compaction_grid": ".simulate",
    "summarize_simulation": ".simulate",
    "length_summarizer": ".simulate",
    "plot_token_usage": "._plots",
    "to_html": ".share",
    "InlineFigure": "._plots",
    "plot_composition": "._plots",
    "plot_sweep": "._plots",
    "to_png": "._plots",
    "Corpus": ".corpus",
    "open_corpus": ".corpus",
    "aopen_corpus": ".corpus",
    "summarize_corpus_simulation": ".corpus",
    "map_threads": "._executors",
    "amap_threads": "._executors",
    "build_corpus": "._synthetic",
    "abuild_corpus": "._synthetic",
    "corpus_facts": "._synthetic",
    "sweep_corpus": "._corpus_sweep",
    "asweep_corpus": "._corpus_sweep",
    "plot_corpus_distributions": "._corpus_plots",
    "plot_facts_kept": "._corpus_plots",
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
    "simulate_compaction",
    "strip_principal",
    "summarize_corpus_simulation",
    "summarize_simulation",
    "sweep",
    "sweep_corpus",
    "threads",
    "to_html",
    "to_png",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
