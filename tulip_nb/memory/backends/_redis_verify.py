"""Turning what a Redis history load returned into a verified checkpoint (:mod:`._redis_history`).

The load script (:data:`~._redis_layout.LOAD`) returns a row's header, its fields' patch chain and
its history's entries from the head down. Here every entry is re-hashed against its id (the walk
must start at the row's head and hold exactly its message count), the fields are rebuilt and
checked against their hash, and the row's digest is checked: anything changed is
:class:`~tulip_nb.core.errors.CheckpointCorrupt`, never an older state. Messages are built with the
fast decoder (:func:`~tulip_nb.core.fastload.messages_from_json`); an entry this instance parsed
before from the very same stored bytes reuses its message object (messages are immutable).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from tulip_nb.core import Message
from tulip_nb.core.errors import CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.fastload import gc_paused, messages_from_json
from tulip_nb.memory.backends._redis_layout import ROOT, Head, parse_head
from tulip_nb.memory.checkpointer import Checkpoint
from tulip_nb.memory.history import StoredCheckpoint, entry_id, fields_hash, state_with
from tulip_nb.memory.rest_delta import MAX_DEPTH, PatchError, decode

__all__ = ["Blobs", "Known", "Verifier"]

Blobs = tuple[tuple[str, bytes], ...]
"""(checkpoint id, stored fields blob) of the rows from a snapshot to a patch, snapshot first."""
_CACHED_MESSAGES = 16_384
"""Verified entries an instance keeps as message objects (reused by the loads that share them)."""


@dataclass(frozen=True)
class Known:
    """A history a batch verified just before: its entry ids and messages, oldest first."""

    ids: list[bytes]
    messages: list[Message]


class Verifier:
    """Checks and builds what the store's load script returned; ``where`` names the store in errors."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._cache: OrderedDict[bytes, tuple[bytes, Message]] = OrderedDict()

    def head(self, thread_id: str, cid: str, raw: bytes) -> Head:
        try:
            return parse_head(cid, raw)
        except (ValueError, TypeError, KeyError) as e:
            raise CheckpointCorrupt(
                f"checkpoint row cannot be read: {e}", path=self.where, thread_id=thread_id, checkpoint_id=cid
            ) from e

    def loaded(
        self, thread_id: str, checkpoint_id: str | None, got: list[Any], known: Known | None = None
    ) -> StoredCheckpoint | None:
        if not got:
            if checkpoint_id is not None:
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
            return None
        cid = got[0].decode()
        if len(got) == 1:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=cid)
        h = self.head(thread_id, cid, got[1])
        k = int(got[2])
        chain = [(got[3 + 2 * i].decode(), got[4 + 2 * i]) for i in range(k)]
        values = got[3 + 2 * k :]
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": cid}
        messages, ids = self.messages(h, values, ctx, known)
        when = h.created_at
        if h.digest_for(thread_id) != h.digest:
            raise CheckpointCorrupt("checkpoint row does not match its content digest", path=self.where, **ctx)
        fields = self.fields(chain, h.fields, ctx)[0]
        state = state_with(fields, messages, where=self.where, thread_id=thread_id)
        try:
            meta = orjson.loads(h.meta)
        except orjson.JSONDecodeError as e:
            raise CheckpointCorrupt(f"save metadata is not JSON: {e}", path=self.where, **ctx) from e
        return StoredCheckpoint(Checkpoint(cid, thread_id, when, state, meta), ids)

    def messages(
        self, h: Head, values: list[bytes], ctx: dict[str, Any], known: Known | None = None
    ) -> tuple[list[Message], list[bytes]]:
        """The messages and entry ids (oldest first) of a walk from the head, each entry checked;
        ``known``: a history verified just before, where the walk may stop (a batch).

        An entry this instance parsed before from the very same stored bytes reuses its message
        (messages are immutable); anything else is re-hashed against its id and parsed.
        """
        n, where = h.n, self.where
        if h.head is None:
            if n:
                raise CheckpointCorrupt(f"history has 0 messages, the checkpoint says {n}", path=where, **ctx)
            return [], []
        stop = known.ids[-1] if known is not None and known.ids else None
        if stop is not None and known is not None and h.head == stop and len(known.ids) == n:
            return list(known.messages), list(known.ids)
        if not values:
            raise CheckpointCorrupt("the checkpoint's head entry is missing", path=where, **ctx)
        if len(values) > n:
            raise CheckpointCorrupt(f"history has more than {n} messages, the checkpoint says {n}", path=where, **ctx)
        cache = self._cache
        ids: list[bytes] = []
        out: list[Message | None] = []
        fresh: list[int] = []
        eid: bytes | None = h.head
        for i, value in enumerate(values):
            assert eid is not None
            parent_raw, data = value[:32], value[32:]
            parent = None if parent_raw == ROOT else parent_raw
            hit = cache.get(eid)
            if hit is not None and hit[0] == value:
                out.append(hit[1])
            else:
                if len(value) < 32 or entry_id(parent, data) != eid:
                    raise CheckpointCorrupt(
                        f"message {n - 1 - i} no longer matches its entry id (stored bytes changed)", path=where, **ctx
                    )
                out.append(None)
                fresh.append(i)
            ids.append(eid)
            eid = parent
            if eid is None or eid == stop:
                break
        if eid is not None and eid == stop and known is not None and len(ids) + len(known.ids) == n:
            pass  # the rest is the history verified just before
        elif len(ids) != n or eid is not None:
            got = f"more than {n}" if eid is not None and len(ids) >= n else str(len(ids))
            raise CheckpointCorrupt(f"history has {got} messages, the checkpoint says {n}", path=where, **ctx)
        if fresh:
            with gc_paused():
                try:
                    parsed = messages_from_json(orjson.loads(b"[" + b",".join(values[i][32:] for i in fresh) + b"]"))
                except (orjson.JSONDecodeError, ValidationError) as e:
                    raise CheckpointCorrupt(f"stored messages cannot be read: {e}", path=where, **ctx) from e
            for i, message in zip(fresh, parsed, strict=True):
                out[i] = message
                cache[ids[i]] = (values[i], message)
            while len(cache) > _CACHED_MESSAGES:
                cache.popitem(last=False)
        ids.reverse()
        out.reverse()
        new = [m for m in out if m is not None]
        if len(ids) < n and known is not None:
            return [*known.messages, *new], [*known.ids, *ids]
        return new, ids

    def fields(
        self, chain: list[tuple[str, bytes | None]], want: bytes, ctx: dict[str, Any]
    ) -> tuple[dict[str, Any], Blobs]:
        """A row's whole fields from its patch chain (its own blob first), checked by hash; and the
        chain as (id, blob), snapshot first."""
        where = self.where
        blobs: list[tuple[str, bytes]] = []
        for cid, blob in chain:
            if blob is None:
                raise CheckpointCorrupt(f"the row's fields patch missing checkpoint {cid}", path=where, **ctx)
            blobs.append((cid, blob))
        if len(blobs) > MAX_DEPTH + 1:
            raise CheckpointCorrupt("the row's fields patch a chain with no snapshot", path=where, **ctx)
        try:
            fields = decode(blobs[-1][1], None)
            for _, patch in reversed(blobs[:-1]):
                fields = decode(patch, fields)
        except PatchError as e:
            raise CheckpointCorrupt(str(e), path=where, **ctx) from e
        if fields_hash(orjson.dumps(fields)) != want:
            raise CheckpointCorrupt("the row's state fields do not match their hash", path=where, **ctx)
        return fields, tuple(reversed(blobs))
