"""The synthetic corpus: real Agent threads, offline, deterministic, with the features corpus work measures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tulip_nb._sync import run_sync
from tulip_nb.core.errors import UserError
from tulip_nb.lab import build_corpus, corpus_facts, open_thread
from tulip_nb.lab._synthetic import abuild_corpus
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.conversation import compaction_events

N = 42  # reaches the first fork (14) and the case left pending on an interrupt (39)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    d = tmp_path_factory.mktemp("synthetic")
    url = f"file://{d}"
    return url, build_corpus(url, n=N, seed=3)


def test_ids_names_and_forks(built: tuple[str, list[str]]) -> None:
    url, ids = built
    assert len(ids) == N == len(set(ids))
    assert ids[0] == "case-0000" and ids[13] == "case-0013"
    assert ids[14] == "case-0007-fork-14" and ids[29] == "case-0022-fork-29"
    listed = run_sync(FileCheckpointer(Path(url.removeprefix("file://"))).list_threads(limit=None))
    assert sorted(listed) == sorted(ids)
    fork = open_thread(url, ids[14])
    assert fork.infos[-1].metadata["forked_from"] == "case-0007"
    source = open_thread(url, "case-0007")
    n = len(fork.state(fork.infos[-1].checkpoint_id).messages)
    assert [m.json_bytes() for m in fork.final_messages[:n]] == [m.json_bytes() for m in source.final_messages[:n]]
    assert len(fork.final_messages) > n  # continued after the fork


def test_threads_have_what_corpus_work_measures(built: tuple[str, list[str]]) -> None:
    url, ids = built
    compacted = errors = hits = interrupted = 0
    pending = []
    for tid in ids:
        t = open_thread(url, tid)
        state = t.state()
        turns = sum(m.role == "user" for m in state.messages)
        assert 3 <= turns <= 14
        compacted += bool(compaction_events(state))
        errors += sum((m.content or "").startswith("Error:") for m in state.messages if m.role == "tool")
        for cid in t.checkpoint_ids:
            hits += sum(ex.idempotent_cache_hit for ex in t.state(cid).tool_executions)
        sources = [i.metadata.get("source") for i in t.infos]
        interrupted += "interrupt" in sources
        if sources[0] == "interrupt":
            pending.append(tid)
    assert compacted >= 5 and errors >= 1 and hits >= 1 and interrupted >= 2
    asked = any((m.content or "").startswith("Escalate") for m in open_thread(url, "case-0039").final_messages)
    assert pending == (["case-0039"] if asked else [])  # only every 40th case is left pending


def test_facts_are_stated_where_documented(built: tuple[str, list[str]]) -> None:
    url, ids = built
    for tid in (ids[0], ids[5], ids[14]):
        facts = dict(corpus_facts(tid))
        users = [m.content or "" for m in open_thread(url, tid).final_messages if m.role == "user"]
        assert facts["order"] in users[0] and facts["customer"] in users[0] and facts["amount"] in users[0]
        assert facts["callback"] in users[1]
        assert corpus_facts(open_thread(url, tid)) == corpus_facts(tid)
    assert corpus_facts(ids[14]) == corpus_facts("case-0007")


async def test_deterministic_for_a_seed_and_varied_across_seeds() -> None:
    a, b, c = MemoryCheckpointer(), MemoryCheckpointer(), MemoryCheckpointer()
    ids = await abuild_corpus(a, n=16, seed=1)
    assert await abuild_corpus(b, n=16, seed=1) == ids
    assert await abuild_corpus(c, n=16, seed=2) == ids  # the ids do not depend on the seed
    same = differ = 0
    for tid in ids:
        sa, sb, sc = [await cp.load(tid) for cp in (a, b, c)]
        assert sa is not None and sb is not None and sc is not None
        assert [m.json_bytes() for m in sa.messages] == [m.json_bytes() for m in sb.messages]
        same += 1
        differ += [m.json_bytes() for m in sa.messages] != [m.json_bytes() for m in sc.messages]
    assert same == 16 and differ >= 8


def test_prefix_and_turns() -> None:
    cp = MemoryCheckpointer()
    ids = build_corpus(cp, n=3, prefix="t", turns=(2, 2))
    assert ids == ["t-0000", "t-0001", "t-0002"]
    for tid in ids:
        state = run_sync(cp.load(tid))
        assert state is not None and sum(m.role == "user" for m in state.messages) == 2


@pytest.mark.parametrize(
    ("kw", "match"), [({"n": -1}, "n must be"), ({"turns": (1, 3)}, "turns"), ({"turns": (5, 3)}, "turns")]
)
def test_bad_arguments(kw: dict[str, object], match: str) -> None:
    with pytest.raises(UserError, match=match):
        build_corpus(MemoryCheckpointer(), **kw)  # type: ignore[arg-type]


@given(st.text(min_size=1, max_size=30), st.integers(min_value=0, max_value=10_000))
def test_facts_depend_on_the_id_only_and_forks_inherit(tid: str, k: int) -> None:
    facts = corpus_facts(tid)
    assert [label for label, _ in facts] == ["order", "customer", "amount", "callback"]
    d = dict(facts)
    assert re.fullmatch(r"ord-\d{4}", d["order"]) and re.fullmatch(r"\$\d+\.\d\d", d["amount"])
    assert re.fullmatch(r"555-\d{4}", d["callback"]) and " " in d["customer"]
    assert corpus_facts(f"{tid}-fork-{k}") == facts == corpus_facts(tid)
