"""One broker connection: a non-blocking socket, the requests in flight on it, and a
ResponseRingBuffer (KAFKA-2045) whose memory comes from the consumer's SimpleMemoryPool.

KIP-81: a connection reads only when the pool can hold what it reads.  The ring is taken from
the pool when the connection has something to read and given back when it holds nothing (no
unreleased response, no partial one); when the pool refuses, the connection is *muted*: it stops
reading (the bytes wait in the kernel, TCP pushes back on the broker) until memory returns.  A
full ring mutes it the same way.  Coordinator connections (``priority=True``) take their ring with
``try_allocate(n, priority=True)``: from the pool when it can, else from the heap outside the
budget (KIP-81 3.b: coordinator traffic never starves behind fetch data).

Not thread-safe: one connection belongs to one Cluster, used by one thread.
"""

from __future__ import annotations

import errno
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kafkacodec._pool import SimpleMemoryPool
from kafkacodec._ring import Response, ResponseRingBuffer
from kafkacodec.errors import KafkaCodecError

__all__ = ["BrokerConnection", "InFlight", "PriorityPool", "RING_OVERHEAD"]

#: Bytes of ring a response needs beyond its size: the one-byte slot header + int32 size prefix.
RING_OVERHEAD = 5

DISCONNECTED, CONNECTING, CONNECTED, CLOSED = "disconnected", "connecting", "connected", "closed"


class PriorityPool:
    """The pool as a ring sees it, allocating with ``priority=True`` (coordinator connections)."""

    def __init__(self, pool: SimpleMemoryPool):
        self.pool = pool

    def try_allocate(self, n: int) -> memoryview | None:
        return self.pool.try_allocate(n, True)

    def release(self, buf: memoryview) -> None:
        self.pool.release(buf)

    @property
    def available_memory(self) -> int:
        return self.pool.available_memory

    @property
    def size(self) -> int:
        return self.pool.size


class InFlight:
    """A request sent (or queued) on a connection, waiting for its response.  Exactly one of
    its handlers runs, once: `on_response` with the answer, or `on_error` when the connection
    fails first (the Cluster's rule: handle_events() and fail_connection())."""

    __slots__ = ("api_key", "api_version", "on_response", "on_error", "deadline", "context",
                 "max_response_bytes")

    def __init__(self, api_key: int, api_version: int, on_response: Callable[[Response], None],
                 on_error: Callable[[BaseException], None], deadline: float, context: Any = None,
                 max_response_bytes: int | None = None):
        self.api_key = api_key
        self.api_version = api_version
        self.on_response = on_response     # takes ownership of the Response (must release it)
        self.on_error = on_error
        self.deadline = deadline
        self.context = context
        # an answer larger than this fails the request (None: only the ring bounds it)
        self.max_response_bytes = max_response_bytes


