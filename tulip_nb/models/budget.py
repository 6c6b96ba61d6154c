"""Budgets: stop live calls before they would pass a limit in tokens or money.

A :class:`Budget` says how much may be spent (``tokens=`` total tokens, ``cost=`` USD, or both). A
:class:`BudgetMeter` keeps the account for one experiment (a sweep) and :func:`metered` puts a model
behind it. Before each call that will really go out (an answer in the response cache is free and
never refused), the meter reserves an **estimate**: the request's prompt tokens, counted locally,
plus the completion it may produce (the request's ``max_tokens`` / ``max_completion_tokens`` when
set, else the largest completion seen so far). If what was spent, plus what calls in flight have
reserved, plus this estimate would pass the limit, the call is refused with
:class:`BudgetExceeded` and nothing is sent. When the call returns, its actual usage replaces the
reservation, and the meter learns how the provider counts: later prompt estimates are scaled by
the largest ratio seen of reported to locally counted prompt tokens. So a budget is passed only
when a call uses more than its estimate (a longer completion than any before, a provider that
counts a prompt higher than the ones before).

>>> import asyncio
>>> from tulip_nb.core import Message
>>> from tulip_nb.models import ModelResponse, ScriptedModel, Usage
>>> meter = BudgetMeter(Budget(tokens=25))
>>> answer = ModelResponse(Message.assistant("a"), Usage(8, 2, 10, requests=1))
>>> model = metered(ScriptedModel([answer] * 3), meter)
>>> for _ in range(3):
...     try:
...         _ = asyncio.run(model.complete([Message.user("hi")], []))
...     except BudgetExceeded as e:
...         print("refused:", e.spent_tokens, "spent")
refused: 20 spent
>>> meter.spent.total_tokens, meter.refused
(20, 1)
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

from tulip_nb.core import Message
from tulip_nb.core.errors import TulipNBError, UserError
from tulip_nb.models._base import Model, ModelResponse, Usage
from tulip_nb.models.pricing import Price, cost_of
from tulip_nb.tokens import get_counter

__all__ = ["as_budget"]


@dataclass(frozen=True)
class Budget:
    """At most ``tokens`` total tokens and/or ``cost`` USD (None: no limit on that)."""

    tokens: int | None = None
    cost: float | None = None

    def __post_init__(self) -> None:
        if self.tokens is None and self.cost is None:
            raise UserError("Budget needs tokens= and/or cost=")
        if self.tokens is not None and (
            isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0
        ):
            raise UserError(f"Budget(tokens=) must be an int >= 0, got {self.tokens!r}")
        if self.cost is not None and (isinstance(self.cost, bool) or not self.cost >= 0):
            raise UserError(f"Budget(cost=) must be a number of USD >= 0, got {self.cost!r}")

    def describe(self) -> str:
        parts = []
        if self.tokens is not None:
            parts.append(f"{self.tokens:,} tokens")
        if self.cost is not None:
            parts.append(f"${self.cost:.4f}")
        return " and ".join(parts)


def as_budget(value: Budget | int | None) -> Budget | None:
    """``budget=`` as a sweep takes it: a :class:`Budget`, an int (tokens) or None."""
    if value is None or isinstance(value, Budget):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Budget(tokens=value)
    raise UserError(f"budget= must be a Budget(tokens=..., cost=...) or an int (tokens), got {value!r}")


class BudgetExceeded(TulipNBError):
    """A live call was refused: it would have passed the budget. ``spent_tokens`` / ``spent_cost``
    say what had been spent (``spent_cost`` None when a price is unknown)."""

    http_status = 402

    def __init__(self, message: str, *, spent_tokens: int, spent_cost: float | None, **context: Any) -> None:
        self.spent_tokens = spent_tokens
        self.spent_cost = spent_cost
        super().__init__(message, **context)


@dataclass
class BudgetMeter:
    """The account of one experiment against ``budget`` (see the module docstring); thread-safe."""

    budget: Budget
    spent: Usage = field(default_factory=Usage)
    refused: int = 0
    _reserved_tokens: int = 0
    _reserved_cost: float = 0.0
    _largest_completion: int = 0
    _prompt_ratio: float = 1.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _passes(self, tokens: int, cost: float | None) -> bool:
        b = self.budget
        if b.tokens is not None and self.spent.total_tokens + self._reserved_tokens + tokens > b.tokens:
            return True
        if b.cost is None:
            return False
        if cost is None or self.spent.cost is None:  # an unknown price cannot be held to a money budget
            return True
        return self.spent.cost + self._reserved_cost + cost > b.cost

    def reserve(
        self, model: str, prompt_tokens: int, max_completion: int | None, price: Price | None = None
    ) -> tuple[int, float]:
        """Reserve the estimate of one call or raise :class:`BudgetExceeded`; returns the
        reservation to :meth:`settle`."""
        with self._lock:
            completion = max_completion if max_completion is not None else self._largest_completion
            prompt_tokens = math.ceil(prompt_tokens * self._prompt_ratio)
            tokens = prompt_tokens + completion
            cost = cost_of(model, Usage(prompt_tokens, completion, tokens, requests=1), price)
            if self._passes(tokens, cost):
                self.refused += 1
                spent = self.spent
                raise BudgetExceeded(
                    f"budget of {self.budget.describe()} reached: {spent.total_tokens:,} tokens"
                    + (f" (${spent.cost:.4f})" if spent.cost is not None else " (cost unknown)")
                    + f" spent, the next call to {model} needs about {tokens:,}",
                    spent_tokens=spent.total_tokens,
                    spent_cost=spent.cost,
                )
            self._reserved_tokens += tokens
            self._reserved_cost += cost or 0.0
            return tokens, cost or 0.0

    def settle(self, reservation: tuple[int, float], usage: Usage | None, counted_prompt: int = 0) -> None:
        """Replace a reservation by what the call used (None: it failed, nothing was billed).
        ``counted_prompt``: the prompt tokens counted locally for it, to learn how the provider
        counts (the ratio scales later estimates up, never down)."""
        with self._lock:
            self._reserved_tokens -= reservation[0]
            self._reserved_cost -= reservation[1]
            if usage is not None and not usage.cached:
                self.spent = self.spent + usage
                self._largest_completion = max(self._largest_completion, usage.completion_tokens)
                if counted_prompt > 0:
                    self._prompt_ratio = max(self._prompt_ratio, usage.prompt_tokens / counted_prompt)


def _max_completion(model: Any, kwargs: dict[str, Any]) -> int | None:
    params = {**(getattr(model, "params", None) or {}), **kwargs}
    for name in ("max_completion_tokens", "max_tokens"):
        if isinstance(params.get(name), int):
            return int(params[name])
    return None


class MeteredModel:
    """``model`` whose live calls are held to a :class:`BudgetMeter` (cache hits are free)."""

    def __init__(self, model: Model, meter: BudgetMeter) -> None:
        self.model = model
        self.meter = meter
        self.name = model.name

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]], **kwargs: Any) -> ModelResponse:
        will_hit = getattr(self.model, "has_cached", None)
        if callable(will_hit) and will_hit(messages, tools, **kwargs):
            return await self.model.complete(messages, tools, **kwargs)
        prompt = get_counter(self.name).count_request(messages, tools)
        price = getattr(self.model, "price", None)
        reservation = self.meter.reserve(self.name, prompt, _max_completion(self.model, kwargs), price)
        usage: Usage | None = None
        try:
            response = await self.model.complete(messages, tools, **kwargs)
            usage = response.usage
            return response
        finally:
            self.meter.settle(reservation, usage, prompt)

    def __getattr__(self, name: str) -> Any:
        if "model" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["model"], name)

    def __repr__(self) -> str:
        return f"metered({self.model!r})"


def metered(model: Model, meter: BudgetMeter) -> MeteredModel:
    """``model`` held to ``meter`` (see :class:`MeteredModel`)."""
    return MeteredModel(model, meter)
