"""Password hashing (scrypt, per-user salt), verification in constant time, and the policy.

See :mod:`posixlake.security` for the parameters and ``$POSIXLAKE_SCRYPT_LOG2_N``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
import threading
import unicodedata
from collections.abc import Mapping
from typing import Any, Final

from posixlake.errors import InvalidOperation, StorageError

__all__ = [
    "MAX_PASSWORD_LENGTH",
    "MIN_PASSWORD_LENGTH",
    "SCRYPT_LOG2_N",
    "SCRYPT_LOG2_N_ENV",
    "SCRYPT_P",
    "SCRYPT_R",
    "burn_equal_time",
    "check_password_policy",
    "hash_password",
    "verify_password",
]

logger = logging.getLogger(__name__)

SCRYPT_LOG2_N_ENV: Final = "POSIXLAKE_SCRYPT_LOG2_N"
MIN_PASSWORD_LENGTH: Final = 8
MAX_PASSWORD_LENGTH: Final = 1024

SCRYPT_LOG2_N: Final = 15
SCRYPT_R: Final = 8
SCRYPT_P: Final = 1
_SALT_BYTES: Final = 16
_HASH_BYTES: Final = 32


_WEAK_WARNED: list[int] = []


def _scrypt_log2_n() -> int:
    raw = os.environ.get(SCRYPT_LOG2_N_ENV)
    if not raw:
        return SCRYPT_LOG2_N
    try:
        value = int(raw)
    except ValueError as err:
        raise InvalidOperation(f"${SCRYPT_LOG2_N_ENV} must be an integer, not {raw!r}") from err
    if not 4 <= value <= 20:
        raise InvalidOperation(f"${SCRYPT_LOG2_N_ENV} must be between 4 and 20")
    if value < SCRYPT_LOG2_N and not _WEAK_WARNED:
        _WEAK_WARNED.append(value)
        logger.warning(
            "%s=%d weakens password hashing (default %d): for tests only",
            SCRYPT_LOG2_N_ENV,
            value,
            SCRYPT_LOG2_N,
        )
    return value


def _normalize_password(password: str) -> bytes:
    return unicodedata.normalize("NFC", password).encode("utf-8")


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        _normalize_password(password),
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=256 * r * (n + p) + (1 << 20),
        dklen=_HASH_BYTES,
    )


def hash_password(password: str) -> dict[str, Any]:
    """Return a storable scrypt record (algorithm, parameters, salt, hash) of ``password``."""
    n, r, p = 1 << _scrypt_log2_n(), SCRYPT_R, SCRYPT_P
    salt = secrets.token_bytes(_SALT_BYTES)
    digest = _scrypt(password, salt, n, r, p)
    return {
        "alg": "scrypt",
        "n": n,
        "r": r,
        "p": p,
        "salt": base64.b64encode(salt).decode(),
        "hash": base64.b64encode(digest).decode(),
    }


def verify_password(password: str, record: Mapping[str, Any]) -> bool:
    """Return whether ``password`` matches a record of :func:`hash_password` (constant time).

    Records ``{"alg": "bcrypt", "hash": "$2b$..."}`` are users moved over from the
    original posixlake (see :mod:`posixlake._original`); a login replaces them with scrypt.
    """
    if record.get("alg") == "bcrypt":
        from posixlake import _original

        hashed = record.get("hash")
        if not isinstance(hashed, str):
            raise StorageError("the user database holds a malformed password record")
        return _original.check_password(password, hashed)
    try:
        n, r, p = int(record["n"]), int(record["r"]), int(record["p"])
        salt = base64.b64decode(record["salt"], validate=True)
        expected = base64.b64decode(record["hash"], validate=True)
    except (KeyError, TypeError, ValueError) as err:
        raise StorageError("the user database holds a malformed password record") from err
    if (
        record.get("alg") != "scrypt"
        or n < 2
        or n & (n - 1)
        or n > 1 << 20
        or not 1 <= r <= 32
        or not 1 <= p <= 16
    ):
        raise StorageError("the user database holds an unsupported password record")
    return hmac.compare_digest(_scrypt(password, salt, n, r, p), expected)


_DUMMY_LOCK = threading.Lock()
_DUMMY: dict[str, Any] = {}


def burn_equal_time(password: str) -> None:
    """Spend the time of a real check, for an unknown user (no timing oracle)."""
    with _DUMMY_LOCK:
        if not _DUMMY:
            _DUMMY.update(hash_password(secrets.token_urlsafe(16)))
        record = dict(_DUMMY)
    verify_password(password, record)


def check_password_policy(password: Any, *, min_length: int = MIN_PASSWORD_LENGTH) -> str:
    """Return ``password`` if it is a string of ``min_length`` to 1024 characters.

    With ``min_length`` below :data:`MIN_PASSWORD_LENGTH` (the API's ``create_user`` and
    ``change_password`` default to 0, as the original project accepted any password), a
    shorter password is accepted with a warning in the log. The CLI keeps refusing them.

    Raises:
        InvalidOperation: not a string, empty, shorter than ``min_length`` or too long.
    """
    if not isinstance(password, str):
        raise InvalidOperation("a password must be a string")
    if not password:
        raise InvalidOperation("a password must not be empty")
    if len(password) < min_length:
        raise InvalidOperation(f"a password needs at least {min_length} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise InvalidOperation(f"a password may have at most {MAX_PASSWORD_LENGTH} characters")
    if len(password) < MIN_PASSWORD_LENGTH:
        logger.warning(
            "a password of %d characters is accepted, but at least %d are recommended",
            len(password),
            MIN_PASSWORD_LENGTH,
        )
    return password
