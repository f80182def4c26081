"""NFSv4.0 beside v3 (nfs.protocol.nfs4.service) through the RPC dispatcher, sans-IO: the pseudo-root
shows what v3 shows, and over a table an edit is an open — applied as one commit at the
CLOSE of the open that wrote, never at idle; a refused edit fails its CLOSE; an expired
lease drops the edit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from cli._serve import table_entries
from nfs.protocol.memfs import MemoryFs
from nfs.protocol.nfs4 import ops as o
from nfs.protocol.nfs4.service import writer_peer
from nfs.protocol.nfs4.state import Nfs4State
from nfs.protocol.nfs4.types import (
    Fattr4,
    Fattr4Id,
    NfsFtype4,
    Nfsstat4,
    OpNum4,
    Stateid4,
    StateOwner4,
    bitmap_of,
    decode_fattr,
)
from nfs.protocol.rpc import Dispatcher
from nfs.protocol.server import build_dispatcher
from nfs.protocol.vfs import BOUNDED_PEER_PREFIX
from nfs.table.access import TableAccessVfs, UserMap
from nfs.table.journal import JournalFile
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock
from tests.nfs.nfs4client import Nfs4Client, Nfs4StatusError, op
from tests.nfs.rpcclient import RpcClient

CSV = b"id,name\n1,a\n2,b\n3,c\n"


def v4(
    dispatcher: Dispatcher, name: bytes = b"client one", peer: str = "10.0.0.1:900"
) -> Nfs4Client:
    client = Nfs4Client(RpcClient.over(dispatcher, peer=peer), name)
    client.setclientid()
    return client


@pytest.fixture
def table(tmp_path: Path) -> DatabaseOps:
    db = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    db.insert(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))
    return db


@pytest.fixture
def served(table: DatabaseOps, tmp_path: Path, clock: FakeClock) -> tuple[TableFs, Dispatcher]:
    fs = TableFs(table, clock=clock, idle_seconds=5, idle_timer=False, state_dir=tmp_path / "state")
    state = Nfs4State(clock=clock, lease_seconds=90, grace_seconds=0)
    return fs, build_dispatcher(fs, nfs4_state=state)


def rows(db: DatabaseOps) -> list[tuple[int, str]]:
    return sorted((r["id"], r["name"]) for r in db.to_arrow().to_pylist())


# ------------------------------------------------------------ the file system


def test_the_pseudo_root_shows_what_the_v3_export_shows(memfs: MemoryFs) -> None:
    d = build_dispatcher(memfs)
    v3 = RpcClient.over(d)
    v3.mount("/")
    v3.write_file("/a.txt", b"hello")
    assert v3.root is not None
    v3.mkdir(v3.root, "sub")
    c = v4(d)
    assert sorted(c.listdir("/")) == sorted(v3.listdir("/"))
    attrs = c.getattr("/a.txt", Fattr4Id.TYPE, Fattr4Id.SIZE, Fattr4Id.FILEID, Fattr4Id.MODE)
    v3_attrs = v3.attrs("/a.txt")
    assert attrs == {
        Fattr4Id.TYPE: NfsFtype4.NF4REG,
        Fattr4Id.SIZE: 5,
        Fattr4Id.FILEID: v3_attrs.fileid,
        Fattr4Id.MODE: v3_attrs.mode,
    }
    assert c.fh("/a.txt") == v3.walk("/a.txt").data  # the same handles as v3


def test_open_create_write_close_and_read_back(memfs: MemoryFs) -> None:
    d = build_dispatcher(memfs)
    c = v4(d)
    create = o.OpenFlag4(o.UNCHECKED4, createattrs=Fattr4())
    fh, sid = c.open("/new.txt", 3, create=create)
    assert c.write(fh, sid, 0, b"hello v4", stable=o.FILE_SYNC4).count == 8
    assert c.read(fh, sid) == b"hello v4"
    assert c.close_res(fh, sid).status == Nfsstat4.NFS4_OK
    v3 = RpcClient.over(d)
    v3.mount("/")
    assert v3.read_file("/new.txt") == b"hello v4"


def test_compound_errors(memfs: MemoryFs) -> None:
    c = v4(build_dispatcher(memfs))
    res = c.compound(op(OpNum4.OP_GETFH))
    assert res.status == Nfsstat4.NFS4ERR_NOFILEHANDLE and len(res.results) == 1
    assert c.compound(op(OpNum4.OP_PUTROOTFH), minor=1).status == (
        Nfsstat4.NFS4ERR_MINOR_VERS_MISMATCH
    )
    res = c.compound(op(OpNum4.OP_PUTROOTFH), op(OpNum4.OP_LOOKUP, o.NameArgs("nope")))
    assert [r.status for r in res.results] == [Nfsstat4.NFS4_OK, Nfsstat4.NFS4ERR_NOENT]
    assert c.compound(op(OpNum4.OP_PUTROOTFH), op(OpNum4.OP_LOOKUPP)).status == (
        Nfsstat4.NFS4ERR_NOENT
    )
    assert c.compound(op(OpNum4.OP_ILLEGAL)).status == Nfsstat4.NFS4ERR_OP_ILLEGAL
    assert c.compound(op(OpNum4.OP_RESTOREFH)).status == Nfsstat4.NFS4ERR_RESTOREFH
    sid = Stateid4(1, bytes(12))
    assert c.compound(op(OpNum4.OP_PUTROOTFH), op(OpNum4.OP_CLOSE, o.CloseArgs(1, sid))).status == (
        Nfsstat4.NFS4ERR_STALE_STATEID
    )


def test_a_retransmitted_open_gets_its_first_reply(memfs: MemoryFs) -> None:
    c = v4(build_dispatcher(memfs))
    args = c.open_args("x.txt", 3, create=o.OpenFlag4(o.GUARDED4, createattrs=Fattr4()), seqid=7)
    first = c.compound(op(OpNum4.OP_PUTROOTFH), op(OpNum4.OP_OPEN, args), op(OpNum4.OP_GETFH))
    again = c.compound(op(OpNum4.OP_PUTROOTFH), op(OpNum4.OP_OPEN, args), op(OpNum4.OP_GETFH))
    assert first.status == again.status == Nfsstat4.NFS4_OK  # GUARDED would say EXIST
    assert first.results == again.results
    wrong = c.open_args("x.txt", 1, seqid=9)
    assert c.compound(op(OpNum4.OP_PUTROOTFH), op(OpNum4.OP_OPEN, wrong)).status == (
        Nfsstat4.NFS4ERR_BAD_SEQID
    )


# ------------------------------------------------------------ an edit is an open


def test_an_edit_applies_at_its_close_as_one_commit_never_at_idle(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps, clock: FakeClock
) -> None:
    fs, d = served
    c = v4(d)
    before = table.version
    fh, sid = c.open("/data/data.csv", 3)
    c.truncate(fh, sid, 0)
    new = b"id,name\n1,a\n2,B\n"
    c.write(fh, sid, 0, new[:10])
    c.commit(fh)  # writeback COMMIT: durable, nothing applied
    clock.advance(60)  # a paused producer, far past the v3 idle period
    fs.poll()
    c.ok(op(OpNum4.OP_RENEW, o.ClientidArgs(c.clientid)))
    assert table.version == before
    c.write(fh, sid, 10, new[10:])
    assert c.read(fh, sid) == new  # the writer reads its own content
    assert c.close_res(fh, sid).status == Nfsstat4.NFS4_OK
    assert table.version == before + 1
    assert rows(table) == [(1, "a"), (2, "B")]


def test_an_append_with_file_sync_waits_for_the_close(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps
) -> None:
    _, d = served
    c = v4(d)
    before = table.version
    fh, sid = c.open("/data/data.csv", 3)
    assert c.read(fh, sid) == CSV
    c.write(fh, sid, len(CSV), b"4,d\n", stable=o.FILE_SYNC4)
    assert table.version == before  # v3 would have applied it here
    c.write(fh, sid, len(CSV) + 4, b"5,e\n", stable=o.FILE_SYNC4)
    assert c.close_res(fh, sid).status == Nfsstat4.NFS4_OK
    assert table.version == before + 1
    assert rows(table)[-2:] == [(4, "d"), (5, "e")]


def test_a_refused_edit_fails_its_close_and_changes_nothing(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps
) -> None:
    _, d = served
    c = v4(d)
    before = table.version
    fh, sid = c.open("/data/data.csv", 3)
    c.truncate(fh, sid, 0)
    c.write(fh, sid, 0, b"id,name\n1,a\n1,b\n")  # a repeated key: only the whole edit shows it
    res = c.close_res(fh, sid)
    assert res.status == Nfsstat4.NFS4ERR_INVAL
    assert table.version == before
    assert rows(table) == [(1, "a"), (2, "b"), (3, "c")]


def test_a_bad_line_fails_the_write(served: tuple[TableFs, Dispatcher], table: DatabaseOps) -> None:
    _, d = served
    c = v4(d)
    fh, sid = c.open("/data/data.csv", 3)
    with pytest.raises(Nfs4StatusError) as err:
        c.write(fh, sid, len(CSV), b"x,y,z\n", stable=o.FILE_SYNC4)
    assert err.value.status == Nfsstat4.NFS4ERR_INVAL
    assert rows(table) == [(1, "a"), (2, "b"), (3, "c")]


def test_rename_onto_data_csv_applies_as_in_v3(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps
) -> None:
    _, d = served
    c = v4(d)
    before = table.version
    fh, sid = c.open("/data/data.csv", 1)
    assert c.read(fh, sid) == CSV
    tmp, tsid = c.open("/data/sedXYZ", 3, create=o.OpenFlag4(o.UNCHECKED4, createattrs=Fattr4()))
    c.write(tmp, tsid, 0, CSV.replace(b"2,b", b"2,B"))
    assert c.close_res(tmp, tsid).status == Nfsstat4.NFS4_OK
    assert table.version == before  # a scratch file: nothing yet
    dir_ops = c.walk("/data")
    c.ok(
        *dir_ops,
        op(OpNum4.OP_SAVEFH),
        *dir_ops,
        op(OpNum4.OP_RENAME, o.RenameArgs("sedXYZ", "data.csv")),
    )
    assert table.version == before + 1
    assert rows(table) == [(1, "a"), (2, "B"), (3, "c")]
    assert c.close_res(fh, sid).status == Nfsstat4.NFS4_OK  # a read-only open: nothing more
    assert table.version == before + 1


def test_an_expired_lease_drops_the_edit_unapplied(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps, clock: FakeClock, tmp_path: Path
) -> None:
    fs, d = served
    dying = v4(d, b"dies mid-edit", "10.0.0.2:901")
    other = v4(d, b"lives on", "10.0.0.3:902")
    before = table.version
    fh, sid = dying.open("/data/data.csv", 3)
    dying.truncate(fh, sid, 0)
    dying.write(fh, sid, 0, b"id,name\n9,z\n")
    dying.commit(fh)
    assert list((tmp_path / "state").rglob("*.wal"))  # a journal holds the staged edit
    clock.advance(60)
    other.ok(op(OpNum4.OP_RENEW, o.ClientidArgs(other.clientid)))
    assert list((tmp_path / "state").rglob("*.wal"))
    clock.advance(31)  # the dying client has been silent for more than its lease
    other.ok(op(OpNum4.OP_RENEW, o.ClientidArgs(other.clientid)))  # any call expires leases
    assert not list((tmp_path / "state").rglob("*.wal"))
    clock.advance(3600)
    fs.poll()
    assert table.version == before
    res = dying.close_res(fh, sid)
    assert res.status == Nfsstat4.NFS4ERR_EXPIRED
    assert table.version == before


def test_a_per_user_share_applies_at_close_too(
    table: DatabaseOps, tmp_path: Path, clock: FakeClock
) -> None:
    fs = TableAccessVfs(
        TableFs(table, clock=clock, idle_timer=False, state_dir=tmp_path / "state"),
        table_entries(),
        UserMap.parse(["1000=ana"]),
        lambda user: frozenset({"read", "write", "delete"}),
    )
    d = build_dispatcher(fs, nfs4_state=Nfs4State(clock=clock, grace_seconds=0))
    c = Nfs4Client(RpcClient.over(d, uid=1000, gid=1000), b"ana's laptop")
    c.setclientid()
    before = table.version
    fh, sid = c.open("/data/data.csv", 3)
    c.write(fh, sid, len(CSV), b"4,d\n")
    assert c.close_res(fh, sid).status == Nfsstat4.NFS4_OK
    assert table.version == before + 1
    assert rows(table)[-1] == (4, "d")


def test_a_vfs_that_cannot_bound_edits_keeps_its_own_rules(clock: FakeClock) -> None:
    memfs = MemoryFs(clock, root_mode=0o777)
    c = v4(build_dispatcher(memfs))
    create = o.OpenFlag4(o.UNCHECKED4, createattrs=Fattr4())
    fh, sid = c.open("/f.txt", 3, create=create)
    c.write(fh, sid, 0, b"unbounded", stable=o.FILE_SYNC4)
    assert c.close_res(fh, sid).status == Nfsstat4.NFS4_OK
    assert not writer_peer(b"x", bounded=False).startswith(BOUNDED_PEER_PREFIX)
    assert writer_peer(b"x").startswith(BOUNDED_PEER_PREFIX)


def test_two_writers_each_apply_at_their_own_close(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps
) -> None:
    _, d = served
    a = v4(d, b"client a", "10.0.0.4:903")
    b = v4(d, b"client b", "10.0.0.5:904")
    before = table.version
    fa, sa = a.open("/data/data.csv", 3)
    fb, sb = b.open("/data/data.csv", 3)
    assert a.read(fa, sa) == b.read(fb, sb) == CSV
    a.truncate(fa, sa, 0)
    a.write(fa, sa, 0, CSV.replace(b"2,b", b"2,A"))  # a rewrite changing key 2
    b.write(fb, sb, len(CSV), b"4,B\n")  # an append
    assert a.read(fa, sa) == CSV.replace(b"2,b", b"2,A")  # each reads its own content
    assert b.read(fb, sb) == CSV + b"4,B\n"
    assert b.close_res(fb, sb).status == Nfsstat4.NFS4_OK
    assert table.version == before + 1
    assert a.close_res(fa, sa).status == Nfsstat4.NFS4_OK  # 3-way: b's row survives
    assert table.version == before + 2
    assert rows(table) == [(1, "a"), (2, "A"), (3, "c"), (4, "B")]


def second_owner(c: Nfs4Client, owner: bytes = b"owner-2") -> Nfs4Client:
    """Another open-owner of ``c``'s client, on the same connection and with the same
    credentials (the Linux client's second mount of the share, by the same user)."""
    other = Nfs4Client(c.rpc, c.name)
    other.clientid, other.owner = c.clientid, owner
    return other


def size_of(c: Nfs4Client, fh: bytes) -> int:
    """GETATTR size (no stateid: a revalidation, ``ls -l``)."""
    res = c.ok(
        op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)),
        op(OpNum4.OP_GETATTR, o.GetattrArgs(bitmap_of([Fattr4Id.SIZE]))),
    )
    size: int = decode_fattr(res.results[-1].body)[Fattr4Id.SIZE]
    return size


