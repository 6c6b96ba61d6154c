"""Every metadata key tulip_nb persists, in one place.

A thread is data other programs read (a tulip agent resumes it, a notebook replays it), so each key
written into a checkpoint is part of the format (``FORMATS.md``). There are four places a key can
live; the modules that write or read a key import it from here.

**State metadata** (``AgentState.metadata``, saved inside the state; tulip keeps unknown keys):

- :data:`RUN_KEY` -- the current turn's status and pending interrupt (what ``resume()`` reads);
- :data:`ITER_KEY` -- tulip's key for the ids of this turn's mid-turn (iteration) saves;
- :data:`STATE_KEY` -- the conversation manager's own state (plan, summary, token counts);
- :data:`EVENTS_KEY` -- the compaction events (what the model saw at each call);
- :data:`TURNS_KEY` -- the turn log: how each turn ended (``tulip_nb.core.turns``);
- :data:`MEMORY_EVENTS_KEY` -- long-term memory recalls (``tulip_nb.memory.llm_memory``).

**Save metadata** (``CheckpointInfo.metadata``, next to the state; listings read it):

- :data:`PARENT_KEY`, :data:`FORKED_FROM_KEY`, :data:`SOURCE_KEY` -- lineage, as tulip records it;
- :data:`RUN_ID_KEY`, :data:`ITERATION_KEY` -- the run and the iteration an agent save belongs to;
- :data:`COPIED_FROM_KEY` -- a copied checkpoint's original thread and id (``copy_thread``);
- :data:`REPLAY_STEP_KEY` -- a replay branch's first checkpoint: the replayed step it left at;
- :data:`FORK_INDEX_KEY` -- a branch's first checkpoint: the source message index it was cut at;
- :data:`HASH_KEY`, :data:`PARENT_HASH_KEY`, :data:`ALG_KEY`, :data:`SEQ_KEY`,
  :data:`CREATED_AT_KEY` -- the integrity chain (``tulip_nb.memory.integrity``);
- :data:`PRUNED_KEY` -- a checkpoint whose parent a prune or vacuum removed: what was cut
  (``tulip_nb.memory.retention``);
- :data:`MESSAGES_KEY` -- how many messages the state holds and a digest of them, so a listing
  knows which checkpoints are prefixes of which without loading a state (``tulip_nb.lab``);
- :data:`COUNTS_KEY` -- the thread's counters at this save (turns by outcome, calls, tokens,
  interrupts, idempotent hits), so a corpus summary reads one header (``tulip_nb.memory.counts``).

**Message metadata** (``Message.metadata``):

- :data:`CLEARED_KEY` / :data:`SUMMARY_KEY` -- tulip's marks of a stubbed tool result and of a
  summary message (only in the model's view, never in the saved history);
- :data:`MEMORY_MARK` -- the injected long-term memory message (view only, too);
- :data:`TULIP_AT_KEY` -- tulip's per-message timestamp (its PostgreSQL layout).

**File envelope keys** (top-level keys of a ``<checkpoint_id>.json`` envelope beyond tulip's):

- :data:`MIRROR_KEY` -- marks the envelope the delta layout keeps for tulip (its copy of a
  checkpoint in the thread's log).

**Tool-execution extras** (keys of a ``ToolExecution`` beyond tulip's fields):

- :data:`POSITION_KEY` -- the call's position ``[i, k]``, its identity (tulip ignores it).

>>> from tulip_nb.core.keys import RUN_KEY, STATE_KEY
>>> RUN_KEY, STATE_KEY
('_tulip_nb_run', 'tulip_nb_manager_state')
"""

from __future__ import annotations

__all__ = [
    "ALG_KEY",
    "CLEARED_KEY",
    "COPIED_FROM_KEY",
    "COUNTS_KEY",
    "CREATED_AT_KEY",
    "EVENTS_KEY",
    "FORKED_FROM_KEY",
    "FORK_INDEX_KEY",
    "HASH_KEY",
    "ITERATION_KEY",
    "ITER_KEY",
    "MEMORY_EVENTS_KEY",
    "MEMORY_MARK",
    "MESSAGES_KEY",
    "MIRROR_KEY",
    "PARENT_HASH_KEY",
    "PARENT_KEY",
    "POSITION_KEY",
    "PRUNED_KEY",
    "REPLAY_STEP_KEY",
    "RUN_ID_KEY",
    "RUN_KEY",
    "SEQ_KEY",
    "SOURCE_KEY",
    "STATE_KEY",
    "SUMMARY_KEY",
    "TULIP_AT_KEY",
    "TURNS_KEY",
]

