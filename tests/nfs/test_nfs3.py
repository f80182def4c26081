"""NFSv3 procedures (RFC 1813 §3) against MemoryFs, sans-IO: bytes in, bytes out.

Every call goes through the real XDR encoding, record marking and `Dispatcher`,
via `RpcClient.over(dispatcher)`; no socket, no thread.
"""

from __future__ import annotations

import pytest

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.nfs3 import (
    FSF3_CANSETTIME,
    FSF3_HOMOGENEOUS,
    ZERO_VERF,
    Createmode3,
    Fattr3,
    Ftype3,
    NfsFh3,
    NfsProc3,
    Nfsstat3,
    Nfstime3,
    Readdir3Res,
    Readdirplus3Res,
    Sattr3,
    Sattrguard3,
    SetTime,
    StableHow,
    TimeHow,
)
from nfs.protocol.nfs3.handles import FH_MAGIC
from nfs.protocol.nfs3.program import NFS3_PROCEDURES
from nfs.protocol.rpc import AUTH_NONE_BODY, Dispatcher
from nfs.protocol.server import build_dispatcher
from nfs.protocol.vfs import (
    ACCESS3_DELETE,
    ACCESS3_EXECUTE,
    ACCESS3_EXTEND,
    ACCESS3_LOOKUP,
    ACCESS3_MODIFY,
    ACCESS3_READ,
    FileId,
)
from nfs.protocol.xdr import Packer
from tests.nfs.conftest import FakeClock
from tests.nfs.rpcclient import NfsStatusError, RpcClient

OK = Nfsstat3.NFS3_OK


def handle_of(c: RpcClient, path: str) -> NfsFh3:
    return c.walk(path)


def test_every_procedure_is_in_the_table() -> None:
    assert set(NFS3_PROCEDURES) == set(NfsProc3)
    for num, proc in NFS3_PROCEDURES.items():
        assert proc.name == num.name


def test_null(local_client: RpcClient) -> None:
    local_client.null()


# ---------------------------------------------------------------- handles


def test_root_handle_and_getattr(local_client: RpcClient, memfs: MemoryFs) -> None:
    root = local_client.root
    assert root is not None and root.data.startswith(FH_MAGIC) and len(root.data) == 20
    attrs = local_client.attrs(root)
    assert attrs.type == Ftype3.NF3DIR
    assert attrs.fileid == memfs.root_dir()
    assert attrs.mode == 0o777
    assert attrs.nlink == 2


@pytest.mark.parametrize("raw", [b"", b"x" * 20, FH_MAGIC + b"\0" * 10, b"y" * 64])
def test_malformed_handle_is_badhandle(local_client: RpcClient, raw: bytes) -> None:
    assert local_client.getattr(NfsFh3(raw)).status == Nfsstat3.NFS3ERR_BADHANDLE
    assert local_client.read(NfsFh3(raw)).status == Nfsstat3.NFS3ERR_BADHANDLE
    assert local_client.lookup(NfsFh3(raw), "x").status == Nfsstat3.NFS3ERR_BADHANDLE


def test_handle_of_removed_file_is_stale(local_client: RpcClient) -> None:
    c = local_client
    fh = c.write_file("/gone.txt", b"x")
    assert c.remove(c.walk("/"), "gone.txt").status == OK
    assert c.getattr(fh).status == Nfsstat3.NFS3ERR_STALE
    assert c.write(fh, 0, b"y").status == Nfsstat3.NFS3ERR_STALE


def test_handle_from_another_instance_is_stale(local_client: RpcClient) -> None:
    old_root = local_client.root
    assert old_root is not None
    other = RpcClient.over(build_dispatcher(MemoryFs()))
    assert other.getattr(old_root).status == Nfsstat3.NFS3ERR_STALE


