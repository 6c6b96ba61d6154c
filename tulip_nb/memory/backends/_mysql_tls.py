"""TLS for MySQL / MariaDB connections: what ``ssl=`` means, and whether the server offers TLS.

Three modes, as the ``mysql`` client's ``--ssl-mode`` names them:

=============  ====================================================================================
``preferred``  the default: TLS when the server offers it, plain TCP when it does not (a MariaDB
               built or configured without TLS, ``have_ssl=DISABLED``). The certificate is not
               verified, as in the ``mysql`` client's ``PREFERRED``
``required``   TLS or no connection: a server that does not offer TLS is a clear
               :class:`~tulip_nb.core.errors.BackendUnavailable`, never a silent plain connection
``disabled``   never TLS
=============  ====================================================================================

Whether the server offers TLS is read from its greeting, the first packet it sends on a new
connection (protocol 10: the ``CLIENT_SSL`` capability bit), once per backend, before the driver
connects. (mysql-connector-python's asyncio API does negotiate "TLS when offered" itself, but then
fails once connected to a server without TLS: it reads the TLS cipher of a plain socket.)

The mode comes from ``ssl=`` (``preferred``, ``required``, ``disabled``; ``true`` / ``false`` mean
``required`` / ``disabled``), in the DSN or as a keyword. The driver's own options still work and
decide the mode when ``ssl=`` is absent: ``ssl_disabled=true`` is ``disabled``;
``ssl_disabled=false`` (asking for TLS explicitly) and any certificate option (``ssl_ca``,
``ssl_cert``, ``ssl_key``, ``ssl_verify_cert``, ``ssl_verify_identity``) are ``required``. Options
that contradict ``ssl=`` are refused when the backend is built.

>>> tls_mode({"ssl": "required"}), tls_mode({}), tls_mode({"ssl_disabled": True})
('required', 'preferred', 'disabled')
>>> greeting_offers_tls(bytes([10]) + b"10.11.19-MariaDB\\0" + bytes(13) + (0x0800).to_bytes(2, "little"))
True
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Literal

__all__ = ["SSL_MODES", "TlsMode", "greeting_offers_tls", "server_offers_tls", "tls_choice", "tls_mode"]

TlsMode = Literal["preferred", "required", "disabled"]
SSL_MODES: tuple[TlsMode, ...] = ("preferred", "required", "disabled")
_ALIASES: dict[Any, TlsMode] = {
    "preferred": "preferred",
    "prefer": "preferred",
    "required": "required",
    "require": "required",
    True: "required",
    "disabled": "disabled",
    "disable": "disabled",
    False: "disabled",
}
_CERT_OPTIONS = ("ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert", "ssl_verify_identity")
_CLIENT_SSL = 0x0800
"""The capability bit a server sets in its greeting when it accepts a switch to TLS."""


def tls_mode(options: dict[str, Any]) -> TlsMode:
    """The TLS mode ``options`` (connector keyword arguments) ask for; removes ``ssl`` from them.

    Raises:
        ValueError: ``ssl`` is not a mode, or contradicts ``ssl_disabled`` or a certificate option.
    """
    return tls_choice(options)[0]


def tls_choice(options: dict[str, Any]) -> tuple[TlsMode, str]:
    """:func:`tls_mode` and the option that decided it (``"ssl='required'"``, ``"the default"``)."""
    given = options.pop("ssl", None)
    key = given.lower() if isinstance(given, str) else given
    if given is not None and key not in _ALIASES:
        raise ValueError(f"MySQL ssl={given!r} is not one of {', '.join(SSL_MODES)} (nor true / false)")
    disabled = options.get("ssl_disabled")
    certs = [k for k in _CERT_OPTIONS if options.get(k)]
    implied: TlsMode | None = "disabled" if disabled is True else "required" if disabled is False or certs else None
    why = f"ssl_disabled={disabled}" if disabled is not None else f"{certs[0]}=" if certs else "the default"
    if given is None:
        return implied or "preferred", why
    mode = _ALIASES[key]
    if implied is not None and implied != mode:
        raise ValueError(f"MySQL ssl={given!r} contradicts {why} (which means ssl={implied})")
    if mode == "disabled" and certs:
        raise ValueError(f"MySQL ssl={given!r} contradicts {certs[0]}= (a certificate for TLS)")
    return mode, f"ssl={given!r}"


def greeting_offers_tls(payload: bytes) -> bool | None:
    """Whether a server greeting (protocol 10 handshake payload) sets ``CLIENT_SSL``; None if unreadable.

    The payload: protocol version (10), the server version (NUL-terminated), a 4-byte connection
    id, 8 bytes of the auth challenge, a filler byte, then the low 2 bytes of the capability flags.
    An error packet (``0xff``: too many connections, host blocked) or an older protocol is None.
    """
    if not payload or payload[0] != 10:
        return None
    end = payload.find(b"\0", 1)
    flags_at = end + 1 + 4 + 8 + 1
    if end < 0 or len(payload) < flags_at + 2:
        return None
    return bool(int.from_bytes(payload[flags_at : flags_at + 2], "little") & _CLIENT_SSL)


async def server_offers_tls(host: str, port: int, seconds: float = 10.0) -> bool | None:
    """Read the greeting of the server at ``host:port`` and say whether it offers TLS.

    None when that cannot be told within ``seconds`` (unreachable, an error packet): the driver's
    own connection attempt then reports what is wrong. Nothing is sent; the socket is closed.
    """
    writer = None
    try:
        async with asyncio.timeout(seconds):
            reader, writer = await asyncio.open_connection(host, port)
            header = await reader.readexactly(4)
            payload = await reader.readexactly(int.from_bytes(header[:3], "little"))
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return None
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    return greeting_offers_tls(payload)
