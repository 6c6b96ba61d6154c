"""Principals: who a thread of tulip's AgentServer belongs to, one rule for every layer.

tulip's AgentServer stores the thread a client calls ``support/42`` under
``"<principal>:support/42"``, where the principal is :data:`ANON_PRINCIPAL` when the caller has no
API key, else the first 12 hex digits of the key's SHA-256. The server (``tulip_nb.server``) files
threads by this rule and the lab (``tulip_nb.lab``) maps ids by it, so both name the same thread.

>>> principal_for_api_key("team-a-secret"), principal_for_api_key(None)
('9a437339f869', 'anon')
"""

from __future__ import annotations

import hashlib

__all__ = ["ANON_PRINCIPAL", "principal_for_api_key"]

ANON_PRINCIPAL = "anon"
"""The principal of a caller without an API key (a server that requires none)."""


def principal_for_api_key(api_key: str | None) -> str:
    """The principal tulip's AgentServer files a caller's threads under (module docstring)."""
    if not api_key:
        return ANON_PRINCIPAL
    return hashlib.sha256(api_key.encode()).hexdigest()[:12]
