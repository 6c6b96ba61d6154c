"""checkpoint_app: serve any checkpointer over tulip's HTTP checkpoint protocol (an ASGI app).

tulip-agents' ``HTTPCheckpointer`` and ours both talk to it; so does ``curl``. Ids travel
percent-encoded as ONE path segment (``user%2F42`` is the thread ``user/42``), so routing is done
on the raw request path, before any ``%2F`` is decoded into a separator.

tulip's protocol (what tulip-agents' client uses)::

    POST   /threads/{tid}/checkpoints          body: envelope -> 201 {"checkpoint_id", ...}
    GET    /threads/{tid}/checkpoints?limit=N  -> {"checkpoints": [{"checkpoint_id", "created_at",
                                                   "metadata"}, ...]} newest first
    GET    /threads/{tid}/checkpoints/{cid}    -> the envelope (metadata before state)
    DELETE /threads/{tid}/checkpoints/{cid}    -> {"deleted": true} | 404
    DELETE /threads/{tid}/checkpoints          -> {"deleted": true} | 404
    GET    /health                             -> {"status": "ok"}

tulip_nb extensions (ignored by tulip; used by :class:`tulip_nb.memory.backends.HTTPCheckpointer`)::

    POST   /threads/{tid}/checkpoints  with If-Match: "<cid>" / If-None-Match: *   compare-and-swap
                                        (412 {"error": "CheckpointConflict", "actual": ...})
    GET    /threads/{tid}/latest        -> the latest envelope | 404 {"error": "ThreadNotFound"}
    GET    /threads/{tid}/metadata[?checkpoint_id=]      -> {"metadata": {...} | null}
    POST   /threads/{tid}/checkpoints  with X-Tulip-NB-Put: verbatim   put_checkpoint (id, created_at,
                                        metadata stored as sent: an import)
    POST   /threads/{tid}/copy          body {"dest_thread_id"} -> {"copied": true}
    GET    /threads?limit=&pattern=     -> {"threads": [...]}
    GET    /threads-with-metadata?limit=              -> {"threads": [{"thread_id", ...}]}
    GET    /search?q=&limit=            -> {"hits": [...]}
    GET    /metadata-query?key=&value=<json>&limit=   -> {"checkpoints": [...]}
    POST   /vacuum                      body {"older_than_days"} -> {"removed": n}
    GET    /capabilities                -> {"backend", "capabilities": [...], "extensions": 1}

Errors are JSON ``{"error": <tulip_nb error class>, "message", "thread_id", "checkpoint_id"}`` with
the class's own status (``http_status``, :func:`tulip_nb.core.errors.problem_from`, the same in the
AgentServer): 400 (invalid body; a path or query that is not UTF-8), 404 (not found), 409
(conflict), 412 (failed precondition), 422 (invalid thread id, or corrupt stored data), 501
(capability off) and 503 (the checkpointer's store is unavailable).

>>> from tulip_nb.memory.backends import FileCheckpointer
>>> app = checkpoint_app(FileCheckpointer("./threads"))   # then: uvicorn module:app
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import unquote

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tulip_nb.core import iso_offset, parse_datetime
from tulip_nb.core.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    TulipNBError,
    problem_from,
)
from tulip_nb.core.state import AgentState
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, CheckpointInfo
from tulip_nb.memory.envelope import encode_envelope
from tulip_nb.server._input import check_query, path_parts
from tulip_nb.server._schemas import HTTPProblem

__all__ = ["checkpoint_app"]

EXTENSIONS_VERSION = 1
_ENVELOPE_KEYS = frozenset(("checkpoint_id", "thread_id", "created_at", "metadata", "state"))


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), status, media_type="application/json")


def _error(status: int, error: str, message: str, **extra: Any) -> Response:
    return _json({"error": error, "message": message, **{k: v for k, v in extra.items() if v is not None}}, status)


def _from_exception(e: TulipNBError) -> Response:
    status, body = problem_from(e)  # the status is the error class's own (core.errors)
    return _json(body, status)


def _envelope_bytes(ckpt: Checkpoint) -> bytes:
    return encode_envelope(ckpt.checkpoint_id, ckpt.thread_id, ckpt.created_at, ckpt.state, ckpt.metadata, ckpt.extra)


def _info_json(info: CheckpointInfo) -> dict[str, Any]:
    return {
        "checkpoint_id": info.checkpoint_id,
        "thread_id": info.thread_id,
        "created_at": iso_offset(info.created_at),
        "metadata": info.metadata,
    }


def _limit(request: Request, default: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    value = int(raw)  # ValueError -> 400 below
    if value < 0:
        raise ValueError("limit must not be negative")
    return value


def _object(body: Any) -> dict[str, Any]:
    """A request body that must be a JSON object (ValueError -> 400 otherwise)."""
    if not isinstance(body, dict):
        raise ValueError(f"body must be a JSON object, got {type(body).__name__}")
    return body


def _precondition(request: Request) -> str | None:
    """``expected_parent`` from If-Match (``"<cid>"``) or If-None-Match: ``*`` (empty thread)."""
    if_match = request.headers.get("if-match")
    if if_match is not None:
        return unquote(if_match.strip().strip('"'))
    if request.headers.get("if-none-match", "").strip() == "*":
        return ""
    return None


def checkpoint_app(checkpointer: BaseCheckpointer, *, debug: bool = False) -> Starlette:
    """An ASGI app serving ``checkpointer`` over tulip's HTTP protocol (see the module docstring)."""

    async def dispatch(request: Request) -> Response:
        try:
            parts = path_parts(request.scope)
            check_query(request.scope)
        except HTTPProblem as p:
            return _json(p.body, p.status)
        try:
            return await _route(request, request.method, parts)
        except TulipNBError as e:
            return _from_exception(e)
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as e:
            return _error(400, "BadRequest", f"{type(e).__name__}: {e}")

    async def _route(request: Request, method: str, parts: list[str]) -> Response:
        cp = checkpointer
        match (method, parts):
            case ("GET", ["health"]):
                return _json({"status": "ok"})
            case ("GET", ["capabilities"]):
                caps = cp.capabilities.enabled()
                return _json({"backend": type(cp).__name__, "capabilities": caps, "extensions": EXTENSIONS_VERSION})
            case ("POST", ["threads", tid, "checkpoints"]):
                return await _save(request, tid)
            case ("GET", ["threads", tid, "checkpoints"]):
                infos = await cp.list_checkpoint_infos(tid, limit=_limit(request, 10))
                return _json({"checkpoints": [_info_json(i) for i in infos]})
            case ("GET", ["threads", tid, "checkpoints", cid]):
                ckpt = await cp.load_checkpoint(tid, cid)
                if ckpt is None:  # a checkpointer whose load_checkpoint returns None for missing
                    raise CheckpointNotFound("no such checkpoint", thread_id=tid, checkpoint_id=cid)
                return Response(_envelope_bytes(ckpt), media_type="application/json")
            case ("DELETE", ["threads", tid, "checkpoints", *rest]) if len(rest) <= 1:
                deleted = await cp.delete(tid, rest[0] if rest else None)
                if not deleted:
                    return _error(404, "CheckpointNotFound", "nothing to delete", thread_id=tid)
                return _json({"deleted": True})
            case ("GET", ["threads", tid, "latest"]):
                ckpt = await cp.load_checkpoint(tid)
                if ckpt is None:
                    return _error(404, "ThreadNotFound", "thread has no checkpoints", thread_id=tid)
                return Response(_envelope_bytes(ckpt), media_type="application/json")
            case ("GET", ["threads", tid, "metadata"]):
                meta = await cp.get_metadata(tid, request.query_params.get("checkpoint_id"))
                return _json({"metadata": meta})
            case ("POST", ["threads", tid, "copy"]):
                body = _object(orjson.loads(await request.body()))
                return _json({"copied": await cp.copy_thread(tid, str(body["dest_thread_id"]))})
            case ("GET", ["threads"]):
                pattern = request.query_params.get("pattern", "*")
                return _json({"threads": await cp.list_threads(limit=_limit(request, 100), pattern=pattern)})
            case ("GET", ["threads-with-metadata"]):
                return _json({"threads": await cp.list_with_metadata(limit=_limit(request, 100))})
            case ("GET", ["search"]):
                hits = await cp.search(request.query_params["q"], limit=_limit(request, 10))
                return _json({"hits": hits})
            case ("GET", ["metadata-query"]):
                q = request.query_params
                rows = await cp.query_by_metadata(q["key"], orjson.loads(q["value"]), limit=_limit(request, 100))
                return _json({"checkpoints": rows})
            case ("POST", ["vacuum"]):
                body = _object(orjson.loads(await request.body() or b"{}"))
                days = float(body.get("older_than_days", 30))
                if not math.isfinite(days):
                    raise ValueError("older_than_days must be finite")
                return _json({"removed": await cp.vacuum(older_than_days=days)})
        return _error(404, "NotFound", f"no route for {method} /{'/'.join(parts)}")

    async def _save(request: Request, tid: str) -> Response:
        body = orjson.loads(await request.body())
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object (a checkpoint envelope)")
        raw_state = body.get("state", body if "messages" in body else None)
        if not isinstance(raw_state, dict):
            raise ValueError("body has no 'state' object")
        state = AgentState.model_validate(raw_state)
        meta = body.get("metadata") or {}
        if not isinstance(meta, dict):
            raise ValueError("'metadata' must be an object")
        cid = body.get("checkpoint_id")
        if request.headers.get("x-tulip-nb-put") == "verbatim":  # an import: store as sent
            created = parse_datetime(body["created_at"]) if "created_at" in body else None
            if not cid or created is None:
                raise ValueError("a verbatim put needs 'checkpoint_id' and 'created_at'")
            extra = {k: v for k, v in body.items() if k not in _ENVELOPE_KEYS}
            await checkpointer.put_checkpoint(Checkpoint(str(cid), tid, created, state, meta, extra))
            return _json({"checkpoint_id": cid, "thread_id": tid}, 201)
        expected = _precondition(request)
        try:
            saved = await checkpointer.save(
                state, tid, checkpoint_id=str(cid) if cid else None, metadata=meta, expected_parent=expected
            )
        except CheckpointConflict as e:
            if expected is None:
                raise
            resp = _from_exception(e)
            resp.status_code = 412
            return resp
        return _json({"checkpoint_id": saved, "thread_id": tid}, 201)

    routes = [Route("/{path:path}", dispatch, methods=["GET", "POST", "DELETE"])]
    return Starlette(debug=debug, routes=routes)