def test_two_open_owners_of_one_client_and_user_are_two_writers(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps
) -> None:
    """One user's two mounts: one client id, one uid, two open-owners. Each owner's
    WRITEs are its own edit, READs with its stateid show its own staged bytes, and its
    CLOSE applies its edit alone (3-way: the other's survives)."""
    _, d = served
    a = Nfs4Client(RpcClient.over(d, uid=1000, gid=1000, peer="10.0.0.6:905"), b"one host")
    a.setclientid()
    b = second_owner(a)
    before = table.version
    fa, sa = a.open("/data/data.csv", 3)
    assert size_of(a, fa) == len(CSV)
    new_a = CSV.replace(b"1,a", b"1,A")
    new_b = CSV.replace(b"3,c", b"3,C")
    half = len(CSV) // 2
    a.truncate(fa, sa, 0)
    a.write(fa, sa, 0, new_a[:half])  # A's first half
    a.commit(fa)
    # only A holds the file open: a call without a stateid is A's (ls -l while writing)
    assert size_of(a, fa) == half
    fb, sb = b.open("/data/data.csv", 3)
    assert b.read(fb, sb) == CSV  # the table, not A's unfinished half
    b.truncate(fb, sb, 0)
    b.write(fb, sb, 0, new_b[:half])  # B's first half
    assert a.read(fa, sa) == new_a[:half]
    assert b.read(fb, sb) == new_b[:half]
    # two owners of this user hold it: a stateless call is neither's (the table)
    assert size_of(a, fa) == len(CSV)
    a.write(fa, sa, half, new_a[half:])
    b.write(fb, sb, half, new_b[half:])
    a.commit(fa)  # COMMIT names no owner: both stagings are made durable
    assert a.read(fa, sa) == new_a
    assert b.read(fb, sb) == new_b
    assert table.version == before
    assert b.close_res(fb, sb).status == Nfsstat4.NFS4_OK  # B's edit alone
    assert table.version == before + 1
    assert rows(table) == [(1, "a"), (2, "b"), (3, "C")]
    assert a.read(fa, sa) == new_a  # A's staging is untouched by B's CLOSE
    assert size_of(a, fa) == len(new_a)
    assert a.close_res(fa, sa).status == Nfsstat4.NFS4_OK  # A's edit, B's row kept
    assert table.version == before + 2
    assert rows(table) == [(1, "A"), (2, "b"), (3, "C")]


