"""tulip_nb.models: the model protocol and the models that ship with tulip_nb.

- :class:`ScriptedModel` — offline, from a list of answers or a function (tests, notebooks, Binder);
- :class:`ReplayModel` — serves a saved thread's answers and reports where a replay diverges;
- ``"openai:<model>"`` / :class:`tulip_nb.models.openai.OpenAIModel` — the official ``openai``
  client (imported only when used; ``pip install 'tulip_nb[openai]'``);
- :mod:`tulip_nb.models.metadata` — context windows (``register_metadata`` / ``metadata_for``);
- live experiments: :class:`ModelCache` / :func:`cached` (a response cache in one SQLite file),
  :mod:`~tulip_nb.models._limits` (one concurrency limit per model, retries honouring
  ``Retry-After``), :mod:`~tulip_nb.models.pricing` (cost per call), :class:`Budget` (a sweep stops
  before passing it).
"""

from __future__ import annotations

from typing import Any

from tulip_nb.core.errors import UserError
from tulip_nb.models._base import (
    ContextWindowExceeded,
    Model,
    ModelError,
    ModelHTTPError,
    ModelResponse,
    Usage,
)
from tulip_nb.models._cache import CachedModel, CacheEntry, ModelCache, cached, request_key
from tulip_nb.models._limits import ConcurrencyLimit, RetriesExhausted, RetryPolicy, shared_limit
from tulip_nb.models.budget import Budget, BudgetExceeded, BudgetMeter, MeteredModel, metered
from tulip_nb.models.metadata import ModelMetadata as ModelMetadata
from tulip_nb.models.metadata import metadata_for as metadata_for
from tulip_nb.models.metadata import register_metadata as register_metadata
from tulip_nb.models.pricing import DEFAULT_PRICES, Price, cost_of, price_for, register_price
from tulip_nb.models.replay import Divergence, ReplayDiverged, ReplayModel
from tulip_nb.models.scripted import ScriptedModel, text, tool_call, tool_calls

__all__ = [
    "Budget",
    "BudgetExceeded",
    "BudgetMeter",
    "CacheEntry",
    "CachedModel",
    "ConcurrencyLimit",
    "ContextWindowExceeded",
    "DEFAULT_PRICES",
    "Divergence",
    "MeteredModel",
    "Model",
    "ModelCache",
    "ModelError",
    "ModelHTTPError",
    "ModelResponse",
    "Price",
    "ReplayDiverged",
    "ReplayModel",
    "RetriesExhausted",
    "RetryPolicy",
    "ScriptedModel",
    "Usage",
    "cached",
    "cost_of",
    "metered",
    "price_for",
    "register_price",
    "request_key",
    "resolve_model",
    "shared_limit",
    "text",
    "tool_call",
    "tool_calls",
]


def resolve_model(model: Any) -> Model:
    """A :class:`Model` from a model object or a ``"provider:name"`` string (``"openai:gpt-4o"``)."""
    if isinstance(model, str):
        provider, sep, name = model.partition(":")
        if not sep or not name:
            raise UserError(f"model string must look like 'openai:<model>', got {model!r}")
        if provider == "openai":
            from tulip_nb.models.openai import OpenAIModel

            return OpenAIModel(name)
        raise UserError(f"unknown model provider {provider!r} in {model!r}; supported: 'openai:<model>'")
    if model is None:
        raise UserError("Agent needs a model: a Model object (e.g. ScriptedModel) or 'openai:<model>'")
    if not callable(getattr(model, "complete", None)):
        raise UserError(f"{type(model).__name__} is not a model: it has no async complete(messages, tools)")
    return model  # type: ignore[no-any-return]
