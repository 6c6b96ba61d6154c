"""Resumable sweeps: a re-run reuses finished branches and redoes unfinished ones; on messy threads
(failed turns, tulip turns, forks) the re-run's rows equal the first run's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import Message
from tulip_nb.lab import aopen_thread, asweep
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.models import ModelCache, ScriptedModel, cached, text
from tulip_nb.testing import build_messy_thread, messy_specs


def reply(tag: str) -> Any:
    def answer(messages: list[Message]) -> Message:
        return text(f"{tag}: {len(messages)} messages, last {messages[-1].role}")

    return answer


def same_but_cached(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=["cached"]), b.drop(columns=["cached"]))


@settings(
    max_examples=examples(0.06),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(spec=messy_specs(min_turns=4, max_turns=16, max_forks=1), data=st.data())
def test_a_rerun_on_a_messy_thread_reuses_every_branch(
    spec: Any, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cp = MemoryCheckpointer()
    build_messy_thread(cp, "src", spec)
    thread = asyncio.run(aopen_thread(cp, "src"))
    users = [i for i, m in enumerate(thread.final_messages) if m.role == "user"]
    at = data.draw(st.sampled_from(users))
    prompt = data.draw(st.sampled_from([None, "One more question."]))
    cache = ModelCache(tmp_path_factory.mktemp("resume") / "c.sqlite")
    models = {name: ScriptedModel(reply(name)) for name in ("a", "b", "c")}
    variants = {name: {"model": cached(m, cache), "system_prompt": f"Style {name}."} for name, m in models.items()}

    first = asyncio.run(asweep(thread, at=at, variants=variants, prompt=prompt))
    assert first["error"].isna().all(), first["error"].tolist()
    calls = {n: m.calls for n, m in models.items()}
    again = asyncio.run(asweep(thread, at=at, variants=variants, prompt=prompt))
    assert {n: m.calls for n, m in models.items()} == calls  # nothing ran: every branch reused
    assert again["cached"].all() and not first["cached"].any()
    same_but_cached(again, first)
    fresh = asyncio.run(asweep(thread, at=at, variants=variants, prompt=prompt, resume=False))
    assert {n: m.calls for n, m in models.items()} == calls  # new branches, every call from the cache
    assert list(fresh["final_answer"]) == list(first["final_answer"])
    assert list(fresh["tokens"]) == list(first["tokens"]) and fresh["cached"].all()
    cache.close()


class Hang:
    """A model that hangs on its first call (until the sweep is cancelled), then answers."""

    name = "hang"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kw: Any) -> Any:
        from tulip_nb.models import ModelResponse, Usage

        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(3600)
        return ModelResponse(Message.assistant("finally"), Usage(5, 1, 6, requests=1))


async def test_a_sweep_killed_mid_run_finishes_only_what_is_missing(tmp_path: Path) -> None:
    cp = MemoryCheckpointer()
    writer = ScriptedModel([text("Hello!")])
    from tulip_nb.agent import Agent

    await Agent(writer, system_prompt="You help.", checkpointer=cp).run("Hi", thread_id="t")
    thread = await aopen_thread(cp, "t")
    quick = ScriptedModel(reply("quick"))
    hang = Hang()
    variants = {"quick": {"model": quick}, "hang": {"model": hang}}
    with pytest.raises(TimeoutError):  # the "kernel restart": the sweep dies with a branch mid-run
        await asyncio.wait_for(asweep(thread, at=-1, variants=variants, prompt="And?"), 0.5)
    assert quick.calls == 1 and hang.calls == 1
    assert len(await cp.list_threads(pattern="t-sweep-*")) == 2  # both forked, one unfinished
    done = await asweep(thread, at=-1, variants=variants, prompt="And?")
    assert done["error"].isna().all(), done["error"].tolist()
    assert quick.calls == 1 and hang.calls == 2  # the finished branch reused, the other run again
    assert done.set_index("variant").loc["hang", "final_answer"] == "finally"
    assert list(done["cached"]) == [True, False]
    assert len(await cp.list_threads(pattern="t-sweep-*")) == 2
