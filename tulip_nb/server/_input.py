"""What both servers check in a request before routing it: the target's encoding, the body's pace.

A request target is percent-encoded UTF-8. A segment that decodes to invalid UTF-8 (``/threads/%FF``)
or a query that does (``?pattern=%FF``) is the client's mistake: 400, never a 500 from deep inside
a route, and never a silently "replaced" id that names another thread.

Reading a body is bounded in time as a whole (``body_timeout``), since uvicorn bounds neither the
total nor each read: a client sending a byte a second would otherwise hold its connection (and a
worker's memory) for as long as it likes.
"""

from __future__ import annotations

import asyncio
from urllib.parse import unquote_to_bytes

from starlette.types import Message, Receive, Scope

from tulip_nb.server._schemas import HTTPProblem

__all__ = ["bounded_receive", "check_query", "path_parts"]


def _utf8(raw: bytes, where: str) -> str:
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPProblem(400, "BadRequest", f"the request {where} is not valid UTF-8 once percent-decoded") from None


def path_parts(scope: Scope) -> list[str]:
    """Path segments split on the raw path, so ``a%2Fb`` stays one segment (the id ``a/b``); 400 if not UTF-8."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    raw = raw.split(b"?", 1)[0]
    root = scope.get("root_path", "").encode()
    if root and raw.startswith(root):
        raw = raw[len(root) :]
    return [_utf8(p, "path") for p in raw.split(b"/")[1:]]


def check_query(scope: Scope) -> None:
    """400 unless every name and value of the query string is UTF-8 once decoded."""
    query: bytes = scope.get("query_string", b"")
    for pair in query.replace(b"+", b" ").split(b"&"):
        for part in pair.split(b"=", 1):
            _utf8(part, "query")


def bounded_receive(receive: Receive, seconds: float | None) -> Receive:
    """``receive``, but the whole body must arrive within ``seconds`` of now (408 otherwise).

    Only the body is bounded: once its last chunk is in, ``receive`` waits as long as the app
    wants (a streamed response listens on it for the client's disconnect).
    """
    if seconds is None:
        return receive
    deadline = asyncio.get_running_loop().time() + seconds
    body_done = False

    async def bounded() -> Message:
        nonlocal body_done
        if body_done:
            return await receive()
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                message = await receive()
        except TimeoutError:
            raise HTTPProblem(
                408, "RequestTimeout", f"the request body did not arrive within {seconds:g} s", limit_seconds=seconds
            ) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            body_done = True
        return message

    return bounded
