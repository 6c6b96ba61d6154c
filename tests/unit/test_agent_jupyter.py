"""``run_sync`` inside a real Jupyter kernel, where every cell runs inside a live event loop."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed")
pytest.importorskip("ipykernel", reason="ipykernel is not installed")

CELL = """
import asyncio
from tulip_nb.agent import Agent, NullManager, tool
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call

@tool(idempotent=True)
def lookup_order(order_id: str) -> str:
    \"\"\"Look up an order.\"\"\"
    return order_id + " is eligible"

loop_running = asyncio.get_running_loop().is_running()   # ipykernel runs cells inside a loop
agent = Agent(ScriptedModel([tool_call("lookup_order", order_id="ord-4821"), text("Eligible."), text("Yes.")]),
              [lookup_order], checkpointer=FileCheckpointer(THREADS), conversation_manager=NullManager())
r1 = agent.run_sync("Refund ord-4821?", thread_id="nb-thread")
r2 = agent("Still eligible?", thread_id="nb-thread")
print(loop_running, r1.text, r2.text, len(r2.messages))
"""


@pytest.mark.slow
def test_run_sync_in_a_jupyter_kernel(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"THREADS = {str(tmp_path / 'threads')!r}\n" + CELL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    with warnings.catch_warnings():
        # jupyter_client/zmq emit deprecation noise on some platforms; it is not what this test checks
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        client = nbclient.NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        )
        client.execute()
    out = nb.cells[0].outputs
    text = "".join(o.get("text", "") for o in out if o.get("output_type") == "stream")
    assert text.strip() == "True Eligible. Yes. 6", out
