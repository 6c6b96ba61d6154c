"""``tulip-nb verify URL [THREAD]``: re-read every checkpoint of a thread (or of every thread) and check it.

For each checkpoint the listing names: the envelope decodes (state valid), its checkpoint and
thread ids are the ones asked for, its ``parent_checkpoint_id`` exists in the thread (or, for a
fork's first checkpoint, in the ``forked_from`` thread: when that parent is gone, deleted or
vacuumed with its source, a ``note:`` line says so and the hash chain decides), it is newer
than its parent, and the listing is in ``created_at`` order (newest first). Files the backend
skipped as unreadable (a warning) count as problems too, and so does a file store's tulip envelope
that is missing, unreadable or not the thread's latest turn end. Then the hash chain
(:func:`tulip_nb.memory.integrity.verify_thread`): every signed checkpoint's content must match its
``tulip_nb_hash`` and chain to its parent's; unsigned checkpoints (written by tulip) are counted,
not failed (``--strict`` fails an unsigned checkpoint that follows signed ones). The thread is
listed once and each state read once, for all of these checks together: the command costs what
``verify_thread`` costs. One line per problem, exit 1 if any::

    tulip-nb verify ./demo_threads ticket-8912-refund

Without THREAD every thread of the store is verified, each problem line starting with
``thread '<id>':``; a clean store (no threads at all included) exits 0::

    tulip-nb verify ./demo_threads

A store's own checks run too, when it has them, each problem on a line of its own and none
stopping the others. The file store (``FileCheckpointer``, the history layout) has
``check_store()``: SQLite's ``integrity_check``, the entries' reference counts and every row's
order and turn-end columns, lines
``store: ...`` (a read of the whole database, in both forms of the command); and
``check_mirror(thread_id)``: the projection tulip reads, the latest turn end's envelope (every
checkpoint's with ``layout="tulip"``), must be there and hold the history's state, save metadata
and ``created_at``. A thread's projection is checked before
anything else reads the thread, because opening a thread repairs a missing or stale projection:
verify reports the damage it found, and after the repair a second run no longer sees it. A check
or a listing that raises is a problem line too, not the end of the run.

A rollback (the newest checkpoints deleted) leaves a consistent, older thread; only an anchor kept
elsewhere shows it. ``--anchor`` prints, after a clean verify, the anchor to keep (one JSON line on
stdout, the summary goes to stderr); ``--expect`` checks the thread still reaches one::

    tulip-nb verify ./demo_threads ticket-8912-refund --anchor > ticket-8912.anchor.json
    tulip-nb verify ./demo_threads ticket-8912-refund --expect ticket-8912.anchor.json
    tulip-nb verify ./demo_threads ticket-8912-refund --expect 12          # a tulip_nb_seq
    tulip-nb verify ./demo_threads ticket-8912-refund --expect-from-audit audit/ticket-8912.jsonl

``--expect`` takes a ``tulip_nb_hash`` (64 hex digits), a ``tulip_nb_seq`` (an integer), an
anchor as JSON, or a file: an anchor file, or an audit trail's JSON lines. ``--expect-from-audit``
takes an :class:`~tulip_nb.memory.audit.AuditTrail` file (a path or a ``file:`` URL) built with
``checkpointer=``: every save it recorded of THREAD is checked. A rollback below the anchor is a
problem line (``anchor: rolled_back``), and so is a checkpoint whose hash is not the anchored one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import itertools
import re
import sys
import warnings
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tulip_nb._cli._common import with_checkpointer
from tulip_nb.core.errors import CheckpointCorrupt, CheckpointNotFound

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tulip_nb.memory.checkpointer import BaseCheckpointer, Checkpoint, CheckpointInfo

_HASH = re.compile(r"^[0-9a-f]{64}$")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("verify", help="re-read and validate every checkpoint of a thread (or of all)")
    parser.add_argument("url", help="checkpointer URL")
    parser.add_argument("thread_id", nargs="?", help="the thread (default: every thread of the store)")
    parser.add_argument(
        "--limit", type=int, default=100_000, help="at most this many checkpoints (default: %(default)s)"
    )
    parser.add_argument("--strict", action="store_true", help="an unsigned checkpoint after signed ones fails")
    expect = parser.add_mutually_exclusive_group()
    expect.add_argument(
        "--expect",
        metavar="ANCHOR",
        help="the thread must still reach this anchor: a tulip_nb_hash, a tulip_nb_seq, anchor JSON, "
        "or a file (an anchor file from --anchor, or an audit trail)",
    )
    expect.add_argument(
        "--expect-from-audit",
        metavar="AUDIT",
        help="the thread must still hold every save this audit trail (a JSON-lines path or file: URL) recorded",
    )
    parser.add_argument(
        "--anchor",
        action="store_true",
        help="after a clean verify, print the anchor to keep (JSON on stdout; the summary goes to stderr)",
    )
    parser.set_defaults(handler=run)


def parse_expect(value: str, *, audit: bool = False) -> Any:
    """The :class:`~tulip_nb.memory.integrity.Anchor` an ``--expect`` value is, or the path of the
    audit trail it (or, ``audit``, an ``--expect-from-audit`` value) names."""
    import orjson

    from tulip_nb.core.errors import UserError
    from tulip_nb.memory.integrity import Anchor

    text = value.strip()
    if not audit:
        if _HASH.match(text):
            return Anchor(hash=text)
        if text.isdigit():
            return Anchor(seq=int(text))
        if text.startswith("{"):
            return Anchor.from_json(text, where="--expect")
    where = "--expect-from-audit" if audit else "--expect"
    if "://" in text and not text.startswith("file://"):
        raise UserError(f"{where} reads a file (a path or a file: URL), got {value!r}")
    path = Path(text.removeprefix("file://").removeprefix("file:"))
    if not path.is_file():
        forms = (
            "an audit trail's JSON-lines file" if audit else "a tulip_nb_hash, a tulip_nb_seq, anchor JSON or a file"
        )
        raise UserError(f"{where}: no such file {str(path)!r} (expected {forms})")
    if not audit:
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            data = None  # JSON lines: an audit trail
        if isinstance(data, dict) and "tulip_nb_anchor" in data:
            return Anchor.from_dict(data, where=f"anchor file {str(path)!r}")
    return path


class _EnvelopeChecks:
    """The checkpointer as :func:`~tulip_nb.memory.integrity.verify_thread` sees it.

    Every call passes through to ``cp``, except that the thread's listing is the one already read,
    and each of the thread's checkpoints that ``verify_thread`` loads is checked on the way (it
    decodes, it is the checkpoint and thread asked for; its ``created_at`` is kept for the
    parent check). So ``tulip-nb verify`` reads every state once, in ``verify_thread``'s order.
    """

    def __init__(self, cp: Any, thread_id: str, infos: list[CheckpointInfo]) -> None:
        self._cp, self._thread_id, self._infos = cp, thread_id, infos
        self._unseen = {i.checkpoint_id for i in infos}
        self.problems: dict[str, list[str]] = {}
        """Envelope problems by checkpoint id."""
        self.created: dict[str, datetime] = {}
        """The loaded ``created_at`` of each checkpoint that could be read."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cp, name)

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        if thread_id == self._thread_id:
            return self._infos if limit is None else self._infos[:limit]
        infos: list[CheckpointInfo] = await self._cp.list_checkpoint_infos(thread_id, limit)
        return infos

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        if thread_id != self._thread_id or checkpoint_id not in self._unseen:
            ckpt: Checkpoint | None = await self._cp.load_checkpoint(thread_id, checkpoint_id)
            return ckpt
        self._unseen.discard(checkpoint_id)
        try:
            ckpt = await self._cp.load_checkpoint(thread_id, checkpoint_id)
        except Exception as e:
            self._check(checkpoint_id, None, e)
            raise
        self._check(checkpoint_id, ckpt, None)
        return ckpt

    async def load_checkpoints(
        self, thread_id: str, checkpoint_ids: Sequence[str]
    ) -> list[Checkpoint | CheckpointCorrupt | CheckpointNotFound]:
        got: list[Checkpoint | CheckpointCorrupt | CheckpointNotFound] = await self._cp.load_checkpoints(
            thread_id, checkpoint_ids
        )
        if thread_id == self._thread_id:
            for cid, one in zip(checkpoint_ids, got, strict=True):
                if cid in self._unseen:
                    self._unseen.discard(cid)
                    if isinstance(one, CheckpointNotFound):  # listed, but the load found nothing
                        self._check(cid, None, None)
                    elif isinstance(one, Exception):
                        self._check(cid, None, one)
                    else:
                        self._check(cid, one, None)
        return got

    async def check_unseen(self) -> None:
        """Load and check the listed checkpoints nothing loaded yet."""
        for info in self._infos:
            if info.checkpoint_id in self._unseen:
                with contextlib.suppress(Exception):  # the failure is recorded as a problem
                    await self.load_checkpoint(self._thread_id, info.checkpoint_id)

    def _check(self, cid: str, ckpt: Checkpoint | None, error: Exception | None) -> None:
        out = self.problems.setdefault(cid, [])
        if isinstance(error, (CheckpointCorrupt, CheckpointNotFound)):
            out.append(f"{cid}: cannot be read: {error}")
        elif error is not None:  # a state that no longer validates, say
            out.append(f"{cid}: does not decode: {type(error).__name__}: {error}")
        elif ckpt is None:
            out.append(f"{cid}: listed but missing")
        else:
            if ckpt.checkpoint_id != cid:
                out.append(f"{cid}: envelope says checkpoint_id {ckpt.checkpoint_id!r}")
            if ckpt.thread_id != self._thread_id:
                out.append(f"{cid}: envelope says thread_id {ckpt.thread_id!r}")
            self.created[cid] = ckpt.created_at


