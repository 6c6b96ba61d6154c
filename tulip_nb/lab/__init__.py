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
    "Replay": "tulip_nb.lab.replay",
    "ReplayModel": "tulip_nb.lab.replay",
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
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
