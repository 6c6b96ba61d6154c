"""Build ``tests/data/legacy_store/``: a file store written by the release before the history layout.

    python tests/data/make_legacy_store.py [OUT_DIR]      # default: tests/data/legacy_store

Run it with the release whose store it records (the one writing ``layout="delta"`` by default);
it refuses a tulip_nb whose ``FileCheckpointer`` default is not the delta layout. The committed
files were made from commit 3b01a5e (``manifest.json`` says which) with tulip-agents 2.28.0::

    git archive 3b01a5e | tar -x -C /tmp/release
    PYTHONPATH=/tmp/release TULIP_NB_COMMIT=3b01a5e python tests/data/make_legacy_store.py

It writes:

- ``store.tar.gz``: the store (``base_dir`` is the archive's ``store/``), every file as written,
  the delta engine's dot files included (logs, index, forks records, locks);
- ``manifest.json``: what that release reads back from it, per thread and checkpoint: id,
  ``created_at``, save metadata, the sha256 and length of the state's JSON bytes, the number of
  messages, the envelope extras; the thread's latest; and what a tulip agent lists and loads.

The threads (each a case the converter must handle):

``messy``, ``messy-fork-0``
    a messy agent thread (ScriptedModel, tools, tool errors, interrupts, tulip-style turns, the
    LLMCompactor; :mod:`tulip_nb.testing._messy`) and a lab fork of it (its log points into
    ``messy``'s), continued for two turns;
``support/42:refund #1``, ``…-fork``, ``support-copy``
    an agent with a tool and an ``LLMCompactor`` with a small window (compaction events),
    a save after every model call; ``Agent.fork`` of it, continued; ``copy_thread`` of it;
``tulip-layout``
    two turns written with ``layout="tulip"`` (one envelope per checkpoint, signed metadata);
``mixed``
    delta turns, then a tulip-agents turn (its own envelopes in the directory), then ours again;
``tulip-agents/1``
    written by tulip-agents alone (plain envelopes, no tulip_nb marks) — when it is importable;
``shared_1``, ``shared#1``
    two threads in one directory (``.tulip_nb_log`` and ``.tulip_nb_log-<hash>``);
``orphan``
    a fork whose source thread was deleted afterwards (its log was made to stand alone);
``pruned``
    iteration saves dropped by ``prune`` (dead records left in the log).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FILE_THREAD = "support/42:refund #1"


def lookup(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order id.
    """
    return f"{order_id}: delivered on 2024-05-0{len(order_id) % 9 + 1}; " + "carrier notes " * 12


def _summary(messages: Any, previous: str | None) -> str:
    return f"Summary of {len(messages)} messages."


async def _support(base: Path) -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.memory.backends.file import FileCheckpointer
    from tulip_nb.memory.conversation.compactor import LLMCompactor
    from tulip_nb.models import ScriptedModel, text, tool_call

    cp = FileCheckpointer(base)
    script: list[Any] = []
    for t in range(5):
        script += [tool_call("lookup", order_id=f"ord-{t}-{k}") for k in range(2)] + [text(f"Order batch {t}: ok.")]
    script += [tool_call("lookup", order_id="ord-fork"), text("Fork: refunded.")]
    agent = Agent(
        ScriptedModel(script),
        [lookup],
        system_prompt="You handle refunds.",
        checkpointer=cp,
        conversation_manager=LLMCompactor(context_length=900, head_turns=1, summarize_fn=_summary),
        checkpoint_every_n_iterations=1,
    )
    for t in range(5):
        await agent.run(f"Status of batch {t}?", thread_id=FILE_THREAD)
    await agent.fork(FILE_THREAD, new_thread_id=FILE_THREAD + "-fork")
    await agent.run("Refund the fork's order?", thread_id=FILE_THREAD + "-fork")
    await cp.copy_thread(FILE_THREAD, "support-copy")


def _simple(cp: Any, replies: list[str], every: int | None = 1) -> Any:
    from tulip_nb.agent import Agent, NullManager
    from tulip_nb.models import ScriptedModel, text

    return Agent(
        ScriptedModel([text(r) for r in replies]),
        [],
        system_prompt="You are terse.",
        checkpointer=cp,
        conversation_manager=NullManager(),
        checkpoint_every_n_iterations=every,
    )


def _tulip_agent(base: Path, replies: list[str]) -> Any:
    from tulip.agent import Agent
    from tulip.memory.backends.file import FileCheckpointer
    from tulip.memory.conversation import NullManager
    from tulip.testing import ScriptedModel, text

    return Agent(
        model=ScriptedModel([text(r) for r in replies]),
        tools=[],
        system_prompt="You are terse.",
        conversation_manager=NullManager(),
        checkpointer=FileCheckpointer(base_dir=str(base)),
        checkpoint_every_n_iterations=1,
    )


def _have_tulip() -> bool:
    try:
        import tulip.agent  # noqa: F401
    except ImportError:
        return False
    return True