def _order_problems(infos: list[CheckpointInfo]) -> list[str]:
    """The listing must be newest first (``created_at``)."""
    return [
        f"{newer.checkpoint_id}: listed before the older {older.checkpoint_id} (created_at)"
        for newer, older in itertools.pairwise(infos)
        if newer.created_at < older.created_at
    ]


async def _link_problems(
    cp: Any, thread_id: str, infos: list[CheckpointInfo], created: dict[str, datetime], *, complete: bool
) -> tuple[list[str], list[str]]:
    """``(problems, gone fork origins)``: each parent exists in the thread (or, for a fork's first
    checkpoint, in its source) and is older than its child."""
    ids = {i.checkpoint_id for i in infos}
    problems: list[str] = []
    gone_origins: list[str] = []
    for info in infos:
        cid, parent = info.checkpoint_id, info.parent_checkpoint_id
        if parent is None:
            continue
        if parent not in ids:
            source = info.metadata.get("forked_from")
            if isinstance(source, str) and source != thread_id:  # a fork's first checkpoint
                try:
                    there = await cp.exists(source, parent)
                except Exception as e:  # the source cannot be read: not a gone one
                    problems.append(f"{cid}: " + _failed(f"looking up the fork parent {parent} in {source!r}", e))
                    continue
                if not there:  # deleted or vacuumed: the chain decides
                    gone_origins.append(f"{cid}: fork parent {parent} is not in {source!r}")
            elif complete:
                problems.append(f"{cid}: parent {parent} is not in the thread")
        elif cid in created and parent in created and created[parent] > created[cid]:
            problems.append(f"{cid}: older than its parent {parent}")
    return problems, gone_origins


