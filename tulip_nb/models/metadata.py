"""What is known about a model: its context window and output limit.

The agent uses the context window to pick its default conversation manager (seed 000): a known
window gives a token-aware ``LLMCompactor``, an unknown one a message-count sliding window.
Built-in entries cover common OpenAI models; add your own (a local vLLM model, a fine-tune)::

    from tulip_nb.models.metadata import metadata_for, register_metadata

    register_metadata("my-finetune", context_window=32_768)
    metadata_for("openai:my-finetune").context_window   # 32768

Lookups accept a ``provider:`` prefix and dated snapshots (``gpt-4o-2024-08-06`` -> ``gpt-4o``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tulip_nb.models._by_model import ByModel, bare_name

__all__ = ["ModelMetadata", "metadata_for", "register_metadata"]


@dataclass(frozen=True)
class ModelMetadata:
    """Limits of one model (tokens)."""

    name: str
    context_window: int
    max_output_tokens: int | None = None


_BUILTIN: tuple[ModelMetadata, ...] = (
    ModelMetadata("gpt-4o", 128_000, 16_384),
    ModelMetadata("gpt-4o-mini", 128_000, 16_384),
    ModelMetadata("gpt-4.1", 1_047_576, 32_768),
    ModelMetadata("gpt-4.1-mini", 1_047_576, 32_768),
    ModelMetadata("gpt-4.1-nano", 1_047_576, 32_768),
    ModelMetadata("o3", 200_000, 100_000),
    ModelMetadata("o3-mini", 200_000, 100_000),
    ModelMetadata("o4-mini", 200_000, 100_000),
    ModelMetadata("gpt-5", 400_000, 128_000),
    ModelMetadata("gpt-5-mini", 400_000, 128_000),
    ModelMetadata("gpt-5-nano", 400_000, 128_000),
    ModelMetadata("gpt-4-turbo", 128_000, 4_096),
    ModelMetadata("gpt-3.5-turbo", 16_385, 4_096),
)

_limits: ByModel[ModelMetadata] = ByModel({m.name: m for m in _BUILTIN})


def register_metadata(name: str, *, context_window: int, max_output_tokens: int | None = None) -> ModelMetadata:
    """Register (or replace) the limits of model ``name``; returns the entry."""
    if context_window <= 0:
        raise ValueError(f"context_window must be positive, got {context_window}")
    entry = ModelMetadata(bare_name(name), context_window, max_output_tokens)
    _limits.set(entry.name, entry)
    return entry


def metadata_for(name: str | None) -> ModelMetadata | None:
    """The registered limits of ``name`` (prefix and snapshot date ignored), or None if unknown."""
    return _limits.get(name)
