"""Convert a file store's threads between the delta layout and tulip's layout, verified.

``tulip-nb convert PATH --to delta|tulip [THREAD ...]`` runs :func:`convert_thread` for each thread.
Every checkpoint is written in the target layout and read back and compared (state JSON, save
metadata, ``created_at``, envelope extras) before the source copy goes, and only after every
checkpoint of the thread made it:

- **to delta**: each envelope becomes a log record; then the envelopes are removed but one, the
  latest turn end, which stays as the thread's tulip envelope;
- **to tulip**: each log record becomes an envelope; then the forks that use the log as their base
  are rewritten to stand alone and the log is removed.

At every moment each checkpoint exists in one layout or both (the listing shows it once), so a
conversion killed midway leaves a whole thread and can simply be run again.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tulip_nb.core.errors import CheckpointCorrupt, UserError
from tulip_nb.core.keys import MIRROR_KEY
from tulip_nb.memory.backends._delta_log import AUTO, DeltaLog
from tulip_nb.memory.checkpointer import Checkpoint

if TYPE_CHECKING:
    from tulip_nb.memory.backends.file import FileCheckpointer

__all__ = ["Conversion", "convert_thread"]

Layout = Literal["delta", "tulip"]


@dataclass(frozen=True)
class Conversion:
    """What :func:`convert_thread` did to one thread."""

    thread_id: str
    layout: Layout
    converted: int
    """Checkpoints written in the target layout (0: the thread already was in it)."""
    checkpoints: int
    """Checkpoints the thread has, all verified."""


def _same(a: Checkpoint, b: Checkpoint) -> bool:
    extra_a = {k: v for k, v in a.extra.items() if k != MIRROR_KEY}
    extra_b = {k: v for k, v in b.extra.items() if k != MIRROR_KEY}
    return (
        a.checkpoint_id == b.checkpoint_id
        and a.created_at == b.created_at
        and dict(a.metadata) == dict(b.metadata)
        and extra_a == extra_b
        and a.state.to_json_bytes() == b.state.to_json_bytes()
    )


def _logged(log: DeltaLog, thread_id: str, checkpoint_id: str) -> Checkpoint:
    state, header = log.load(checkpoint_id)
    extra = dict(getattr(header, "extra", {}) or {})
    return Checkpoint(checkpoint_id, thread_id, header.created_at, state, dict(header.metadata), extra)


def _check(written: Checkpoint, source: Checkpoint, where: str) -> None:
    if not _same(written, source):
        raise CheckpointCorrupt(
            "converted checkpoint reads back differently; the source copy is kept",
            thread_id=source.thread_id,
            checkpoint_id=source.checkpoint_id,
            path=where,
        )


def convert_thread(cp: FileCheckpointer, thread_id: str, layout: Layout) -> Conversion:
    """Convert one thread of ``cp``'s store to ``layout`` (see the module docstring)."""
    if layout not in ("delta", "tulip"):
        raise UserError(f"layout must be 'delta' or 'tulip', got {layout!r}")
    directory = cp.thread_dir(thread_id)
    converted = 0
    with cp._locked(directory, create=False):
        entries = list(reversed(cp._infos(thread_id, directory)))  # oldest first
        log = cp._logs.get(directory, thread_id)
        if layout == "delta":
            envelopes = [(n, i) for n, i in entries if n is not None]
            if envelopes:
                log = log or cp._logs.create(directory, thread_id)
                for name, _info in envelopes:
                    source = cp._read_checkpoint(directory / name, thread_id)
                    parent = source.metadata.get("parent_checkpoint_id")
                    log.append_checkpoint(
                        source.checkpoint_id,
                        source.created_at,
                        source.state,
                        source.metadata,
                        parent if isinstance(parent, str) else None,
                        base=AUTO,
                        extra=source.extra or None,
                    )
                    _check(_logged(log, thread_id, source.checkpoint_id), source, str(log.path))
                    converted += 1
                cp._sync_mirror(directory, thread_id)  # the envelopes now in the log go, but one
        elif log is not None:
            logged = [i for n, i in entries if n is None]
            for info in logged:
                source = _logged(log, thread_id, info.checkpoint_id)
                plain = Checkpoint(
                    source.checkpoint_id, thread_id, source.created_at, source.state, source.metadata, source.extra
                )
                cp._write_envelope(directory, plain)
                path = directory / (cp.checkpoint_path(thread_id, info.checkpoint_id).name)
                _check(cp._read_checkpoint(path, thread_id), source, str(path))
                converted += 1
            cp._logs.release_dependents(directory, lambda d: _relock(cp, d, directory))
            cp._logs.forget(log.path)
            with contextlib.suppress(FileNotFoundError):
                log.path.unlink()
        total = len(cp._infos(thread_id, directory))
    return Conversion(thread_id, layout, converted, total)


def _relock(cp: FileCheckpointer, directory: Path, held: Path) -> contextlib.AbstractContextManager[None]:
    """The lock of another thread's directory (the one held already is not taken twice)."""
    if directory == held:
        return contextlib.nullcontext()
    return cp._locked(directory, create=False)