def _failed(what: str, e: BaseException) -> str:
    """The problem line of a check that raised instead of answering."""
    return f"{what} failed: {type(e).__name__}: {e}"


async def _call_check(cp: Any, name: str, what: str, *args: str) -> list[str] | None:
    """``cp.<name>(*args)`` (sync, in a worker thread, or async) as problem lines; None if ``cp``
    has no such check. A check that raises is one problem line, never the end of the verify."""
    check = getattr(cp, name, None)
    if not callable(check):
        return None
    try:
        got = await asyncio.to_thread(check, *args)
        if inspect.isawaitable(got):
            got = await got
    except Exception as e:
        return [_failed(f"{what} ({name})", e)]
    return [str(line) for line in got]


async def mirror_problems(cp: Any, thread_id: str) -> list[str]:
    """The problems ``cp.check_mirror(thread_id)`` finds (the file store's tulip envelope), [] if
    ``cp`` has no such check. Run it before anything else reads the thread: an open repairs it."""
    return await _call_check(cp, "check_mirror", "checking the tulip envelope", thread_id) or []


async def store_problems(cp: Any) -> list[str]:
    """The store-level problems (``cp.check_store()``, the history layout's SQLite integrity check
    and entry reference counts), each line starting with ``store:``; [] without such a check."""
    return [f"store: {line}" for line in await _call_check(cp, "check_store", "checking the store") or []]


