"""The mirror's Prometheus metrics (prometheus-client, text format on --metrics-listen), read
from the mirror's counters when scraped.  Names: ``kafkacodec_mirror_*`` for the mirror's own
counters; the memory pool under KIP-81's names (``memory_pool_free_bytes`` ...), as the serve
command exposes its request pool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafkacodec.mirror.process import Mirror

__all__ = ["MirrorCollector", "start_metrics_server"]


class MirrorCollector:
    """A prometheus_client collector over one Mirror (nothing is counted twice: every value
    is read from the mirror when scraped)."""

    def __init__(self, mirror: Mirror):
        self.mirror = mirror

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        m = self.mirror
        producer = m.producer
        yield CounterMetricFamily("kafkacodec_mirror_batches", "Batches acknowledged by the target",
                                  value=producer.batches_acked if producer else 0)
        yield CounterMetricFamily("kafkacodec_mirror_records", "Records acknowledged by the target",
                                  value=producer.records_acked if producer else 0)
        yield CounterMetricFamily("kafkacodec_mirror_bytes", "Batch bytes written to the target",
                                  value=producer.bytes_sent if producer else 0)
        yield CounterMetricFamily("kafkacodec_mirror_produce_requests", "ProduceRequests sent",
                                  value=producer.requests if producer else 0)
        yield CounterMetricFamily("kafkacodec_mirror_retries", "Batches sent again after an error",
                                  value=producer.retries if producer else 0)
        errors = CounterMetricFamily("kafkacodec_mirror_errors", "Produce errors by kind",
                                     labels=["error"])
        for kind, count in sorted((producer.errors if producer else {}).items()):
            errors.add_metric([kind], count)
        yield errors
        yield CounterMetricFamily("kafkacodec_mirror_checkpoints", "Checkpoints written",
                                  value=m.checkpoint.writes)
        yield CounterMetricFamily("kafkacodec_mirror_state_files_quarantined",
                                  "Checkpoints found damaged and moved aside",
                                  value=m.checkpoint.store.quarantined)
        yield CounterMetricFamily("kafkacodec_mirror_fetched_bytes", "FetchResponse bytes read",
                                  value=m.consumer.fetcher.bytes_fetched if m.consumer else 0)
        position = GaugeMetricFamily("kafkacodec_mirror_position",
                                     "Source offset acknowledged by the target",
                                     labels=["topic", "partition"])
        lag = GaugeMetricFamily("kafkacodec_mirror_lag",
                                "Source high watermark minus the acknowledged position",
                                labels=["topic", "partition"])
        for (topic, partition), offset in sorted(m.acked.items()):
            position.add_metric([topic, str(partition)], offset)
            st = m.consumer.fetcher.states.get((topic, partition)) if m.consumer else None
            if st is not None and st.high_watermark >= 0:
                lag.add_metric([topic, str(partition)], max(0, st.high_watermark - offset))
        yield position
        yield lag
        if m.consumer is not None:
            pool = m.consumer.pool.metrics()
            yield GaugeMetricFamily("memory_pool_free_bytes", "KIP-81 memory-pool-free",
                                    value=pool["memory-pool-free"])
            yield GaugeMetricFamily("memory_pool_used_bytes", "KIP-81 memory-pool-used",
                                    value=pool["memory-pool-used"])
            yield GaugeMetricFamily("memory_pool_avg_depleted_ratio",
                                    "KIP-81 memory-pool-avg-depleted-percent (a ratio 0..1)",
                                    value=pool["memory-pool-avg-depleted-percent"])
            yield CounterMetricFamily("memory_pool_depleted_time_ms",
                                      "KIP-81 memory-pool-depleted-time-total",
                                      value=pool["memory-pool-depleted-time-total"])
            yield GaugeMetricFamily("kafkacodec_mirror_muted_connections",
                                    "Source connections waiting for pool memory",
                                    value=m.consumer.metrics()["muted-connections"])


def start_metrics_server(mirror: Mirror, listen: str) -> tuple[Any, int]:
    """Serve the metrics on HOST:PORT (port 0: any); returns (server, port)."""
    from prometheus_client import CollectorRegistry, start_http_server

    host, _, port = listen.rpartition(":")
    registry = CollectorRegistry()
    registry.register(MirrorCollector(mirror))
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    return server, int(server.server_address[1])