def test_handles_are_stable_with_a_fixed_generation() -> None:
    """A Vfs that keeps its generation (TableFs across restarts) keeps handles valid."""
    gen = b"tablegen"
    fs1 = MemoryFs(generation=gen)
    fs1.put("/data/data.csv", b"a\n")
    fh = RpcClient.over(build_dispatcher(fs1)).walk("/data/data.csv")
    fs2 = MemoryFs(generation=gen)
    fs2.put("/data/data.csv", b"a\n")
    assert RpcClient.over(build_dispatcher(fs2)).read_file(fh) == b"a\n"


# ---------------------------------------------------------------- LOOKUP, ACCESS, GETATTR


def test_lookup(local_client: RpcClient, memfs: MemoryFs) -> None:
    c = local_client
    memfs.put("/dir/file.txt", b"abc")
    root = c.walk("/")
    res = c.lookup(root, "dir")
    assert res.resok is not None
    assert res.resok.obj_attributes.attributes is not None
    assert res.resok.obj_attributes.attributes.type == Ftype3.NF3DIR
    assert res.resok.dir_attributes.attributes is not None
    assert res.resok.dir_attributes.attributes.fileid == memfs.root_dir()
    dir_fh = res.resok.object
    dot = c.lookup(dir_fh, "..")
    assert dot.resok is not None and dot.resok.object == root
    missing = c.lookup(root, "nope")
    assert missing.status == Nfsstat3.NFS3ERR_NOENT
    assert missing.resfail.attributes is not None  # dir_attributes on failure
    file_fh = c.walk("/dir/file.txt")
    assert c.lookup(file_fh, "x").status == Nfsstat3.NFS3ERR_NOTDIR
    assert c.lookup(root, "n" * 256).status == Nfsstat3.NFS3ERR_NAMETOOLONG


def test_access_grants_by_mode_bits(local_client: RpcClient, memfs: MemoryFs) -> None:
    memfs.put("/f", b"x", mode=0o644, uid=0, gid=0)
    c = local_client
    fh = c.walk("/f")
    everything = 0x3F
    res = c.access(fh, everything)
    assert res.resok is not None
    assert res.resok.access == everything & ~ACCESS3_EXECUTE  # root, but no x bit on the file
    assert res.resok.obj_attributes.attributes is not None
    c.with_credentials(uid=1000, gid=1000)
    res = c.access(fh, everything)
    assert res.resok is not None and res.resok.access == ACCESS3_READ
    res = c.access(c.walk("/"), everything)  # root dir is 0777
    assert res.resok is not None
    assert res.resok.access == (
        ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
    )


def test_read_only_vfs_refuses_changes() -> None:
    fs = MemoryFs(read_only=True)
    fs.put("/f", b"data")
    c = RpcClient.over(build_dispatcher(fs))
    root = c.mount()
    fh = c.walk("/f")
    assert c.write(fh, 0, b"x").status == Nfsstat3.NFS3ERR_ROFS
    assert c.create(root, "n").status == Nfsstat3.NFS3ERR_ROFS
    assert c.mkdir(root, "d").status == Nfsstat3.NFS3ERR_ROFS
    assert c.remove(root, "f").status == Nfsstat3.NFS3ERR_ROFS
    assert c.rename(root, "f", root, "g").status == Nfsstat3.NFS3ERR_ROFS
    assert c.setattr(fh, Sattr3(mode=0o600)).status == Nfsstat3.NFS3ERR_ROFS
    res = c.access(fh)
    assert res.resok is not None
    assert res.resok.access & (ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE) == 0
    assert c.read_file(fh) == b"data"


# ---------------------------------------------------------------- READ, WRITE, COMMIT


def test_read_offsets_and_eof(local_client: RpcClient, memfs: MemoryFs) -> None:
    memfs.put("/f", b"0123456789")
    c = local_client
    fh = c.walk("/f")
    res = c.read(fh, 2, 3)
    assert res.resok is not None
    assert (res.resok.data, res.resok.count, res.resok.eof) == (b"234", 3, False)
    assert res.resok.file_attributes.attributes is not None
    res = c.read(fh, 7, 100)
    assert res.resok is not None and (res.resok.data, res.resok.eof) == (b"789", True)
    res = c.read(fh, 100, 10)
    assert res.resok is not None and (res.resok.data, res.resok.eof) == (b"", True)
    assert c.read(c.walk("/"), 0, 10).status == Nfsstat3.NFS3ERR_ISDIR


