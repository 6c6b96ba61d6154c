"""The agent ``tulip-nb serve --app tests.server.served_agent:agent`` runs in the process tests.

Replies depend only on the conversation (workers are separate processes); a prompt containing
"slow" makes the model take 0.3 s, so concurrent runs on one thread really overlap.
"""

from __future__ import annotations

import asyncio

from tulip_nb.agent import Agent, NullManager
from tulip_nb.core._messages import Message
from tulip_nb.models import ScriptedModel, text


async def reply(messages: list[Message]) -> Message:
    last = messages[-1].content or ""
    if "slow" in last:
        await asyncio.sleep(0.3)
    return text(f"echo: {last}")


agent = Agent(ScriptedModel(reply), conversation_manager=NullManager())


def make_agent() -> Agent:
    """A factory works too (``--app tests.server.served_agent:make_agent``)."""
    return Agent(ScriptedModel(reply), conversation_manager=NullManager())
