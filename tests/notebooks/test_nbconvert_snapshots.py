"""nbconvert of an executed notebook shows the widgets as they were: notebooks/06_long_threads
is executed (nbconvert's ExecutePreprocessor, in a kernel) and converted to HTML; each widget's
output is its ``text/html`` snapshot -- the ReplayPlayer at the last call, the CompactionTuner
after its slider move, the ThreadDiffView of the two branches -- and the page loads no widget
script from a CDN to show them.

``store_widget_state=False`` is what JupyterLab does by default on save (no widget state in the
file): a static renderer (nbconvert, GitHub, nbviewer) then picks the snapshot. With widget state
saved, nbconvert renders the live widget from that state instead, through a script it loads from
a CDN, so offline it shows nothing: docs/sharing.md says how to convert.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.lab.page_parse import Elements

NOTEBOOK = ROOT / "notebooks" / "06_long_threads.ipynb"


@pytest.mark.slow
def test_nbconvert_of_the_executed_notebook_shows_the_widget_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import ExecutePreprocessor

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel (started in tmp_path) imports this checkout's tulip_nb, and keeps its warnings
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PYTHONWARNINGS", "default")
    ep = ExecutePreprocessor(timeout=600, kernel_name="python3", store_widget_state=False)
    ep.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert "widgets" not in nb.metadata
    body, _ = HTMLExporter().from_notebook_node(nb)
    (tmp_path / "06.html").write_text(body)

    snaps = [a for tag, a in Elements(body).tags if tag == "div" and a.get("class") == "tulip-nb-snapshot"]
    assert [a["data-widget"] for a in snaps] == ["ReplayPlayer", "CompactionTuner", "ThreadDiffView"]
    player = re.search(r"model call (\d+) of (\d+)", body)
    assert player is not None and int(player.group(1)) == int(player.group(2)) - 1  # the last call, as set
    tuner = body[body.index('data-widget="CompactionTuner"') :]
    assert re.search(r"context_length=4_?000", tuner[:3000])  # as displayed (a later move is a later cell's)
    assert "long-thread-branch" in body and "tulip-nb-diff" in body
    assert "application/vnd.jupyter.widget-view+json" not in body  # no live view to load
    assert body.count("<img") >= 2  # the token plot of cell 3 and the tuner's plot, inline
