"""``Bounded`` (per-client state that forgets its oldest entries) and its index of keys by
client address, against a plain model."""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nfs.table import writers
from nfs.table.staging import BytesBase, Staging, read_all
from nfs.table.writers import Bounded, ClientPages, peer_of

_SLOTS = st.sampled_from(
    ["10.0.0.1:700", "10.0.0.1:700\0p=1", "10.0.0.1:700\0p=2", "10.0.0.2:701", "10.0.0.2:701\0x"]
)
_OPS = st.lists(st.tuples(st.sampled_from(["set", "pop"]), _SLOTS, st.integers(0, 9)), max_size=60)


@settings(max_examples=300, derandomize=True)
@given(ops=_OPS, limit=st.integers(1, 4))
def test_keys_of_a_client_are_the_keys_whose_address_it_is(
    ops: list[tuple[str, str, int]], limit: int
) -> None:
    b: Bounded[str, int] = Bounded(limit, peer_of)
    model: OrderedDict[str, int] = OrderedDict()
    for op, key, value in ops:
        if op == "set":
            b.set(key, value)
            model[key] = value
            model.move_to_end(key)
            while len(model) > limit:
                model.popitem(last=False)
        else:
            assert b.pop(key) == model.pop(key, None)
        assert b.key_list() == list(model)
        for peer in ("10.0.0.1:700", "10.0.0.2:701", "10.0.0.3:1"):
            assert sorted(b.keys_of(peer)) == sorted(k for k in model if peer_of(k) == peer)


def test_a_page_file_an_earlier_boot_kept_is_forgotten_with_its_client(tmp_path: Path) -> None:
    """The page files on disk are known from the start: a client's file kept before a
    restart goes when that client's address mounts from another process."""
    directory = tmp_path / "pages"
    ClientPages(directory, 8)
    kept = ClientPages(directory, 8)._path("10.0.0.9:999")
    kept.write_bytes(b'{"peer": "10.0.0.9:999"}\n')
    other = ClientPages(directory, 8)._path("10.0.0.8:998")
    other.write_bytes(b'{"peer": "10.0.0.8:998"}\n')
    restarted = ClientPages(directory, 8)
    restarted.forget_client("10.0.0.9:999")
    assert not kept.exists() and other.exists()
    restarted.forget_client("10.0.0.7:997")  # nothing kept for it: nothing happens
    assert other.exists()


def _page(base: BytesBase, line: bytes) -> Staging:
    page = Staging(base, base_version=3, touched=0.0, mtime=0.0)
    page.write(base.size, line, touched=0.0, mtime=0.0)
    return page


def test_partition_pages_an_earlier_boot_kept_are_forgotten_with_their_client(
    tmp_path: Path,
) -> None:
    """A client's pages of partition files (slots of its address) are named by that
    address: after a restart, the address mounting again from another process takes all
    of them, and no other client's."""
    directory = tmp_path / "pages"
    base = BytesBase(b"id,name\n1,a\n")
    boot = ClientPages(directory, 8)
    for slot in ("10.0.0.9:999", "10.0.0.9:999\0p=1", "10.0.0.9:999\0p=2", "10.0.0.8:998\0p=1"):
        boot.put(slot, 4, _page(base, b"2,b\n"))
    restarted = ClientPages(directory, 8)
    restarted.forget_client("10.0.0.9:999")
    left = sorted(p.name for p in directory.glob("*.page"))
    assert left == [restarted._path("10.0.0.8:998\0p=1").name]
    assert restarted.get("10.0.0.9:999\0p=1", lambda v: base) is None
    got = restarted.get("10.0.0.8:998\0p=1", lambda v: base)
    assert got is not None and got[0] == 4
    assert bytes(read_all(got[1])) == b"id,name\n1,a\n2,b\n"


