"""Record notebooks/08_live_models.ipynb's response cache, then execute it offline from that cache.

1. Start the local OpenAI-compatible test server (tests/models/openai_server.py: starlette +
   uvicorn on 127.0.0.1, 20 % of requests answered 429 + Retry-After, so the recording also goes
   through the retries) and execute the notebook **live** against it: ``OPENAI_API_KEY`` and
   ``OPENAI_BASE_URL`` point its ``OpenAIModel`` there, and every answer lands in a fresh
   ``notebooks/data/08_live_models.sqlite``.
2. Stop the server, execute the notebook again **offline** (no key: every request must be a cache
   hit) and save it with those outputs, which nbval then checks.

To record against a real endpoint instead, delete the cache file and run the notebook yourself
with ``OPENAI_API_KEY`` (and ``OPENAI_BASE_URL``) set, then step 2: ``--offline-only``.

    python scripts/record_live_notebook.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.models.openai_server import Hostility, OpenAIServer  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "08_live_models.ipynb"
CACHE = ROOT / "notebooks" / "data" / "08_live_models.sqlite"


def execute(env: dict[str, str]) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:  # the kernel inherits this process's environment
        resources = {"metadata": {"path": str(NOTEBOOK.parent)}}
        NotebookClient(nb, timeout=600, kernel_name="python3", resources=resources).execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--offline-only", action="store_true", help="skip the recording; execute from the cache")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), base.get("PYTHONPATH")]))
    if not args.offline_only:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{CACHE}{suffix}").unlink(missing_ok=True)
        with OpenAIServer(Hostility(rate_429=0.2, latency=0.02, seed=8)) as server:
            execute({**base, "OPENAI_API_KEY": "local-test-server", "OPENAI_BASE_URL": server.url})
            print(f"recorded against {server.url}: {server.requests} requests, {dict(server.statuses)}")
    nb = execute(base)
    nbformat.write(nb, NOTEBOOK)
    size = CACHE.stat().st_size
    print(f"executed offline from {CACHE.relative_to(ROOT)} ({size:,} B) -> {NOTEBOOK.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
