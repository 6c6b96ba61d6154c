"""ConcurrencyLimit across loops and threads, Retry-After parsing, the retry loop's stops."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tulip_nb.models import ConcurrencyLimit, RetriesExhausted, RetryPolicy, shared_limit
from tulip_nb.models._limits import CallStats, call_with_retries, retry_after_seconds


def test_one_limit_holds_across_threads_and_event_loops() -> None:
    limit = ConcurrencyLimit(3)
    now = {"n": 0, "most": 0}
    lock = threading.Lock()

    async def job() -> None:
        async with limit:
            with lock:
                now["n"] += 1
                now["most"] = max(now["most"], now["n"])
            await asyncio.sleep(0.005)
            with lock:
                now["n"] -= 1

    async def many() -> None:
        await asyncio.gather(*(job() for _ in range(12)))

    threads = [threading.Thread(target=asyncio.run, args=(many(),)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert now["most"] == 3 and limit.peak == 3 and limit.active == 0


@settings(deadline=None)
@given(limit_n=st.integers(1, 4), jobs=st.integers(1, 12), cancel=st.sets(st.integers(0, 11)), seed=st.integers(0, 99))
def test_cancelled_waiters_never_leak_a_slot(limit_n: int, jobs: int, cancel: set[int], seed: int) -> None:
    limit = ConcurrencyLimit(limit_n)
    rng = random.Random(seed)

    async def job() -> None:
        async with limit:
            await asyncio.sleep(rng.random() / 500)

    async def main() -> None:
        tasks = [asyncio.ensure_future(job()) for _ in range(jobs)]
        await asyncio.sleep(0)
        for i in cancel:
            if i < jobs:
                tasks[i].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert limit.active == 0 and limit.peak <= limit_n
    asyncio.run(asyncio.wait_for(limit.acquire(), 1))  # the slots are all still there
    limit.release()


def test_shared_limit_is_one_per_key_and_takes_new_numbers() -> None:
    a = shared_limit("tests:shared", 2)
    assert shared_limit("tests:shared") is a and a.limit == 2
    shared_limit("tests:shared", 5)
    assert a.limit == 5
    with pytest.raises(ValueError, match="int >= 1"):
        ConcurrencyLimit(0)


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "-4"}) == 0.0
    assert retry_after_seconds(None) is None


class Flaky(Exception):
    def __init__(self, after: float | None = None) -> None:
        self.after = after


def classify(e: BaseException) -> tuple[bool, float | None]:
    return (True, e.after) if isinstance(e, Flaky) else (False, None)


def run(call: Any, policy: RetryPolicy, stats: CallStats | None = None) -> Any:
    return asyncio.run(
        call_with_retries(call, limit=ConcurrencyLimit(1), policy=policy, classify=classify, stats=stats)
    )


def test_retries_then_success_and_the_counts() -> None:
    tries = iter([Flaky(0.0), Flaky(), "ok"])

    async def call(left: float | None) -> str:
        item = next(tries)
        if isinstance(item, Exception):
            raise item
        return item

    stats = CallStats()
    assert run(call, RetryPolicy(base_delay=0.001), stats) == "ok"
    assert (stats.requests, stats.retries) == (3, 2)


def test_final_errors_are_raised_at_once_and_retries_run_out() -> None:
    calls = {"n": 0}

    async def broken(left: float | None) -> str:
        calls["n"] += 1
        raise KeyError("final")

    with pytest.raises(KeyError):
        run(broken, RetryPolicy())
    assert calls["n"] == 1

    async def always(left: float | None) -> str:
        calls["n"] += 1
        raise Flaky(0.0)

    calls["n"] = 0
    with pytest.raises(Flaky):
        run(always, RetryPolicy(max_retries=3))
    assert calls["n"] == 4


def test_the_deadline_and_a_too_long_retry_after_stop_it() -> None:
    async def slow_down(left: float | None) -> str:
        raise Flaky(5.0)

    with pytest.raises(RetriesExhausted, match="deadline") as info:
        run(slow_down, RetryPolicy(deadline=1.0))
    assert info.value.attempts == 1 and isinstance(info.value.__cause__, Flaky)
    with pytest.raises(RetriesExhausted):
        run(slow_down, RetryPolicy(deadline=None, max_retry_after=2.0))
    with pytest.raises(ValueError, match="deadline"):
        RetryPolicy(deadline=0)


def test_backoff_is_jittered_and_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0, rng=random.Random(7))
    waits = [policy.backoff(a, None) for a in range(10)]
    assert all(0 <= w <= 4.0 for w in waits) and len(set(waits)) == 10
    assert all(0.25 <= policy.backoff(3, 0.25) <= 0.275 for _ in range(20))
