"""Long-term memory: facts an agent learns in one thread, recalled in the next.

A checkpoint remembers *one* conversation. :class:`LLMMemoryManager` gives an agent a memory that
spans them, on any :class:`~tulip_nb.memory.store.BaseStore`:

- **after a turn** it asks a model, in one call, which durable facts the turn established
  ("cust-4821 prefers store credit") and stores each under ``namespace`` (same fact, same key: a
  repeat bumps the item's version instead of piling up copies);
- **before a turn** it searches the store with the user's message and shows the model the facts
  it found, as one system message placed just before that user message. The saved thread is not
  changed (the full history is immutable; the model sees a view), and every recall is recorded as
  an event in ``state.metadata[MEMORY_EVENTS_KEY]`` — query, method, what was found, where it was
  shown — so a notebook can show what the model was reminded of (:func:`recall_events`,
  :func:`model_view_with_memory`).

It is a conversation manager (it can wrap another one, e.g. a compactor, with ``inner=``) and a
hook (the extraction runs on the agent's ``on_iteration`` event once the turn is over and saved)::

    from tulip_nb.agent import Agent
    from tulip_nb.memory.llm_memory import LLMMemoryManager
    from tulip_nb.memory.store import InMemoryStore

    memory = LLMMemoryManager(InMemoryStore(), model=extractor_model, namespace=("acme", "cust-4821"))
    agent = Agent(model=model, conversation_manager=memory, hooks=[memory])

**Recall method.** With a store that supports ``search`` the recall is its ranked full-text search.
Give ``embedder=`` (or use a store with only ``semantic_search``) to recall by cosine similarity
instead. :class:`HashingEmbedder` is the offline default: deterministic hashed word and
character-trigram features, no download, no network. It is **lexical, not semantic**: it matches
shared words and spellings ("refund" ~ "refunds"), never paraphrases ("money back"). For semantic
recall plug in a real embedding model through the :class:`Embedder` protocol.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from tulip_nb.core import Message
from tulip_nb.core.calls import model_call_count, model_call_index
from tulip_nb.core.errors import UserError
from tulip_nb.core.keys import MEMORY_EVENTS_KEY as MEMORY_EVENTS_KEY
from tulip_nb.core.keys import MEMORY_MARK
from tulip_nb.memory.conversation.base import ConversationManager
from tulip_nb.memory.conversation.events import model_view
from tulip_nb.memory.store import BaseStore, StoreItem
from tulip_nb.memory.store.base import validate_namespace
from tulip_nb.memory.store.text import STOP_WORDS, stem, tokens

if TYPE_CHECKING:
    from tulip_nb.core.state import AgentState
    from tulip_nb.models import Model

__all__ = [
    "EXTRACTION_PROMPT",
    "Embedder",
    "HashingEmbedder",
    "LLMMemoryManager",
    "model_view_with_memory",
    "parse_facts",
    "recall_events",
]

log = logging.getLogger(__name__)

EXTRACTION_PROMPT = """You maintain an assistant's long-term memory.
Read the conversation below and list the durable facts worth remembering in future, unrelated
conversations: stable preferences, decisions, identifiers, policies, commitments. Skip small talk,
one-off details and anything already obvious. Each fact must stand alone (name who or what it is
about) and be one short sentence.
Answer with JSON only: {"facts": ["...", "..."]} (an empty list when there is nothing to keep)."""


# -- embedders -----------------------------------------------------------------------------------
@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dimension`` floats (one vector per text, same order)."""

    dimension: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashingEmbedder:
    """An offline, deterministic, **lexical** embedder (no model, no download, no network).

    Each text becomes the L2-normalised sum of signed hashed features: its stemmed non-stop words
    (weight 1) and the character trigrams of each word (weight 0.5, so "refund" and "refunds" stay
    close). Hashes are BLAKE2b, so a vector is the same in every process and on every machine —
    vectors stored today match queries tomorrow. Cosine similarity then measures shared words and
    spellings, not meaning: use a real embedding model for paraphrases.

    >>> e = HashingEmbedder(dimension=64)
    >>> len(e.embed_sync(["store credit"])[0])
    64
    """

    def __init__(self, dimension: int = 256) -> None:
        if dimension < 8:
            raise UserError(f"dimension must be at least 8, got {dimension}")
        self.dimension = dimension

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimension={self.dimension})"

    def _add(self, vec: list[float], feature: str, weight: float) -> None:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        h = int.from_bytes(digest, "little")
        vec[h % self.dimension] += weight if (h >> 63) & 1 else -weight

    def embed_one(self, text: str) -> list[float]:
        vec = [0.0] * self.dimension
        for word in tokens(text):
            if word in STOP_WORDS:
                continue
            self._add(vec, "w:" + stem(word), 1.0)
            padded = f"<{word}>"
            for i in range(len(padded) - 2):
                self._add(vec, "c:" + padded[i : i + 3], 0.5)
        norm = math.sqrt(sum(x * x for x in vec))
        if not norm:  # no usable words: a fixed unit vector, so the store still accepts it
            vec[0] = 1.0
            return vec
        return [x / norm for x in vec]

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_sync(texts)


