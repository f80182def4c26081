"""Timestamps of user records and audit events (UTC, ISO 8601)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = [
    "iso",
    "now",
    "parse_time",
]


def now() -> datetime:
    """Return the current time (UTC)."""
    return datetime.now(UTC)


def iso(when: datetime) -> str:
    """Return ``when`` in ISO 8601 with milliseconds."""
    return when.isoformat(timespec="milliseconds")


def parse_time(value: Any) -> datetime | None:
    """Return the ISO 8601 time in ``value`` (UTC if naive), or None."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