class BrokerConnection:
    """A connection to one broker (node id, host, port).  `send()` queues a framed request and
    registers its handlers; `handle_read()` / `handle_write()` run when the selector says so;
    `close(error)` fails every request in flight with `error`."""

    def __init__(self, node_id: int, host: str, port: int, *, pool: SimpleMemoryPool,
                 ring_bytes: int, priority: bool = False, name: str = ""):
        self.node_id = node_id
        self.host = host
        self.port = port
        self.pool = pool
        self.ring_bytes = ring_bytes
        self.priority = priority
        self.name = name or f"node {node_id} ({host}:{port})"
        self.sock: socket.socket | None = None
        self.state = DISCONNECTED
        self.ring: ResponseRingBuffer | None = None
        self.in_flight: dict[int, InFlight] = {}     # correlation id -> request, in send order
        self.queued: deque[memoryview] = deque()     # bytes still to write
        self.muted = False                           # the pool refused a ring: not reading
        self.leases = 0                              # responses the caller still holds
        self.correlation_id = 0
        self.api_versions: dict[int, tuple[int, int]] | None = None   # api key -> (min, max)
        self.bytes_received = 0
        self.bytes_sent = 0
        self.connected_at = 0.0

    # -- state ---------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<BrokerConnection {self.name} {self.state} in_flight={len(self.in_flight)}>"

    @property
    def ready(self) -> bool:
        return self.state == CONNECTED and self.api_versions is not None

    def next_correlation_id(self) -> int:
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        return self.correlation_id

    def connect(self) -> None:
        """Start a non-blocking connect (completion is seen as writability)."""
        if self.state not in (DISCONNECTED,):
            return
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex((self.host, self.port))
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            sock.close()
            raise ConnectionRefusedError(code, f"cannot connect to {self.name}: {errno.errorcode.get(code, code)}")
        self.sock = sock
        self.state = CONNECTING if code else CONNECTED
        self.connected_at = time.monotonic()

    def wants_read(self) -> bool:
        """Read when connected, not muted by the pool and the ring (if any) has room."""
        if self.state != CONNECTED or self.muted:
            return False
        if self.ring is not None and self.ring.writable() == 0:
            return False
        return True

    def wants_write(self) -> bool:
        return self.state == CONNECTING or (self.state == CONNECTED and bool(self.queued))

    # -- requests ------------------------------------------------------------------------------
    def send(self, frame: Any, request: InFlight, correlation_id: int) -> None:
        """Queue a framed request (its header carries `correlation_id`)."""
        if self.state == CLOSED:
            raise ConnectionError(f"connection to {self.name} is closed")
        self.in_flight[correlation_id] = request
        self.queued.append(memoryview(frame).cast("B"))

    def handle_write(self) -> None:
        assert self.sock is not None
        if self.state == CONNECTING:
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise ConnectionRefusedError(code, f"cannot connect to {self.name}: "
                                                   f"{errno.errorcode.get(code, code)}")
            self.state = CONNECTED
        while self.queued:
            head = self.queued[0]
            try:
                n = self.sock.send(head)
            except (BlockingIOError, InterruptedError):
                return
            self.bytes_sent += n
            if n == len(head):
                self.queued.popleft()
            else:
                self.queued[0] = head[n:]
                return

    def take_ring(self) -> bool:
        """Make sure there is a ring to read into; False (and muted) when the pool refuses."""
        if self.ring is not None:
            return True
        pool: Any = PriorityPool(self.pool) if self.priority else self.pool
        try:
            self.ring = ResponseRingBuffer(self.ring_bytes, pool)
        except KafkaCodecError:                 # MemoryPoolError: the pool refused
            self.muted = True
            return False
        self.muted = False
        return True

    def release_ring_if_idle(self) -> bool:
        """Give the ring back to the pool when it holds nothing.  True when given back."""
        ring = self.ring
        if ring is None or ring.unreleased or (ring.buffered_bytes and self.state != CLOSED):
            return False
        try:
            ring.close()
        except KafkaCodecError:                 # a raw export of an old response is alive
            return False
        self.ring = None
        return True

    def handle_read(self) -> tuple[list[tuple[InFlight, Response]], BaseException | None]:
        """Read what the ring can hold.  Returns the complete responses with their requests,
        and the error that ends the connection (None while it is healthy): the end of the
        stream, a socket error, a bad frame (the ring's errors: a negative size, a response
        larger than the ring), a response without a correlation id or to a request not in
        flight.  Never raises after reading: every response read before the error is returned
        with its request, so each request is either still in flight or returned here."""
        assert self.sock is not None
        if not self.take_ring():
            return [], None
        ring = self.ring
        assert ring is not None
        error: BaseException | None = None
        try:
            n = ring.recv_into(self.sock)
        except (BlockingIOError, InterruptedError):
            n = -1
        except (OSError, KafkaCodecError) as exc:     # the complete responses before it count
            n, error = -1, exc
        if n == 0 and ring.eof:
            error = ConnectionResetError(f"{self.name} closed the connection")
        if n > 0:
            self.bytes_received += n
        done: list[tuple[InFlight, Response]] = []
        while (resp := ring.next_response()) is not None:
            # A bad response ends the stream there: its error comes before any later one.
            try:
                correlation_id = resp.correlation_id
            except KafkaCodecError as exc:            # shorter than a correlation id
                resp.release()
                return done, exc.with_context(f"{self.name}: ")
            request = self.in_flight.pop(correlation_id, None)
            if request is None:
                resp.release()
                return done, ConnectionError(
                    f"{self.name} answered correlation id {correlation_id}, which is not in "
                    f"flight")
            done.append((request, resp))
        return done, error

    def expired(self, now: float) -> bool:
        return any(r.deadline < now for r in self.in_flight.values())

    def close(self, error: BaseException | None = None) -> list[InFlight]:
        """Close the socket; return the requests that were in flight (the caller fails them).
        The ring goes back to the pool once its responses are released."""
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
        self.state = CLOSED
        self.queued.clear()
        failed = list(self.in_flight.values())
        self.in_flight.clear()
        if self.ring is not None and self.ring.unreleased == 0:
            # A partial response is dropped; responses still held by the caller keep the ring
            # until they are released (the Cluster reaps it: release_ring_if_idle()).
            try:
                self.ring.close()
                self.ring = None
            except KafkaCodecError:
                pass                            # a raw export is alive: reaped later
        return failed