def test_read_count_is_capped_at_rtmax(local_client: RpcClient, memfs: MemoryFs) -> None:
    memfs.put("/big", b"z" * (3 << 20))
    res = local_client.read(local_client.walk("/big"), 0, 0xFFFFFFFF)
    assert res.resok is not None
    assert res.resok.count == 1 << 20 and not res.resok.eof


def test_write_extends_zero_fills_and_reports(local_client: RpcClient, clock: FakeClock) -> None:
    c = local_client
    fh = c.write_file("/f", b"hello")
    before = c.attrs(fh)
    clock.advance(5)
    res = c.write(fh, 8, b"XY", StableHow.UNSTABLE)
    assert res.resok is not None
    assert (res.resok.count, res.resok.committed) == (2, StableHow.UNSTABLE)
    wcc = res.resok.file_wcc
    assert wcc.before.attributes is not None and wcc.before.attributes.size == 5
    assert wcc.after.attributes is not None and wcc.after.attributes.size == 10
    assert wcc.after.attributes.mtime.seconds == before.mtime.seconds + 5
    assert c.read_file(fh) == b"hello\0\0\0XY"
    commit = c.commit(fh)
    assert commit.resok is not None and commit.resok.verf == res.resok.verf


def test_write_verifier_is_per_boot(memfs: MemoryFs) -> None:
    memfs.put("/f", b"")
    verfs = set()
    for _ in range(2):
        c = RpcClient.over(build_dispatcher(memfs))
        fh = c.walk("/f")
        first = c.write(fh, 0, b"a").resok
        second = c.write(fh, 1, b"b").resok
        assert first is not None and second is not None and first.verf == second.verf
        verfs.add(first.verf)
    assert len(verfs) == 2


def test_write_count_larger_than_data_is_inval(local_client: RpcClient) -> None:
    fh = local_client.write_file("/f", b"")
    res = local_client.write(fh, 0, b"abc", count=10)
    assert res.status == Nfsstat3.NFS3ERR_INVAL
    assert res.resfail.after.attributes is not None
    res = local_client.write(fh, 0, b"abcdef", count=2)
    assert res.resok is not None and res.resok.count == 2
    assert local_client.read_file(fh) == b"ab"


def test_write_to_directory_is_isdir(local_client: RpcClient) -> None:
    assert local_client.write(local_client.walk("/"), 0, b"x").status == Nfsstat3.NFS3ERR_ISDIR


def test_write_beyond_max_file_size_is_fbig() -> None:
    fs = MemoryFs(max_file_size=100)
    c = RpcClient.over(build_dispatcher(fs))
    fh = c.write_file("/f", b"")
    assert c.write(fh, 99, b"xy").status == Nfsstat3.NFS3ERR_FBIG


# ---------------------------------------------------------------- SETATTR


def test_setattr_mode_owner_size_and_times(local_client: RpcClient, clock: FakeClock) -> None:
    c = local_client
    fh = c.write_file("/f", b"0123456789")
    ctime = c.attrs(fh).ctime
    clock.advance(1)
    res = c.setattr(
        fh,
        Sattr3(
            mode=0o600,
            uid=1000,
            gid=50,
            size=4,
            atime=SetTime(TimeHow.SET_TO_CLIENT_TIME, Nfstime3(1000, 5)),
            mtime=SetTime(TimeHow.SET_TO_SERVER_TIME),
        ),
    )
    assert res.status == OK
    after = res.obj_wcc.after.attributes
    assert after is not None
    assert (after.mode, after.uid, after.gid, after.size) == (0o600, 1000, 50, 4)
    assert after.atime == Nfstime3(1000, 5)
    assert after.mtime == Nfstime3.from_seconds(clock())
    assert after.ctime != ctime
    before = res.obj_wcc.before.attributes
    assert before is not None and before.size == 10
    assert c.read_file(fh) == b"0123"


