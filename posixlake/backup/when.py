"""When a restore goes to: ``as_of`` values (datetime, epoch milliseconds, ISO text)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from posixlake.errors import VersionError

__all__ = ["EPOCH_MS_THRESHOLD", "as_of_ms"]

EPOCH_MS_THRESHOLD: Final = 10**11


def as_of_ms(value: datetime | int | float | str) -> int:
    """Return ``value`` (datetime, epoch ms or ISO string) as epoch milliseconds.

    Raises:
        VersionError: a value of another type, or an unparsable string.
    """
    if isinstance(value, datetime):
        when = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(when.timestamp() * 1000)
    if isinstance(value, bool):
        raise VersionError("as_of must be a datetime, epoch milliseconds or an ISO string")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as err:
            raise VersionError(f"as_of: not an ISO timestamp: {value!r}") from err
        return as_of_ms(parsed)
    raise VersionError(
        f"as_of must be a datetime, epoch milliseconds or an ISO string, not {type(value).__name__}"
    )
