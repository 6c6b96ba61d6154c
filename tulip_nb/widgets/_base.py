"""What every tulip_nb widget shares: a ``text/html`` fallback and errors shown, not raised."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import ipywidgets as W

from tulip_nb._html import esc

__all__ = ["Debouncer", "Panel", "error_html"]


def error_html(e: BaseException) -> str:
    """An error as a red line (a widget callback must not raise: the message would be lost)."""
    return f"<p class='tulip-nb-note tulip-nb-error' style='color:#cf222e'>{esc(type(e).__name__)}: {esc(e)}</p>"


class Panel(W.VBox):  # type: ignore[misc]
    """A ``VBox`` whose ``_repr_mimebundle_`` adds a ``text/html`` **snapshot** of its current
    view (:meth:`snapshot_html`: :meth:`fallback_html` under a caption naming the widget and its
    position), so a notebook read without a kernel -- nbconvert's HTML, GitHub, nbviewer -- shows
    what the widget showed when the notebook ran. A live frontend shows the widget itself (the
    ``application/vnd.jupyter.widget-view+json`` entry); a static renderer uses the snapshot when
    the notebook has no widget state (JupyterLab saves none by default; for ``jupyter nbconvert
    --execute`` pass ``--ExecutePreprocessor.store_widget_state=False``).

    The snapshot is static HTML: escaped text, inline styles and inline images, no script."""

    def fallback_html(self) -> str:
        raise NotImplementedError

    def snapshot_html(self) -> str:
        """The widget's current view as static HTML, captioned (never raises: an error is shown)."""
        try:
            view = self.fallback_html()
        except Exception as e:  # a snapshot must never hide the live widget
            view = error_html(e)
        caption = (
            f"<p class='tulip-nb-note' style='color:#59636e;font-size:12px;margin:2px 0'>{esc(repr(self))}"
            " · a snapshot of the widget as it was when the notebook ran (it changes in a live kernel)</p>"
        )
        return f"<div class='tulip-nb-snapshot' data-widget='{esc(type(self).__name__)}'>{caption}{view}</div>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        data: dict[str, Any] = super()._repr_mimebundle_(**kwargs) or {}
        data["text/plain"] = repr(self)
        data["text/html"] = self.snapshot_html()
        return data

    def _guard(self, status: W.HTML, fn: Callable[..., Any]) -> Callable[..., None]:
        """``fn`` as a callback that writes its error into ``status`` instead of raising."""

        def callback(*args: Any) -> None:
            try:
                fn(*args)
            except Exception as e:
                status.value = error_html(e)

        return callback


class Debouncer:
    """Runs ``fn`` ``delay`` seconds after the last :meth:`__call__` when an event loop runs in
    this thread (a kernel: slider drags coalesce into one redraw); with no loop (a script, a
    test), runs it at once."""

    def __init__(self, fn: Callable[[], None], delay: float) -> None:
        self.fn = fn
        self.delay = delay
        self._handle: asyncio.TimerHandle | None = None

    def __call__(self, *_: Any) -> None:
        if self.delay <= 0:
            self.fn()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.fn()
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = loop.call_later(self.delay, self.flush)

    def flush(self) -> None:
        """Run now if a call is pending."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.fn()
