"""Fixtures for the headless widget tests: an offline agent with a checkpoint per iteration."""

from __future__ import annotations

from typing import Any

import pytest

from tulip_nb.agent import Agent
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.compactor import LLMCompactor
from tulip_nb.models import ScriptedModel

from ..lab.conftest import lookup_order, make_reply

SYSTEM = "You are a support agent."


def make_stepping_agent(cp: Any, tag: str = "Answer") -> Agent:
    return Agent(
        ScriptedModel(make_reply(tag)),
        [lookup_order],
        system_prompt=SYSTEM,
        checkpointer=cp,
        conversation_manager=LLMCompactor(context_length=1500, trigger_fraction=0.8, head_turns=1),
        checkpoint_every_n_iterations=1,
    )


@pytest.fixture
def cp() -> MemoryCheckpointer:
    return MemoryCheckpointer()


@pytest.fixture
def agent(cp: MemoryCheckpointer) -> Agent:
    return make_stepping_agent(cp)
