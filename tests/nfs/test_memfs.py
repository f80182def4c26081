"""MemoryFs: the in-memory Vfs, checked directly and against a dict model."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nfs.protocol.memfs import IdAllocator, MemoryFs
from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import DirEntry, FileId, NfsError, Vfs
from tests.nfs.conftest import FakeClock

ROOT = CallContext.local()
USER = CallContext.local(uid=1000, gid=1000)


def status(fn: object, *args: object, **kwargs: object) -> Nfsstat3:
    try:
        fn(*args, **kwargs)  # type: ignore[operator]
    except NfsError as err:
        return err.status
    return Nfsstat3.NFS3_OK


def test_memoryfs_is_a_vfs() -> None:
    assert isinstance(MemoryFs(), Vfs)


def test_clock_is_injected(clock: FakeClock) -> None:
    fs = MemoryFs(clock)
    fid = fs.put("/f", b"x")
    t0 = fs.getattr(fid).mtime
    clock.advance(10)
    fs.write(fid, 0, b"y", StableHow.FILE_SYNC, ROOT)
    assert fs.getattr(fid).mtime.seconds == t0.seconds + 10


def test_attributes_are_built_once_and_follow_every_change(clock: FakeClock) -> None:
    """GETATTR of an unchanged entry returns the attributes built last time (no new
    Fattr3 per call); each change shows in the next call."""
    fs = MemoryFs(clock)
    d = fs.add_dir(fs.root_dir(), "data")
    first = fs.getattr(d)
    assert fs.getattr(d) is first
    clock.advance(5)
    sub = fs.mkdir(d, "sub", Sattr3(), ROOT)
    made = fs.getattr(d)
    assert made.nlink == first.nlink + 1 and made.mtime.seconds == first.mtime.seconds + 5
    assert fs.getattr(d) is made
    fs.setattr(d, Sattr3(mode=0o700), ROOT)
    assert fs.getattr(d).mode == 0o700
    f = fs.add_file(d, "f", b"abc")
    assert fs.getattr(f).size == 3
    fs.write(f, 3, b"defg", StableHow.FILE_SYNC, ROOT)
    assert fs.getattr(f).size == 7 and fs.getattr(f) is fs.getattr(f)
    fs.setattr(f, Sattr3(size=1), ROOT)
    assert fs.getattr(f).size == 1
    fs.rmdir(d, "sub", ROOT)
    assert fs.getattr(d).nlink == first.nlink
    assert not fs.contains(sub)


def test_shared_id_allocator_and_chosen_root_keep_ids_apart() -> None:
    ids = IdAllocator(1 << 48)
    scratch = MemoryFs(ids=ids, root_id=FileId(7))
    other = MemoryFs(ids=ids, root_id=FileId(7))
    assert scratch.root_dir() == 7
    d = scratch.add_dir(FileId(7), "data", fid=FileId(100))
    assert d == 100
    a = scratch.add_file(d, "tmp", b"1")
    b = other.add_file(other.root_dir(), "tmp", b"2")
    assert a >= 1 << 48 and b >= 1 << 48 and a != b
    assert scratch.contains(a) and not scratch.contains(b)
    with pytest.raises(ValueError):
        scratch.add_dir(FileId(7), "again", fid=FileId(100))


def test_pop_file_takes_content_and_removes(clock: FakeClock) -> None:
    fs = MemoryFs(clock)
    d = fs.add_dir(fs.root_dir(), "data")
    fs.add_file(d, "sedAbc", b"new content")
    fid, data = fs.pop_file(d, "sedAbc")
    assert data == b"new content"
    assert not fs.contains(fid)
    assert fs.listdir(d) == []
    assert status(fs.pop_file, d, "sedAbc") == Nfsstat3.NFS3ERR_NOENT


def test_permissions_follow_mode_bits() -> None:
    fs = MemoryFs(root_mode=0o755)
    assert status(fs.create, fs.root_dir(), "x", Sattr3(), USER, guarded=False) == (
        Nfsstat3.NFS3ERR_ACCES
    )
    home = fs.add_dir(fs.root_dir(), "home", mode=0o755, uid=1000, gid=1000)
    fid = fs.create(home, "mine", Sattr3(mode=0o444), USER, guarded=True)
    # like knfsd, the owner may write a file whatever its mode
    assert fs.write(fid, 0, b"ok", StableHow.UNSTABLE, USER) == (2, StableHow.UNSTABLE)
    other = CallContext.local(uid=2000, gid=2000)
    assert fs.read(fid, 0, 10, other) == (b"ok", True)  # 0444: others may read
    assert status(fs.write, fid, 0, b"x", StableHow.FILE_SYNC, other) == Nfsstat3.NFS3ERR_ACCES
    assert status(fs.remove, home, "mine", other) == Nfsstat3.NFS3ERR_ACCES
    assert status(fs.setattr, fid, Sattr3(uid=2000), USER) == Nfsstat3.NFS3ERR_PERM
    assert fs.setattr(fid, Sattr3(uid=2000), ROOT).uid == 2000


def test_readdir_is_deterministic_and_paginates() -> None:
    fs = MemoryFs()
    for i in range(10):
        fs.put(f"/f{i}", b"")
    full = fs.readdir(fs.root_dir(), after=0, max_entries=100, ctx=ROOT)
    assert full.eof and [e.name for e in full.entries][:2] == [".", ".."]
    assert fs.readdir(fs.root_dir(), after=0, max_entries=100, ctx=ROOT) == full
    paged: list[DirEntry] = []
    after = 0
    while True:
        page = fs.readdir(fs.root_dir(), after=after, max_entries=3, ctx=ROOT)
        paged += page.entries
        if page.eof:
            break
        after = page.entries[-1].cookie
    assert tuple(paged) == full.entries
    cookies = [e.cookie for e in full.entries]
    assert cookies == sorted(cookies) and 0 not in cookies


# ---------------------------------------------------------------- model-based check


class MemoryFsModel(RuleBasedStateMachine):
    """MemoryFs against a dict of paths: files (bytes) and directories (None)."""

    def __init__(self) -> None:
        super().__init__()
        self.fs = MemoryFs(FakeClock())
        self.model: dict[str, bytes | None] = {"": None}

    def dirs(self) -> list[str]:
        return sorted(p for p, v in self.model.items() if v is None)

    def files(self) -> list[str]:
        return sorted(p for p, v in self.model.items() if v is not None)

    def fid(self, path: str) -> FileId:
        return self.fs.resolve("/" + path)

    @rule(data=st.data(), name=st.sampled_from(["a", "b", "c", "d.csv"]))
    def create(self, data: st.DataObject, name: str) -> None:
        parent = data.draw(st.sampled_from(self.dirs()))
        path = f"{parent}/{name}".lstrip("/")
        got = status(self.fs.create, self.fid(parent), name, Sattr3(size=0), ROOT, guarded=False)
        if path not in self.model:
            assert got == Nfsstat3.NFS3_OK
            self.model[path] = b""
        elif self.model[path] is None:
            assert got == Nfsstat3.NFS3ERR_ISDIR
        else:
            assert got == Nfsstat3.NFS3_OK
            self.model[path] = b""

    @rule(data=st.data(), name=st.sampled_from(["x", "y"]))
    def mkdir(self, data: st.DataObject, name: str) -> None:
        parent = data.draw(st.sampled_from(self.dirs()))
        path = f"{parent}/{name}".lstrip("/")
        got = status(self.fs.mkdir, self.fid(parent), name, Sattr3(), ROOT)
        if path in self.model:
            assert got == Nfsstat3.NFS3ERR_EXIST
        else:
            assert got == Nfsstat3.NFS3_OK
            self.model[path] = None

    @precondition(lambda self: self.files())
    @rule(data=st.data(), offset=st.integers(0, 40), chunk=st.binary(max_size=20))
    def write(self, data: st.DataObject, offset: int, chunk: bytes) -> None:
        path = data.draw(st.sampled_from(self.files()))
        self.fs.write(self.fid(path), offset, chunk, StableHow.UNSTABLE, ROOT)
        old = self.model[path]
        assert old is not None
        buf = bytearray(old)
        if len(buf) < offset + len(chunk):
            buf.extend(bytes(offset + len(chunk) - len(buf)))
        buf[offset : offset + len(chunk)] = chunk
        self.model[path] = bytes(buf)

    @precondition(lambda self: self.files())
    @rule(data=st.data(), size=st.integers(0, 50))
    def truncate(self, data: st.DataObject, size: int) -> None:
        path = data.draw(st.sampled_from(self.files()))
        self.fs.setattr(self.fid(path), Sattr3(size=size), ROOT)
        old = self.model[path]
        assert old is not None
        self.model[path] = old[:size] + bytes(max(0, size - len(old)))

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(sorted(self.model)))
        if not path:
            return
        parent, _, name = path.rpartition("/")
        if self.model[path] is None:
            got = status(self.fs.rmdir, self.fid(parent), name, ROOT)
            if any(p.startswith(path + "/") for p in self.model):
                assert got == Nfsstat3.NFS3ERR_NOTEMPTY
                return
        else:
            got = status(self.fs.remove, self.fid(parent), name, ROOT)
        assert got == Nfsstat3.NFS3_OK
        del self.model[path]

    @precondition(lambda self: len(self.model) > 1)
    @rule(data=st.data(), new_name=st.sampled_from(["a", "b", "z"]))
    def rename(self, data: st.DataObject, new_name: str) -> None:
        src = data.draw(st.sampled_from([p for p in sorted(self.model) if p]))
        dst_parent = data.draw(st.sampled_from(self.dirs()))
        dst = f"{dst_parent}/{new_name}".lstrip("/")
        src_parent, _, src_name = src.rpartition("/")
        got = status(
            self.fs.rename, self.fid(src_parent), src_name, self.fid(dst_parent), new_name, ROOT
        )
        src_is_dir = self.model[src] is None
        if dst == src:
            assert got == Nfsstat3.NFS3_OK
            return
        if src_is_dir and (dst_parent == src or dst_parent.startswith(src + "/")):
            assert got == Nfsstat3.NFS3ERR_INVAL
            return
        if dst in self.model:
            dst_is_dir = self.model[dst] is None
            if src_is_dir and not dst_is_dir:
                assert got == Nfsstat3.NFS3ERR_NOTDIR
                return
            if not src_is_dir and dst_is_dir:
                assert got == Nfsstat3.NFS3ERR_ISDIR
                return
            if dst_is_dir and any(p.startswith(dst + "/") for p in self.model):
                assert got == Nfsstat3.NFS3ERR_NOTEMPTY
                return
        assert got == Nfsstat3.NFS3_OK
        moved = {p: v for p, v in self.model.items() if p == src or p.startswith(src + "/")}
        for p in moved:
            del self.model[p]
        self.model.pop(dst, None)
        for p, v in moved.items():
            self.model[dst + p[len(src) :]] = v

    @invariant()
    def tree_matches(self) -> None:
        for path, content in self.model.items():
            fid = self.fid(path)
            if content is None:
                names = sorted(
                    p.rpartition("/")[2] for p in self.model if p and p.rpartition("/")[0] == path
                )
                assert self.fs.listdir(fid) == names
                assert self.fs.getattr(fid).nlink == 2 + sum(
                    1
                    for p in self.model
                    if p.rpartition("/")[0] == path and self.model[p] is None and p
                )
            else:
                assert self.fs.read_all(fid) == content
                assert self.fs.getattr(fid).size == len(content)


TestMemoryFsModel = MemoryFsModel.TestCase
TestMemoryFsModel.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
