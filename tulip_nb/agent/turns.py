"""The public turn driver: run an agent's turn one model call at a time, from outside the agent.

:meth:`Agent.run <tulip_nb.agent.Agent.run>` runs a whole turn; replay and what-if branches
(:mod:`tulip_nb.lab`) need to stop after every model call, look, and go on. They use the same
machinery the agent does, so a replayed or branched turn follows exactly the agent's rules
(Think with the conversation manager's view, Execute in order, saves, interrupts):

- :func:`start_turn` -- the state a new turn starts from (history kept, per-turn fields reset,
  the new user message appended, :data:`RUN_KEY` set to ``running``);
- :class:`TurnRunner` -- owns that working state; ``await runner.iteration()`` makes one model
  call and runs the tools it asked for, returning a :class:`~tulip_nb.agent._result.Step`
  (``None`` once the turn is over; ``runner.stop_reason`` says why);
- :func:`snapshot` -- an independent copy of a state (to branch from it without sharing lists);
- :func:`canonical_args` -- the bytes two tool calls' arguments must share to be "the same call".

>>> from tulip_nb.agent import Agent
>>> from tulip_nb.agent.turns import TurnRunner, start_turn
>>> from tulip_nb.models import ScriptedModel, text
>>> from tulip_nb.agent import run_sync
>>> agent = Agent(model=ScriptedModel([text("Hello!")]))
>>> state = start_turn(None, "Hi", system_prompt=None, metadata=None, agent_id=None, max_iterations=5)
>>> runner = TurnRunner(agent, state, None, every=None)    # no thread id: nothing is saved
>>> step = run_sync(runner.iteration())
>>> runner.state.messages[-1].content, runner.stop_reason
('Hello!', 'complete')
"""

from __future__ import annotations

from tulip_nb.agent._loop import TurnRunner, snapshot
from tulip_nb.agent._turn import canonical_args, start_turn
from tulip_nb.core.keys import ITER_KEY as ITER_KEY
from tulip_nb.core.keys import RUN_KEY as RUN_KEY

__all__ = ["TurnRunner", "canonical_args", "snapshot", "start_turn"]
