"""HTTPCheckpointer: a checkpointer that lives behind an HTTP service (tulip's wire protocol).

The service stores; this class speaks. Any server of tulip's checkpoint protocol works (see
:mod:`tulip_nb.server._checkpoints` for the routes), including tulip_nb's own
``checkpoint_app(checkpointer)``, which also serves the *tulip_nb extensions*: compare-and-swap
(``If-Match``), one-request loads of the latest checkpoint, and the optional operations
(``list_threads``, ``copy_thread``, ``search``...) of whatever checkpointer it wraps.

Which optional operations work depends on the server, so :attr:`capabilities` is *discovered*:
``GET /capabilities`` on first use (or on ``async with``). A plain tulip-protocol server has none.

Unlike tulip's client, a failed request is never turned into "no thread": an unreachable server, a
timeout or a 5xx raises :class:`~tulip_nb.core.errors.BackendUnavailable`, so an agent resuming a
conversation during an outage stops instead of starting the conversation afresh.

The client is strict about what a 2xx means, because proxies, load balancers and half-working
servers answer 200 with bodies that are not the protocol's:

- a save (and ``put_checkpoint``) is acknowledged only by the protocol's receipt, a JSON object
  whose ``checkpoint_id`` is the id that was sent (and whose ``thread_id``, when present, is the
  thread). Anything else raises :class:`~tulip_nb.core.errors.BackendUnavailable`, naming the URL
  and what came back. That includes an HTML page, an empty body, ``null``, ``{}``, truncated JSON
  and another id. The save may or may not have been stored: treat it as not acknowledged.
- a load accepts only an envelope or a bare state (a JSON object with a ``messages`` list, at the
  top level or under ``state``) for the requested checkpoint. A 200 ``{}`` or ``{"error": ...}`` is
  ``BackendUnavailable``, never an empty state. A listing must be a list of ids (or of
  ``{"checkpoint_id"}`` objects), bare or under ``"checkpoints"``.
- "not found" is the protocol's not-found only: a 404 whose body is a JSON object, ours
  (``CheckpointNotFound`` / ``ThreadNotFound``), tulip's service's (``{"error": "Not found"}``) or a
  plain server's (e.g. ``{"detail": ...}``), unless it names another of our errors. A 404 whose
  body is not JSON (a proxy, a wrong ``base_url``) is ``BackendUnavailable``, not "no such
  checkpoint".
- a listing with no limit asks for ``limit=2147483647``: a server's default page (10 on ours and
  tulip's) never cuts it.
- ``delete()`` is True only for ``{"deleted": true}`` (or a bodiless 204), and False for the
  protocol's not-found.
- ``timeout=`` bounds each *call*: the requests one call makes (discovery, listing, the read), body
  included, must finish within ``timeout`` seconds in total. httpx's own timeout applies per network
  read, so a server dripping a byte every half second would otherwise never time out.

>>> async with HTTPCheckpointer("http://127.0.0.1:8000") as cp:   # doctest: +SKIP
...     cid = await cp.save(state, "user/42")
...     await cp.load("user/42")
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType
from typing import Any
from urllib.parse import quote

import orjson

from tulip_nb.core import errors as _errors
from tulip_nb.core import parse_datetime, utcnow
from tulip_nb.core.errors import (
    BackendUnavailable,
    CapabilityNotSupported,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
    InvalidThreadId,
    UserError,
)
from tulip_nb.core.state import AgentState
from tulip_nb.memory._envelope import decode_envelope, encode_envelope
from tulip_nb.memory.backends._base import InTreeCheckpointer
from tulip_nb.memory.backends._http_wire import DEADLINE as _DEADLINE
from tulip_nb.memory.backends._http_wire import (
    INVALID as _INVALID,
)
from tulip_nb.memory.backends._http_wire import (
    answer as _answer,
)
from tulip_nb.memory.backends._http_wire import bounded as _bounded
from tulip_nb.memory.backends._http_wire import (
    has_state as _has_state,
)
from tulip_nb.memory.backends._http_wire import (
    import_httpx as _import_httpx,
)
from tulip_nb.memory.backends._http_wire import (
    loads as _loads,
)
from tulip_nb.memory.backends._http_wire import (
    segment,
)
from tulip_nb.memory.checkpointer import (
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    new_checkpoint_id,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)

__all__ = ["PUT_HEADER", "segment"]

PUT_HEADER = "x-tulip-nb-put"
"""Request header (tulip_nb extension): store the POSTed envelope verbatim (``put_checkpoint``)."""

_ALL = 2**31 - 1
"""The ``limit`` sent for "no limit"."""
_NOT_FOUND_KINDS = frozenset(("CheckpointNotFound", "ThreadNotFound"))
_ERROR_KINDS = frozenset(
    name for name, obj in vars(_errors).items() if isinstance(obj, type) and issubclass(obj, _errors.TulipNBError)
)
"""Our error classes by name: a JSON 404 naming one that is not a not-found is that error, not "absent"."""
_NOT_PROTOCOL_404 = "not the protocol's not-found (a proxy, or a wrong base_url?)"


class HTTPCheckpointer(InTreeCheckpointer):
    """Checkpoints stored by a remote service, over HTTP (see the module docstring).

    Args:
        base_url: the service root, e.g. ``"https://checkpoints.internal/v1"``.
        headers: sent with every request (e.g. ``{"Authorization": "Bearer ..."}``).
        auth: ``(user, password)`` for HTTP basic auth, or any ``httpx.Auth``.
        timeout: seconds per call, for all its requests together, bodies included (``None``: none).
        capabilities: skip discovery and advertise these instead.
        transport: an ``httpx.AsyncBaseTransport`` (tests, proxies).
    """

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str] | None = None,
        auth: Any = None,
        timeout: float | None = 30.0,
        *,
        capabilities: Capabilities | None = None,
        transport: Any = None,
    ) -> None:
        self._httpx = _import_httpx()
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.auth = auth
        self.timeout = timeout
        self._transport = transport
        self._caps = capabilities or Capabilities()
        self._extensions: bool | None = None  # unknown until discovered
        self._fixed_caps = capabilities is not None
        # An httpx.AsyncClient belongs to the event loop that opened its connections: keep one per loop.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"HTTPCheckpointer(base_url={self.base_url!r})"

    @property
    def capabilities(self) -> Capabilities:
        """What the server offers: discovered on first use (none before that, or for plain servers)."""
        return self._caps

    # -- transport ----------------------------------------------------------------------------
    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._httpx.AsyncClient(
                base_url=self.base_url,
                headers=self.headers,
                auth=self.auth,
                timeout=self.timeout,
                transport=self._transport,
            )
            self._clients[loop] = client
        return client

    def _deadline(self) -> float | None:
        """When the running call must be done (loop time): its own deadline, or one for this request."""
        outer = _DEADLINE.get()
        if outer is not None and outer[0] is self:
            return outer[1]
        return None if self.timeout is None else asyncio.get_running_loop().time() + self.timeout

    async def _request(self, method: str, path: str, *, action: str, **kwargs: Any) -> Any:
        url = f"{self.base_url}{path}"
        try:
            async with asyncio.timeout_at(self._deadline()):
                return await self._client().request(method, path, **kwargs)
        except TimeoutError as e:
            raise BackendUnavailable(
                f"HTTPCheckpointer could not {action}: {method} {url} did not answer completely within "
                f"timeout={self.timeout}s (the whole call's deadline)",
                path=url,
            ) from e
        except self._httpx.HTTPError as e:
            raise BackendUnavailable(f"HTTPCheckpointer could not {action}: {type(e).__name__}: {e}", path=url) from e

    def _bad(
        self, resp: Any, action: str, why: str, thread_id: str | None = None, checkpoint_id: str | None = None
    ) -> BackendUnavailable:
        """A 2xx (or 404) whose body is not what the protocol answers: the URL and what came back."""
        url = str(resp.request.url)
        return BackendUnavailable(
            f"HTTPCheckpointer could not {action}: {resp.request.method} {url} answered {_answer(resp)}, {why}",
            path=url,
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        )

    def _object(self, resp: Any, action: str, thread_id: str | None = None, **ctx: Any) -> dict[str, Any]:
        """A 2xx body that must be a JSON object."""
        data = _loads(resp.content)
        if not isinstance(data, dict):
            raise self._bad(resp, action, "not a JSON object", thread_id, ctx.get("checkpoint_id"))
        return data

    @staticmethod
    def _protocol_not_found(resp: Any) -> bool:
        """A 404 that is the protocol's not-found: a JSON object, ours (``CheckpointNotFound`` /
        ``ThreadNotFound``), tulip's service's (``{"error": "Not found"}``) or a plain server's
        (``{"detail": ...}``). An HTML (non-JSON) 404 is not, nor a JSON one that names another of
        our errors (``{"error": "InvalidThreadId"}``)."""
        if resp.status_code != 404:
            return False
        body = _loads(resp.content)
        if not isinstance(body, dict):
            return False
        kind = body.get("error")
        return kind in (None, *_NOT_FOUND_KINDS) or not (isinstance(kind, str) and kind in _ERROR_KINDS)

    def _receipt(self, resp: Any, action: str, thread_id: str, checkpoint_id: str) -> None:
        """A save is acknowledged only by ``{"checkpoint_id": <the id sent>, ...}``."""
        body = _loads(resp.content)
        expected = f"expected the protocol's receipt, a JSON object with checkpoint_id {checkpoint_id!r}"
        if not isinstance(body, dict) or body.get("checkpoint_id") != checkpoint_id:
            raise self._bad(resp, action, f"{expected}: the save is not acknowledged", thread_id, checkpoint_id)
        if body.get("thread_id", thread_id) != thread_id:
            raise self._bad(
                resp, action, "the receipt names another thread: the save is not acknowledged", thread_id, checkpoint_id
            )

    def _fail(
        self, resp: Any, action: str, thread_id: str | None = None, checkpoint_id: str | None = None
    ) -> Exception:
        """The exception for a non-2xx response: our JSON errors map back to their classes."""
        body: dict[str, Any] = {}
        if resp.headers.get("content-type", "").startswith("application/json"):
            try:
                parsed = orjson.loads(resp.content)
                body = parsed if isinstance(parsed, dict) else {}
            except orjson.JSONDecodeError:
                body = {}
        kind, message = str(body.get("error", "")), str(body.get("message", resp.reason_phrase))
        ctx: dict[str, Any] = {
            "thread_id": body.get("thread_id", thread_id),
            "checkpoint_id": body.get("checkpoint_id", checkpoint_id),
        }
        # The inverse of core.errors.problem_from: each class's own http_status and name.
        status = resp.status_code
        if status in (CheckpointConflict.http_status, 412) or kind == "CheckpointConflict":
            return CheckpointConflict(message, expected=body.get("expected"), actual=body.get("actual"), **ctx)
        if status == CheckpointNotFound.http_status and kind in ("CheckpointNotFound", "ThreadNotFound"):
            return CheckpointNotFound(message, **ctx)
        if status == CheckpointCorrupt.http_status and kind == "CheckpointCorrupt":
            return CheckpointCorrupt(message, path=f"{self.base_url}{resp.request.url.raw_path.decode()}", **ctx)
        if status in (InvalidThreadId.http_status, UserError.http_status) and kind == "InvalidThreadId":
            return InvalidThreadId(message, **ctx)  # 400 from servers older than one status per class
        if status == UserError.http_status:
            return UserError(f"server refused the request to {action}: {message}", **ctx)
        if status == CapabilityNotSupported.http_status:
            return CapabilityNotSupported(type(self).__name__, str(body.get("capability", "?")), action)
        return BackendUnavailable(
            f"HTTPCheckpointer could not {action}: HTTP {status} {message}".rstrip(),
            path=str(resp.request.url),
            **ctx,
        )

    @_bounded
    async def discover(self) -> Capabilities:
        """Ask the server what it supports (``GET /capabilities``); plain servers support none."""
        resp = await self._request("GET", "/capabilities", action="discover capabilities")
        if resp.status_code == 200:
            data = self._object(resp, "discover capabilities")
            listed = data.get("capabilities") or []
            if not isinstance(listed, list):
                raise self._bad(resp, "discover capabilities", "'capabilities' is not a list")
            names = {str(n) for n in listed}
            self._extensions = bool(data.get("extensions"))
            if not self._fixed_caps:
                known = {f for f in Capabilities.__dataclass_fields__}
                self._caps = Capabilities(**{n: True for n in names & known})
        elif resp.status_code in (404, 405):  # a plain server (even an HTML 404): no extensions
            self._extensions = False
        else:
            raise self._fail(resp, "discover capabilities")
        return self._caps

    async def _ext(self) -> bool:
        if self._extensions is None:
            await self.discover()
        return bool(self._extensions)

    async def _gate(self, capability: str, operation: str) -> None:
        await self._ext()
        self._require(capability, operation)

    @staticmethod
    def _t(thread_id: str) -> str:
        return f"/threads/{segment(validate_thread_id(thread_id))}"

    # -- contract -----------------------------------------------------------------------------
    @_bounded
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        path = self._t(thread_id) + "/checkpoints"
        cid = validate_checkpoint_id(checkpoint_id, thread_id) if checkpoint_id else new_checkpoint_id()
        headers = {"content-type": "application/json"}
        if expected_parent is not None:
            if not await self._ext():
                raise CapabilityNotSupported(type(self).__name__, "compare_and_swap", "save(expected_parent=...)")
            if expected_parent:
                headers["if-match"] = f'"{quote(expected_parent, safe="")}"'
            else:
                headers["if-none-match"] = "*"
        body = encode_envelope(cid, thread_id, utcnow(), state, dict(metadata or {}))
        resp = await self._request("POST", path, action="save a checkpoint", content=body, headers=headers)
        if not 200 <= resp.status_code < 300:
            raise self._fail(resp, "save a checkpoint", thread_id, cid)
        self._receipt(resp, "save a checkpoint", thread_id, cid)
        return cid

    @_bounded
    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write a checkpoint verbatim: a tulip_nb server stores it as sent (``X-Tulip-NB-Put``);
        a plain tulip-protocol server only offers :meth:`save` (the base class's fallback)."""
        ckpt = validate_checkpoint(checkpoint)
        if not await self._ext():
            await super().put_checkpoint(ckpt)
            return
        t, cid = ckpt.thread_id, ckpt.checkpoint_id
        body = encode_envelope(cid, t, ckpt.created_at, ckpt.state, dict(ckpt.metadata), ckpt.extra or None)
        headers = {"content-type": "application/json", PUT_HEADER: "verbatim"}
        resp = await self._request(
            "POST", self._t(t) + "/checkpoints", action="put a checkpoint", content=body, headers=headers
        )
        if not 200 <= resp.status_code < 300:
            raise self._fail(resp, "put a checkpoint", t, cid)
        self._receipt(resp, "put a checkpoint", t, cid)

    def _parse(self, resp: Any, action: str, thread_id: str, checkpoint_id: str) -> Checkpoint:
        """An envelope (any key order) or a bare state, as the protocol allows either; any other
        200 body (``{}``, ``{"error": ...}``, HTML, truncated JSON) is ``BackendUnavailable``."""
        body: bytes = resp.content
        url = str(resp.request.url)
        obj = _loads(body)
        if not isinstance(obj, dict) or not _has_state(obj):
            why = "not a JSON object" if not isinstance(obj, dict) else "not a checkpoint (no state with messages)"
            if isinstance(obj, dict) and "error" in obj:
                why = f"an error, not a checkpoint: {str(obj['error'])[:200]!r}"
            raise self._bad(resp, action, why, thread_id, checkpoint_id or None)
        sent = obj.get("checkpoint_id")
        if checkpoint_id and "state" in obj and sent is not None and sent != checkpoint_id:
            raise self._bad(resp, action, f"the envelope of another checkpoint ({sent!r})", thread_id, checkpoint_id)
        if body.startswith(b'{"checkpoint_id"'):
            ckpt = decode_envelope(body, where=url, thread_id=thread_id)
        else:
            if "state" in obj and "checkpoint_id" in obj and "created_at" in obj:
                ckpt = decode_envelope(body, where=url, thread_id=thread_id)
            else:
                raw = obj.get("state", obj)
                try:
                    state = AgentState.model_validate(raw)
                    created = parse_datetime(obj["created_at"]) if "created_at" in obj else state.updated_at
                except (ValueError, TypeError) as e:
                    raise CheckpointCorrupt(f"not a checkpoint: {e}", path=url, thread_id=thread_id) from e
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
                ckpt = Checkpoint(checkpoint_id, thread_id, created, state, meta or {})
        ckpt.thread_id = thread_id
        return ckpt

    @_bounded
    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        if checkpoint_id is None:
            if await self._ext():
                path = self._t(thread_id) + "/latest"
                action = "load the latest checkpoint"
                resp = await self._request("GET", path, action=action)
                if self._protocol_not_found(resp):
                    return None
                if resp.status_code == 404:
                    raise self._bad(resp, action, _NOT_PROTOCOL_404, thread_id)
                if resp.status_code != 200:
                    raise self._fail(resp, action, thread_id)
                return self._parse(resp, action, thread_id, "")
            ids = await self.list_checkpoints(thread_id, limit=1)
            if not ids:
                return None
            checkpoint_id = ids[0]
        validate_checkpoint_id(checkpoint_id, thread_id)
        path = f"{self._t(thread_id)}/checkpoints/{segment(checkpoint_id)}"
        action = "load a checkpoint"
        resp = await self._request("GET", path, action=action)
        if self._protocol_not_found(resp):
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        if resp.status_code == 404:
            why = _NOT_PROTOCOL_404
            raise self._bad(resp, action, why, thread_id, checkpoint_id)
        if resp.status_code != 200:
            raise self._fail(resp, action, thread_id, checkpoint_id)
        return self._parse(resp, action, thread_id, checkpoint_id)

    async def _list(self, thread_id: str, limit: int | None) -> list[Any]:
        path = self._t(thread_id) + "/checkpoints"
        # no limit is asked for as the largest one: a server's default (10 on ours and tulip's)
        # must never cut a listing the caller asked to have whole
        params = {"limit": _ALL if limit is None else limit}
        action = "list checkpoints"
        resp = await self._request("GET", path, action=action, params=params)
        if self._protocol_not_found(resp):
            return []  # a plain server's "no such thread"
        if resp.status_code == 404:
            raise self._bad(resp, action, _NOT_PROTOCOL_404, thread_id)
        if resp.status_code != 200:
            raise self._fail(resp, action, thread_id)
        data = _loads(resp.content)
        if isinstance(data, dict):  # wrapped: {"checkpoints": [...]} (or {"data": [...]})
            data = data["checkpoints"] if "checkpoints" in data else data.get("data", _INVALID)
        if not isinstance(data, list):
            raise self._bad(resp, action, "not a listing (a list of checkpoint ids, bare or under 'checkpoints')")
        if not all(
            isinstance(e, str) or (isinstance(e, dict) and isinstance(e.get("checkpoint_id"), str)) for e in data
        ):
            raise self._bad(resp, action, "a listing entry is neither an id nor an object with a checkpoint_id")
        return data if limit is None else data[:limit]

    @_bounded
    async def list_checkpoints(self, thread_id: str, limit: int | None = 10) -> list[str]:
        """Ids straight from the listing (a plain server may list nothing more than ids)."""
        return [e if isinstance(e, str) else str(e["checkpoint_id"]) for e in await self._list(thread_id, limit)]

    @_bounded
    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        entries = await self._list(thread_id, limit)
        if all(isinstance(e, dict) and "created_at" in e for e in entries):
            return [
                CheckpointInfo(
                    str(e["checkpoint_id"]), thread_id, parse_datetime(e["created_at"]), dict(e.get("metadata") or {})
                )
                for e in entries
            ]
        out = []  # a plain server listed ids only: read each checkpoint's envelope
        for entry in entries:
            ckpt = await self.load_checkpoint(
                thread_id, entry if isinstance(entry, str) else str(entry["checkpoint_id"])
            )
            if ckpt is not None:
                out.append(ckpt.info)
        return out

    async def _checkpoint_info(self, thread_id: str, checkpoint_id: str | None) -> CheckpointInfo | None:
        """One checkpoint's info from one request (no listing of the whole thread)."""
        try:
            ckpt = await self.load_checkpoint(thread_id, checkpoint_id)
        except CheckpointNotFound:
            return None
        return ckpt.info if ckpt else None

    @_bounded
    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        path = self._t(thread_id) + "/checkpoints"
        if checkpoint_id is not None:
            path += "/" + segment(validate_checkpoint_id(checkpoint_id, thread_id))
        resp = await self._request("DELETE", path, action="delete")
        if self._protocol_not_found(resp):
            return False
        if resp.status_code == 404:
            why = _NOT_PROTOCOL_404
            raise self._bad(resp, "delete", why, thread_id, checkpoint_id)
        if not 200 <= resp.status_code < 300:
            raise self._fail(resp, "delete", thread_id, checkpoint_id)
        if resp.status_code == 204 and not resp.content:
            return True
        deleted = _loads(resp.content)
        if not isinstance(deleted, dict) or not isinstance(deleted.get("deleted"), bool):
            why = 'expected the protocol\'s answer {"deleted": true}'
            raise self._bad(resp, "delete", why, thread_id, checkpoint_id)
        return bool(deleted["deleted"])

    @_bounded
    async def health_check(self) -> bool:
        """Whether ``GET /health`` answers below 400 (a probe: never raises for an outage)."""
        try:
            resp = await self._request("GET", "/health", action="check health")
        except BackendUnavailable:
            return False
        return bool(resp.status_code < 400)

    async def close(self) -> None:
        clients = list(self._clients.items())
        self._clients.clear()
        current = asyncio.get_running_loop()
        for loop, client in clients:
            if loop is current:
                await client.aclose()

    async def __aenter__(self) -> HTTPCheckpointer:
        await self.discover()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- capability-gated operations (tulip_nb extensions) ------------------------------------
    def _fields(self, resp: Any, action: str, thread_id: str | None, *keys: str) -> dict[str, Any]:
        """A 2xx JSON object that carries ``keys`` (an extension's answer)."""
        data = self._object(resp, action, thread_id)
        missing = [k for k in keys if k not in data]
        if missing:
            raise self._bad(resp, action, f"no {', '.join(map(repr, missing))} in the answer", thread_id)
        return data

    async def _get_json(
        self, path: str, action: str, thread_id: str | None = None, *, keys: tuple[str, ...] = (), **params: Any
    ) -> dict[str, Any]:
        """GET ``path`` as a JSON object carrying ``keys``; a ``None`` parameter is left out
        (``limit=None``: no limit)."""
        params = {k: v for k, v in params.items() if v is not None}
        resp = await self._request("GET", path, action=action, params=params)
        if resp.status_code != 200:
            raise self._fail(resp, action, thread_id)
        return self._fields(resp, action, thread_id, *keys)

    async def _post_json(
        self, path: str, action: str, payload: dict[str, Any], thread_id: str | None = None, *, keys: tuple[str, ...]
    ) -> dict[str, Any]:
        resp = await self._request(
            "POST", path, action=action, content=orjson.dumps(payload), headers={"content-type": "application/json"}
        )
        if not 200 <= resp.status_code < 300:
            raise self._fail(resp, action, thread_id)
        return self._fields(resp, action, thread_id, *keys)

    @_bounded
    async def list_threads(self, limit: int | None = 100, pattern: str = "*") -> list[str]:
        await self._gate("list_threads", "list_threads")
        data = await self._get_json("/threads", "list threads", keys=("threads",), limit=limit, pattern=pattern)
        return [str(t) for t in data["threads"]]

    @_bounded
    async def list_with_metadata(self, limit: int | None = 100) -> list[dict[str, Any]]:
        await self._gate("list_with_metadata", "list_with_metadata")
        data = await self._get_json("/threads-with-metadata", "list threads", keys=("threads",), limit=limit)
        return list(data["threads"])

    @_bounded
    async def get_metadata(self, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any] | None:
        await self._gate("metadata_query", "get_metadata")
        params = {"checkpoint_id": checkpoint_id} if checkpoint_id is not None else {}
        data = await self._get_json(
            self._t(thread_id) + "/metadata", "read metadata", thread_id, keys=("metadata",), **params
        )
        meta = data.get("metadata")
        return dict(meta) if isinstance(meta, dict) else None

    @_bounded
    async def query_by_metadata(self, key: str, value: Any, limit: int | None = 100) -> list[dict[str, Any]]:
        await self._gate("metadata_query", "query_by_metadata")
        data = await self._get_json(
            "/metadata-query",
            "query metadata",
            keys=("checkpoints",),
            key=key,
            value=orjson.dumps(value).decode(),
            limit=limit,
        )
        return list(data["checkpoints"])

    @_bounded
    async def search(self, query: str, limit: int | None = 10) -> list[dict[str, Any]]:
        await self._gate("search", "search")
        return list((await self._get_json("/search", "search", keys=("hits",), q=query, limit=limit))["hits"])

    @_bounded
    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        await self._gate("branching", "copy_thread")
        validate_thread_id(dest_thread_id)
        data = await self._post_json(
            self._t(source_thread_id) + "/copy",
            "copy a thread",
            {"dest_thread_id": dest_thread_id},
            source_thread_id,
            keys=("copied",),
        )
        return bool(data["copied"])

    @_bounded
    async def vacuum(self, older_than_days: float = 30) -> int:
        await self._gate("vacuum", "vacuum")
        data = await self._post_json("/vacuum", "vacuum", {"older_than_days": older_than_days}, keys=("removed",))
        return int(data["removed"])
