"""A Kafka cluster as the consumer core sees it: bootstrap, Metadata (brokers, partition
leaders, topic ids), one BrokerConnection per broker for data (plus one per coordinator, with
priority), ApiVersions negotiation on every new connection, request timeouts, reconnection
backoff, and the event loop (one selector; a Reactor can share it between clusters, as the
mirror does for its source and target).

Not thread-safe: a Cluster and its Reactor are used by one thread at a time.
"""

from __future__ import annotations

import random
import selectors
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafkacodec._pool import SimpleMemoryPool
from kafkacodec._ring import Response
from kafkacodec.consumer._connection import CLOSED, CONNECTED, BrokerConnection, InFlight
from kafkacodec.errors import KafkaCodecError, UnsupportedVersionError
from kafkacodec.protocol._metadata import (
    decode_api_versions_response,
    decode_metadata_response,
    encode_api_versions_request,
    encode_metadata_request,
)
from kafkacodec.protocol._types import MetadataResponse

__all__ = ["Cluster", "Reactor", "Request", "BrokerError", "error_name", "RETRIABLE_ERRORS"]

API_VERSIONS, METADATA = 18, 3
API_VERSIONS_VERSION = 2          # non-flexible, answered by every broker since 2.0 (and the mock)
METADATA_MAX_VERSION = 12

# Error codes after which a client refreshes metadata and retries (Kafka's RetriableException
# subclasses and InvalidMetadataException).
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE = 6, 3, 5
RETRIABLE_ERRORS = frozenset({
    3,    # UNKNOWN_TOPIC_OR_PARTITION
    5,    # LEADER_NOT_AVAILABLE
    6,    # NOT_LEADER_OR_FOLLOWER
    7,    # REQUEST_TIMED_OUT
    9,    # REPLICA_NOT_AVAILABLE
    13,   # NETWORK_EXCEPTION
    14,   # COORDINATOR_LOAD_IN_PROGRESS
    15,   # COORDINATOR_NOT_AVAILABLE
    16,   # NOT_COORDINATOR
    19,   # NOT_ENOUGH_REPLICAS
    20,   # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    56,   # KAFKA_STORAGE_ERROR
    74,   # FENCED_LEADER_EPOCH
    75,   # UNKNOWN_LEADER_EPOCH
    78,   # OFFSET_NOT_AVAILABLE
    89,   # THROTTLING_QUOTA_EXCEEDED
    100,  # UNKNOWN_TOPIC_ID
})
#: Of those, the ones that mean "your metadata is stale": refresh before retrying.
METADATA_ERRORS = frozenset({3, 5, 6, 9, 56, 74, 75, 100, 15, 16})


def error_name(code: int) -> str:
    """Kafka's name for an error code (kafka-python's table), e.g. 6 -> NOT_LEADER_OR_FOLLOWER."""
    try:
        from kafka.errors import for_code

        cls = for_code(code)
        return str(getattr(cls, "message", cls.__name__))
    except Exception:
        return f"error {code}"


class BrokerError(KafkaCodecError):
    """A broker answered with an error code that retrying could not clear (or that is not
    retriable).  ``error_code`` is Kafka's code, ``error_name`` its name; ``topic`` and
    ``partition`` are set when the error was about one partition."""

    def __init__(self, message: str, *, error_code: int, topic: str | None = None,
                 partition: int | None = None):
        self.error_code = error_code
        self.error_name = error_name(error_code)
        self.topic = topic
        self.partition = partition
        where = f" ({topic}-{partition})" if topic is not None and partition is not None else ""
        super().__init__(f"{message}{where}: {self.error_name} ({error_code})")