def test_setattr_guard_mismatch_is_not_sync(local_client: RpcClient, clock: FakeClock) -> None:
    c = local_client
    fh = c.write_file("/f", b"x")
    ctime = c.attrs(fh).ctime
    clock.advance(1)
    ok = c.setattr(fh, Sattr3(mode=0o600), guard_ctime=Sattrguard3(ctime))
    assert ok.status == OK
    res = c.setattr(fh, Sattr3(mode=0o644), guard_ctime=Sattrguard3(ctime))
    assert res.status == Nfsstat3.NFS3ERR_NOT_SYNC
    assert c.attrs(fh).mode == 0o600


def test_setattr_permissions(local_client: RpcClient, memfs: MemoryFs) -> None:
    memfs.put("/f", b"x", mode=0o644, uid=0)
    c = local_client
    fh = c.walk("/f")
    c.with_credentials(uid=1000, gid=1000)
    assert c.setattr(fh, Sattr3(mode=0o777)).status == Nfsstat3.NFS3ERR_PERM
    assert c.setattr(fh, Sattr3(size=0)).status == Nfsstat3.NFS3ERR_ACCES
    assert c.write(fh, 0, b"y").status == Nfsstat3.NFS3ERR_ACCES
    assert c.setattr(c.walk("/"), Sattr3(size=0)).status in (
        Nfsstat3.NFS3ERR_ISDIR,
        Nfsstat3.NFS3ERR_PERM,
    )


# ---------------------------------------------------------------- CREATE, MKDIR


def test_create_modes(local_client: RpcClient) -> None:
    c = local_client
    root = c.walk("/")
    res = c.create(root, "u", mode=0o640)
    assert res.resok is not None and res.resok.obj.handle is not None
    attrs = res.resok.obj_attributes.attributes
    assert attrs is not None and (attrs.type, attrs.mode, attrs.size) == (Ftype3.NF3REG, 0o640, 0)
    assert res.resok.dir_wcc.after.attributes is not None
    fh = res.resok.obj.handle
    c.write(fh, 0, b"content")
    again = c.create(root, "u", attrs=Sattr3(mode=0o600))  # UNCHECKED on existing: kept
    assert again.resok is not None and again.resok.obj.handle == fh
    assert c.read_file(fh) == b"content"
    trunc = c.create(root, "u", attrs=Sattr3(size=0))  # UNCHECKED with size 0 truncates
    assert trunc.status == OK and c.read_file(fh) == b""
    guarded = c.create(root, "u", how=Createmode3.GUARDED)
    assert guarded.status == Nfsstat3.NFS3ERR_EXIST
    assert guarded.resfail.after.attributes is not None
    assert c.create(root, "sub/x").status == Nfsstat3.NFS3ERR_INVAL


def test_create_exclusive_is_idempotent_per_verifier(local_client: RpcClient) -> None:
    c = local_client
    root = c.walk("/")
    first = c.create(root, "x", how=Createmode3.EXCLUSIVE, verf=b"verifier")
    retry = c.create(root, "x", how=Createmode3.EXCLUSIVE, verf=b"verifier")
    assert first.resok is not None and retry.resok is not None
    assert first.resok.obj == retry.resok.obj
    other = c.create(root, "x", how=Createmode3.EXCLUSIVE, verf=b"another!")
    assert other.status == Nfsstat3.NFS3ERR_EXIST
    fh = first.resok.obj.handle
    assert fh is not None
    # the client finishes an exclusive create with SETATTR; the verifier is then gone
    assert c.setattr(fh, Sattr3(mode=0o644)).status == OK
    again = c.create(root, "x", how=Createmode3.EXCLUSIVE, verf=b"verifier")
    assert again.status == Nfsstat3.NFS3ERR_EXIST


