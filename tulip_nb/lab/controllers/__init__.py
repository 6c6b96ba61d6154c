"""Controllers of the notebook widgets: plain Python over :mod:`tulip_nb.lab`, no ipywidgets.

Each widget in :mod:`tulip_nb.widgets` is a thin ipywidgets view over one of these; everything it
shows is an HTML string or PNG bytes computed here, so the logic is tested without a browser (or a
kernel) and a script can use it directly::

    from tulip_nb.lab.controllers import StepperController

    s = StepperController(agent, "Refund ord-4821?", thread_id="t1")
    s.step(); s.request_html()          # what the model was sent, after compaction

| controller | widget |
|---|---|
| :class:`BrowserController` | ``ThreadBrowser`` |
| :class:`CorpusController` | ``CorpusView`` |
| :class:`StepperController` | ``Stepper`` |
| :class:`PlayerController` | ``ReplayPlayer`` |
| :class:`BudgetController` | ``TokenBudget`` |
| :class:`TunerController` | ``CompactionTuner`` |
| :class:`DiffController` | ``ThreadDiffView`` |
| :class:`ExportController` | ``ExportPanel`` |
"""

from __future__ import annotations

from tulip_nb.lab.controllers._panels import (
    BrowserController,
    BudgetController,
    DiffController,
    ExportController,
    PlayerController,
)
from tulip_nb.lab.controllers.corpus import CorpusController
from tulip_nb.lab.controllers.stepper import StepperController, StepRecord
from tulip_nb.lab.controllers.tuner import TunerController

__all__ = [
    "BrowserController",
    "BudgetController",
    "CorpusController",
    "DiffController",
    "ExportController",
    "PlayerController",
    "StepRecord",
    "StepperController",
    "TunerController",
]
