"""Write notebooks/08_live_models.ipynb (cells only; scripts/record_live_notebook.py records its
cache and executes it). Kept as a script so the cells are reviewed as code."""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent

CELLS: list[tuple[str, str]] = [
    (
        "md",
        """# 08 · Live models: a response cache, rate limits, cost, budgets, resumable sweeps

Notebooks 01 to 07 run on a scripted model. A real what-if experiment calls a paid, rate-limited
model: this notebook runs a **sweep** of system-prompt variants with `OpenAIModel` and shows what
makes that practical in a notebook:

1. a **response cache** (`ModelCache`, one SQLite file): a request already made is answered from
   disk, bit for bit and for free, so re-running a cell re-bills nothing and gives the same answers;
2. one **concurrency limit** per model (`max_concurrency`) and retries that honour `Retry-After`;
3. **cost** per branch from a price table, and **budgets** that stop a sweep before it passes them;
4. **resumable sweeps**: running the sweep cell again reuses the branches already finished.

**Where the answers come from.** This notebook ships its cache, `notebooks/data/08_live_models.sqlite`,
so it re-runs offline (on Binder, in CI) without an API key. That cache was **not** recorded
against OpenAI: the machine that built it had no internet. It was recorded by
`scripts/record_live_notebook.py` against tulip_nb's local OpenAI-compatible *test* server
(`tests/models/openai_server.py`, a real HTTP server speaking the chat-completions wire, reached
with the real `openai` client) under the model name `gpt-4o-mini`, so the answers are that test
server's deterministic ones and the costs are gpt-4o-mini list prices of its token counts.
**With `OPENAI_API_KEY` (and optionally `OPENAI_BASE_URL`) set, the same cells call the real
endpoint** and add its answers to the cache file.""",
    ),
    (
        "code",
        """# NBVAL_CHECK_OUTPUT
import os
from pathlib import Path

from tulip_nb.models import ModelCache
from tulip_nb.models.openai import OpenAIModel


def data_file(name, may_create=False):
    \"\"\"The shipped file, found from the notebook's folder, the repository root, or $TULIP_NB_NOTEBOOK_DATA.\"\"\"
    folders = [Path(f) for f in (os.environ.get("TULIP_NB_NOTEBOOK_DATA"), "data", "notebooks/data") if f]
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    if may_create and any(f.is_dir() for f in folders):  # live: start the cache where it ships
        return next(f for f in folders if f.is_dir()) / name
    raise FileNotFoundError(f"{name}: run this notebook from notebooks/ or set TULIP_NB_NOTEBOOK_DATA")


LIVE = bool(os.environ.get("OPENAI_API_KEY"))
cache = ModelCache(data_file("08_live_models.sqlite", may_create=LIVE))
if LIVE:  # the real endpoint (OPENAI_BASE_URL or OpenAI's); new answers are added to the cache
    model = OpenAIModel("gpt-4o-mini", cache=cache, max_concurrency=4, temperature=0)
else:  # offline: every request must be in the cache; a miss fails at once (nothing to retry)
    recorded_at = cache.entries()[0].base_url
    model = OpenAIModel(
        "gpt-4o-mini", base_url=recorded_at, api_key="offline", cache=cache,
        max_concurrency=4, temperature=0, max_retries=0, deadline=5,
    )
print("live" if LIVE else "offline:", len(cache), "recorded answers,", model.name, "limit", model.limit.limit)""",
    ),
    (
        "md",
        """## A recorded thread to branch from

A short support conversation, written offline by the real `Agent` with a scripted model into a
file store (as in notebook 03).""",
    ),
    (
        "code",
        """# NBVAL_CHECK_OUTPUT
import re
import tempfile

from tulip_nb.agent import Agent, NullManager
from tulip_nb.lab import open_thread, sweep
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import tool


@tool
def lookup_order(order_id: str) -> str:
    \"\"\"Look an order up in the shop's database.

    Args:
        order_id: The order id, like ord-4821.
    \"\"\"
    return f"order {order_id}: shipped on Monday, arrives Thursday"


def recorded(messages, tools):
    last = messages[-1]
    if last.role == "user":
        return tool_call("lookup_order", order_id=re.search(r"ord-\\d+", last.content).group(0))
    return text("Your order has shipped and arrives Thursday.")


checkpointer = FileCheckpointer(tempfile.mkdtemp(prefix="tulip_nb_08_"))
writer = Agent(ScriptedModel(recorded), [lookup_order], system_prompt="You are a support agent.",
               checkpointer=checkpointer)
writer.run_sync("Where is my order ord-4821?", thread_id="ticket-4821")
thread = open_thread(checkpointer, "ticket-4821")
print(len(thread.final_messages), "messages;", thread.final_messages[-1].content)""",
    ),
    (
        "md",
        """## A sweep with the live model

Six system-prompt styles, each a branch from the end of the thread that answers a new question
with the live model (a tool call, the tool, an answer: two model calls per branch). The sweep
runs branches concurrently; the model's limit keeps at most `max_concurrency` requests in flight
whatever else in the process uses the same model. `tokens` and `cost` come from the branch's
saved token counters priced at the model's rate; `cached` says nothing was sent for the branch
in this run (offline every branch is `True`: the answers come from the file; live, the first run
shows `False` and the counters below show the requests and the retries).""",
    ),
    (
        "code",
        """# NBVAL_CHECK_OUTPUT
STYLES = ["plain", "terse", "formal", "friendly", "bullet points", "one sentence"]
variants = {style: {"system_prompt": f"You are a support agent. Answer in a {style} style."} for style in STYLES}
agent = Agent(model, [lookup_order], system_prompt="You are a support agent.", conversation_manager=NullManager())

table = sweep(thread, at=-1, variants=variants, agent=agent, prompt="And my other order, ord-4822?")
print(table[["variant", "final_answer", "tokens", "cost", "cached"]].to_string(index=False))
stats = model.stats
print("requests sent:", stats.requests, "| retries:", stats.retries, "| cache hits:", stats.cache_hits)""",
    ),
    (
        "md",
        """## Run the cell again: free, and the same

The branches are named from what decides them (thread, point, variant, prompt), so the second run
finds them finished and reuses them; with `resume=False` it makes new branches, and every model
call is then a cache hit. Either way nothing is sent and the answers are identical. After a crash
or a kernel restart, the same cell finishes only the branches that are missing.""",
    ),
    (
        "code",
        """# NBVAL_CHECK_OUTPUT
before = model.stats.requests
again = sweep(thread, at=-1, variants=variants, agent=agent, prompt="And my other order, ord-4822?")
fresh = sweep(thread, at=-1, variants=variants, agent=agent, prompt="And my other order, ord-4822?", resume=False)
print("requests sent by the two re-runs:", model.stats.requests - before)
reused = list(again["thread_id"]) == list(table["thread_id"])
print("reused branches:", reused, "| all cached:", bool(again["cached"].all()))
print("same answers:", list(again["final_answer"]) == list(table["final_answer"]) == list(fresh["final_answer"]))
print(f"total cost of the sweep: ${table['cost'].sum():.6f}")""",
    ),
    (
        "md",
        """## Budgets

`budget=` takes `Budget(tokens=...)`, `Budget(cost=...)` (USD) or an int of tokens. Before each
call that will really be sent (a cache hit is free), the sweep reserves an estimate (the prompt's
tokens counted locally, plus the completion it may produce); a call that would pass the budget is
refused, the branches not started yet are rows that say so, and `table.attrs["budget"]` says how
far the sweep got. Run it again with a bigger budget and it finishes only what is missing.

Shown here with the scripted model (its token counts are estimates), so the budget is really
spent offline too:""",
    ),
    (
        "code",
        """# NBVAL_CHECK_OUTPUT
from tulip_nb.models import Budget

offline = Agent(ScriptedModel(recorded), [lookup_order], system_prompt="You are a support agent.",
                conversation_manager=NullManager())
kw = dict(at=-1, variants=variants, agent=offline, prompt="And ord-4823?", concurrency=1)
stopped = sweep(thread, budget=Budget(tokens=1500), **kw)
print(stopped.attrs["budget"]["summary"])
print(stopped[["variant", "tokens", "error"]].to_string(index=False, max_colwidth=70))
rest = sweep(thread, **kw)  # no budget: the finished branches are reused, the rest run
print("finished now:", int(rest["error"].isna().sum()), "of", len(rest), "| reused:", int(rest["cached"].sum()))""",
    ),
    (
        "md",
        """## The cache file

Entries are immutable and keyed by the exact request (model, base URL, messages, tools, generation
parameters) and an epoch (`epoch=1` asks for a second, independent sample). Share it by copying
the one file; list and trim it from a shell with `tulip-nb cache ls|prune|clear PATH`.""",
    ),
    (
        "code",
        """# NBVAL_CHECK_OUTPUT
import pandas as pd

entries = pd.DataFrame([e.__dict__ for e in cache.entries()])
print(entries.groupby("model").agg(answers=("key", "count"), bytes=("size", "sum")).to_string())
cache.close()  # folds the write-ahead log back into the one file""",
    ),
]


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for i, (kind, source) in enumerate(CELLS):
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        cell["id"] = f"live-{i:02d}"  # stable ids: a re-generated notebook diffs by content only
        nb.cells.append(cell)
    return nb


if __name__ == "__main__":
    nbformat.write(build(), ROOT / "notebooks" / "08_live_models.ipynb")