async def verify(
    cp: Any,
    thread_id: str,
    limit: int = 100_000,
    *,
    strict: bool = False,
    chain: dict[str, int] | None = None,
    expect: Any = None,
    notes: list[str] | None = None,
    keep: list[Any] | None = None,
    mirror: list[str] | None = None,
) -> tuple[int, list[str]]:
    """``(checkpoints checked, problems)`` for ``thread_id`` in ``cp``.

    ``chain`` is filled with the hash-chain verdict counts, ``notes`` with lines that are not
    problems (a fork whose source is gone), ``keep`` with the anchor to keep (when one exists);
    ``expect`` is an anchor for :func:`~tulip_nb.memory.integrity.verify_thread`. ``mirror``: the
    thread's :func:`mirror_problems` found already (else they are checked first, here). A
    listing of the thread that fails (a damaged store) is a problem line, not an exception.

    It costs what ``verify_thread`` costs: the thread is listed once and each state loaded once,
    by ``verify_thread`` (oldest first, the order in which a store that rebuilds a state from the
    one before answers fastest); the envelope checks run on what it loads (:class:`_EnvelopeChecks`).
    """
    from tulip_nb.core.errors import BackendUnavailable, CheckpointNotFound, InvalidThreadId
    from tulip_nb.memory.integrity import verify_thread

    if mirror is None:  # before the listing: opening a thread repairs its projection
        mirror = await mirror_problems(cp, thread_id)
    problems: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            infos = await cp.list_checkpoint_infos(thread_id, limit=limit)
        except (BackendUnavailable, CheckpointNotFound, InvalidThreadId):
            raise  # not a verdict on the thread: the store is down, or the id is not one
        except Exception as e:
            return 0, [*mirror, _failed("listing the thread's checkpoints", e)]
        reader = _EnvelopeChecks(cp, thread_id, infos)
        # verify_thread only lists, loads and asks `exists`: the stand-in passes it all through
        report = await verify_thread(
            cast("BaseCheckpointer", reader), thread_id, limit=limit, strict=strict, expect=expect
        )
        await reader.check_unseen()
        for info in infos:
            problems += reader.problems.get(info.checkpoint_id, [])
        problems += _order_problems(infos)
        links, gone_origins = await _link_problems(cp, thread_id, infos, reader.created, complete=len(infos) < limit)
        problems += links
    problems += [f"warning: {w.message}" for w in caught]
    problems += mirror  # the file store: tulip's envelope
    for v in report.failures:
        if v is report.anchor:
            problems.append(f"{v.checkpoint_id or '(no checkpoints)'}: anchor: {v.status}: {v.detail}")
        elif v.status != "unreadable":  # said above, with what the load raised
            problems.append(f"{v.checkpoint_id}: hash chain: {v.status}: {v.detail}")
    if notes is not None:
        notes += [
            f"note: {v.checkpoint_id}: hash chain: {v.status}: {v.detail}"
            for v in report.verdicts
            if v.status == "origin_gone"
        ]
        signed_fork = {v.checkpoint_id for v in report.verdicts if v.status == "origin_gone"}
        notes += [f"note: {line}" for line in gone_origins if line.split(":", 1)[0] not in signed_fork]
    if notes is not None and report.anchor is not None and not report.anchor.failed:
        notes.append(f"anchor: {report.anchor.status}: {report.anchor.detail}")
    if chain is not None:
        chain.update(report.counts())
    if keep is not None and report.head_anchor is not None:
        keep.append(report.head_anchor)
    return len(infos), problems


