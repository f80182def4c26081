"""The append-only audit log under ``_posixlake/audit/``, and how unknown user names are recorded."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from posixlake.errors import AlreadyExists, NotFound, PosixLakeError
from posixlake.security._time import now, parse_time
from posixlake.storage import ObjectStore

__all__ = [
    "AUDIT_KEY",
    "AUDIT_PREFIX",
    "UNKNOWN_USER_PREFIX",
    "AuditEvent",
    "AuditLog",
    "unknown_user_matches",
    "unknown_user_tag",
]

logger = logging.getLogger(__name__)

AUDIT_PREFIX: Final = "_posixlake/audit"
AUDIT_KEY: Final = "_posixlake/audit.key"
UNKNOWN_USER_PREFIX: Final = "unknown#"


@dataclass(frozen=True)
class AuditEvent:
    """One entry of the audit trail."""

    timestamp: datetime
    user: str | None
    action: str
    """``login``, ``login_failed``, ``create_user``, ``permission_denied``, ``backup``,
    ``commit:<DELTA OPERATION>`` (from the Delta log), ..."""
    ok: bool = True
    target: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "timestamp": self.timestamp.isoformat(),
            "user": self.user,
            "action": self.action,
            "ok": self.ok,
            "target": self.target,
            "detail": dict(self.detail),
        }


class AuditLog:
    """The append-only audit events of one table."""

    def __init__(self, store: ObjectStore, *, clock: Callable[[], datetime] = now) -> None:
        """Use ``store``, rooted at the table."""
        self.store = store
        self._clock = clock

    def record(
        self,
        user: str | None,
        action: str,
        *,
        ok: bool = True,
        target: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one event (one small file). Storage failures are logged, not raised."""
        when = self._clock()
        event = AuditEvent(when, user, action, ok, target, dict(detail or {}))
        key = f"{AUDIT_PREFIX}/{int(when.timestamp() * 1000):015d}-{uuid.uuid4().hex}.json"
        try:
            self.store.write_bytes(key, json.dumps(event.to_dict()).encode(), if_absent=True)
        except PosixLakeError as err:
            logger.error("could not write audit event %s by %s: %s", action, user, err)

    def read(self, *, limit: int | None = None) -> list[AuditEvent]:
        """Return events, newest first."""
        keys = sorted(
            (e.key for e in self.store.list(AUDIT_PREFIX) if e.key.endswith(".json")),
            reverse=True,
        )
        if limit is not None:
            keys = keys[:limit]
        out = []
        for key in keys:
            try:
                doc = json.loads(self.store.read_bytes(key))
                when = parse_time(doc.get("timestamp"))
                if when is None:
                    raise ValueError("no timestamp")
                out.append(
                    AuditEvent(
                        when,
                        doc.get("user"),
                        str(doc.get("action", "")),
                        bool(doc.get("ok", True)),
                        doc.get("target"),
                        dict(doc.get("detail") or {}),
                    )
                )
            except (ValueError, AttributeError, NotFound) as err:
                logger.warning("skipping unreadable audit event %s: %s", key, err)
        return out


def unknown_user_tag(store: ObjectStore, attempted: str | None) -> str | None:
    """Return how an unknown user name is recorded: ``unknown#`` + 16 hex of HMAC-SHA256.

    The key is a random per-table secret (``_posixlake/audit.key``, created on first
    use), so the tag cannot be reversed by guessing common passwords offline without
    the key; an admin with the key can still match repeated attempts of one name
    (:func:`unknown_user_matches`).
    """
    if attempted is None:
        return None
    key = _audit_key(store)
    if key is None:
        return UNKNOWN_USER_PREFIX + "?"
    digest = hmac.new(key, attempted.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return UNKNOWN_USER_PREFIX + digest.hexdigest()[:16]


def unknown_user_matches(store: ObjectStore, tag: str, name: str) -> bool:
    """Return whether ``tag`` (from the audit log) records the user name ``name``."""
    return hmac.compare_digest(unknown_user_tag(store, name) or "", tag)


def _audit_key(store: ObjectStore) -> bytes | None:
    for _ in range(2):
        try:
            return store.read_bytes(AUDIT_KEY)
        except NotFound:
            try:
                store.write_bytes(AUDIT_KEY, secrets.token_bytes(32), if_absent=True)
            except AlreadyExists:
                continue
            except PosixLakeError as err:
                logger.error("cannot create the audit key: %s", err)
                return None
        except PosixLakeError as err:
            logger.error("cannot read the audit key: %s", err)
            return None
    return None
