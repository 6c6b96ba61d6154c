"""Serving under uvicorn with bounds on slow clients: the settings ``tulip-nb serve`` uses.

uvicorn (0.54) bounds how long an idle keep-alive connection stays open, but not how long a client
may take to send its request headers: a client that connects and sends a byte a second (or
nothing) holds the connection for as long as it likes. :class:`SlowClientH11Protocol` is uvicorn's
h11 protocol with that bound added: the headers of each request must be complete within
``header_timeout`` seconds of its first byte (or of the connection, for the first request), else
the connection is closed. The body is bounded by the app itself (``AgentServer(body_timeout=)``),
since only the app knows when it reads it.

>>> SlowClientH11Protocol.__mro__[1].__name__
'H11Protocol'
>>> # os.environ[HEADER_TIMEOUT_ENV] = "10"; uvicorn.run(app, port=8000, http=SlowClientH11Protocol)
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["DEFAULT_HEADER_TIMEOUT", "HEADER_TIMEOUT_ENV", "SlowClientH11Protocol"]

DEFAULT_HEADER_TIMEOUT = 10.0
"""Seconds a client has to send a request's headers."""
HEADER_TIMEOUT_ENV = "TULIP_NB_SERVE_HEADER_TIMEOUT"
"""Where each connection reads the header timeout from (``0``: unbounded). An environment
variable because uvicorn spawns its workers: a class attribute set in the parent would not reach
them."""


class SlowClientH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers take too long (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        raw = os.environ.get(HEADER_TIMEOUT_ENV)
        self.header_timeout = float(raw) if raw else DEFAULT_HEADER_TIMEOUT
        self._header_timer: asyncio.TimerHandle | None = None

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        if self.header_timeout > 0:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.debug("closing a connection whose request headers took over %ss", self.header_timeout)
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_header_timer()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the headers are in: the app bounds the body
            self._disarm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)
