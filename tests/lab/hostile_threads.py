"""Threads whose content attacks the page that shows them (for the share-page tests).

Every string a model or a tool can write -- user text, assistant text, tool-call arguments, tool
results, the thread id itself -- carries one of :data:`PAYLOADS`: script elements, a closing
``</script>``, event-handler attributes, ``javascript:`` URLs, U+2028/U+2029, markup that would
close the page's own elements. Each payload, if it ever ran, sets ``window.__tnb_pwned``; a test
checks that it stays unset and that the text is shown as text.
"""

from __future__ import annotations

from typing import Any

from tulip_nb.agent import Agent
from tulip_nb.models import ScriptedModel, text, tool_call
from tulip_nb.tools import tool

PWNED = "__tnb_pwned"
PAYLOADS: tuple[str, ...] = (
    f"<script>window.{PWNED} = 'script'</script>",
    f"</script><script>window.{PWNED} = 'close'</script>",
    f"<img src=x onerror=\"window.{PWNED}='img'\">",
    f'<a href="javascript:window.{PWNED}=\'link\'" id="tnb-evil-link">click me</a>',
    f"<svg onload=\"window.{PWNED}='svg'\"></svg>",
    f"<iframe src=\"javascript:parent.{PWNED}='frame'\"></iframe>",
    "line\u2028separator\u2029paragraph",
    "<!-- <script> -->",
    "\" ' ` </textarea></pre></details></td></tr></table></main>",
    "<style>body{display:none}</style>",
    f'<meta http-equiv="refresh" content="0;url=javascript:window.{PWNED}=1">',
    f"<body onload=\"window.{PWNED}='body'\">",
)
HOSTILE_ID = "evil <b>&amp; \u2028 ' \" </script>"


@tool
def echo(text: str) -> str:
    """Return the text, as a tool that reads untrusted pages would.

    Args:
        text: What to return.
    """
    return f"result: {text}"


def build_hostile_thread(checkpointer: Any, thread_id: str = HOSTILE_ID) -> None:
    """One turn per payload: the user sends it, the model calls ``echo`` with it and answers it."""
    script = []
    for p in PAYLOADS:
        script += [tool_call("echo", text=p), text(f"answer: {p}")]
    agent = Agent(ScriptedModel(script), [echo], checkpointer=checkpointer, system_prompt=PAYLOADS[0])
    for p in PAYLOADS:
        agent.run_sync(f"question: {p}", thread_id=thread_id)
