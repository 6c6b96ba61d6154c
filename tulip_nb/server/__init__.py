"""ASGI servers. Imported lazily: ``import tulip_nb.server`` pulls in no web stack until a name is used.

- :func:`checkpoint_app`: any checkpointer over tulip's HTTP checkpoint protocol.
- :class:`AgentServer`: an agent as an HTTP service (invoke, SSE stream, resume, threads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tulip_nb._lazy import lazy_exports

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from tulip_nb.server._agent_server import AgentServer
    from tulip_nb.server._checkpoints import checkpoint_app

__all__ = ["AgentServer", "checkpoint_app"]

# name -> module (import on first use: starlette is an optional dependency, ``tulip_nb[server]``)
_LAZY: dict[str, str] = {
    "checkpoint_app": "._checkpoints",
    "AgentServer": "._agent_server",
}


def _needs_starlette(name: str, error: ImportError) -> ImportError:
    return ImportError(f"tulip_nb.server.{name} needs starlette: pip install 'tulip_nb[server]'")


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, on_import_error=_needs_starlette)