def test_a_page_named_by_its_slot_alone_is_still_read_and_then_replaced(tmp_path: Path) -> None:
    """A page file of an earlier version (named by the slot alone) is matched after the
    upgrade; the slot's next page replaces it, and forgetting the slot removes it."""
    directory = tmp_path / "pages"
    base = BytesBase(b"id\n1\n")
    ClientPages(directory, 8).put("10.0.0.9:999", 4, _page(base, b"2\n"))
    pages = ClientPages(directory, 8)
    pages._path("10.0.0.9:999").rename(pages._legacy_path("10.0.0.9:999"))
    upgraded = ClientPages(directory, 8)
    got = upgraded.get("10.0.0.9:999", lambda v: base)
    assert got is not None and bytes(read_all(got[1])) == b"id\n1\n2\n"
    upgraded.put("10.0.0.9:999", 5, _page(base, b"3\n"))
    assert [p.name for p in directory.glob("*.page")] == [upgraded._path("10.0.0.9:999").name]
    upgraded._path("10.0.0.9:999").rename(upgraded._legacy_path("10.0.0.9:999"))
    again = ClientPages(directory, 8)
    again.forget("10.0.0.9:999")
    assert list(directory.glob("*.page")) == []


def test_page_files_stay_within_the_limit_across_restarts(tmp_path: Path) -> None:
    """Past ``limit`` page files the oldest go, files an earlier boot kept counted too."""
    directory = tmp_path / "pages"
    base = BytesBase(b"id\n1\n")
    boot = ClientPages(directory, 2)
    for i in range(3):
        boot.put(f"10.0.0.{i}:1", 4, _page(base, b"2\n"))
    kept = sorted(directory.glob("*.page"))
    assert len(kept) == 2
    for age, path in enumerate(kept):  # distinct times, older than the next page's
        os.utime(path, ns=(path.stat().st_atime_ns, 10**18 + age * 10**9))
    restarted = ClientPages(directory, 2)
    restarted.put("10.0.0.9:1", 5, _page(base, b"3\n"))
    names = {p.name for p in directory.glob("*.page")}
    assert names == {kept[1].name, restarted._path("10.0.0.9:1").name}


def test_a_page_file_left_half_rewritten_is_not_used(tmp_path: Path) -> None:
    """A page file is rewritten in place (no file created per append): one a crash left
    spoiled, or with the new head over the older page's bytes, is not matched; a whole
    one is, after a restart."""
    directory = tmp_path / "pages"
    base = BytesBase(b"id,name\n1,a\n")
    slot = "10.0.0.9:999"
    pages = ClientPages(directory, 8)
    pages.put(slot, 4, _page(base, b"2,a long line the next page is shorter than\n"))
    path = pages._path(slot)
    older = path.read_bytes()
    pages.put(slot, 5, _page(base, b"3,b\n"))
    newer = path.read_bytes()
    assert len(newer) < len(older)
    got = ClientPages(directory, 8).get(slot, lambda v: base)
    assert got is not None and got[0] == 5
    assert bytes(read_all(got[1])) == b"id,name\n1,a\n3,b\n"
    # the crash before the cut: the new page, then the tail of the older one
    path.write_bytes(newer + older[len(newer) :])
    assert ClientPages(directory, 8).get(slot, lambda v: base) is None
    # the crash before the new page was written: the older one, spoiled
    path.write_bytes(b"\0" + older[1:])
    assert ClientPages(directory, 8).get(slot, lambda v: base) is None
    # the crash in the middle of the new page's data: its head, older bytes after
    path.write_bytes(newer[:-2] + b"x\n")
    assert ClientPages(directory, 8).get(slot, lambda v: base) is None
    assert not list(directory.glob("*.tmp")) and len(list(directory.glob("*"))) == 1


def test_a_page_rewrite_cut_short_leaves_no_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies after the older page is spoiled, before the new one is written:
    a restart matches no page for the client, never the older one."""
    directory = tmp_path / "pages"
    base = BytesBase(b"id\n1\n")
    slot = "10.0.0.9:999"
    ClientPages(directory, 8).put(slot, 4, _page(base, b"2\n"))

    def killed(fd: int, data: bytes) -> None:
        raise KeyboardInterrupt  # not an OSError: nothing is cleaned up

    monkeypatch.setattr(writers, "_pwrite_all", killed)
    with pytest.raises(KeyboardInterrupt):
        ClientPages(directory, 8).put(slot, 5, _page(base, b"3\n"))
    assert ClientPages(directory, 8).get(slot, lambda v: base) is None
