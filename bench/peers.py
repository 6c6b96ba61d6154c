"""The peers that live in another Python: LangGraph (SqliteSaver or PostgresSaver, + DeltaChannel)
and the OpenAI Agents SDK's SQLiteSession and SQLAlchemySession (PostgreSQL), driven from the bench
over a pipe, one save at a time.

Why out of process: the peers and their dependencies (langchain-core, langgraph, the Agents SDK,
mcp, ...) need not be installed in tulip_nb's own environment, where importing them could change
what tulip or tulip_nb pick up. The worker is ``python -m bench.peers`` started with the Python
the bench is given (``--peers-python``, else ``$BENCH_PEERS_PYTHON``, else the bench's own
Python); it imports only :mod:`bench.bench_langgraph` and :mod:`bench.bench_openai_sessions`
(neither imports tulip_nb), and reads one JSON command per line, answering one JSON line each.
Every timing is taken inside the worker around the peer's own call, so the pipe is never timed;
the bench interleaves the worker's saves with its in-process cases save by save.

    python -m bench.peers          # the worker (stdin/stdout); not meant to be run by hand
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENV_PYTHON = "BENCH_PEERS_PYTHON"


# -- the client (in the bench) ----------------------------------------------------------------------
class PeerError(RuntimeError):
    """A command failed inside the peer worker (its message says which and why)."""


class PeerWorker:
    """A running ``python -m bench.peers``; :meth:`call` sends one command and returns its answer."""

    def __init__(self, python: str) -> None:
        self.python = python
        old = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + old if old else "")}
        self.proc = subprocess.Popen(
            [python, "-m", "bench.peers"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.info = self.call("hello")

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        if self.proc.poll() is not None:
            raise PeerError(f"the peer worker ({self.python}) exited with code {self.proc.returncode}")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise PeerError(f"the peer worker ({self.python}) died during {op!r} (its stderr is above)")
        got: dict[str, Any] = json.loads(line)
        if "error" in got:
            raise PeerError(f"peer worker, {op}: {got['error']}")
        return got

    @property
    def langgraph(self) -> bool:
        return bool(self.info.get("langgraph"))

    @property
    def sessions(self) -> bool:
        return bool(self.info.get("openai_agents"))

    @property
    def langgraph_pg(self) -> bool:
        """LangGraph with DeltaChannel and ``langgraph-checkpoint-postgres``."""
        return bool(self.info.get("langgraph_pg"))

    @property
    def alchemy(self) -> bool:
        """The Agents SDK's ``SQLAlchemySession`` with asyncpg."""
        return bool(self.info.get("alchemy"))

    def describe(self) -> str:
        v = self.info.get("versions", {})
        parts = [f"peers run in {self.python} (a worker process)"]
        if self.langgraph:
            parts.append(
                f"langgraph {v.get('langgraph')}, langgraph-checkpoint {v.get('langgraph-checkpoint')}, "
                f"langgraph-checkpoint-sqlite {v.get('langgraph-checkpoint-sqlite')}"
            )
        if self.langgraph_pg:
            parts.append(f"langgraph-checkpoint-postgres {v.get('langgraph-checkpoint-postgres')}")
        if self.sessions:
            parts.append(f"openai-agents {v.get('openai-agents')}")
        if self.alchemy:
            parts.append(f"sqlalchemy {v.get('sqlalchemy')}, asyncpg {v.get('asyncpg')}")
        parts.append(f"SQLite {v.get('sqlite')}")
        return "; ".join(parts)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(PeerError):
                self.call("quit")
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def start(python: str | None = None) -> tuple[PeerWorker | None, str]:
    """The worker for ``python`` (else ``$BENCH_PEERS_PYTHON``, else this Python), and a note.

    ``None`` with the reason when it cannot start or has neither peer installed.
    """
    chosen = python or os.environ.get(ENV_PYTHON) or sys.executable
    hint = (
        "pass `--peers-python /path/to/python` (a Python with openai-agents, langgraph and "
        f"langgraph-checkpoint-sqlite installed) or set ${ENV_PYTHON}"
    )
    try:
        worker = PeerWorker(chosen)
    except (OSError, PeerError) as e:
        return None, f"peers not measured: the peer worker did not start with {chosen} ({e}); {hint}."
    if not (worker.langgraph or worker.sessions or worker.langgraph_pg or worker.alchemy):
        worker.close()
        return (
            None,
            f"peers not measured: {chosen} has neither LangGraph (with DeltaChannel) nor openai-agents; {hint}.",
        )
    missing = [name for name, ok in (("LangGraph", worker.langgraph), ("SQLiteSession", worker.sessions)) if not ok]
    note = worker.describe() + (f"; not installed there: {', '.join(missing)}" if missing else "")
    return worker, note


