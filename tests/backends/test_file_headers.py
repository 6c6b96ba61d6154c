"""The file store answers a corpus's header questions from its index: ``thread_span`` (a count and
two rows, whatever the thread's length) and ``list_unreadable`` (thread directories nothing of
which reads), equal to what the base class derives from listings, on messy threads with tulip's
own envelopes in them."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.conftest import examples
from tulip_nb.lab import open_corpus
from tulip_nb.memory.backends import FileCheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.testing import MessySpec, abuild_messy_thread, build_messy_corpus, messy_specs


def _key(span: object) -> object:
    if span is None:
        return None
    return (span.checkpoints, span.first.checkpoint_id, span.latest.checkpoint_id)  # type: ignore[attr-defined]


@settings(max_examples=examples(0.04), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=messy_specs(min_turns=3, max_turns=12, max_forks=1))
async def test_thread_span_equals_the_listing(spec: MessySpec) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cp = FileCheckpointer(tmp, fsync=False)
        mt = await abuild_messy_thread(cp, "messy", spec)  # tulip turns write their own envelopes
        for tid in ["messy", *(f.thread_id for f in mt.forks), "none"]:
            fresh = FileCheckpointer(tmp)
            assert _key(await fresh.thread_span(tid)) == _key(await BaseCheckpointer.thread_span(fresh, tid)), tid


def test_unreadable_thread_directories_get_a_row(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path, fsync=False)
    build_messy_corpus(cp, 2, MessySpec(seed=3, turns=4, forks=0))
    for name, body in (("garbage", b"\x00\xffnot json"), ("empty", b""), ("truncated", b'{"checkpoint_id": "c1", "th')):
        os.mkdir(tmp_path / name)
        (tmp_path / name / "c1.json").write_bytes(body)
    os.mkdir(tmp_path / "no-files")  # an empty directory holds no thread: not a row
    got = asyncio.run(FileCheckpointer(tmp_path).list_unreadable())
    assert sorted(got) == ["empty", "garbage", "truncated"]
    assert all("c1.json" in why for why in got.values())
    assert asyncio.run(FileCheckpointer(tmp_path).list_unreadable("gar*")).keys() == {"garbage"}
    summary = open_corpus(FileCheckpointer(tmp_path)).summary(progress=False)
    errors = summary[summary["error"].notna()]
    assert len(summary) == 5 and sorted(errors["thread_id"]) == ["empty", "garbage", "truncated"]
