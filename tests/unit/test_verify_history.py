"""``tulip-nb verify`` on the file store's history layout: every problem of a damaged store, each on
its own line naming its thread (or ``store:``), none hiding the others; a clean store exits 0.

The store is damaged the ways a disk, a hand or another program damages it: a byte of a message
entry flipped, a row's save metadata edited, a row moved to another thread, the projection tulip
reads deleted or edited (state, save metadata, ``created_at``), an entry's reference count changed
(all with ``sqlite3``, as anyone can), and a byte of the database file itself flipped. The command
runs in this process on a fresh instance, as from a shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.agent import Agent
from tulip_nb.cli import main
from tulip_nb.core._messages import Message
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.models import ScriptedModel, text

# -- building and damaging a store ----------------------------------------------------------------


def _reply(messages: list[Message]) -> Message:
    return text(f"noted: {messages[-1].content}")


async def _build_async(base: Path, threads: list[str], turns: int = 2, **kw: Any) -> dict[str, list[str]]:
    cp = FileCheckpointer(base, **kw)
    try:
        agent = Agent(ScriptedModel(_reply), checkpointer=cp)
        for thread in threads:
            for i in range(turns):
                await agent.run(f"{thread} turn {i}", thread_id=thread)
        return {t: [i.checkpoint_id for i in reversed(await cp.list_checkpoint_infos(t, None))] for t in threads}
    finally:
        await cp.close()


def build(base: Path, threads: list[str], turns: int = 2, **kw: Any) -> dict[str, list[str]]:
    """``threads`` of ``turns`` agent turns each (a turn end per turn): thread -> ids, oldest first."""
    return asyncio.run(_build_async(base, threads, turns, **{"layout": "history", **kw}))


def _db(base: Path) -> Path:
    return base / ".tulip_nb" / "history.sqlite3"


@contextlib.contextmanager
def sql(base: Path) -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(_db(base), isolation_level=None)
    try:
        yield con
    finally:
        con.close()


def _head(con: sqlite3.Connection, thread: str, cid: str) -> int:
    (head,) = con.execute("SELECT head FROM checkpoints WHERE thread = ? AND cid = ?", (thread, cid)).fetchone()
    return int(head)


def _projection(base: Path, thread: str) -> Path:
    """The one projection envelope of ``thread`` (tulip's view of its latest turn end)."""
    (path,) = [p for p in (base / thread).glob("*.json") if "tulip_nb_projection" in orjson.loads(p.read_bytes())]
    return path


def _edit_projection(base: Path, thread: str, edit: Callable[[dict[str, Any]], None]) -> None:
    path = _projection(base, thread)
    envelope = orjson.loads(path.read_bytes())
    edit(envelope)
    path.write_bytes(orjson.dumps(envelope))


Expected = list[tuple[str, str]]
"""(who the line names: a thread id or ``store``, a regex the line matches)."""


def flip_entry(base: Path, thread: str, cids: list[str]) -> Expected:
    newest = cids[-1]
    with sql(base) as con:
        head = _head(con, thread, newest)
        data = bytearray(con.execute("SELECT data FROM entries WHERE rowid = ?", (head,)).fetchone()[0])
        data[len(data) // 2] ^= 0x04
        con.execute("UPDATE entries SET data = ? WHERE rowid = ?", (bytes(data), head))
    return [(thread, f"^{newest}: cannot be read: .*no longer matches its entry id")]


def edit_row_metadata(base: Path, thread: str, cids: list[str]) -> Expected:
    oldest = cids[0]
    with sql(base) as con:
        (raw,) = con.execute(
            "SELECT metadata FROM checkpoints WHERE thread = ? AND cid = ?", (thread, oldest)
        ).fetchone()
        meta = {**orjson.loads(raw), "approved_by": "mallory"}
        con.execute(
            "UPDATE checkpoints SET metadata = ? WHERE thread = ? AND cid = ?", (orjson.dumps(meta), thread, oldest)
        )
    return [(thread, f"^{oldest}: cannot be read: .*content digest")]


def move_row(base: Path, thread: str, cids: list[str]) -> Expected:
    newest, target = cids[-1], f"{thread}-moved"
    with sql(base) as con:
        con.execute("UPDATE checkpoints SET thread = ? WHERE thread = ? AND cid = ?", (target, thread, newest))
    return [
        (thread, f"^{newest}: stale tulip envelope"),  # tulip would still be shown the moved checkpoint
        (thread, f"^{cids[-2]}: the tulip envelope .* cannot be read"),  # the new latest turn end has none
        (target, newest),  # a row that is not its thread's: never served there
    ]


def delete_projection(base: Path, thread: str, cids: list[str]) -> Expected:
    _projection(base, thread).unlink()
    return [(thread, f"^{cids[-1]}: the tulip envelope .* cannot be read")]


def projection_created_at(base: Path, thread: str, cids: list[str]) -> Expected:
    _edit_projection(base, thread, lambda e: e.update(created_at="2001-02-03T04:05:06+00:00"))
    return [(thread, rf"^{cids[-1]}: the tulip envelope .* differs from the history \(created_at\)")]


def projection_metadata(base: Path, thread: str, cids: list[str]) -> Expected:
    _edit_projection(base, thread, lambda e: e["metadata"].update(source="approved"))
    return [(thread, rf"^{cids[-1]}: the tulip envelope .* differs from the history \(save metadata\)")]


def projection_state(base: Path, thread: str, cids: list[str]) -> Expected:
    _edit_projection(base, thread, lambda e: e["state"]["messages"][-1].update(content="something else"))
    return [(thread, rf"^{cids[-1]}: the tulip envelope .* differs from the history \(state\)")]


def refcount(base: Path, thread: str, cids: list[str]) -> Expected:
    with sql(base) as con:
        head = _head(con, thread, cids[0])
        (refs,) = con.execute("SELECT refs FROM entries WHERE rowid = ?", (head,)).fetchone()
        con.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (head,))
    return [("store", f"^entry {head}: refs {refs + 1}, reached {refs} times$")]


DAMAGE: dict[str, Callable[[Path, str, list[str]], Expected]] = {
    f.__name__: f
    for f in (
        flip_entry,
        edit_row_metadata,
        move_row,
        delete_projection,
        projection_created_at,
        projection_metadata,
        projection_state,
        refcount,
    )
}


# -- running the command ----------------------------------------------------------------------------


def cli(*args: str, layout: str | None = "history") -> tuple[int, str, str]:
    """``tulip-nb`` in this process on a fresh checkpointer: (exit code, stdout, stderr).

    ``layout``: the file store's layout a directory URL opens with (None: the default).
    """
    from tulip_nb.memory import backends

    real = backends.checkpointer_from_url

    def opened(url: str, **kw: Any) -> Any:
        return FileCheckpointer(url, layout=layout, **kw) if layout is not None else real(url, **kw)

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(backends, "checkpointer_from_url", opened)
        try:
            code = main(list(args))
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


_NAMED = re.compile(r"^thread '(?P<thread>[^']*)': (?P<rest>.*)$")


def problems_by_name(stdout: str) -> dict[str, list[str]]:
    """Problem lines grouped by what they name (a thread id or ``store``), the prefix removed."""
    out: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if line.startswith("store: "):
            out.setdefault("store", []).append(line.removeprefix("store: "))
        elif (m := _NAMED.match(line)) is not None:
            out.setdefault(m["thread"], []).append(m["rest"])
        else:
            assert line.startswith(("ok: ", "hash chain: ", "note: ")), line
    return out


def assert_reported(stdout: str, expected: Expected) -> dict[str, list[str]]:
    named = problems_by_name(stdout)
    for who, pattern in expected:
        assert any(re.search(pattern, line) for line in named.get(who, [])), (who, pattern, stdout)
    return named


def problem_count(stderr: str) -> int:
    m = re.search(r"(\d+) problem\(s\)", stderr)
    assert m is not None, stderr
    return int(m[1])


# -- the tests --------------------------------------------------------------------------------------


def test_a_clean_store_and_a_clean_thread_exit_0(tmp_path: Path) -> None:
    ids = build(tmp_path, ["a", "b", "c"])
    code, out, err = cli("verify", str(tmp_path))
    assert code == 0, out + err
    assert out.splitlines() == ["ok: 6 checkpoint(s) of 3 thread(s)", "hash chain: 6 unsigned"]
    code, out, err = cli("verify", str(tmp_path), "b")
    assert code == 0, out + err
    assert out.splitlines()[0] == "ok: 2 checkpoint(s) of b"
    assert len(ids["b"]) == 2


def test_every_kind_of_damage_at_once_each_on_its_own_line(tmp_path: Path) -> None:
    threads = [f"t-{name}" for name in DAMAGE] + ["clean-1", "clean-2"]
    ids = build(tmp_path, threads, turns=3)
    expected: Expected = []
    for name, damage in DAMAGE.items():
        expected += damage(tmp_path, f"t-{name}", ids[f"t-{name}"])
    code, out, err = cli("verify", str(tmp_path))
    assert code == 1, out + err
    named = assert_reported(out, expected)
    assert set(named) == {who for who, _ in expected}  # the clean threads are not named
    assert problem_count(err) == sum(map(len, named.values()))
    assert f"of {len(threads) + 1} thread(s)" in err  # the moved row's thread too


@settings(
    max_examples=examples(0.12), suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(chosen=st.sets(st.sampled_from(sorted(DAMAGE))))
def test_verify_names_exactly_the_damaged_threads(tmp_path_factory: pytest.TempPathFactory, chosen: set[str]) -> None:
    base = tmp_path_factory.mktemp("store")
    threads = [f"t-{name}" for name in sorted(DAMAGE)] + ["clean"]
    ids = build(base, threads)
    expected: Expected = []
    for name in sorted(chosen):
        expected += DAMAGE[name](base, f"t-{name}", ids[f"t-{name}"])
    code, out, err = cli("verify", str(base))
    named = assert_reported(out, expected)
    assert set(named) == {who for who, _ in expected}, out
    assert code == (1 if chosen else 0), out + err


def test_one_thread_sees_its_deleted_projection_before_the_open_repairs_it(tmp_path: Path) -> None:
    ids = build(tmp_path, ["a", "b"])
    expected = delete_projection(tmp_path, "a", ids["a"]) + refcount(tmp_path, "b", ids["b"])
    code, out, err = cli("verify", str(tmp_path), "a")
    assert code == 1, out + err
    lines = out.splitlines()
    assert any(re.search(expected[0][1], line) for line in lines), out  # no thread prefix: the thread was named
    assert any(line.startswith("store: ") and re.search(expected[1][1], line[7:]) for line in lines), out
    assert problem_count(err) == len(lines) == 2 and "of a" in err
    # the open repaired the projection (what tulip reads is right again); the store problem stays
    code, out, _ = cli("verify", str(tmp_path), "a")
    assert code == 1 and len(out.splitlines()) == 1 and re.search(expected[1][1], out.removeprefix("store: ")), out
    assert _projection(tmp_path, "a").name == f"{ids['a'][-1]}.json"


def test_a_flipped_byte_in_the_database_file_is_reported_by_the_integrity_check(tmp_path: Path) -> None:
    ids = build(tmp_path, ["a", "b"])
    victim = ids["b"][0]
    with sql(tmp_path) as con:
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'checkpoints_by_time'").fetchone()
    db = _db(tmp_path)
    assert not db.with_name(db.name + "-wal").exists()  # all of it in the file
    raw = bytearray(db.read_bytes())
    at = raw.find(victim.encode(), (root - 1) * page_size, root * page_size)
    assert at > 0
    raw[at] ^= 0x01  # the index's copy of b's first checkpoint id
    db.write_bytes(bytes(raw))
    code, out, err = cli("verify", str(tmp_path))
    assert code == 1, out + err
    named = problems_by_name(out)
    assert any("missing from index checkpoints_by_time" in line for line in named["store"]), out
    assert set(named) == {"store", "b"}, out  # b's listing is wrong; a is fine
    assert any(victim[1:] in line for line in named["b"]), out


def test_the_tulip_layout_s_envelopes_are_verified_one_thread_or_all(tmp_path: Path) -> None:
    """``layout="tulip"`` projects every checkpoint: verify checks each envelope against its row."""
    asyncio.run(_build_async(tmp_path, ["a", "b"], layout="tulip"))
    assert len(list((tmp_path / "b").glob("*.json"))) == 2  # every checkpoint, not only the latest turn end
    code, out, err = cli("verify", str(tmp_path), layout="tulip")
    assert code == 0 and out.splitlines()[0] == "ok: 4 checkpoint(s) of 2 thread(s)", out + err
    older = min((tmp_path / "b").glob("*.json"), key=lambda p: orjson.loads(p.read_bytes())["created_at"])
    older.write_bytes(older.read_bytes()[:-40])  # an older checkpoint's envelope, truncated
    code, out, err = cli("verify", str(tmp_path), layout="tulip")
    assert code == 1, out + err
    named = problems_by_name(out)
    assert set(named) == {"b"} and any("tulip envelope" in line and "cannot be read" in line for line in named["b"])
    code, out, _ = cli("verify", str(tmp_path), "b", layout="tulip")
    assert code == 1 and "tulip envelope" in out and not out.startswith("thread ")
    assert cli("verify", str(tmp_path), "a", layout="tulip")[0] == 0


@pytest.mark.parametrize("flag", [("--anchor",), ("--expect", "3"), ("--expect-from-audit", "audit.jsonl")])
def test_anchor_flags_need_a_thread(tmp_path: Path, flag: tuple[str, ...]) -> None:
    build(tmp_path, ["a"])
    code, out, err = cli("verify", str(tmp_path), *flag)
    assert code == 2 and out == "" and f"{flag[0]} is about one thread" in err
