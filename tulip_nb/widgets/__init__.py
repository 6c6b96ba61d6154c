"""tulip_nb.widgets: notebook widgets over :mod:`tulip_nb.lab` (``pip install 'tulip_nb[notebook]'``).

Each widget is a thin ipywidgets view (core controls only: buttons, sliders, ``HTML`` and
``Image`` values) over a plain-Python controller in :mod:`tulip_nb.lab.controllers`, and carries a
``text/html`` fallback so a saved notebook shows its last state without a kernel.

| widget | what it does |
|---|---|
| :class:`ThreadBrowser` | the threads of a checkpointer, filter, open one in the other widgets |
| :class:`CorpusView` | a corpus summary: sort, filter, page, plots, configs, replay a thread |
| :class:`Stepper` | step an agent one model call at a time; edit + continue = a branch |
| :class:`ReplayPlayer` | slide over a thread: what the model saw vs the full history |
| :class:`TokenBudget` | tokens sent per call vs the trigger and the window, live with a Stepper |
| :class:`CompactionTuner` | sliders over compaction settings, re-simulated on every change |
| :class:`ThreadDiffView` | two threads side by side from where they part |
| :class:`ExportPanel` | export threads to S3 / SQL / files, with a verification report |

Example::

    from tulip_nb.widgets import Stepper, TokenBudget
    s = Stepper(agent, "Refund ord-4821?", thread_id="ticket-8912")
    display(s, TokenBudget(s))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tulip_nb._deps import EXTRAS, missing
from tulip_nb._lazy import lazy_exports

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from tulip_nb.widgets._corpus import CorpusView
    from tulip_nb.widgets._panels import ExportPanel, ReplayPlayer, ThreadBrowser, ThreadDiffView
    from tulip_nb.widgets._stepper import Stepper, TokenBudget
    from tulip_nb.widgets._tuner import CompactionTuner

_LAZY: dict[str, str] = {
    "CompactionTuner": "._tuner",
    "CorpusView": "._corpus",
    "ExportPanel": "._panels",
    "ReplayPlayer": "._panels",
    "Stepper": "._stepper",
    "ThreadBrowser": "._panels",
    "ThreadDiffView": "._panels",
    "TokenBudget": "._stepper",
}

__all__ = [
    "CompactionTuner",
    "CorpusView",
    "ExportPanel",
    "ReplayPlayer",
    "Stepper",
    "ThreadBrowser",
    "ThreadDiffView",
    "TokenBudget",
]


def _missing_extra(name: str, error: ImportError) -> ImportError | None:
    """ipywidgets / matplotlib / pandas come with the notebook extra; other errors stay unchanged."""
    if (error.name or "").partition(".")[0] not in EXTRAS:
        return None
    return missing(error.name or "", feature=f"tulip_nb.widgets.{name}")


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, on_import_error=_missing_extra)
