"""The server: a listener, the loop thread, and the parts wired together.

    from kafkacodec.serve import Server

    with Server(["/var/kafka-logs"], listen=("127.0.0.1", 0)) as server:
        print(server.port)          # clients bootstrap from f"127.0.0.1:{server.port}"

`start()` binds and starts the loop in a thread; `stop()` stops accepting, answers waiting
fetches at once, lets responses in flight finish (up to `shutdown_timeout_s`) and closes.
Every request is handled on the loop thread; a handler that fails closes that connection,
never the server.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from kafkacodec._pool import MemoryPool, SimpleMemoryPool
from kafkacodec.errors import KafkaCodecError, MemoryPoolError
from kafkacodec.protocol import messages as m
from kafkacodec.protocol._fetch_server import decode_fetch_request
from kafkacodec.serve.config import ServeConfig
from kafkacodec.serve.dispatch import API_RANGES, Dispatcher, Request, parse_header
from kafkacodec.serve.fetch import FetchHandler
from kafkacodec.serve.groups import GroupCoordinator
from kafkacodec.serve.logview import LogView
from kafkacodec.serve.network import Connection, Loop
from kafkacodec.serve.offsets import OffsetStore

__all__ = ["Server"]

log = logging.getLogger("kafkacodec.serve")


class _NullMetrics:
    """Metrics off (prometheus-client not installed and no metrics listener asked for)."""
    registry = None

    def request(self, name: str, version: int) -> None: ...
    def bytes_out_counter(self, topic: str) -> Callable[[int], None]:
        return lambda n: None
    def conversion_done(self, topic: str, stats: Any, refusals: int) -> None: ...
    def conversion_refused(self) -> None: ...
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
        if config.upstream:
            from kafkacodec.serve.upstream import UpstreamView

            self.view: Any = UpstreamView(config.upstream, buffer_memory=config.upstream_buffer_memory,
                                          cache_memory=config.upstream_cache_memory,
                                          timeout=config.upstream_timeout_s)
        else:
            self.view = LogView(config.log_dirs)
        self.loop = Loop()
        self.socket_request_max_bytes = config.socket_request_max_bytes
        if config.max_request_memory > 0:
            # Kafka: SimpleMemoryPool(queued.max.request.bytes, socket.request.max.bytes, strict=false)
            self.request_pool: Any = SimpleMemoryPool(config.max_request_memory,
                                                      config.socket_request_max_bytes, False, arena_bytes=0)
        else:
            self.request_pool = MemoryPool.NONE
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
        self.dispatcher = Dispatcher(self)
        self.fetches = FetchHandler(self)
        self.groups = GroupCoordinator(self)
        self.metrics: Any = self._metrics()
        self._listener: socket.socket | None = None
        self.address: tuple[str, int] = config.listen
        self.advertised: tuple[str, int] = config.advertised or config.listen
        self.metrics_port: int | None = None
        self._stopping = False
        self._stopped = threading.Event()
        self._handlers: dict[int, Callable[[Request, Any], None]] = {
            m.API_VERSIONS: self.dispatcher.api_versions, m.METADATA: self.dispatcher.metadata,
            m.LIST_OFFSETS: self.dispatcher.list_offsets, m.FETCH: self.fetches.handle,
            m.FIND_COORDINATOR: self.groups.find_coordinator, m.JOIN_GROUP: self.groups.join,
            m.SYNC_GROUP: self.groups.sync, m.HEARTBEAT: self.groups.heartbeat,
            m.LEAVE_GROUP: self.groups.leave, m.OFFSET_COMMIT: self.groups.commit,
            m.OFFSET_FETCH: self.groups.fetch_offsets}
        for key in (m.PRODUCE, m.CREATE_TOPICS, m.DELETE_TOPICS, m.DELETE_RECORDS,
                    m.INIT_PRODUCER_ID, m.CREATE_PARTITIONS):
            self._handlers[key] = self.dispatcher.refuse_write

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
        host, port = self.config.listen
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
            listener.listen(128)
        except OSError:
            listener.close()
            raise
        listener.setblocking(False)
        self._listener = listener
        self.address = (host, listener.getsockname()[1])
        if self.config.advertised is None:
            self.advertised = ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host, self.address[1])
        if self.config.metrics_listen is not None:
            self.metrics_port = self.metrics.serve_http(*self.config.metrics_listen)
        self.loop.selector.register(listener, 1, self._accept)   # EVENT_READ
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
                self.loop.run_once(self._fairness)
        except BaseException:
            log.exception("the server loop failed")
            raise
        finally:
            for conn in list(self.connections):
                conn.close("server stopped")
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
        if self._listener is not None:
            self.loop.selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        self.fetches.answer_all_now()
        for conn in list(self.connections):
            conn.closing = True
            if not conn.busy and not conn.responses:
                conn.close("shutting down")

    def _close_resources(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.metrics.close()
        self.view.close()
        if self._stopped.is_set() or self.loop.thread is None:
            self.loop.close()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server has stopped."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- connections ---------------------------------------------------------------------------
    def _accept(self, mask: int) -> None:
        while self._listener is not None:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:             # out of file descriptors: try again later
                log.warning("accept failed: %s", exc)
                return
            self.connections.add(Connection(self, sock, peer))

    def _fairness(self) -> bool:
        pool = self.request_pool
        return bool(isinstance(pool, SimpleMemoryPool) and pool.available_memory < pool.size // 10)

    def memory_muted(self, conn: Connection) -> None:
        self._memory_muted.add(conn)

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._memory_muted.discard(conn)
        self.fetches.connection_closed(conn)
        self._memory_returned()

    def _release_request(self, body: memoryview) -> None:
        try:
            self.request_pool.release(body)
        except MemoryPoolError:
            # a view of it is still referenced (a traceback being handled): the pool takes the
            # block back when the last view goes
            log.debug("request buffer released late")
        self._memory_returned()

    def _memory_returned(self) -> None:
        """Kafka's selector: once the pool is not out of memory, every muted channel reads again."""
        if self._memory_muted and not self.request_pool.is_out_of_memory:
            muted, self._memory_muted = self._memory_muted, set()
            for conn in muted:
                conn.unmute_memory()

    # --- requests ------------------------------------------------------------------------------
    def handle_request(self, conn: Connection, body: memoryview) -> None:
        try:
            api_key, version, correlation_id, client_id, start = parse_header(body)
        except KafkaCodecError as exc:
            self._release_request(body)
            conn.close(f"malformed request header: {exc}")
            return
        req = Request(conn, api_key, version, correlation_id, client_id, time.monotonic())
        served = API_RANGES.get(api_key)
        if served is None or not served[0] <= version <= served[1]:
            self._release_request(body)
            if api_key == m.API_VERSIONS and served is not None and version > served[1]:
                self.dispatcher.api_versions_fallback(req)
            else:
                conn.close(f"api key {api_key} version {version} is not served")
            return
        self.metrics.request(m.API_NAMES[api_key], version)
        try:
            if api_key == m.FETCH:
                decoded: Any = decode_fetch_request(body, version, start, strict=False)
            else:
                decoded = m.REQUESTS[api_key].decode(body, version, start, strict=False)
        except KafkaCodecError as exc:
            conn.close(f"malformed {m.API_NAMES[api_key]} v{version} request: {exc}")
            return
        finally:
            self._release_request(body)
        try:
            self._handlers[api_key](req, decoded)
        except Exception:
            log.exception("%s v%d from %s failed; closing the connection", m.API_NAMES[api_key],
                          version, conn.peer)
            conn.close("handler failed")


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
