"""A lake's ``<table>/partitions`` handles across server restarts: in process (a new LakeFs
on the same state directory), through the real NfsServer (an RPC client holding a handle
over the restart, libnfs-utils reading the restarted share), and the partition map file
against damage (Hypothesis): a handle survives while its partition exists and never
reaches another partition."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nfs.lake.ids import MAX_PARTITION_NUMBER, PartitionIds, split_id
from nfs.lake.lakefs import LakeFs
from nfs.lake.opening import tablefs_opener
from nfs.lake.tables import partition_map
from nfs.protocol.nfs3 import Nfsstat3
from nfs.protocol.rpc import CallContext
from nfs.protocol.server import NfsServer
from nfs.protocol.vfs import FileId, NfsError
from nfs.table.partitions import PARTITION_BASE, partition_id
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock
from tests.nfs.rpcclient import RpcClient

ROOT = CallContext.local()
needs_libnfs = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("nfs-ls", "nfs-cat")),
    reason="libnfs-utils not installed (apt install libnfs-utils)",
)


def make_parts(path: Path) -> None:
    with DatabaseOps.create(
        path, {"id": "Int64", "region": "String"}, partition_by=["region"], engine="local"
    ) as db:
        db.insert([{"id": 1, "region": "eu"}, {"id": 2, "region": "us"}, {"id": 3, "region": "eu"}])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    make_parts(lake / "parts")
    make_parts(lake / "ops" / "more")
    return lake


def new_lake(root: Path, state: Path) -> LakeFs:
    opener = tablefs_opener(
        str(root),
        state_dir=state,
        engine={"engine": "local"},
        tablefs={"idle_timer": False, "clock": FakeClock()},
    )
    return LakeFs(str(root), opener, state_dir=state, idle_timer=False)


def walk(fs: LakeFs, path: str) -> FileId:
    fid = fs.root_dir()
    for part in path.split("/"):
        fid = fs.lookup(fid, part, ROOT)
    return fid


def names(fs: LakeFs, fid: FileId) -> dict[str, FileId]:
    page = fs.readdir(fid, after=0, max_entries=1000, ctx=ROOT)
    return {e.name: e.fileid for e in page.entries if e.name not in (".", "..")}


def cat(fs: LakeFs, fid: FileId) -> bytes:
    data, _ = fs.read(fid, 0, 1 << 20, ROOT)
    return bytes(data)


def stale_or_other(fs: LakeFs, fid: FileId, gen: bytes) -> bool:
    """Whether the handle (fid, gen) is refused: its generation is not the current one."""
    try:
        return fs.generation(fid) != gen
    except NfsError as err:
        return err.status == Nfsstat3.NFS3ERR_STALE


def test_partition_handles_survive_a_restart(root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    before = new_lake(root, state)
    try:
        parts = names(before, walk(before, "parts/partitions"))  # READDIR numbers them
        eu_csv = walk(before, "parts/partitions/region=eu/data.csv")
        more_us = walk(before, "ops/more/partitions/region=us")
        held = {fid: before.generation(fid) for fid in (*parts.values(), eu_csv, more_us)}
        eu_rows = cat(before, eu_csv)
    finally:
        before.close()
    assert eu_rows == b"id,region\n1,eu\n3,eu\n"
    assert all(split_id(fid)[1] >> 37 == 4 for fid in held)  # numbered, not per boot
    after = new_lake(root, state)
    try:
        for fid, gen in held.items():  # every handle a client held is valid again
            assert after.generation(fid) == gen
        assert cat(after, eu_csv) == eu_rows
        assert names(after, more_us) == {
            "data.csv": walk(after, "ops/more/partitions/region=us/data.csv")
        }
        assert names(after, walk(after, "parts/partitions")) == parts  # the same ids
        assert walk(after, "parts/partitions/region=eu/data.csv") == eu_csv
    finally:
        after.close()


def test_a_handle_of_a_partition_gone_after_a_restart_is_stale(root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    before = new_lake(root, state)
    try:
        us = walk(before, "parts/partitions/region=us/data.csv")
    finally:
        before.close()
    with DatabaseOps.open(root / "parts", engine="local") as db:
        db.delete_rows_where("region = 'us'")
    after = new_lake(root, state)
    try:
        with pytest.raises(NfsError) as exc:
            after.read(us, 0, 100, ROOT)
        assert exc.value.status == Nfsstat3.NFS3ERR_STALE
    finally:
        after.close()


@pytest.mark.parametrize("damage", ["garbage", "duplicate", "foreign", "removed", "truncated"])
def test_a_damaged_partition_map_makes_old_handles_stale_never_another_partition(
    root: Path, tmp_path: Path, damage: str
) -> None:
    state = tmp_path / "state"
    before = new_lake(root, state)
    try:
        eu = walk(before, "parts/partitions/region=eu/data.csv")  # number 1
        walk(before, "ops/more/partitions/region=us/data.csv")  # another table's map
        eu_gen = before.generation(eu)
    finally:
        before.close()
    kept = partition_map(state, "parts")
    other = partition_map(state, "ops/more")
    if damage == "garbage":
        kept.write_bytes(b"\x00{not json")
    elif damage == "duplicate":
        body = json.loads(kept.read_text())
        body["ids"][str(partition_id(["region=us"]))] = 1  # two partitions, number 1
        kept.write_text(json.dumps(body))
    elif damage == "foreign":
        shutil.copy(other, kept)  # ops/more's map where parts' belongs
    elif damage == "removed":
        kept.unlink()
    else:
        kept.write_bytes(kept.read_bytes()[:20])
    after = new_lake(root, state)
    try:
        us = walk(after, "parts/partitions/region=us/data.csv")  # number 1 again, now us
        assert split_id(us)[1] == split_id(eu)[1]  # the very id the old eu handle has
        assert stale_or_other(after, eu, eu_gen)  # the old eu handle is refused
        assert cat(after, us) == b"id,region\n2,us\n"
    finally:
        after.close()


def test_partition_handles_over_a_real_server_restart(root: Path, tmp_path: Path) -> None:
    """An NFS client holding a partition's handles across a server restart (new port,
    same state directory) reads the same partition with them."""
    state = tmp_path / "state"
    with NfsServer(new_lake(root, state)) as server, RpcClient("127.0.0.1", server.port) as c:
        c.mount("/")
        csv = c.walk("/parts/partitions/region=eu/data.csv")
        directory = c.walk("/parts/partitions/region=us")
        first = c.read_file(csv)
    with NfsServer(new_lake(root, state)) as server, RpcClient("127.0.0.1", server.port) as c:
        c.mount("/")
        assert c.read_file(csv) == first == b"id,region\n1,eu\n3,eu\n"
        found = c.lookup(directory, "data.csv")
        assert found.resok is not None
        assert c.read_file(found.resok.object) == b"id,region\n2,us\n"
        if all(shutil.which(t) for t in ("nfs-ls", "nfs-cat")):  # and libnfs, after it
            cat_eu = subprocess.run(
                ["nfs-cat", server.nfs_url("/parts/partitions/region=eu/data.csv")],
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert cat_eu.stdout == first, cat_eu.stderr


@needs_libnfs
def test_libnfs_lists_and_reads_partitions_across_a_restart(root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    seen = []
    for _ in range(2):
        with NfsServer(new_lake(root, state)) as server:
            listed = subprocess.run(
                ["nfs-ls", server.nfs_url("/parts/partitions")], capture_output=True, timeout=60
            )
            assert listed.returncode == 0, listed.stderr
            got = subprocess.run(
                ["nfs-cat", server.nfs_url("/parts/partitions/region=us/data.csv")],
                capture_output=True,
                timeout=60,
            )
            seen.append(
                ({ln.split()[-1] for ln in listed.stdout.decode().splitlines()}, got.stdout)
            )
    assert seen[0] == seen[1]
    assert seen[0][0] >= {"region=eu", "region=us"}
    assert seen[0][1] == b"id,region\n2,us\n"


# -- the map file, whatever it holds ----------------------------------------------------

dirs = st.integers(0, (1 << 62) - 1).map(lambda h: PARTITION_BASE + 2 * h)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 1 << 65) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def map_files(draw: st.DrawFn) -> bytes:
    """A valid map, one with a field changed, or any JSON or bytes at all."""
    valid: dict[str, object] = {
        "table": "t",
        "epoch": "00" * 8,
        "ids": {str(d): i + 1 for i, d in enumerate(draw(st.lists(dirs, max_size=5, unique=True)))},
    }
    kind = draw(st.sampled_from(["valid", "field", "json", "bytes"]))
    if kind == "field":
        valid[draw(st.sampled_from(["table", "epoch", "ids"]))] = draw(json_values)
    elif kind == "json":
        return json.dumps(draw(json_values)).encode()
    elif kind == "bytes":
        return draw(st.binary(max_size=60))
    return json.dumps(valid).encode()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=map_files(), wanted=st.lists(dirs, max_size=6))
def test_a_map_file_never_gives_one_number_to_two_partitions(
    tmp_path: Path, content: bytes, wanted: list[int]
) -> None:
    path = tmp_path / "map.json"
    path.write_bytes(content)
    ids = PartitionIds(path, "t")  # never raises: a bad file is dropped
    numbers = ids.numbers(wanted)
    assert all(1 <= n <= MAX_PARTITION_NUMBER for n in numbers)
    for d, n in zip(wanted, numbers, strict=True):
        assert ids.dir_of(n) == d  # one partition per number
    if wanted:  # what was saved is what a restart finds
        reloaded = PartitionIds(path, "t")
        assert reloaded.epoch == ids.epoch
        assert reloaded.numbers(wanted) == numbers