def test_sed_i_by_another_owner_of_the_same_user_keeps_an_open_edit(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps
) -> None:
    """The kernel scenario of two mounts by one user, sans-IO: A rewrites data.csv and
    holds half of it staged; B (another open-owner of the client, same uid) runs
    ``sed -i``: it reads the table (not A's half), writes and closes a temporary file and
    renames it onto data.csv, which applies B's edit alone, against what B read; A's
    CLOSE applies A's."""
    _, d = served
    a = Nfs4Client(RpcClient.over(d, uid=1000, gid=1000, peer="10.0.0.7:906"), b"one host")
    a.setclientid()
    b = second_owner(a)
    before = table.version
    new_a = CSV.replace(b"1,a", b"1,A")
    fa, sa = a.open("/data/data.csv", 2)
    a.truncate(fa, sa, 0)
    a.write(fa, sa, 0, new_a[:10])
    a.commit(fa)
    fb, sb = b.open("/data/data.csv", 1)
    assert b.read(fb, sb) == CSV  # the base of B's edit
    other = v4(d, b"another host", "10.0.0.8:907")  # meanwhile another client appends
    fo, so = other.open("/data/data.csv", 3)
    other.write(fo, so, len(CSV), b"4,d\n")
    assert other.close_res(fo, so).status == Nfsstat4.NFS4_OK
    assert table.version == before + 1
    create = o.OpenFlag4(o.UNCHECKED4, createattrs=Fattr4())
    tmp, tsid = b.open("/data/sedB", 3, create=create)
    b.write(tmp, tsid, 0, CSV.replace(b"3,c", b"3,C"))
    assert b.close_res(tmp, tsid).status == Nfsstat4.NFS4_OK
    assert b.close_res(fb, sb).status == Nfsstat4.NFS4_OK
    dir_ops = b.walk("/data")
    b.ok(
        *dir_ops,
        op(OpNum4.OP_SAVEFH),
        *dir_ops,
        op(OpNum4.OP_RENAME, o.RenameArgs("sedB", "data.csv")),
    )
    # the rename is B's (it wrote the file): diffed against what B read, so the row
    # appended after B's READ is kept, and A's staged half is neither applied nor lost
    assert table.version == before + 2
    assert rows(table) == [(1, "a"), (2, "b"), (3, "C"), (4, "d")]
    a.write(fa, sa, 10, new_a[10:])
    assert a.close_res(fa, sa).status == Nfsstat4.NFS4_OK
    assert table.version == before + 3
    assert rows(table) == [(1, "A"), (2, "b"), (3, "C"), (4, "d")]


