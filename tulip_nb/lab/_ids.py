"""Thread ids of tulip's AgentServer: ``"<principal>:<thread_id>"``, and the way back to plain ids.

tulip's AgentServer stores a thread a client calls ``support/42`` under ``"<principal>:support/42"``
in its checkpointer, where the principal is :func:`~tulip_nb.core.principals.principal_for_api_key`
(``anon`` without an API key, else the first 12 hex digits of the key's SHA-256; the server's rule
too). To study such threads as the client knows them (or to hand threads worked on in a notebook
back to the server), map the ids while exporting::

    export_threads("postgresql://...", "file:./threads", map_ids=strip_principal("anon"))
    export_threads("file:./threads", "postgresql://...", map_ids=add_principal("anon"))

>>> split_server_thread_id("anon:support/42")
('anon', 'support/42')
>>> strip_principal("anon")("anon:support/42"), strip_principal("anon")("3f2a:other")
('support/42', None)
>>> add_principal(principal_for_api_key("k-123"))("support/42")
'3605a9e4358d:support/42'
"""

from __future__ import annotations

from collections.abc import Callable

from tulip_nb.core.errors import UserError
from tulip_nb.core.principals import principal_for_api_key

__all__ = [
    "IdMap",
    "add_principal",
    "principal_for_api_key",
    "server_thread_id",
    "split_server_thread_id",
    "strip_principal",
]

IdMap = Callable[[str], "str | None"]
"""Maps a source thread id to the destination's; ``None`` leaves the thread out."""


def _check_principal(principal: str) -> str:
    if not isinstance(principal, str) or not principal or ":" in principal:
        raise UserError(f"principal must be a non-empty string without ':', got {principal!r}")
    return principal


def server_thread_id(principal: str, thread_id: str) -> str:
    """``"<principal>:<thread_id>"``, the id under which the AgentServer stores ``thread_id``."""
    return f"{_check_principal(principal)}:{thread_id}"


def split_server_thread_id(server_id: str) -> tuple[str, str]:
    """``(principal, thread_id)`` of a server-stored id; :class:`UserError` when it has no principal."""
    principal, sep, thread_id = server_id.partition(":")
    if not sep or not principal or not thread_id:
        raise UserError(f"{server_id!r} is not an AgentServer thread id ('<principal>:<thread_id>')")
    return principal, thread_id


def strip_principal(principal: str) -> IdMap:
    """Map ``"<principal>:<tid>"`` to ``"<tid>"``; threads of other principals are left out."""
    prefix = _check_principal(principal) + ":"

    def mapping(thread_id: str) -> str | None:
        rest = thread_id[len(prefix) :]
        return rest if thread_id.startswith(prefix) and rest else None

    return mapping


def add_principal(principal: str) -> IdMap:
    """Map ``"<tid>"`` to ``"<principal>:<tid>"`` (the inverse of :func:`strip_principal`)."""
    _check_principal(principal)

    def mapping(thread_id: str) -> str | None:
        return server_thread_id(principal, thread_id)

    return mapping