# -- facts -----------------------------------------------------------------------------------------
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


def parse_facts(text: str | None) -> list[str]:
    """The facts in a model's extraction answer: ``{"facts": [...]}``, a JSON list, or bullets."""
    if not text or not text.strip():
        return []
    raw = _FENCE.sub("", text.strip())
    data: Any = None
    spans = sorted((raw.find(o), o, c) for o, c in (("{", "}"), ("[", "]")) if o in raw)
    for candidate in (raw, *(raw[start : raw.rfind(c) + 1] for start, _, c in spans)):
        try:
            data = orjson.loads(candidate)
            break
        except orjson.JSONDecodeError:
            continue
    if isinstance(data, dict):
        data = data.get("facts", [])
    if isinstance(data, list):
        facts = [f.get("content") if isinstance(f, dict) else f for f in data]
        return _clean(f for f in facts if isinstance(f, str))
    bullets = [line.lstrip("-*• \t") for line in raw.splitlines() if line.lstrip().startswith(("-", "*", "•"))]
    return _clean(bullets)


def _clean(facts: Any) -> list[str]:
    out: dict[str, str] = {}
    for fact in facts:
        text = " ".join(fact.split())
        if text:
            out.setdefault(text.lower(), text)
    return list(out.values())


def fact_key(fact: str) -> str:
    """The store key of a fact: the same fact (ignoring case and spacing) always gets the same key."""
    return "fact-" + hashlib.sha256(" ".join(fact.lower().split()).encode()).hexdigest()[:16]


