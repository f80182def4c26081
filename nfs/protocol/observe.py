"""Observing the calls a `~nfs.protocol.rpc.Dispatcher` runs: a hook, and counters for it.

A :class:`CallObserver` is told, after each call a procedure ran, the procedure's name
(its RFC spelling: ``NFSPROC3_READ``, ``MOUNTPROC3_MNT``), how long it took and how it
ended (``ok``: a reply of the procedure, whatever its NFS status; ``rpc_error``: an
accept_stat other than SUCCESS; ``system_err``: the procedure failed). Calls refused
before a procedure runs (garbage, bad credentials, unknown programs) and retransmissions
answered from the reply cache are not observed.

:class:`CallStats` is an observer that counts calls and a latency histogram per
procedure (thread-safe; a lock per observation, no allocation on the hot path after a
procedure's first call); :meth:`CallStats.snapshot` is what a metrics exporter reads.
This module knows nothing of tables (nor of Prometheus).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol

__all__ = ["LATENCY_BUCKETS", "CallObserver", "CallOutcome", "CallStats", "ProcedureStats"]

CallOutcome = Literal["ok", "rpc_error", "system_err"]

LATENCY_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds (seconds) of the latency histogram's buckets (+Inf beyond the last)."""


class CallObserver(Protocol):
    """Told of every call a procedure ran (from the thread that ran it).

    It owns the clock (the dispatcher, sans-IO, reads none): a call's duration is
    ``clock()`` after it minus ``clock()`` before it.
    """

    def clock(self) -> float:
        """Return seconds on a monotonic clock."""

    def call_done(self, procedure: str, seconds: float, outcome: CallOutcome) -> None:
        """Record one call; must be cheap and never raise."""


@dataclass(frozen=True)
class ProcedureStats:
    """The calls of one procedure so far.

    Attributes:
        calls: calls run (every outcome).
        failed: calls that ended ``rpc_error`` or ``system_err``.
        seconds: the sum of their durations.
        buckets: per bound of `LATENCY_BUCKETS`, the calls that took at most that long
            (cumulative, as Prometheus histograms count), then +Inf (= calls).
    """

    calls: int
    failed: int
    seconds: float
    buckets: tuple[int, ...]


class _Counts:
    __slots__ = ("calls", "failed", "per_bucket", "seconds")

    def __init__(self) -> None:
        self.calls = 0
        self.failed = 0
        self.seconds = 0.0
        self.per_bucket = [0] * (len(LATENCY_BUCKETS) + 1)


class CallStats:
    """A `CallObserver` counting calls and their latencies per procedure (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._by_procedure: dict[str, _Counts] = {}

    def call_done(self, procedure: str, seconds: float, outcome: CallOutcome) -> None:
        """Record one call of ``procedure`` that took ``seconds``."""
        slot = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self._lock:
            counts = self._by_procedure.get(procedure)
            if counts is None:
                counts = self._by_procedure[procedure] = _Counts()
            counts.calls += 1
            counts.seconds += seconds
            counts.per_bucket[slot] += 1
            if outcome != "ok":
                counts.failed += 1

    def snapshot(self) -> dict[str, ProcedureStats]:
        """Return each procedure's figures so far (by name)."""
        with self._lock:
            out = {}
            for name, c in self._by_procedure.items():
                running, cumulative = 0, []
                for n in c.per_bucket:
                    running += n
                    cumulative.append(running)
                out[name] = ProcedureStats(c.calls, c.failed, c.seconds, tuple(cumulative))
            return out
