"""``tulip-nb diff``: hunks with context like ``diff -u``, a last line that counts what it printed."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.lab.test_diff_messy import SYSTEM, TurnSpec, build, respelled, turn_specs
from tulip_nb.cli import main
from tulip_nb.core._messages import Message
from tulip_nb.core.state import AgentState
from tulip_nb.lab import diff_threads, fork, open_thread
from tulip_nb.memory.backends.file import FileCheckpointer

SPECS = [
    TurnSpec("answered", 1, 2, True, True, True, 1),
    TurnSpec("error", 0, 1, False, False, False, 2),
    TurnSpec("answered", 0, 1, False, False, False, 3),
    TurnSpec("interrupted", 0, 1, True, False, False, 4),
    TurnSpec("max_iterations", 1, 1, False, True, False, 5),
    TurnSpec("tulip", 1, 1, False, False, True, 6),
    TurnSpec("answered", 2, 1, True, False, False, 7),
]
SUMMARY = re.compile(r"^(\d+) changed, (\d+) removed, (\d+) added in (\d+) hunks? \((\d+) messages? of context\)$")


def save(store: Path, a: AgentState, b: AgentState, *, at: int = 0, edit: str | None = None) -> None:
    """``a`` as thread ``a``; ``b`` as a fork of it at ``at`` (lineage), continued with ``b``'s rest."""
    cp = FileCheckpointer(store, fsync=False)
    asyncio.run(cp.save(a, "a"))
    branch = fork(open_thread(cp, "a"), at=at, edit=edit, new_thread_id="b")
    msgs = [*branch.final_messages, *b.messages[at + 1 :]]
    asyncio.run(cp.save(AgentState(messages=msgs, metadata=b.metadata), "b"))


def run(capsys: pytest.CaptureFixture[str], store: Path, *extra: str) -> tuple[int, list[str]]:
    code = main(["diff", str(store), "a", "b", *extra])
    return code, capsys.readouterr().out.splitlines()


def body(lines: list[str]) -> list[str]:
    """The lines from the first hunk header to the end."""
    k = next((i for i, x in enumerate(lines) if x.startswith("@@ ")), len(lines))
    return lines[k:]


def test_a_swapped_system_prompt_prints_one_hunk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 25's what-if: only the system prompt differs (ids renumbered after it)."""
    a = build(SPECS)
    b = AgentState(messages=respelled(a.messages), metadata=a.metadata)
    save(tmp_path, a, b, edit="You are a careful analyst.")
    code, lines = run(capsys, tmp_path)
    assert code == 1
    assert "system prompt changed" in lines and "no change after the system prompt: the turns are the same" in lines
    assert f"    {len(a.messages) - 1} messages in common" in lines
    hunk = body(lines)
    assert hunk[0] == "@@ -0,4 +0,4 @@ system prompt, turn 0"
    assert hunk[1].startswith("-     0 system    You are an analyst.")
    assert hunk[2].startswith("+     0 system    You are a careful analyst.")
    assert hunk[3] == "? system prompt changed"
    assert [x[:7] for x in hunk[4:7]] == ["      1", "      2", "      3"]  # three rows of context
    assert hunk[7:] == ["1 changed, 0 removed, 0 added in 1 hunk (3 messages of context)"]
    code, lines = run(capsys, tmp_path, "-U", "0")
    assert body(lines) == [
        "@@ -0,1 +0,1 @@ system prompt",
        f"-     0 system    {SYSTEM}",
        "+     0 system    You are a careful analyst.",
        "? system prompt changed",
        "1 changed, 0 removed, 0 added in 1 hunk (0 messages of context)",
    ]
    _, lines = run(capsys, tmp_path, "--context", "1")
    assert len(body(lines)) == 6


def test_an_inserted_turn_is_one_block_of_added_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = TurnSpec("answered", 1, 1, False, False, False, 99)
    a, b = build(SPECS), build([*SPECS[:3], extra, *SPECS[3:]])
    first = [i for i, m in enumerate(b.messages) if m.role == "user"][3]
    save(tmp_path, a, AgentState(messages=respelled(b.messages), metadata=b.metadata), at=first - 1)
    code, lines = run(capsys, tmp_path, "-U", "2")
    hunk = body(lines)
    added = [x for x in hunk if x.startswith("+ ")]
    assert code == 1 and len(added) == 4 and not [x for x in hunk if x.startswith("- ")]
    assert hunk[0] == f"@@ -{first - 2},4 +{first - 2},8 @@ turns 2-3 (b: turns 2-4)"
    assert "what is metric 99?" in added[0]
    assert hunk[-1] == "0 changed, 0 removed, 4 added in 1 hunk (2 messages of context)"
    assert f"diverge at message {first} (turn 3, model call 3)" in lines


def test_identical_but_for_ids_and_json_spelling_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = build(SPECS)
    save(tmp_path, a, AgentState(messages=respelled(a.messages), metadata=a.metadata), at=3)
    code, lines = run(capsys, tmp_path)
    assert code == 0 and lines[-1] == "    the conversations are identical"
    assert not [x for x in lines if x.startswith("@@")]


def test_simple_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = build(SPECS[:2])
    save(tmp_path, a, AgentState(messages=[*a.messages, Message.user("more")], metadata=a.metadata), at=1)
    code, lines = run(capsys, tmp_path, "--simple")
    assert code == 1 and lines[2] == f"    {len(a.messages)} messages in common" and lines[-1].startswith("+ ")
    assert main(["diff", str(tmp_path), "a", "nope"]) == 2
    assert "no such thread" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["diff", str(tmp_path), "a", "b", "-U", "-1"])
    assert e.value.code == 2 and "expected 0 or more messages" in capsys.readouterr().err


@settings(max_examples=examples(0.15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(turn_specs, min_size=1, max_size=10, unique_by=lambda s: s.tag),
    st.lists(turn_specs, min_size=0, max_size=10, unique_by=lambda s: s.tag),
    st.integers(0, 4),
)
def test_printed_counts_match_printed_rows(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    left: list[TurnSpec],
    right: list[TurnSpec],
    context: int,
) -> None:
    """Any two threads: the last line counts the rows printed, and agrees with the lab's diff."""
    store = tmp_path_factory.mktemp("store")
    shared = left[: len(left) // 2]
    a, b = build(left), build([*shared, *right])
    save(store, a, b)
    code, lines = run(capsys, store, "-U", str(context))
    cp = FileCheckpointer(store, fsync=False)
    d = diff_threads(open_thread(cp, "a"), open_thread(cp, "b"))
    assert code == (0 if d.identical else 1)
    if d.identical:
        return
    hunk = body(lines)
    m = SUMMARY.match(hunk[-1])
    assert m is not None, hunk[-1]
    changed, removed, added, hunks, ctx = map(int, m.groups())
    minus = sum(x.startswith("- ") for x in hunk)
    plus = sum(x.startswith("+ ") for x in hunk)
    assert (minus, plus) == (changed + removed, changed + added)
    assert sum(x.startswith("@@ ") for x in hunk) == hunks and ctx == context
    assert f"{changed} changed, {removed} removed, {added} added" in lines  # the summary says the same
    counts = d.counts()
    assert (changed, removed, added) == (counts["changed"], counts["removed"], counts["added"])
