"""A plain ``mysql://`` URL works against a server without TLS; TLS is used when offered (issue 25, item 8).

Before: ``mysql://root@127.0.0.1:3306/test`` failed against the local MariaDB (built with
``have_ssl=DISABLED``) until ``?ssl_disabled=true``: mysql-connector's asyncio API, asked for
"TLS when offered", connects in plain TCP and then fails reading the TLS cipher. Now the server's
greeting decides (``ssl=preferred``, the default); ``ssl=required`` / ``ssl_disabled=false`` never
connect without TLS, and ``ssl=disabled`` / ``ssl_disabled=true`` never use it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples, require_service
from tulip_nb.core import AgentState, BackendUnavailable, Message
from tulip_nb.memory.backends import checkpointer_from_url
from tulip_nb.memory.backends._mysql_tls import greeting_offers_tls, server_offers_tls, tls_mode

from .factories.kv import drop_mysql_table

LOCAL = "mysql://root@127.0.0.1:3306/test"


def greeting(flags: int, version: bytes = b"10.11.19-MariaDB", protocol: int = 10) -> bytes:
    """A protocol-10 greeting payload with the low capability flags ``flags``."""
    return (
        bytes([protocol]) + version + b"\0" + bytes(4) + b"12345678" + b"\0" + flags.to_bytes(2, "little") + bytes(16)
    )


async def fake_server(payload: bytes) -> tuple[asyncio.Server, int]:
    """A server that sends one packet (``payload`` with its header) and closes."""

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(len(payload).to_bytes(3, "little") + b"\0" + payload)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


# -- the mode an URL or keyword asks for ---------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "mode"),
    [
        ({}, "preferred"),
        ({"ssl": "preferred"}, "preferred"),
        ({"ssl": "PREFER"}, "preferred"),
        ({"ssl": "required"}, "required"),
        ({"ssl": True}, "required"),
        ({"ssl": "disabled"}, "disabled"),
        ({"ssl": False}, "disabled"),
        ({"ssl_disabled": True}, "disabled"),
        ({"ssl_disabled": False}, "required"),  # asking for TLS explicitly
        ({"ssl_ca": "/etc/ca.pem"}, "required"),
        ({"ssl": "required", "ssl_verify_cert": True}, "required"),
        ({"ssl": "disabled", "ssl_disabled": True}, "disabled"),
    ],
)
def test_the_mode_each_option_means(options: dict[str, Any], mode: str) -> None:
    given_options = dict(options)
    assert tls_mode(given_options) == mode
    assert "ssl" not in given_options  # not a driver option


@pytest.mark.parametrize(
    "query",
    ["ssl=bogus", "ssl=preferred&ssl_disabled=true", "ssl=disabled&ssl_disabled=false", "ssl=disabled&ssl_ca=/c.pem"],
)
def test_a_mode_that_contradicts_itself_is_refused_when_built(query: str) -> None:
    with pytest.raises(ValueError, match="MySQL ssl="):
        checkpointer_from_url(f"{LOCAL}?table_name=never&{query}")


# -- the server's greeting -------------------------------------------------------------------------


@settings(max_examples=examples(2), deadline=None)
@given(flags=st.integers(0, 0xFFFF), version=st.binary(max_size=40).filter(lambda b: b"\0" not in b))
def test_the_greeting_says_whether_tls_is_offered(flags: int, version: bytes) -> None:
    payload = greeting(flags, version)
    assert greeting_offers_tls(payload) is bool(flags & 0x0800)
    for cut in range(len(version) + 15):  # cut before the flags: unknown, never a guess
        assert greeting_offers_tls(payload[:cut]) is None


def test_an_error_packet_or_old_protocol_is_unknown() -> None:
    assert greeting_offers_tls(b"\xff\x10\x04Too many connections") is None
    assert greeting_offers_tls(greeting(0x0800, protocol=9)) is None
    assert greeting_offers_tls(b"") is None


@pytest.mark.parametrize(("flags", "offered"), [(0xF7FF, False), (0x0800, True), (0xFFFF, True)])
async def test_a_server_is_asked_over_the_wire(flags: int, offered: bool) -> None:
    server, port = await fake_server(greeting(flags))
    async with server:
        assert await server_offers_tls("127.0.0.1", port) is offered


async def test_an_unreachable_server_is_unknown_and_the_driver_says_why() -> None:
    server, port = await fake_server(b"")
    server.close()
    await server.wait_closed()
    assert await server_offers_tls("127.0.0.1", port, seconds=2) is None
    cp = checkpointer_from_url(f"mysql://root@127.0.0.1:{port}/test?table_name=never")
    try:
        with pytest.raises(BackendUnavailable, match="cannot reach MySQL"):
            await cp.list_checkpoints("t")
    finally:
        await cp.close()


async def test_required_refuses_a_server_without_tls_before_the_driver_connects() -> None:
    server, port = await fake_server(greeting(0))  # it only greets: the refusal comes from its greeting
    async with server:
        cp = checkpointer_from_url(f"mysql://root@127.0.0.1:{port}/test?table_name=never&ssl=required")
        try:
            with pytest.raises(BackendUnavailable, match=rf"TLS is required \(ssl='required'\).*127.0.0.1:{port}"):
                await cp.list_checkpoints("t")
        finally:
            await cp.close()


# -- the local MariaDB -----------------------------------------------------------------------------


@pytest.fixture
async def table() -> AsyncIterator[str]:
    require_service("mysql", "127.0.0.1", 3306)
    name = f"tnbtls_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        await drop_mysql_table(name)


async def round_trip(url: str) -> None:
    cp = checkpointer_from_url(url)
    try:
        cid = await cp.save(AgentState(messages=[Message.user("hello")]), "t")
        assert await cp.list_checkpoints("t") == [cid]
        loaded = await cp.load("t")
        assert loaded is not None and loaded.messages[0].content == "hello"
    finally:
        await cp.close()


@pytest.mark.parametrize("extra", ["", "&ssl=preferred", "&ssl=disabled", "&ssl_disabled=true", "&ssl_disabled=1"])
async def test_the_plain_url_works_against_the_local_server(table: str, extra: str) -> None:
    """The bullet: no extra parameter needed; the explicit ones still work."""
    await round_trip(f"{LOCAL}?table_name={table}{extra}")


@pytest.mark.parametrize("extra", ["&ssl=required", "&ssl_disabled=false", "&ssl=true"])
async def test_required_tls_is_tls_or_a_clear_error(table: str, extra: str) -> None:
    """Never a silent plain connection: on a server offering TLS the URL works, else it says why."""
    attempt: Callable[[], Awaitable[None]] = lambda: round_trip(f"{LOCAL}?table_name={table}{extra}")  # noqa: E731
    if await server_offers_tls("127.0.0.1", 3306):
        await attempt()
    else:
        with pytest.raises(BackendUnavailable, match=r"TLS is required .* 127.0.0.1:3306 does not offer it"):
            await attempt()


async def test_preferred_uses_tls_exactly_when_the_server_offers_it(table: str) -> None:
    from tulip_nb.memory.backends._mysql import MySQLBackend

    backend = MySQLBackend(dsn=LOCAL, table_name=table)
    try:
        pool = await backend._pools.get()
        async with pool.acquire() as conn:
            assert conn.is_secure is bool(await server_offers_tls("127.0.0.1", 3306))
    finally:
        await backend.close()