def test_created_files_belong_to_the_caller(dispatcher: Dispatcher) -> None:
    c = RpcClient.over(dispatcher, uid=1234, gid=567)
    root = c.mount()
    res = c.create(root, "mine")
    assert res.resok is not None
    attrs = res.resok.obj_attributes.attributes
    assert attrs is not None and (attrs.uid, attrs.gid) == (1234, 567)
    anon = RpcClient.over(dispatcher, auth=AUTH_NONE_BODY)
    res = anon.create(anon.mount(), "anon")
    assert res.resok is not None
    attrs = res.resok.obj_attributes.attributes
    assert attrs is not None and (attrs.uid, attrs.gid) == (65534, 65534)


def test_mkdir_rmdir(local_client: RpcClient) -> None:
    c = local_client
    root = c.walk("/")
    res = c.mkdir(root, "d", mode=0o700)
    assert res.resok is not None and res.resok.obj.handle is not None
    attrs = res.resok.obj_attributes.attributes
    assert attrs is not None and (attrs.type, attrs.mode, attrs.nlink) == (Ftype3.NF3DIR, 0o700, 2)
    assert c.attrs(root).nlink == 3
    assert c.mkdir(root, "d").status == Nfsstat3.NFS3ERR_EXIST
    c.write_file("/d/f", b"x")
    assert c.rmdir(root, "d").status == Nfsstat3.NFS3ERR_NOTEMPTY
    assert c.remove(root, "d").status == Nfsstat3.NFS3ERR_ISDIR
    assert c.rmdir(c.walk("/d"), "f").status == Nfsstat3.NFS3ERR_NOTDIR
    assert c.remove(c.walk("/d"), "f").status == OK
    assert c.rmdir(root, "d").status == OK
    assert c.rmdir(root, "d").status == Nfsstat3.NFS3ERR_NOENT
    assert c.attrs(root).nlink == 2


def test_unsupported_procedures_answer_notsupp(local_client: RpcClient) -> None:
    c = local_client
    root = c.walk("/")
    fh = c.write_file("/f", b"x")
    sym = c.symlink(root, "s", "f")
    assert sym.status == Nfsstat3.NFS3ERR_NOTSUPP
    assert sym.resfail.after.attributes is not None
    assert c.mknod(root, "p").status == Nfsstat3.NFS3ERR_NOTSUPP
    link = c.link(fh, root, "hard")
    assert link.status == Nfsstat3.NFS3ERR_NOTSUPP and link.file_attributes.attributes is not None
    assert c.readlink(fh).status == Nfsstat3.NFS3ERR_NOTSUPP
    assert c.symlink(NfsFh3(b"bad"), "s", "f").status == Nfsstat3.NFS3ERR_BADHANDLE


# ---------------------------------------------------------------- REMOVE, RENAME


def test_remove(local_client: RpcClient, clock: FakeClock) -> None:
    c = local_client
    root = c.walk("/")
    c.write_file("/f", b"x")
    clock.advance(2)
    res = c.remove(root, "f")
    assert res.status == OK
    before, after = res.dir_wcc.before.attributes, res.dir_wcc.after.attributes
    assert before is not None and after is not None and after.mtime != before.mtime
    assert c.remove(root, "f").status == Nfsstat3.NFS3ERR_NOENT


def test_rename_replaces_files_atomically(local_client: RpcClient) -> None:
    c = local_client
    root = c.walk("/")
    c.write_file("/a.txt", b"old")
    tmp = c.write_file("/sedXYZ", b"new")
    res = c.rename(root, "sedXYZ", root, "a.txt")
    assert res.status == OK
    assert res.fromdir_wcc.after.attributes is not None
    assert c.listdir("/") == ["a.txt"]
    assert c.read_file("/a.txt") == b"new"
    assert c.walk("/a.txt") == tmp


