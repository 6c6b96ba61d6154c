"""The file store on the history model: ``FileCheckpointer(base_dir)``.

The history (:mod:`tulip_nb.memory.history`) lives in one SQLite database per ``base_dir``
(:mod:`._sqlite_history`): a save is one transaction that writes a small row and the messages it
adds, a fork or copy is rows on the same entries, and several processes share the store. What
tulip reads is a projection of it (:mod:`._history_dir`), tulip's ``<checkpoint_id>.json``
envelope (FORMATS.md) in the thread's directory for each projected checkpoint: the thread's
latest turn end (the default, ``layout="history"``), or every checkpoint (``layout="tulip"``,
tulip's own layout: a tulip agent lists and loads each one). The projection is written after
the commit (never fsynced: durability is the commit's), kept in step by every save, delete,
prune, copy and vacuum, and repaired from the history the first time an instance touches the
thread. An envelope that tulip wrote into the directory (no projection mark) is a checkpoint of
the thread too: the thread's latest is the newest of the rows and those envelopes (by
``created_at``), so tulip_nb continues after a tulip agent's turns.

Hash chaining is opt-in (``sign=True``); every row carries a content digest checked on load
either way, so corruption is :class:`~tulip_nb.core.errors.CheckpointCorrupt`, never an older
state.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, InvalidThreadId, UserError
from tulip_nb.memory._envelope import encode_envelope_parts, matches_pattern
from tulip_nb.memory.backends._base import newest_first
from tulip_nb.memory.backends._history_common import (
    BlockingHistoryCheckpointer,
    PendingSave,
    copied_metadata,
    newest,
    put_write,
    rewrite_plan,
)
from tulip_nb.memory.backends._history_dir import EnvelopeDir, Head, is_turn_end, safe_name
from tulip_nb.memory.backends._sqlite_history import DB_NAME, SQLiteHistory
from tulip_nb.memory.checkpointer import (
    Checkpoint,
    CheckpointInfo,
    ThreadSpan,
    validate_checkpoint_id,
    validate_thread_id,
)
from tulip_nb.memory.history import PROJECTION_KEY, StoredCheckpoint

__all__ = ["FileCheckpointer", "HistoryFileCheckpointer"]


_LEGACY = (".tulip_nb_log", ".tulip_nb_forks")
"""Names (prefixes) of the files the delta layout (before the history model) kept in a thread directory."""


def legacy_files(directory: Path) -> list[str]:
    """The delta layout's files in ``directory`` (a thread the delta layout wrote), sorted."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if n.startswith(_LEGACY))


def _name(checkpoint_id: str) -> str:
    return safe_name(checkpoint_id) + ".json"


