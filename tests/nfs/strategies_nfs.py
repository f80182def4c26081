"""Hypothesis strategies for every XDR wire type of nfs/ (one module, as attrs does).

`WIRE_TYPES` maps each type to a strategy of valid values, so that
``T.unpack(pack(x)) == x`` can be checked for all of them in one test.
"""

from __future__ import annotations

from typing import Any, Final

from hypothesis import strategies as st

from nfs.protocol import mount, nfs3, portmap, rpc
from nfs.protocol.nfs3 import (
    Createmode3,
    Ftype3,
    Nfsstat3,
    StableHow,
    TimeHow,
)

u32: Final = st.integers(0, 0xFFFFFFFF)
u64: Final = st.integers(0, 0xFFFFFFFFFFFFFFFF)
names: Final = st.text(min_size=1, max_size=40)
paths: Final = st.text(max_size=80)
verf8: Final = st.binary(min_size=8, max_size=8)
errors: Final = st.sampled_from([s for s in Nfsstat3 if s != Nfsstat3.NFS3_OK])
OK: Final = Nfsstat3.NFS3_OK

fh: Final = st.builds(nfs3.NfsFh3, st.binary(max_size=64))
nfstime: Final = st.builds(nfs3.Nfstime3, u32, u32)
specdata: Final = st.builds(nfs3.Specdata3, u32, u32)
fattr3: Final = st.builds(
    nfs3.Fattr3,
    type=st.sampled_from(Ftype3),
    mode=u32,
    nlink=u32,
    uid=u32,
    gid=u32,
    size=u64,
    used=u64,
    rdev=specdata,
    fsid=u64,
    fileid=u64,
    atime=nfstime,
    mtime=nfstime,
    ctime=nfstime,
)
post_op_attr: Final = st.builds(nfs3.PostOpAttr, st.none() | fattr3)
wcc_attr: Final = st.builds(nfs3.WccAttr, u64, nfstime, nfstime)
pre_op_attr: Final = st.builds(nfs3.PreOpAttr, st.none() | wcc_attr)
wcc_data: Final = st.builds(nfs3.WccData, pre_op_attr, post_op_attr)
post_op_fh: Final = st.builds(nfs3.PostOpFh3, st.none() | fh)
set_time: Final = st.one_of(
    st.just(nfs3.SetTime()),
    st.just(nfs3.SetTime(TimeHow.SET_TO_SERVER_TIME)),
    st.builds(nfs3.SetTime, st.just(TimeHow.SET_TO_CLIENT_TIME), nfstime),
)
sattr3: Final = st.builds(
    nfs3.Sattr3,
    st.none() | u32,
    st.none() | u32,
    st.none() | u32,
    st.none() | u64,
    set_time,
    set_time,
)
guard: Final = st.builds(nfs3.Sattrguard3, st.none() | nfstime)
diropargs: Final = st.builds(nfs3.DirOpArgs3, fh, names)
createhow: Final = st.one_of(
    st.builds(
        nfs3.CreateHow3,
        st.sampled_from([Createmode3.UNCHECKED, Createmode3.GUARDED]),
        obj_attributes=sattr3,
    ),
    st.builds(nfs3.CreateHow3, st.just(Createmode3.EXCLUSIVE), verf=verf8),
)
mknoddata: Final = st.one_of(
    st.builds(nfs3.Mknoddata3, st.sampled_from([Ftype3.NF3CHR, Ftype3.NF3BLK]), sattr3, specdata),
    st.builds(nfs3.Mknoddata3, st.sampled_from([Ftype3.NF3SOCK, Ftype3.NF3FIFO]), sattr3),
    st.builds(nfs3.Mknoddata3, st.sampled_from([Ftype3.NF3REG, Ftype3.NF3DIR, Ftype3.NF3LNK])),
)
entry3: Final = st.builds(nfs3.Entry3, u64, names, u64)
entryplus3: Final = st.builds(nfs3.Entryplus3, u64, names, u64, post_op_attr, post_op_fh)


def res(cls: Any, ok: st.SearchStrategy[Any], fail: st.SearchStrategy[Any] | None) -> Any:
    """Strategy of a result union: NFS3_OK with resok, or an error with resfail."""
    ok_s = st.builds(cls, st.just(OK), ok)
    if fail is None:
        return ok_s | st.builds(cls, errors)
    return ok_s | st.builds(cls, errors, resfail=fail)


def _view(data: bytes) -> memoryview:
    return memoryview(data)


read3resok: Final = st.builds(
    nfs3.Read3ResOk,
    post_op_attr,
    u32,
    st.booleans(),
    st.binary(max_size=100) | st.binary(max_size=100).map(_view),
)