# -- the worker -------------------------------------------------------------------------------------
class _Worker:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.workloads: dict[str, list[list[dict[str, Any]]]] = {}
        self.items: dict[str, list[list[dict[str, Any]]]] = {}
        self.lc: dict[str, list[list[Any]]] = {}
        self.open: dict[str, Any] = {}

    def hello(self) -> dict[str, Any]:
        from bench import bench_langgraph as lg
        from bench import bench_openai_sessions as oa

        delta = True
        try:
            from langgraph.channels import DeltaChannel  # noqa: F401
        except ImportError:
            delta = False
        has_lg = lg.available() and delta
        has_pg = lg.pg_available() and delta
        versions = {**(lg.versions() if has_lg or has_pg else {}), **oa.versions()}
        return {
            "langgraph": has_lg,
            "langgraph_pg": has_pg,
            "openai_agents": oa.available(),
            "alchemy": oa.alchemy_available(),
            "versions": versions,
        }

    def workload(self, name: str, path: str) -> dict[str, Any]:
        from bench.bench_openai_sessions import to_items

        steps = json.loads(Path(path).read_text())["steps"]
        self.workloads[name] = steps
        self.items[name] = [[it for m in step for it in to_items(m)] for step in steps]
        self.lc.pop(name, None)
        return {"steps": len(steps)}

    def _lc(self, workload: str) -> list[list[Any]]:
        """The workload as langchain-core messages (built once per workload, untimed)."""
        from bench.bench_langgraph import langchain_steps

        if workload not in self.lc:
            self.lc[workload] = langchain_steps(self.workloads[workload])
        return self.lc[workload]

    # SQLiteSession
    def oa_open(self, key: str, path: str, workload: str, session_id: str = "conv") -> dict[str, Any]:
        from bench.bench_openai_sessions import Session

        session = Session(Path(path), session_id)
        self.open[key] = (session, workload)
        return session.pragmas()

    def oa_add(self, key: str, i: int) -> dict[str, Any]:
        session, workload = self.open[key]
        return {"s": self.loop.run_until_complete(session.add(self.items[workload][i]))}

    def oa_close(self, key: str) -> dict[str, Any]:
        session, _ = self.open.pop(key)
        session.close()
        return {}

    def oa_build(self, path: str, workload: str, session_id: str = "conv") -> dict[str, Any]:
        """A session holding the whole workload, saved step by step (for the forks section)."""
        from bench.bench_openai_sessions import Session

        session = Session(Path(path), session_id)
        try:
            for step in self.items[workload]:
                self.loop.run_until_complete(session.add(step))
        finally:
            session.close()
        return {"items": sum(len(s) for s in self.items[workload])}

    def oa_load(self, path: str, session_id: str = "conv") -> dict[str, Any]:
        from bench.bench_openai_sessions import load

        s, n = self.loop.run_until_complete(load(Path(path), session_id))
        return {"s": s, "items": n}

    def oa_copy(self, path: str, source: str, dest: str) -> dict[str, Any]:
        from bench.bench_openai_sessions import copy_session

        s, n = self.loop.run_until_complete(copy_session(Path(path), source, dest))
        return {"s": s, "items": n}

    # LangGraph + DeltaChannel
    def lg_open(self, key: str, path: str, workload: str) -> dict[str, Any]:
        from bench.bench_langgraph import DeltaRun

        run = DeltaRun(Path(path), self._lc(workload))
        self.open[key] = run
        return dict(run.graph.pragmas())

    def lg_step(self, key: str, i: int) -> dict[str, Any]:
        self.open[key].step(i)
        return {}

    def lg_finish(self, key: str) -> dict[str, Any]:
        return dict(self.open.pop(key).finish())

    def lg_build(self, path: str, workload: str) -> dict[str, Any]:
        from bench.bench_langgraph import DeltaRun

        got = DeltaRun(Path(path), self._lc(workload)).finish()
        return {"checkpoints": got["checkpoints"]}

    def lg_load(self, path: str) -> dict[str, Any]:
        from bench.bench_langgraph import DeltaGraph

        graph = DeltaGraph(Path(path))
        try:
            s, n = graph.load()
        finally:
            graph.close()
        return {"s": s, "messages": n}

    def lg_fork(self, path: str, message: dict[str, Any]) -> dict[str, Any]:
        from bench.bench_langgraph import DeltaGraph, to_langchain

        graph = DeltaGraph(Path(path))
        try:
            s, n = graph.fork(to_langchain(message, 10**9))
        finally:
            graph.close()
        return {"s": s, "messages": n}

    # LangGraph PostgresSaver + DeltaChannel (the remote section); step / finish: lg.step, lg.finish
    def pglg_open(self, key: str, dsn: str, workload: str, thread_id: str = "conv") -> dict[str, Any]:
        from bench.bench_langgraph import DeltaRun

        run = DeltaRun(None, self._lc(workload), pg_dsn=dsn, thread_id=thread_id)
        self.open[key] = run
        return dict(run.graph.pragmas())

    def pglg_build(self, dsn: str, workload: str, thread_id: str, upto: int) -> dict[str, Any]:
        """A thread holding the workload's first ``upto`` saves (for the fork of a shorter thread)."""
        from bench.bench_langgraph import DeltaRun

        got = DeltaRun(None, self._lc(workload)[:upto], pg_dsn=dsn, thread_id=thread_id).finish()
        return {"checkpoints": got["checkpoints"]}

    def pglg_fork(self, dsn: str, message: dict[str, Any], thread_id: str) -> dict[str, Any]:
        from bench.bench_langgraph import DeltaGraph, to_langchain

        graph = DeltaGraph(None, pg_dsn=dsn, thread_id=thread_id)
        try:
            s, n = graph.fork(to_langchain(message, 10**9))
        finally:
            graph.close()
        return {"s": s, "messages": n}

    def pglg_load(self, dsn: str, thread_id: str = "conv") -> dict[str, Any]:
        from bench.bench_langgraph import DeltaGraph

        graph = DeltaGraph(None, pg_dsn=dsn, thread_id=thread_id)
        try:
            s, n = graph.load()
        finally:
            graph.close()
        return {"s": s, "messages": n}

    # SQLAlchemySession on PostgreSQL (the remote section)
    def sa_open(self, key: str, url: str, schema: str, workload: str, session_id: str = "conv") -> dict[str, Any]:
        from bench.bench_openai_sessions import AlchemySession

        session = AlchemySession(url, schema, session_id)
        self.loop.run_until_complete(session.open())
        self.open[key] = (session, workload)
        return {}

    def sa_add(self, key: str, i: int) -> dict[str, Any]:
        session, workload = self.open[key]
        return {"s": self.loop.run_until_complete(session.add(self.items[workload][i]))}

    def sa_close(self, key: str) -> dict[str, Any]:
        session, _ = self.open.pop(key)
        self.loop.run_until_complete(session.close())
        return {}

    def sa_build(self, url: str, schema: str, workload: str, session_id: str, upto: int) -> dict[str, Any]:
        from bench.bench_openai_sessions import AlchemySession

        session = AlchemySession(url, schema, session_id)
        try:
            self.loop.run_until_complete(session.open())
            for step in self.items[workload][:upto]:
                self.loop.run_until_complete(session.session.add_items(step))  # type: ignore[arg-type]
        finally:
            self.loop.run_until_complete(session.close())
        return {}

    def sa_copy(self, url: str, schema: str, source: str, dest: str) -> dict[str, Any]:
        from bench.bench_openai_sessions import AlchemySession

        session = AlchemySession(url, schema, source)
        try:
            s, n = self.loop.run_until_complete(session.copy_to(dest))
        finally:
            self.loop.run_until_complete(session.close())
        return {"s": s, "items": n}

    def sa_load(self, url: str, schema: str, session_id: str = "conv") -> dict[str, Any]:
        from bench.bench_openai_sessions import AlchemySession

        session = AlchemySession(url, schema, session_id)
        try:
            s, n = self.loop.run_until_complete(session.load())
        finally:
            self.loop.run_until_complete(session.close())
        return {"s": s, "items": n}

    def serve(self, inp: Any, out: Any) -> None:
        for line in inp:
            cmd = json.loads(line)
            op = cmd.pop("op")
            if op == "quit":
                out.write("{}\n")
                out.flush()
                return
            try:
                got = getattr(self, op.replace(".", "_"))(**cmd)
            except Exception as e:  # reported to the bench, which raises it there
                traceback.print_exc()
                got = {"error": f"{type(e).__name__}: {e}"}
            out.write(json.dumps(got) + "\n")
            out.flush()


def _main() -> None:
    import warnings

    warnings.filterwarnings("ignore")  # DeltaChannel's beta warning and the like: not the bench's output
    out = sys.stdout
    sys.stdout = sys.stderr  # anything a library prints goes to stderr, never into the protocol
    _Worker().serve(sys.stdin, out)


if __name__ == "__main__":
    _main()
