"""Stepper and TokenBudget: step an agent in a notebook and watch its token budget live."""

from __future__ import annotations

from typing import Any

import ipywidgets as W

from tulip_nb.agent import Agent
from tulip_nb.lab import Thread
from tulip_nb.lab.controllers import BudgetController
from tulip_nb.lab.controllers.stepper import IdFactory, StepperController
from tulip_nb.memory.managers import ConversationManager
from tulip_nb.widgets._base import Panel

__all__ = ["Stepper", "TokenBudget"]


class Stepper(Panel):
    """Step an agent one model call at a time (:class:`~tulip_nb.lab.controllers.StepperController`).

    Buttons **Step**, **Run to end**, **Fork here**, **Reset**. Each step shows the request as the
    model got it (after compaction), the answer, tool calls and results, tokens and the checkpoint
    saved. The edit box holds the pending message — the tool result the model reads next, or the
    turn's user message; change it and press Step: the run continues on a new branch, the parent
    thread stays as it was. After a turn the box takes the next user message (same thread)::

        from tulip_nb.widgets import Stepper, TokenBudget

        s = Stepper(agent, "Refund ord-4821?", thread_id="ticket-8912")
        s                          # in a cell; then TokenBudget(s) follows it live
    """

    def __init__(self, agent: Agent, prompt: str, thread_id: str, *, ids: IdFactory | None = None) -> None:
        self.controller = StepperController(agent, prompt, thread_id, ids=ids)
        self.step_button = W.Button(description="Step", button_style="primary", icon="step-forward")
        self.run_button = W.Button(description="Run to end", icon="fast-forward")
        self.fork_button = W.Button(description="Fork here", icon="code-branch")
        self.reset_button = W.Button(description="Reset", icon="undo")
        self.edit_label = W.Label()
        self.edit_target = W.ToggleButtons(
            options=[("prompt", "prompt")], value="prompt", style={"button_width": "auto"}
        )
        self.edit = W.Textarea(layout=W.Layout(width="100%", height="4em"))
        self.status = W.HTML()
        self.request = W.HTML()
        self.answer = W.HTML()
        self.steps = W.HTML()
        self._syncing = False
        super().__init__(
            [
                W.HBox([self.step_button, self.run_button, self.fork_button, self.reset_button]),
                self.status,
                W.VBox([W.HBox([W.Label("Edit:"), self.edit_target]), self.edit_label, self.edit]),
                W.HBox(
                    [
                        W.VBox([self.request], layout=W.Layout(flex="1")),
                        W.VBox([self.answer], layout=W.Layout(flex="1")),
                    ]
                ),
                self.steps,
            ]
        )
        self.add_class("tulip-nb-stepper")
        self.step_button.on_click(self._guard(self.status, lambda _: self.controller.step()))
        self.run_button.on_click(self._guard(self.status, lambda _: self.controller.run_to_end()))
        self.fork_button.on_click(self._guard(self.status, lambda _: self.controller.fork_here()))
        self.reset_button.on_click(self._guard(self.status, lambda _: self.controller.reset()))
        self.edit.observe(self._guard(self.status, self._edited), names="value")
        self.edit_target.observe(self._guard(self.status, lambda _: self._sync_edit()), names="value")
        self.controller.listeners.append(lambda _: self.refresh())
        self.refresh()

    def __repr__(self) -> str:
        c = self.controller
        return f"Stepper({c.thread_id!r}, steps={len(c.records)})"

    def _edited(self, change: dict[str, Any]) -> None:
        if not self._syncing:
            self.controller.edit_pending(change["new"], self.edit_target.value)

    def _sync_edit(self) -> None:
        if self._syncing:
            return
        c = self.controller
        self._syncing = True
        try:
            target = self.edit_target.value
            self.edit_label.value = c.describe(target)
            self.edit.value = c.pending_text(target)
        finally:
            self._syncing = False

    def refresh(self) -> None:
        """Write the controller's state into the views."""
        c = self.controller
        self.status.value = c.status_html()
        self.request.value = c.request_html()
        self.answer.value = c.answer_html()
        self.steps.value = c.steps_html()
        targets = c.targets()
        self._syncing = True
        try:
            keep = self.edit_target.value if self.edit_target.value in targets else targets[0]
            if c.edited_target is not None:
                keep = c.edited_target
            self.edit_target.options = targets
            self.edit_target.value = keep
        finally:
            self._syncing = False
        self._sync_edit()
        has_cp = c.agent.checkpointer is not None
        self.fork_button.disabled = not (has_cp and c.records)
        self.reset_button.disabled = not c.records and not c.branches

    def fallback_html(self) -> str:
        return self.controller.html()


class TokenBudget(Panel):
    """Tokens sent per model call against the compaction trigger and the window.

    ``TokenBudget(thread)`` plots a saved thread against the trigger and window its own manager
    recorded (``manager=`` gives others; unknown: no line, and the label says "window unknown"),
    with its failed turns marked; ``TokenBudget(stepper)`` follows a :class:`Stepper` and
    redraws after every step. ``context_window=`` (tokens, or a registered model name) is the
    model's window when the manager does not say it. Calls sent more than the window are red,
    and the label counts them. The y axis follows what was sent; the full history is a faint
    line cut off at the top (:func:`~tulip_nb.lab.plot_token_usage`).
    """

    def __init__(
        self,
        source: Thread | Stepper | StepperController,
        *,
        manager: ConversationManager | None = None,
        context_window: int | str | None = None,
    ) -> None:
        ctl = source.controller if isinstance(source, Stepper) else source
        self.manager = manager
        self.context_window = context_window
        self.controller = BudgetController(ctl, manager=manager, context_window=context_window)
        self.label = W.Label()
        self.image = W.Image(format="png", layout=W.Layout(max_width="650px"))
        super().__init__([self.label, self.image])
        self.add_class("tulip-nb-budget")
        if self.controller.stepper is not None:
            self.controller.stepper.listeners.append(lambda _: self.refresh())
        self._show()

    def __repr__(self) -> str:
        return f"TokenBudget(calls={self.controller.rows})"

    def refresh(self) -> None:
        self.controller.refresh()
        self._show()

    def show_thread(self, thread: Thread) -> None:
        """Plot another thread (a :class:`ThreadBrowser` calls this)."""
        self.controller = BudgetController(thread, manager=self.manager, context_window=self.context_window)
        self._show()

    def _show(self) -> None:
        self.label.value = self.controller.label()
        self.label.style.text_color = "#cf222e" if self.controller.over else None
        self.image.value = self.controller.png or b""

    def fallback_html(self) -> str:
        return self.controller.html()