async def build(base: Path) -> None:
    from tulip_nb.memory.backends.file import FileCheckpointer
    from tulip_nb.testing import MessySpec, build_messy_thread

    cp = FileCheckpointer(base)
    spec = MessySpec(seed=26, turns=10, forks=1, fork_turns=2, big_output_rate=0.0, tulip_rate=0.1)
    await asyncio.to_thread(build_messy_thread, cp, "messy", spec)
    await _support(base)
    tulip_cp = FileCheckpointer(base, layout="tulip")
    for q, a in (("q1", "a1"), ("q2", "a2")):
        await _simple(tulip_cp, [a]).run(q, thread_id="tulip-layout")
    await _simple(cp, ["m1", "m2"]).run("mixed 1", thread_id="mixed")
    if _have_tulip():
        await asyncio.to_thread(_tulip_agent(base, ["from tulip"]).run_sync, "tulip turn", thread_id="mixed")
        await asyncio.to_thread(_tulip_agent(base, ["t1"]).run_sync, "hello tulip", thread_id="tulip-agents/1")
        await asyncio.to_thread(_tulip_agent(base, ["t2"]).run_sync, "again", thread_id="tulip-agents/1")
    await _simple(cp, ["m3"]).run("mixed 2", thread_id="mixed")
    await _simple(cp, ["s1"]).run("shared one", thread_id="shared_1")
    await _simple(cp, ["s2"]).run("shared two", thread_id="shared#1")
    doomed = _simple(cp, ["d1", "o1"])
    await doomed.run("doomed", thread_id="doomed")
    await doomed.fork("doomed", new_thread_id="orphan")
    await doomed.run("orphan turn", thread_id="orphan")
    await cp.delete("doomed")
    pruned = _simple(cp, ["p1", "p2", "p3"])
    for q in ("p1", "p2", "p3"):
        await pruned.run(q, thread_id="pruned")
    await cp.prune("pruned")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def manifest(base: Path) -> dict[str, Any]:
    from tulip_nb.core import iso_offset
    from tulip_nb.memory.backends.file import FileCheckpointer

    cp = FileCheckpointer(base)
    threads: dict[str, Any] = {}
    for thread_id in sorted(await cp.list_threads(limit=None)):
        rows = []
        for info in await cp.list_checkpoint_infos(thread_id, None):
            ck = await cp.load_checkpoint(thread_id, info.checkpoint_id)
            assert ck is not None
            data = ck.state.to_json_bytes()
            rows.append(
                {
                    "checkpoint_id": ck.checkpoint_id,
                    "created_at": iso_offset(ck.created_at),
                    "metadata": ck.metadata,
                    "state_sha256": _digest(data),
                    "state_bytes": len(data),
                    "messages": len(ck.state.messages),
                    "extra": sorted(ck.extra),
                }
            )
        latest = await cp.load_checkpoint(thread_id)
        assert latest is not None
        threads[thread_id] = {
            "directory": cp.thread_dir(thread_id).name,
            "latest": latest.checkpoint_id,
            "checkpoints": rows,  # newest first, as the release lists them
        }
    out: dict[str, Any] = {"threads": threads}
    if _have_tulip():
        from tulip.memory.backends.file import FileCheckpointer as TulipFile

        tcp = TulipFile(base_dir=str(base))
        seen = {}
        for thread_id in threads:
            ids = await tcp.list_checkpoints(thread_id, limit=1000)
            state = await tcp.load(thread_id)
            last = state.messages[-1].content if state is not None and state.messages else None
            seen[thread_id] = {"listed": list(ids), "last_message": None if last is None else last[:80]}
        out["tulip"] = seen
    return out


def _release() -> dict[str, Any]:
    import inspect

    import tulip_nb
    from tulip_nb.memory.backends.file import FileCheckpointer

    layout = inspect.signature(FileCheckpointer.__init__).parameters["layout"].default
    if layout != "delta":
        raise SystemExit(f"this tulip_nb writes layout={layout!r} by default: run the script with the delta release")
    where = Path(tulip_nb.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # an exported tree: say which commit it is
        commit = os.environ.get("TULIP_NB_COMMIT")
    tulip_version = None
    if _have_tulip():
        from importlib.metadata import version

        tulip_version = version("tulip-agents")
    return {"tulip_nb_commit": commit, "tulip_agents": tulip_version, "default_layout": layout}


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "legacy_store"
    out.mkdir(parents=True, exist_ok=True)
    release = _release()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "store"
        asyncio.run(build(base))
        data = asyncio.run(manifest(base))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
            for path in sorted(base.rglob("*")):
                tar.add(path, arcname=str(Path("store") / path.relative_to(base)), recursive=False)
    (out / "store.tar.gz").write_bytes(buf.getvalue())
    data = {"release": release, **data}
    (out / "manifest.json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    n = sum(len(t["checkpoints"]) for t in data["threads"].values())
    print(
        f"{out}: {len(data['threads'])} threads, {n} checkpoints, store.tar.gz {len(buf.getvalue()) / 1000:.0f} kB",
        json.dumps(release),
    )


if __name__ == "__main__":
    main()