# -- state metadata ----------------------------------------------------------------------------

RUN_KEY = "_tulip_nb_run"
"""``state.metadata`` key: this turn's status (``running``/``interrupted``/``complete``/``error``/...)
and, when interrupted, the pending question. What ``resume()`` reads."""

ITER_KEY = "_tulip_iteration_checkpoints"
"""``state.metadata`` key tulip reserves for the ids of this turn's mid-turn (iteration) saves."""

STATE_KEY = "tulip_nb_manager_state"
"""``state.metadata`` key holding the manager's own state (``get_state()``) for this thread."""

EVENTS_KEY = "tulip_nb_compaction_events"
"""``state.metadata`` key holding the list of compaction events recorded for this thread."""

TURNS_KEY = "tulip_nb_turns"
"""``state.metadata`` key holding the turn log: the records of the turns tulip_nb ran, oldest first::

    {"at": 7, "outcome": "running"}
    {"at": 7, "outcome": "error", "error": "ModelError: provider 500", "run_id": "..."}

``at`` is the index of the turn's user message. The log only grows (a save that stores what changed
pays for the new record): a ``running`` record when the turn starts or goes on after an interrupt,
then its outcome, one of ``answered``, ``error``, ``context_exceeded``, ``max_iterations``,
``interrupted``. A turn's newest record is how it ended (``running``: still running, or killed). A
turn with no record was written by another SDK (tulip). See :mod:`tulip_nb.core.turns`."""

MEMORY_EVENTS_KEY = "tulip_nb_memory_events"
"""``state.metadata`` key holding the recall events of this thread (oldest first)::

    {"v": 1, "manager": "LLMMemoryManager", "kind": "recall", "iteration": 1, "call": 0,
     "n_messages": 2, "at": 1, "query": "...", "namespace": ["acme", "cust-4821"],
     "method": "search", "items": [{"key": "fact-…", "score": 1.7, "content": "..."}],
     "message": "Long-term memory ..."}

``at`` is the index of the user message the recall was made for: the memory message was shown
just before it, in every model call of that turn (``n_messages`` is the history length at the
first of them). ``message`` is exactly the text shown; ``items == []`` means nothing was found and
nothing was shown.
"""

# -- save metadata -----------------------------------------------------------------------------

PARENT_KEY = "parent_checkpoint_id"
"""Save-metadata key: the checkpoint this one was saved after (tulip's lineage key)."""

FORKED_FROM_KEY = "forked_from"
"""Save-metadata key of a fork's first checkpoint: the thread it was forked from (as tulip)."""

SOURCE_KEY = "source"
"""Save-metadata key: what made the save. The agent writes ``"iteration"`` (a mid-turn save),
``"final"``, ``"error"``, ``"stopped"`` and ``"interrupt"`` (turn ends), ``"fork"`` and ``"update"``;
the lab ``"sweep"`` and ``"replay"``. Retention and the file store's tulip envelope tell mid-turn
saves from turn ends by it."""

RUN_ID_KEY = "run_id"
"""Save-metadata key of an agent save: the run (``AgentState.run_id``) it belongs to."""

ITERATION_KEY = "iteration"
"""Save-metadata key of an agent save: ``AgentState.iteration`` when it was saved (so a listing
knows it without loading the state)."""

COPIED_FROM_KEY = "copied_from"
"""Save-metadata key ``copy_thread`` writes on each copy: ``{"thread_id", "checkpoint_id"}`` of the
original. Not hashed (a copy keeps verifying); tulip ignores it."""

REPLAY_STEP_KEY = "replay_step"
"""Save-metadata key of a replay branch's first checkpoint (``Replay.go_live``): the step it left at."""

FORK_INDEX_KEY = "fork_message_index"
"""Save-metadata key of a branch's first checkpoint: the source message index it was cut at."""

HASH_KEY = "tulip_nb_hash"
"""Save-metadata key: this checkpoint's hash in the integrity chain."""

