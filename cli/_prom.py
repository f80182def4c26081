"""Prometheus metrics of a running ``posixlake serve`` (the ``/metrics`` endpoint).

One collector reads, at each scrape, what the served tables and the NFS server already
count: ``DatabaseOps.get_metrics()`` (commits, conflicts, retries, errors, rows, latency
percentiles per operation), the NFS server's connection counters (``NfsServer.stats()``),
the calls by procedure its dispatcher's observer counted (``nfs.protocol.observe.CallStats``:
a histogram of their latency), the share's counters (``TableFs.stats()``: bytes read and
written, staged and journaled bytes, rendering cache hits) and the change feeds the HTTP
API has open (their lag), and for a lake its tables (listed, open, opened since start;
the per-table figures are those of the tables open now). Nothing is counted twice; the NFS hot path only adds to
counters (a lock and a few additions per call): a scrape costs one ``get_metrics`` per table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from posixlake import DatabaseOps
    from posixlake.feed import ChangeFeed

__all__ = ["CONTENT_TYPE", "FeedBoard", "LakeFigures", "ServeCollector", "build_registry"]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

#: DatabaseOps counters exposed as ``posixlake_<name>_total``
_COUNTERS: Final = (
    ("commits", "Delta commits made through this server"),
    ("commit_conflicts", "commit attempts that lost a race to another writer"),
    ("commit_retries", "commits retried after a conflict"),
    ("commits_given_up", "commits abandoned after the retry budget"),
    ("errors", "operations that failed"),
    ("rows_written", "rows inserted or updated"),
    ("rows_deleted", "rows deleted"),
    ("queries", "SQL queries run"),
    ("inserts", "insert operations"),
    ("merges", "merge operations"),
    ("deletes", "delete operations"),
    ("updates", "update operations"),
)

#: NfsServer.stats() fields: (name, kind, help)
_NFS_STATS: Final = (
    ("connections", "gauge", "open NFS client connections"),
    ("buffered_bytes", "gauge", "bytes of unfinished and queued NFS records held"),
    ("paused_connections", "gauge", "connections not read because of the memory budget"),
    ("received_bytes", "counter", "bytes received from NFS clients"),
    ("refused_connections", "counter", "connections refused because every slot was busy"),
    ("evicted_connections", "counter", "idle connections closed to make room"),
    ("idle_closed", "counter", "connections closed by the idle timeout"),
    ("accept_errors", "counter", "accept() failures"),
)


#: TableFsStats fields: (field, metric name, kind, help)
_SHARE_STATS: Final[tuple[tuple[str, str, Any, str], ...]] = (
    ("read_bytes", "read_bytes", CounterMetricFamily, "bytes NFS READs returned"),
    ("written_bytes", "written_bytes", CounterMetricFamily, "bytes NFS WRITEs accepted"),
    ("staged_writers", "staged_writers", GaugeMetricFamily, "writers with a staged edit"),
    ("staged_bytes", "staged_bytes", GaugeMetricFamily, "bytes of staged, unapplied edits"),
    (
        "journaled_bytes",
        "journaled_bytes",
        GaugeMetricFamily,
        "bytes of the staged edits' journals on disk",
    ),
    (
        "render_cache_hits",
        "render_cache_hits",
        CounterMetricFamily,
        "renderings of a version found in the rendering cache",
    ),
    (
        "render_cache_misses",
        "render_cache_misses",
        CounterMetricFamily,
        "renderings of a version built (from cached segments)",
    ),
    ("changes_csv_bytes", "changes_csv_bytes", GaugeMetricFamily, "the size of changes.csv"),
)


@dataclass(frozen=True)
class LakeFigures:
    """A served lake's tables (``serve ROOT`` of a directory of tables).

    Attributes:
        tables: the tables the lake lists now.
        open_tables: the tables open now (their figures are the per-table metrics).
        opened: tables opened since the server started (an evicted table opened again
            counts again).
    """

    tables: int
    open_tables: int
    opened: int


class FeedBoard:
    """The change feeds open in this process (HTTP ``/changes`` streams), for their lag."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._feeds: dict[int, tuple[str, ChangeFeed]] = {}

    def add(self, table: str, feed: ChangeFeed) -> None:
        with self._lock:
            self._feeds[id(feed)] = (table, feed)
            self._lock.notify_all()

    def remove(self, feed: ChangeFeed) -> None:
        with self._lock:
            self._feeds.pop(id(feed), None)
            self._lock.notify_all()

    def wait_count(self, count: int, timeout: float) -> bool:
        """Wait until exactly ``count`` feeds are open; return whether that happened."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._feeds) == count, timeout)

    def close_all(self) -> None:
        with self._lock:
            feeds = [f for _, f in self._feeds.values()]
        for feed in feeds:
            feed.close()

    def items(self) -> list[tuple[str, ChangeFeed]]:
        with self._lock:
            return list(self._feeds.values())


class ServeCollector(Collector):
    """Collect the served tables', the NFS server's and the change feeds' figures."""

    def __init__(
        self,
        tables: Callable[[], Mapping[str, DatabaseOps]],
        *,
        nfs_stats: Callable[[], Any] | None = None,
        nfs_calls: Callable[[], Mapping[str, Any]] | None = None,
        share_stats: Callable[[], Mapping[str, Any]] | None = None,
        feeds: FeedBoard | None = None,
        lake_stats: Callable[[], LakeFigures] | None = None,
    ) -> None:
        self._tables = tables
        self._lake_stats = lake_stats
        self._nfs_stats = nfs_stats
        self._nfs_calls = nfs_calls
        self._share_stats = share_stats
        self._feeds = feeds

    def collect(self) -> Iterator[Metric]:
        yield from self._table_metrics()
        if self._nfs_stats is not None:
            yield from self._nfs_metrics(self._nfs_stats())
        if self._nfs_calls is not None:
            yield from self._call_metrics(self._nfs_calls())
        if self._share_stats is not None:
            yield from self._share_metrics(self._share_stats())
        if self._feeds is not None:
            yield from self._feed_metrics()
        if self._lake_stats is not None:
            yield from self._lake_metrics(self._lake_stats())

    def _table_metrics(self) -> Iterator[Metric]:
        counters = {
            name: CounterMetricFamily(f"posixlake_{name}", text, labels=["table"])
            for name, text in _COUNTERS
        }
        version = GaugeMetricFamily(
            "posixlake_table_version", "the table version this server has loaded", labels=["table"]
        )
        buffered = GaugeMetricFamily(
            "posixlake_buffered_rows",
            "rows buffered by insert_buffered, not committed yet",
            labels=["table"],
        )
        calls = CounterMetricFamily(
            "posixlake_operation_calls",
            "calls of each DatabaseOps operation (NFS writes and reads included)",
            labels=["table", "operation"],
        )
        latency = GaugeMetricFamily(
            "posixlake_operation_latency_seconds",
            "latency percentiles of each operation over its most recent calls",
            labels=["table", "operation", "quantile"],
        )
        for name, db in sorted(self._tables().items()):
            m = db.get_metrics()
            for key, family in counters.items():
                family.add_metric([name], float(getattr(m, key)))
            version.add_metric([name], float(db.version))
            buffered.add_metric([name], float(m.buffered_rows))
            for op, p in m.latency_ms.items():
                calls.add_metric([name, op], float(p.count))
                for q, value in (("0.5", p.p50), ("0.9", p.p90), ("0.99", p.p99), ("1", p.max)):
                    latency.add_metric([name, op, q], value / 1000.0)
        yield from counters.values()
        yield from (version, buffered, calls, latency)

    def _nfs_metrics(self, stats: Any) -> Iterator[Metric]:
        for field, kind, text in _NFS_STATS:
            value = float(getattr(stats, field))
            if kind == "counter":
                c = CounterMetricFamily(f"posixlake_nfs_{field}", text)
                c.add_metric([], value)
                yield c
            else:
                g = GaugeMetricFamily(f"posixlake_nfs_{field}", text)
                g.add_metric([], value)
                yield g

    def _call_metrics(self, by_procedure: Mapping[str, Any]) -> Iterator[Metric]:
        """NFS (and MOUNT) calls by procedure: a latency histogram and failures
        (``nfs.protocol.observe.ProcedureStats``)."""
        from nfs.protocol.observe import LATENCY_BUCKETS

        latency = HistogramMetricFamily(
            "posixlake_nfs_call_seconds",
            "NFS and MOUNT calls by procedure and how long each took to run",
            labels=["procedure"],
        )
        failed = CounterMetricFamily(
            "posixlake_nfs_call_failures",
            "calls that ended in an RPC error or a server fault (not NFS statuses)",
            labels=["procedure"],
        )
        bounds = [f"{b:g}" for b in LATENCY_BUCKETS] + ["+Inf"]
        for name, p in sorted(by_procedure.items()):
            latency.add_metric(
                [name], list(zip(bounds, (float(n) for n in p.buckets), strict=True)), p.seconds
            )
            failed.add_metric([name], float(p.failed))
        yield from (latency, failed)

    def _share_metrics(self, by_table: Mapping[str, Any]) -> Iterator[Metric]:
        """The served shares' counters (``nfs.table.tablefs.TableFsStats``)."""
        families = {
            field: (kind(f"posixlake_nfs_{name}", text, labels=["table"]))
            for field, name, kind, text in _SHARE_STATS
        }
        for table, st in sorted(by_table.items()):
            for field, family in families.items():
                family.add_metric([table], float(getattr(st, field)))
        yield from families.values()

    def _feed_metrics(self) -> Iterator[Metric]:
        assert self._feeds is not None
        open_feeds = GaugeMetricFamily(
            "posixlake_change_feed_subscribers", "change feeds open over HTTP", labels=["table"]
        )
        lag = GaugeMetricFamily(
            "posixlake_change_feed_lag_versions",
            "versions committed but not yet delivered, the most of any open feed",
            labels=["table"],
        )
        delay = GaugeMetricFamily(
            "posixlake_change_feed_delivery_lag_seconds",
            "commit time to delivery of the last batch, the most of any open feed",
            labels=["table"],
        )
        per: dict[str, list[ChangeFeed]] = {}
        for table, feed in self._feeds.items():
            per.setdefault(table, []).append(feed)
        for table, feeds in sorted(per.items()):
            open_feeds.add_metric([table], float(len(feeds)))
            lag.add_metric([table], float(max(f.lag_versions for f in feeds)))
            seconds = [f.last_commit_lag_seconds for f in feeds if f.last_commit_lag_seconds]
            delay.add_metric([table], max(seconds) if seconds else 0.0)
        yield from (open_feeds, lag, delay)

    @staticmethod
    def _lake_metrics(figures: LakeFigures) -> Iterator[Metric]:
        tables = GaugeMetricFamily("posixlake_lake_tables", "tables the served lake lists")
        tables.add_metric([], float(figures.tables))
        open_now = GaugeMetricFamily(
            "posixlake_lake_open_tables",
            "tables of the lake open now (the per-table metrics are theirs)",
        )
        open_now.add_metric([], float(figures.open_tables))
        opened = CounterMetricFamily(
            "posixlake_lake_tables_opened", "tables of the lake opened since the server started"
        )
        opened.add_metric([], float(figures.opened))
        yield from (tables, open_now, opened)


def build_registry(collector: ServeCollector) -> CollectorRegistry:
    """Return a registry with ``collector`` and the process, platform and GC collectors."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(c)
    return registry


def scrape(registry: CollectorRegistry) -> tuple[bytes, float]:
    """Return the text exposition and the seconds it took."""
    started = time.perf_counter()
    body = generate_latest(registry)
    return body, time.perf_counter() - started