def test_a_commit_names_no_owner_yet_makes_the_owners_writes_durable(
    served: tuple[TableFs, Dispatcher], monkeypatch: pytest.MonkeyPatch
) -> None:
    """COMMIT carries no stateid: it fsyncs the journals of the owners holding the file
    open for writing, also when it comes first on a new connection (a client that
    reconnected), since its OK promises the bytes survive a crash."""
    _, d = served
    synced: list[str] = []
    sync = JournalFile.sync

    def spy(journal: JournalFile) -> None:  # the real fsync, noting whose journal it is
        synced.append(journal.header.peer)
        sync(journal)

    monkeypatch.setattr(JournalFile, "sync", spy)
    c = v4(d, b"reconnecting host", "10.0.0.10:908")
    fh, sid = c.open("/data/data.csv", 3)
    c.write(fh, sid, len(CSV), b"4,d\n")  # UNSTABLE: staged, not yet fsynced
    assert synced == []
    again = Nfs4Client(RpcClient.over(d, peer="10.0.0.10:909"), c.name)  # a new connection
    again.commit(fh)
    assert len(synced) == 1  # the owner's journal, though this connection named no client
    assert synced == [writer_peer(c.name, owner=c.owner)]
    assert c.close_res(fh, sid).status == Nfsstat4.NFS4_OK


