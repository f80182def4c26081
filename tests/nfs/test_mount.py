"""MOUNT v3 (RFC 1813 App. I) and the port mapper (RFC 1833), sans-IO."""

from __future__ import annotations

import pytest

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.mount import MOUNT_PROGRAM, MOUNT_V3, ExportNode, MountProc3, Mountstat3
from nfs.protocol.nfs3 import NfsFh3
from nfs.protocol.portmap import (
    IPPROTO_TCP,
    IPPROTO_UDP,
    PMAP_PROGRAM,
    PMAP_V2,
    Mapping,
    PmapBool,
    PmapList,
    PmapPort,
    PmapProc,
)
from nfs.protocol.rpc import AcceptStat, Dispatcher
from nfs.protocol.xdr import Packer
from tests.nfs.rpcclient import RpcClient


@pytest.fixture
def tree(memfs: MemoryFs) -> MemoryFs:
    memfs.put("/data/data.csv", b"id\n1\n")
    memfs.put("/schema.sql", b"CREATE TABLE data (id INT);\n")
    memfs.put("/versions/0/data.csv", b"id\n")
    return memfs


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/", "/"),
        ("", "/"),
        ("/share", "/"),
        ("/share/", "/"),
        ("/data", "/data"),
        ("/share/data", "/data"),
        ("/versions/0", "/versions/0"),
        ("//share//versions/./0/", "/versions/0"),
    ],
)
def test_mnt_accepts_the_export_its_alias_and_directories_below(
    dispatcher: Dispatcher, tree: MemoryFs, path: str, target: str
) -> None:
    c = RpcClient.over(dispatcher)
    res = c.mnt(path)
    assert res.fhs_status == Mountstat3.MNT3_OK and res.mountinfo is not None
    assert res.mountinfo.auth_flavors == (1, 0)  # AUTH_SYS, AUTH_NONE
    attrs = c.attrs(NfsFh3(res.mountinfo.fhandle))
    assert attrs.fileid == tree.resolve(target)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/nope", Mountstat3.MNT3ERR_NOENT),
        ("/share/nope", Mountstat3.MNT3ERR_NOENT),
        ("/schema.sql", Mountstat3.MNT3ERR_NOTDIR),
        ("/data/data.csv", Mountstat3.MNT3ERR_NOTDIR),
        ("/data/data.csv/x", Mountstat3.MNT3ERR_NOTDIR),
        ("/data/../..", Mountstat3.MNT3ERR_ACCES),
    ],
)
def test_mnt_errors(dispatcher: Dispatcher, tree: MemoryFs, path: str, status: Mountstat3) -> None:
    assert RpcClient.over(dispatcher).mnt(path).fhs_status == status


def test_a_real_share_directory_is_reachable_when_the_alias_has_no_match(
    dispatcher: Dispatcher, memfs: MemoryFs
) -> None:
    memfs.put("/share/only-here/f", b"x")
    c = RpcClient.over(dispatcher)
    res = c.mnt("/share/only-here")
    assert res.mountinfo is not None
    assert c.attrs(NfsFh3(res.mountinfo.fhandle)).fileid == memfs.resolve("/share/only-here")


def test_overlong_path_is_garbage(dispatcher: Dispatcher) -> None:
    p = Packer()
    p.pack_string("x" * 1025)  # DirPath refuses to encode it
    reply = RpcClient.over(dispatcher).call(
        MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_MNT, p.get_buffer()
    )
    assert reply.header.accept_stat == AcceptStat.GARBAGE_ARGS


def test_dump_umnt_umntall_export(dispatcher: Dispatcher, tree: MemoryFs) -> None:
    c = RpcClient.over(dispatcher)
    c.mount_null()
    c.mount("/")
    c.mount("/data")
    dump = c.dump()
    assert [(m.hostname, m.directory) for m in dump.entries] == [
        ("rpcclient", "/"),
        ("rpcclient", "/data"),
    ]
    c.umnt("/")
    assert [m.directory for m in c.dump().entries] == ["/data"]
    c.umntall()
    assert c.dump().entries == ()
    assert c.exports().entries == (ExportNode("/"), ExportNode("/share"))


def test_portmap_getport_and_dump(dispatcher: Dispatcher) -> None:
    c = RpcClient.over(dispatcher)

    def getport(prog: int, vers: int, prot: int = IPPROTO_TCP) -> int:
        reply = c.call(
            PMAP_PROGRAM, PMAP_V2, PmapProc.PMAPPROC_GETPORT, Mapping(prog, vers, prot, 0)
        )
        return reply.result(PmapPort.unpack).port

    assert getport(100003, 3) == 2049
    assert getport(100005, 3) == 2049
    assert getport(100003, 4) == 0
    assert getport(100003, 3, IPPROTO_UDP) == 0
    assert getport(100227, 3) == 0
    dump = c.call(PMAP_PROGRAM, PMAP_V2, PmapProc.PMAPPROC_DUMP).result(PmapList.unpack)
    assert {(m.prog, m.vers, m.prot, m.port) for m in dump.mappings} >= {
        (100003, 3, IPPROTO_TCP, 2049),
        (100005, 3, IPPROTO_TCP, 2049),
    }
    refused = c.call(
        PMAP_PROGRAM, PMAP_V2, PmapProc.PMAPPROC_SET, Mapping(1, 1, IPPROTO_TCP, 5)
    ).result(PmapBool.unpack)
    assert refused == PmapBool(False)
    assert c.call(PMAP_PROGRAM, 3, 0).header.accept_stat == AcceptStat.PROG_MISMATCH
