"""The issue-26 workload: a 300-turn research thread, a save after every model call.

The offline research agent of ``scripts/storage_growth.py`` (a function ``ScriptedModel``: each turn
a user question, two or three ``fetch`` rounds with 1-3 kB results, an answer) runs once into a
recording checkpointer with ``checkpoint_every_n_iterations=1``. What it recorded, per save, is the
number of messages, the state's other fields (JSON) and the save metadata (``source`` "iteration"
inside a turn, "final" at its end, the run id and the iteration); the bench replays that sequence
into every store with message objects built for that store, so no store reuses another's
serialised JSON. The workload is fixed: the bench never shrinks it to fit a time budget.

>>> w = record(2)
>>> len(w.saves), w.saves[-1].metadata["source"], w.saves[-1].n == len(w.messages)
(7, 'final', True)
"""

from __future__ import annotations

import asyncio
import importlib.util
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from tulip_nb.core import AgentState, Message
from tulip_nb.memory.backends import MemoryCheckpointer

__all__ = ["TURNS", "Research", "Save", "record"]

TURNS = 300
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Save:
    """One save the agent made: how many messages its state held, its other fields, its metadata."""

    n: int
    rest: bytes
    metadata: dict[str, Any]

    def state(self, messages: list[Message], rest: AgentState | None = None) -> AgentState:
        """The saved state, with ``messages`` (the first :attr:`n` of the thread) as its messages.

        ``rest``: this save's other fields already parsed (:meth:`parse`), shared by the stores
        that make this save (a shallow copy each; nothing caches them by identity across stores).
        """
        state = (rest or self.parse()).model_copy()
        state.messages = messages
        return state

    def parse(self) -> AgentState:
        """The state's other fields, parsed (its messages empty)."""
        return AgentState.model_validate_json(self.rest)


@dataclass
class Research:
    """The recorded thread: its messages (JSON dicts, oldest first) and its saves, in order."""

    turns: int
    messages: list[dict[str, Any]]
    saves: list[Save]
    _pristine: list[Message] = field(default_factory=list, repr=False)
    _pristine_tulip: list[Any] = field(default_factory=list, repr=False)

    @property
    def json_bytes(self) -> int:
        """Bytes of the messages' JSON (a JSON array of them), the yardstick of every disk ratio."""
        return len(b"[" + b",".join(orjson.dumps(m) for m in self.messages) + b"]")

    def fresh_messages(self, n: int | None = None) -> list[Message]:
        """New ``Message`` objects for the first ``n`` messages: nothing serialised or cached yet.

        Each is a shallow copy (``model_copy``, ~3 µs; validating anew costs ~15x that) of a
        validated message that this object never hands out, so none of them was ever serialised:
        a copy has a new identity and an empty ``__dict__`` beyond the fields (checked here).
        """
        if not self._pristine:
            self._pristine.extend(Message.model_validate(d) for d in self.messages)
        got = [m.model_copy() for m in self._pristine[: len(self.messages) if n is None else n]]
        fields = Message.model_fields.keys()
        if got and not (got[-1].__dict__.keys() <= fields and self._pristine[0].__dict__.keys() <= fields):
            raise AssertionError("a pristine message carries a cache: fresh copies would not be fresh")
        return got

    def fresh_tulip_messages(self, n: int | None = None) -> list[Any]:
        """New tulip-agents ``Message`` objects for the first ``n`` messages (tulip caches nothing)."""
        if not self._pristine_tulip:
            from tulip.core.messages import Message as TulipMessage

            self._pristine_tulip.extend(TulipMessage.model_validate(d) for d in self.messages)
        return [m.model_copy() for m in self._pristine_tulip[: len(self.messages) if n is None else n]]

    def steps(self) -> list[list[dict[str, Any]]]:
        """Each save's new messages (what an append-only store adds at that save)."""
        out, prev = [], 0
        for s in self.saves:
            out.append(self.messages[prev : s.n])
            prev = max(prev, s.n)
        return out

    def describe(self) -> str:
        sources = [s.metadata.get("source") for s in self.saves]
        return (
            f"{self.turns} turns, {len(self.saves):,} saves ({sources.count('iteration'):,} mid-turn, "
            f"{sources.count('final'):,} turn ends), {len(self.messages):,} messages, "
            f"{self.json_bytes / 1e6:.2f} MB of messages' JSON"
        )


@cache
def _growth() -> Any:
    """``scripts/storage_growth.py``, where the research agent's scripted model lives."""
    spec = importlib.util.spec_from_file_location("storage_growth", ROOT / "scripts" / "storage_growth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Recorder(MemoryCheckpointer):
    """Records every save the agent makes (and keeps it, unsigned, so the agent can resume)."""

    def __init__(self) -> None:
        super().__init__(sign=False)
        self.saves: list[Save] = []

    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        **kw: Any,
    ) -> str:
        rest = AgentState.__pydantic_serializer__.to_json(state, exclude={"messages"})
        self.saves.append(Save(len(state.messages), rest, dict(metadata or {})))
        return await super().save(state, thread_id, checkpoint_id, metadata, **kw)


def record(turns: int = TURNS) -> Research:
    """Run the research agent for ``turns`` turns and return what it saved (~8 s at 300 turns)."""
    from tulip_nb import Agent, tool
    from tulip_nb.models import ScriptedModel

    growth = _growth()

    @tool
    def fetch(item: int, page: int, size: int) -> str:
        """Fetch one page of an item's logs."""
        return str(growth._result(f"{item}:{page}", size))

    rec = _Recorder()
    agent = Agent(ScriptedModel(growth._reply), [fetch], checkpointer=rec, checkpoint_every_n_iterations=1)
    for t in range(turns):
        agent.run_sync(f"question {t}: what do the logs of item {t} say?", thread_id="research")
    latest = asyncio.run(rec.load("research"))
    assert latest is not None
    return Research(turns, [orjson.loads(m.json_bytes()) for m in latest.messages], rec.saves)
