"""A rewrite of data.csv applied from its changed regions equals one applied from the whole file.

``nfs.table.apply`` parses only the records of the regions where the content differs from its
base (between the common prefix and the common suffix, split where long runs of the same
bytes lie between changes; cut at record boundaries: quotes may hold line feeds), and with
a primary key reads the base rows of the keys it touches, or that the base repeats. The
reference is the same apply with the region search switched off (``changed_regions``
returning None: the whole content parsed and diffed against ``db.to_arrow(version=...)``):
for random tables (several data files, quotes, commas, line feeds, NULLs, repeated keys) and
random edits (rows replaced, removed, inserted, duplicated; bytes cut anywhere), both end in
the same rows, or both refuse with the same error. With tiny anchors and runs, the small
tables of these tests are split into many regions, false anchors included.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nfs.table.apply as apply_module
import nfs.table.region as region_module
from nfs.table.apply import apply_content
from nfs.table.segkeys import SegmentKeys
from nfs.table.segments import Segmenter, SegmentStore
from nfs.table.staging import BytesBase
from posixlake import DatabaseOps
from posixlake.csvcodec import parse_csv, render_csv
from posixlake.errors import PosixLakeError

SCHEMA = {"id": "Int64", "name": "String", "score": "Float64"}
_text = st.text(alphabet=st.sampled_from("ab ,\"\n'é"), max_size=5) | st.none()
_score = st.sampled_from([0.0, 1.5, -2.25, 1e-7, None])


def _row(draw: Any, ident: int) -> dict[str, Any]:
    return {"id": ident, "name": draw(_text), "score": draw(_score)}


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(
        rows, schema=pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    )


def _state(db: DatabaseOps) -> list[tuple[Any, ...]]:
    rows = db.to_arrow().to_pylist()
    return sorted((tuple(r.values()) for r in rows), key=repr)


def _small_regions(patch: pytest.MonkeyPatch) -> None:
    """Anchors of 3 bytes, runs of 6, comparisons of 5 bytes growing to chunks of 24, and
    regions past 8 bytes paired line by line: a table of a few rows has many regions and
    paired chunks."""
    patch.setattr(region_module, "_ANCHOR", 3)
    patch.setattr(region_module, "_MIN_RUN", 6)
    patch.setattr(region_module, "_PROBE_LIMIT", 48)
    patch.setattr(region_module, "_CHUNK", 24)
    patch.setattr(region_module, "_FIRST_STEP", 5)
    patch.setattr(region_module, "_PAIRED", 8)


def _outcome(
    path: Path,
    batches: list[list[dict[str, Any]]],
    keyed: bool,
    content: bytes,
    whole: bool,
    small: bool = False,
) -> tuple[str, list[tuple[Any, ...]]]:
    db = DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id" if keyed else None)
    for batch in batches:  # one data file each; written by delta-rs: keys may repeat
        write_deltalake(db.uri, _table(batch), mode="append")
    version = db.version
    segmenter = Segmenter(db, SegmentStore(path.parent / f"{path.name}-cache"), workers=1)
    try:
        base = segmenter(version)
        with pytest.MonkeyPatch.context() as patch:
            if whole:
                patch.setattr(apply_module, "changed_regions", lambda *_: None)
            if small:
                _small_regions(patch)
            try:
                keys = SegmentKeys(segmenter)
                apply_content(db, content, base_version=version, base=base, keys=keys)
                result = "ok"
            except PosixLakeError as err:
                result = type(err).__name__
        return result, _state(db)
    finally:
        segmenter.close()


@st.composite
def _case(draw: st.DrawFn) -> tuple[list[list[dict[str, Any]]], bool, bytes]:
    keyed = draw(st.booleans())
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    batches: list[list[dict[str, Any]]] = []
    ident = 0
    for n in sizes:
        batch = []
        for _ in range(n):
            batch.append(_row(draw, ident))
            ident += 1
        batches.append(batch)
    if draw(st.booleans()):  # a key (or whole row) that two processes once inserted
        batches.append([dict(draw(st.sampled_from([r for b in batches for r in b])))])
    rows = [r for b in batches for r in b]
    schema = _table(rows).schema
    edited = list(rows)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["replace", "remove", "insert", "duplicate", "move"]))
        i = draw(st.integers(0, max(0, len(edited) - 1)))
        if op == "replace" and edited:
            edited[i] = _row(draw, edited[i]["id"])
        elif op == "remove" and edited:
            del edited[i]
        elif op == "insert":
            edited.insert(i, _row(draw, draw(st.integers(0, ident + 2))))
        elif op == "duplicate" and edited:
            edited.insert(draw(st.integers(0, len(edited))), dict(edited[i]))
        elif op == "move" and edited:
            edited.append(edited.pop(i))
    content = render_csv(_table(edited).cast(schema)) if edited else render_csv(_table([]))
    if draw(st.integers(0, 4)) == 0:  # bytes cut anywhere: a quote or a line feed may go
        a = draw(st.integers(0, len(content)))
        b = draw(st.integers(a, min(len(content), a + 4)))
        content = content[:a] + content[b:]
    return batches, keyed, content


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case(), small=st.booleans())
def test_a_rewrite_applied_from_its_regions_equals_one_applied_whole(
    tmp_path_factory: pytest.TempPathFactory,
    case: tuple[list[list[dict[str, Any]]], bool, bytes],
    small: bool,
) -> None:
    batches, keyed, content = case
    work = tmp_path_factory.mktemp("region")
    region = _outcome(work / "region", batches, keyed, content, whole=False, small=small)
    whole = _outcome(work / "whole", batches, keyed, content, whole=True)
    assert region == whole


def _parsed_rows_of_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool, rows: int, edits: list[int]
) -> tuple[list[int], DatabaseOps, bytes]:
    """Rename the rows ``edits`` of a table of ``rows`` rows (3 data files) by a whole-file
    rewrite; return how many rows each parse saw, the table and the content."""
    db = DatabaseOps.create(
        tmp_path / "t", SCHEMA, engine="local", primary_key="id" if keyed else None
    )
    step = rows // 3
    for start in range(0, rows, step):
        db.insert(
            _table([{"id": i, "name": f"n{i}", "score": 1.0} for i in range(start, start + step)])
        )
    segmenter = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=1)
    base = segmenter(db.version)
    content = bytes(base.read(0, base.size)[0])
    for i in edits:
        content = content.replace(f"\n{i},n{i},".encode(), f"\n{i},changed,".encode())
    parsed: list[int] = []
    real = parse_csv

    def counting(data: Any, *args: Any, **kwargs: Any) -> pa.Table:
        table = real(data, *args, **kwargs)
        parsed.append(table.num_rows)
        return table

    monkeypatch.setattr(apply_module, "parse_csv", counting)
    try:
        applied = apply_content(
            db, content, base_version=db.version, base=base, keys=SegmentKeys(segmenter)
        )
    finally:
        monkeypatch.undo()
        segmenter.close()
    changed = applied.updated if keyed else applied.inserted  # unkeyed: -old +new rows
    assert applied.kind == "diff" and changed == len(edits)
    return parsed, db, content


def test_a_one_row_change_in_the_middle_parses_only_its_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed, db, content = _parsed_rows_of_edit(tmp_path, monkeypatch, True, 3000, [1500])
    assert sum(parsed) <= 2  # the changed record, old and new: not 3,000 rows
    assert db.query("SELECT name FROM data WHERE id = 1500").to_pylist() == [{"name": "changed"}]
    assert db.to_arrow().num_rows == 3000
    assert parse_csv(content, db.to_arrow().schema).num_rows == 3000


@pytest.mark.parametrize("keyed", [False, True])
def test_changes_far_apart_parse_only_their_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    """The first and the last rows of 30,000 changed (sed -i on two lines): two regions,
    the rows between are compared, never parsed."""
    parsed, db, _ = _parsed_rows_of_edit(tmp_path, monkeypatch, keyed, 30_000, [3, 29_990])
    assert sum(parsed) <= 4 + 1  # two records, old and new (and the header line)
    got = db.query("SELECT id FROM data WHERE name = 'changed' ORDER BY id").to_pylist()
    assert got == [{"id": 3}, {"id": 29_990}]
    assert db.to_arrow().num_rows == 30_000


@pytest.mark.parametrize("keyed", [False, True])
def test_a_change_after_a_quoted_line_feed_cuts_at_the_record(tmp_path: Path, keyed: bool) -> None:
    # the line feed inside "a\n5,b" is not a record boundary: a region starting after it
    # would read `5,b",1.5` as a row with id 5
    rows = [{"id": 1, "name": "x", "score": 0.0}, {"id": 2, "name": "a\n5,b", "score": 1.5}]
    batches = [rows, [{"id": 3, "name": "z", "score": 2.0}]]
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    for batch in batches:
        write_deltalake(db.uri, _table(batch), mode="append")
    segmenter = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=1)
    base = bytes(segmenter(db.version).read(0, 1 << 20)[0])
    segmenter.close()
    assert b'"a\n5,b",1.5\n' in base
    content = base.replace(b'"a\n5,b",1.5\n', b'"a\n5,b",2.5\n')
    region = _outcome(tmp_path / "region", batches, keyed, content, whole=False)
    assert region == _outcome(tmp_path / "whole", batches, keyed, content, whole=True)
    assert region[0] == "ok" and (2, "a\n5,b", 2.5) in region[1]


def _record_starts(data: bytes) -> set[int]:
    """Every offset where a record starts (after a line feed an even number of quotes
    precedes), the end of ``data`` included."""
    starts, quotes = {len(data)}, 0
    for i, byte in enumerate(data):
        if byte == ord('"'):
            quotes += 1
        elif byte == ord("\n") and quotes % 2 == 0:
            starts.add(i + 1)
    return starts


def _records(data: bytes) -> list[bytes]:
    """``data`` cut at its record starts (a last part without its line feed included)."""
    cuts = sorted(_record_starts(data) | {0})
    return [data[a:b] for a, b in pairwise(cuts) if b > a]


@st.composite
def _rewrite(draw: st.DrawFn) -> tuple[bytes, bytes]:
    lines = draw(
        st.lists(
            st.sampled_from(["1,a", '2,"b\nc"', "3,", '4,"q""q"', "5,x,y", "6,long name"]),
            max_size=60,
        )
    )
    base = ("id,name\n" + "".join(line + "\n" for line in lines)).encode()
    content = base
    for _ in range(draw(st.integers(1, 4))):  # edits after the header, far apart or not
        a = draw(st.integers(min(8, len(content)), len(content)))
        b = draw(st.integers(a, min(len(content), a + draw(st.integers(0, 6)))))
        new = draw(st.sampled_from([b"", b"9,z\n", b"\n", b"7", b"8,", b'"']))
        content = content[:a] + new + content[b:]
    return base, content


@settings(max_examples=300, deadline=None)
@given(case=_rewrite(), small=st.booleans())
def test_regions_cover_every_change_and_cut_at_records_of_the_base(
    case: tuple[bytes, bytes], small: bool
) -> None:
    base, content = case
    with pytest.MonkeyPatch.context() as patch:
        if small:
            _small_regions(patch)
        same, quotes = region_module.common_prefix(BytesBase(content), BytesBase(base))
        regions = region_module.changed_regions(BytesBase(content), BytesBase(base), same, quotes)
    if regions is None:
        return
    starts = _record_starts(base)
    rebuilt, at_base, at_content = b"", 0, 0
    for r in regions:
        assert at_base <= r.base_start <= r.base_end and at_content <= r.content_start
        assert r.content_start <= r.content_end
        assert r.base_start - at_base == r.content_start - at_content  # the same bytes between
        assert {r.base_start, r.base_end} <= starts
        rebuilt += base[at_base : r.base_start] + content[r.content_start : r.content_end]
        at_base, at_content = r.base_end, r.content_end
    assert len(base) - at_base == len(content) - at_content
    assert rebuilt + base[at_base:] == content
    with pytest.MonkeyPatch.context() as patch:  # the pieces differ as the regions do
        if small:
            _small_regions(patch)
        for r in regions:
            pieces = list(region_module.changed_pieces(BytesBase(content), BytesBase(base), r))
            old = Counter(_records(base[r.base_start : r.base_end]))
            new = Counter(_records(content[r.content_start : r.content_end]))
            old_pieces = Counter(x for before, _ in pieces for x in _records(before))
            new_pieces = Counter(x for _, after in pieces for x in _records(after))
            assert old - new == old_pieces - new_pieces and new - old == new_pieces - old_pieces
