"""LakeFs under the calls a real client and an adversary make: handles held across the
LRU's evictions, evictions racing calls, READDIR pages while tables come and go (real
Delta tables in tmp_path, the local engine; listings from an injected discovery)."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nfs.lake.discovery import discover_tables
from nfs.lake.ids import SlotMap
from nfs.lake.lakefs import LakeFs, LakeTable
from nfs.lake.opening import table_creator, tablefs_opener
from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.server import NfsServer
from nfs.protocol.vfs import FileId, NfsError
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock
from tests.nfs.test_lake import ROOT, cat, make_table, names, new_lake, walk


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    make_table(lake, "sales")
    make_table(lake, "ops/events")
    return lake


@pytest.fixture
def small(root: Path, clock: FakeClock, tmp_path: Path) -> Iterator[LakeFs]:
    """A lake keeping one table open: any use of another table evicts the first."""
    fs = new_lake(root, clock, tmp_path / "state", max_open=1, keep_open=0.0)
    yield fs
    fs.close()


# -- handles held across an eviction


def test_a_data_csv_handle_survives_the_eviction_of_its_table_after_a_write(
    small: LakeFs,
) -> None:
    # a client keeps data.csv open (tail -f, a program holding the fd), appends to it, and
    # is idle long enough for the LRU to close the table: its handle must go on working,
    # as it does in a single-table share for the life of the server
    csv = walk(small, "sales/data/data.csv")
    schema = walk(small, "sales/schema.sql")
    before = {fid: small.generation(fid) for fid in (csv, schema)}
    content = cat(small, "sales/data/data.csv")
    small.write(csv, len(content), b"7,seven\n", StableHow.FILE_SYNC, ROOT)
    cat(small, "ops/events/data/data.csv")  # sales is evicted
    assert "sales" not in small.open_tables()
    assert {fid: small.generation(fid) for fid in (csv, schema)} == before
    data, _ = small.read(csv, 0, 1 << 20, ROOT)
    assert bytes(data).endswith(b"7,seven\n")


def test_a_table_made_again_at_its_path_makes_the_old_handles_stale(
    small: LakeFs, root: Path, clock: FakeClock
) -> None:
    csv = walk(small, "sales/data/data.csv")
    gen = small.generation(csv)
    cat(small, "ops/events/data/data.csv")  # sales is evicted
    shutil.rmtree(root / "sales")
    make_table(root, "sales", rows=5)
    clock.advance(1)
    try:  # every call checks the handle's generation first: it must not match
        assert small.generation(csv) != gen
    except NfsError as err:
        assert err.status == Nfsstat3.NFS3ERR_STALE


# -- an eviction racing an open of the same table


class _SlowClose(TableFs):
    """A table face whose close runs ``during_close`` first (while the lake closes it)."""

    during_close: ClassVar[list[threading.Thread]] = []

    def close(self) -> None:
        while self.during_close:
            thread = self.during_close.pop()
            thread.start()
            # the old code opens the table again meanwhile; the fixed one makes the new
            # open wait for this close (the bounded join lets this close go on then)
            thread.join(5)
        super().close()


def test_a_table_is_not_opened_again_while_its_eviction_closes_it(
    root: Path, clock: FakeClock, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    live: dict[str, int] = {}
    overlapped: list[str] = []
    lock = threading.Lock()

    def opener(path: str) -> LakeTable:
        db = DatabaseOps.open(root / path, engine="local")
        digest = hashlib.sha256(path.encode()).hexdigest()[:20]
        with lock:
            if live.get(path):
                overlapped.append(path)
            live[path] = live.get(path, 0) + 1
        fs = _SlowClose(db, state_dir=state / "tables" / digest, idle_timer=False, clock=clock)
        original = fs.close

        def close() -> None:
            original()
            with lock:
                live[path] -= 1

        fs.close = close  # type: ignore[method-assign]
        return LakeTable(fs)

    lake = LakeFs(str(root), opener, state_dir=state, clock=clock, max_open=1, keep_open=0.0)
    try:
        cat(lake, "sales/data/data.csv")
        again = threading.Thread(target=cat, args=(lake, "sales/data/data.csv"))
        _SlowClose.during_close.append(again)
        cat(lake, "ops/events/data/data.csv")  # evicts sales; its close reads sales again
        again.join()
        assert overlapped == []
        # and so the table's journals stay in their one directory (recovered at restart)
        assert sorted(p.name for p in (state / "tables").iterdir()) == sorted(
            hashlib.sha256(t.encode()).hexdigest()[:20] for t in ("sales", "ops/events")
        )
    finally:
        _SlowClose.during_close.clear()
        lake.close()


# -- READDIR of the lake while tables come and go between pages


@given(
    st.sets(st.sampled_from("abcdefghij"), min_size=1),
    st.lists(st.sets(st.sampled_from("abcdefghij")), max_size=6),
    st.integers(1, 4),
)
def test_readdir_pages_list_every_table_there_throughout_exactly_once(
    first: set[str], changes: list[set[str]], page: int
) -> None:
    current = sorted(first)
    clock = FakeClock()

    def no_open(path: str) -> LakeTable:
        raise AssertionError(f"listing opened {path}")

    fs = LakeFs("/lake", no_open, clock=clock, discover=lambda: list(current))
    throughout = set(first)
    seen: list[str] = []
    after, pending = 0, list(changes)
    while True:
        got = fs.readdir(fs.root_dir(), after=after, max_entries=page, ctx=ROOT)
        seen += [e.name for e in got.entries if e.name not in (".", "..")]
        if got.entries:
            after = got.entries[-1].cookie
        if got.eof:
            break
        if pending:  # tables made and removed elsewhere between two pages
            current[:] = sorted(pending.pop(0))
            throughout &= set(current)
            clock.advance(1)
    assert len(seen) == len(set(seen)), f"listed twice: {seen}"
    assert throughout <= set(seen), f"missed {throughout - set(seen)}"
    assert sorted(names(fs, fs.root_dir())) == sorted(current)


# -- tables made by writing


@pytest.fixture
def making(root: Path, clock: FakeClock, tmp_path: Path) -> Iterator[LakeFs]:
    """A lake where MKDIR + schema.sql make tables."""
    state = tmp_path / "state"
    opener = tablefs_opener(
        str(root), state_dir=state, engine={"engine": "local"}, tablefs={"idle_timer": False}
    )
    creator = table_creator(str(root), engine={"engine": "local"})
    fs = LakeFs(str(root), opener, state_dir=state, clock=clock, creator=creator)
    yield fs
    fs.close()


SCHEMA_SQL = b"CREATE TABLE t (id BIGINT NOT NULL, name STRING, PRIMARY KEY (id))\n"


def test_a_resent_write_that_created_the_table_succeeds_again(making: LakeFs, root: Path) -> None:
    # the reply to the FILE_SYNC WRITE that created the table is lost, and the client
    # resends it from a new connection (another port: the DRC does not know it)
    new = making.mkdir(making.root_dir(), "fresh", Sattr3(), ROOT)
    fid = making.create(new, "schema.sql", Sattr3(size=0), ROOT, guarded=False)
    assert making.write(fid, 0, SCHEMA_SQL, StableHow.FILE_SYNC, ROOT) == (
        len(SCHEMA_SQL),
        StableHow.FILE_SYNC,
    )
    assert making.write(fid, 0, SCHEMA_SQL, StableHow.FILE_SYNC, ROOT) == (
        len(SCHEMA_SQL),
        StableHow.FILE_SYNC,
    )
    making.commit(fid, 0, 0, ROOT)
    assert DatabaseOps.open(root / "fresh", engine="local").version == 0  # made once
    with pytest.raises(NfsError) as exc:  # other bytes are a change of a table's schema
        making.write(fid, 0, b"CREATE TABLE t (x INT)\n", StableHow.FILE_SYNC, ROOT)
    assert exc.value.status == Nfsstat3.NFS3ERR_ACCES


@pytest.mark.parametrize("name", ["x%20y", "caf%C3%A9", "a%2Fb"])
def test_a_table_name_delta_would_read_percent_decoded_is_refused_at_mkdir(
    making: LakeFs, root: Path, name: str
) -> None:
    # delta-rs decodes %XX in a table's path after committing version 0 at the literal
    # one: such a table is made but never opens again
    with pytest.raises(NfsError) as exc:
        making.mkdir(making.root_dir(), name, Sattr3(), ROOT)
    assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
    assert not (root / name).exists()
    making.mkdir(making.root_dir(), "100%", Sattr3(), ROOT)  # a % alone is fine


# -- a server stop with unfinished edits in several tables


def test_unfinished_edits_of_several_tables_are_recovered_each_into_its_table(
    root: Path, clock: FakeClock, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first = new_lake(root, clock, state)
    added = {"sales": b"7,seven\n", "ops/events": b"8,eight\n"}
    for table, row in added.items():
        csv = walk(first, f"{table}/data/data.csv")
        content = cat(first, f"{table}/data/data.csv")
        first.write(csv, len(content), row, StableHow.UNSTABLE, ROOT)
    first.close()
    assert first.unfinished_at_close == 2
    second = new_lake(root, clock, state)
    try:
        for table in added:  # recovered at open, applied when the writer is idle
            walk(second, f"{table}/data/data.csv")
        clock.advance(3600)
        second.poll()
        for table, row in added.items():
            rows = DatabaseOps.open(root / table, engine="local").to_arrow().to_pylist()
            want = int(row.split(b",")[0])
            assert sorted(r["id"] for r in rows) == [0, 1, want], table
    finally:
        second.close()


def test_a_table_restored_onto_its_path_while_open_makes_data_csv_handles_stale(
    small: LakeFs, root: Path, clock: FakeClock, tmp_path: Path
) -> None:
    # the table face's rule (a replaced table's data.csv handles go stale) holds in the
    # lake too: keeping handles across evictions does not keep them across a restore
    sales = DatabaseOps.open(root / "sales", engine="local")
    sales.backup(tmp_path / "bk")
    sales.insert([{"id": 9, "name": "nine"}])
    csv = walk(small, "sales/data/data.csv")
    gen = small.generation(csv)
    DatabaseOps.restore(tmp_path / "bk", sales.uri, overwrite=True)
    clock.advance(1)
    assert cat(small, "sales/data/data.csv").count(b"\n") == 3
    assert small.generation(walk(small, "sales/data/data.csv")) != gen


def test_the_lake_verifier_stays_changed_after_a_table_that_lost_writes_closes(
    root: Path, clock: FakeClock, tmp_path: Path
) -> None:
    # a v3 writer's UNSTABLE data is dropped (the table is restored onto its path, as
    # the table face does); the restore's rewrite of the log hides the table from one
    # listing, which closes it: the verifier must not go back to what the writer holds,
    # or its COMMIT would pass and the data would be lost silently
    hidden: set[str] = set()
    state = tmp_path / "state"
    opener = tablefs_opener(
        str(root),
        state_dir=state,
        engine={"engine": "local"},
        tablefs={"idle_timer": False, "clock": clock},
    )
    lake = LakeFs(
        str(root),
        opener,
        state_dir=state,
        clock=clock,
        discover=lambda: [t for t in discover_tables(str(root)) if t not in hidden],
    )
    try:
        sales = DatabaseOps.open(root / "sales", engine="local")
        sales.backup(tmp_path / "bk")
        sales.insert([{"id": 5, "name": "five"}])
        csv = walk(lake, "sales/data/data.csv")
        content = cat(lake, "sales/data/data.csv")
        lake.write(csv, len(content), b"7,seven\n", StableHow.UNSTABLE, ROOT)
        held = lake.write_verifier()
        DatabaseOps.restore(tmp_path / "bk", sales.uri, overwrite=True)
        clock.advance(1)
        other = CallContext.local(peer="10.0.0.9:801")  # another client's read
        lake.read(csv, 0, 1 << 20, other)  # the face sees the replaced table
        assert lake.write_verifier() != held
        hidden.add("sales")
        clock.advance(1)
        assert "sales" not in lake.tables() and "sales" not in lake.open_tables()
        hidden.clear()
        clock.advance(1)
        assert "sales" in lake.tables()
        assert lake.write_verifier() != held
    finally:
        lake.close()


# -- slots.json


@pytest.mark.parametrize(
    "text",
    ['{"a": 5, "b": 5}', '{"a": 5, "b": "5"}', "not json", '["a"]', '{"a": 0, "b": 16777216}'],
)
def test_a_damaged_slots_json_never_gives_two_tables_one_slot(tmp_path: Path, text: str) -> None:
    path = tmp_path / "slots.json"
    path.write_text(text)
    slots = SlotMap(path)
    slots.assign(["a", "b"])
    a, b = slots.slot_of("a"), slots.slot_of("b")
    assert a is not None and b is not None and a != b
    assert (slots.table_of(a), slots.table_of(b)) == ("a", "b")
    again = SlotMap(path)  # and what it saved reads back the same
    assert (again.slot_of("a"), again.slot_of("b")) == (a, b)


def test_a_new_table_is_not_made_inside_a_directory_holding_other_files(
    making: LakeFs, root: Path
) -> None:
    # raw/ holds no table, so the lake does not show it: a client's `mkdir raw` and its
    # schema.sql must not turn the files there into a table's directory (a VACUUM of that
    # table would delete them as untracked files)
    (root / "raw").mkdir()
    (root / "raw" / "keep.parquet").write_bytes(b"not a table's")
    new = making.mkdir(making.root_dir(), "raw", Sattr3(), ROOT)
    fid = making.create(new, "schema.sql", Sattr3(size=0), ROOT, guarded=False)
    with pytest.raises(NfsError) as exc:
        making.write(fid, 0, SCHEMA_SQL, StableHow.FILE_SYNC, ROOT)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    assert sorted(p.name for p in (root / "raw").iterdir()) == ["keep.parquet"]
    (root / "empty").mkdir()  # an empty directory is fine
    new = making.mkdir(making.root_dir(), "empty", Sattr3(), ROOT)
    fid = making.create(new, "schema.sql", Sattr3(size=0), ROOT, guarded=False)
    making.write(fid, 0, SCHEMA_SQL, StableHow.FILE_SYNC, ROOT)
    assert DatabaseOps.open(root / "empty", engine="local").version == 0


# -- discovery


def test_discovery_does_not_follow_a_symlink_back_up_the_lake(root: Path) -> None:
    # a link to an ancestor (`ops/all -> ..`) made the search go round until ELOOP, and
    # the whole lake could not be listed (no serve); links are not followed, as `find`
    (root / "ops" / "all").symlink_to("..")
    (root / "ops" / "sales_link").symlink_to(root / "sales")
    assert discover_tables(str(root)) == ["ops/events", "sales"]


# -- a table the server's login may not open


def test_a_refused_table_is_not_opened_again_on_every_call(
    root: Path, clock: FakeClock, tmp_path: Path
) -> None:
    # each attempt loads the table's Delta log (GETs on S3): a client calling into a
    # refused table in a loop must not cost one load per call; it is tried again once
    # the listing is renewed (permissions may have changed)
    db = make_table(root, "secret")
    db.enable_auth(("admin", "correct horse battery"))
    state = tmp_path / "state"
    inner = tablefs_opener(
        str(root), state_dir=state, engine={"engine": "local"}, tablefs={"idle_timer": False}
    )
    tries: list[str] = []

    def opener(path: str) -> LakeTable:
        tries.append(path)
        return inner(path)

    lake = LakeFs(str(root), opener, state_dir=state, clock=clock)
    try:
        secret = walk(lake, "secret")
        for _ in range(5):
            with pytest.raises(NfsError) as exc:
                lake.lookup(secret, "data", ROOT)
            assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
            assert lake.access(secret, 0x3F, ROOT) == 0
        assert tries == ["secret"]
        clock.advance(1)
        with pytest.raises(NfsError):
            lake.lookup(secret, "data", ROOT)
        assert tries == ["secret", "secret"]
    finally:
        lake.close()


# -- the Linux kernel client (nfs-vm)


def test_the_kernel_client_reads_an_open_data_csv_after_its_table_was_evicted(
    root: Path, tmp_path: Path
) -> None:
    from tests.nfs.vmclient import require_vm, run_in_vm

    require_vm()
    state = tmp_path / "state"
    opener = tablefs_opener(str(root), state_dir=state, engine={"engine": "local"})
    lake = LakeFs(str(root), opener, state_dir=state, max_open=1, keep_open=0.0)
    script = """
        exec 3< /mnt/sales/data/data.csv
        cat <&3; echo --
        echo '7,seven' >> /mnt/sales/data/data.csv; echo "append=$?"
        cat /mnt/ops/events/data/data.csv > /dev/null; echo "other=$?"
        cat <&3 2>&1; echo "again=$?"
    """
    with NfsServer(lake) as server:
        res = run_in_vm(server.port, script, vers="4.0", opts="noac", timeout=180)
    assert res.returncode == 0, res.stderr
    first, rest = res.stdout.split("--\n")
    assert first == "id,name\n0,sales-0\n1,sales-1\n"
    assert "append=0" in rest and "other=0" in rest
    assert rest.rstrip().endswith("7,seven\nagain=0"), rest


def test_a_scan_of_many_tables_keeps_the_open_tables_bounded(
    tmp_path: Path, clock: FakeClock
) -> None:
    # `grep -r` / `wc -l */data/data.csv` over a large lake reads every table within
    # keep_open seconds: each open table holds ~5 file descriptors (and a timer thread),
    # so "none idle for 30 s" must not let the open tables grow with the lake
    root = tmp_path / "lake"
    for i in range(7):
        make_table(root, f"t{i}", rows=1)
    lake = new_lake(root, clock, tmp_path / "state", max_open=2, keep_open=30.0)
    try:
        for i in range(7):
            assert cat(lake, f"t{i}/data/data.csv") == f"id,name\n0,t{i}-0\n".encode()
            assert len(lake.open_tables()) <= 4  # twice the bound at most
        csv = walk(lake, "t6/data/data.csv")  # a staged write is still never evicted
        lake.write(csv, 0, b"id,name\n5,five\n", StableHow.UNSTABLE, ROOT)
        for i in range(6):
            cat(lake, f"t{i}/data/data.csv")
        assert "t6" in lake.open_tables()
    finally:
        lake.close()


def test_a_partition_data_csv_handle_survives_the_eviction_of_its_table(
    small: LakeFs, root: Path
) -> None:
    # /partitions/<col>=<value>/data.csv follows data.csv's rule in the table face: so
    # does it across the LRU's reopening (tail -f of one partition)
    with DatabaseOps.create(
        root / "parts", {"id": "Int64", "region": "String"}, partition_by=["region"], engine="local"
    ) as db:
        db.insert([{"id": 1, "region": "eu"}, {"id": 2, "region": "us"}])
    small.refresh()
    part = walk(small, "parts/partitions/region=eu/data.csv")
    gen = small.generation(part)
    db = DatabaseOps.open(root / "parts", engine="local")
    db.insert([{"id": 3, "region": "eu"}])  # the table moves on while it is open
    cat(small, "sales/data/data.csv")  # parts is evicted
    assert "parts" not in small.open_tables()
    assert small.generation(part) == gen
    data, _ = small.read(part, 0, 1 << 16, ROOT)
    assert sorted(bytes(data).splitlines()[1:]) == [b"1,eu", b"3,eu"]


def test_a_scratch_handle_from_before_an_eviction_never_reaches_another_file(
    small: LakeFs,
) -> None:
    # scratch ids are handed out afresh by the reopened face: an old handle must be
    # stale, never the new file that got its id (the kept generations leave them alone)
    data = walk(small, "sales/data")
    old = small.create(data, "a.tmp", Sattr3(), ROOT, guarded=True)
    small.write(old, 0, b"first file\n", StableHow.FILE_SYNC, ROOT)
    gen = small.generation(old)
    cat(small, "ops/events/data/data.csv")  # sales is evicted
    new = small.create(walk(small, "sales/data"), "b.tmp", Sattr3(), ROOT, guarded=True)
    small.write(new, 0, b"second file\n", StableHow.FILE_SYNC, ROOT)
    try:
        same = small.generation(old) == gen
    except NfsError as err:
        assert err.status == Nfsstat3.NFS3ERR_STALE
        same = False
    if same:  # a live handle: then of the same file
        got, _ = small.read(old, 0, 100, ROOT)
        assert bytes(got) == b"first file\n"
    assert small.lookup(walk(small, "sales/data"), "a.tmp", ROOT) != new


# -- the LRU against a model: handles held across any sequence of uses and evictions


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = tmp_path_factory.mktemp("three") / "lake"
    for name in ("t0", "t1", "d/t2"):
        make_table(lake, name, rows=2)
    return lake


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from(["t0", "t1", "d/t2"]), st.booleans(), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_held_handles_always_read_their_own_table_across_evictions(
    three: Path, tmp_path: Path, steps: list[tuple[str, bool, bool]]
) -> None:
    clock = FakeClock()
    state = tmp_path / f"state-{len(list(tmp_path.iterdir()))}"
    lake = new_lake(three, clock, state, max_open=1, keep_open=0.0)
    held: dict[str, FileId] = {}
    try:
        for table, fresh, relist in steps:
            if fresh or table not in held:
                held[table] = walk(lake, f"{table}/data/data.csv")
            gen = lake.generation(held[table])
            assert gen == lake.generation(walk(lake, f"{table}/data/data.csv"))
            data, _ = lake.read(held[table], 0, 1 << 16, ROOT)
            assert bytes(data) == f"id,name\n0,{table}-0\n1,{table}-1\n".encode()
            assert len(lake.open_tables()) <= 1
            if relist:
                clock.advance(1)
    finally:
        lake.close()


def test_discovery_skips_a_directory_it_may_not_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory the server may not read (a root-owned lost+found when it is not root)
    is no table: the rest of the lake is found, and the refusal is logged."""
    root = tmp_path / "lake"
    DatabaseOps.create(root / "sales", {"id": "int"}, engine="local")
    (root / "lost+found").mkdir()
    real = os.scandir

    def scandir(path: str) -> Any:  # the OS refusing one directory (tests run as root)
        if os.path.basename(path) == "lost+found":
            raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with caplog.at_level(logging.WARNING, logger="nfs.lake.discovery"):
        assert discover_tables(str(root)) == ["sales"]
    assert "lost+found" in caplog.text
