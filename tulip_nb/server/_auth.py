"""Bearer API keys, principals and the storage id of a client's thread.

A **principal** is who is calling: :func:`~tulip_nb.core.principals.principal_for_api_key` (``anon``
when the server has no key, else the first 12 hex of ``sha256(api key)``) — what tulip's server
uses, so a thread a tulip server stored is found again.
A server may accept several keys (one per team or notebook user); each key is its own principal
and sees only its own threads.

Keys are compared in constant time: the SHA-256 of the presented key is compared with
:func:`hmac.compare_digest` against every configured key's digest (no early exit, no length leak).

Thread layouts (how a client's ``thread_id`` is stored in the checkpointer):

- ``"tulip"`` (default): ``"<principal>:<thread_id>"``, tulip's AgentServer layout (FORMATS.md);
- ``"plain"``: the client's id as is, for a single-tenant server whose threads are also opened from
  notebooks or ``tulip-nb threads``; refused with more than one key (it would mix principals).

>>> keys = ApiKeys(["team-a-secret"])
>>> keys.principal_for("Bearer team-a-secret")
'9a437339f869'
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from typing import Literal

from tulip_nb.core.errors import UserError
from tulip_nb.core.principals import ANON_PRINCIPAL, principal_for_api_key

__all__ = ["ENV_VAR", "ApiKeys", "Layout", "storage_id", "storage_prefix"]

ENV_VAR = "TULIP_NB_SERVER_API_KEY"
"""Environment variable read when no key is passed (several keys: comma-separated)."""

Layout = Literal["tulip", "plain"]


def storage_prefix(principal: str, layout: Layout) -> str:
    """What every stored thread id of ``principal`` starts with."""
    return f"{principal}:" if layout == "tulip" else ""


def storage_id(principal: str, thread_id: str, layout: Layout) -> str:
    """The id ``thread_id`` of ``principal`` is stored under."""
    return storage_prefix(principal, layout) + thread_id


class ApiKeys:
    """The keys a server accepts (none: every caller is ``anon``); see the module docstring."""

    def __init__(self, keys: str | Sequence[str] | None = None, *, from_env: bool = True) -> None:
        if keys is None and from_env:
            raw = os.environ.get(ENV_VAR, "")
            keys = [k.strip() for k in raw.split(",") if k.strip()]
        if isinstance(keys, str):
            keys = [keys]
        keys = list(keys or [])
        for k in keys:
            if not isinstance(k, str) or not k.strip():
                raise UserError("api_key must be a non-empty string (or a list of them)")
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys]

    @property
    def required(self) -> bool:
        """Whether callers must present a key."""
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def principal_for(self, authorization: str | None) -> str | None:
        """The caller's principal from an ``Authorization`` header, or None if refused."""
        if not self._digests:
            return ANON_PRINCIPAL
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        digest = hashlib.sha256(token.encode()).digest()
        ok = False
        for known in self._digests:  # no early exit: the time does not depend on which key matched
            ok |= hmac.compare_digest(digest, known)
        return principal_for_api_key(token) if ok else None
