"""IdentityCache: a value per live object, never a stale value for a reused id."""

from __future__ import annotations

import gc
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tulip_nb.core import IdentityCache
from tulip_nb.core._messages import Message
from tulip_nb.memory.conversation.plan import stub
from tulip_nb.tokens import FunctionCounter


class Obj:
    def __init__(self, n: int = 0) -> None:
        self.n = n


def test_get_put_contains_len_clear() -> None:
    cache: IdentityCache[Obj, str] = IdentityCache()
    a, b = Obj(), Obj()
    assert cache.get(a) is None and cache.get(a, "dflt") == "dflt" and a not in cache
    cache.put(a, "A")
    assert cache.get(a) == "A" and a in cache and b not in cache and len(cache) == 1
    cache.put(a, "A2")  # replaces
    assert cache.get(a) == "A2" and len(cache) == 1
    cache.put(b, "B")
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0 and cache.get(a) is None
    assert "entries" in repr(cache)


def test_a_cached_none_is_a_hit() -> None:
    cache: IdentityCache[Obj, None] = IdentityCache()
    a = Obj()
    calls: list[Obj] = []
    cache.put(a, None)
    assert a in cache
    assert cache.get_or_compute(a, calls.append) is None
    assert calls == []


def test_get_or_compute_computes_once() -> None:
    cache: IdentityCache[Obj, int] = IdentityCache()
    seen: list[int] = []

    def compute(o: Obj) -> int:
        seen.append(o.n)
        return o.n * 10

    objs = [Obj(i) for i in range(5)]
    assert cache.get_or_compute(objs[0], compute) == 0
    assert cache.get_or_compute_many(objs, compute) == [0, 10, 20, 30, 40]
    assert cache.get_or_compute_many(objs, compute) == [0, 10, 20, 30, 40]
    assert seen == [0, 1, 2, 3, 4]
    # equal but distinct objects are different keys
    assert cache.get_or_compute(Obj(1), compute) == 10 and seen[-1] == 1 and len(seen) == 6


def test_a_dead_objects_entry_is_gone() -> None:
    cache: IdentityCache[Obj, int] = IdentityCache()
    keep = Obj()
    a = Obj()
    cache.put(keep, 1)
    cache.put(a, 2)
    assert len(cache) == 2
    del a
    gc.collect()
    assert len(cache) == 1 and cache.get(keep) == 1


def test_a_dead_objects_entry_is_gone_after_clear_and_refill() -> None:
    cache: IdentityCache[Obj, int] = IdentityCache()
    objs = [Obj(i) for i in range(100)]
    cache.get_or_compute_many(objs, lambda o: o.n)
    cache.clear()
    cache.get_or_compute_many(objs[:10], lambda o: o.n)
    del objs
    gc.collect()
    assert len(cache) == 0


def test_id_reuse_gives_a_miss() -> None:
    """A new object at a dead object's address (same id) never gets the dead object's value."""
    cache: IdentityCache[Obj, str] = IdentityCache()
    # The window between an object's death and its callback (or a lost race with it) leaves an
    # entry whose weakref is dead: a new object at the same address must still miss. Recreate that
    # window by hand.
    a = Obj()
    cache.put(a, "old")
    ident = id(a)
    entries = cache._entries
    saved = entries[ident]
    del a  # refcounting frees it now; its weakref's callback drops the entry
    assert ident not in entries
    entries[ident] = saved  # as if the callback had not run yet
    # Keep every candidate alive, so the allocator must hand out the freed slot at some point.
    alive = [Obj() for _ in range(10_000)]
    reused = next((o for o in alive if id(o) == ident), None)
    if reused is None:
        pytest.skip("the allocator did not reuse the id")
    assert cache.get(reused) is None and reused not in cache
    assert cache.get_or_compute(reused, lambda o: "new") == "new"
    assert cache.get(reused) == "new"


def test_id_reuse_in_a_loop_never_returns_a_stale_value() -> None:
    cache: IdentityCache[Obj, int] = IdentityCache()
    for i in range(2_000):  # each object dies right away, so ids are reused constantly
        assert cache.get_or_compute(Obj(i), lambda o: o.n) == i
    assert len(cache) == 0


def test_a_stale_callback_does_not_drop_a_newer_entry() -> None:
    cache: IdentityCache[Obj, str] = IdentityCache()
    a = Obj()
    cache.put(a, "first")
    first_ref = cache._entries[id(a)][0]
    cache.put(a, "second")  # new ref, the first one still exists
    cache._forget(first_ref)  # the old ref's callback fires late: it must not drop "second"
    assert cache.get(a) == "second"


def test_threads_agree() -> None:
    cache: IdentityCache[Obj, int] = IdentityCache()
    objs = [Obj(i) for i in range(500)]
    errors: list[str] = []

    def work() -> None:
        for _ in range(20):
            if cache.get_or_compute_many(objs, lambda o: o.n) != list(range(500)):
                errors.append("wrong")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(cache) == 500


@given(st.lists(st.integers(0, 9), max_size=40))
def test_many_equals_one_by_one(picks: list[int]) -> None:
    objs = [Obj(i) for i in range(10)]
    a: IdentityCache[Obj, int] = IdentityCache()
    b: IdentityCache[Obj, int] = IdentityCache()
    seq = [objs[i] for i in picks]
    assert a.get_or_compute_many(seq, lambda o: o.n) == [b.get_or_compute(o, lambda o: o.n) for o in seq]
    assert len(a) == len(b) == len(set(picks))


def test_token_counter_and_stub_use_it() -> None:
    counter = FunctionCounter(lambda m: len(m.content or ""))
    msg = Message.tool("x" * 40, tool_call_id="c1")
    assert counter.count_message(msg) == 40 and counter.message_counts([msg, msg]) == [40, 40]
    assert counter.cache_info()["messages"] == 1
    assert stub(msg) is stub(msg)
    del msg
    gc.collect()
    assert counter.cache_info()["messages"] == 0
