"""The lab's plots display as images in a real Jupyter kernel, with no ``%matplotlib`` magic.

IPython shows a plain matplotlib ``Figure`` as its text repr (``<Figure size 800x400 with 1
Axes>``) until a pyplot backend registers a formatter, and the lab never imports pyplot. So the
lab returns an ``InlineFigure`` (a ``Figure`` with ``_repr_png_``). This runs a notebook in an
ipykernel through nbclient, the way Jupyter and nbval do, and reads what the cells displayed.
"""

from __future__ import annotations

import base64
import time

import nbformat
from nbclient import NotebookClient

from tests.conftest import ROOT

PNG = b"\x89PNG\r\n\x1a\n"

SETUP = """\
import sys
from tulip_nb.agent import Agent
from tulip_nb.lab import compaction_grid, open_thread, plot_composition, plot_sweep, plot_token_usage
from tulip_nb.lab import simulate_compaction
from tulip_nb.memory.backends import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import tool

@tool
def lookup_order(order_id: str) -> str:
    \"\"\"Look an order up.

    Args:
        order_id: The order id.
    \"\"\"
    return f"order {order_id}: shipped. " + "notes: fragile. " * 40

def reply(messages, tools):
    last = messages[-1]
    if last.role == "user":
        return tool_call("lookup_order", order_id=last.content.split()[-1])
    return text("It has shipped.")

cp = MemoryCheckpointer()
agent = Agent(ScriptedModel(reply), [lookup_order], checkpointer=cp,
              conversation_manager=LLMCompactor(context_length=1500, head_turns=1))
for i in range(6):
    agent.run_sync(f"Check ord-48{i:02d}", thread_id="t")
th = open_thread(cp, "t")
sim = simulate_compaction(th, {"c8k": LLMCompactor(context_length=1500, head_turns=1)})
"""

CELLS = {
    "sim": 'plot_token_usage(sim, "c8k")',
    "thread": "plot_token_usage(th)",
    "composition": 'plot_composition(sim, "c8k")',
    "sweep": "plot_sweep(compaction_grid(th, context_length=1500, head_turns=1))",
    # nothing went through pyplot: no figure managers, no pyplot import
    "state": (
        "import matplotlib._pylab_helpers as helpers\n"
        "(helpers.Gcf.get_num_fig_managers(), 'matplotlib.pyplot' in sys.modules)"
    ),
    # once a user imports pyplot (the inline backend registers its own Figure formatter), a plot
    # still displays exactly once
    "pyplot": "import matplotlib.pyplot as plt\nplot_token_usage(th)",
}


def test_plots_display_as_png_in_a_real_kernel() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP)] + [nbformat.v4.new_code_cell(src) for src in CELLS.values()]
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    print(f"kernel notebook with {len(nb.cells)} cells: {time.perf_counter() - t0:.1f} s")
    outputs = dict(zip(CELLS, (c.outputs for c in nb.cells[1:]), strict=True))
    for name in ("sim", "thread", "composition", "sweep", "pyplot"):
        shown = [o for o in outputs[name] if o.output_type in ("execute_result", "display_data")]
        assert len(shown) == 1, (name, outputs[name])
        data = shown[0]["data"]
        assert "image/png" in data, (name, data.get("text/plain"))
        assert base64.b64decode(data["image/png"]).startswith(PNG), name
        assert "InlineFigure" in data["text/plain"], name
    state = outputs["state"][0]["data"]["text/plain"]
    assert state == "(0, False)", state
