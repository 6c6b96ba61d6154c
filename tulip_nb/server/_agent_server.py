"""AgentServer: an agent as an HTTP service that several workers can share (an ASGI app).

A research team runs an experiment agent as a service: clients post prompts to a thread, watch a
run stream, and reload a thread's history on page load straight from the checkpointer (seed 000).
Several uvicorn workers may serve the same threads when they share a checkpointer (PostgreSQL,
Redis, files): every run saves with compare-and-swap on the checkpoint it started from, so when two
runs race on one thread the second is refused with **409** — never silently lost.

Routes (JSON in and out; ``Authorization: Bearer <key>`` on all but ``/health`` when keys are set)::

    GET    /health                 -> {"status": "ok"}
    POST   /invoke   {"prompt", "thread_id"?, "metadata"?}
                                   -> {"message", "success", "stop_reason", "iterations",
                                       "tool_calls", "duration_ms", "thread_id", "checkpoint_id",
                                       "interrupt"}
    POST   /stream   (same body)   -> Server-Sent Events (think, tool_start, tool_complete, done,
                                       error; ends with data: [DONE]); see _sse.py
    POST   /resume   {"thread_id", "response"?, "metadata"?}
                                   -> like /invoke; SSE when the request accepts text/event-stream
    GET    /threads/{id}           -> {"thread_id", "iteration", "messages", "tool_executions",
                                       "metadata", "checkpoint_id"}   (404 if no such thread)
    DELETE /threads/{id}           -> {"thread_id", "deleted": bool}
    ...    /threads/{id}/checkpoints..., /threads, /search, /capabilities: the HTTP checkpoint
           protocol of checkpoint_app, over the caller's own threads only

Errors are ``{"error": <name>, "message": ...}`` with 400 (bad JSON; a path or query that is
not UTF-8), 401 (key), 404, 408 (a body slower than ``body_timeout``), 409 (thread busy or changed
by another run), 413 (body too large), 422 (a field, named in ``field``), 502 (model failed), 503
(storage down), 500 (anything else: a ``correlation_id`` to find the log line; never a stack
trace). ``Server-Timing: checkpoint;dur=..., run;dur=...`` on run responses says how much of a run
was spent in the checkpointer.

Threads are scoped per principal (see :mod:`tulip_nb.server._auth`): by default stored as tulip's
server stores them, ``"<principal>:<thread_id>"``, so a tulip server's threads are readable here.

>>> from tulip_nb.agent import Agent
>>> from tulip_nb.models import ScriptedModel, text
>>> server = AgentServer(Agent(ScriptedModel([text("hi")], repeat_last=True)), api_key="secret")
>>> # uvicorn.run(server, host="127.0.0.1", port=8000)   or: tulip-nb serve --app mod:agent
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tulip_nb.agent import AgentResult, Step
from tulip_nb.core.errors import (
    BackendUnavailable,
    CapabilityNotSupported,
    CheckpointConflict,
    CheckpointCorrupt,
    InvalidThreadId,
    TulipNBError,
    UserError,
    problem_from,
)
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.models import ModelError
from tulip_nb.server import _sse
from tulip_nb.server._auth import ApiKeys, Layout, storage_id, storage_prefix
from tulip_nb.server._input import bounded_receive, check_query, path_parts
from tulip_nb.server._schemas import (
    HTTPProblem,
    InvokeRequest,
    ResumeRequest,
    check_thread_id,
    parse_model,
    read_limited,
)
from tulip_nb.server._scoped import ScopedCheckpointer

__all__ = ["AgentServer"]

log = logging.getLogger("tulip_nb.server")

_cp_time: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("tulip_nb_cp_time", default=None)


class _TimedCheckpointer:
    """The server's checkpointer, adding the time of each load/save to the current request's total."""

    def __init__(self, inner: BaseCheckpointer) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            acc = _cp_time.get()
            if acc is not None:
                acc[0] += time.perf_counter() - t0

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Any:
        with self._timed():
            return await self.inner.load_checkpoint(thread_id, checkpoint_id)

    async def save(self, *args: Any, **kwargs: Any) -> str:
        with self._timed():
            return await self.inner.save(*args, **kwargs)


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS)
    return Response(body, status, headers=headers, media_type="application/json")


def _problem_for(e: BaseException, thread_id: str | None) -> HTTPProblem:
    """The response for an exception of a run; the storage id never leaves the server.

    The status is the error class's own (:func:`~tulip_nb.core.errors.problem_from`); what this
    server adds is its wording: a conflict says to retry, an invalid id names the field, an outage
    and a model failure hide their details, anything unexpected gets a ``correlation_id``.
    """
    where = {"thread_id": thread_id} if thread_id is not None else {}
    if isinstance(e, HTTPProblem):
        return e
    if (
        not isinstance(e, TulipNBError)
        or isinstance(e, CheckpointCorrupt)
        or (
            type(e).http_status >= 500 and not (isinstance(e, BackendUnavailable | CapabilityNotSupported | ModelError))
        )
    ):
        correlation_id = uuid.uuid4().hex
        log.error("run failed (correlation_id=%s)", correlation_id, exc_info=e)
        name = type(e).__name__ if isinstance(e, TulipNBError) else "InternalError"
        return HTTPProblem(500, name, "internal error", correlation_id=correlation_id, **where)
    status, body = problem_from(e)
    name, message = body["error"], body["message"]
    if isinstance(e, CheckpointConflict):
        message = "the thread was changed by another run meanwhile; this run saved nothing — retry"
    elif isinstance(e, InvalidThreadId):
        return HTTPProblem(status, "ValidationError", e.message, field="thread_id")
    elif isinstance(e, BackendUnavailable):
        name, message = "BackendUnavailable", "the checkpoint store is unavailable"
    elif isinstance(e, CapabilityNotSupported):
        return HTTPProblem(status, name, message)
    elif isinstance(e, ModelError):
        message = "the model call failed"
    return HTTPProblem(status, name, message, **where)


class AgentServer:
    """An agent as an ASGI app; see the module docstring.

    ``api_key``: a key, a list of keys (one principal each) or None (then ``TULIP_NB_SERVER_API_KEY``
    if set — comma-separated for several — else no auth, every caller ``anon``). ``checkpointer``:
    where threads live (default: the agent's; an agent without one gets an in-process
    ``MemoryCheckpointer``). ``thread_layout``: ``"tulip"`` (``"<principal>:<id>"``) or ``"plain"``.
    ``strict_concurrency``: runs save with compare-and-swap (409 on a race). ``max_body_bytes``
    bounds run requests, ``max_checkpoint_bytes`` the mounted checkpoint routes.
    ``close_checkpointer``: close it at shutdown (``tulip-nb serve`` owns the one it builds).
    ``body_timeout``: seconds a request may take to send its whole body (408 and the connection
    closed after that; None: no bound) — uvicorn bounds neither the body nor each read of it.
    """

    def __init__(
        self,
        agent: Any,
        api_key: str | Sequence[str] | None = None,
        *,
        checkpointer: BaseCheckpointer | None = None,
        thread_layout: Layout = "tulip",
        strict_concurrency: bool = True,
        max_body_bytes: int = 1 << 20,
        max_checkpoint_bytes: int = 64 << 20,
        mount_checkpoints: bool = True,
        close_checkpointer: bool = False,
        body_timeout: float | None = 30.0,
    ) -> None:
        if not callable(getattr(agent, "clone", None)) or not callable(getattr(agent, "iterate", None)):
            raise UserError(f"AgentServer needs a tulip_nb Agent, got {type(agent).__name__}")
        if thread_layout not in ("tulip", "plain"):
            raise UserError(f"thread_layout must be 'tulip' or 'plain', got {thread_layout!r}")
        self.keys = ApiKeys(api_key)
        if thread_layout == "plain" and len(self.keys) > 1:
            raise UserError("thread_layout='plain' would mix the threads of several API keys; use 'tulip'")
        if checkpointer is None:
            checkpointer = agent.checkpointer
        if checkpointer is None:
            from tulip_nb.memory.backends import MemoryCheckpointer

            checkpointer = MemoryCheckpointer()
        self.agent = agent
        self.checkpointer: BaseCheckpointer = checkpointer
        self.thread_layout: Layout = thread_layout
        self.strict_concurrency = strict_concurrency
        self.max_body_bytes = max_body_bytes
        self.max_checkpoint_bytes = max_checkpoint_bytes
        self.mount_checkpoints = mount_checkpoints
        self.close_checkpointer = close_checkpointer
        if body_timeout is not None and not body_timeout > 0:
            raise UserError(f"body_timeout must be a positive number of seconds or None, got {body_timeout!r}")
        self.body_timeout = body_timeout
        self.drain_seconds = 10.0
        self._timed = _TimedCheckpointer(checkpointer)
        self._running: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._checkpoint_apps: dict[str, ASGIApp] = {}

    # -- ASGI ------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise RuntimeError(f"AgentServer serves HTTP only, not {scope['type']!r}")
        receive = bounded_receive(receive, self.body_timeout)
        request = Request(scope, receive)
        try:
            response = await self._handle(request, scope, receive, send)
        except HTTPProblem as p:
            headers = {"WWW-Authenticate": "Bearer"} if p.status == 401 else None
            if p.status == 408:  # the rest of a slow body may still be on its way: end the connection
                headers = {"Connection": "close"}
            response = _json(p.body, p.status, headers)
        except Exception as e:  # never a stack trace to the client
            problem = _problem_for(e, None)
            response = _json(problem.body, problem.status)
        if response is not None:
            await response(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        """Let streamed runs whose client left finish (up to ``drain_seconds``), then release resources."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self.drain_seconds)
            for task in pending:
                task.cancel()
        if self.close_checkpointer:
            await self.checkpointer.close()

    async def _handle(self, request: Request, scope: Scope, receive: Receive, send: Send) -> Response | None:
        parts = path_parts(scope)
        check_query(scope)
        method = request.method
        if parts == ["health"] and method in ("GET", "HEAD"):
            return _json({"status": "ok"})
        principal = self.keys.principal_for(request.headers.get("authorization"))
        if principal is None:
            raise HTTPProblem(401, "Unauthorized", "missing or invalid bearer token")
        match (method, parts):
            case ("POST", ["invoke"]):
                return await self._invoke(request, principal)
            case ("POST", ["stream"]):
                return await self._stream(request, principal)
            case ("POST", ["resume"]):
                return await self._resume(request, principal)
            case ("GET", ["threads", tid]):
                return await self._get_thread(principal, check_thread_id(tid))
            case ("DELETE", ["threads", tid]):
                return await self._delete_thread(principal, check_thread_id(tid))
        if not self.mount_checkpoints:
            raise HTTPProblem(404, "NotFound", f"no route for {method} /{'/'.join(parts)}")
        await self._delegate(request, principal, scope, receive, send)
        return None

    # -- helpers ---------------------------------------------------------------------------------
    async def _body(self, request: Request, limit: int) -> bytes:
        return await read_limited(request.stream(), request.headers.get("content-length"), limit)

    def _sid(self, principal: str, thread_id: str | None) -> str | None:
        return storage_id(principal, thread_id, self.thread_layout) if thread_id is not None else None

    @contextlib.contextmanager
    def _claim(self, sid: str | None, thread_id: str | None) -> Iterator[None]:
        """Refuse (409) a run on a thread this worker is already running; CAS covers other workers."""
        if sid is None:
            yield
            return
        if sid in self._running:
            raise HTTPProblem(
                409, "ThreadBusy", "a run on this thread is in progress; retry later", thread_id=thread_id
            )
        self._running.add(sid)
        try:
            yield
        finally:
            self._running.discard(sid)

    def _twin(self, hooks: Sequence[Any] = ()) -> Any:
        twin = self.agent.clone(hooks=hooks, strict_concurrency=self.strict_concurrency)
        twin.checkpointer = self._timed
        return twin

    @staticmethod
    def _timing(cp_seconds: float, run_seconds: float) -> dict[str, str]:
        return {"Server-Timing": f"checkpoint;dur={cp_seconds * 1000:.3f}, run;dur={run_seconds * 1000:.3f}"}

    # -- run routes ------------------------------------------------------------------------------
    async def _invoke(self, request: Request, principal: str) -> Response:
        body = parse_model(InvokeRequest, await self._body(request, self.max_body_bytes))
        sid = self._sid(principal, body.thread_id)
        return await self._run_json(
            sid, body.thread_id, lambda twin: twin.run(body.prompt, thread_id=sid, metadata=dict(body.metadata))
        )

    async def _run_json(
        self, sid: str | None, thread_id: str | None, start: Callable[[Any], Awaitable[AgentResult]]
    ) -> Response:
        acc = [0.0]
        token = _cp_time.set(acc)
        t0 = time.perf_counter()
        try:
            with self._claim(sid, thread_id):
                try:
                    result = await start(self._twin())
                except Exception as e:
                    raise _problem_for(e, thread_id) from None
        finally:
            _cp_time.reset(token)
        elapsed = time.perf_counter() - t0
        data = {
            "message": result.text,
            "success": result.stop_reason in _sse.SUCCESS_REASONS,
            "stop_reason": result.stop_reason,
            "iterations": result.iterations,
            "tool_calls": len(result.tool_calls),
            "duration_ms": round(elapsed * 1000, 3),
            "thread_id": thread_id,
            "checkpoint_id": result.checkpoint_id,
            "interrupt": result.interrupt.to_dict() if result.interrupt is not None else None,
        }
        return _json(data, headers=self._timing(acc[0], elapsed))

    async def _stream(self, request: Request, principal: str) -> Response:
        body = parse_model(InvokeRequest, await self._body(request, self.max_body_bytes))
        sid = self._sid(principal, body.thread_id)
        metadata = dict(body.metadata)
        return self._run_sse(
            sid, body.thread_id, lambda twin: twin.iterate(body.prompt, thread_id=sid, metadata=metadata)
        )

    async def _resume(self, request: Request, principal: str) -> Response:
        body = parse_model(ResumeRequest, await self._body(request, self.max_body_bytes))
        sid = self._sid(principal, body.thread_id)
        metadata = dict(body.metadata) or None
        if "text/event-stream" in request.headers.get("accept", ""):
            return self._run_sse(
                sid,
                body.thread_id,
                lambda twin: twin.iterate_resume(body.response, thread_id=sid, metadata=metadata),
            )
        return await self._run_json(
            sid, body.thread_id, lambda twin: twin.resume(body.response, thread_id=sid, metadata=metadata)
        )

    def _run_sse(
        self, sid: str | None, thread_id: str | None, start: Callable[[Any], AsyncGenerator[Step, None]]
    ) -> Response:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        claim = self._claim(sid, thread_id)
        claim.__enter__()

        async def produce() -> None:
            steps: list[Step] = []
            acc = [0.0]
            _cp_time.set(acc)  # this task's own context
            t0 = time.perf_counter()
            try:
                hook = _sse.StreamHook(queue)
                async with contextlib.aclosing(start(self._twin([hook]))) as run:
                    async for step in run:
                        steps.append(step)
                        hook.on_step(step)
                frame = _sse.done_frame(steps, thread_id=thread_id, duration_ms=(time.perf_counter() - t0) * 1000)
                queue.put_nowait(frame)
            except Exception as e:
                p = _problem_for(e, thread_id)
                queue.put_nowait({"type": "error", "status": p.status, **p.body})
            finally:
                claim.__exit__(None, None, None)
                queue.put_nowait(None)

        task = asyncio.get_running_loop().create_task(produce())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(_sse.frames(queue), media_type="text/event-stream", headers=headers)

    # -- thread routes ---------------------------------------------------------------------------
    async def _get_thread(self, principal: str, thread_id: str) -> Response:
        sid = storage_id(principal, thread_id, self.thread_layout)
        try:
            ckpt = await self.checkpointer.load_checkpoint(sid)
        except Exception as e:
            raise _problem_for(e, thread_id) from None
        if ckpt is None:
            raise HTTPProblem(404, "ThreadNotFound", "no such thread", thread_id=thread_id)
        state = ckpt.state
        data = {
            "thread_id": thread_id,
            "iteration": state.iteration,
            "messages": [orjson.Fragment(m.json_bytes()) for m in state.messages],
            "tool_executions": [t.model_dump(mode="json") for t in state.tool_executions],
            "metadata": state.metadata,
            "checkpoint_id": ckpt.checkpoint_id,
        }
        return _json(data)

    async def _delete_thread(self, principal: str, thread_id: str) -> Response:
        sid = storage_id(principal, thread_id, self.thread_layout)
        with self._claim(sid, thread_id):
            try:
                deleted = await self.checkpointer.delete(sid)
            except Exception as e:
                raise _problem_for(e, thread_id) from None
        return _json({"thread_id": thread_id, "deleted": bool(deleted)})

    # -- the checkpoint protocol, per principal ------------------------------------------------
    async def _delegate(self, request: Request, principal: str, scope: Scope, receive: Receive, send: Send) -> None:
        from tulip_nb.server._checkpoints import checkpoint_app

        app = self._checkpoint_apps.get(principal)
        if app is None:
            prefix = storage_prefix(principal, self.thread_layout)
            app = checkpoint_app(ScopedCheckpointer(self.checkpointer, prefix))
            self._checkpoint_apps[principal] = app
        body = await self._body(request, self.max_checkpoint_bytes)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await app(scope, replay, tracked)
        except Exception:
            if not started:
                raise
            log.exception("checkpoint route failed after its response started")
