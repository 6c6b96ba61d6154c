"""``tulip-nb serve --app module:agent``: run an :class:`~tulip_nb.server.AgentServer` under uvicorn.

``--app`` names an Agent (or a function returning one) as ``package.module:attribute``; each worker
imports it and builds its own agent, so ``--workers N`` gives N processes. ``--checkpointer URL``
replaces the agent's checkpointer (every worker opens the same store; use PostgreSQL, Redis or a
directory to share threads across workers — runs racing on one thread get 409)::

    tulip-nb serve --app myexp:agent --checkpointer postgresql://postgres@127.0.0.1/test --workers 2

Keys: ``--api-key`` or (better: not visible in ``ps``) ``TULIP_NB_SERVER_API_KEY``; several keys
are comma-separated, each its own principal. Binding beyond loopback without a key is refused
unless ``--allow-unauthenticated`` (an open agent runs tools for anyone who can reach it).

Slow clients are cut off: a request's headers must arrive within ``--header-timeout`` seconds
(:class:`tulip_nb.server.running.SlowClientH11Protocol`; uvicorn itself has no such bound) and its
body within ``--body-timeout`` (``AgentServer(body_timeout=)``, 408).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import ipaddress
import os
import sys
from typing import Any, Literal

from tulip_nb.core.errors import UserError

_ENV_APP = "TULIP_NB_SERVE_APP"
_ENV_CP = "TULIP_NB_SERVE_CHECKPOINTER"
_ENV_LAYOUT = "TULIP_NB_SERVE_LAYOUT"
_ENV_BODY_TIMEOUT = "TULIP_NB_SERVE_BODY_TIMEOUT"
_KEY_ENV = "TULIP_NB_SERVER_API_KEY"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("serve", help="serve an agent over HTTP (AgentServer under uvicorn)")
    parser.add_argument("--app", required=True, help="the agent, as module:attribute (an Agent or a factory)")
    parser.add_argument("--checkpointer", default=None, help="checkpointer URL replacing the agent's own")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    parser.add_argument("--api-key", default=None, help=f"bearer key(s), comma-separated (default: ${_KEY_ENV})")
    parser.add_argument("--thread-layout", choices=("tulip", "plain"), default="tulip", help="storage ids of threads")
    parser.add_argument("--allow-unauthenticated", action="store_true", help="allow no key on a non-loopback host")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default: %(default)s)")
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds a client may take to send a request's headers; 0: no bound (default: %(default)s)",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        help="seconds a client may take to send a request's body (then 408); 0: no bound (default: %(default)s)",
    )
    parser.set_defaults(handler=run)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _takes_no_arguments(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def load_agent(spec: str) -> Any:
    """The agent ``module:attribute`` names (called first if it is a function)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"--app must look like module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(f"cannot import {module_name!r} for --app: {e}") from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise UserError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not hasattr(obj, "clone") and callable(obj) and _takes_no_arguments(obj):
        try:
            obj = obj()
        except Exception as e:
            raise UserError(f"--app factory {spec!r} failed: {type(e).__name__}: {e}") from None
    if not hasattr(obj, "clone") or not hasattr(obj, "iterate"):
        raise UserError(f"--app {spec!r} is a {type(obj).__name__}, not a tulip_nb Agent")
    return obj


def build_app() -> Any:
    """The uvicorn app factory each worker calls: settings come from the environment ``run`` set."""
    from tulip_nb.server import AgentServer

    agent = load_agent(os.environ[_ENV_APP])
    url = os.environ.get(_ENV_CP)
    checkpointer = None
    if url:
        from tulip_nb.memory.backends import checkpointer_from_url

        checkpointer = checkpointer_from_url(url)
        agent.checkpointer = checkpointer
    raw = os.environ.get(_ENV_LAYOUT, "tulip")
    layouts: dict[str, Literal["tulip", "plain"]] = {"tulip": "tulip", "plain": "plain"}
    if raw not in layouts:
        raise UserError(f"{_ENV_LAYOUT}={raw!r}: the thread layout is 'tulip' or 'plain'")
    layout = layouts[raw]
    body_timeout = float(os.environ.get(_ENV_BODY_TIMEOUT) or 30.0)
    return AgentServer(
        agent,
        checkpointer=checkpointer,
        thread_layout=layout,
        close_checkpointer=checkpointer is not None,
        body_timeout=body_timeout if body_timeout > 0 else None,
    )


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1, got {args.workers}")
    for flag, value in (("--header-timeout", args.header_timeout), ("--body-timeout", args.body_timeout)):
        if not value >= 0 or value == float("inf"):
            raise UserError(f"{flag} must be a finite number of seconds (0: no bound), got {value}")
    if args.api_key is not None:
        os.environ[_KEY_ENV] = args.api_key
    if not os.environ.get(_KEY_ENV, "").strip() and not _is_loopback(args.host) and not args.allow_unauthenticated:
        raise UserError(
            f"refusing to serve on {args.host} without an API key: set {_KEY_ENV} (or --api-key), "
            "or pass --allow-unauthenticated if a proxy in front authenticates"
        )
    load_agent(args.app)  # fail here, with one line, rather than in every worker
    if args.checkpointer:
        from tulip_nb.memory.backends import checkpointer_from_url

        checkpointer_from_url(args.checkpointer)  # validate the URL (nothing is opened yet)
    try:
        import uvicorn

        from tulip_nb.server.running import HEADER_TIMEOUT_ENV, SlowClientH11Protocol
    except ImportError:
        raise UserError("serving needs uvicorn: pip install 'tulip_nb[server]'") from None
    os.environ[_ENV_APP] = args.app
    os.environ[_ENV_LAYOUT] = args.thread_layout
    os.environ[HEADER_TIMEOUT_ENV] = repr(args.header_timeout)
    os.environ[_ENV_BODY_TIMEOUT] = repr(args.body_timeout)
    if args.checkpointer:
        os.environ[_ENV_CP] = args.checkpointer
    else:
        os.environ.pop(_ENV_CP, None)
    uvicorn.run(
        "tulip_nb._cli.serve:build_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        # uvicorn's h11 protocol plus a bound on slow request headers (the app bounds the body)
        http=SlowClientH11Protocol,
        timeout_graceful_shutdown=10,
        # a worker busy with a long turn on a loaded machine must not be killed as "unhealthy"
        # (uvicorn's default 5 s health check restarts it and drops its open connections)
        timeout_worker_healthcheck=60,
        # longer than clients' keep-alive expiry (httpx: 5 s), so a client never reuses a
        # connection the server is closing at that very moment (a ReadError on a busy server)
        timeout_keep_alive=30,
    )
    return 0
