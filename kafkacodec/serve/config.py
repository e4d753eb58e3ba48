"""The server's settings (the `kafkacodec serve` options; Kafka's broker config names where one
exists) and HOST:PORT parsing."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ServeConfig", "parse_host_port", "MiB"]

MiB = 1 << 20


def default_max_connections() -> int:
    """Half the process's descriptor limit (the other half for segments, mappings and state
    files), at least 16."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 1024
    if soft == resource.RLIM_INFINITY:
        return 1 << 16
    return max(16, soft // 2)


def parse_host_port(text: str, what: str = "address") -> tuple[str, int]:
    """"HOST:PORT", "[v6 address]:PORT" or ":PORT" (all interfaces) -> (host, port);
    ValueError naming `what` otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{what} {text!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port)


@dataclass
class ServeConfig:
    """Everything `Server` takes.

    - `log_dirs`: Kafka log directories (`log.dirs`), served together; or
    - `upstream`: a cluster's bootstrap servers, served through the consumer core instead
      (kafkacodec.serve.upstream), with `upstream_buffer_memory` (the consumer's KIP-81 pool),
      `upstream_cache_memory` (fetched data kept for clients), `upstream_timeout_s` and
      `upstream_security` (TLS and SASL toward the cluster: a kafkacodec.net.ClientSecurity,
      client properties or a client.properties path).  `produce`: forward producers' requests
      to that cluster, Produce v0-2 up-converted (kafkacodec.serve.produce); else read-only.
    - `listen` / `advertised`: where to listen, and the address clients are told to connect to
      (Metadata, FindCoordinator); `advertised` defaults to the bound address.  Or:
    - `security` (a kafkacodec.net.BrokerSecurity, e.g. from `kafkacodec serve --config FILE`):
      Kafka's `listeners` (several; PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) with their TLS and
      SASL settings, `advertised.listeners`, the credentials file (`kafkacodec.users.file`) and
      the ACL file (`kafkacodec.acl.file`); `listen` and `advertised` are then not used.
    - `state_dir`: where group offsets persist (None: in memory only, lost at exit).
    - `metrics_listen`: Prometheus text format over HTTP there (None: off).
    - `max_conversion_memory`: one pool bounds every down-conversion at once (KIP-283 chunks).
    - `max_request_memory` (Kafka's queued.max.request.bytes; 0: unbounded) and
      `socket_request_max_bytes` (socket.request.max.bytes): KIP-72 request memory.
    - `downconversion` (log.message.downconversion.enable) and `topic_downconversion`
      (message.downconversion.enable per topic).
    - `zstd_codec`: rebuild zstd batches with this codec for Fetch v0-3, whose clients cannot
      read zstd (default gzip: every old client and kafka-python without extra libraries reads
      it; None: refuse them with UNSUPPORTED_COMPRESSION_TYPE, as Kafka).
    - `chunk_size`: input bytes converted per chunk (Kafka's 128 KiB).
    - `poll_interval_ms`: how often waiting fetches look at the files for new data (with an
      upstream, they are also looked at as soon as an upstream answer is kept).
    - `group_initial_rebalance_delay_ms`: group.initial.rebalance.delay.ms.
    - `group_min_session_timeout_ms`, `group_max_session_timeout_ms`: group.min.session.timeout.ms
      and group.max.session.timeout.ms, the session timeouts a JoinGroup may ask for (Kafka's
      defaults, 6 s and 30 min; outside: INVALID_SESSION_TIMEOUT).
    - `shutdown_timeout_s`: how long stop() lets responses in flight finish.

    Connection limits (docs/reliability.md: what a client sees when each is hit):
    - `connections_max_idle_ms` (Kafka's connections.max.idle.ms): a connection with nothing
      in progress and no byte either way for this long is closed.
    - `request_read_timeout_ms`: a request must arrive whole within this long of its first
      byte (time spent waiting for request memory does not count).
    - `response_write_timeout_ms`: a response the client stops reading (no write progress for
      this long) closes the connection and gives back what it held.
    - `max_connections` (Kafka's max.connections): accepting pauses at this many connections
      (None: half the process's descriptor limit, at least 16).
    - `handshake_timeout_ms`: the TLS handshake and the SASL exchange must end within this
      long of the connection's start.
    - `max_request_entries`: array entries one request may hold (topics, partitions, ...),
      checked while it is decoded, before any work; a larger request closes the connection.
    """

    log_dirs: list[str]
    listen: tuple[str, int] = ("127.0.0.1", 9092)
    advertised: tuple[str, int] | None = None
    state_dir: str | None = None
    metrics_listen: tuple[str, int] | None = None
    max_conversion_memory: int = 64 * MiB
    max_request_memory: int = 200 * MiB
    socket_request_max_bytes: int = 100 * MiB
    downconversion: bool = True
    topic_downconversion: dict[str, bool] = field(default_factory=dict)
    zstd_codec: str | None = "gzip"
    chunk_size: int = 128 * 1024
    node_id: int = 0
    cluster_id: str | None = None
    poll_interval_ms: int = 10
    group_initial_rebalance_delay_ms: int = 0
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    offset_metadata_max_bytes: int = 4096
    shutdown_timeout_s: float = 5.0
    upstream: str | None = None
    upstream_buffer_memory: int = 64 * MiB
    upstream_cache_memory: int = 64 * MiB
    upstream_timeout_s: float = 30.0
    upstream_security: Any = None
    produce: bool = False
    connections_max_idle_ms: int = 600_000
    request_read_timeout_ms: int = 30_000
    response_write_timeout_ms: int = 30_000
    max_connections: int | None = None
    max_request_entries: int = 20_000
    handshake_timeout_ms: int = 10_000
    security: Any = None

    def __post_init__(self) -> None:
        self.log_dirs = [os.fspath(d) for d in self.log_dirs]
        if not self.log_dirs and not self.upstream:
            raise ValueError("give at least one log directory, or an upstream cluster")
        if self.log_dirs and self.upstream:
            raise ValueError("serve log directories or an upstream cluster, not both")
        if self.produce and not self.upstream:
            raise ValueError("produce forwards to an upstream cluster: log directories are served read-only")
        if self.max_conversion_memory < 1:
            raise ValueError("max_conversion_memory must be at least 1 byte")
        if self.socket_request_max_bytes < 1:
            raise ValueError("socket_request_max_bytes must be at least 1 byte")
        if 0 < self.max_request_memory < self.socket_request_max_bytes:
            # Kafka refuses to start too: a request of the maximum size could never be read.
            raise ValueError(f"max_request_memory ({self.max_request_memory}) must be at least "
                             f"socket_request_max_bytes ({self.socket_request_max_bytes}), or 0")
        for name in ("connections_max_idle_ms", "request_read_timeout_ms", "response_write_timeout_ms",
                     "max_request_entries", "handshake_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_connections is None:
            self.max_connections = default_max_connections()
        elif self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if not 0 <= self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise ValueError(f"group_min_session_timeout_ms ({self.group_min_session_timeout_ms}) must be "
                             f"at least 0 and at most group_max_session_timeout_ms "
                             f"({self.group_max_session_timeout_ms})")
        if self.zstd_codec not in (None, "none", "gzip", "snappy", "lz4"):
            raise ValueError(f"zstd_codec must be none, gzip, snappy or lz4, got {self.zstd_codec!r}")

    def downconversion_enabled(self, topic: str) -> bool:
        return self.topic_downconversion.get(topic, self.downconversion)