class Request:
    """A request to send once the connection knows the broker's versions: `encode(version,
    correlation_id)` frames it for the version chosen (the highest both sides speak, capped at
    `max_version`); `on_response(response, version)` owns the ring Response (must release it)."""

    __slots__ = ("api_key", "min_version", "max_version", "encode", "on_response", "on_error",
                 "timeout", "context")

    def __init__(self, api_key: int, encode: Callable[[int, int], Any],
                 on_response: Callable[[Response, int], None],
                 on_error: Callable[[BaseException], None], *, max_version: int,
                 min_version: int = 0, timeout: float = 30.0, context: Any = None):
        self.api_key = api_key
        self.encode = encode
        self.on_response = on_response
        self.on_error = on_error
        self.max_version = max_version
        self.min_version = min_version
        self.timeout = timeout
        self.context = context


class Reactor:
    """One selector for every connection of one or more clusters."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.clusters: list[Cluster] = []
        self._registered: dict[int, tuple[BrokerConnection, int]] = {}

    def poll(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for socket events and handle them (responses go to
        their requests' handlers)."""
        now = time.monotonic()
        wanted: dict[int, tuple[Cluster, BrokerConnection, int]] = {}
        for cluster in self.clusters:
            cluster.prepare(now)
            for conn in cluster.live_connections():
                if conn.sock is None:
                    continue
                events = (selectors.EVENT_READ if conn.wants_read() else 0) | \
                         (selectors.EVENT_WRITE if conn.wants_write() else 0)
                if events:
                    wanted[conn.sock.fileno()] = (cluster, conn, events)
        for fd, (conn, events) in list(self._registered.items()):
            if fd not in wanted or wanted[fd][1] is not conn:
                try:
                    self.selector.unregister(fd)
                except (KeyError, ValueError, OSError):
                    pass
                del self._registered[fd]
        for fd, (cluster, conn, events) in wanted.items():
            old = self._registered.get(fd)
            if old is None:
                self.selector.register(fd, events, (cluster, conn))
            elif old[1] != events:
                self.selector.modify(fd, events, (cluster, conn))
            self._registered[fd] = (conn, events)
        if not wanted:
            if timeout > 0:
                time.sleep(min(timeout, 0.05))
            return
        for key, mask in self.selector.select(max(timeout, 0.0)):
            cluster, conn = key.data
            cluster.handle_events(conn, mask)

    def close(self) -> None:
        self.selector.close()