def test_dropping_write_access_ends_the_edit(
    served: tuple[TableFs, Dispatcher], table: DatabaseOps
) -> None:
    _, d = served
    c = v4(d)
    before = table.version
    fh, sid = c.open("/data/data.csv", 3)
    c.write(fh, sid, len(CSV), b"4,d\n")
    res = c.ok(
        op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)),
        op(OpNum4.OP_OPEN_DOWNGRADE, o.OpenDowngradeArgs(sid, next(c.seqid), 1, 0)),
    )
    assert table.version == before + 1
    assert c.close_res(fh, res.results[-1].body).status == Nfsstat4.NFS4_OK
    assert table.version == before + 1


def test_after_a_restart_the_client_reclaims_its_open_and_its_close_applies(
    table: DatabaseOps, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    fs = TableFs(table, idle_timer=False, state_dir=state_dir)
    c = v4(build_dispatcher(fs))  # records its clients in the state directory
    before = table.version
    fh, sid = c.open("/data/data.csv", 3)
    c.truncate(fh, sid, 0)
    c.write(fh, sid, 0, b"id,name\n1,a\n")
    c.commit(fh)  # durable in the journal
    fs.close()  # the server stops with the edit unfinished
    assert (state_dir / "nfs4-clients").read_text().strip()

    fs = TableFs(table, idle_timer=False, state_dir=state_dir)  # recovers the journal
    d = build_dispatcher(fs)
    c.rpc = RpcClient.over(d, peer="10.0.0.1:901")  # a new connection
    assert c.compound(op(OpNum4.OP_RENEW, o.ClientidArgs(c.clientid))).status == (
        Nfsstat4.NFS4ERR_STALE_CLIENTID
    )
    c.setclientid()
    newcomer = v4(d, b"a new client", "10.0.0.9:999")
    args = replace(newcomer.open_args("data.csv", 1, seqid=next(newcomer.seqid)), share_deny=2)
    assert newcomer.compound(*newcomer.walk("/data"), op(OpNum4.OP_OPEN, args)).status == (
        Nfsstat4.NFS4ERR_GRACE  # it denies writers: it could conflict with a reclaim
    )
    newcomer.open("/data/data.csv", 1)  # it denies nothing: served during the grace period
    reclaim = o.OpenArgs(
        next(c.seqid),
        3,
        0,
        StateOwner4(c.clientid, c.owner),
        o.OpenFlag4(),
        o.OpenClaim4(o.CLAIM_PREVIOUS, delegate_type=0),
    )
    res = c.ok(op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)), op(OpNum4.OP_OPEN, reclaim))
    sid = res.results[-1].body.stateid
    if res.results[-1].body.rflags & o.OPEN4_RESULT_CONFIRM:
        res = c.ok(
            op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)),
            op(OpNum4.OP_OPEN_CONFIRM, o.OpenConfirmArgs(sid, next(c.seqid))),
        )
        sid = res.results[-1].body
    c.write(fh, sid, 12, b"2,b\n")  # the rest of the edit
    assert table.version == before
    assert c.close_res(fh, sid).status == Nfsstat4.NFS4_OK
    assert table.version == before + 1
    assert rows(table) == [(1, "a"), (2, "b")]
    fs.close()


