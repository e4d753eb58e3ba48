"""Metrics in Prometheus' text format (prometheus-client), named after Kafka's where Kafka has
one (as the JMX exporter renders them: `kafka_<domain>_<type>_<name>`):

| metric | Kafka's |
|---|---|
| kafka_network_requestmetrics_requests_total{request,version} | RequestMetrics RequestsPerSec |
| kafka_server_brokertopicmetrics_bytesout_total{topic} | BrokerTopicMetrics BytesOutPerSec |
| kafka_server_brokertopicmetrics_fetchmessageconversions_total{topic} | FetchMessageConversionsPerSec |
| kafka_network_requestmetrics_messageconversionstimems{request="Fetch"} | MessageConversionsTimeMs |
| kafka_network_requestmetrics_temporarymemorybytes{request="Fetch"} | TemporaryMemoryBytes |
| kafka_network_socketserver_memorypoolavailable, ..._memorypoolused | MemoryPoolAvailable / Used |
| kafka_network_socketserver_memorypooldepletedtimetotal | MemoryPoolDepletedTimeTotal (ms) |
| kafka_network_socketserver_memorypoolavgdepletedpercent | MemoryPoolAvgDepletedPercent (0..1) |

Ours (no Kafka counterpart): `kafkacodec_serve_conversion_pool_{available,used}_bytes`,
`kafkacodec_serve_conversion_pool_depleted_time_ms_total`,
`kafkacodec_serve_conversion_pool_refusals_total` (a chunk the pool refused: the partition's
data ended there), `kafkacodec_serve_connections`, `kafkacodec_serve_waiting_fetches`,
`kafkacodec_serve_listener_info{listener,protocol,zero_copy}` (1 per listener; zero_copy:
sendfile, kernel TLS or buffered), `kafkacodec_serve_connections_closed_total{reason}` (client, idle, request_read_timeout,
response_write_timeout, request_too_large, request_too_costly, malformed, unsupported,
failed, shutdown) and `kafkacodec_serve_accept_backoffs_total` (accepting paused: the process
was out of descriptors); with
`--upstream`: `kafkacodec_serve_upstream_pool_{available,used}_bytes` (the upstream consumer's
KIP-81 pool), `kafkacodec_serve_upstream_cached_bytes` (chunks kept for clients) and
`kafkacodec_serve_upstream_partitions` (partitions clients are reading).

Over log directories: `kafkacodec_serve_txn_segments_total{source}` (rolled segments whose
read_committed transactions came from their `.txnindex` and the producer snapshot after them,
source="txnindex", or from a walk of their batch headers, "rebuilt") and
`kafkacodec_serve_invalid_index_files_total{suffix}` (`.index`, `.timeindex`, `.txnindex`,
`.snapshot` files found invalid and read without, each counted once); segments in an object
store (serve/remote.py): `kafkacodec_serve_remote_reads_total` and
`kafkacodec_serve_remote_read_bytes_total` (ranged and whole-file reads the workers made),
`kafkacodec_serve_remote_cached_bytes` (what they read, kept) and
`kafkacodec_serve_remote_reads_waited_on` (reads requests are waiting for now).

With a state directory: `kafkacodec_serve_state_files_quarantined_total` (group offset files
found damaged at start and moved aside, kafkacodec._statestore).

Each Server has its own registry; the HTTP endpoint runs in prometheus-client's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ServeMetrics"]


class ServeMetrics:
    def __init__(self, request_pool: Any, conversion_pool: Any, connections: Callable[[], int],
                 waiting: Callable[[], int]):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("kafka_network_requestmetrics_requests", "Requests received",
                                ["request", "version"], registry=r)
        self.bytes_out = Counter("kafka_server_brokertopicmetrics_bytesout", "Record bytes sent",
                                 ["topic"], registry=r)
        self.conversions = Counter("kafka_server_brokertopicmetrics_fetchmessageconversions",
                                   "Partition fetches down-converted", ["topic"], registry=r)
        self.conversion_time = Histogram(
            "kafka_network_requestmetrics_messageconversionstimems", "Down-conversion time per "
            "partition fetch (ms)", ["request"], registry=r,
            buckets=(0.1, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000))
        self.temporary_memory = Histogram(
            "kafka_network_requestmetrics_temporarymemorybytes", "Temporary memory of a "
            "down-converted partition fetch (bytes)", ["request"], registry=r,
            buckets=(1 << 10, 16 << 10, 128 << 10, 1 << 20, 8 << 20, 64 << 20))
        self.refusals = Counter("kafkacodec_serve_conversion_pool_refusals",
                                "Conversion chunks the pool refused (the partition's data ended there)",
                                registry=r)
        for prefix, pool, doc in (("kafka_network_socketserver_memorypool", request_pool, "Request pool"),
                                  ("kafkacodec_serve_conversion_pool", conversion_pool, "Conversion pool")):
            ours = prefix.startswith("kafkacodec")
            gauges = {
                "available_bytes" if ours else "available": lambda p=pool: p.available_memory,
                "used_bytes" if ours else "used": lambda p=pool: _used(p),
                "depleted_time_ms_total" if ours else "depletedtimetotal":
                    lambda p=pool: _pool_metric(p, "memory-pool-depleted-time-total"),
            }
            if not ours:
                gauges["avgdepletedpercent"] = lambda p=pool: _pool_metric(p, "memory-pool-avg-depleted-percent")
            for suffix, fn in gauges.items():
                name = f"{prefix}_{suffix}" if ours else f"{prefix}{suffix}"
                Gauge(name, f"{doc}: {suffix}", registry=r).set_function(fn)
        Gauge("kafkacodec_serve_connections", "Open client connections", registry=r).set_function(connections)
        Gauge("kafkacodec_serve_waiting_fetches", "Fetches waiting for data", registry=r).set_function(waiting)
        self._bytes_out: dict[str, Callable[[int], None]] = {}
        self._requests: dict[tuple[str, int], Callable[[], None]] = {}
        self.http: Any = None

    def add_upstream(self, view: Any) -> None:
        """Gauges of serve --upstream's consumer (its pool is safe to read from any thread)."""
        from prometheus_client import Gauge

        r = self.registry
        pool = view.consumer.pool
        Gauge("kafkacodec_serve_upstream_pool_available_bytes", "Upstream consumer pool: available",
              registry=r).set_function(lambda: pool.available_memory)
        Gauge("kafkacodec_serve_upstream_pool_used_bytes", "Upstream consumer pool: used",
              registry=r).set_function(lambda: _used(pool))
        Gauge("kafkacodec_serve_upstream_cached_bytes", "Upstream data kept for clients",
              registry=r).set_function(lambda: view.cached_bytes)
        Gauge("kafkacodec_serve_upstream_partitions", "Upstream partitions clients are reading",
              registry=r).set_function(lambda: len(view.demanded | view.tail_demanded))

    def add_logview(self, view: Any) -> None:
        """Counters of where the log view's transactions and indexes came from (IndexUse), and
        of its remote reads (serve/remote.py: the cache's counts are safe to read anywhere)."""
        from prometheus_client import Gauge

        r = self.registry
        r.register(_IndexUseCollector(view.index_use))
        if view.remote is not None:
            remote = view.remote
            r.register(_RemoteReadsCollector(remote.cache))
            Gauge("kafkacodec_serve_remote_cached_bytes", "Remote bytes read and kept",
                  registry=r).set_function(lambda: remote.cache.cached_bytes)
            Gauge("kafkacodec_serve_remote_reads_waited_on", "Remote reads requests are waiting for",
                  registry=r).set_function(lambda: remote.pending)

    def add_listeners(self, listening: Any) -> None:
        """kafkacodec_serve_listener_info{listener,protocol,zero_copy} = 1 per listener: how its
        connections send segment bytes (sendfile, kernel TLS, buffered)."""
        from prometheus_client import Gauge

        info = Gauge("kafkacodec_serve_listener_info", "Listeners: protocol and how segment bytes "
                     "are sent", ["listener", "protocol", "zero_copy"], registry=self.registry)
        for listener in listening:
            info.labels(listener.name, listener.protocol, listener.zero_copy).set(1)

    def add_connection_counts(self, server: Any) -> None:
        """The server's counts of closed connections (by reason) and accept back-offs."""
        self.registry.register(_ConnectionCollector(server))

    def add_state_files(self, store: Any) -> None:
        """The count of damaged state files moved aside (a StateStore's `quarantined`)."""
        self.registry.register(_StateFilesCollector(store))

    def request(self, name: str, version: int) -> None:
        count = self._requests.get((name, version))
        if count is None:
            count = self._requests[(name, version)] = self.requests.labels(name, str(version)).inc
        count()

    def bytes_out_counter(self, topic: str) -> Callable[[int], None]:
        counter = self._bytes_out.get(topic)
        if counter is None:
            counter = self._bytes_out[topic] = self.bytes_out.labels(topic).inc
        return counter

    def conversion_done(self, topic: str, stats: Any, refusals: int) -> None:
        self.conversions.labels(topic).inc()
        self.conversion_time.labels("Fetch").observe(stats.conversion_time_ns / 1e6)
        self.temporary_memory.labels("Fetch").observe(stats.temporary_memory_bytes)
        if refusals:
            self.refusals.inc(refusals)

    def conversion_refused(self) -> None:
        self.refusals.inc()

    def serve_http(self, host: str, port: int) -> int:
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, host, registry=self.registry)
        self.http = server
        return int(server.server_address[1])

    def close(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
            self.http = None


def _used(pool: Any) -> int:
    size = getattr(pool, "size", None)
    return 0 if size is None else int(size - pool.available_memory)


def _pool_metric(pool: Any, name: str) -> float:
    metrics = getattr(pool, "metrics", None)
    return float(metrics()[name]) if metrics is not None else 0.0


class _ConnectionCollector:
    """Server.closed_connections and Server.accept_backoffs, read when scraped."""

    def __init__(self, server: Any):
        self.server = server

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        closed = CounterMetricFamily("kafkacodec_serve_connections_closed", "Client connections closed, "
                                     "by reason", labels=["reason"])
        for reason, count in sorted(dict(self.server.closed_connections).items()):
            closed.add_metric([reason], count)
        backoffs = CounterMetricFamily("kafkacodec_serve_accept_backoffs", "Times accepting paused: "
                                       "out of descriptors")
        backoffs.add_metric([], self.server.accept_backoffs)
        return [closed, backoffs]


class _IndexUseCollector:
    """IndexUse's counts as Prometheus counters, read when scraped (the network thread writes
    them: a scrape may see one count behind)."""

    def __init__(self, use: Any):
        self.use = use

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        segments = CounterMetricFamily("kafkacodec_serve_txn_segments", "Rolled segments whose read_committed "
                                       "transactions came from their .txnindex or a walk of their headers",
                                       labels=["source"])
        for source, count in sorted(self.use.txn_segments.items()):
            segments.add_metric([source], count)
        invalid = CounterMetricFamily("kafkacodec_serve_invalid_index_files", "Index and snapshot files found "
                                      "invalid (read without)", labels=["suffix"])
        for suffix, count in sorted(dict(self.use.invalid_files).items()):
            invalid.add_metric([suffix], count)
        return [segments, invalid]


class _RemoteReadsCollector:
    """The remote reads the workers made (DeferredReads' counts), read when scraped."""

    def __init__(self, cache: Any):
        self.cache = cache

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        return [CounterMetricFamily("kafkacodec_serve_remote_reads", "Reads of remote segment and index files",
                                    value=self.cache.reads),
                CounterMetricFamily("kafkacodec_serve_remote_read_bytes", "Bytes read from remote segment and "
                                    "index files", value=self.cache.bytes_read)]


class _StateFilesCollector:
    """A StateStore's count of quarantined files, read when scraped."""

    def __init__(self, store: Any):
        self.store = store

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        return [CounterMetricFamily("kafkacodec_serve_state_files_quarantined", "State files found damaged "
                                    "and moved aside (<name>.damaged-<UTC time>)", value=self.store.quarantined)]
