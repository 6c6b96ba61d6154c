"""What a model call costs: a price table in USD per million tokens, overridable per model.

A call's cost is its uncached prompt tokens at the input price, its provider-cached prompt tokens
(``Usage.cached_tokens``) at the cached-input price, and its completion tokens at the output
price. The shipped defaults are OpenAI's published list prices for common models at the time of
writing (standard tier, text): **check them against your contract and override them** with
:func:`register_price` (process-wide) or ``OpenAIModel(..., price=Price(...))`` (one adapter). An
unknown model has no price, and its cost is None (NA in a frame), never 0::

    from tulip_nb.models.pricing import Price, price_for, register_price

    register_price("my-finetune", Price(input=3.0, output=12.0))
    price_for("openai:gpt-4o-mini-2024-07-18")        # the gpt-4o-mini entry

>>> from tulip_nb.models import Usage
>>> p = Price(input=2.5, output=10.0, cached_input=1.25)
>>> round(p.cost(Usage(prompt_tokens=1_000, completion_tokens=100, cached_tokens=400)), 6)
0.003
>>> cost_of("gpt-4o", Usage(1_000_000, 0, 1_000_000, requests=1))
2.5
>>> cost_of("my-local-llama", Usage(10, 1, 11, requests=1)) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tulip_nb.models._base import Usage
from tulip_nb.models._by_model import ByModel

__all__ = ["model_cost"]


@dataclass(frozen=True)
class Price:
    """USD per million tokens: ``input`` (prompt), ``output`` (completion), ``cached_input``
    (prompt tokens the provider served from its prompt cache; the input price when not given)."""

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"Price.{name} must be a number >= 0 (USD per 1M tokens), got {value!r}")

    def cost(self, usage: Usage) -> float:
        """USD for ``usage`` (uncached prompt + cached prompt + completion tokens)."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        total = (
            (usage.prompt_tokens - cached) * self.input + cached * cached_price + usage.completion_tokens * self.output
        )
        return total / 1_000_000


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "o3": Price(2.00, 8.00, 0.50),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "gpt-4-turbo": Price(10.00, 30.00),
    "gpt-3.5-turbo": Price(0.50, 1.50),
}
"""The shipped list prices (USD per 1M tokens; see the module docstring)."""

_prices: ByModel[Price] = ByModel(DEFAULT_PRICES)


def register_price(model: str, price: Price | None) -> None:
    """Set (or, with None, remove) the price of ``model`` for this process."""
    _prices.set(model, price)


def price_for(model: str | None) -> Price | None:
    """The price of ``model`` (``provider:`` prefix and snapshot date ignored), or None if unknown."""
    return _prices.get(model)


def cost_of(model: str | None, usage: Usage, price: Price | None = None) -> float | None:
    """USD for ``usage`` of ``model`` (``price`` overrides the table); None when the price is unknown."""
    found = price if price is not None else price_for(model)
    return None if found is None else found.cost(usage)


def _inner(model: Any) -> Any:
    """The model under wrappers (``cached``, ``metered``): they keep it as ``.model``."""
    seen = 0
    while seen < 8 and callable(getattr(getattr(model, "model", None), "complete", None)):
        model, seen = model.model, seen + 1
    return model


def model_cost(model: Any, usage: Usage) -> float | None:
    """USD for ``usage`` of a model object: its own ``price`` if set, else the table's entry for its
    name; an offline model (``ScriptedModel``, ``ReplayModel``) costs 0; else None (unknown).

    >>> from tulip_nb.models import ScriptedModel
    >>> model_cost(ScriptedModel(["hi"]), Usage(100, 10, 110, requests=1))
    0.0
    """
    from tulip_nb.models.replay import ReplayModel
    from tulip_nb.models.scripted import ScriptedModel

    inner = _inner(model)
    if isinstance(inner, (ScriptedModel, ReplayModel)):
        return 0.0
    price = getattr(inner, "price", None)
    name = getattr(inner, "name", None)
    return cost_of(name if isinstance(name, str) else None, usage, price if isinstance(price, Price) else None)
