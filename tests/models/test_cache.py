"""ModelCache: content-addressed keys, immutable entries on disk, expiry, prune/clear, one file to share."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import Message
from tulip_nb.core.errors import UserError
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.models import ModelCache, ModelResponse, ScriptedModel, Usage, cached, request_key
from tulip_nb.testing import build_messy_thread, messy_specs

REQUEST = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def answer(text: str, tokens: int = 10) -> ModelResponse:
    return ModelResponse(Message.assistant(text), Usage(tokens, 2, tokens + 2, 3, 1, cost=0.25))


def test_the_key_is_canonical_and_covers_everything_that_decides_an_answer() -> None:
    base = request_key("m", "http://x/v1", REQUEST)
    assert base == request_key("m", "http://x/v1", {"temperature": 0, "messages": [{"content": "hi", "role": "user"}]})
    others = {
        request_key("other", "http://x/v1", REQUEST),
        request_key("m", "http://y/v1", REQUEST),
        request_key("m", "http://x/v1", REQUEST, epoch=1),
        request_key("m", "http://x/v1", {**REQUEST, "temperature": 1}),
        request_key("m", "http://x/v1", {**REQUEST, "tools": [{"type": "function"}]}),
        request_key("m", "http://x/v1", {**REQUEST, "tool_choice": "auto"}),
    }
    assert base not in others and len(others) == 6
    with pytest.raises(UserError, match="canonical JSON"):
        request_key("m", None, {"messages": [], "temperature": object()})


def test_entries_are_immutable_and_marked_cached(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path / "c.sqlite")
    key = request_key("m", None, REQUEST)
    assert cache.get(key) is None
    cache.put(key, answer("first"), model="m", request=REQUEST)
    cache.put(key, answer("second"), model="m", request=REQUEST)  # ignored: the first answer stays
    hit = cache.get(key)
    assert hit is not None and hit.message.content == "first"
    assert hit.usage == Usage(10, 2, 12, 3, 1, cache_hits=1, cost=0.25) and hit.usage.cached
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)

    async def served() -> ModelResponse:
        async def never() -> ModelResponse:
            raise AssertionError("a hit must not call the model")

        return await cache.fetch(model="m", base_url=None, request=REQUEST, epoch=0, call=never)

    assert asyncio.run(served()).message.json_bytes() == answer("first").message.json_bytes()
    cache.close()


def test_expiry_prune_and_clear(tmp_path: Path) -> None:
    clock = Clock()
    cache = ModelCache(tmp_path / "c.sqlite", expiry=timedelta(hours=1), clock=clock)
    k1, k2 = request_key("a", None, REQUEST), request_key("b", None, REQUEST)
    cache.put(k1, answer("old"), model="a")
    clock.now += 3000
    cache.put(k2, answer("new"), model="b")
    clock.now += 1000  # k1 is now 4000 s old: past the hour
    assert cache.get(k1) is None and cache.get(k2) is not None
    cache.put(k1, answer("fresh"), model="a")  # an expired entry is replaced
    hit = cache.get(k1)
    assert hit is not None and hit.message.content == "fresh"
    assert [e.model for e in cache.entries()] == ["b", "a"] and [e.model for e in cache.entries("a")] == ["a"]
    assert cache.prune(model="b") == 1
    clock.now += 7200
    assert cache.prune() == 1 and len(cache) == 0  # the cache's own expiry
    cache.put(k2, answer("x"), model="b")
    assert cache.clear() == 1 and len(cache) == 0
    with pytest.raises(UserError, match="say what to delete"):
        ModelCache(tmp_path / "d.sqlite").prune()


def test_one_file_to_share_by_copying(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path / "c.sqlite")
    model = cached(ScriptedModel(["recorded"]), cache)
    first = asyncio.run(model.complete([Message.user("hi")], []))
    cache.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.sqlite"]  # the WAL was folded in
    shutil.copy(tmp_path / "c.sqlite", tmp_path / "copy.sqlite")
    other = cached(ScriptedModel([]), ModelCache(tmp_path / "copy.sqlite"))  # an empty script: any call fails
    again = asyncio.run(other.complete([Message.user("hi")], []))
    assert again.message.json_bytes() == first.message.json_bytes() and again.usage.cached


def test_a_file_that_is_not_a_cache_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "notes.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(UserError, match="not a model response cache"):
        len(ModelCache(bad))
    db = sqlite3.connect(tmp_path / "other.sqlite")
    db.execute("CREATE TABLE responses (x)")
    db.close()
    with pytest.raises(UserError, match="not a model response cache"):
        ModelCache(tmp_path / "other.sqlite").entries()


def test_the_epoch_asks_for_another_sample(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path / "c.sqlite")
    script = ScriptedModel(["sample 0", "sample 1"])
    a = asyncio.run(cached(script, cache).complete([Message.user("hi")], []))
    b = asyncio.run(cached(script, cache, epoch=1).complete([Message.user("hi")], []))
    again = asyncio.run(cached(script, cache, epoch=1).complete([Message.user("hi")], []))
    assert (a.message.content, b.message.content, again.message.content) == ("sample 0", "sample 1", "sample 1")
    assert script.calls == 2
    with pytest.raises(UserError, match="epoch"):
        cached(script, cache, epoch=-1)


@settings(
    max_examples=examples(0.05),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(spec=messy_specs(min_turns=4, max_turns=14, max_forks=1))
def test_messy_answers_come_back_bit_for_bit(spec: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every assistant message of a messy thread (tool calls, failed turns, tulip turns), served
    as a model's answer to the request before it: the second pass is all hits, byte-identical."""
    cp = MemoryCheckpointer()
    build_messy_thread(cp, "src", spec)
    state = asyncio.run(cp.load("src"))
    assert state is not None
    points = [i for i, m in enumerate(state.messages) if m.role == "assistant"]
    answers = {i: state.messages[i] for i in points}
    cache = ModelCache(tmp_path_factory.mktemp("messy") / "c.sqlite")

    def replies(messages: list[Message]) -> Message:
        return answers[len(messages)]

    async def run(model: Any) -> list[ModelResponse]:
        return [await model.complete(list(state.messages[:i]), []) for i in points]

    first = asyncio.run(run(cached(ScriptedModel(replies), cache)))
    second = asyncio.run(run(cached(ScriptedModel(lambda m: pytest.fail("not cached")), cache)))
    assert [r.message.json_bytes() for r in second] == [r.message.json_bytes() for r in first]
    assert all(r.usage.cached for r in second) and not any(r.usage.cached for r in first)
    assert len(cache) == len({request_key("scripted", None, _req(state.messages[:i])) for i in points})
    cache.close()


def _req(messages: list[Message]) -> dict[str, Any]:
    from tulip_nb.models._cache import generic_request

    return generic_request(list(messages), [], {})


@pytest.mark.parametrize("bad", ["", "sqlite:///"])
def test_a_path_is_needed(bad: str) -> None:
    with pytest.raises(UserError, match="needs a file path"):
        ModelCache(bad)


def test_text_strategy_for_keys_is_stable() -> None:
    @given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=4))
    @settings(deadline=None)
    def check(params: dict[str, Any]) -> None:
        reordered = dict(reversed(list(params.items())))
        assert request_key("m", None, params) == request_key("m", None, reordered)

    check()