class FileCheckpointer(BlockingHistoryCheckpointer):
    """Threads in ``base_dir``: history in SQLite, tulip's envelope per thread (module docstring).

    ``layout="tulip"`` projects every checkpoint as tulip writes it, not only the latest turn end;
    ``layout="delta"`` (the store before the history model) is refused with a
    :class:`~tulip_nb.core.errors.UserError` naming ``tulip-nb convert PATH``, which moves such a
    store into this layout. ``sign=True`` hash-chains every save
    (:mod:`tulip_nb.memory.integrity`); each row's content digest is checked on load either way.
    ``expected_parent=`` is compare-and-swap that protects tulip_nb writers only: tulip takes no
    lock, so its envelopes are read as the thread's newest, not ordered against a save in flight.

    >>> import asyncio, tempfile
    >>> from tulip_nb.core import AgentState, Message
    >>> from tulip_nb.memory.backends import FileCheckpointer
    >>> cp = FileCheckpointer(tempfile.mkdtemp())
    >>> cid = asyncio.run(cp.save(AgentState(messages=[Message.user("hi")]), "user/42"))
    >>> asyncio.run(cp.list_threads()), asyncio.run(cp.load("user/42")).messages[0].content
    (['user/42'], 'hi')
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] = ".tulip_checkpoints",
        *,
        fsync: bool = True,
        sign: bool = False,
        layout: Literal["history", "tulip"] = "history",
    ) -> None:
        self.base_dir = Path(base_dir)
        requested: str = layout  # any string may come in: refuse it by name
        if requested == "delta":
            raise UserError(
                "the delta layout (the file store before the history model) is no longer written or read:"
                f" run `tulip-nb convert {base_dir}` to move its threads into the history layout",
                path=str(base_dir),
            )
        if layout not in ("history", "tulip"):
            raise UserError(f"FileCheckpointer layout must be 'history' or 'tulip', got {layout!r}")
        self.layout = layout
        self.every = layout == "tulip"
        """Project every checkpoint (``layout="tulip"``), not only the latest turn end."""
        self._base = self.base_dir.resolve()  # a symlinked base_dir is followed once, here
        self.fsync = fsync
        self.store = SQLiteHistory(self._base, fsync=fsync)
        self._dirs = EnvelopeDir()
        self._start(sign=sign)
        self._repaired: set[str] = set()
        self.allow_legacy = False
        """``tulip-nb convert`` sets it: read past thread directories the delta layout wrote."""

    def __repr__(self) -> str:
        return f"FileCheckpointer(base_dir={str(self.base_dir)!r}, layout={self.layout!r})"

    # -- paths --------------------------------------------------------------------------------
    def thread_dir(self, thread_id: str) -> Path:
        """The directory that holds ``thread_id``'s tulip envelopes (shared with ids that sanitise alike)."""
        validate_thread_id(thread_id)
        name = safe_name(thread_id)
        path = self._base / name
        if not name or name.startswith(".") or path.parent != self._base:
            raise InvalidThreadId("thread_id resolves outside base_dir", thread_id=thread_id, path=str(path))
        if os.path.islink(path):
            raise InvalidThreadId("the thread's directory is a symbolic link (never followed)", path=str(path))
        return path

    # -- tulip's envelopes --------------------------------------------------------------------
    def _foreign(self, thread_id: str, directory: Path, rows: set[str] | None = None) -> dict[str, CheckpointInfo]:
        """File name -> info of the envelopes tulip wrote for ``thread_id`` (not projections)."""
        out: dict[str, CheckpointInfo] = {}
        for name, head in self._dirs.scan(directory).items():
            if head.info is None:
                if head.problem != "gone":
                    self._dirs.warn_bad(directory / name, head.problem)
                continue
            if head.projection or head.info.thread_id != thread_id:
                continue
            if rows is not None and head.info.checkpoint_id in rows:
                continue  # a row of the history under the same id wins
            out[name] = head.info
        return out

    def _projections(self, thread_id: str, directory: Path) -> dict[str, Head]:
        return {
            name: head
            for name, head in self._dirs.scan(directory).items()
            if head.projection and head.info is not None and head.info.thread_id == thread_id
        }

    def _write_projection(self, directory: Path, ckpt: Checkpoint) -> None:
        parts = encode_envelope_parts(
            ckpt.checkpoint_id,
            ckpt.thread_id,
            ckpt.created_at,
            ckpt.state,
            dict(ckpt.metadata),
            {PROJECTION_KEY: DB_NAME},
            cache=self._blobs,
        )
        self._dirs.write(directory, _name(ckpt.checkpoint_id), parts, fsync=False)

    def _project(self, thread_id: str, directory: Path, have: Checkpoint | None = None, *, force: bool = False) -> None:
        """Make the directory's projection of ``thread_id`` its latest committed turn end.

        Under the store's write lock, so two processes never leave an older turn end behind.
        ``have``: a checkpoint just saved (written without reloading when it is the one);
        ``force``: rewrite it even when it names the right checkpoint (its save metadata changed).
        A projection that cannot be written (a full disk, a read-only directory, a damaged row)
        is a warning, not a failed save: the history holds the save, and the envelope is written
        again the next time an instance touches the thread.
        """

        def sync(want: str | None, load: Callable[[str], StoredCheckpoint]) -> None:
            self._dirs.clean_temps(directory)
            current = self._projections(thread_id, directory)
            if want is not None:
                name = _name(want)
                head = current.pop(name, None)
                if have is not None and have.checkpoint_id == want:
                    self._write_projection(directory, have)
                elif force or head is None or head.info is None or head.info.checkpoint_id != want:
                    self._write_projection(directory, load(want).checkpoint)
            if current:
                self._dirs.unlink(directory, sorted(current))

        try:
            if self.every:
                self.store.project_every_sync(thread_id, self._sync_every(thread_id, directory, have, force))
            else:
                self.store.project_sync(thread_id, sync)
        except CheckpointCorrupt:  # the newest turn end is damaged: its load and verify say so
            self._repaired.discard(thread_id)
            return
        except OSError as e:  # BackendUnavailable is an OSError
            warnings.warn(
                f"tulip_nb: tulip's envelope of thread {thread_id!r} in {directory} could not be written ({e}); "
                "the history holds the thread, and the envelope is written again when the thread is next opened",
                RuntimeWarning,
                stacklevel=3,
            )
            self._repaired.discard(thread_id)
            return
        self._repaired.add(thread_id)

    def _sync_every(
        self, thread_id: str, directory: Path, have: Checkpoint | None, force: bool
    ) -> Callable[[list[str], Callable[[str], StoredCheckpoint]], None]:
        """``layout="tulip"``: an envelope for every row of the thread (a save writes its own only),
        and no projection of a row that is gone. A damaged row is left out, the others written."""

        def sync(ids: list[str], load: Callable[[str], StoredCheckpoint]) -> None:
            if have is not None and not force:
                self._write_projection(directory, have)
                return
            self._dirs.clean_temps(directory)
            current, damaged = self._projections(thread_id, directory), []
            for cid in ids:
                head = current.pop(_name(cid), None)
                if not force and head is not None and head.info is not None and head.info.checkpoint_id == cid:
                    continue
                try:
                    self._write_projection(directory, load(cid).checkpoint)
                except CheckpointCorrupt as e:
                    damaged.append(e)
            if current:
                self._dirs.unlink(directory, sorted(current))
            if damaged:
                raise damaged[0]

        return sync

    def _repair(self, thread_id: str, directory: Path) -> None:
        """The first time this instance touches a thread: check its projection, rewrite it if a crash
        (or a hand) left it missing, stale or doubled."""
        if thread_id in self._repaired:
            return
        self._refuse_legacy(directory)
        if self._dirs.temps(directory):  # a write killed midway: removed under the store's lock
            self._project(thread_id, directory)
            return
        if self.every:
            ids = {r.checkpoint_id for r in self.store.rows_sync(thread_id)}
            heads = self._projections(thread_id, directory)
            if len(heads) == len(ids) and {_name(c) for c in ids} == set(heads):
                self._repaired.add(thread_id)
            else:
                self._project(thread_id, directory)
            return
        want = self.store.latest_turn_end_sync(thread_id)
        current = self._projections(thread_id, directory)
        if want is None and not current:
            self._repaired.add(thread_id)
            return
        if want is not None and list(current) == [_name(want)] and current[_name(want)].info is not None:
            head_info = current[_name(want)].info
            if head_info is not None and head_info.checkpoint_id == want:
                self._repaired.add(thread_id)
                return
        self._project(thread_id, directory)

    def _refuse_shared_name(self, thread_id: str, directory: Path, cid: str) -> None:
        """Two thread ids that sanitise alike share a directory: an explicit checkpoint id whose
        envelope name another of them holds would overwrite what tulip reads for it."""
        head = self._dirs.scan(directory).get(_name(cid))
        if head is not None and head.info is not None and head.info.thread_id != thread_id:
            raise CheckpointConflict(
                f"{directory / _name(cid)} holds a checkpoint of thread {head.info.thread_id!r}, which shares this"
                " directory; choose another checkpoint id",
                thread_id=thread_id,
                checkpoint_id=cid,
            )

    def _refuse_legacy(self, directory: Path) -> None:
        """A thread directory the delta layout wrote holds its checkpoints in files this layout does
        not read: showing only its turn-end mirror would be silently wrong, so it is an error."""
        if self.allow_legacy:
            return
        found = legacy_files(directory)
        if found:
            raise UserError(
                f"{directory} was written by the delta layout, before the history model ({', '.join(found)}): "
                f"run `tulip-nb convert {self.base_dir}` to move it to the history layout",
                path=str(directory),
            )

    # -- save ---------------------------------------------------------------------------------
    def _save_sync(self, save: PendingSave) -> None:
        thread_id = save.thread_id
        directory = self.thread_dir(thread_id)
        self._repair(thread_id, directory)
        if save.given_id:
            self._refuse_shared_name(thread_id, directory, save.checkpoint_id)
        foreign = self._foreign(thread_id, directory)
        tulip_latest = max(foreign.values(), key=lambda i: (i.created_at, i.checkpoint_id), default=None)
        _, write = self.store.save_sync(thread_id, save.plan(tulip_latest))
        if self.every or is_turn_end(write.metadata):
            self._project(thread_id, directory, save.checkpoint(write))

    def _put_sync(self, ckpt: Checkpoint) -> None:
        directory = self.thread_dir(ckpt.thread_id)
        write = put_write(ckpt, self._chains)
        self.store.save_sync(ckpt.thread_id, lambda _latest: write)
        self._chains.stored(ckpt.thread_id, write.chain)
        self._project(ckpt.thread_id, directory)

    # -- load and list ------------------------------------------------------------------------
    def _load_sync(self, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        directory = self.thread_dir(thread_id)
        self._repair(thread_id, directory)
        if checkpoint_id is not None:
            cid = validate_checkpoint_id(checkpoint_id, thread_id)
            try:
                return self._loaded(self.store.load_sync(thread_id, cid))
            except CheckpointNotFound:
                return self._load_envelope(thread_id, directory, cid)
        stored = self.store.load_sync(thread_id, None)  # corrupt: raises, never an older state
        ours = stored.checkpoint.info if stored is not None else None
        rows = {ours.checkpoint_id} if ours is not None else set()
        for info in newest_first(list(self._foreign(thread_id, directory, rows).values())):
            if ours is not None and newest(ours, info) is ours:
                break
            try:
                return self._load_envelope(thread_id, directory, info.checkpoint_id)
            except (CheckpointNotFound, CheckpointCorrupt) as e:
                self._dirs.warn_bad(directory / _name(info.checkpoint_id), str(e))
        return self._loaded(stored)

    def _load_many_sync(
        self, thread_id: str, checkpoint_ids: list[str]
    ) -> list[Checkpoint | CheckpointCorrupt | CheckpointNotFound]:
        directory = self.thread_dir(thread_id)
        self._repair(thread_id, directory)
        cids = [validate_checkpoint_id(c, thread_id) for c in checkpoint_ids]
        out: list[Checkpoint | CheckpointCorrupt | CheckpointNotFound] = []
        for cid, got in zip(cids, self.store.load_many_sync(thread_id, cids), strict=True):
            if isinstance(got, StoredCheckpoint):
                out.append(got.checkpoint)
            elif isinstance(got, CheckpointNotFound):  # not a row: an envelope tulip wrote, or nothing
                try:
                    out.append(self._load_envelope(thread_id, directory, cid))
                except (CheckpointNotFound, CheckpointCorrupt) as e:
                    out.append(e)
            else:
                out.append(got)
        return out

    def _load_envelope(self, thread_id: str, directory: Path, checkpoint_id: str) -> Checkpoint:
        """A checkpoint tulip wrote (an envelope without the projection mark)."""
        path = directory / _name(checkpoint_id)
        try:
            ckpt = self._dirs.read(path, thread_id)
        except FileNotFoundError:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id) from None
        if ckpt.thread_id != thread_id or ckpt.checkpoint_id != checkpoint_id or PROJECTION_KEY in ckpt.extra:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        return ckpt

    def _infos_sync(self, thread_id: str, limit: int | None) -> list[CheckpointInfo]:
        directory = self.thread_dir(thread_id)
        self._repair(thread_id, directory)
        if not self._foreign(thread_id, directory):  # rows only (as usual): the newest ``limit`` of them
            return [r.info for r in self.store.rows_sync(thread_id, limit)]
        rows = [r.info for r in self.store.rows_sync(thread_id)]
        foreign = self._foreign(thread_id, directory, {i.checkpoint_id for i in rows})
        infos = newest_first(rows + list(foreign.values())) if foreign else rows
        return infos if limit is None else infos[:limit]

    def _span_sync(self, thread_id: str) -> ThreadSpan | None:
        directory = self.thread_dir(thread_id)
        self._repair(thread_id, directory)
        got = self.store.span_sync(thread_id)
        rows = {got[2].checkpoint_id, got[1].checkpoint_id} if got is not None else set()
        tulip = list(self._foreign(thread_id, directory, rows).values())
        if got is None and not tulip:
            return None
        infos = newest_first([*tulip, *((got[1].info, got[2].info) if got is not None else ())])
        return ThreadSpan((got[0] if got is not None else 0) + len(tulip), infos[-1], infos[0])

    def _unreadable_sync(self, pattern: str) -> dict[str, str]:
        """Thread directories whose every envelope is unreadable and that no history row names."""
        try:
            names = sorted(n for n in os.listdir(self._base) if not n.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        known = {safe_name(t) for t in self.store.threads_sync()}
        out: dict[str, str] = {}
        for name in names:
            directory = self._base / name
            if name in known or os.path.islink(directory) or not directory.is_dir():
                continue
            if not matches_pattern(name, pattern):
                continue
            heads = self._dirs.scan(directory)
            problems = [f"{n}: {h.problem}" for n, h in sorted(heads.items()) if h.info is None and h.problem != "gone"]
            if problems and all(h.info is None for h in heads.values()):
                out[name] = "no checkpoint file can be read (" + "; ".join(problems[:3]) + ")"
        return out

    def _all_infos_sync(self) -> dict[str, list[CheckpointInfo]]:
        per: dict[str, list[CheckpointInfo]] = {
            t: [r.info for r in rows] for t, rows in self.store.all_rows_sync().items()
        }
        try:
            names = [n for n in os.listdir(self._base) if not n.startswith(".")]
        except FileNotFoundError:
            names = []
        for name in sorted(names):
            directory = self._base / name
            if os.path.islink(directory) or not directory.is_dir():
                continue
            self._refuse_legacy(directory)
            for head in self._dirs.scan(directory).values():
                info = head.info
                if info is None or head.projection:
                    continue
                group = per.setdefault(info.thread_id, [])
                if all(i.checkpoint_id != info.checkpoint_id for i in group):
                    group.append(info)
        return {t: newest_first(infos) for t, infos in per.items() if infos}

    # -- delete, copy, prune, vacuum ----------------------------------------------------------
    def _delete_sync(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        directory = self.thread_dir(thread_id)
        self._refuse_legacy(directory)
        if checkpoint_ids is None:
            # the projection first: on a full disk, its bytes are what lets SQLite write the delete
            self._dirs.unlink(directory, list(self._projections(thread_id, directory)))
            self._repaired.discard(thread_id)
            gone = self.store.delete_sync(thread_id, None)
            gone += self._dirs.unlink(directory, list(self._foreign(thread_id, directory)))
            self._dirs.remove_if_empty(directory)
            self._chains.forget(thread_id)
            self._repaired.discard(thread_id)
            return gone
        gone = self.store.delete_sync(thread_id, sorted(checkpoint_ids))
        foreign = self._foreign(thread_id, directory)
        gone += self._dirs.unlink(directory, [n for n, i in foreign.items() if i.checkpoint_id in checkpoint_ids])
        self._project(thread_id, directory, force=True)
        return gone

    def _copy_sync(self, source: str, dest: str) -> bool:
        src_dir, dst_dir = self.thread_dir(source), self.thread_dir(dest)
        self._refuse_legacy(src_dir)
        self._refuse_legacy(dst_dir)

        copied = copied_metadata(source)
        rows = {r.checkpoint_id for r in self.store.rows_sync(source)}
        tulip = self._foreign(source, src_dir, rows)
        if self._foreign(dest, dst_dir):
            raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
        if rows:
            self.store.copy_sync(source, dest, copied)
        elif not tulip:
            raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
        elif self.store.rows_sync(dest, 1):
            raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
        for info in tulip.values():  # tulip's own checkpoints of the source become rows of the copy
            ckpt = self._load_envelope(source, src_dir, info.checkpoint_id)
            meta = {**ckpt.metadata, "copied_from": {"thread_id": source, "checkpoint_id": ckpt.checkpoint_id}}
            self._put_sync(Checkpoint(ckpt.checkpoint_id, dest, ckpt.created_at, ckpt.state, meta))
        self._project(dest, dst_dir)
        return True

    def _rewrite_sync(self, thread_id: str, choose: Callable[[list[CheckpointInfo]], set[str]]) -> int:
        """Drop ``choose(infos)`` (rows and tulip's envelopes), re-linking the survivors, in one transaction."""
        directory = self.thread_dir(thread_id)
        self._refuse_legacy(directory)
        foreign = self._foreign(thread_id, directory)
        plan, dropped = rewrite_plan(choose, list(foreign.values()))
        gone = self.store.rewrite_sync(thread_id, plan)
        gone += self._dirs.unlink(directory, [_name(i.checkpoint_id) for i in dropped])
        self._project(thread_id, directory, force=bool(gone))
        return gone

    # -- checks -------------------------------------------------------------------------------
    def check_mirror(self, thread_id: str) -> list[str]:
        """Problems with the thread's tulip envelopes (none: tulip reads what it is shown right).

        Each projected checkpoint (the latest turn end; every row with ``layout="tulip"``) must
        have its envelope, holding exactly its state, save metadata and ``created_at``; no other
        projection of the thread may remain. ``tulip-nb verify`` runs it.
        """
        directory = self.thread_dir(thread_id)
        latest = self.store.latest_turn_end_sync(thread_id)
        wants = [r.checkpoint_id for r in self.store.rows_sync(thread_id)] if self.every else [latest]
        current = self._projections(thread_id, directory)
        problems = [
            f"{h.info.checkpoint_id}: stale tulip envelope {n}"
            for n, h in current.items()
            if h.info and h.info.checkpoint_id not in wants
        ]
        for want in wants:
            if want is not None:
                problems += self._check_envelope(thread_id, directory, want)
        return problems

    def _check_envelope(self, thread_id: str, directory: Path, want: str) -> list[str]:
        problems: list[str] = []
        path = directory / _name(want)
        try:
            got = self._dirs.read(path, thread_id)
        except (FileNotFoundError, CheckpointCorrupt) as e:
            return [f"{want}: the tulip envelope {path.name} cannot be read: {e}"]
        try:
            stored = self.store.load_sync(thread_id, want)
        except CheckpointCorrupt:
            return []  # the row itself is damaged: its verify says so
        assert stored is not None
        ours = stored.checkpoint
        if got.state.to_json_bytes() != ours.state.to_json_bytes():
            problems.append(f"{want}: the tulip envelope {path.name} differs from the history (state)")
        if got.metadata != ours.metadata:
            problems.append(f"{want}: the tulip envelope {path.name} differs from the history (save metadata)")
        if got.created_at != ours.created_at:
            problems.append(f"{want}: the tulip envelope {path.name} differs from the history (created_at)")
        return problems

    # -- async contract (the rest: BlockingHistoryCheckpointer) -------------------------------

    async def thread_span(self, thread_id: str) -> ThreadSpan | None:
        return await self.store.run(self._span_sync, thread_id)

    async def list_unreadable(self, pattern: str = "*") -> dict[str, str]:
        return await self.store.run(self._unreadable_sync, pattern)

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close_sync)


HistoryFileCheckpointer = FileCheckpointer
"""The name this class had while the history layout was opt-in."""
