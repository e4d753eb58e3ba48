"""A Kafka cluster as the consumer core sees it: bootstrap, Metadata (brokers, partition
leaders, topic ids), one connection per broker for data (plus one per coordinator, with
priority; kafkacodec.net's Connection with a ResponseReader, kept as a BrokerLink), ApiVersions
negotiation on every new connection, request timeouts, reconnection backoff.  It runs on a
kafkacodec.net Loop: its own, or one it shares (the mirror's source and target; the server's
loop under `serve --upstream`, where its answers arrive as callbacks).

Four rules hold here for every request, whoever sends it:
- Exactly one of a request's handlers runs, once: its answer (every answer read before a
  damaged frame included) or the error of its connection (_on_responses, _closed).
- Every call has an asynchronous form that never waits (`call_async`, `metadata_async`,
  `pursue`; GroupOffsets and OffsetLookup build theirs on them): it takes a Deadline and a
  callback `on_done(value, error)`, which runs exactly once, by the deadline at the latest (a
  Completion: a loop timer ends the call with the deadline's KafkaTimeoutError), with retries
  and backoffs as loop timers.  So the calls serve a loop that only runs callbacks (the
  server's, under `serve --upstream`).
- A blocking call (the consumer's assign, commit, end_offsets...) is its asynchronous form run
  to its end by `complete()`, inside one deadline (`deadline()`, Kafka's
  default.api.timeout.ms): it waits only in `complete()` and `wait()`, which both end at that
  deadline, raising KafkaTimeoutError.  `request_timeout` (request.timeout.ms) is how long one
  answer may take before its connection is dropped.  The loop refuses to run inside one of its
  own callbacks (ConcurrentUseError), so a blocking call never stalls a loop that serves others.
- An answer decoded into Python objects (everything but Fetch) is at most
  `receive_message_max_bytes` (librdkafka's receive.message.max.bytes); a larger one fails its
  request with RecordTooLargeError, and a Metadata answer keeps only the topics asked for.

Not thread-safe: a Cluster and its Loop are used by one thread at a time.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import random
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kafkacodec._pool import SimpleMemoryPool
from kafkacodec._ring import Response
from kafkacodec.consumer._link import BrokerLink
from kafkacodec.errors import (
    KafkaCodecError,
    KafkaTimeoutError,
    RecordTooLargeError,
    UnsupportedVersionError,
)
from kafkacodec.net.client import InFlight, ResponseReader, open_connection
from kafkacodec.net.connection import FAILED, Connection, Deadlines
from kafkacodec.net.loop import Loop, Timer
from kafkacodec.protocol._metadata import (
    decode_api_versions_response,
    decode_metadata_response,
    encode_api_versions_request,
    encode_metadata_request,
)
from kafkacodec.protocol._types import MetadataResponse
from kafkacodec.protocol.api import ApiKey, Error

__all__ = ["Cluster", "Request", "Deadline", "Completion", "Done", "BrokerError",
           "DEFAULT_RECEIVE_MESSAGE_MAX_BYTES"]

log = logging.getLogger("kafkacodec.consumer")

#: The largest answer decoded into Python objects (Metadata, ListOffsets, the coordinator's):
#: librdkafka's receive.message.max.bytes, a safety cap against memory exhaustion.  Fetch
#: answers are read in place and bounded by the ring instead.
DEFAULT_RECEIVE_MESSAGE_MAX_BYTES = 1 << 20
#: How often a cluster looks at its connections' deadlines and muted reads.
TICK_S = 0.05

API_VERSIONS_VERSION = 2          # non-flexible, answered by every broker since 2.0 (and the mock)
METADATA_MAX_VERSION = 12


class BrokerError(KafkaCodecError):
    """A broker answered with an error code that retrying could not clear (or that is not
    retriable).  ``error_code`` is Kafka's code, ``error_name`` its name; ``topic`` and
    ``partition`` are set when the error was about one partition."""

    def __init__(self, message: str, *, error_code: int, topic: str | None = None,
                 partition: int | None = None):
        self.error_code = error_code
        self.error_name = Error.name_of(error_code)
        self.topic = topic
        self.partition = partition
        where = f" ({topic}-{partition})" if topic is not None and partition is not None else ""
        super().__init__(f"{message}{where}: {self.error_name} ({error_code})")


class Request:
    """A request to send once the connection knows the broker's versions: `encode(version,
    correlation_id)` frames it for the version chosen (the highest both sides speak, capped at
    `max_version`); `on_response(response, version)` owns the ring Response (must release it).
    `ring_bounded`: its answer is read in place and only the ring bounds it (Fetch); any other
    is refused above the cluster's receive_message_max_bytes.  `deadline`: the call it is sent
    for (None: the running blocking call, if any), whose KafkaTimeoutError names it."""

    __slots__ = ("api_key", "min_version", "max_version", "encode", "on_response", "on_error",
                 "timeout", "context", "ring_bounded", "deadline")

    def __init__(self, api_key: int, encode: Callable[[int, int], Any],
                 on_response: Callable[[Response, int], None],
                 on_error: Callable[[BaseException], None], *, max_version: int,
                 min_version: int = 0, timeout: float = 30.0, context: Any = None,
                 ring_bounded: bool = False, deadline: Deadline | None = None):
        self.api_key = api_key
        self.encode = encode
        self.on_response = on_response
        self.on_error = on_error
        self.max_version = max_version
        self.min_version = min_version
        self.timeout = timeout
        self.context = context
        self.ring_bounded = ring_bounded
        self.deadline = deadline


class Deadline:
    """The time one blocking call has (Kafka's default.api.timeout.ms).  Every wait inside it
    ends by `end`; then `expired()` is the KafkaTimeoutError naming the call, the broker it
    waited for last and what that broker last did (`note()`, `waiting()`)."""

    __slots__ = ("call", "timeout", "end", "broker", "last", "conn", "api", "__weakref__")

    def __init__(self, call: str, timeout: float):
        if not timeout >= 0:
            raise ValueError(f"{call}: timeout must be 0 or more seconds, got {timeout}")
        self.call = call
        self.timeout = timeout
        self.end = time.monotonic() + timeout
        self.broker = "no broker"
        self.last = "nothing was sent"
        self.conn: BrokerLink | None = None            # waiting for an answer on it
        self.api = ""

    def left(self) -> float:
        return self.end - time.monotonic()

    def note(self, broker: str, what: str) -> None:
        """What a broker did: a failure, an error code, an answer."""
        self.broker, self.last, self.conn = broker, what, None

    def waiting(self, conn: BrokerLink, api: str) -> None:
        """A request was sent on `conn`: the call now waits for its answer."""
        self.broker, self.conn, self.api = conn.name, conn, api

    def expired(self) -> KafkaTimeoutError:
        what = self.last if self.conn is None else waiting_for(self.conn, self.api)
        return KafkaTimeoutError(
            f"{self.call}() did not complete within {self.timeout:g} s: {self.broker}: {what}",
            call=self.call, broker=self.broker, timeout=self.timeout)


#: An asynchronous call's callback: (value, None) when it succeeded, (None, error) when not.
Done = Callable[[Any, "BaseException | None"], None]


class Completion:
    """The end of one asynchronous call: `ok(value)` or `fail(error)` runs `on_done(value,
    error)` once (a later end is ignored); a loop timer at the deadline fails it with the
    deadline's KafkaTimeoutError when nothing came first.  `later(delay, step)` runs the call's
    next step after a backoff, unless it ended meanwhile.  A callback that raises is logged (it
    runs inside a response handler, whose connection must not pay for it)."""

    __slots__ = ("loop", "deadline", "on_done", "done", "_expiry", "_step")

    def __init__(self, loop: Loop, deadline: Deadline, on_done: Done):
        self.loop = loop
        self.deadline = deadline
        self.on_done = on_done
        self.done = False
        self._expiry: Timer = loop.call_at(deadline.end, self._expire)
        self._step: Timer | None = None

    def _expire(self) -> None:
        self.fail(self.deadline.expired())

    def ok(self, value: Any = None) -> None:
        self._end(value, None)

    def fail(self, error: BaseException) -> None:
        self._end(None, error)

    def _end(self, value: Any, error: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        self._expiry.cancel()
        if self._step is not None:
            self._step.cancel()
        # a cancelled timer waits in the loop's heap a while: it keeps nothing of the caller's
        on_done, self.on_done = self.on_done, _ended
        try:
            on_done(value, error)
        except Exception:
            log.exception("the callback of %s() failed", self.deadline.call)

    def later(self, delay: float, step: Callable[[], None]) -> None:
        """Run `step()` in `delay` seconds (replacing a step already waiting), unless the call
        ended by then."""
        if self.done:
            return
        if self._step is not None:
            self._step.cancel()
        self._step = self.loop.call_later(delay, lambda: None if self.done else self.guard(step))

    def guard(self, step: Callable[[], None]) -> None:
        """Run a step of the call; an exception it raises ends the call with it."""
        try:
            step()
        except Exception as exc:
            self.fail(exc)


def _ended(value: Any, error: BaseException | None) -> None:
    """A Completion's callback once it ran."""


def waiting_for(link: BrokerLink, api: str) -> str:
    """What a request without an answer is waiting for."""
    if link.closed:
        return f"the connection closed before {api} was answered"
    assert link.conn is not None
    if link.conn.connecting:
        return f"still connecting (to send {api})"
    if not link.conn.handshaken:
        return f"still in the TLS handshake (to send {api})"
    if link.api_versions is None:
        return f"no answer to ApiVersions (sent before {api})"
    if not link.authenticated:
        return f"still authenticating (to send {api})"
    return f"no answer to {api}"


def failure_text(exc: BaseException, broker: str) -> str:
    """What a failure says, without the broker it names already: "connection refused"."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()
    return str(exc).replace(f"{broker}: ", "") or type(exc).__name__


class Cluster:
    """Connections to one cluster, its metadata, and request routing."""

    def __init__(self, bootstrap: str, *, pool: SimpleMemoryPool, ring_bytes: int,
                 coordinator_ring_bytes: int = 1 << 20, client_id: str = "kafkacodec",
                 request_timeout: float = 30.0, default_api_timeout: float | None = None,
                 receive_message_max_bytes: int = DEFAULT_RECEIVE_MESSAGE_MAX_BYTES,
                 retry_backoff: float = 0.1, max_retry_backoff: float = 1.0,
                 loop: Loop | None = None, priority: bool = False, name: str = "cluster",
                 security: Any = None, connection_setup_timeout: float = 10.0):
        if not request_timeout > 0:
            raise ValueError(f"request_timeout must be more than 0 seconds, got {request_timeout}")
        if default_api_timeout is not None and not default_api_timeout > 0:
            raise ValueError(f"default_api_timeout must be more than 0 seconds, got "
                             f"{default_api_timeout}")
        if receive_message_max_bytes < 1024:
            raise ValueError(f"receive_message_max_bytes must be at least 1024, got "
                             f"{receive_message_max_bytes}")
        self.bootstrap = parse_bootstrap(bootstrap)
        self._broker_names: dict[tuple[int, str, tuple[str, int]], str] = {}
        self.pool = pool
        self.ring_bytes = ring_bytes
        self.coordinator_ring_bytes = coordinator_ring_bytes
        self.client_id = client_id
        self.request_timeout = request_timeout          # one answer (request.timeout.ms)
        # one blocking call, all its requests and retries (default.api.timeout.ms)
        self.default_api_timeout = request_timeout if default_api_timeout is None else default_api_timeout
        self.receive_message_max_bytes = receive_message_max_bytes
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.priority = priority        # every connection allocates its ring with priority
        self.name = name
        self.own_loop = loop is None
        self.loop = loop or Loop()
        # TLS and SASL (a kafkacodec.net.ClientSecurity, a dict of client properties, or the path
        # of a client.properties file; None: PLAINTEXT)
        self.security = client_security(security)
        self.tls: Any = None
        if self.security is not None and self.security.uses_tls:
            from kafkacodec.net.tls import client_context

            self.tls = client_context(self.security)
        # socket.connection.setup.timeout.ms: the connect and the TLS handshake
        self.deadlines = Deadlines(idle=math.inf, request_read=math.inf,
                                   response_write=request_timeout, handshake=connection_setup_timeout)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.connections: dict[tuple[int, str], BrokerLink] = {}
        self.closing: list[BrokerLink] = []             # closed, ring still held by responses
        self.pending: dict[BrokerLink, list[Request]] = {}   # waiting for ApiVersions
        self.node_backoff: dict[int, tuple[float, int]] = {}    # node -> (until, failures)
        self.node_failure: dict[int, str] = {}                  # node -> what failed last
        self.leaders: dict[tuple[str, int], int] = {}
        self.partition_counts: dict[str, int] = {}
        self.topic_ids: dict[str, Any] = {}
        self.topic_errors: dict[str, int] = {}
        self.cluster_id: str | None = None
        self.metadata_stale = True
        self.known_topics: set[str] = set()
        self.closed = False
        self.on_connection_error: Callable[[BrokerLink, BaseException], None] | None = None
        self._deadline: Deadline | None = None          # the blocking call running, if any
        # the deadlines of the calls that sent requests (blocking or not): a connection that
        # closes tells those waiting on it what happened
        self.live_deadlines: weakref.WeakSet[Deadline] = weakref.WeakSet()
        self._watchers: dict[int, Callable[[], None]] = {}   # run after answers and failures
        self._watch_keys = itertools.count()
        self._change_pending = False
        self.metadata_in_flight = False                 # request_metadata() sent, not answered
        self.metadata_sent_at = float("-inf")           # ...and when it was sent last
        self.metadata_link: BrokerLink | None = None    # ...and where
        self._tick_timer = self.loop.call_later(TICK_S, self._tick)

    # -- connections ---------------------------------------------------------------------------
    def node_address(self, node_id: int) -> tuple[str, int]:
        if node_id in self.brokers:
            return self.brokers[node_id]
        if node_id < 0 and -node_id - 1 < len(self.bootstrap):
            return self.bootstrap[-node_id - 1]
        raise KeyError(f"unknown broker {node_id}")

    def broker_name(self, node_id: int, purpose: str = "data") -> str:
        """How errors name a broker: "source broker 1 (host:port, data)", "source bootstrap
        broker (host:port, data)" before Metadata named it."""
        try:
            address = self.node_address(node_id)
        except KeyError:
            return f"{self.name} broker {node_id} (address unknown, {purpose})"
        key = (node_id, purpose, address)           # (named once: every call names its broker)
        name = self._broker_names.get(key)
        if name is None:
            if len(self._broker_names) > 4096:       # addresses that changed since
                self._broker_names.clear()
            which = "bootstrap broker" if node_id < 0 else f"broker {node_id}"
            name = self._broker_names[key] = f"{self.name} {which} ({address[0]}:{address[1]}, {purpose})"
        return name

    def available(self, node_id: int, now: float | None = None) -> bool:
        """False while the node is in reconnection backoff."""
        entry = self.node_backoff.get(node_id)
        return entry is None or (now or time.monotonic()) >= entry[0]

    def connection(self, node_id: int, purpose: str = "data") -> BrokerLink:
        """The connection for (node, purpose), connecting when needed.  ConnectionError while
        the node is in backoff after a failure."""
        key = (node_id, purpose)
        conn = self.connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        if not self.available(node_id):
            raise ConnectionError(f"{self.broker_name(node_id, purpose)}: in reconnection "
                                  f"backoff after {self.node_failure.get(node_id, 'a failure')}")
        host, port = self.node_address(node_id)
        coordinator = purpose == "coordinator"
        name = self.broker_name(node_id, purpose)
        link = BrokerLink(node_id, purpose, name, None)  # type: ignore[arg-type]
        link.reader = ResponseReader(
            self.pool, self.coordinator_ring_bytes if coordinator else self.ring_bytes,
            lambda _conn, done, error: self._on_responses(link, done, error),
            priority=coordinator or self.priority)
        try:
            link.conn = open_connection(self.loop, host, port, link.reader, tls=self.tls, name=name,
                                        on_closed=lambda _conn: self._closed(link),
                                        deadlines=self.deadlines)
        except OSError as exc:
            self._backoff(node_id, failure_text(exc, name))
            raise ConnectionError(str(exc)) from exc
        self.connections[key] = link
        self.pending[link] = []
        self._send_api_versions(link)
        return link

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

    def _backoff(self, node_id: int, failure: str) -> None:
        """Reconnect to the node only after a while (exponential, jittered); `failure` is
        what went wrong, for the errors of the calls that meet the backoff."""
        self.node_failure[node_id] = failure
        _, failures = self.node_backoff.get(node_id, (0.0, 0))
        delay = min(self.retry_backoff * (2 ** failures), self.max_retry_backoff)
        delay *= 0.8 + 0.4 * random.random()          # jitter, as Kafka's clients
        self.node_backoff[node_id] = (time.monotonic() + delay, failures + 1)

    def fail_connection(self, conn: BrokerLink, error: BaseException) -> None:
        """Close a connection and fail its requests (their handlers decide about retrying)."""
        if conn.conn is not None and not conn.conn.closed:
            conn.conn.close(str(error), FAILED, error)        # on to _closed()
        elif conn.error is None:
            conn.error = error
            self._closed(conn)

    def _closed(self, conn: BrokerLink) -> None:
        """A connection closed (failed by us, by its socket, or by the broker): every request
        on it or waiting for it gets the error; the ring goes back once its responses are."""
        closed: Connection | None = conn.conn
        error = conn.error or (closed.close_error if closed is not None else None) or \
            ConnectionError(f"{conn.name}: {closed.close_reason if closed is not None else 'closed'}")
        conn.error = error
        failed = list(conn.in_flight.values())
        conn.in_flight.clear()
        for key, value in list(self.connections.items()):
            if value is conn:
                del self.connections[key]
        failed_pending = self.pending.pop(conn, [])
        if conn.ring is not None:
            self.closing.append(conn)
        failure = failure_text(error, conn.name)
        self._backoff(conn.node_id, failure)
        self.metadata_stale = True
        for deadline in list(self.live_deadlines):
            if deadline.conn is conn:
                deadline.note(conn.name, failure)
        if self.on_connection_error is not None:
            self.on_connection_error(conn, error)
        for handler in [r.on_error for r in failed] + [r.on_error for r in failed_pending]:
            try:
                handler(error)
            except Exception as exc:      # a handler must not raise: the others still run
                log.error("%s: a request's error handler failed: %r", conn.name, exc)
        self._changed()

    # -- sending -------------------------------------------------------------------------------
    def _send_api_versions(self, conn: BrokerLink, version: int = API_VERSIONS_VERSION) -> None:
        def on_response(resp: Response, _: int) -> None:
            try:
                decoded = decode_api_versions_response(resp.payload, version)
            finally:
                resp.release()
            if decoded.error_code == Error.UNSUPPORTED_VERSION and version > 0:   # retry v0
                self._send_api_versions(conn, 0)
                return
            if decoded.error_code:
                self.fail_connection(conn, BrokerError("ApiVersions failed",
                                                       error_code=decoded.error_code))
                return
            conn.api_versions = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
            if self.security is not None and self.security.uses_sasl:
                self._authenticate(conn)
            else:
                self._authenticated(conn)

        cid = conn.next_correlation_id()
        frame = encode_api_versions_request(api_version=version, correlation_id=cid,
                                            client_id=self.client_id)
        conn.send(frame, InFlight(ApiKey.API_VERSIONS, version, lambda r: on_response(r, version),
                                  lambda e: None, time.monotonic() + self.request_timeout,
                                  max_response_bytes=self.receive_message_max_bytes), cid)

    def _authenticate(self, link: BrokerLink) -> None:
        """SASL on a new connection (SaslHandshake v1 + SaslAuthenticate), then ready; again
        before the session lifetime the broker answered ends (KIP-368)."""
        from kafkacodec.net.authentication import ClientAuthenticator
        from kafkacodec.protocol import control

        def send(api_key: int, message: Any, on_answer: Callable[[Any], None]) -> None:
            decode = control.response_decoder(api_key)

            def on_response(resp: Response, version: int) -> None:
                try:
                    answer = decode(resp, version)
                finally:
                    resp.release()
                on_answer(answer)

            self._dispatch(link, Request(api_key, control.request_encoder(message, self.client_id),
                                         on_response, lambda exc: None,
                                         max_version=control.MAX_VERSIONS[api_key],
                                         min_version=1 if api_key == ApiKey.SASL_HANDSHAKE else 0,
                                         timeout=self.request_timeout))

        def done(lifetime_ms: int) -> None:
            from kafkacodec.net.sasl import reauthentication_delay_ms

            delay = reauthentication_delay_ms(lifetime_ms)
            if delay is not None:
                self.loop.call_later(delay / 1000, lambda: self._reauthenticate(link))
            self._authenticated(link)

        def failed(error: BaseException) -> None:
            self.fail_connection(link, error)

        ClientAuthenticator(self.security, send, done, failed).start()

    def _reauthenticate(self, link: BrokerLink) -> None:
        """KIP-368: a new exchange on the same connection; new requests wait for it."""
        if link.closed or self.closed:
            return
        link.authenticated = False
        self.pending.setdefault(link, [])
        self._authenticate(link)

    def _authenticated(self, conn: BrokerLink) -> None:
        """The connection is ready: what waited for it goes out."""
        conn.authenticated = True
        self.node_backoff.pop(conn.node_id, None)
        self.node_failure.pop(conn.node_id, None)
        for request in self.pending.pop(conn, []):
            self._dispatch(conn, request)

    def send(self, node_id: int, request: Request, purpose: str = "data") -> BrokerLink:
        """Send `request` to a node (queued until the connection knows its versions).  Errors
        (connection failures, no common version) reach request.on_error.  The call it is part
        of (request.deadline; None: the running blocking call, if any) now waits for this
        answer (its KafkaTimeoutError says so)."""
        deadline = request.deadline or self._deadline
        try:
            conn = self.connection(node_id, purpose)
        except (ConnectionError, KeyError) as exc:
            self.note(node_id, failure_text(exc, self.broker_name(node_id, purpose)), purpose,
                      deadline)
            request.on_error(exc if isinstance(exc, ConnectionError) else ConnectionError(str(exc)))
            raise
        if deadline is not None:
            self._waiting_on(deadline, conn, ApiKey.name_of(request.api_key))
        if conn.ready:
            self._dispatch(conn, request)
        else:
            self.pending.setdefault(conn, []).append(request)
        return conn

    def _waiting_on(self, deadline: Deadline, conn: BrokerLink, api: str) -> None:
        deadline.waiting(conn, api)
        self.live_deadlines.add(deadline)

    def choose_version(self, conn: BrokerLink, api_key: int, max_version: int,
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

    def _dispatch(self, conn: BrokerLink, request: Request) -> None:
        """Send on a ready connection; a request that cannot go (no common version, or the
        connection closed meanwhile: a write just failed) gets its error instead."""
        if conn.closed:
            request.on_error(conn.error or ConnectionError(f"{conn.name}: the connection closed"))
            return
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
                                  time.monotonic() + request.timeout, request.context,
                                  None if request.ring_bounded else self.receive_message_max_bytes),
                  cid)

    @contextlib.contextmanager
    def deadline(self, call: str, timeout: float | None = None) -> Iterator[Deadline]:
        """The deadline of a blocking call named `call`: `timeout` seconds (None:
        default_api_timeout).  Every call() and wait() inside it ends by then (KafkaTimeoutError).
        Inside another blocking call, that call's deadline stays."""
        if self._deadline is not None:
            yield self._deadline
            return
        self._deadline = deadline = Deadline(call, self.default_api_timeout if timeout is None
                                             else timeout)
        try:
            yield deadline
        finally:
            self._deadline = None

    def note(self, node_id: int | None, what: str, purpose: str = "data",
             deadline: Deadline | None = None) -> None:
        """Tell a call's deadline (None: the running blocking call's) what a broker (None: the
        one that answered last) last did: its KafkaTimeoutError says so."""
        deadline = deadline or self._deadline
        if deadline is not None:
            deadline.note(deadline.broker if node_id is None else self.broker_name(node_id, purpose),
                          what)

    def complete(self, start: Callable[[Done], None], deadline: Deadline) -> Any:
        """Run an asynchronous call to its end: `start(on_done)` begins it, then the loop runs
        until on_done came or `deadline` passed (KafkaTimeoutError).  Returns its value, or
        raises its error.  The blocking form of every call here is this, over its async form."""
        box: list[tuple[Any, BaseException | None]] = []
        start(lambda value, error: box.append((value, error)))
        while not box:
            left = deadline.left()
            if left <= 0:
                raise deadline.expired()
            self.loop.run_once(min(left, TICK_S))
        value, error = box[0]
        if error is not None:
            raise error
        return value

    def call(self, node_id: int | None, api_key: int, encode: Callable[[int, int], Any],
             decode: Callable[[Response, int], Any], *, max_version: int, min_version: int = 0,
             purpose: str = "data", timeout: float | None = None, retries: int | None = None) -> Any:
        """Send one request and wait for its decoded answer: call_async() run to its end, within
        the deadline of the blocking call it is part of (`deadline()`; its own of
        default_api_timeout otherwise): KafkaTimeoutError when that runs out."""
        with self.deadline("call") as deadline:
            return self.complete(lambda done: self.call_async(
                node_id, api_key, encode, decode, done, deadline=deadline,
                max_version=max_version, min_version=min_version, purpose=purpose,
                timeout=timeout, retries=retries), deadline)

    def call_async(self, node_id: int | None, api_key: int, encode: Callable[[int, int], Any],
                   decode: Callable[[Response, int], Any], on_done: Done, *, deadline: Deadline,
                   max_version: int, min_version: int = 0, purpose: str = "data",
                   timeout: float | None = None, retries: int | None = None) -> None:
        """Send one request; `on_done(answer, None)` with its decoded answer (`decode(response,
        version)`; the response is released after it), or `on_done(None, error)`.  One answer
        may take `timeout` seconds (default request_timeout: then the connection is dropped);
        connection failures and timeouts are retried (after the node's reconnection backoff, on
        another node when `node_id` is None), `retries` times or (None) as long as there is
        time; `deadline` ends it all (KafkaTimeoutError).  Never waits."""
        timeout = self.request_timeout if timeout is None else timeout
        name = ApiKey.name_of(api_key)
        end = Completion(self.loop, deadline, on_done)
        attempts = [0]

        def attempt() -> None:
            if deadline.left() <= 0:
                end.fail(deadline.expired())
                return
            node = self.any_node() if node_id is None else node_id
            broker = self.broker_name(node, purpose)
            entry = self.node_backoff.get(node)
            backoff = entry[0] - time.monotonic() if entry is not None else 0.0
            if backoff > 0:
                if deadline.broker == "no broker":
                    deadline.note(broker, "in reconnection backoff after a failure")
                end.later(backoff, lambda: send(node, broker))
            else:
                send(node, broker)

        def send(node: int, broker: str) -> None:
            def on_response(resp: Response, version: int) -> None:
                try:
                    if end.done:
                        return                    # the deadline came first
                    try:
                        value = decode(resp, version)
                    except Exception as exc:      # a damaged answer: the call's error
                        end.fail(exc)
                        return
                finally:
                    resp.release()
                deadline.note(broker, f"answered {name}")
                end.ok(value)

            def on_error(exc: BaseException) -> None:
                if end.done:
                    return
                if isinstance(exc, KafkaTimeoutError) or \
                        not isinstance(exc, (ConnectionError, TimeoutError, OSError)):
                    end.fail(exc)
                    return
                deadline.note(broker, failure_text(exc, broker))
                if retries is not None and attempts[0] >= retries:
                    end.fail(exc)
                    return
                attempts[0] += 1
                end.later(0.0, attempt)       # from the loop: a failure inside send() returns first

            request = Request(api_key, encode, on_response, on_error, max_version=max_version,
                              min_version=min_version, timeout=timeout, deadline=deadline)
            try:
                self.send(node, request, purpose)
            except (ConnectionError, KeyError):
                pass                              # on_error ran

        end.guard(attempt)

    def pursue(self, done: Callable[[], bool], send: Callable[[], None], topics: set[str],
               deadline: Deadline, on_done: Done) -> None:
        """Until `done()`: `send()` what can be sent now (again at every answer or failure on the
        cluster, and at least every min(retry_backoff, TICK_S) for what waited for a backoff),
        and Metadata for `topics` when it is stale; then `on_done(None, None)`, or the
        deadline's KafkaTimeoutError.  Never waits (OffsetLookup and the consumer's resets run
        on it)."""
        def finish(value: Any, error: BaseException | None) -> None:
            self.unwatch(key)
            on_done(value, error)

        end = Completion(self.loop, deadline, finish)

        def step() -> None:
            if end.done:
                return
            if not done():
                if self.metadata_stale:
                    self.request_metadata(topics, deadline)
                send()
            if done():
                end.ok()
            else:
                end.later(min(self.retry_backoff, TICK_S), step)

        key = self.watch(lambda: end.guard(step))
        end.guard(step)

    def watch(self, callback: Callable[[], None]) -> int:
        """Run `callback()` on the loop after answers came or a connection failed (once per
        loop iteration however many); returns the key for unwatch()."""
        key = next(self._watch_keys)
        self._watchers[key] = callback
        return key

    def unwatch(self, key: int) -> None:
        self._watchers.pop(key, None)

    def _changed(self) -> None:
        """Answers came or a connection failed: the pursuits look again, soon (once per loop
        iteration however many answers came)."""
        if self._watchers and not self._change_pending:
            self._change_pending = True
            self.loop.call_soon(self._notify)

    def _notify(self) -> None:
        self._change_pending = False
        for watcher in list(self._watchers.values()):
            try:
                watcher()
            except Exception:                     # one watcher's failure is not the others'
                log.exception("%s: a watcher failed", self.name)

    def wait(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        """Run the event loop for `seconds` (other requests keep progressing), or until
        `until()` is true.  Inside a blocking call whose deadline comes first: run it until
        then, then KafkaTimeoutError."""
        end = time.monotonic() + seconds
        deadline = self._deadline
        expires = deadline is not None and deadline.end < end
        if deadline is not None and expires:
            end = deadline.end
        while (left := end - time.monotonic()) > 0:
            if until is not None and until():
                return
            self.loop.run_once(min(left, 0.05))
        if deadline is not None and expires and not (until is not None and until()):
            raise deadline.expired()

    # -- metadata ------------------------------------------------------------------------------
    def metadata_request(self, topics: Iterable[str] | None = None, *,
                         allow_auto_topic_creation: bool = False, every_topic: bool = False
                         ) -> tuple[Callable[[int, int], Any],
                                    Callable[[Response, int], MetadataResponse], set[str] | None]:
        """(encode, decode, wanted) for a Metadata request about `topics` plus every topic known
        so far (which become known), or (`every_topic`) about every topic of the cluster
        (wanted None: all kept); apply the answer with apply_metadata(answer, wanted)."""
        wanted: set[str] | None = None
        names: list[str] | None = None
        if not every_topic:
            wanted = set(topics or ()) | self.known_topics
            self.known_topics = wanted
            names = sorted(wanted)

        def encode(version: int, cid: int) -> bytes:
            return encode_metadata_request(names, api_version=version, correlation_id=cid,
                                           client_id=self.client_id,
                                           allow_auto_topic_creation=allow_auto_topic_creation)

        def decode(resp: Response, version: int) -> MetadataResponse:
            return decode_metadata_response(resp.payload, version)

        return encode, decode, wanted

    def refresh_metadata(self, topics: Iterable[str] | None = None, *,
                         allow_auto_topic_creation: bool = False) -> MetadataResponse:
        """Fetch Metadata for `topics` (plus every topic known so far) and update brokers,
        leaders and partition counts: metadata_async() run to its end."""
        with self.deadline("refresh_metadata") as deadline:
            metadata: MetadataResponse = self.complete(lambda done: self.metadata_async(
                topics, deadline, done, allow_auto_topic_creation=allow_auto_topic_creation),
                deadline)
        return metadata

    def metadata_async(self, topics: Iterable[str] | None, deadline: Deadline, on_done: Done, *,
                       allow_auto_topic_creation: bool = False, every_topic: bool = False) -> None:
        """Metadata for `topics` plus every topic known so far (or, `every_topic`, every topic
        of the cluster, all kept), applied before `on_done(answer, None)`; the error of the
        call otherwise.  Never waits."""
        encode, decode, wanted = self.metadata_request(
            topics, allow_auto_topic_creation=allow_auto_topic_creation, every_topic=every_topic)

        def applied(metadata: Any, error: BaseException | None) -> None:
            if error is None:
                self.apply_metadata(metadata, wanted)
            on_done(metadata, error)

        self.call_async(None, ApiKey.METADATA, encode, decode, applied, deadline=deadline,
                        max_version=METADATA_MAX_VERSION, min_version=1)

    def request_metadata(self, topics: Iterable[str] | None = None,
                         deadline: Deadline | None = None) -> None:
        """A Metadata refresh nobody waits for: sent now (unless one is in flight or was sent
        less than retry_backoff ago), not retried, applied when answered (poll() and the
        pursuits use it, so they never wait for Metadata).  `deadline`: the call it is sent for
        (None: the running blocking call, if any), whose KafkaTimeoutError then names it."""
        now = time.monotonic()
        if self.metadata_in_flight or now - self.metadata_sent_at < self.retry_backoff:
            link = self.metadata_link
            deadline = deadline or self._deadline
            if self.metadata_in_flight and deadline is not None and link is not None:
                self._waiting_on(deadline, link, "Metadata")     # the one in flight serves it too
            return
        self.metadata_sent_at = now
        encode, decode, wanted = self.metadata_request(topics)

        def on_response(resp: Response, version: int) -> None:
            self.metadata_in_flight = False
            try:
                metadata = decode(resp, version)
            except KafkaCodecError as exc:
                log.warning("%s: a Metadata answer is damaged: %s", self.name, exc)
                return
            finally:
                resp.release()
            self.apply_metadata(metadata, wanted)

        def on_error(exc: BaseException) -> None:
            self.metadata_in_flight = False
            if isinstance(exc, RecordTooLargeError):
                log.warning("%s: %s", self.name, exc)

        self.metadata_in_flight = True
        try:
            self.metadata_link = self.send(self.any_node(), Request(
                ApiKey.METADATA, encode, on_response, on_error, max_version=METADATA_MAX_VERSION,
                min_version=1, timeout=self.request_timeout, deadline=deadline))
        except (ConnectionError, KeyError):
            pass                                  # on_error ran: retried at the next poll

    def topic_refused(self, topic: str, partition: int) -> BrokerError | None:
        """The error of a topic Metadata refused for good (TOPIC_AUTHORIZATION_FAILED, an
        invalid name: not retriable), as Kafka's clients raise it for the topic's requests."""
        code = self.topic_errors.get(topic, 0)
        if code and not Error.for_code(code).retriable:
            return BrokerError("Metadata refused the topic", error_code=code, topic=topic, partition=partition)
        return None

    def apply_metadata(self, metadata: MetadataResponse, wanted: set[str] | None = None) -> None:
        """Brokers, leaders and partition counts from an answer; of its topics only those in
        `wanted` (None: all) are kept, as Kafka's consumer keeps only the topics it needs
        (ConsumerMetadata.retainTopic): a broker listing more cannot grow this state."""
        self.brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
        self.cluster_id = metadata.cluster_id
        for topic in metadata.topics:
            name = topic.name
            if name is None or (wanted is not None and name not in wanted):
                continue
            self.topic_errors[name] = topic.error_code
            if topic.error_code:
                self.note(None, f"Metadata answered {Error.name_of(topic.error_code)} "
                                f"({topic.error_code}) for topic {name!r}")
                continue
            count = len(topic.partitions)
            for gone in range(count, self.partition_counts.get(name, 0)):
                self.leaders.pop((name, gone), None)
            self.partition_counts[name] = count
            if topic.topic_id is not None:
                self.topic_ids[name] = topic.topic_id
            for p in topic.partitions:
                index = p.partition_index
                if not 0 <= index < count:
                    continue                      # partitions are numbered 0..count-1
                if p.error_code in (Error.NONE, Error.REPLICA_NOT_AVAILABLE) and p.leader_id >= 0:
                    self.leaders[(name, index)] = p.leader_id
                else:
                    self.leaders.pop((name, index), None)
        self.metadata_stale = False
        # Connections to brokers that left the cluster are closed.
        for (node, purpose), conn in list(self.connections.items()):
            if node >= 0 and node not in self.brokers:
                self.fail_connection(conn, ConnectionError(f"broker {node} left the cluster"))

    # -- the loop ------------------------------------------------------------------------------
    def _tick(self) -> None:
        """Every TICK_S on the loop: time out requests and connects, give idle rings back,
        retry muted reads."""
        if self.closed:
            return
        self.prepare(time.monotonic())
        self._tick_timer = self.loop.call_later(TICK_S, self._tick)

    def prepare(self, now: float) -> None:
        """Time out requests (request.timeout.ms) and connection set-ups, give idle rings back,
        retry muted reads (KIP-81)."""
        pressure = self.has_muted()
        for link in list(self.connections.values()):
            if link.in_flight and link.reader.expired(now):
                self.fail_connection(link, TimeoutError(
                    f"{link.name}: no response within {self.request_timeout} s"))
                continue
            conn = link.conn
            if conn is not None and conn.expired(now) is not None:
                self.fail_connection(link, TimeoutError(
                    f"{link.name}: not connected within {self.deadlines.handshake:g} s"
                    if conn.connecting or not conn.handshaken else
                    f"{link.name}: the broker reads nothing of our requests"))
                continue
            if link.ring is not None and (pressure or not link.in_flight):
                link.release_ring_if_idle()     # idle: back to the pool (others may wait)
        for link in list(self.connections.values()):
            link.unmute()                       # muted by the pool, or its ring was full
        for link in list(self.closing):
            if link.release_ring_if_idle() or link.ring is None:
                self.closing.remove(link)

    def has_muted(self) -> bool:
        return any(c.muted for c in self.connections.values())

    def _on_responses(self, conn: BrokerLink, responses: list[tuple[InFlight, Response]],
                      error: BaseException | None) -> None:
        """What a read of the connection brought.  Every answer read is handed to its request,
        even when the read also found the end of the connection: a failure of the socket or of
        the response stream (the ring's errors: a response larger than the ring, a negative
        size; a response without a correlation id or to a request not in flight) then closes
        the connection and reaches the handlers of the requests still waiting."""
        failure = self._deliver(conn, responses)
        error = error or failure
        if error is not None and not conn.closed:     # (a handler may have closed it)
            self.fail_connection(conn, error)
        elif not conn.in_flight:
            conn.release_ring_if_idle()               # nothing more to read: back to the pool
        if responses:
            self._changed()

    def _deliver(self, conn: BrokerLink, responses: list[tuple[InFlight, Response]]
                 ) -> BaseException | None:
        """Each response to its request, in order.  An answer above the request's size cap fails
        it (RecordTooLargeError).  A handler must not raise; one that does (a damaged
        ApiVersions answer) does not cost the others their answers: the first such error is
        returned, for the connection to be closed with it."""
        failure: BaseException | None = None
        for request, resp in responses:
            cap = request.max_response_bytes
            try:
                if cap is not None and resp.size > cap:
                    size = resp.size
                    resp.release()
                    request.on_error(RecordTooLargeError(
                        f"{conn.name}: the {ApiKey.name_of(request.api_key)} answer of {size} bytes is "
                        f"larger than receive_message_max_bytes ({cap}); raise "
                        f"receive_message_max_bytes if the cluster's answers are that large"))
                else:
                    request.on_response(resp)
            except Exception as exc:
                if not resp.released:
                    resp.release()
                log.error("%s: the handler of a %s answer failed: %r", conn.name,
                          ApiKey.name_of(request.api_key), exc)
                failure = failure or exc
        return failure

    def close(self) -> None:
        """Close every connection; the requests still waiting get ConnectionError."""
        if self.closed:
            return
        self.closed = True
        for conn in list(self.connections.values()):
            self.fail_connection(conn, ConnectionError(f"{conn.name}: the client was closed"))
        self.connections.clear()
        self._tick_timer.cancel()
        if self.own_loop:
            self.loop.close()


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


def client_security(security: Any) -> Any:
    """A ClientSecurity from what callers give: one, a dict of client properties (Kafka's and
    librdkafka's names), the path of a client.properties file, or None (PLAINTEXT: None)."""
    if security is None:
        return None
    from kafkacodec.net.properties import ClientSecurity

    if isinstance(security, ClientSecurity):
        chosen = security
    elif isinstance(security, (str, os.PathLike)):
        chosen = ClientSecurity.from_file(security)
    else:
        chosen = ClientSecurity.from_properties(dict(security))
    return chosen if chosen.uses_tls or chosen.uses_sasl else None
