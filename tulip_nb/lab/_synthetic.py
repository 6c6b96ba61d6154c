"""A synthetic corpus: many offline support threads, written by the real Agent, for corpus research.

:func:`build_corpus` runs the real :class:`~tulip_nb.agent.Agent` with a
:class:`~tulip_nb.models.ScriptedModel` (no API key, no network) over ``n`` refund cases and saves
them in a checkpointer (or a store URL such as ``"file:./corpus"``). The threads vary the way
production threads do: 3 to 12 turns, tool calls (``lookup_order`` and ``check_return_policy`` are
idempotent, so a repeated lookup is answered from the thread's record — an *idempotent hit*;
``refund_status`` raises for some orders — a *tool error*), long customer messages that make an
``LLMCompactor(context_length=2_000)`` compact, a few escalations that interrupt the run for a
human (answered with ``agent.resume``, except every 40th case, left pending), and a few forks
(``forked_from``: a case branched off an earlier one, then continued). The tools and the scripted
model are the support desk's of ``make demo`` (``tulip_nb._demo``: ``TOOLS``, ``support_model``)::

    from tulip_nb.lab import build_corpus, corpus_facts, open_corpus

    ids = build_corpus("file:./corpus", n=200, seed=0)      # ['case-0000', 'case-0001', ...]
    corpus_facts(ids[0])    # [('order', 'ord-...'), ('customer', '...'), ('amount', '$...'), ('callback', '555-...')]
    open_corpus("file:./corpus").summary()

**Facts.** Every case states four facts: the order id, the customer's name and the amount in its
first user message, and a callback number in its second one. They are a function of the thread id
alone (a digest of it; a fork ``<id>-fork-<k>`` has its source's facts), so
:func:`corpus_facts` needs nothing but the id — or a :class:`~tulip_nb.lab._thread.Thread` — and is
picklable: pass it as ``Corpus.simulate(..., probes=corpus_facts)`` on any executor.

**Determinism.** For a given ``seed``, ``prefix``, ``n`` and ``turns`` every thread has the same
messages, tool calls and results on every run (the model decides from the conversation; tool-call
ids come from the request). Checkpoint ids and timestamps are the store's, so they differ.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tulip_nb._demo import TOOLS, support_model
from tulip_nb._sync import sync_twin
from tulip_nb.core.errors import UserError
from tulip_nb.lab.export import open_checkpointer
from tulip_nb.models.scripted import ScriptedModel

if TYPE_CHECKING:
    from tulip_nb.agent import Agent
    from tulip_nb.lab._thread import Thread
    from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["abuild_corpus", "build_corpus", "corpus_facts", "make_corpus_agent"]

SYSTEM_PROMPT = "You are a support agent handling refund cases. Use the tools; never guess order data."
CONTEXT_LENGTH = 2_000
"""The window of the compactor the corpus is written with (small, so long cases compact)."""

_FIRST = ("Dana", "Ravi", "Mei", "Olu", "Sven", "Ana", "Kofi", "Lena", "Tariq", "Yuki", "Pablo", "Ines")
_LAST = ("Reyes", "Patel", "Chen", "Adeyemi", "Lund", "Costa", "Mensah", "Weber", "Haddad", "Sato", "Ruiz", "Novak")
_FORK = re.compile(r"-fork-\d+$")
_COMPLAINTS = (
    "The parcel arrived with a torn corner and the box inside was crushed on one side.",
    "I was told on the phone that the refund would take three days, and it has been two weeks.",
    "The colour does not match the photos on the product page at all, it is much darker.",
    "My neighbour signed for the delivery, so I only opened it days later and found the damage.",
    "I ordered two of these and only one came, the invoice still lists both of them.",
    "The courier left it in the rain by the back door and the manual is soaked through.",
    "I would rather have a replacement than a refund if you still have it in stock somewhere.",
    "Your chat assistant yesterday closed the conversation before answering my question.",
)


def _digest(thread_id: str) -> int:
    base = _FORK.sub("", thread_id)
    return int.from_bytes(hashlib.sha256(base.encode()).digest()[:8], "big")


def corpus_facts(thread: Thread | str) -> list[tuple[str, str]]:
    """The facts a case of :func:`build_corpus` states, ``[(label, text), ...]``, from its id.

    ``thread``: a thread id or a :class:`~tulip_nb.lab._thread.Thread` (so it serves as a per-thread
    ``probes=`` callable). Labels: ``order``, ``customer``, ``amount`` (said in the first user
    message) and ``callback`` (said in the second). A fork (``<id>-fork-<k>``) has its source's.
    """
    thread_id = thread if isinstance(thread, str) else thread.thread_id
    h = _digest(thread_id)
    order = f"ord-{1000 + h % 9000}"
    customer = f"{_FIRST[(h >> 16) % len(_FIRST)]} {_LAST[(h >> 24) % len(_LAST)]}"
    amount = f"${20 + (h >> 32) % 480}.{(h >> 40) % 100:02d}"
    callback = f"555-{(h >> 44) % 10000:04d}"
    return [("order", order), ("customer", customer), ("amount", amount), ("callback", callback)]


# -- building -----------------------------------------------------------------------------------


def _prompts(thread_id: str, rng: random.Random, turns: int) -> list[str]:
    facts = dict(corpus_facts(thread_id))
    out = [
        f"Customer {facts['customer']} asks for a refund of {facts['amount']} on order {facts['order']}.",
        f"The customer's callback number is {facts['callback']}; they prefer a call in the afternoon.",
    ]
    kinds = ["Check the refund", "Remind me", "Escalate", "Note:", "long", "long", "long", "short"]
    weights = [3, 2, 1, 2, 4, 4, 4, 3]
    while len(out) < turns:
        kind = rng.choices(kinds, weights)[0]
        if kind == "Check the refund":
            out.append("Check the refund status, please.")
        elif kind == "Remind me":
            out.append("Remind me of the order details?")
        elif kind == "Escalate":
            out.append("Escalate this case to a manager.")
        elif kind == "Note:":
            out.append("Note: " + rng.choice(_COMPLAINTS))
        elif kind == "long":
            out.append("Customer writes: " + " ".join(rng.choices(_COMPLAINTS, k=rng.randint(6, 16))))
        else:
            out.append("Thanks, anything else I should tell them?")
    return out


def make_corpus_agent(checkpointer: BaseCheckpointer, *, context_length: int = CONTEXT_LENGTH) -> Agent:
    """The agent the corpus is written with: scripted model, the five tools, an LLMCompactor."""
    from tulip_nb.agent import Agent
    from tulip_nb.memory.conversation import LLMCompactor

    return Agent(
        model=ScriptedModel(support_model),
        tools=TOOLS,
        system_prompt=SYSTEM_PROMPT,
        checkpointer=checkpointer,
        conversation_manager=LLMCompactor(context_length=context_length, head_turns=1),
        max_iterations=6,
    )


async def _run_case(agent: Agent, thread_id: str, prompts: Sequence[str], answer_interrupts: bool) -> None:
    for prompt in prompts:
        result = await agent.run(prompt, thread_id=thread_id)
        if result.stop_reason == "interrupted" and answer_interrupts:
            await agent.resume("approved by the shift manager", thread_id=thread_id)


async def abuild_corpus(
    checkpointer_or_url: BaseCheckpointer | str,
    n: int = 200,
    *,
    seed: int = 0,
    prefix: str = "case",
    turns: tuple[int, int] = (3, 12),
) -> list[str]:
    """Build ``n`` offline support threads in ``checkpointer_or_url`` and return their ids, in order.

    See the module docstring. ``seed`` varies turns and messages; ``prefix`` names the threads
    (``<prefix>-0000`` ...; every 15th is a fork ``<source>-fork-<i>`` of the case 7 before it);
    ``turns``: (fewest, most) user turns of a case (forks: their source's plus one or two).
    Deterministic for a seed. :class:`UserError` for a bad ``n`` or ``turns``.
    """
    if n < 0:
        raise UserError(f"build_corpus: n must be >= 0, got {n}")
    lo, hi = turns
    if not 2 <= lo <= hi:
        raise UserError(f"build_corpus: turns must be (low, high) with 2 <= low <= high, got {turns!r}")
    cp, opened = open_checkpointer(checkpointer_or_url)
    try:
        agent = make_corpus_agent(cp)
        ids: list[str] = []
        for i in range(n):
            rng = random.Random(f"{seed}:{i}")
            if i % 15 == 14:  # a fork of an earlier case, continued for one or two turns
                source = ids[i - 7]
                tid = f"{source}-fork-{i}"
                await agent.fork(source, new_thread_id=tid)
                extra = ["Check the refund status, please.", "Thanks, anything else I should tell them?"]
                await _run_case(agent, tid, extra[: rng.randint(1, 2)], True)
            else:
                tid = f"{prefix}-{i:04d}"
                await _run_case(agent, tid, _prompts(tid, rng, rng.randint(lo, hi)), i % 40 != 39)
            ids.append(tid)
        return ids
    finally:
        if opened:
            await cp.close()


build_corpus = sync_twin(abuild_corpus)