def test_rename_errors(local_client: RpcClient) -> None:
    c = local_client
    root = c.walk("/")
    c.write_file("/f", b"x")
    c.mkdir(root, "d")
    c.mkdir(root, "e")
    c.write_file("/e/inner", b"y")
    d = c.walk("/d")
    assert c.rename(root, "missing", root, "x").status == Nfsstat3.NFS3ERR_NOENT
    assert c.rename(root, "f", root, "d").status == Nfsstat3.NFS3ERR_ISDIR
    assert c.rename(root, "d", root, "f").status == Nfsstat3.NFS3ERR_NOTDIR
    assert c.rename(root, "d", root, "e").status == Nfsstat3.NFS3ERR_NOTEMPTY
    assert c.rename(root, "d", d, "sub").status == Nfsstat3.NFS3ERR_INVAL
    assert c.rename(root, "f", root, "f").status == OK
    assert c.rename(root, "e", d, "e2").status == OK
    assert c.read_file("/d/e2/inner") == b"y"
    assert c.lookup(c.walk("/d/e2"), "..").resok is not None
    dotdot = c.lookup(c.walk("/d/e2"), "..").resok
    assert dotdot is not None and dotdot.object == d


# ---------------------------------------------------------------- READDIR, READDIRPLUS


def _resok_size(res: Readdir3Res | Readdirplus3Res) -> int:
    p = Packer()
    res.pack(p)
    return len(p)


@pytest.fixture
def populated(local_client: RpcClient, memfs: MemoryFs) -> list[str]:
    names = [f"file-{i:03d}-{'x' * (i % 13)}" for i in range(150)]
    for name in names:
        memfs.put(f"/dir/{name}", name.encode())
    return names


@pytest.mark.parametrize("count", [200, 512, 1000, 4096, 65536])
def test_readdir_pages_cover_every_entry_once_within_count(
    local_client: RpcClient, populated: list[str], count: int
) -> None:
    c = local_client
    fh = c.walk("/dir")
    seen: list[str] = []
    cookie, verf = 0, ZERO_VERF
    while True:
        res = c.readdir(fh, cookie, verf, count)
        assert res.resok is not None, res.status
        assert _resok_size(res) <= count
        seen += [e.name for e in res.resok.reply.entries]
        verf = res.resok.cookieverf
        if res.resok.reply.eof:
            break
        cookie = res.resok.reply.entries[-1].cookie
    assert seen[:2] == [".", ".."]
    assert sorted(seen[2:]) == sorted(populated)
    assert len(seen) == len(set(seen))
    assert c.listdir("/dir", count=count) == seen[2:]  # deterministic


def test_readdir_too_small_and_bad_cookie(local_client: RpcClient, populated: list[str]) -> None:
    c = local_client
    fh = c.walk("/dir")
    assert c.readdir(fh, 0, ZERO_VERF, 100).status == Nfsstat3.NFS3ERR_TOOSMALL
    first = c.readdir(fh, 0, ZERO_VERF, 1000)
    assert first.resok is not None
    cookie = first.resok.reply.entries[-1].cookie
    assert c.readdir(fh, cookie, b"wrongvrf", 1000).status == Nfsstat3.NFS3ERR_BAD_COOKIE
    assert c.readdir(fh, cookie, ZERO_VERF, 1000).status == OK  # zeros are accepted
    assert c.readdir(c.walk("/dir/file-000-"), 0).status == Nfsstat3.NFS3ERR_NOTDIR


def test_readdir_survives_removal_between_pages(
    local_client: RpcClient, populated: list[str], memfs: MemoryFs
) -> None:
    c = local_client
    fh = c.walk("/dir")
    res = c.readdir(fh, 0, ZERO_VERF, 1000)
    assert res.resok is not None
    got = [e.name for e in res.resok.reply.entries]
    last = res.resok.reply.entries[-1]
    c.remove(fh, last.name)  # the entry the cookie points at is gone
    rest = c.readdir(fh, last.cookie, res.resok.cookieverf, 1_000_000)
    assert rest.resok is not None and rest.resok.reply.eof
    names = got + [e.name for e in rest.resok.reply.entries]
    assert sorted(names[2:]) == sorted(populated)


