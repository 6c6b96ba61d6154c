"""tulip-nb serve / threads / diff / verify / lab, through subprocess."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from tulip_nb.agent import Agent
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import ScriptedModel, text, tool_call

from ._proc import serve


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tulip_nb.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def lookup(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order id.
    """
    return f"{order_id}: delivered"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    base = tmp_path / "threads"

    async def build() -> None:
        model = ScriptedModel([tool_call("lookup", order_id="o-1"), text("Delivered."), text("Yes, refund it.")])
        agent = Agent(model, [lookup], checkpointer=FileCheckpointer(base, sign=True))
        await agent.run("Where is o-1?", thread_id="case-1")
        await agent.fork("case-1", new_thread_id="case-1-what-if")
        await agent.run("Refund it?", thread_id="case-1-what-if")

    asyncio.run(build())
    return base


@pytest.mark.parametrize(
    "command",
    ["serve", "threads", "threads ls", "threads show", "diff", "verify", "prune", "convert", "lab", "cache", "share"],
)
def test_help(command: str) -> None:
    r = cli(*command.split(), "--help")
    assert r.returncode == 0 and "usage: tulip-nb" in r.stdout


def test_threads_ls_show_rm(store: Path) -> None:
    r = cli("threads", "ls", f"file:{store}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["case-1", "case-1-what-if"]
    r = cli("threads", "show", str(store), "case-1")
    assert r.returncode == 0, r.stderr
    assert "thread case-1: 4 messages" in r.stdout
    assert "lookup(" in r.stdout and "Delivered." in r.stdout and "checkpoints (newest first, 1 shown)" in r.stdout
    r = cli("threads", "show", str(store), "case-1", "--tail", "2")
    assert r.returncode == 0, r.stderr
    conversation = r.stdout.split("\n\n")[1]  # header, conversation, checkpoints
    shown = [ln for ln in conversation.splitlines() if ln[:4].strip().isdigit()]
    assert [ln.split()[0] for ln in shown] == ["2", "3"] and "Delivered." in shown[-1]
    assert "2 earlier message(s) not shown" in r.stdout and "lookup(" not in r.stdout
    r = cli("threads", "show", str(store), "case-1", "--tail", "-1")
    assert r.returncode == 2 and "--tail" in r.stderr
    r = cli("threads", "show", str(store), "nope")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such thread" in r.stderr
    r = cli("threads", "rm", str(store), "case-1")
    assert r.returncode == 0 and "deleted thread case-1" in r.stdout
    assert cli("threads", "ls", str(store)).stdout.split() == ["case-1-what-if"]
    r = cli("threads", "rm", str(store), "case-1")
    assert r.returncode == 2 and "nothing to delete" in r.stderr


def test_threads_bad_url() -> None:
    r = cli("threads", "ls", "gopher://x")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown checkpointer URL scheme" in r.stderr


def test_diff(store: Path) -> None:
    r = cli("diff", str(store), "case-1", "case-1-what-if", "--simple")
    assert r.returncode == 1, r.stderr  # like diff(1): 1 when the threads differ
    lines = r.stdout.splitlines()
    assert "4 messages in common" in lines[2]
    assert [ln[:1] for ln in lines[3:]] == ["+", "+"]
    assert "Refund it?" in lines[3] and "Yes, refund it." in lines[4]
    r = cli("diff", str(store), "case-1", "case-1-what-if")  # with tulip_nb.lab's summary when available
    assert r.returncode == 1, r.stderr
    assert "4 messages in common" in r.stdout and "Yes, refund it." in r.stdout
    for extra in ((), ("--simple",)):
        r = cli("diff", str(store), "case-1", "case-1", *extra)
        assert r.returncode == 0, r.stderr  # identical: 0
        assert "the conversations are identical" in r.stdout
    r = cli("diff", str(store), "case-1", "missing")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such thread" in r.stderr


def test_verify(store: Path) -> None:
    r = cli("verify", str(store), "case-1-what-if")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "ok: 2 checkpoint(s) of case-1-what-if"
    assert r.stdout.splitlines()[1].startswith("hash chain: 2 ok")
    # the fork's first checkpoint names a parent in another thread: only that is reported when
    # the source thread's checkpoint is gone, one line per problem
    files = sorted((p for p in store.rglob("*.json") if "what-if" in str(p.parent)), key=lambda p: p.stat().st_mtime)
    newest = files[-1]  # the thread's tulip envelope
    original = newest.read_text()
    newest.write_text(original[:-40])  # truncated
    r = cli("verify", str(store), "case-1-what-if")
    assert r.returncode == 1
    assert "tulip envelope" in r.stdout and "cannot be read" in r.stdout and "problem(s)" in r.stderr
    newest.write_text(original)
    assert cli("verify", str(store), "case-1-what-if").returncode == 0
    with sqlite3.connect(store / ".tulip_nb" / "history.sqlite3") as conn:  # a flipped bit in a message
        rowid, data = conn.execute(
            "SELECT e.rowid, e.data FROM entries e JOIN checkpoints c ON c.head = e.rowid"
            " WHERE c.thread = 'case-1-what-if' ORDER BY c.seq LIMIT 1"
        ).fetchone()
        conn.execute(
            "UPDATE entries SET data = ? WHERE rowid = ?", (data[:-5] + bytes([data[-5] ^ 1]) + data[-4:], rowid)
        )
    r = cli("verify", str(store), "case-1-what-if")
    assert r.returncode == 1 and "problem(s)" in r.stderr and "no longer matches its entry id" in r.stdout
    r = cli("verify", str(store), "nope")
    assert r.returncode == 2


def test_verify_anchor_expect_and_a_deleted_fork_source(store: Path, tmp_path: Path) -> None:
    r = cli("verify", str(store), "case-1-what-if", "--anchor")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 1 and '"tulip_nb_anchor":1' in r.stdout  # the anchor alone on stdout
    assert "ok: 2 checkpoint(s) of case-1-what-if" in r.stderr
    kept = tmp_path / "what-if.anchor.json"
    kept.write_text(r.stdout)
    r = cli("verify", str(store), "case-1-what-if", "--expect", str(kept))
    assert r.returncode == 0 and "anchor: ok" in r.stdout, r.stdout + r.stderr
    # the fork's source deleted: the fork still verifies, its first checkpoint's origin is noted
    assert cli("threads", "rm", str(store), "case-1").returncode == 0
    r = cli("verify", str(store), "case-1-what-if", "--expect", str(kept))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "note:" in r.stdout and "origin_gone" in r.stdout and "source thread 'case-1' is gone" in r.stdout
    # the newest checkpoint deleted: a rollback only the anchor shows

    async def drop_newest() -> None:
        cp = FileCheckpointer(store)
        infos = await cp.list_checkpoint_infos("case-1-what-if", 1)
        assert await cp.delete("case-1-what-if", infos[0].checkpoint_id)

    asyncio.run(drop_newest())
    assert cli("verify", str(store), "case-1-what-if").returncode == 0
    r = cli("verify", str(store), "case-1-what-if", "--expect", str(kept))
    assert r.returncode == 1 and "anchor: rolled_back" in r.stdout and "problem(s)" in r.stderr


def test_lab_dry_run(tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    r = cli("lab", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0
    assert "-m jupyter lab" in r.stdout and str(tmp_path / "notebooks") in r.stdout
    r = cli("lab", "--dry-run", "--notebooks", str(tmp_path / "none"))
    assert r.returncode == 2 and "no notebooks directory" in r.stderr


def test_serve_errors() -> None:
    r = cli("serve", "--app", "no_such_module_xyz:agent")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot import" in r.stderr
    r = cli("serve", "--app", "tests.server.served_agent")
    assert r.returncode == 2 and "module:attribute" in r.stderr
    r = cli("serve", "--app", "tests.server.served_agent:reply")
    assert r.returncode == 2 and "not a tulip_nb Agent" in r.stderr
    r = cli("serve", "--app", "tests.server.served_agent:agent", "--host", "0.0.0.0")
    assert r.returncode == 2 and "without an API key" in r.stderr
    r = cli("serve", "--app", "tests.server.served_agent:agent", "--checkpointer", "gopher://x")
    assert r.returncode == 2


def test_serve_one_worker_with_key_and_factory(tmp_path: Path) -> None:
    base = tmp_path / "srv"
    env = {"TULIP_NB_SERVER_API_KEY": "k1,k2"}
    args = ("--app", "tests.server.served_agent:make_agent", "--checkpointer", f"file:{base}")
    with serve(*args, log_dir=tmp_path, env=env) as (url, _), httpx.Client(base_url=url) as http:
        assert http.post("/invoke", json={"prompt": "hi", "thread_id": "t"}).status_code == 401
        r = http.post("/invoke", json={"prompt": "hi", "thread_id": "t"}, headers={"Authorization": "Bearer k1"})
        assert r.status_code == 200 and r.json()["message"] == "echo: hi"
        with http.stream("POST", "/stream", json={"prompt": "yo"}, headers={"Authorization": "Bearer k2"}) as s:
            body = "".join(s.iter_text())
        assert body.startswith("data: {") and body.endswith("data: [DONE]\n\n")
    # the thread is stored in tulip's layout, readable from the command line
    r = cli("threads", "ls", str(base))
    from tulip_nb.core.principals import principal_for_api_key

    assert r.stdout.split() == [f"{principal_for_api_key('k1')}:t"]


def test_prune(tmp_path: Path) -> None:
    base = tmp_path / "threads"

    async def build() -> None:
        script = [tool_call("lookup", order_id="o-1"), tool_call("lookup", order_id="o-2"), text("Both delivered.")]
        cp = FileCheckpointer(base, sign=True)
        agent = Agent(ScriptedModel(script * 2), [lookup], checkpointer=cp, checkpoint_every_n_iterations=1)
        await agent.run("Where are o-1 and o-2?", thread_id="t")
        await agent.run("And now?", thread_id="t")

    asyncio.run(build())
    r = cli("prune", str(base), "t", "--dry-run")
    assert r.returncode == 0, r.stderr
    would = [ln.split()[-1] for ln in r.stdout.splitlines()]
    assert len(would) == 4 and all(ln.startswith("would drop ") for ln in r.stdout.splitlines())
    assert "would drop 4 of 6 checkpoint(s); 2 would be kept" in r.stderr  # what the real prune keeps
    r = cli("prune", str(base), "t")
    assert r.returncode == 0, r.stderr
    assert [ln.split()[-1] for ln in r.stdout.splitlines()] == would
    assert "dropped 4 of 6 checkpoint(s); 2 kept" in r.stderr
    r = cli("verify", str(base), "t")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[1] == "hash chain: 2 ok"
    r = cli("prune", str(base), "t", "--keep-last", "-1")
    assert r.returncode == 2 and "--keep-last" in r.stderr
    r = cli("prune", str(base), "nope")
    assert r.returncode == 2 and "no such thread" in r.stderr
