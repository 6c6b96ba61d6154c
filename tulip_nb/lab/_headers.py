"""What a thread's checkpoint headers say about their states, so views need not load them.

Every tulip_nb save writes :data:`~tulip_nb.core.keys.MESSAGES_KEY` into the save metadata:
``{"n": n, "sha": digest}``, the state's message count and the first 128 bits of the digest of those messages.
Comparing it with the running digest of the latest state's messages tells, from the header alone,
whether a checkpoint holds exactly the latest's first ``n`` messages (the usual case: a thread grows
by appending) -- then its message count, its tokens and the messages it shares are known without
loading it. Checkpoints without the mark (written by tulip) or that are not a prefix (a history
edit, a fork's parent) are loaded, one at a time, and not kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tulip_nb.core import Message
from tulip_nb.core.keys import MESSAGES_KEY
from tulip_nb.core.state import prefix_digests

__all__ = ["PrefixIndex", "marked_count"]


def marked_count(metadata: Mapping[str, Any]) -> int | None:
    """The message count a checkpoint's header records, or None when it has no valid mark."""
    mark = metadata.get(MESSAGES_KEY)
    if not isinstance(mark, Mapping) or not isinstance(mark.get("sha"), str):
        return None
    n = mark.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


class PrefixIndex:
    """Which headers describe a prefix of ``messages`` (one digest pass over them, then O(1) each)."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self._marks = [d.hex()[:32] for d in prefix_digests(messages)]

    def prefix_len(self, metadata: Mapping[str, Any]) -> int | None:
        """``n`` when the checkpoint holds exactly ``messages[:n]`` (by its header), else None."""
        n = marked_count(metadata)
        if n is None or n >= len(self._marks):
            return None
        return n if metadata[MESSAGES_KEY]["sha"] == self._marks[n] else None
