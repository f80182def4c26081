"""Record marking (RFC 5531 §11): reassembly is independent of how the bytes arrive."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nfs.protocol.record import (
    LAST_FRAGMENT,
    RecordError,
    RecordReader,
    encode_record,
    encode_record_parts,
)

payloads = st.lists(st.binary(max_size=200), max_size=6)


def fragmented(payload: bytes, sizes: list[int]) -> bytes:
    """Encode `payload` as several fragments of the given sizes (the rest in the last)."""
    out = bytearray()
    pos = 0
    for size in sizes:
        if pos + size >= len(payload):
            break
        out += struct.pack(">I", size) + payload[pos : pos + size]
        pos += size
    rest = payload[pos:]
    out += struct.pack(">I", len(rest) | LAST_FRAGMENT) + rest
    return bytes(out)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[bytes], bytes]:
    records = draw(payloads)
    stream = b"".join(
        fragmented(r, draw(st.lists(st.integers(0, 50), max_size=4))) for r in records
    )
    return records, stream


def feed_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes]:
    reader = RecordReader()
    out: list[bytes] = []
    prev = 0
    for cut in [*sorted(cuts), len(stream)]:
        out += reader.feed(stream[prev:cut])
        prev = cut
    assert reader.pending == 0
    return out


@settings(max_examples=100)
@given(case=streams(), data=st.data())
def test_records_are_the_same_however_the_stream_is_split(
    case: tuple[list[bytes], bytes], data: st.DataObject
) -> None:
    records, stream = case
    assert RecordReader().feed(stream) == records  # whole
    assert feed_in_pieces(stream, list(range(len(stream)))) == records  # byte by byte
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    assert feed_in_pieces(stream, cuts) == records  # split anywhere


@given(payload=st.binary(max_size=500))
def test_encode_record_round_trips(payload: bytes) -> None:
    assert RecordReader().feed(encode_record(payload)) == [payload]
    parts = encode_record_parts([payload[:3], memoryview(payload[3:])])
    assert RecordReader().feed(b"".join(parts)) == [payload]


def test_empty_record_and_empty_feed() -> None:
    reader = RecordReader()
    assert reader.feed(b"") == []
    assert reader.feed(encode_record(b"")) == [b""]


def test_oversized_record_is_refused_at_its_header() -> None:
    reader = RecordReader(max_record_size=100)
    assert reader.feed(encode_record(b"x" * 100)) == [b"x" * 100]
    with pytest.raises(RecordError):
        reader.feed(struct.pack(">I", 101 | LAST_FRAGMENT))  # no data needed to refuse
    with pytest.raises(RecordError):  # the stream stays broken
        reader.feed(b"")


def test_oversized_multi_fragment_record_is_refused() -> None:
    reader = RecordReader(max_record_size=100)
    reader.feed(struct.pack(">I", 60) + b"a" * 60)
    with pytest.raises(RecordError):
        reader.feed(struct.pack(">I", 41))


def test_record_error_is_a_value_error() -> None:
    assert issubclass(RecordError, ValueError)


def test_large_record_in_many_chunks() -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB
    stream = encode_record(payload)
    reader = RecordReader()
    out: list[bytes] = []
    for i in range(0, len(stream), 65536):
        out += reader.feed(stream[i : i + 65536])
    assert out == [payload]


def test_whole_records_fed_one_at_a_time() -> None:
    """A feed holding exactly one whole record (a synchronous client's call) gives it;
    the fragment count and the size limit hold across such feeds."""
    reader = RecordReader(max_record_size=100, max_fragments=2)
    for i in range(5):
        assert reader.feed(struct.pack(">I", 0)) == []  # an empty first fragment
        assert reader.feed(encode_record(b"call %d" % i)) == [b"call %d" % i]
        assert reader.pending == 0
    assert reader.feed(memoryview(encode_record(b"x" * 100))) == [b"x" * 100]
    with pytest.raises(RecordError):
        reader.feed(encode_record(b"x" * 101))