PARENT_HASH_KEY = "tulip_nb_parent_hash"
"""Save-metadata key: the hash of the checkpoint this one chains to."""

ALG_KEY = "tulip_nb_hash_alg"
"""Save-metadata key: the chain's algorithm (``"sha256-chain/2"``; ``"sha256-chain/1"`` before
``tulip_nb_seq`` and ``tulip_nb_created_at`` existed, still verified)."""

SEQ_KEY = "tulip_nb_seq"
"""Save-metadata key of a signed (``sha256-chain/2``) save: the thread's running count of saves,
the latest checkpoint's ``tulip_nb_seq`` + 1 (1 for a new thread, or after a latest without one).
Hashed; lets :func:`~tulip_nb.memory.integrity.verify_thread` see a checkpoint copied over another
(two claim one seq), a gap in the save order, and, with an anchor, a rollback of the newest."""

CREATED_AT_KEY = "tulip_nb_created_at"
"""Save-metadata key of a signed (``sha256-chain/2``) save: its ``created_at`` as ISO 8601 with
``+00:00``. Hashed, so the checkpoint's ``created_at`` is bound by the hash: verify reports a
``created_at`` that differs from it. A copy, an import and an export keep ``created_at`` verbatim."""

MESSAGES_KEY = "tulip_nb_messages"
"""Save-metadata key every tulip_nb save writes: ``{"n": n, "sha": "<32 hex>"}``, the number of messages in the
state and the first 128 bits of :func:`~tulip_nb.core.state.messages_digest` of them. Two
checkpoints with the same ``n`` and digest hold the same messages, so a checkpoint whose mark equals
the latest's running digest at ``n`` holds exactly the latest's first ``n`` messages: the lab lists a
thread's checkpoints (messages, tokens) from the headers alone. Hashed with the rest of the save
metadata; tulip ignores it."""

COUNTS_KEY = "tulip_nb_counts"
"""Save-metadata key every agent save writes: the thread's counters at that save (``{"v": 1,
"turns": ..., "tool_calls": ..., "idempotent_hits": ..., ...}``, :mod:`tulip_nb.memory.counts`),
so a corpus summary reads the newest header instead of loading states. Counters the writer could
not know are ``null``. Hashed with the rest of the save metadata; tulip ignores it."""

PRUNED_KEY = "tulip_nb_pruned"
"""Save-metadata key of a checkpoint whose parent was removed by a prune or a vacuum::

    {"parent": "<the removed parent's id>", "parent_hash": "<its hash, as this checkpoint recorded it>",
     "base_hash": "<the hash of the new parent (parent_checkpoint_id), or null>", "dropped": 3}

``parent_checkpoint_id`` then names the nearest surviving ancestor (or is null), so lineage stays
walkable and :func:`~tulip_nb.memory.integrity.verify_thread` accepts the cut. Not hashed (it is
written after the checkpoint was signed); tulip ignores it."""

# -- message metadata --------------------------------------------------------------------------

CLEARED_KEY = "tulip_compaction_cleared"
"""``Message.metadata`` mark (tulip's) of a tool result whose content a compaction stubbed."""

SUMMARY_KEY = "tulip_compaction_summary"
"""``Message.metadata`` mark (tulip's) of the message standing for a summarised block."""

MEMORY_MARK = "tulip_nb_memory"
"""``Message.metadata`` key that marks the injected memory message (never part of the history)."""

TULIP_AT_KEY = "tulip_at"
"""``Message.metadata`` key tulip's PostgreSQL layout keeps a message's timestamp under."""

# -- file envelope keys --------------------------------------------------------------------------

MIRROR_KEY = "tulip_nb_mirror"
"""Top-level key of the tulip envelope the file store's delta layout writes for the thread's latest
turn end: the name of the log file that holds the checkpoint. An envelope with it whose checkpoint
is not in that log is reported by ``tulip-nb verify`` (the log lost its record). tulip ignores it."""

# -- tool-execution extras -----------------------------------------------------------------------

POSITION_KEY = "tulip_nb_call"
"""Extra key of a :class:`~tulip_nb.core.state.ToolExecution` tulip_nb recorded: ``[i, k]``, the
call's position (its identity); tulip ignores it and keeps it on round trip."""
