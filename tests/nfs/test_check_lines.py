"""The line check of a WRITE that rewrites data.csv (``WriteRules.check_lines``): the
records the staging holds at the same offsets as its base are the base's rows and are
not parsed again; every other record is, and a bad one is refused on the reply that
completes it, its error naming its line in the file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import NfsError
from nfs.table.tablefs import DATA_CSV_ID, TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import parse_csv
from tests.nfs.conftest import FakeClock

A = CallContext.local(peer="10.0.0.1:700")


@pytest.fixture
def db(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "note": "String"}, engine="local")
    notes = [f"note {i}" for i in range(400)]
    notes[200] = 'two\nlines, "quoted"'  # a record of two lines, in quotes
    d.insert({"id": list(range(400)), "note": notes})
    return d


@pytest.fixture
def fs(db: DatabaseOps, clock: FakeClock, tmp_path: Path) -> Iterator[TableFs]:
    f = TableFs(db, clock=clock, idle_timer=False, state_dir=tmp_path / "state")
    yield f
    f.close()


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The byte counts the line check parses (the real parse_csv runs)."""
    sizes: list[int] = []
    real = parse_csv

    def spy(data: bytes | memoryview, *args: object, **kwargs: object) -> object:
        sizes.append(len(data))
        return real(data, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("nfs.table.writes.parse_csv", spy)
    return sizes


def _current(fs: TableFs) -> bytes:
    size = fs.getattr(DATA_CSV_ID, A).size
    data, _eof = fs.read(DATA_CSV_ID, 0, size, A)
    return bytes(data)


def _rewrite(fs: TableFs, content: bytes) -> None:
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, content, StableHow.UNSTABLE, A)


def _status(e: pytest.ExceptionInfo[NfsError]) -> Nfsstat3:
    return Nfsstat3(e.value.status)


def test_only_the_records_after_the_common_prefix_are_parsed(
    fs: TableFs, db: DatabaseOps, clock: FakeClock, parsed: list[int]
) -> None:
    old = _current(fs)
    new = old.replace(b"\n390,note 390\n", b"\n390,changed\n")
    assert new != old
    _rewrite(fs, new)
    assert parsed and max(parsed) < len(new) // 10  # the last records, not the file
    fs.commit(DATA_CSV_ID, 0, 0, A)
    clock.advance(60)
    fs.poll()
    assert {r["id"]: r["note"] for r in db.to_arrow().to_pylist()}[390] == "changed"


def test_a_bad_line_after_the_same_records_is_refused_and_named_by_its_line(
    fs: TableFs, db: DatabaseOps
) -> None:
    old = _current(fs)
    line = old[: old.index(b"\n300,")].count(b"\n") + 2  # data.csv's line of id 300
    new = old.replace(b"\n300,note 300\n", b"\nthree hundred,note 300\n")
    version = db.version
    with pytest.raises(NfsError) as e:
        _rewrite(fs, new)
    assert _status(e) == Nfsstat3.NFS3ERR_INVAL
    assert f"line {line}" in str(e.value)
    assert db.version == version


def test_a_change_inside_a_quoted_record_of_two_lines_is_parsed_whole(
    fs: TableFs, db: DatabaseOps, clock: FakeClock, parsed: list[int]
) -> None:
    """The common prefix ends in the second line of a quoted record: the check takes the
    record whole, so a good change there is taken and a bad one refused, named by the
    line the record starts on."""
    old = _current(fs)
    assert b'\n200,"two\nlines, ""quoted"""\n' in old
    bad = old.replace(b'lines, ""quoted"""\n201,', b'lines, ""quoted""",extra\n201,')
    with pytest.raises(NfsError) as e:
        _rewrite(fs, bad)
    assert _status(e) == Nfsstat3.NFS3ERR_INVAL
    line = old[: old.index(b"\n200,")].count(b"\n") + 2
    assert f"line {line}" in str(e.value)
    good = old.replace(b'lines, ""quoted"""\n201,', b'lines, ""QUOTED"""\n201,')
    _rewrite(fs, good)
    fs.commit(DATA_CSV_ID, 0, 0, A)
    clock.advance(60)
    fs.poll()
    notes = {r["id"]: r["note"] for r in db.to_arrow().to_pylist()}
    assert notes[200] == 'two\nlines, "QUOTED"'


def test_a_changed_header_is_checked_whole(fs: TableFs, parsed: list[int]) -> None:
    old = _current(fs)
    with pytest.raises(NfsError) as e:
        _rewrite(fs, b"id,notes" + old[len(b"id,note") :])
    assert _status(e) == Nfsstat3.NFS3ERR_INVAL and "header" in str(e.value)