class Cluster:
    """Connections to one cluster, its metadata, and request routing."""

    def __init__(self, bootstrap: str, *, pool: SimpleMemoryPool, ring_bytes: int,
                 coordinator_ring_bytes: int = 1 << 20, client_id: str = "kafkacodec",
                 request_timeout: float = 30.0, retry_backoff: float = 0.1,
                 max_retry_backoff: float = 1.0, reactor: Reactor | None = None,
                 priority: bool = False, name: str = "cluster"):
        self.bootstrap = parse_bootstrap(bootstrap)
        self.pool = pool
        self.ring_bytes = ring_bytes
        self.coordinator_ring_bytes = coordinator_ring_bytes
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.priority = priority        # every connection allocates its ring with priority
        self.name = name
        self.reactor = reactor or Reactor()
        self.reactor.clusters.append(self)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.connections: dict[tuple[int, str], BrokerConnection] = {}
        self.closing: list[BrokerConnection] = []       # closed, ring still held by responses
        self.pending: dict[BrokerConnection, list[Request]] = {}   # waiting for ApiVersions
        self.node_backoff: dict[int, tuple[float, int]] = {}    # node -> (until, failures)
        self.leaders: dict[tuple[str, int], int] = {}
        self.partition_counts: dict[str, int] = {}
        self.topic_ids: dict[str, Any] = {}
        self.topic_errors: dict[str, int] = {}
        self.cluster_id: str | None = None
        self.metadata_stale = True
        self.known_topics: set[str] = set()
        self.closed = False
        self.on_connection_error: Callable[[BrokerConnection, BaseException], None] | None = None

    # -- connections ---------------------------------------------------------------------------
    def live_connections(self) -> Iterable[BrokerConnection]:
        return list(self.connections.values())

    def node_address(self, node_id: int) -> tuple[str, int]:
        if node_id in self.brokers:
            return self.brokers[node_id]
        if node_id < 0 and -node_id - 1 < len(self.bootstrap):
            return self.bootstrap[-node_id - 1]
        raise KeyError(f"unknown broker {node_id}")

    def available(self, node_id: int, now: float | None = None) -> bool:
        """False while the node is in reconnection backoff."""
        entry = self.node_backoff.get(node_id)
        return entry is None or (now or time.monotonic()) >= entry[0]

    def connection(self, node_id: int, purpose: str = "data") -> BrokerConnection:
        """The connection for (node, purpose), connecting when needed.  ConnectionError while
        the node is in backoff after a failure."""
        key = (node_id, purpose)
        conn = self.connections.get(key)
        if conn is not None and conn.state != CLOSED:
            return conn
        if not self.available(node_id):
            raise ConnectionError(f"broker {node_id} is in reconnection backoff")
        host, port = self.node_address(node_id)
        coordinator = purpose == "coordinator"
        conn = BrokerConnection(node_id, host, port, pool=self.pool,
                                ring_bytes=self.coordinator_ring_bytes if coordinator else self.ring_bytes,
                                priority=coordinator or self.priority,
                                name=f"{self.name} broker {node_id} ({host}:{port}, {purpose})")
        try:
            conn.connect()
        except OSError as exc:
            self._backoff(node_id)
            raise ConnectionError(str(exc)) from exc
        self.connections[key] = conn
        self.pending[conn] = []
        self._send_api_versions(conn)
        return conn

    def any_node(self) -> int:
        """A node for cluster-wide requests: a ready connection first, else a known broker or a
        bootstrap address not in backoff."""
        now = time.monotonic()
        for (node, purpose), conn in self.connections.items():
            if purpose == "data" and conn.ready:
                return node
        candidates = list(self.brokers) or [-(i + 1) for i in range(len(self.bootstrap))]
        random.shuffle(candidates)
        for node in candidates:
            if self.available(node, now):
                return node
        return min(candidates, key=lambda n: self.node_backoff.get(n, (0.0, 0))[0])

    def _backoff(self, node_id: int) -> None:
        _, failures = self.node_backoff.get(node_id, (0.0, 0))
        delay = min(self.retry_backoff * (2 ** failures), self.max_retry_backoff)
        delay *= 0.8 + 0.4 * random.random()          # jitter, as Kafka's clients
        self.node_backoff[node_id] = (time.monotonic() + delay, failures + 1)

    def fail_connection(self, conn: BrokerConnection, error: BaseException) -> None:
        """Close a connection and fail its requests (their handlers decide about retrying)."""
        failed = conn.close(error)
        for key, value in list(self.connections.items()):
            if value is conn:
                del self.connections[key]
        failed_pending = self.pending.pop(conn, [])
        if conn.ring is not None:
            self.closing.append(conn)
        self._backoff(conn.node_id)
        self.metadata_stale = True
        if self.on_connection_error is not None:
            self.on_connection_error(conn, error)
        for request in failed:
            request.on_error(error)
        for pending in failed_pending:
            pending.on_error(error)

    # -- sending -------------------------------------------------------------------------------
    def _send_api_versions(self, conn: BrokerConnection, version: int = API_VERSIONS_VERSION) -> None:
        def on_response(resp: Response, _: int) -> None:
            try:
                decoded = decode_api_versions_response(resp.payload, version)
            finally:
                resp.release()
            if decoded.error_code == 35 and version > 0:       # UNSUPPORTED_VERSION: retry v0
                self._send_api_versions(conn, 0)
                return
            if decoded.error_code:
                self.fail_connection(conn, BrokerError("ApiVersions failed",
                                                       error_code=decoded.error_code))
                return
            conn.api_versions = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
            self.node_backoff.pop(conn.node_id, None)
            for request in self.pending.pop(conn, []):
                self._dispatch(conn, request)

        cid = conn.next_correlation_id()
        frame = encode_api_versions_request(api_version=version, correlation_id=cid,
                                            client_id=self.client_id)
        conn.send(frame, InFlight(API_VERSIONS, version, lambda r: on_response(r, version),
                                  lambda e: None, time.monotonic() + self.request_timeout), cid)

    def send(self, node_id: int, request: Request, purpose: str = "data") -> BrokerConnection:
        """Send `request` to a node (queued until the connection knows its versions).  Errors
        (connection failures, no common version) reach request.on_error."""
        try:
            conn = self.connection(node_id, purpose)
        except (ConnectionError, KeyError) as exc:
            request.on_error(exc if isinstance(exc, ConnectionError) else ConnectionError(str(exc)))
            raise
        if conn.ready:
            self._dispatch(conn, request)
        else:
            self.pending.setdefault(conn, []).append(request)
        return conn

    def choose_version(self, conn: BrokerConnection, api_key: int, max_version: int,
                       min_version: int = 0) -> int:
        assert conn.api_versions is not None
        if api_key not in conn.api_versions:
            raise UnsupportedVersionError(f"{conn.name} does not support api {api_key}")
        low, high = conn.api_versions[api_key]
        version = min(high, max_version)
        if version < max(low, min_version):
            raise UnsupportedVersionError(
                f"{conn.name} speaks api {api_key} versions {low}-{high}; kafkacodec needs "
                f"{min_version}-{max_version}")
        return version

    def _dispatch(self, conn: BrokerConnection, request: Request) -> None:
        try:
            version = self.choose_version(conn, request.api_key, request.max_version,
                                          request.min_version)
        except UnsupportedVersionError as exc:
            request.on_error(exc)
            return
        cid = conn.next_correlation_id()
        frame = request.encode(version, cid)
        conn.send(frame, InFlight(request.api_key, version,
                                  lambda resp: request.on_response(resp, version), request.on_error,
                                  time.monotonic() + request.timeout, request.context), cid)

    def call(self, node_id: int | None, api_key: int, encode: Callable[[int, int], Any],
             decode: Callable[[Response, int], Any], *, max_version: int, min_version: int = 0,
             purpose: str = "data", timeout: float | None = None, retries: int = 5) -> Any:
        """Send one request and wait for its decoded answer (`decode(response, version)`; the
        response is released after it).  Connection failures and timeouts are retried with
        backoff on another node when `node_id` is None."""
        timeout = self.request_timeout if timeout is None else timeout
        last: BaseException | None = None
        for attempt in range(retries + 1):
            node = self.any_node() if node_id is None else node_id
            box: list[Any] = []

            def on_response(resp: Response, version: int) -> None:
                try:
                    box.append(("ok", decode(resp, version)))
                except BaseException as exc:      # delivered to the caller below
                    box.append(("error", exc))
                finally:
                    resp.release()

            def on_error(exc: BaseException) -> None:
                box.append(("error", exc))

            request = Request(api_key, encode, on_response, on_error, max_version=max_version,
                              min_version=min_version, timeout=timeout)
            wait_until = time.monotonic()
            entry = self.node_backoff.get(node)
            if entry is not None and entry[0] > wait_until:
                self.wait(entry[0] - wait_until)
            try:
                self.send(node, request, purpose)
            except (ConnectionError, KeyError):
                pass
            deadline = time.monotonic() + timeout + 1.0
            while not box and time.monotonic() < deadline:
                self.reactor.poll(min(0.05, max(deadline - time.monotonic(), 0.0)))
            if not box:
                last = TimeoutError(f"no answer to api {api_key} from broker {node} in {timeout} s")
                continue
            kind, value = box[0]
            if kind == "ok":
                return value
            last = value
            if not isinstance(value, (ConnectionError, TimeoutError, OSError)):
                raise value
        assert last is not None
        raise last

    def wait(self, seconds: float) -> None:
        """Run the event loop for `seconds` (other requests keep progressing)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.reactor.poll(min(left, 0.05))

    # -- metadata ------------------------------------------------------------------------------
    def refresh_metadata(self, topics: Iterable[str] | None = None, *,
                         allow_auto_topic_creation: bool = False) -> MetadataResponse:
        """Fetch Metadata for `topics` (plus every topic known so far) and update brokers,
        leaders and partition counts."""
        wanted = sorted(set(topics or ()) | self.known_topics)
        self.known_topics.update(wanted)

        def encode(version: int, cid: int) -> bytes:
            return encode_metadata_request(wanted, api_version=version, correlation_id=cid,
                                           client_id=self.client_id,
                                           allow_auto_topic_creation=allow_auto_topic_creation)

        def decode(resp: Response, version: int) -> MetadataResponse:
            return decode_metadata_response(resp.payload, version)

        metadata: MetadataResponse = self.call(None, METADATA, encode, decode,
                                               max_version=METADATA_MAX_VERSION, min_version=1)
        self.apply_metadata(metadata)
        return metadata

    def apply_metadata(self, metadata: MetadataResponse) -> None:
        self.brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
        self.cluster_id = metadata.cluster_id
        for topic in metadata.topics:
            if topic.name is None:
                continue
            self.topic_errors[topic.name] = topic.error_code
            if topic.error_code:
                continue
            self.partition_counts[topic.name] = len(topic.partitions)
            if topic.topic_id is not None:
                self.topic_ids[topic.name] = topic.topic_id
            for p in topic.partitions:
                key = (topic.name, p.partition_index)
                if p.error_code in (0, 9) and p.leader_id >= 0:     # 9: a replica is down
                    self.leaders[key] = p.leader_id
                else:
                    self.leaders.pop(key, None)
        self.metadata_stale = False
        # Connections to brokers that left the cluster are closed.
        for (node, purpose), conn in list(self.connections.items()):
            if node >= 0 and node not in self.brokers:
                self.fail_connection(conn, ConnectionError(f"broker {node} left the cluster"))

    # -- the loop ------------------------------------------------------------------------------
    def prepare(self, now: float) -> None:
        """Before each select: time out requests, give idle rings back, retry muted reads."""
        pressure = self.has_muted()
        for conn in list(self.connections.values()):
            if conn.in_flight and conn.expired(now):
                self.fail_connection(conn, TimeoutError(
                    f"{conn.name}: no response within {self.request_timeout} s"))
                continue
            if conn.ring is not None and (pressure or not conn.in_flight):
                conn.release_ring_if_idle()     # idle: back to the pool (others may wait)
        for conn in list(self.connections.values()):
            if conn.muted:
                conn.take_ring()
        for conn in list(self.closing):
            if conn.release_ring_if_idle():
                self.closing.remove(conn)

    def has_muted(self) -> bool:
        return any(c.muted for c in self.connections.values())

    def handle_events(self, conn: BrokerConnection, mask: int) -> None:
        """Socket events of one connection.  A failure of the socket or of the response
        stream (the ring's errors: a response larger than the ring, a negative size) closes
        the connection and reaches the handlers of its requests; handlers do not raise."""
        responses = []
        try:
            if mask & selectors.EVENT_WRITE:
                conn.handle_write()
            if mask & selectors.EVENT_READ and conn.state == CONNECTED:
                responses = conn.handle_read()
        except (OSError, KafkaCodecError) as exc:
            self.fail_connection(conn, exc)
        for request, resp in responses:
            request.on_response(resp)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for conn in list(self.connections.values()):
            conn.close()
        self.connections.clear()
        if self in self.reactor.clusters:
            self.reactor.clusters.remove(self)


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """"host:port[,host:port...]" -> [(host, port)]; [v6]:port for IPv6."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap address {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("empty bootstrap list")
    return out
