"""FileCheckpointer: threads on a local disk, readable by tulip.

``FileCheckpointer(base_dir)`` keeps every thread's history in one SQLite database,
``<base_dir>/.tulip_nb/history.sqlite3`` (messages stored once, checkpoints as rows that name their
head: :mod:`tulip_nb.memory.history`, :mod:`._sqlite_history`), and writes what tulip reads beside
it as tulip's envelopes ``<base_dir>/<safe(thread_id)>/<id>.json`` (FORMATS.md;
:mod:`._history_file`): each thread's latest turn end, or with ``layout="tulip"`` every checkpoint.
``safe`` keeps letters, digits, ``-`` and ``_`` and turns every other character into ``_`` (so
``user/42:chat #1`` lives in ``user_42_chat__1/``).

**With tulip.** ``expected_parent=`` (``Agent(strict_concurrency=True)``) is compare-and-swap inside
the save's SQLite transaction, so it protects tulip_nb writers only: tulip takes no lock and writes
its envelopes straight into the thread directory, so its turns are read as the thread's newest
(the next save chains after them), not ordered against a save in flight.

Stores written before the history model (the delta layout: a ``.tulip_nb_log`` per thread) are
moved into it by ``tulip-nb convert PATH`` (:mod:`.file_convert`, which reads them with a
read-only reader, :mod:`._legacy_delta`). ``FileCheckpointer(base_dir, layout="delta")`` is
refused with an error naming that command, and so is a thread directory the old layout wrote (it
would show only its turn-end mirror).
"""

from __future__ import annotations

from tulip_nb.memory.backends._history_dir import safe_name
from tulip_nb.memory.backends._history_file import FileCheckpointer as FileCheckpointer

__all__ = ["safe_name"]
