"""The checkpoint envelope, tulip's JSON record around one AgentState (file layout, HTTP wire).

::

    {"checkpoint_id": ..., "thread_id": ..., "created_at": "...+00:00", "metadata": {...},
     "state": {...}}

A checkpoint served or stored in this form is read by a tulip agent as it is (``FORMATS.md``).
:func:`encode_envelope` writes one (``checkpoint_id`` first, so a listing reads only the head);
:func:`decode_envelope` reads one written by tulip or tulip_nb (either key order).
"""

from __future__ import annotations

from tulip_nb.memory._envelope import decode_envelope, encode_envelope

__all__ = ["decode_envelope", "encode_envelope"]
