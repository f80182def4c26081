"""The pure parts behind TableFs: staged writes, the rendering cache, schema.sql."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from nfs.table.render_cache import RenderCache, Rendering
from nfs.table.schema_sql import create_table_sql
from nfs.table.staging import BytesBase, Staging, read_all

# -- Staging ---------------------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.integers(0, 40), st.binary(max_size=12)),
        st.tuples(st.just("t"), st.integers(0, 40), st.just(b"")),
    ),
    max_size=12,
)


@given(base=st.binary(max_size=30), ops=_ops, spill_at=st.sampled_from([0, 7, 1 << 20]))
@example(base=b"\x00", ops=[("t", 0, b""), ("w", 0, b"\x00")], spill_at=1 << 20)
@example(base=b"ab\n", ops=[("t", 1, b""), ("w", 1, b"b\n")], spill_at=0)
def test_staging_behaves_like_a_posix_file(
    base: bytes, ops: list[tuple[str, int, bytes]], spill_at: int
) -> None:
    """In memory, or spilled to a file at once or part way (SpillBuffer), the same bytes."""
    model = bytearray(base)
    s = Staging(BytesBase(base), base_version=3, touched=0.0, mtime=0.0, spill_at=spill_at)
    for kind, n, data in ops:
        if kind == "w":
            if n > len(model):
                model += bytes(n - len(model))
            model[n : n + len(data)] = data
            s.write(n, data, touched=1.0, mtime=1.0)
        else:
            del model[n:]
            model += bytes(n - len(model))
            s.truncate(n, touched=1.0, mtime=1.0)
        assert s.size == len(model)
        for off in (0, 1, 7, len(model) - 1):
            if off >= 0:
                got, eof = s.read(off, 9)
                assert got == bytes(model[off : off + 9])
                assert eof == (off + 9 >= len(model))
        assert s.on_line_boundary() == (not model or model[-1] == 0x0A)
        assert s.same_as_base() == (bytes(model) == base)
        at = s.appended_at()
        if len(model) > len(base) and model.startswith(base):
            # the base plus more, unless a truncation cut the base on the way
            assert at is None or (at == len(base) and s.content()[at:] == model[at:])
        else:
            assert at is None
        assert bytes(s.content()) == bytes(model)
    assert bytes(s.content()) == bytes(model)


class _CountingBase(BytesBase):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, offset: int, count: int) -> tuple[memoryview | bytes, bool]:
        out = super().read(offset, count)
        self.bytes_read += len(out[0])
        return out


def test_an_append_to_a_big_base_reads_only_the_resent_page() -> None:
    base = _CountingBase(b"id,name\n" + b"".join(b"%d,x\n" % i for i in range(100_000)))
    s = Staging(base, base_version=0, touched=0.0, mtime=0.0)
    page = (base.size // 4096) * 4096
    tail = bytes(base.read(page, base.size - page)[0])
    base.bytes_read = 0
    s.write(page, tail + b"7,new\n", touched=1.0, mtime=1.0)  # the page-widened append
    assert s.on_line_boundary()
    assert s.appended_at() == base.size
    assert bytes(read_all(s, base.size)) == b"7,new\n"
    assert base.bytes_read <= 2 * 4096


def test_staging_does_not_copy_the_base_for_a_whole_rewrite() -> None:
    base = BytesBase(b"a,b\n1,2\n")
    s = Staging(base, base_version=0, touched=0.0, mtime=0.0)
    s.write(0, b"a,b\n1,2\n3,4\n", touched=1.0, mtime=1.0)
    assert bytes(s.content()) == b"a,b\n1,2\n3,4\n"
    s2 = Staging(base, base_version=0, touched=0.0, mtime=0.0)
    s2.write(base.size, b"3,4\n", touched=1.0, mtime=1.0)  # echo >> with a cold cache
    assert bytes(s2.content()) == b"a,b\n1,2\n3,4\n"
    assert s2.on_line_boundary()
    s3 = Staging(base, base_version=0, touched=0.0, mtime=0.0)
    s3.truncate(0, touched=1.0, mtime=1.0)
    assert s3.size == 0 and s3.on_line_boundary()
    assert s3.read(0, 10) == (b"", True)


# -- RenderCache -------------------------------------------------------------------------


def _chunks(version: int, size: int) -> Iterator[bytes]:
    line = f"{version},xxxxxxxxxxxxxxxxxxxx\n".encode()
    done = 0
    while done < size:
        piece = line[: size - done]
        done += len(piece)
        yield piece


def test_rendering_in_memory_and_spilled_read_the_same() -> None:
    small = Rendering(1, _chunks(1, 1000), spill_threshold=10_000)
    big = Rendering(1, _chunks(1, 1000), spill_threshold=100)
    assert not small.spilled and big.spilled
    assert small.size == big.size == 1000
    assert bytes(small.data) == bytes(big.data)
    for off, count in ((0, 10), (995, 10), (1000, 5), (2000, 1)):
        a, eof_a = small.read(off, count)
        b, eof_b = big.read(off, count)
        assert bytes(a) == bytes(b) and eof_a == eof_b
    assert small.read(995, 10)[1] and not small.read(0, 10)[1]


def test_empty_rendering() -> None:
    r = Rendering(0, iter(()), spill_threshold=0)
    assert r.size == 0 and r.read(0, 10) == (r.data[0:0], True)


def test_cache_renders_once_per_version_and_evicts_lru() -> None:
    calls: list[int] = []

    def render(v: int) -> Iterator[bytes]:
        calls.append(v)
        return _chunks(v, 50)

    cache = RenderCache(render, keep=2)
    assert cache.get(1) is cache.get(1)
    cache.get(2)
    cache.get(1)
    cache.get(3)  # evicts 2, the least recently used
    assert cache.peek(2) is None and cache.peek(1) is not None
    assert calls == [1, 2, 3]
    held = cache.get(1)
    view, _ = held.read(0, 10)
    cache.clear()
    assert bytes(view) == bytes(held.data[:10])  # a reader's view survives eviction


def test_cache_renders_a_version_once_under_concurrency() -> None:
    calls: list[int] = []
    gate = threading.Event()

    def render(v: int) -> Iterator[bytes]:
        calls.append(v)
        gate.wait(5)
        return _chunks(v, 10)

    cache = RenderCache(render)
    out: list[Rendering] = []
    threads = [threading.Thread(target=lambda: out.append(cache.get(7))) for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(5)
    assert calls == [7] and len(out) == 4 and all(r is out[0] for r in out)


def test_render_error_caches_nothing() -> None:
    def render(v: int) -> Iterator[bytes]:
        raise ValueError("boom")

    cache = RenderCache(render)
    for _ in range(2):
        with pytest.raises(ValueError, match="boom"):
            cache.get(1)
    assert cache.peek(1) is None


# -- schema.sql --------------------------------------------------------------------------


def test_create_table_sql() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("price", pa.decimal128(10, 2)),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("attrs", pa.map_(pa.string(), pa.int32())),
            pa.field("pos", pa.struct([("x", pa.float64()), ("y", pa.float32())])),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("local at", pa.timestamp("us")),
        ]
    )
    assert create_table_sql(schema, primary_key=["id"], partition_by=["at"]) == (
        "CREATE TABLE data (\n"
        "  id BIGINT NOT NULL,\n"
        "  price DECIMAL(10,2),\n"
        "  tags ARRAY<STRING>,\n"
        "  attrs MAP<STRING, INT>,\n"
        "  pos STRUCT<x: DOUBLE, y: FLOAT>,\n"
        "  at TIMESTAMP,\n"
        "  `local at` TIMESTAMP_NTZ,\n"
        "  PRIMARY KEY (id)\n"
        ")\n"
        "PARTITIONED BY (at);\n"
    )
