"""Writers that take no lock on a file thread (tulip): how "latest" is ordered, and what is detected.

A thread directory of :class:`~tulip_nb.memory.backends._delta_file.DeltaFileCheckpointer` may be written by
tulip agents too. tulip writes one envelope per checkpoint and takes no lock, so tulip_nb's
compare-and-swap (an ``flock`` on ``<dir>/.lock``) orders tulip_nb writers only. This module holds
the two things that make mixed writers safe to reason about.

**Order: the parent chain first, ``created_at`` second.** An envelope whose
``parent_checkpoint_id`` is another checkpoint of the thread is newer than that checkpoint,
whatever the clocks said: its *effective time* is its parent's when its own ``created_at`` is not
later (a tulip save chained to a tulip_nb save made with a clock an hour ahead is still the
latest). The sort key is ``(effective time, hops, created_at, id)``, where ``hops`` counts the
chained saves since the checkpoint that set the effective time, so a child always sorts after its
parent. Records of the thread's log (tulip_nb's own saves) keep their ``created_at``: every
tulip_nb save is stamped after the effective time of the latest it chains to, so the log is in
chain order by construction and finding the latest still reads only the log's newest header and
the envelopes' headers. A foreign envelope that records no parent (a tulip agent's turn does not)
can only be ordered by its ``created_at``.

**Detection** (:class:`ForeignWatch`, for saves with ``expected_parent=``): a *foreign* checkpoint
is an envelope of the thread that is not in its log (not the delta layout's mirror) and has no
``tulip_nb_messages`` mark (every tulip_nb save adds one). Under the lock, before writing:

1. the latest is a foreign checkpoint and not the expected parent: :class:`CheckpointConflict`
   naming it and saying that a writer that takes no lock (tulip) wrote it;
2. a foreign checkpoint appeared since this instance saved or loaded the expected parent and is
   not the latest (it records no parent and its ``created_at`` is older: clock skew, or a tulip
   save that raced ours): the save would hide it, so :class:`CheckpointConflict` naming it;
3. the latest is a foreign checkpoint written after this instance's own last save of the thread,
   and the state being saved does not hold that save's messages (tulip continued from an older
   state, overwriting an acknowledged tulip_nb turn): :class:`CheckpointConflict` naming both.

Cases 2 and 3 hold until the writer reads the thread again: after the conflict, the next load
(the retry's read) accepts what was reported, so a writer that wants to continue can.

A foreign checkpoint that lands *during* the write (after the pre-write check, before the rename)
cannot be refused any more. The save stands (it is durable and will be returned; failing it would
invite a duplicate retry), a :class:`ForeignWriteWarning` names the foreign checkpoint, and the
writer's next save with ``expected_parent=`` raises case 1, 2 or 3 for it. This costs one more
listing of the directory per strict save (headers of new files only, as every scan).

What cannot be detected or ordered: a foreign write that landed before this instance first read
the thread (a fresh process knows nothing older; an unchained tulip turn behind a skewed save
then stays hidden from "latest"); a tulip write that replaces a file in place under an existing
name, or that carries tulip_nb's mark (tulip re-saving our save metadata); log records written
verbatim (``put_checkpoint``, copies) whose chain contradicts their ``created_at`` (ordered by
``created_at``); and any interleaving met only by saves without ``expected_parent=``
(last-write-wins, as documented). Knowledge is per instance and bounded
(:attr:`ForeignWatch.CAPACITY` threads).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tulip_nb.core.errors import CheckpointConflict, CheckpointNotFound
from tulip_nb.core.keys import MESSAGES_KEY, PARENT_KEY
from tulip_nb.core.state import AgentState, messages_digest
from tulip_nb.memory.backends._delta_log import DeltaLog
from tulip_nb.memory.backends._file_delta import has, mirror_name
from tulip_nb.memory.backends._file_index import Bad, inodes_in
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo

if TYPE_CHECKING:
    from tulip_nb.memory.backends._delta_file import DeltaFileCheckpointer as FileCheckpointer

__all__ = [
    "ForeignWatch",
    "ForeignWriteWarning",
    "Key",
    "Scan",
    "before_save",
    "is_foreign",
    "latest_of",
    "latest_scan",
    "listed",
    "logged_at",
    "newest_first",
    "saving",
]

Key = tuple[datetime, int, datetime, str]
"""Sort key of a checkpoint: ``(effective time, hops, created_at, checkpoint_id)``."""

Pair = tuple[str | None, CheckpointInfo]
"""(envelope file name, or None for a record of the thread's log; its info)."""


class ForeignWriteWarning(RuntimeWarning):
    """A writer that takes no lock (tulip) wrote a checkpoint of the thread while tulip_nb saved."""


def is_foreign(info: CheckpointInfo) -> bool:
    """Whether an envelope outside the thread's log was written by another writer (tulip): no mark."""
    return MESSAGES_KEY not in info.metadata


def logged_at(log: DeltaLog | None) -> Callable[[str], datetime | None]:
    """``created_at`` of a live record of ``log`` by id (None when it is not there): O(1)."""

    def lookup(checkpoint_id: str) -> datetime | None:
        if log is None:
            return None
        try:
            return log.header(checkpoint_id).created_at
        except CheckpointNotFound:
            return None

    return lookup


def _own_key(info: CheckpointInfo) -> Key:
    return (info.created_at, 0, info.created_at, info.checkpoint_id)


def _in_order(envelopes: Mapping[str, CheckpointInfo], logged: Callable[[str], datetime | None]) -> bool:
    """Whether every envelope is newer than its parent (the usual case): then each key is its own."""
    for info in envelopes.values():
        parent = info.metadata.get(PARENT_KEY)
        if not isinstance(parent, str):
            continue
        known = envelopes.get(parent)
        at = known.created_at if known is not None else logged(parent)
        if at is not None and at >= info.created_at:
            return False
    return True


def _keys(envelopes: Mapping[str, CheckpointInfo], logged: Callable[[str], datetime | None]) -> dict[str, Key]:
    """The sort key of every envelope (by checkpoint id), walking each parent chain once."""
    keys: dict[str, Key] = {}
    if _in_order(envelopes, logged):
        return {cid: _own_key(info) for cid, info in envelopes.items()}
    for start in sorted(envelopes):  # sorted: a cycle (hand-edited files) breaks the same way everywhere
        chain: list[str] = []
        on_chain: set[str] = set()
        cid: str | None = start
        base: tuple[datetime, int] | None = None
        while cid is not None and cid not in keys:
            info = envelopes[cid]
            chain.append(cid)
            on_chain.add(cid)
            parent = info.parent_checkpoint_id
            if parent is None or parent in on_chain:  # a root, or a cycle in hand-edited files
                cid = None
            elif parent in envelopes:
                cid = parent
            else:
                at = logged(parent)
                base = (at, 0) if at is not None else None
                cid = None
        if cid is not None:
            base = keys[cid][:2]
        for cid in reversed(chain):
            info = envelopes[cid]
            base = (info.created_at, 0) if base is None or info.created_at > base[0] else (base[0], base[1] + 1)
            keys[cid] = (base[0], base[1], info.created_at, cid)
    return keys


def newest_first(pairs: list[Pair], logged: Callable[[str], datetime | None]) -> list[Pair]:
    """``pairs`` (log records and envelopes of one thread), newest first by the chain-first order."""
    keys = _keys({i.checkpoint_id: i for name, i in pairs if name is not None}, logged)
    return sorted(
        pairs,
        key=lambda p: _own_key(p[1]) if p[0] is None else keys[p[1].checkpoint_id],
        reverse=True,
    )


def latest_of(
    head: CheckpointInfo | None, envelopes: list[tuple[str, CheckpointInfo]], logged: Callable[[str], datetime | None]
) -> tuple[Pair, Key] | None:
    """The thread's latest: the log's newest record ``head`` or an envelope, with its sort key."""
    by_id = {i.checkpoint_id: i for _, i in envelopes}
    keys = None if _in_order(by_id, logged) else _keys(by_id, logged)
    best: tuple[Pair, Key] | None = ((None, head), _own_key(head)) if head is not None else None
    for name, info in envelopes:
        key = _own_key(info) if keys is None else keys[info.checkpoint_id]
        if best is None or key > best[1]:
            best = (name, info), key
    return best


# -- detection ------------------------------------------------------------------------------------
@dataclass
class _Seen:
    """The thread as this instance last saw a checkpoint as its latest (saved or loaded)."""

    latest: str
    foreign: frozenset[str]
    """Ids of the foreign checkpoints there were then (or that were reported since)."""
    reported: set[str] = field(default_factory=set)
    """Reported in a conflict, accepted at the next load."""


@dataclass
class _Own:
    """This instance's last save of the thread: its id, its messages mark, the foreign ids then."""

    checkpoint_id: str
    count: int
    sha: str
    foreign: frozenset[str]
    reported: bool = False


def _mark(metadata: Mapping[str, Any]) -> tuple[int, str] | None:
    mark = metadata.get(MESSAGES_KEY)
    if isinstance(mark, Mapping) and isinstance(mark.get("n"), int) and isinstance(mark.get("sha"), str):
        return int(mark["n"]), str(mark["sha"])
    return None


def _holds(state: AgentState, count: int, sha: str) -> bool:
    """Whether ``state``'s messages start with the ``count`` messages whose digest starts ``sha``."""
    return len(state.messages) >= count and messages_digest(state.messages[:count]).hex()[:32] == sha


class ForeignWatch:
    """Per instance: what each thread held when this instance last saved or read it (see above)."""

    CAPACITY = 4096
    """Threads remembered (least recently used forgotten: a forgotten thread is as a fresh process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[Path, str], _Seen] = OrderedDict()
        self._own: OrderedDict[tuple[Path, str], _Own] = OrderedDict()

    @staticmethod
    def _put(table: OrderedDict[tuple[Path, str], Any], key: tuple[Path, str], value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > ForeignWatch.CAPACITY:
            table.popitem(last=False)

    def observe(self, directory: Path, thread_id: str, latest: str | None, foreign: Iterable[str]) -> None:
        """A read of the thread (a listing or a load) saw ``latest`` and these foreign ids.

        The first sighting of a latest is kept (a foreign write hidden behind it must not become
        "seen" by a later read); a read after a conflict accepts what the conflict reported.
        """
        key = (directory, thread_id)
        with self._lock:
            own = self._own.get(key)
            if own is not None and own.reported:
                del self._own[key]
            seen = self._seen.get(key)
            if latest is None:
                self._seen.pop(key, None)
            elif seen is None or seen.latest != latest:
                self._put(self._seen, key, _Seen(latest, frozenset(foreign)))
            elif seen.reported:
                self._put(self._seen, key, _Seen(latest, seen.foreign | seen.reported))

    def check(
        self,
        directory: Path,
        thread_id: str,
        *,
        expected_parent: str,
        latest: Pair | None,
        foreign: Mapping[str, CheckpointInfo],
        state: AgentState,
    ) -> None:
        """Raise :class:`CheckpointConflict` for a foreign write the save would hide (cases 1-3).

        Runs under the thread's lock, with the latest and the foreign envelopes read there.
        """
        expected = expected_parent or None
        latest_id = latest[1].checkpoint_id if latest is not None else None
        if latest_id != expected:
            if latest is not None and latest[0] is not None and latest_id in foreign:
                raise CheckpointConflict(
                    "the thread's latest checkpoint is not the expected parent: it was written by a writer"
                    " that takes no lock (tulip), so tulip_nb's lock could not order it",
                    thread_id=thread_id,
                    checkpoint_id=latest_id,
                    expected=expected_parent,
                    actual=latest_id,
                )
            return  # another tulip_nb writer moved the thread: the usual conflict follows
        key = (directory, thread_id)
        with self._lock:
            seen = self._seen.get(key)
            own = self._own.get(key)
        if seen is not None and expected is not None and seen.latest == expected:
            hidden = sorted(set(foreign) - seen.foreign - {expected})
            if hidden:
                with self._lock:
                    seen.reported.update(hidden)
                raise CheckpointConflict(
                    f"{len(hidden)} checkpoint(s) written by a writer that takes no lock (tulip) after the"
                    " expected parent are not the thread's latest (no parent recorded and an older"
                    " created_at: clock skew or a racing save), and this save would hide them; load them"
                    " by id to merge, or load the thread again and retry to continue from the expected parent",
                    thread_id=thread_id,
                    checkpoint_id=hidden[0],
                    expected=expected_parent,
                    actual=latest_id,
                    foreign=hidden,
                )
        superseded = (
            own is not None
            and latest is not None
            and latest_id != own.checkpoint_id
            and latest_id in foreign
            and latest_id not in own.foreign
        )
        if own is not None and superseded and not _holds(state, own.count, own.sha):
            with self._lock:
                own.reported = True
            raise CheckpointConflict(
                f"this writer's checkpoint {own.checkpoint_id!r} is not in the state being saved: the"
                " thread's latest was written after it by a writer that takes no lock (tulip), from an"
                " older state; merge it, or load the thread again and retry to continue without it",
                thread_id=thread_id,
                checkpoint_id=latest_id,
                expected=expected_parent,
                actual=latest_id,
                superseded=own.checkpoint_id,
            )

    def saved(
        self,
        directory: Path,
        thread_id: str,
        checkpoint_id: str,
        metadata: Mapping[str, Any],
        foreign: Iterable[str],
    ) -> None:
        """This instance saved ``checkpoint_id``; ``foreign``: the foreign ids the save accounted for."""
        key = (directory, thread_id)
        known = frozenset(foreign)
        mark = _mark(metadata)
        with self._lock:
            self._put(self._seen, key, _Seen(checkpoint_id, known))
            if mark is None:
                self._own.pop(key, None)
            else:
                self._put(self._own, key, _Own(checkpoint_id, mark[0], mark[1], known))

    @staticmethod
    def warn_window(thread_id: str, checkpoint_id: str, landed: Iterable[str]) -> None:
        """Foreign checkpoints that landed while ``checkpoint_id`` was being written."""
        ids = sorted(landed)
        if ids:
            warnings.warn(
                f"thread {thread_id!r}: checkpoint(s) {', '.join(map(repr, ids))} were written by a writer that"
                f" takes no lock (tulip) while tulip_nb saved {checkpoint_id!r}; the save stands, and the next"
                " save with expected_parent= raises CheckpointConflict for them",
                ForeignWriteWarning,
                stacklevel=2,
            )


# -- the FileCheckpointer's hooks -------------------------------------------------------------------
@dataclass
class Scan:
    """One look at a thread's directory (headers only, from the cached scan)."""

    log: DeltaLog | None
    names: frozenset[str]
    """Every checkpoint file name in the directory (of any thread)."""
    envelopes: list[tuple[str, CheckpointInfo]]
    """The thread's envelopes outside its log (the delta layout's mirror is in the log)."""
    alien: dict[str, CheckpointInfo]
    """The foreign ones among them, by checkpoint id."""


def _look(cp: FileCheckpointer, thread_id: str, directory: Path) -> Scan:
    scanned = cp._scan(directory)  # first: it finishes a delete a crash interrupted
    log = cp._logs.get(directory, thread_id)
    out: list[tuple[str, CheckpointInfo]] = []
    alien: dict[str, CheckpointInfo] = {}
    for name, entry in scanned.items():
        if isinstance(entry, Bad):
            cp._warn_bad(directory / name, entry.reason)
        elif entry.thread_id == thread_id and (log is None or not has(log, entry.checkpoint_id)):
            out.append((name, entry))
            if is_foreign(entry):
                alien[entry.checkpoint_id] = entry
    return Scan(log, frozenset(scanned), out, alien)


def latest_scan(cp: FileCheckpointer, thread_id: str, directory: Path) -> tuple[tuple[Pair, Key] | None, Scan]:
    """The thread's latest with its sort key, and the look it came from: only headers are read."""
    look = _look(cp, thread_id, directory)
    head = look.log.latest() if look.log is not None else None
    info = None if head is None else CheckpointInfo(head.checkpoint_id, thread_id, head.created_at, dict(head.metadata))
    return latest_of(info, look.envelopes, logged_at(look.log)), look


def listed(cp: FileCheckpointer, thread_id: str, directory: Path, pairs: list[Pair]) -> list[Pair]:
    """``pairs`` (every checkpoint of the thread) newest first; the read is remembered for detection."""
    ordered = newest_first(pairs, {i.checkpoint_id: i.created_at for n, i in pairs if n is None}.get)
    alien = (i.checkpoint_id for n, i in pairs if n is not None and is_foreign(i))
    cp._foreign.observe(directory, thread_id, ordered[0][1].checkpoint_id if ordered else None, alien)
    return ordered


def before_save(
    cp: FileCheckpointer, directory: Path, thread_id: str, state: AgentState, expected_parent: str | None
) -> tuple[Pair | None, CheckpointInfo | None, Scan]:
    """Under the lock: the latest, the latest as the save chains to it, and the look at the thread.

    The second is the latest with its effective time as ``created_at``, so the save is stamped
    after it (tulip_nb's own saves stay in chain order). With ``expected_parent`` it first runs
    :meth:`ForeignWatch.check` (raises :class:`CheckpointConflict`).
    """
    found, look = latest_scan(cp, thread_id, directory)
    latest = found[0] if found is not None else None
    if expected_parent is not None:
        cp._foreign.check(
            directory, thread_id, expected_parent=expected_parent, latest=latest, foreign=look.alien, state=state
        )
    after = replace(found[0][1], created_at=found[1][0]) if found is not None else None
    return latest, after, look


@contextlib.contextmanager
def saving(cp: FileCheckpointer, directory: Path, ckpt: Checkpoint, before: Scan, *, strict: bool) -> Iterator[None]:
    """Around the write of ``ckpt`` (lock held): remember it; for a strict save, look for foreign
    checkpoints that landed during the write and warn (:class:`ForeignWriteWarning`).

    The look after the write lists the directory once more; headers are read only when a file
    appeared that this save did not write (the write window of a racing writer).
    """
    yield
    landed: set[str] = set()
    if strict and set(inodes_in(directory)) - before.names - {mirror_name(ckpt.checkpoint_id)}:
        landed = set(_look(cp, ckpt.thread_id, directory).alien) - set(before.alien)
    cp._foreign.saved(directory, ckpt.thread_id, ckpt.checkpoint_id, ckpt.metadata, before.alien)
    ForeignWatch.warn_window(ckpt.thread_id, ckpt.checkpoint_id, landed)
