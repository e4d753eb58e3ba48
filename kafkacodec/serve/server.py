"""The server: a listener, the loop thread, and the parts wired together.

    from kafkacodec.serve import Server

    with Server(["/var/kafka-logs"], listen=("127.0.0.1", 0)) as server:
        print(server.port)          # clients bootstrap from f"127.0.0.1:{server.port}"

`start()` binds and starts the loop in a thread; `stop()` stops accepting, answers waiting
fetches at once, lets responses in flight finish (up to `shutdown_timeout_s`) and closes.
Every request is handled on the loop thread, and no handler waits: an answer that needs the
upstream cluster (`upstream=`, whose consumer runs on this same loop) is sent from the callback
of that call.  A handler that fails closes that connection, never the server.

Limits (ServeConfig; docs/reliability.md): every connection's deadlines are checked by one
sweep timer; request memory is shared fairly (requests over LARGE_REQUEST_BYTES hold at most
half of the request pool together, so the other half always serves ordinary requests);
accepting pauses at `max_connections` and backs off when the process is out of descriptors.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from kafkacodec._pool import MemoryPool, SimpleMemoryPool
from kafkacodec.errors import KafkaCodecError, MemoryPoolError, RecordTooLargeError
from kafkacodec.protocol import messages as m
from kafkacodec.protocol._fetch_server import decode_fetch_request
from kafkacodec.protocol._produce_server import decode_produce_request
from kafkacodec.protocol.api import ApiKey
from kafkacodec.serve.config import ServeConfig, default_max_connections
from kafkacodec.serve.dispatch import API_RANGES, Dispatcher, Request
from kafkacodec.serve.fetch import FetchHandler
from kafkacodec.serve.groups import GroupCoordinator
from kafkacodec.serve.listeners import LOOPBACK, Listening, bind, parse_advertised
from kafkacodec.serve.logview import LogView
from kafkacodec.net import connection as net
from kafkacodec.net.authentication import ServerAuthenticator
from kafkacodec.net.connection import Connection, Deadlines, RequestReader
from kafkacodec.net.loop import Loop
from kafkacodec.net.transport import PlainTransport
from kafkacodec.serve.offsets import OffsetStore
from kafkacodec.serve.remote import MAX_RERUNS, ReadPending, RemoteReads, too_many_reruns
from kafkacodec.serve.transactions import TRANSACTION_APIS
from kafkacodec.serve.transactions import refuse as refuse_transaction

__all__ = ["Server"]

log = logging.getLogger("kafkacodec.serve")

#: Requests larger than this (a Produce, in practice) share half of the request pool.
LARGE_REQUEST_BYTES = 1 << 20
#: Out of descriptors on accept: listening pauses this long at first, doubling up to the max.
ACCEPT_BACKOFF_S, ACCEPT_BACKOFF_MAX_S = 0.05, 1.0
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class _NullMetrics:
    """Metrics off (prometheus-client not installed and no metrics listener asked for)."""
    registry = None

    def request(self, name: str, version: int) -> None: ...
    def bytes_out_counter(self, topic: str) -> Callable[[int], None]:
        return lambda n: None
    def conversion_done(self, topic: str, stats: Any, refusals: int) -> None: ...
    def conversion_refused(self) -> None: ...
    def add_connection_counts(self, server: Any) -> None: ...
    def add_listeners(self, listening: Any) -> None: ...
    def close(self) -> None: ...


class Server:
    """A read-only Kafka broker over log directories, or a gateway in front of a cluster
    (`upstream=BOOTSTRAP`, kafkacodec.serve.upstream; see kafkacodec.serve).  Keyword
    arguments are ServeConfig's fields; or pass `config=ServeConfig(...)`.  Start and stop it
    from one thread; everything else runs on its own loop thread."""

    def __init__(self, log_dirs: list[str] | None = None, *, config: ServeConfig | None = None,
                 **options: Any):
        if config is None:
            config = ServeConfig(log_dirs=list(log_dirs or []), **options)
        self.config = config
        self.loop = Loop()
        self.remote = RemoteReads(self.loop)     # object-store segments, read off this thread
        self.forwarder: Any = None               # serve/produce.py's, with --produce
        if config.upstream:
            from kafkacodec.serve.upstream import UpstreamView

            try:
                # the upstream consumer runs on this loop (its topics loaded before it runs)
                self.view: Any = UpstreamView(config.upstream, loop=self.loop,
                                              buffer_memory=config.upstream_buffer_memory,
                                              cache_memory=config.upstream_cache_memory,
                                              timeout=config.upstream_timeout_s,
                                              security=config.upstream_security,
                                              poll_interval_s=config.poll_interval_ms / 1000)
            except BaseException:
                self.loop.close()
                raise
        else:
            self.view = LogView(config.log_dirs, self.remote)
        self.max_connections = config.max_connections or default_max_connections()
        self.deadlines = Deadlines(idle=config.connections_max_idle_ms / 1000,
                                   request_read=config.request_read_timeout_ms / 1000,
                                   response_write=config.response_write_timeout_ms / 1000,
                                   handshake=config.handshake_timeout_ms / 1000)
        self.socket_request_max_bytes = config.socket_request_max_bytes
        if config.max_request_memory > 0:
            # Kafka: SimpleMemoryPool(queued.max.request.bytes, socket.request.max.bytes, strict=false)
            self.request_pool: Any = SimpleMemoryPool(config.max_request_memory,
                                                      config.socket_request_max_bytes, False, arena_bytes=0)
        else:
            self.request_pool = MemoryPool.NONE
        self.loop.fairness = self._fairness
        # strict: outstanding conversion memory never exceeds max_conversion_memory
        self.conversion_pool = SimpleMemoryPool(config.max_conversion_memory,
                                                config.max_conversion_memory, True)
        if config.upstream:
            from kafkacodec.serve.upstream import UpstreamOffsetStore

            self.offsets: Any = UpstreamOffsetStore(self.view)
            self.cluster_id = config.cluster_id or self.view.cluster_id or "kafkacodec-serve"
        else:
            self.offsets = OffsetStore(config.state_dir)
            self.cluster_id = config.cluster_id or _meta_property(config.log_dirs, "cluster.id") or "kafkacodec-serve"
        self.connections: set[Connection] = set()
        self._memory_muted: set[Connection] = set()
        self._large_held = 0                   # request memory held by large requests
        self.closed_connections: collections.Counter[str] = collections.Counter()  # by reason
        self.accept_backoffs = 0               # times accepting paused: out of descriptors
        self._accept_paused = False
        self._accept_backoff = ACCEPT_BACKOFF_S
        self._accept_timer: Any = None         # the end of an out-of-descriptors pause
        self._sweep_timer: Any = None
        self.dispatcher = Dispatcher(self)
        self.fetches = FetchHandler(self)
        if config.upstream:
            self.view.on_fetched = self.fetches.poll_now     # fetches waiting for upstream data
        self.groups = GroupCoordinator(self)
        self.metrics: Any = self._metrics()
        self.security = config.security
        self.listening: list[Listening] = []
        self.address: tuple[str, int] = config.listen         # the first listener's
        self.advertised: tuple[str, int] = config.advertised or config.listen
        self.users: Any = None                 # the credentials of the SASL listeners
        self.acl: Any = None                   # kafkacodec.acl.file (None: everything allowed)
        if self.security is not None:
            from kafkacodec.net.acl import Acl
            from kafkacodec.net.users import UsersFile

            if self.security.users_file:
                self.users = UsersFile.load(self.security.users_file)
            if self.security.acl_file:
                self.acl = Acl.load(self.security.acl_file)
        self.metrics_port: int | None = None
        self._stopping = False
        self._stopped = threading.Event()
        self._handlers: dict[int, Callable[[Request, Any], None]] = {
            ApiKey.API_VERSIONS: self.dispatcher.api_versions, ApiKey.METADATA: self.dispatcher.metadata,
            ApiKey.LIST_OFFSETS: self.dispatcher.list_offsets, ApiKey.FETCH: self.fetches.handle,
            ApiKey.FIND_COORDINATOR: self.groups.find_coordinator, ApiKey.JOIN_GROUP: self.groups.join,
            ApiKey.SYNC_GROUP: self.groups.sync, ApiKey.HEARTBEAT: self.groups.heartbeat,
            ApiKey.LEAVE_GROUP: self.groups.leave, ApiKey.OFFSET_COMMIT: self.groups.commit,
            ApiKey.OFFSET_FETCH: self.groups.fetch_offsets,
            ApiKey.SASL_HANDSHAKE: self.dispatcher.sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self.dispatcher.sasl_authenticate}
        for key in (ApiKey.PRODUCE, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.DELETE_RECORDS,
                    ApiKey.INIT_PRODUCER_ID, ApiKey.CREATE_PARTITIONS):
            self._handlers[key] = self.dispatcher.refuse_write
        for key in TRANSACTION_APIS:
            self._handlers[key] = refuse_transaction
        if config.produce:                     # serve --upstream --produce (serve/produce.py)
            from kafkacodec.serve.produce import ProduceForwarder
            from kafkacodec.serve.transactions import TransactionForwarder

            self.forwarder = ProduceForwarder(self)
            self.transactions = TransactionForwarder(self)
            self._handlers[ApiKey.PRODUCE] = self.forwarder.produce
            self._handlers[ApiKey.INIT_PRODUCER_ID] = self.forwarder.init_producer_id
            self._handlers.update({
                ApiKey.ADD_PARTITIONS_TO_TXN: self.transactions.add_partitions,
                ApiKey.ADD_OFFSETS_TO_TXN: self.transactions.add_offsets,
                ApiKey.END_TXN: self.transactions.end_txn,
                ApiKey.TXN_OFFSET_COMMIT: self.transactions.txn_offset_commit})

    def _metrics(self) -> Any:
        try:
            from kafkacodec.serve.metrics import ServeMetrics
            metrics = ServeMetrics(self.request_pool, self.conversion_pool, lambda: len(self.connections),
                                   lambda: len(self.fetches.parked))
            if self.config.upstream:
                metrics.add_upstream(self.view)
            else:
                metrics.add_logview(self.view)
                if self.offsets.store is not None:
                    metrics.add_state_files(self.offsets.store)
            metrics.add_connection_counts(self)
            return metrics
        except ImportError:
            if self.config.metrics_listen is not None:
                raise
            return _NullMetrics()

    # --- life cycle ----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self.address[1]

    def start(self) -> Server:
        try:
            self._bind()
        except BaseException:
            for listening in self.listening:
                listening.close()
            self.listening = []
            raise
        first = self.listening[0]
        self.address, self.advertised = (first.host, first.port), first.advertised
        for listening in self.listening:
            if listening.host not in LOOPBACK and not listening.secured:
                log.warning("listener %s serves %s to anyone who can reach %s:%d without TLS or SASL",
                            listening.name, "the cluster's data" if self.config.upstream else "the log "
                            "directories", listening.host, listening.port)
        if self.config.metrics_listen is not None:
            self.metrics_port = self.metrics.serve_http(*self.config.metrics_listen)
        self.metrics.add_listeners(self.listening)
        for listening in self.listening:
            self.loop.selector.register(listening.sock, 1, self._acceptor(listening))   # EVENT_READ
        self._sweep_timer = self.loop.call_later(self._sweep_interval(), self._sweep)
        self.loop.thread = threading.Thread(target=self._run, name="kafkacodec-serve", daemon=True)
        self.loop.thread.start()
        return self

    def _run(self) -> None:
        deadline: float | None = None
        try:
            while True:
                if self._stopping:
                    if deadline is None:
                        deadline = time.monotonic() + self.config.shutdown_timeout_s
                    if not self.connections or time.monotonic() > deadline:
                        break
                self.loop.run_once()
        except BaseException:
            log.exception("the server loop failed")
            raise
        finally:
            for conn in list(self.connections):
                conn.close("server stopped", net.SHUTDOWN)
            if self._sweep_timer is not None:
                self._sweep_timer.cancel()
            self.groups.close()
            self._stopped.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop and wait (idempotent)."""
        if self.loop.thread is None or self._stopped.is_set():
            self._close_resources()
            return
        self.loop.call_soon_threadsafe(self._begin_stop)
        self.loop.thread.join(timeout if timeout is not None else self.config.shutdown_timeout_s + 10)
        self._close_resources()

    def _begin_stop(self) -> None:
        self._stopping = True
        self._pause_accepting()
        for listening in self.listening:
            listening.close()
        self.fetches.answer_all_now()
        for conn in list(self.connections):
            conn.closing = True
            if not conn.busy and not conn.messages:
                conn.close("shutting down", net.SHUTDOWN)

    def _close_resources(self) -> None:
        for listening in self.listening:
            listening.close()
        self.metrics.close()
        if self.forwarder is not None:
            self.forwarder.close()
        self.view.close()
        self.remote.close()
        if self._stopped.is_set() or self.loop.thread is None:
            self.loop.close()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server has stopped."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- listeners ----------------------------------------------------------------------------
    def _bind(self) -> None:
        """Every listener bound (Kafka's `listeners`, else `listen` as one PLAINTEXT listener)."""
        from kafkacodec.net.properties import Listener

        security = self.security
        if security is None:
            host, port = self.config.listen
            self.listening = [bind(Listener("PLAINTEXT", host, port, "PLAINTEXT"), None, self.config.advertised)]
            return
        from kafkacodec.net.tls import server_context

        advertised = parse_advertised(security.other.get("advertised.listeners"))
        for listener in security.listeners:
            tls = server_context(security, listener.name, kernel_tls=True) if listener.uses_tls else None
            self.listening.append(bind(listener, tls, advertised.get(listener.name)))

    # --- connections ---------------------------------------------------------------------------
    def _acceptor(self, listening: Listening) -> Callable[[int], None]:
        return lambda mask: self._accept(listening)

    def _accept(self, listening: Listening) -> None:
        while not self._accept_paused and not self._stopping:
            if len(self.connections) >= self.max_connections:
                # Kafka's max.connections: the listeners wait until a connection closes; new
                # clients wait in the kernel's backlog meanwhile
                self._pause_accepting()
                return
            try:
                sock, peer = listening.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    log.warning("accept failed on listener %s: %s", listening.name, exc)
                    return
                # out of descriptors: stop listening for a while instead of a loop of failures
                if self._accept_backoff == ACCEPT_BACKOFF_S:
                    log.warning("accept failed (%s) with %d connections open: pausing new "
                                "connections, backing off up to %.1f s", exc, len(self.connections),
                                ACCEPT_BACKOFF_MAX_S)
                self.accept_backoffs += 1
                self._pause_accepting()
                self._accept_timer = self.loop.call_later(self._accept_backoff, self._resume_accepting)
                self._accept_backoff = min(self._accept_backoff * 2, ACCEPT_BACKOFF_MAX_S)
                return
            self._accept_backoff = ACCEPT_BACKOFF_S
            try:
                self.connections.add(self._connection(listening, sock, peer))
            except OSError as exc:               # the socket died before it was registered
                log.debug("connection from %s lost at once: %s", peer, exc)
                sock.close()

    def _connection(self, listening: Listening, sock: socket.socket, peer: Any) -> Connection:
        conn = Connection(self.loop, listening.transport(sock), peer, RequestReader(self),
                          on_closed=self.connection_closed, deadlines=self.deadlines,
                          name=f"connection from {peer[0]}:{peer[1]} on {listening.name}")
        conn.listener = listening
        if listening.listener.uses_sasl:
            security = self.security
            conn.auth = ServerAuthenticator(
                conn, listening.listener.sasl_enabled_mechanisms, self.users,
                failed_delay_s=security.connection_failed_authentication_delay_ms / 1000,
                max_reauth_ms=security.connections_max_reauth_ms,
                max_receive_size=security.sasl_server_max_receive_size)
        return conn

    def _pause_accepting(self) -> None:
        if not self._accept_paused:
            for listening in self.listening:
                self.loop.forget(listening.sock)
            self._accept_paused = True

    def _resume_accepting(self) -> None:
        self._accept_timer = None
        if self._accept_paused and not self._stopping:
            self._accept_paused = False
            for listening in self.listening:
                self.loop.selector.register(listening.sock, 1, self._acceptor(listening))
            for listening in self.listening:
                self._accept(listening)

    # --- authorization (kafkacodec.acl.file; none: everything allowed) --------------------------
    def may_read(self, principal: str, topic: str | None) -> bool:
        """May `principal` describe and read `topic` (Metadata, Fetch, ListOffsets, offsets)?"""
        return self.acl is None or (topic is not None and self.acl.allows_topic(principal, topic))

    def may_write(self, principal: str, topic: str) -> bool:
        """May `principal` produce to `topic` (serve --upstream --produce)?"""
        return self.acl is None or self.acl.allows_write(principal, topic)

    def may_use_group(self, principal: str, group: str) -> bool:
        """May `principal` find, join and commit for the consumer group `group`?"""
        return self.acl is None or self.acl.allows_group(principal, group)

    def may_use_transactional_id(self, principal: str, transactional_id: str) -> bool:
        """May `principal` run transactions as `transactional_id` (serve --upstream --produce)?"""
        return self.acl is None or self.acl.allows_transactional_id(principal, transactional_id)

    def _fairness(self) -> bool:
        pool = self.request_pool
        return bool(isinstance(pool, SimpleMemoryPool) and pool.available_memory < pool.size // 10)

    def _sweep_interval(self) -> float:
        d = self.deadlines
        return min(1.0, max(0.01, min(d.idle, d.request_read, d.response_write, d.handshake) / 4))

    def _sweep(self) -> None:
        """Close every connection past one of its deadlines."""
        now = time.monotonic()
        for conn in list(self.connections):
            kind = conn.expired(now)
            if kind is not None:
                log.info("closing connection %s (%s): %s", conn.id, conn.peer, kind.replace("_", " "))
                conn.close(kind, kind)
        self._sweep_timer = self.loop.call_later(self._sweep_interval(), self._sweep)

    def allocate_request(self, conn: Connection, size: int) -> memoryview | None:
        """A request buffer from the pool (KIP-72), or None: wait (muted) until memory returns.
        Large requests together hold at most half of the pool, so a few connections announcing
        huge requests and sending nothing cannot take the memory every other client needs."""
        pool = self.request_pool
        large = size > LARGE_REQUEST_BYTES and isinstance(pool, SimpleMemoryPool)
        if large and self._large_held and self._large_held + size > pool.size // 2:
            return None
        block: memoryview | None = pool.try_allocate(size)
        if block is not None and large:
            self._large_held += size
        return block

    def release_request(self, body: memoryview) -> None:
        if body.nbytes > LARGE_REQUEST_BYTES and isinstance(self.request_pool, SimpleMemoryPool):
            self._large_held -= body.nbytes
        try:
            self.request_pool.release(body)
        except MemoryPoolError:
            # a view of it is still referenced (a traceback being handled): the pool takes the
            # block back when the last view goes
            log.debug("request buffer released late")
        self._memory_returned()

    def memory_muted(self, conn: Connection) -> None:
        self._memory_muted.add(conn)

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._memory_muted.discard(conn)
        self.closed_connections[conn.close_kind] += 1
        self.fetches.connection_closed(conn)
        self._memory_returned()
        if self._accept_paused and self._accept_timer is None:
            self._resume_accepting()             # below max_connections again

    def _memory_returned(self) -> None:
        """Kafka's selector: once the pool is not out of memory, every muted channel reads again."""
        if self._memory_muted and not self.request_pool.is_out_of_memory:
            muted, self._memory_muted = self._memory_muted, set()
            for conn in muted:
                conn.reader.unmute(conn)

    # --- requests ------------------------------------------------------------------------------
    def handle_request(self, conn: Connection, body: memoryview) -> None:
        auth = conn.auth
        if auth is not None and auth.expects_raw_token:      # SaslHandshake v0's raw tokens
            token = bytes(body)
            self.release_request(body)
            auth.raw_token(token)
            return
        try:
            api_key, version, correlation_id, client_id, start = m.parse_request_header(body)
        except KafkaCodecError as exc:
            self.release_request(body)
            conn.close(f"malformed request header: {exc}", net.MALFORMED)
            return
        if auth is not None and not auth.allows(api_key):
            self.release_request(body)
            conn.close(auth.refusal(api_key), net.AUTH_FAILED)   # Kafka's IllegalSaslState
            return
        req = Request(conn, api_key, version, correlation_id, client_id, time.monotonic())
        served = API_RANGES.get(api_key)
        if served is None or not served[0] <= version <= served[1]:
            self.release_request(body)
            if api_key == ApiKey.API_VERSIONS and served is not None and version > served[1]:
                self.dispatcher.api_versions_fallback(req)
            else:
                conn.close(f"api key {api_key} version {version} is not served", net.UNSUPPORTED)
            return
        name = ApiKey(api_key).message_name
        self.metrics.request(name, version)
        limit = self.config.max_request_entries
        try:
            if api_key == ApiKey.FETCH:               # the hot ones: the C codecs
                decoded: Any = decode_fetch_request(body, version, start, strict=False, max_entries=limit)
            elif api_key == ApiKey.PRODUCE:
                decoded = decode_produce_request(body, version, start, strict=False, max_entries=limit)
            else:
                decoded = m.REQUESTS[api_key].decode(body, version, start, strict=False,
                                                     max_entries=limit)
        except RecordTooLargeError as exc:
            log.warning("closing connection %s (%s): %s v%d request over max_request_entries "
                        "(%d): %s", conn.id, conn.peer, name, version, limit, exc)
            conn.close(f"{name} v{version} request too costly", net.TOO_COSTLY)
            return
        except KafkaCodecError as exc:
            conn.close(f"malformed {name} v{version} request: {exc}", net.MALFORMED)
            return
        finally:
            self.release_request(body)
        self._handle(req, self._handlers[api_key], decoded)

    def _handle(self, req: Request, handler: Callable[[Request, Any], None], decoded: Any, reruns: int = 0) -> None:
        """Run a handler; one that needs bytes of a remote segment not read yet runs again once
        a worker read them (serve/remote.py: it changed nothing before it stopped)."""
        try:
            if reruns > MAX_RERUNS:
                raise too_many_reruns(f"{ApiKey(req.api_key).message_name} v{req.api_version}")
            handler(req, decoded)
        except ReadPending as pending:
            self.remote.defer(pending, lambda: None if req.conn.closed
                              else self._handle(req, handler, decoded, reruns + 1))
        except Exception:
            log.exception("%s v%d from %s failed; closing the connection", ApiKey(req.api_key).message_name,
                          req.api_version, req.conn.peer)
            req.conn.close("handler failed", net.FAILED)


def _meta_property(log_dirs: list[str], key: str) -> str | None:
    """A value of the first log directory's meta.properties (a broker's cluster.id, node.id)."""
    for d in log_dirs:
        try:
            with open(os.path.join(d, "meta.properties"), encoding="utf-8") as file:
                for line in file:
                    name, sep, value = line.partition("=")
                    if sep and name.strip() == key:
                        return value.strip()
        except OSError:
            continue
    return None
