"""Verified export of threads from one checkpointer to another (notebook <-> production stores).

A researcher works on threads with the file or memory checkpointer, then exports them to the S3 or
SQL store where production agents pick them up, or brings production threads back the same way.
:func:`export_threads` copies each thread's checkpoints **oldest first, verbatim**: the same
checkpoint ids, ``created_at`` stamps and save metadata (so the ``parent_checkpoint_id`` lineage
that replay, diff and fork walk survives), through each backend's
:meth:`~tulip_nb.memory.checkpointer.BaseCheckpointer.put_checkpoint`.

- **Verified**: ``verify=True`` reads every copied checkpoint back from the destination and
  compares id, thread, ``created_at``, save metadata and state (as canonical JSON: keys sorted,
  numbers as parsed values, so a ``jsonb`` copy equals its source), and checks that the
  destination's latest checkpoint is the source's.
- **Resumable**: each checkpoint is written whole or not at all, so an export that dies midway
  leaves only complete checkpoints; running it again skips those already there (same id, time
  and metadata) and copies the rest: nothing duplicated, nothing lost. The report says where a
  failed thread stopped.
- **Safe by default**: a destination thread holding checkpoints the source does not have is a
  conflict: ``on_conflict="error"`` (report it, write nothing), ``"skip"`` or ``"overwrite"``
  (delete the destination thread first).
- ``dry_run=True`` reports what would be written and writes nothing.

>>> import asyncio
>>> from tulip_nb.core import AgentState, Message
>>> from tulip_nb.memory.backends import MemoryCheckpointer
>>> src, dst = MemoryCheckpointer(), MemoryCheckpointer()
>>> _ = asyncio.run(src.save(AgentState(messages=[Message.user("hi")]), "t1"))
>>> report = export_threads(src, dst, progress=False)
>>> report[["thread", "copied", "verified", "error"]].to_dict("records")
[{'thread': 't1', 'copied': 1, 'verified': True, 'error': None}]

Sources and destinations are checkpointers or URLs (:func:`tulip_nb.memory.backends.checkpointer_from_url`,
plus ``tulip-pg://user@host/db?tenant=...`` for tulip's native PgCheckpointer table). Threads stored
by tulip's AgentServer as ``"<principal>:<id>"`` map to plain ids and back with ``map_ids=``
(:func:`~tulip_nb.lab._ids.strip_principal`, :func:`~tulip_nb.lab._ids.add_principal`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import orjson

from tulip_nb._deps import require
from tulip_nb._sync import sync_twin
from tulip_nb.core import iso_offset
from tulip_nb.core.canonical import canonical_json_of
from tulip_nb.core.errors import UserError
from tulip_nb.core.state import state_json_bytes
from tulip_nb.lab._export_cost import CostModel, dest_layout
from tulip_nb.lab._ids import IdMap, add_principal, strip_principal
from tulip_nb.lab._stores import open_checkpointer
from tulip_nb.lab._thread import Thread
from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, CheckpointInfo, validate_thread_id

if TYPE_CHECKING:
    import pandas as pd


__all__ = ["REPORT_COLUMNS", "open_checkpointer"]

History = Literal["all", "latest"]
Threads: TypeAlias = "str | Thread | Sequence[str | Thread] | None"
"""Which threads: None (all), a glob or an id, a :class:`~tulip_nb.lab.Thread`, or a list of ids /
Threads (a Thread stands for its id in ``source``)."""
OnConflict = Literal["error", "skip", "overwrite"]
REPORT_COLUMNS = (
    "thread", "dest_thread", "status", "checkpoints", "copied", "skipped", "bytes", "dest_bytes", "checksum",
    "verified", "error",
)  # fmt: skip
_GLOB = set("*?[")


@dataclass
class _Row:
    thread: str
    dest_thread: str
    status: str = "pending"
    checkpoints: int = 0
    copied: int = 0
    skipped: int = 0
    bytes: int = 0
    dest_bytes: int = 0
    checksum: str = ""
    verified: bool | None = None
    error: str | None = None


@dataclass
class _Digest:
    """What verification compares for one source checkpoint (not the state itself: its hash)."""

    checkpoint_id: str
    created_at: datetime
    metadata: dict[str, Any]
    state_sha: str


@dataclass
class _Plan:
    row: _Row
    infos: list[CheckpointInfo]  # the source thread, newest first
    todo: list[CheckpointInfo] = field(default_factory=list)  # oldest first
    present: set[str] = field(default_factory=set)
    conflict: str | None = None


def _canonical_state(ckpt: Checkpoint) -> bytes:
    """The state's canonical JSON (:mod:`tulip_nb.core.canonical`): what verification and the
    checksum compare, so a store that reorders keys (PostgreSQL ``jsonb``) verifies."""
    return canonical_json_of(state_json_bytes(ckpt.state))


def _same_info(a: CheckpointInfo, b: CheckpointInfo) -> bool:
    return a.created_at == b.created_at and a.metadata == b.metadata


def _resolve_map(map_ids: IdMap | str | None, principal: str | None) -> IdMap:
    if map_ids is None:
        if principal is not None:
            raise UserError("principal= needs map_ids='strip-principal' or 'add-principal'")
        return lambda tid: tid
    if callable(map_ids):
        return map_ids
    if map_ids in ("strip-principal", "add-principal"):
        if principal is None:
            raise UserError(f"map_ids={map_ids!r} needs principal= (e.g. 'anon')")
        return strip_principal(principal) if map_ids == "strip-principal" else add_principal(principal)
    raise UserError(f"map_ids must be a function, 'strip-principal' or 'add-principal', got {map_ids!r}")


def _thread_ids(threads: Threads) -> list[str]:
    """Ids of a thread id, a :class:`~tulip_nb.lab.Thread`, or a list of either."""

    items: list[str | Thread] = [threads] if isinstance(threads, str | Thread) else list(threads or ())
    return [t.thread_id if isinstance(t, Thread) else t for t in items]


async def _select(source: BaseCheckpointer, threads: Threads) -> list[str]:
    if threads is None or (isinstance(threads, str) and _GLOB & set(threads)):
        pattern = threads or "*"
        if not source.capabilities.list_threads:
            raise UserError(f"{source!r} cannot list its threads; pass threads=[...] with their ids")
        return await source.list_threads(limit=None, pattern=pattern)
    ids = _thread_ids(threads)
    for tid in ids:
        validate_thread_id(tid)
    return list(dict.fromkeys(ids))


async def _plan(source: BaseCheckpointer, dest: BaseCheckpointer, row: _Row, history: History) -> _Plan:
    infos = await source.list_checkpoint_infos(row.thread, limit=None)
    plan = _Plan(row, infos)
    if not infos:
        row.status, row.error = "failed", "source thread has no checkpoints"
        return plan
    plan.todo = [infos[0]] if history == "latest" else infos[::-1]
    row.checkpoints = len(plan.todo)
    by_id = {i.checkpoint_id: i for i in infos}
    there = await dest.list_checkpoint_infos(row.dest_thread, limit=None)
    foreign = [
        d.checkpoint_id for d in there if d.checkpoint_id not in by_id or not _same_info(d, by_id[d.checkpoint_id])
    ]
    if foreign:
        plan.conflict = (
            f"destination thread {row.dest_thread!r} has {len(foreign)} checkpoint(s) that differ from or are "
            f"not in the source (first: {foreign[0]}); pass on_conflict='skip' or 'overwrite'"
        )
    else:
        plan.present = {d.checkpoint_id for d in there}
    return plan


async def _copy(
    source: BaseCheckpointer,
    dest: BaseCheckpointer,
    plan: _Plan,
    *,
    dry_run: bool,
    verify: bool,
    tick: Callable[[int], None],
    cost: CostModel,
) -> None:
    row = plan.row
    digest = hashlib.sha256()
    digests: list[_Digest] = []
    last_written = False
    for n, info in enumerate(plan.todo, 1):
        cid = info.checkpoint_id
        try:
            ckpt = await source.load_checkpoint(row.thread, cid)
            if ckpt is None:
                raise UserError("vanished from the source while exporting")
            state = _canonical_state(ckpt)
            head = orjson.dumps(
                {"checkpoint_id": cid, "created_at": iso_offset(ckpt.created_at), "metadata": ckpt.metadata},
                option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
            )
            digest.update(head)
            digest.update(state)
            row.bytes += len(head) + len(state)
            digests.append(_Digest(cid, ckpt.created_at, ckpt.metadata, hashlib.sha256(state).hexdigest()))
            last_written = cid not in plan.present
            if last_written:
                cost.add(row.dest_thread, ckpt, len(state))
            if not last_written:
                row.skipped += 1
            elif not dry_run:
                await dest.put_checkpoint(
                    Checkpoint(cid, row.dest_thread, ckpt.created_at, ckpt.state, dict(ckpt.metadata), dict(ckpt.extra))
                )
                row.copied += 1
            else:
                row.copied += 1
        except Exception as e:
            row.status = "failed"
            row.error = f"stopped at checkpoint {cid} ({n} of {len(plan.todo)}): {type(e).__name__}: {e}"
            return
        finally:
            tick(1)
    row.checksum = digest.hexdigest()[:16]
    row.dest_bytes = cost.finish(row.dest_thread)
    if dry_run:
        row.status = "dry run"
        return
    try:
        newest = plan.infos[0].checkpoint_id
        if plan.todo[-1].checkpoint_id == newest and not last_written:
            # everything was already there (a resumed export): make sure the destination's own
            # idea of "latest" (e.g. S3's _latest pointer) caught up before the crash
            latest = await dest.load_checkpoint(row.dest_thread)
            if latest is None or latest.checkpoint_id != newest:
                ckpt = await source.load_checkpoint(row.thread, newest)
                assert ckpt is not None
                await dest.put_checkpoint(
                    Checkpoint(
                        newest, row.dest_thread, ckpt.created_at, ckpt.state, dict(ckpt.metadata), dict(ckpt.extra)
                    )
                )
        row.status = "copied" if row.copied else "up to date"
        if verify:
            problems = await _verify(dest, row.dest_thread, digests, newest)
            row.verified = not problems
            if problems:
                row.status, row.error = "failed", "verify: " + "; ".join(problems[:5])
    except Exception as e:
        row.status, row.error = "failed", f"after copying: {type(e).__name__}: {e}"


async def _verify(dest: BaseCheckpointer, thread: str, digests: list[_Digest], newest: str) -> list[str]:
    problems = []
    for d in digests:
        got = await dest.load_checkpoint(thread, d.checkpoint_id)
        if got is None:
            problems.append(f"{d.checkpoint_id} missing")
            continue
        diff = [
            name
            for name, same in (
                ("checkpoint_id", got.checkpoint_id == d.checkpoint_id),
                ("thread_id", got.thread_id == thread),
                ("created_at", got.created_at == d.created_at),
                ("metadata", got.metadata == d.metadata),
                ("state", hashlib.sha256(_canonical_state(got)).hexdigest() == d.state_sha),
            )
            if not same
        ]
        if diff:
            problems.append(f"{d.checkpoint_id}: {', '.join(diff)} differ")
    ids = await dest.list_checkpoints(thread, limit=None)
    if len(ids) != len(set(ids)):
        problems.append("duplicate checkpoint ids in the destination")
    latest = await dest.load_checkpoint(thread)
    if latest is None or latest.checkpoint_id != newest:
        problems.append(f"latest is {latest.checkpoint_id if latest else None}, expected {newest}")
    return problems


async def aexport_threads(
    source: BaseCheckpointer | str,
    dest: BaseCheckpointer | str,
    threads: Threads = None,
    *,
    history: History = "all",
    verify: bool = True,
    dry_run: bool = False,
    on_conflict: OnConflict = "error",
    progress: bool = True,
    map_ids: IdMap | str | None = None,
    principal: str | None = None,
    concurrency: int = 4,
) -> pd.DataFrame:
    """Copy threads with their whole checkpoint history from ``source`` to ``dest``, verified.

    Args:
        source, dest: checkpointers, or URLs (``file:./threads``, ``memory:``,
            ``s3://bucket/prefix/?endpoint_url=...``, ``redis://...``, ``postgresql://...``,
            ``mysql://...``, ``http://...``, ``tulip-pg://user@host/db?tenant=...``).
        threads: every thread (None), a glob over source ids (``"ticket-*"``), a list of ids, or
            :class:`~tulip_nb.lab.Thread` handles (each stands for its ``thread_id``).
        history: ``"all"`` checkpoints, or only each thread's ``"latest"``.
        verify: read everything back from ``dest`` and compare it field by field.
        dry_run: report what would be copied; write nothing.
        on_conflict: what to do with a destination thread that has checkpoints the source does
            not: ``"error"`` (report, leave it), ``"skip"``, ``"overwrite"`` (delete it first).
        progress: a ``tqdm.auto`` progress bar (the ``notebook`` extra); off imports nothing.
        map_ids: a function from source to destination thread id (``None`` leaves a thread
            out), or ``"strip-principal"`` / ``"add-principal"`` with ``principal=`` for tulip
            AgentServer ids ``"<principal>:<thread_id>"``.
        concurrency: threads copied at once (checkpoints within a thread go one by one).

    Returns:
        A DataFrame, one row per thread: ``thread``, ``dest_thread``, ``status`` (copied, up to
        date, dry run, conflict, skipped (conflict), failed), ``checkpoints`` (in the plan),
        ``copied``, ``skipped`` (already in ``dest``), ``bytes`` (canonical JSON exported),
        ``dest_bytes`` (what ``dest`` will hold for the copied checkpoints, estimated for its
        layout: :mod:`tulip_nb.lab._export_cost`; a dry run reports it without writing; the
        layout's name is ``frame.attrs["dest_layout"]``),
        ``checksum`` (sha256 prefix of the exported checkpoints, equal across re-runs),
        ``verified`` and ``error`` (where a failed thread stopped).
    """
    if history not in ("all", "latest"):
        raise UserError(f"history must be 'all' or 'latest', got {history!r}")
    if on_conflict not in ("error", "skip", "overwrite"):
        raise UserError(f"on_conflict must be 'error', 'skip' or 'overwrite', got {on_conflict!r}")
    if concurrency < 1:
        raise UserError(f"concurrency must be at least 1, got {concurrency!r}")
    mapping = _resolve_map(map_ids, principal)
    pd = require("pandas")

    src, close_src = open_checkpointer(source)
    try:
        dst, close_dst = open_checkpointer(dest)
    except BaseException:
        if close_src:
            await src.close()
        raise
    try:
        rows: list[_Row] = []
        for tid in await _select(src, threads):
            mapped = mapping(tid)
            if mapped is not None:
                rows.append(_Row(tid, validate_thread_id(mapped)))
        gate = asyncio.Semaphore(concurrency)
        layout = dest_layout(dst)
        cost = CostModel(layout)

        async def plan_one(row: _Row) -> _Plan:
            async with gate:
                return await _plan(src, dst, row, history)

        plans = await asyncio.gather(*(plan_one(r) for r in rows))
        bar = _progress_bar(sum(len(p.todo) for p in plans), progress)

        async def run_one(plan: _Plan) -> None:
            async with gate:
                if plan.row.error:
                    return
                if plan.conflict:
                    if on_conflict == "error":
                        plan.row.status, plan.row.error = "conflict", plan.conflict
                        bar(len(plan.todo))
                        return
                    if on_conflict == "skip":
                        plan.row.status = "skipped (conflict)"
                        bar(len(plan.todo))
                        return
                    if not dry_run:
                        await dst.delete(plan.row.dest_thread)
                await _copy(src, dst, plan, dry_run=dry_run, verify=verify, tick=bar, cost=cost)

        try:
            await asyncio.gather(*(run_one(p) for p in plans))
        finally:
            bar(0, close=True)
    finally:
        if close_dst:
            await dst.close()
        if close_src:
            await src.close()
    frame = pd.DataFrame([asdict(r) for r in rows], columns=list(REPORT_COLUMNS))
    frame = frame.astype({"verified": "object", "error": "object"})
    frame["error"] = frame["error"].where(frame["error"].notna(), None)
    frame.attrs.update(source=repr(src), dest=repr(dst), dry_run=dry_run, history=history, dest_layout=layout.label)
    return frame


export_threads = sync_twin(aexport_threads)


def _progress_bar(total: int, enabled: bool) -> Callable[..., None]:
    """``tick(n)`` advancing a tqdm.auto bar (imported only when enabled); ``tick(0, close=True)``."""
    if not enabled or total == 0:
        return lambda n, close=False: None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # the notebook extra is not installed: no bar, same export
        return lambda n, close=False: None
    bar = tqdm(total=total, unit="ckpt", desc="export")

    def tick(n: int, close: bool = False) -> None:
        if n:
            bar.update(n)
        if close:
            bar.close()

    return tick