WIRE_TYPES: Final[dict[type[Any], st.SearchStrategy[Any]]] = {
    # rpc
    rpc.OpaqueAuth: st.builds(rpc.OpaqueAuth, u32, st.binary(max_size=400)),
    rpc.AuthSysParms: st.builds(
        rpc.AuthSysParms,
        u32,
        st.text(max_size=60),
        u32,
        u32,
        st.lists(u32, max_size=16).map(tuple),
    ),
    rpc.CallHeader: st.builds(
        rpc.CallHeader,
        st.builds(rpc.Xid, u32),
        u32,
        u32,
        u32,
        st.builds(rpc.OpaqueAuth, u32, st.binary(max_size=400)),
        st.builds(rpc.OpaqueAuth, u32, st.binary(max_size=400)),
        u32,
    ),
    # nfs3 basic types
    nfs3.Nfstime3: nfstime,
    nfs3.Specdata3: specdata,
    nfs3.NfsFh3: fh,
    nfs3.Fattr3: fattr3,
    nfs3.PostOpAttr: post_op_attr,
    nfs3.WccAttr: wcc_attr,
    nfs3.PreOpAttr: pre_op_attr,
    nfs3.WccData: wcc_data,
    nfs3.PostOpFh3: post_op_fh,
    nfs3.SetTime: set_time,
    nfs3.Sattr3: sattr3,
    nfs3.Sattrguard3: guard,
    nfs3.DirOpArgs3: diropargs,
    nfs3.CreateHow3: createhow,
    nfs3.Symlinkdata3: st.builds(nfs3.Symlinkdata3, sattr3, paths),
    nfs3.Mknoddata3: mknoddata,
    # arguments
    nfs3.Getattr3Args: st.builds(nfs3.Getattr3Args, fh),
    nfs3.Setattr3Args: st.builds(nfs3.Setattr3Args, fh, sattr3, guard),
    nfs3.Lookup3Args: st.builds(nfs3.Lookup3Args, diropargs),
    nfs3.Access3Args: st.builds(nfs3.Access3Args, fh, u32),
    nfs3.Readlink3Args: st.builds(nfs3.Readlink3Args, fh),
    nfs3.Read3Args: st.builds(nfs3.Read3Args, fh, u64, u32),
    nfs3.Write3Args: st.builds(
        nfs3.Write3Args, fh, u64, u32, st.sampled_from(StableHow), st.binary(max_size=100)
    ),
    nfs3.Create3Args: st.builds(nfs3.Create3Args, diropargs, createhow),
    nfs3.Mkdir3Args: st.builds(nfs3.Mkdir3Args, diropargs, sattr3),
    nfs3.Symlink3Args: st.builds(
        nfs3.Symlink3Args, diropargs, st.builds(nfs3.Symlinkdata3, sattr3, paths)
    ),
    nfs3.Mknod3Args: st.builds(nfs3.Mknod3Args, diropargs, mknoddata),
    nfs3.Remove3Args: st.builds(nfs3.Remove3Args, diropargs),
    nfs3.Rmdir3Args: st.builds(nfs3.Rmdir3Args, diropargs),
    nfs3.Rename3Args: st.builds(nfs3.Rename3Args, diropargs, diropargs),
    nfs3.Link3Args: st.builds(nfs3.Link3Args, fh, diropargs),
    nfs3.Readdir3Args: st.builds(nfs3.Readdir3Args, fh, u64, verf8, u32),
    nfs3.Readdirplus3Args: st.builds(nfs3.Readdirplus3Args, fh, u64, verf8, u32, u32),
    nfs3.Fsstat3Args: st.builds(nfs3.Fsstat3Args, fh),
    nfs3.Fsinfo3Args: st.builds(nfs3.Fsinfo3Args, fh),
    nfs3.Pathconf3Args: st.builds(nfs3.Pathconf3Args, fh),
    nfs3.Commit3Args: st.builds(nfs3.Commit3Args, fh, u64, u32),
    # results
    nfs3.Getattr3Res: res(nfs3.Getattr3Res, st.builds(nfs3.Getattr3ResOk, fattr3), None),
    nfs3.Setattr3Res: st.builds(nfs3.Setattr3Res, st.sampled_from(Nfsstat3), wcc_data),
    nfs3.Lookup3Res: res(
        nfs3.Lookup3Res,
        st.builds(nfs3.Lookup3ResOk, fh, post_op_attr, post_op_attr),
        post_op_attr,
    ),
    nfs3.Access3Res: res(
        nfs3.Access3Res, st.builds(nfs3.Access3ResOk, post_op_attr, u32), post_op_attr
    ),
    nfs3.Readlink3Res: res(
        nfs3.Readlink3Res, st.builds(nfs3.Readlink3ResOk, post_op_attr, paths), post_op_attr
    ),
    nfs3.Read3ResOk: read3resok,
    nfs3.Read3Res: res(nfs3.Read3Res, read3resok, post_op_attr),
    nfs3.Write3Res: res(
        nfs3.Write3Res,
        st.builds(nfs3.Write3ResOk, wcc_data, u32, st.sampled_from(StableHow), verf8),
        wcc_data,
    ),
    nfs3.Create3Res: res(
        nfs3.Create3Res,
        st.builds(nfs3.Create3ResOk, post_op_fh, post_op_attr, wcc_data),
        wcc_data,
    ),
    nfs3.Remove3Res: st.builds(nfs3.Remove3Res, st.sampled_from(Nfsstat3), wcc_data),
    nfs3.Rename3Res: st.builds(nfs3.Rename3Res, st.sampled_from(Nfsstat3), wcc_data, wcc_data),
    nfs3.Link3Res: st.builds(nfs3.Link3Res, st.sampled_from(Nfsstat3), post_op_attr, wcc_data),
    nfs3.Entry3: entry3,
    nfs3.Entryplus3: entryplus3,
    nfs3.Dirlist3: st.builds(nfs3.Dirlist3, st.lists(entry3, max_size=5).map(tuple), st.booleans()),
    nfs3.Dirlistplus3: st.builds(
        nfs3.Dirlistplus3, st.lists(entryplus3, max_size=5).map(tuple), st.booleans()
    ),
    nfs3.Readdir3Res: res(
        nfs3.Readdir3Res,
        st.builds(
            nfs3.Readdir3ResOk,
            post_op_attr,
            verf8,
            st.builds(nfs3.Dirlist3, st.lists(entry3, max_size=5).map(tuple), st.booleans()),
        ),
        post_op_attr,
    ),
    nfs3.Readdirplus3Res: res(
        nfs3.Readdirplus3Res,
        st.builds(
            nfs3.Readdirplus3ResOk,
            post_op_attr,
            verf8,
            st.builds(
                nfs3.Dirlistplus3, st.lists(entryplus3, max_size=5).map(tuple), st.booleans()
            ),
        ),
        post_op_attr,
    ),
    nfs3.Fsstat3Res: res(
        nfs3.Fsstat3Res,
        st.builds(nfs3.Fsstat3ResOk, post_op_attr, u64, u64, u64, u64, u64, u64, u32),
        post_op_attr,
    ),
    nfs3.Fsinfo3Res: res(
        nfs3.Fsinfo3Res,
        st.builds(
            nfs3.Fsinfo3ResOk,
            post_op_attr,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u64,
            nfstime,
            u32,
        ),
        post_op_attr,
    ),
    nfs3.Pathconf3Res: res(
        nfs3.Pathconf3Res,
        st.builds(
            nfs3.Pathconf3ResOk,
            post_op_attr,
            u32,
            u32,
            st.booleans(),
            st.booleans(),
            st.booleans(),
            st.booleans(),
        ),
        post_op_attr,
    ),
    nfs3.Commit3Res: res(nfs3.Commit3Res, st.builds(nfs3.Commit3ResOk, wcc_data, verf8), wcc_data),
    # mount
    mount.DirPath: st.builds(mount.DirPath, paths),
    mount.MountRes3: st.one_of(
        st.builds(
            mount.MountRes3,
            st.just(mount.Mountstat3.MNT3_OK),
            st.builds(
                mount.MountRes3Ok,
                st.binary(max_size=64),
                st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8).map(tuple),
            ),
        ),
        st.builds(
            mount.MountRes3,
            st.sampled_from([s for s in mount.Mountstat3 if s != mount.Mountstat3.MNT3_OK]),
        ),
    ),
    mount.MountList: st.builds(
        mount.MountList,
        st.lists(st.builds(mount.MountBody, st.text(max_size=30), paths), max_size=4).map(tuple),
    ),
    mount.Exports: st.builds(
        mount.Exports,
        st.lists(
            st.builds(
                mount.ExportNode, paths, st.lists(st.text(max_size=20), max_size=3).map(tuple)
            ),
            max_size=4,
        ).map(tuple),
    ),
    # portmap
    portmap.Mapping: st.builds(portmap.Mapping, u32, u32, u32, u32),
    portmap.PmapList: st.builds(
        portmap.PmapList,
        st.lists(st.builds(portmap.Mapping, u32, u32, u32, u32), max_size=4).map(tuple),
    ),
    portmap.PmapPort: st.builds(portmap.PmapPort, u32),
    portmap.PmapBool: st.builds(portmap.PmapBool, st.booleans()),
}
"""Every wire type with a strategy of its valid values."""
