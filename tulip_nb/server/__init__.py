"""ASGI servers. Imported lazily: ``import tulip_nb.server`` pulls in no web stack until a name is used.

- :func:`checkpoint_app`: any checkpointer over tulip's HTTP checkpoint protocol.
- :class:`AgentServer`: an agent as an HTTP service (invoke, SSE stream, resume, threads).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from tulip_nb.server.agent_server import AgentServer
    from tulip_nb.server.checkpoints import checkpoint_app

__all__ = ["AgentServer", "checkpoint_app"]

# name -> module (import on first use: starlette is an optional dependency, ``tulip_nb[server]``)
_LAZY: dict[str, str] = {
    "checkpoint_app": "tulip_nb.server.checkpoints",
    "AgentServer": "tulip_nb.server.agent_server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"tulip_nb.server.{name} needs starlette: pip install 'tulip_nb[server]'") from e
    value = getattr(mod, name)
    globals()[name] = value  # later lookups skip __getattr__
    return value
