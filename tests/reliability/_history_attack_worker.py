"""Child-process bodies for test_history_attacks.py: each plays one side of a race on the history layout.

:func:`play` runs one role over a list of jobs (one store per job): it prepares (a forker loads
the source first), meets the other side at a barrier, waits its job's small delay (so the two
operations land in different orders across runs) and acts, reporting what it was acknowledged
and when (``time.monotonic`` is one clock for every process of the machine, so the parent can
tell which runs really overlapped). :func:`save_turns`, :func:`fork_and_copy` and
:func:`tulip_rmtree_loop` are the long-running sides of the tulip ``rmtree`` race.

Every child opens its own ``FileCheckpointer(base, layout="history")``: its own SQLite connection.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from pathlib import Path
from typing import Any

from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends import FileCheckpointer

SOURCE = "src"


def _open(base: str) -> Any:
    return FileCheckpointer(base, layout="history", fsync=False)


def _error(e: BaseException) -> tuple[str, str]:
    """The error's type, and its message with where it was raised (file:line of the last frame)."""
    last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" [at {Path(last.filename).name}:{last.lineno} {last.name}]" if last else ""
    return type(e).__name__, f"{e}{where}"


async def fork_checkpoint(cp: Any, ckpt: Any, name: str) -> dict[str, Any]:
    """Save ``ckpt`` as a new thread's first checkpoint (as ``Agent.fork`` does), then one turn of its own."""
    acked: list[tuple[str, bytes]] = []
    errors: list[tuple[str, str]] = []
    meta = {"forked_from": SOURCE, "parent_checkpoint_id": ckpt.checkpoint_id, "source": "fork"}
    own = ckpt.state.model_copy(deep=True)
    own.messages = [*own.messages, Message.user(f"{name}: the fork's own question")]
    for state, metadata, parent in ((ckpt.state, meta, ""), (own, {"source": "final"}, None)):
        try:
            cid = await cp.save(state, name, metadata=metadata, expected_parent=parent)
            acked.append((cid, state.to_json_bytes()))
        except Exception as e:
            errors.append(_error(e))
    return {"acked": acked, "errors": errors}


async def _prepare(role: str, cp: Any) -> Any:
    if role == "fork":
        ckpt = await cp.load_checkpoint(SOURCE)
        assert ckpt is not None, "the parent built no source thread"
        return ckpt
    if role == "tulip_rmtree":
        from tulip.memory.backends import FileCheckpointer as TulipFile

        return TulipFile(base_dir=cp.base_dir)
    return None


async def _act(role: str, cp: Any, prepared: Any) -> Any:
    if role == "fork":
        return await fork_checkpoint(cp, prepared, "fork")
    if role == "delete":
        return await cp.delete(SOURCE)
    if role == "copy":
        return await cp.copy_thread(SOURCE, "dst")
    if role == "prune_turn_ends":
        return await cp.prune(SOURCE)
    if role == "prune_last":
        return await cp.prune(SOURCE, keep_last=4, keep_turn_ends=False)
    if role == "tulip_rmtree":
        return await prepared.delete(SOURCE)
    raise ValueError(f"unknown role {role!r}")


async def _play(role: str, jobs: list[dict[str, Any]], barrier: Any, out: Any) -> None:
    for job in jobs:
        cp = _open(job["base"])
        try:
            prepared = await _prepare(role, cp)
            barrier.wait(60)
            await asyncio.sleep(job["delay"].get(role, 0.0))
            start = time.monotonic()
            try:
                result: Any = ("ok", await _act(role, cp, prepared))
            except Exception as e:
                result = ("error", *_error(e))
            out.put((job["run"], role, result, (start, time.monotonic())))
        finally:
            await cp.close()


def play(role: str, jobs: list[dict[str, Any]], barrier: Any, out: Any) -> None:
    """Play ``role`` in every job (module docstring); one result per job on ``out``."""
    asyncio.run(_play(role, jobs, barrier, out))


# -- the tulip rmtree race: long-running sides ---------------------------------------------------
async def _save_turns(base: str, turns: int, go: Any, out: Any) -> None:
    cp = _open(base)
    state = AgentState(messages=[Message.system("sys")])
    acked: list[tuple[str, bytes]] = []
    errors: list[tuple[str, str]] = []
    go.wait(60)
    for i in range(turns):
        state.messages = [*state.messages, Message.user(f"q{i} " + "x" * 500), Message.assistant(f"a{i}")]
        state.metadata = {"turn": i, "log": list(range(i + 1))}
        try:
            acked.append((await cp.save(state, SOURCE, metadata={"source": "final"}), state.to_json_bytes()))
        except Exception as e:
            errors.append(_error(e))
    await cp.close()
    out.put(("saver", acked, errors))


def save_turns(base: str, turns: int, go: Any, out: Any) -> None:
    """Save ``turns`` turn ends on the source thread (each one rewrites its tulip envelope)."""
    asyncio.run(_save_turns(base, turns, go, out))


async def _fork_and_copy(base: str, rounds: int, go: Any, out: Any) -> None:
    cp = _open(base)
    forks: list[dict[str, Any]] = []
    copies: list[tuple[str, Any]] = []
    go.wait(60)
    for k in range(rounds):
        try:
            ckpt = await cp.load_checkpoint(SOURCE)
        except Exception as e:
            forks.append({"name": f"fork-{k}", "acked": [], "errors": [_error(e)]})
            ckpt = None
        if ckpt is not None:
            forks.append({"name": f"fork-{k}", **await fork_checkpoint(cp, ckpt, f"fork-{k}")})
        try:
            copies.append((f"copy-{k}", ("ok", await cp.copy_thread(SOURCE, f"copy-{k}"))))
        except Exception as e:
            copies.append((f"copy-{k}", ("error", *_error(e))))
    await cp.close()
    out.put(("forker", forks, copies))


def fork_and_copy(base: str, rounds: int, go: Any, out: Any) -> None:
    """Fork and copy the source thread ``rounds`` times, while it is being written and rmtree'd."""
    asyncio.run(_fork_and_copy(base, rounds, go, out))


async def _tulip_rmtree_loop(base: str, go: Any, stop: Any, out: Any) -> None:
    from tulip.memory.backends import FileCheckpointer as TulipFile

    theirs = TulipFile(base_dir=base)
    go.wait(60)  # every side ready (imports done), then all at once
    removed = 0
    while not stop.is_set():
        removed += bool(await theirs.delete(SOURCE))  # tulip's delete of a thread: shutil.rmtree
        await asyncio.sleep(0.001)
    out.put(("tulip", removed))


def tulip_rmtree_loop(base: str, go: Any, stop: Any, out: Any) -> None:
    """tulip-agents deleting the source thread, again and again, until ``stop`` is set."""
    asyncio.run(_tulip_rmtree_loop(base, go, stop, out))