@pytest.mark.parametrize(("dircount", "maxcount"), [(300, 2000), (1000, 4000), (512, 100000)])
def test_readdirplus_respects_both_limits(
    local_client: RpcClient, populated: list[str], dircount: int, maxcount: int
) -> None:
    c = local_client
    fh = c.walk("/dir")
    seen: list[str] = []
    cookie, verf = 0, ZERO_VERF
    while True:
        res = c.readdirplus(fh, cookie, verf, dircount, maxcount)
        assert res.resok is not None, res.status
        assert _resok_size(res) <= maxcount
        entries = res.resok.reply.entries
        assert sum(e.dir_size() for e in entries) <= dircount
        for e in entries:
            assert e.name_attributes.attributes is not None
            assert e.name_attributes.attributes.fileid == e.fileid
            assert e.name_handle.handle is not None
            if e.name not in (".", ".."):
                lookup = c.lookup(fh, e.name).resok
                assert lookup is not None and lookup.object == e.name_handle.handle
        seen += [e.name for e in entries]
        verf = res.resok.cookieverf
        if res.resok.reply.eof:
            break
        cookie = entries[-1].cookie
    assert sorted(seen[2:]) == sorted(populated)
    assert c.readdirplus(fh, 0, ZERO_VERF, 10, 10000).status == Nfsstat3.NFS3ERR_TOOSMALL


def test_readdir_of_empty_directory(local_client: RpcClient) -> None:
    c = local_client
    c.mkdir(c.walk("/"), "empty")
    res = c.readdir(c.walk("/empty"))
    assert res.resok is not None and res.resok.reply.eof
    assert [e.name for e in res.resok.reply.entries] == [".", ".."]


# ---------------------------------------------------------------- FSSTAT, FSINFO, PATHCONF


def test_fsinfo_advertises_one_mebibyte_transfers(local_client: RpcClient) -> None:
    root = local_client.walk("/")
    res = local_client.fsinfo(root)
    assert res.resok is not None
    info = res.resok
    assert (info.rtmax, info.rtpref, info.wtmax, info.wtpref) == (1 << 20,) * 4
    assert info.dtpref > 0 and info.rtmult > 0 and info.wtmult > 0
    assert info.properties == FSF3_HOMOGENEOUS | FSF3_CANSETTIME
    assert info.time_delta == Nfstime3(0, 1)
    assert info.obj_attributes.attributes is not None


def test_fsstat_and_pathconf(local_client: RpcClient) -> None:
    c = local_client
    root = c.walk("/")
    before = c.fsstat(root).resok
    c.write_file("/f", b"x" * 1000)
    after = c.fsstat(root).resok
    assert before is not None and after is not None
    assert after.fbytes == before.fbytes - 1000 and after.ffiles == before.ffiles - 1
    pc = c.pathconf(root).resok
    assert pc is not None
    assert (pc.name_max, pc.no_trunc, pc.case_preserving) == (255, True, True)


def test_conveniences_raise_on_errors(local_client: RpcClient) -> None:
    with pytest.raises(NfsStatusError) as err:
        local_client.read_file("/missing")
    assert err.value.status == Nfsstat3.NFS3ERR_NOENT


def test_fattr_size_of_files_is_exact(local_client: RpcClient) -> None:
    fh = local_client.write_file("/f", b"a" * 12345)
    attrs: Fattr3 = local_client.attrs(fh)
    assert attrs.size == 12345 and attrs.type == Ftype3.NF3REG
    assert attrs.fileid == FileId(int.from_bytes(fh.data[4:12], "big"))
