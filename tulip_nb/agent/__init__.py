"""tulip_nb.agent: the Agent (run / run_sync / resume / iterate / fork) and what it returns.

::

    from tulip_nb.agent import Agent
    from tulip_nb.models import ScriptedModel, text

    agent = Agent(model=ScriptedModel([text("Hello!")]))
    agent("Hi").text            # 'Hello!'

See :mod:`tulip_nb.agent._agent` for the run loop and save semantics, :mod:`tulip_nb.agent.events`
for hooks, :mod:`tulip_nb.tools` for tools and interrupts, and :mod:`tulip_nb.agent.turns` to drive a
turn one model call at a time (what replay and branches in :mod:`tulip_nb.lab` use).
"""

from __future__ import annotations

from tulip_nb._sync import run_sync
from tulip_nb.agent._agent import Agent, AgentBase
from tulip_nb.agent._errors import AgentError, NotACheckpointer, NothingToResume, ResumeNeedsResponse
from tulip_nb.agent._result import AgentResult, PendingInterrupt, Step, StopReason
from tulip_nb.agent.events import CheckpointLoaded, CheckpointSaved, Hooks, IterationDone, ModelCall, ToolCalled
from tulip_nb.memory.conversation.base import ConversationManager
from tulip_nb.memory.conversation.base import NullConversationManager as NullConversationManager
from tulip_nb.memory.conversation.base import NullManager as NullManager
from tulip_nb.tools import Interrupt as Interrupt
from tulip_nb.tools import Tool as Tool
from tulip_nb.tools import tool as tool

__all__ = [
    "Agent",
    "AgentBase",
    "AgentError",
    "AgentResult",
    "CheckpointLoaded",
    "CheckpointSaved",
    "ConversationManager",
    "Hooks",
    "IterationDone",
    "ModelCall",
    "NotACheckpointer",
    "NothingToResume",
    "PendingInterrupt",
    "ResumeNeedsResponse",
    "Step",
    "StopReason",
    "ToolCalled",
    "run_sync",
]
