"""FileCheckpointer: threads on a local disk, readable by tulip.

``FileCheckpointer(base_dir)`` keeps every thread's history in one SQLite database,
``<base_dir>/.tulip_nb/history.sqlite3`` (messages stored once, checkpoints as rows that name their
head: :mod:`tulip_nb.memory.history`, :mod:`._sqlite_history`), and writes what tulip reads beside
it: each thread's latest turn end as tulip's envelope ``<base_dir>/<safe(thread_id)>/<id>.json``
(FORMATS.md; :mod:`._history_file`). ``safe`` keeps letters, digits, ``-`` and ``_`` and turns every
other character into ``_`` (so ``user/42:chat #1`` lives in ``user_42_chat__1/``).

**With tulip.** ``expected_parent=`` (``Agent(strict_concurrency=True)``) is compare-and-swap inside
the save's SQLite transaction, so it protects tulip_nb writers only: tulip takes no lock and writes
its envelopes straight into the thread directory, so its turns are read as the thread's newest
(the next save chains after them), not ordered against a save in flight.

Stores written before the history model (``layout="delta"``, ``layout="tulip"``) are read and written by
``FileCheckpointer(base_dir, layout="delta")`` (:mod:`._delta_file`) and moved to this layout by
``tulip-nb convert PATH``; this layout refuses a thread directory the old one wrote (it would show
only its turn-end mirror) with an error naming that command.
"""

from __future__ import annotations

from tulip_nb.memory.backends._file_index import safe_name
from tulip_nb.memory.backends._history_file import FileCheckpointer

__all__ = ["FileCheckpointer", "safe_name"]
