"""The model's context window, as the lab's frames and widgets mark calls over it (``over_window``).

Where the window comes from, first hit wins:

1. what you say: ``context_window=`` (tokens, or a model name registered in
   :mod:`tulip_nb.models.metadata`);
2. the config: an :class:`~tulip_nb.memory.compactor.LLMCompactor`'s ``context_length`` (a
   summarising manager's, when it has one);
3. the model: the registered window of the manager's ``model`` (or the agent's model name);
4. for a saved thread: the window its token-aware manager saved with it (``"window"`` in the
   manager state, :meth:`~tulip_nb.memory.managers.ConversationManager.window_tokens`).

Otherwise it is unknown and ``over_window`` is None: nothing is claimed.
"""

from __future__ import annotations

from typing import Any

from tulip_nb.core.errors import UserError
from tulip_nb.core.state import AgentState
from tulip_nb.memory.conversation import STATE_KEY, LLMCompactor, SummarizingConversationManager
from tulip_nb.models.metadata import metadata_for

__all__ = ["model_window", "over_window", "saved_window", "window_for"]

Window = int | str | None
"""``context_window=``: tokens, a registered model name, or None (not said)."""


def _name(model: Any) -> str | None:
    if model is None or isinstance(model, str):
        return model
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else None


def model_window(model: Any) -> int | None:
    """The registered window of ``model`` (a name, or a model object with ``.name``), or None."""
    meta = metadata_for(_name(model))
    return meta.context_window if meta is not None else None


def _said(context_window: Window) -> int | None:
    if context_window is None:
        return None
    if isinstance(context_window, bool):
        raise UserError(f"context_window must be tokens or a model name, got {context_window!r}")
    if isinstance(context_window, int):
        if context_window < 1:
            raise UserError(f"context_window must be positive, got {context_window}")
        return context_window
    if isinstance(context_window, str):
        window = model_window(context_window)
        if window is None:
            raise UserError(
                f"context_window={context_window!r}: no window is registered for this model; pass the "
                "tokens, or tulip_nb.models.metadata.register_metadata(name, context_window=...)"
            )
        return window
    raise UserError(f"context_window must be tokens or a model name, got {type(context_window).__name__}")


def window_for(manager: Any = None, context_window: Window = None, model: Any = None) -> int | None:
    """The window calls made with ``manager`` are bound by (module docstring), or None if unknown."""
    said = _said(context_window)
    if said is not None:
        return said
    if isinstance(manager, LLMCompactor):
        return int(manager.context_length)
    if isinstance(manager, SummarizingConversationManager) and manager.context_length:
        return int(manager.context_length)
    for name in (getattr(manager, "model", None), model):
        window = model_window(name)
        if window is not None:
            return window
    return None


def over_window(tokens: Any, window: int | None) -> bool | None:
    """Whether a call of ``tokens`` context tokens exceeds ``window`` (None: window unknown)."""
    if window is None or tokens is None or tokens != tokens:
        return None
    return bool(int(tokens) > window)


def saved_window(state: AgentState) -> int | None:
    """The window the thread's token-aware manager saved with ``state`` (None: none saved)."""
    saved = state.metadata.get(STATE_KEY)
    window = saved.get("window") if isinstance(saved, dict) else None
    return window if type(window) is int and window > 0 else None
