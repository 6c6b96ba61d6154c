"""Timezone-aware time helpers: read ``Z``, ``+00:00`` and naive stamps; always write aware ones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def ensure_aware(value: datetime) -> datetime:
    """Treat a naive datetime as UTC (tulip writes UTC everywhere); keep aware ones as they are."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        return value.replace(tzinfo=UTC)
    return value


def parse_datetime(value: str | datetime) -> datetime:
    """Parse an ISO 8601 stamp (``Z``, ``+00:00`` or naive) into an aware datetime."""
    if isinstance(value, datetime):
        return ensure_aware(value)
    return ensure_aware(datetime.fromisoformat(value))


def iso_offset(value: datetime) -> str:
    """ISO 8601 with ``+00:00``, the form tulip's store envelopes use."""
    return ensure_aware(value).astimezone(UTC).isoformat()


AwareDatetime = Annotated[datetime, AfterValidator(ensure_aware)]
"""A datetime field that accepts naive input (as UTC) and is always aware once validated."""
