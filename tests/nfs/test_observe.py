"""The call observer of the Dispatcher (sans-IO): every call a procedure ran is counted by
procedure with its duration on the observer's clock (stepped by hand: no timings)."""

from __future__ import annotations

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.observe import LATENCY_BUCKETS, CallStats
from nfs.protocol.rpc import Dispatcher
from tests.nfs.rpcclient import RpcClient


class SteppingClock:
    """Each reading is ``step`` seconds after the last: every call lasts ``step``."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_calls_are_counted_by_procedure_with_their_latency(
    memfs: MemoryFs, dispatcher: Dispatcher
) -> None:
    clock = SteppingClock(0.003)
    stats = CallStats(clock)
    dispatcher.observer = stats
    c = RpcClient.over(dispatcher)
    c.mount("/")
    c.write_file("/a.txt", b"hello\n")
    assert c.read_file("/a.txt") == b"hello\n"
    c.null()
    got = stats.snapshot()
    assert got["MOUNTPROC3_MNT"].calls == 1
    assert got["NFSPROC3_NULL"].calls == 1
    read = got["NFSPROC3_READ"]
    assert read.calls >= 1 and read.failed == 0
    assert abs(read.seconds - 0.003 * read.calls) < 1e-9
    # 3 ms: not in the buckets up to 2.5 ms, in every one from 5 ms
    first = LATENCY_BUCKETS.index(0.005)
    assert read.buckets[:first] == (0,) * first
    assert read.buckets[first:] == (read.calls,) * (len(LATENCY_BUCKETS) + 1 - first)


def test_without_an_observer_nothing_is_counted(dispatcher: Dispatcher) -> None:
    stats = CallStats()
    c = RpcClient.over(dispatcher)
    c.null()
    assert stats.snapshot() == {}
    dispatcher.observer = stats
    c.null()
    assert stats.snapshot()["NFSPROC3_NULL"].calls == 1
