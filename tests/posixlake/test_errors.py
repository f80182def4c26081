"""The PosixLakeError tree: categories, aliases on the base class, finer subclasses."""

from __future__ import annotations

import builtins

import pytest

import posixlake
from posixlake import errors

CATEGORIES = [
    "IoError",
    "SerializationError",
    "DeltaLakeError",
    "InvalidOperation",
    "QueryError",
    "AuthenticationError",
    "PermissionDenied",
    "SchemaError",
    "VersionError",
    "StorageError",
    "NetworkError",
    "TimeoutError",
    "NotFound",
    "AlreadyExists",
]


@pytest.mark.parametrize("name", CATEGORIES)
def test_category_is_reachable_three_ways(name: str) -> None:
    cls = getattr(errors, name)
    assert getattr(errors.PosixLakeError, name) is cls
    assert getattr(posixlake, name) is cls
    assert issubclass(cls, errors.PosixLakeError)
    assert name in errors.__all__


@pytest.mark.parametrize(
    ("child", "parent"),
    [
        (errors.CommitConflict, errors.DeltaLakeError),
        (errors.DuplicateKeyError, errors.InvalidOperation),
        (errors.NetworkError, errors.StorageError),
    ],
)
def test_finer_errors_subclass_a_category(child: type, parent: type) -> None:
    assert issubclass(child, parent)
    assert issubclass(child, errors.PosixLakeError)


def test_errors_are_exceptions_with_messages() -> None:
    with pytest.raises(errors.PosixLakeError.QueryError, match="bad SQL"):
        raise errors.QueryError("bad SQL")
    err = errors.SchemaError("column 'x'")
    assert str(err) == "column 'x'"
    assert isinstance(err, Exception)


def test_catching_the_base_catches_every_category() -> None:
    for name in CATEGORIES:
        with pytest.raises(errors.PosixLakeError):
            raise getattr(errors, name)("x")


def test_timeout_error_does_not_shadow_the_builtin_in_other_modules() -> None:
    assert errors.TimeoutError.__module__ == "posixlake.errors"
    assert not issubclass(errors.TimeoutError, builtins.TimeoutError)


def test_categories_are_distinct() -> None:
    classes = [getattr(errors, n) for n in CATEGORIES]
    assert len(set(classes)) == len(classes)
    # no category (other than the listed subclasses) derives from another
    for a in classes:
        for b in classes:
            if a is not b and issubclass(a, b):
                assert (a, b) == (errors.NetworkError, errors.StorageError)
