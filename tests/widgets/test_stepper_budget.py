"""Stepper and TokenBudget, driven headless: clicks, edits, and what the views show."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tulip_nb.agent import Agent
from tulip_nb.core.errors import UserError
from tulip_nb.lab import open_thread
from tulip_nb.lab.controllers import StepperController
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.widgets import Stepper, TokenBudget

PROMPT = "Please check ord-4821 for the customer."


def _json(cp: MemoryCheckpointer, tid: str) -> list[bytes]:
    return [m.json_bytes() for m in open_thread(cp, tid).final_messages]


def test_step_shows_request_answer_tools_tokens_and_checkpoint(agent: Agent, cp: MemoryCheckpointer) -> None:
    s = Stepper(agent, PROMPT, thread_id="t1")
    assert "nothing sent yet" in s.request.value and s.edit.value == PROMPT
    assert s.fork_button.disabled
    s.step_button.click()
    c = s.controller
    rec = c.last
    assert rec is not None and rec.checkpoint_id is not None
    # the request as sent: system + user, the answer: a tool call, its result shown
    assert "Request of iteration 1" in s.request.value and PROMPT in s.request.value
    assert "lookup_order" in s.answer.value and "status shipped" in s.answer.value
    assert f"{rec.context_tokens:,}" in s.steps.value and rec.checkpoint_id[:8] in s.steps.value
    assert "iteration 1 done" in s.status.value and not s.fork_button.disabled
    # the edit box now holds the pending tool result
    assert s.edit_label.value.startswith("tool result #3") and s.edit.value.startswith("order ord-4821")
    state = s.get_state()
    assert state["_view_name"] == "VBoxView" and len(state["children"]) == 5
    s.run_button.click()
    assert "turn over: complete" in s.status.value and "Answer: ord-4821 has shipped." in s.answer.value
    assert [r.step.iteration for r in c.records] == [1, 2]
    assert s.edit_label.value.endswith("(a new turn on this thread)") and s.edit_target.value == "next"
    # a next user message continues the same thread (no branch)
    s.edit.value = "Please check ord-4900 too."
    s.step_button.click()
    assert c.thread_id == "t1" and c.branches == [] and "ord-4900" in s.request.value
    bundle = s._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "ord-4900" in bundle["text/html"]
    assert bundle["text/plain"] == "Stepper('t1', steps=3)"
    s.controller.close()


def test_editing_a_pending_tool_result_branches_and_leaves_the_parent(agent: Agent, cp: MemoryCheckpointer) -> None:
    s = Stepper(agent, PROMPT, thread_id="t1")
    s.step_button.click()
    parent_before = _json(cp, "t1")
    s.edit.value = "order ord-4821: lost in transit"
    assert "the next step continues on a new branch" in s.status.value
    s.step_button.click()
    c = s.controller
    assert c.thread_id == "t1-edit-1" and c.branches == ["t1-edit-1"]
    assert _json(cp, "t1") == parent_before  # the parent's history is untouched
    branch = open_thread(cp, "t1-edit-1")
    assert branch.final_messages[3].content == "order ord-4821: lost in transit"
    assert branch.infos[-1].metadata["forked_from"] == "t1"
    # the model read the edited result
    assert "lost in transit" in s.request.value
    assert agent.model.requests[-1][0][-1].content == "order ord-4821: lost in transit"  # type: ignore[attr-defined]


def test_editing_the_user_message_reruns_the_turn_on_a_branch(agent: Agent, cp: MemoryCheckpointer) -> None:
    s = Stepper(agent, PROMPT, thread_id="t1", ids=lambda tid, kind, n: f"{tid}/{kind}{n}")
    s.step_button.click()
    assert s.edit_target.options == ("tool", "user") and s.edit_target.value == "tool"
    s.edit_target.value = "user"
    assert s.edit.value == PROMPT and "user message #1" in s.edit_label.value
    before = _json(cp, "t1")
    s.edit.value = "Please check ord-7777 instead."
    assert s.edit_target.value == "user"  # the refresh keeps the edited target
    s.run_button.click()
    c = s.controller
    assert c.thread_id == "t1/edit1" and _json(cp, "t1") == before
    final = open_thread(cp, "t1/edit1").final_messages
    assert final[1].content == "Please check ord-7777 instead." and final[-1].content == "Answer: ord-7777 has shipped."
    # after the turn: the next user message (a new turn, same thread) or the user message again
    assert s.edit_target.options == ("next", "user")
    with pytest.raises(UserError, match="cannot edit 'tool' now"):
        c.edit_pending("x", "tool")


def test_fork_here_and_reset_never_touch_saved_threads(agent: Agent, cp: MemoryCheckpointer) -> None:
    s = Stepper(agent, PROMPT, thread_id="t1")
    s.step_button.click()
    s.fork_button.click()
    c = s.controller
    assert c.thread_id == "t1-fork-1" and "forked: now on t1-fork-1" in s.status.value
    s.step_button.click()  # continues the unfinished turn on the fork
    assert c.last is not None and c.last.thread_id == "t1-fork-1" and c.turn_done
    t1 = _json(cp, "t1")
    s.reset_button.click()
    assert c.records == [] and c.thread_id == "t1-reset-1" and "nothing sent yet" in s.request.value
    s.run_button.click()
    assert c.turn_done and open_thread(cp, "t1-reset-1").final_messages[1].content == PROMPT
    assert _json(cp, "t1") == t1


def test_reset_of_a_thread_with_history_forks_its_starting_checkpoint(agent: Agent, cp: MemoryCheckpointer) -> None:
    agent.run_sync("Please check ord-1000.", thread_id="old")
    start = open_thread(cp, "old")
    s = Stepper(agent, PROMPT, thread_id="old")
    s.run_button.click()
    s.reset_button.click()
    s.run_button.click()
    c = s.controller
    branch = open_thread(cp, c.thread_id)
    assert (
        c.thread_id == "old-reset-1" and branch.infos[-1].metadata["parent_checkpoint_id"] == start.latest.checkpoint_id
    )
    assert [m.content for m in branch.final_messages[:5]] == [m.content for m in start.final_messages]
    assert branch.final_messages[5].content == PROMPT


def test_errors_show_in_the_status_line_and_bad_input_is_named(cp: MemoryCheckpointer) -> None:
    from tulip_nb.models import ScriptedModel

    agent = Agent(ScriptedModel([]), system_prompt="x", checkpointer=cp)
    s = Stepper(agent, "hello", thread_id="e1")
    s.step_button.click()  # the script is empty: the model raises; the widget shows it
    assert "error" in s.status.value and "ModelError" in s.status.value
    with pytest.raises(UserError, match="non-empty prompt"):
        StepperController(agent, "", thread_id="e2")
    no_cp = Agent(ScriptedModel(["hi"], repeat_last=True))
    c = StepperController(no_cp, "hello", thread_id="e3")
    c.step()
    with pytest.raises(UserError, match="needs Agent\\(checkpointer"):
        c.fork_here()


def test_token_budget_follows_a_stepper_live(agent: Agent) -> None:
    s = Stepper(agent, PROMPT, thread_id="t1")
    b = TokenBudget(s)
    assert b.label.value == "no model calls yet" and b.image.value == b""
    s.step_button.click()
    assert re.match(r"1 calls, last sent \d+ tokens, \d+% of the trigger \(1,200\)", b.label.value)
    first = bytes(b.image.value)
    assert first.startswith(b"\x89PNG")
    s.step_button.click()
    assert b.label.value.startswith("2 calls") and bytes(b.image.value) != first
    assert "<img" in b._repr_mimebundle_()["text/html"]


def test_token_budget_of_a_saved_thread(agent: Agent, cp: MemoryCheckpointer) -> None:
    for i in range(3):
        agent.run_sync(f"Please check ord-48{i:02d}.", thread_id="saved")
    b = TokenBudget(open_thread(cp, "saved"), manager=agent.conversation_manager)
    assert b.label.value.startswith("6 calls") and "trigger (1,200)" in b.label.value


def test_controllers_do_not_import_ipywidgets() -> None:
    code = (
        "import sys, tulip_nb.lab.controllers, tulip_nb.lab; "
        "assert 'ipywidgets' not in sys.modules, 'the lab imported ipywidgets'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
