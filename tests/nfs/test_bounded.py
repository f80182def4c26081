"""``Bounded`` (per-client state that forgets its oldest entries) and its index of keys by
client address, against a plain model."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

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