def test_readdir_pages_list_every_entry_once(memfs: MemoryFs) -> None:
    d = build_dispatcher(memfs)
    v3 = RpcClient.over(d)
    v3.mount("/")
    names = {f"file-{i:03d}.csv" for i in range(300)}
    for name in names:
        v3.write_file(f"/{name}", b"x")
    c = v4(d)
    got = c.listdir("/")  # pages of at most 8 KiB
    assert len(got) == len(set(got)) == 300 and set(got) == names
    tiny = o.ReaddirArgs(0, bytes(8), 10, 20, bitmap_of([Fattr4Id.TYPE]))
    res = c.compound(op(OpNum4.OP_PUTROOTFH), op(OpNum4.OP_READDIR, tiny))
    assert res.status == Nfsstat4.NFS4ERR_TOOSMALL


def test_locks_over_the_wire(memfs: MemoryFs) -> None:
    c = v4(build_dispatcher(memfs))
    fh, sid = c.open("/l.txt", 3, create=o.OpenFlag4(o.UNCHECKED4, createattrs=Fattr4()))
    owner_a, owner_b = StateOwner4(c.clientid, b"a"), StateOwner4(c.clientid, b"b")

    def lock(owner: StateOwner4, offset: int, length: int) -> o.Compound4Res:
        new = o.OpenToLockOwner4(next(c.seqid), sid, 0, owner)
        args = o.LockArgs(2, False, offset, length, o.Locker4(new))
        return c.compound(op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)), op(OpNum4.OP_LOCK, args))

    got = lock(owner_a, 0, 10)
    assert got.status == Nfsstat4.NFS4_OK
    lsid = got.results[-1].body
    denied = lock(owner_b, 5, 1)
    assert denied.status == Nfsstat4.NFS4ERR_DENIED
    assert denied.results[-1].body == o.Lock4Denied(0, 10, 2, owner_a)
    test = o.LocktArgs(1, 0, 1, owner_b)
    assert c.compound(op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)), op(OpNum4.OP_LOCKT, test)).status == (
        Nfsstat4.NFS4ERR_DENIED
    )
    unlock = o.LockuArgs(2, 1, lsid, 0, 10)
    c.ok(op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)), op(OpNum4.OP_LOCKU, unlock))
    assert lock(owner_b, 5, 1).status == Nfsstat4.NFS4_OK
