"""Rate limits and retries for live models: one concurrency limit per model, backoff that honours
``Retry-After``, a total deadline per call.

**One limit per model, per process.** :func:`shared_limit` returns the :class:`ConcurrencyLimit`
registered under a key (``OpenAIModel`` uses its base URL and model name), so every agent, sweep
branch and notebook cell that talks to that model in this process shares it, whichever event loop
or thread it runs on (``run_sync`` cells, a sweep's workers). Setting a new number changes the
limit for everyone from the next request on.

**Retries.** :func:`call_with_retries` runs a call under the limit; when it fails with something
worth retrying (429, 5xx, a timeout, a dropped connection: the caller's ``classify`` says) it
releases its slot, waits, and tries again: the server's ``Retry-After`` (plus up to 10 %) when it gives one, else
exponential backoff with full jitter (``uniform(0, min(max_delay, base_delay * 2**attempt))``),
until ``max_retries`` retries or the call's ``deadline`` (seconds, all attempts and waits
together) would be passed; then the last error is raised, as a :class:`RetriesExhausted` carrying
it when the deadline is what stopped it.

>>> import asyncio
>>> limit = ConcurrencyLimit(2)
>>> async def main():
...     async def call():
...         async with limit:
...             await asyncio.sleep(0.01)
...     await asyncio.gather(*(call() for _ in range(5)))
...     return limit.peak
>>> asyncio.run(main())
2
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from tulip_nb.models._base import ModelError

__all__ = [
    "CallStats",
    "ConcurrencyLimit",
    "RetriesExhausted",
    "RetryPolicy",
    "call_with_retries",
    "retry_after_seconds",
    "shared_limit",
]

T = TypeVar("T")


class ConcurrencyLimit:
    """At most ``limit`` holders at once, across threads and event loops (``async with limit:``).

    A waiter is woken on its own loop (``call_soon_threadsafe``) and handed the released slot; a
    waiter cancelled after the hand-over passes the slot on, so none is lost. ``peak`` is the most
    holders seen at once, ``active`` the holders now.
    """

    def __init__(self, limit: int) -> None:
        self._lock = threading.Lock()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self.active = 0
        self.peak = 0
        self.limit = limit

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"a concurrency limit must be an int >= 1, got {value!r}")
        with self._lock:
            self._limit = value
            while self._waiters and self.active < self._limit:
                self._hand_over()

    def _hand_over(self) -> None:  # under the lock: a slot goes to the next waiter
        loop, fut = self._waiters.popleft()
        self.active += 1
        self.peak = max(self.peak, self.active)
        loop.call_soon_threadsafe(self._wake, fut)

    def _wake(self, fut: asyncio.Future[None]) -> None:
        if fut.cancelled():
            self.release()  # cancelled between the hand-over and now: pass the slot on
        elif not fut.done():
            fut.set_result(None)

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.active < self._limit and not self._waiters:
                self.active += 1
                self.peak = max(self.peak, self.active)
                return
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, fut))
        try:
            await fut
        except asyncio.CancelledError:
            with self._lock:
                if (loop, fut) in self._waiters:
                    self._waiters.remove((loop, fut))
                    raise
            if fut.done() and not fut.cancelled():
                self.release()  # the slot arrived just before the cancellation
            raise

    def release(self) -> None:
        with self._lock:
            self.active -= 1
            if self._waiters and self.active < self._limit:
                self._hand_over()

    async def __aenter__(self) -> ConcurrencyLimit:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"ConcurrencyLimit({self._limit}, active={self.active}, peak={self.peak})"


_registry_lock = threading.Lock()
_registry: dict[str, ConcurrencyLimit] = {}


def shared_limit(key: str, max_concurrency: int | None = None) -> ConcurrencyLimit:
    """The process-wide limit for ``key`` (created with ``max_concurrency``, default 8; a number
    given for an existing key becomes its limit).

    >>> shared_limit("doc:model", 3) is shared_limit("doc:model")
    True
    """
    with _registry_lock:
        found = _registry.get(key)
        if found is None:
            found = _registry[key] = ConcurrencyLimit(max_concurrency or 8)
            return found
    if max_concurrency is not None and max_concurrency != found.limit:
        found.limit = max_concurrency
    return found


def retry_after_seconds(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds a response asks to wait: ``retry-after-ms``, else ``Retry-After`` (seconds or an
    HTTP date); None when absent or unreadable.

    >>> retry_after_seconds({"retry-after": "2"}), retry_after_seconds({"retry-after-ms": "250"})
    (2.0, 0.25)
    >>> retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0)
    10.0
    >>> retry_after_seconds({}) is None
    True
    """
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        if "retry-after-ms" in lower:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        value = lower.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = parsedate_to_datetime(value).timestamp()
            return max(0.0, when - (time.time() if now is None else now))
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """How a live call retries (see the module docstring). ``deadline``: seconds for the whole
    call, attempts and waits together (None: no deadline); ``max_retry_after``: a longer
    ``Retry-After`` than this is not waited for (the call fails instead)."""

    max_retries: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    deadline: float | None = 600.0
    max_retry_after: float = 120.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        if self.deadline is not None and not self.deadline > 0:
            raise ValueError(f"deadline must be a number of seconds > 0 or None, got {self.deadline!r}")

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based): at least ``retry_after``
        (plus up to 10 %, so clients told the same time do not all come back at once)."""
        if retry_after is not None:
            return retry_after * (1 + 0.1 * self.rng.random())
        return self.rng.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


class RetriesExhausted(ModelError):
    """A live call still failed when its retries or its deadline ran out; ``attempts`` says how
    many requests were sent, and the last error is the ``__cause__``."""

    def __init__(self, message: str, *, attempts: int, **context: Any) -> None:
        self.attempts = attempts
        super().__init__(message, **context)


@dataclass
class CallStats:
    """Counters a live model keeps: requests sent, retries, cache hits (thread-safe increments)."""

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)


Classify = Callable[[BaseException], "tuple[bool, float | None]"]
"""``error -> (worth retrying, Retry-After seconds or None)``."""


async def call_with_retries(
    call: Callable[[float | None], Awaitable[T]],
    *,
    limit: ConcurrencyLimit,
    policy: RetryPolicy,
    classify: Classify,
    stats: CallStats | None = None,
    what: str = "the model",
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``await call(timeout)`` under ``limit``, retried per ``policy`` (module docstring).

    ``timeout``: the seconds left before the deadline (None without one), for the attempt's own
    timeout. An error ``classify`` calls final is raised at once, unchanged.
    """
    start = clock()
    attempt = 0
    while True:
        left = None if policy.deadline is None else policy.deadline - (clock() - start)
        async with limit:
            if stats is not None:
                stats.add(requests=1)
            try:
                return await call(left)
            except Exception as e:
                retry, after = classify(e)
                if not retry:
                    raise
                error: Exception = e
        wait = policy.backoff(attempt, after)
        spent = clock() - start
        if attempt >= policy.max_retries:
            raise error
        if (after is not None and after > policy.max_retry_after) or (
            policy.deadline is not None and spent + wait >= policy.deadline
        ):
            raise RetriesExhausted(
                f"{what} failed after {attempt + 1} attempts in {spent:.1f} s; the next wait ({wait:.1f} s) "
                f"would pass the deadline ({policy.deadline} s) or the longest Retry-After waited for "
                f"({policy.max_retry_after} s): {error}",
                attempts=attempt + 1,
            ) from error
        if stats is not None:
            stats.add(retries=1)
        attempt += 1
        await asyncio.sleep(wait)