def _content(item: StoreItem) -> str:
    value = item.value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _last_user(messages: Sequence[Message]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and not m.metadata.get(MEMORY_MARK):
            return i
    return None


def _transcript(messages: Sequence[Message], limit: int = 2000) -> str:
    lines = []
    for m in messages:
        if m.metadata.get(MEMORY_MARK) or m.role == "system":
            continue
        if m.role == "tool":
            text = f"[tool {m.name or ''} result] {m.content or ''}"
        elif m.tool_calls:
            calls = ", ".join(f"{c.name}({orjson.dumps(c.arguments).decode()})" for c in m.tool_calls)
            text = f"{m.content or ''} [calls {calls}]".strip()
        else:
            text = m.content or ""
        if text:
            lines.append(f"{m.role}: {text[:limit]}")
    return "\n".join(lines)


# -- the manager -----------------------------------------------------------------------------------
class LLMMemoryManager(ConversationManager):
    """Long-term memory over a store; see the module docstring.

    ``store`` is required (any :class:`BaseStore`); ``model`` extracts facts (a Model or
    ``"openai:<model>"``); ``namespace`` is where facts live (shared by every thread that should
    share memory; with :class:`PgMemory` its first element is the tenant); ``inner`` is the manager
    whose view memory is added to (default: the full history); ``recall_limit`` caps the facts
    shown; ``min_score`` drops weaker embedding hits; ``extraction_prompt`` replaces the default.
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        model: Model | str,
        namespace: Sequence[str] = ("tulip_memory",),
        inner: ConversationManager | None = None,
        embedder: Embedder | None = None,
        recall_limit: int = 5,
        min_score: float = 0.2,
        extraction_prompt: str = EXTRACTION_PROMPT,
    ) -> None:
        from tulip_nb.models import resolve_model

        if not isinstance(store, BaseStore):
            raise UserError(f"store must be a BaseStore (e.g. InMemoryStore()), got {type(store).__name__}")
        caps = store.capabilities
        if embedder is None and not caps.search and caps.semantic_search:
            embedder = HashingEmbedder(caps.embedding_dimension or 256)
        if embedder is not None:
            if not caps.semantic_search:
                raise UserError(f"{type(store).__name__} cannot store embeddings (capability 'semantic_search' is off)")
            if caps.embedding_dimension not in (None, embedder.dimension):
                raise UserError(
                    f"embedder makes {embedder.dimension}-dimensional vectors, "
                    f"the store holds {caps.embedding_dimension}"
                )
        self.store = store
        self.model = resolve_model(model)
        self.namespace = validate_namespace(tuple(namespace))
        self.inner = inner
        self.embedder = embedder
        self.recall_limit = recall_limit
        self.min_score = min_score
        self.extraction_prompt = extraction_prompt
        self._recall: tuple[tuple[int, int], dict[str, Any]] | None = None
        self._pending: tuple[list[Message], str | None] | None = None
        self.last_recall: dict[str, Any] | None = None
        """The newest recall event (also in the thread's metadata)."""
        self.last_extraction: dict[str, Any] | None = None
        """What the newest extraction stored: thread, checkpoint, facts and their keys."""
        self.errors: list[str] = []
        """Extraction failures (an extraction runs after the turn is saved and never fails it)."""

    def __repr__(self) -> str:
        return f"LLMMemoryManager(store={self.store!r}, namespace={self.namespace!r}, method={self.method!r})"

    @property
    def method(self) -> str:
        """How facts are recalled: ``"embedding"``, ``"search"`` or ``"recent"``."""
        if self.embedder is not None:
            return "embedding"
        return "search" if self.store.capabilities.search else "recent"

    # -- recall ---------------------------------------------------------------------------------
    async def recall(self, query: str, limit: int | None = None) -> list[StoreItem]:
        """The stored facts most relevant to ``query``, best first (``item.score`` set)."""
        limit = self.recall_limit if limit is None else limit
        if self.embedder is not None:
            [vector] = await self.embedder.embed([query])
            hits = await self.store.search_by_embedding(self.namespace, vector, limit=limit, threshold=self.min_score)
            return [h.item for h in hits]
        if self.store.capabilities.search:
            return await self.store.search(self.namespace, query=query, limit=limit)
        keys = await self.store.list_keys(self.namespace, limit=limit)
        items = [await self.store.get_item(self.namespace, k) for k in keys]
        return [i for i in items if i is not None]

    @staticmethod
    def render(items: Sequence[StoreItem]) -> str:
        """The memory message shown to the model for ``items``."""
        lines = "\n".join(f"- {_content(i)}" for i in items)
        return (
            "Long-term memory (facts recalled from earlier conversations; they may be out of date, "
            f"and the user's latest message wins where they disagree):\n{lines}"
        )

    async def _recall_for(self, messages: list[Message], state: AgentState | None) -> dict[str, Any] | None:
        at = _last_user(messages)
        if at is None or not (messages[at].content or "").strip():
            return None
        turn = (at, zlib.crc32(messages[at].json_bytes()))
        if self._recall is not None and self._recall[0] == turn:
            return self._recall[1]
        query = messages[at].content or ""
        items = await self.recall(query)
        event = {
            "v": 1,
            "manager": type(self).__name__,
            "kind": "recall",
            "iteration": state.iteration if state is not None else None,
            "call": model_call_count(messages),
            "n_messages": len(messages),
            "at": at,
            "query": query,
            "namespace": list(self.namespace),
            "method": self.method,
            "items": [{"key": i.key, "score": i.score, "content": _content(i)} for i in items],
            "message": self.render(items) if items else None,
        }
        self._recall = (turn, event)
        self.last_recall = event
        if state is not None:
            state.metadata.setdefault(MEMORY_EVENTS_KEY, []).append(event)
        return event

    @staticmethod
    def _inject(view: list[Message], event: dict[str, Any] | None, user: Message | None) -> list[Message]:
        if event is None or not event.get("message"):
            return view
        memory = Message(role="system", content=event["message"], metadata={MEMORY_MARK: True})
        # Just before the turn's user message (so the prefix before it stays cache-friendly).
        pos = next((i for i in range(len(view) - 1, -1, -1) if view[i] is user or view[i] == user), None)
        if pos is None:
            pos = 1 if view and view[0].role == "system" else 0
        return [*view[:pos], memory, *view[pos:]]

    # -- the conversation-manager contract -----------------------------------------------------
    def apply(self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None) -> list[Message]:
        """The inner view plus the memory already recalled for this turn (recalling is async: the
        sync path never queries the store)."""
        view = self.inner.apply(messages, tools=tools) if self.inner is not None else list(messages)
        at = _last_user(messages)
        cached = self._recall
        if at is None or cached is None or cached[0] != (at, zlib.crc32(messages[at].json_bytes())):
            return view
        return self._inject(view, cached[1], messages[at])

    async def aapply(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        state: AgentState | None = None,
    ) -> list[Message]:
        """The inner view plus recalled memory; the first call of a turn recalls and records it."""
        messages = list(messages)
        if self.inner is not None:
            view = await self.inner.aapply(messages, tools=tools, state=state)
        else:
            view = list(messages)
        event = await self._recall_for(messages, state)
        at = _last_user(messages)
        return self._inject(view, event, messages[at] if at is not None else None)

    def apply_management(self, agent: Any) -> None:
        """End of a turn: note what to learn from; :meth:`on_iteration` extracts it (async)."""
        if self.inner is not None:
            self.inner.apply_management(agent)
        self._pending = (list(agent.messages), None)

    def reduce_context(self, agent: Any, e: BaseException | None = None) -> None:
        if self.inner is not None:
            self.inner.reduce_context(agent, e)

    def get_state(self) -> dict[str, Any]:
        state = self.inner.get_state() if self.inner is not None else {}
        return {**state, "memory": {"v": 1, "namespace": list(self.namespace), "method": self.method}}

    def restore_from_session(self, state: dict[str, Any]) -> None:
        if self.inner is not None:
            self.inner.restore_from_session({k: v for k, v in (state or {}).items() if k != "memory"})
        self._recall = None
        self._pending = None

    def clone_for_spawn(self) -> LLMMemoryManager:
        return type(self)(
            self.store,
            model=self.model,
            namespace=self.namespace,
            inner=self.inner.clone_for_spawn() if self.inner is not None else None,
            embedder=self.embedder,
            recall_limit=self.recall_limit,
            min_score=self.min_score,
            extraction_prompt=self.extraction_prompt,
        )

    # -- extraction -----------------------------------------------------------------------------
    async def extract(self, messages: Sequence[Message]) -> list[str]:
        """One model call: the durable facts of ``messages`` (the turn's transcript)."""
        transcript = _transcript(messages)
        if not transcript:
            return []
        request = [Message.system(self.extraction_prompt), Message.user(f"Conversation:\n{transcript}")]
        response = await self.model.complete(request, [])
        return parse_facts(response.message.content)

    async def remember(
        self, messages: Sequence[Message], *, thread_id: str | None = None, checkpoint_id: str | None = None
    ) -> list[StoreItem]:
        """Extract the facts of the last turn of ``messages`` and store them; returns the items.

        The turn starts at the last user message. Each fact is stored under :func:`fact_key` with
        ``{"content": fact}`` and provenance metadata (thread, checkpoint) — a fact learnt again
        bumps its version and refreshes its provenance.
        """
        at = _last_user(messages)
        turn = list(messages[at:] if at is not None else messages)
        facts = await self.extract(turn)
        vectors = await self.embedder.embed(facts) if self.embedder is not None and facts else None
        stored = []
        for i, fact in enumerate(facts):
            key = fact_key(fact)
            value = {"content": fact}
            meta = {"source": type(self).__name__, "thread_id": thread_id, "checkpoint_id": checkpoint_id}
            if vectors is not None:
                await self.store.put_with_embedding(self.namespace, key, value, vectors[i], meta)
            else:
                await self.store.put(self.namespace, key, value, meta)
            item = await self.store.get_item(self.namespace, key)
            if item is not None:
                stored.append(item)
        self.last_extraction = {
            "thread_id": thread_id,
            "checkpoint_id": checkpoint_id,
            "facts": facts,
            "keys": [fact_key(f) for f in facts],
        }
        return stored

    async def on_iteration(self, event: Any) -> None:
        """Agent hook: once a turn is over (and saved), learn from it. Never fails the run: an
        error is logged and kept in :attr:`errors`."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            await self.remember(
                pending[0],
                thread_id=getattr(event, "thread_id", None),
                checkpoint_id=getattr(event, "checkpoint_id", None),
            )
        except Exception as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            log.warning("LLMMemoryManager: extraction failed: %s", e, exc_info=True)


# -- notebook helpers ------------------------------------------------------------------------------
def recall_events(state: AgentState) -> list[dict[str, Any]]:
    """The recall events recorded in ``state`` (oldest first)."""
    return list(state.metadata.get(MEMORY_EVENTS_KEY) or [])


def model_view_with_memory(state: AgentState, call: int | None = None) -> list[Message]:
    """What one model call of the thread saw, memory included
    (:func:`~tulip_nb.memory.conversation.events.model_view` plus the memory message of that call's
    turn, rebuilt from the recall events alone)."""
    view = model_view(state, call)
    n = len(state.messages) if call is None else model_call_index(state.messages, call)
    at = _last_user(state.messages[:n])
    event = next((e for e in reversed(recall_events(state)) if e.get("at") == at and e["n_messages"] <= n), None)
    return LLMMemoryManager._inject(view, event, state.messages[at] if at is not None else None)
