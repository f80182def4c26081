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
    return datetime.now(UTC)


def iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