async def verify_all(
    cp: Any,
    limit: int = 100_000,
    *,
    strict: bool = False,
    chain: dict[str, int] | None = None,
    notes: list[str] | None = None,
) -> tuple[int, int, list[str]]:
    """``(threads, checkpoints checked, problems)`` for every thread of ``cp`` and the store itself.

    The store's own checks first (:func:`store_problems`), then every thread's projection
    (:func:`mirror_problems`, all before any thread is read: reading a fork asks its source), then
    :func:`verify` of each thread, its lines starting with ``thread '<id>':``. ``chain`` is filled
    with the verdict counts summed over the threads, ``notes`` with the threads' notes.
    """
    from tulip_nb.core.errors import BackendUnavailable, CapabilityNotSupported

    problems = await store_problems(cp)
    try:
        threads = await cp.list_threads(limit=None)
    except (BackendUnavailable, CapabilityNotSupported):
        raise  # no verdict: the store is down, or cannot list its threads (name one)
    except Exception as e:
        return 0, 0, [*problems, "store: " + _failed("listing the threads", e)]
    mirrors = {t: await mirror_problems(cp, t) for t in threads}
    total = 0
    for thread in threads:
        where = f"thread {thread!r}: "
        counts: dict[str, int] = {}
        mine: list[str] = []
        try:
            count, found = await verify(
                cp, thread, limit, strict=strict, chain=counts, notes=mine, mirror=mirrors[thread]
            )
        except BackendUnavailable:
            raise
        except Exception as e:  # one thread's failure is its line; the others are still verified
            count, found = 0, [*mirrors[thread], _failed("verify", e)]
        total += count
        problems += [where + line for line in found]
        if notes is not None:
            notes += [line.replace("note: ", "note: " + where, 1) for line in mine if line.startswith("note: ")]
        if chain is not None:
            for status, n in counts.items():
                chain[status] = chain.get(status, 0) + n
    return len(threads), total, problems


def run(args: argparse.Namespace) -> int:
    from tulip_nb.core.errors import CheckpointNotFound, UserError

    chain: dict[str, int] = {}
    notes: list[str] = []
    keep: list[Any] = []
    strict = bool(getattr(args, "strict", False))
    want_anchor = bool(getattr(args, "anchor", False))
    expect_value, from_audit = getattr(args, "expect", None), getattr(args, "expect_from_audit", None)
    thread_id = getattr(args, "thread_id", None)

    if thread_id is None:
        for flag, value in (("--expect", expect_value), ("--expect-from-audit", from_audit), ("--anchor", want_anchor)):
            if value:
                raise UserError(f"{flag} is about one thread: name it (tulip-nb verify URL THREAD {flag} ...)")
        return _run_all(args, strict, chain, notes)

    source = None
    if expect_value is not None:
        source = parse_expect(expect_value)
    elif from_audit is not None:
        source = parse_expect(from_audit, audit=True)

    async def work(cp: Any) -> tuple[int, list[str]]:
        from tulip_nb.memory.audit import AuditTrail

        expect = await AuditTrail(source, fsync=False).anchor(thread_id) if isinstance(source, Path) else source
        store = await store_problems(cp)
        count, found = await verify(
            cp, thread_id, args.limit, strict=strict, chain=chain, expect=expect, notes=notes, keep=keep
        )
        return count, [*store, *found]

    count, problems = with_checkpointer(args.url, work)
    if count == 0 and not problems:
        raise CheckpointNotFound("no such thread", thread_id=thread_id)
    out = sys.stderr if want_anchor else sys.stdout
    for line in problems:
        print(line)
    for line in notes:
        print(line, file=out)
    if problems:
        print(f"tulip-nb verify: {len(problems)} problem(s) in {count} checkpoint(s) of {thread_id}", file=sys.stderr)
        return 1
    print(f"ok: {count} checkpoint(s) of {thread_id}", file=out)
    print(_chain_line(chain), file=out)
    if want_anchor:
        if not keep:
            raise UserError("nothing to anchor: no checkpoint of the thread is signed", thread_id=thread_id)
        print(keep[0].to_json())
    return 0


def _chain_line(chain: dict[str, int]) -> str:
    return "hash chain: " + ", ".join(f"{n} {status}" for status, n in sorted(chain.items()))


def _run_all(args: argparse.Namespace, strict: bool, chain: dict[str, int], notes: list[str]) -> int:
    """``tulip-nb verify URL``: every thread and the store (see :func:`verify_all`)."""

    async def work(cp: Any) -> tuple[int, int, list[str]]:
        return await verify_all(cp, args.limit, strict=strict, chain=chain, notes=notes)

    threads, count, problems = with_checkpointer(args.url, work)
    for line in [*problems, *notes]:
        print(line)
    if problems:
        print(
            f"tulip-nb verify: {len(problems)} problem(s) in {count} checkpoint(s) of {threads} thread(s)",
            file=sys.stderr,
        )
        return 1
    print(f"ok: {count} checkpoint(s) of {threads} thread(s)")
    if chain:
        print(_chain_line(chain))
    return 0
