"""The client side of a connection: connecting, and responses read into a ring.

`open_connection()` starts a non-blocking connect and returns the Connection at once (connect,
then the TLS handshake, run on the loop; the requests sent meanwhile wait in its queue).

`ResponseReader` (KIP-81 + KAFKA-2045): responses are read into a ResponseRingBuffer taken from
the client's SimpleMemoryPool when the connection has something to read and given back when it
holds nothing (no unreleased response, no partial one); when the pool refuses, the connection is
*muted*: it stops reading (the bytes wait in the kernel, TCP pushes back on the broker) until
memory returns (`unmute()`, which the owner calls when it may have).  A full ring (`full`: the
responses the caller still holds leave no room) stops it the same way until `unmute()`: the loop
watches a connection again only when told, so whatever gives ring space back calls it (the
consumer's ResponseLease as the caller releases data; the owner's tick as well).  Coordinator
connections (``priority=True``) take their ring with ``try_allocate(n, priority=True)``: from
the pool when it can, else from the heap outside the budget (KIP-81 3.b: coordinator traffic
never starves behind fetch data).  Each response is matched to its request by correlation id;
every response read before a damaged frame is handed over with its request, then the damage
closes the connection.

Not thread-safe: one connection belongs to one owner on one loop.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Callable
from typing import Any

from kafkacodec._pool import SimpleMemoryPool
from kafkacodec._ring import Response, ResponseRingBuffer
from kafkacodec.errors import KafkaCodecError
from kafkacodec.net.connection import Connection, Deadlines
from kafkacodec.net.loop import Loop
from kafkacodec.net.pieces import BytesPiece
from kafkacodec.net.transport import PlainTransport, TlsTransport, Transport

__all__ = ["open_connection", "ResponseReader", "InFlight", "PriorityPool", "RING_OVERHEAD"]

#: Bytes of ring a response needs beyond its size: the one-byte slot header + int32 size prefix.
RING_OVERHEAD = 5


class PriorityPool:
    """The pool as a ring sees it, allocating with ``priority=True`` (coordinator connections)."""

    def __init__(self, pool: SimpleMemoryPool):
        self.pool = pool

    def try_allocate(self, n: int) -> memoryview | None:
        block: memoryview | None = self.pool.try_allocate(n, True)
        return block

    def release(self, buf: memoryview) -> None:
        self.pool.release(buf)

    @property
    def available_memory(self) -> int:
        return int(self.pool.available_memory)

    @property
    def size(self) -> int:
        return int(self.pool.size)


class InFlight:
    """A request sent (or queued) on a connection, waiting for its response.  Exactly one of
    its handlers runs, once: `on_response` with the answer, or `on_error` when the connection
    fails first."""

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


Delivery = Callable[[Connection, list[tuple[InFlight, Response]], "BaseException | None"], None]


class ResponseReader:
    """Responses of one client connection, read into a ring from `pool` (see the module)."""

    def __init__(self, pool: SimpleMemoryPool, ring_bytes: int, deliver: Delivery, *,
                 priority: bool = False):
        self.pool = pool
        self.ring_bytes = ring_bytes
        self.priority = priority
        self.deliver = deliver             # (conn, [(request, response)], error ending it)
        self.ring: ResponseRingBuffer | None = None
        self.in_flight: dict[int, InFlight] = {}     # correlation id -> request, in send order
        self.muted = False                           # the pool refused a ring: not reading
        self.full = False                            # the ring had no room: not reading
        self.correlation_id = 0
        self.bytes_received = 0
        self.frame_started: float | None = None      # the client's deadlines are per request
        self.muted_for = 0.0

    def next_correlation_id(self) -> int:
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        return self.correlation_id

    def send(self, conn: Connection, frame: Any, request: InFlight, correlation_id: int) -> None:
        """Queue a framed request (its header carries `correlation_id`)."""
        if conn.closed:
            raise ConnectionError(f"{conn.name}: the connection is closed")
        self.in_flight[correlation_id] = request
        conn.send([BytesPiece(frame)])

    def expired(self, now: float) -> bool:
        return any(r.deadline < now for r in self.in_flight.values())

    # --- memory (KIP-81) ----------------------------------------------------------------------
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

    def release_ring_if_idle(self, conn: Connection) -> bool:
        """Give the ring back to the pool when it holds nothing.  True when given back."""
        ring = self.ring
        # (one byte is the header slot placed for the next response: nothing is in it yet)
        if ring is None or ring.unreleased or (ring.buffered_bytes > 1 and not conn.closed):
            return False
        try:
            ring.close()
        except KafkaCodecError:                 # a raw export of an old response is alive
            return False
        self.ring = None
        return True

    def unmute(self, conn: Connection) -> None:
        """Memory may have returned (to the pool, or to the ring as the caller released
        responses): read again if the connection can now."""
        if self.muted:
            if not self.take_ring():
                return
        elif not self.full or (self.ring is not None and self.ring.writable() == 0):
            return
        conn.resume_reading()

    # --- reading ------------------------------------------------------------------------------
    def readable(self, conn: Connection) -> bool:
        """Whether to watch for reads: not muted, and the ring (if any) has room (else `full`,
        until `unmute()`)."""
        if self.muted:
            return False
        self.full = self.ring is not None and self.ring.writable() == 0
        return not self.full

    def read(self, conn: Connection) -> None:
        """Read what the ring holds now and hand over every complete response with its request,
        and the error that ends the connection (None while it is healthy): the end of the
        stream, a socket error, a bad frame (the ring's errors: a negative size, a response
        larger than the ring), a response without a correlation id or to a request not in
        flight.  Every response read before the error is handed over, so each request is either
        still in flight or answered."""
        if not self.take_ring():
            return
        ring = self.ring
        assert ring is not None
        error: BaseException | None = None
        received = 0
        try:
            while (n := self._receive(conn, ring)) > 0:
                received += n
                # A plain read takes what the socket holds (up to the ring's room); a TLS one a
                # single record: read on until the socket is empty (or the ring full), else the
                # loop would turn once per record, and records decrypted ahead are never
                # reported by the selector.
                if not conn.transport.encrypted or not ring.writable():
                    break
        except BlockingIOError:
            n = -1
        except (OSError, KafkaCodecError) as exc:     # the complete responses before it count
            n, error = -1, exc
        if n == 0 and (ring.eof or conn.transport.encrypted):
            error = ConnectionResetError(f"{conn.name}: the broker closed the connection")
        self.bytes_received += received
        done: list[tuple[InFlight, Response]] = []
        while (resp := ring.next_response()) is not None:
            # A bad response ends the stream there: its error comes before any later one.
            try:
                correlation_id = resp.correlation_id
            except KafkaCodecError as exc:            # shorter than a correlation id
                resp.release()
                error = exc.with_context(f"{conn.name}: ")
                break
            request = self.in_flight.pop(correlation_id, None)
            if request is None:
                resp.release()
                error = ConnectionError(f"{conn.name} answered correlation id {correlation_id}, "
                                        "which is not in flight")
                break
            done.append((request, resp))
        if done or error is not None:
            self.deliver(conn, done, error)

    @staticmethod
    def _receive(conn: Connection, ring: ResponseRingBuffer) -> int:
        """One read into the ring: straight from the socket (no copy, the GIL released) when it
        is plain; through the TLS object into the ring's window when encrypted."""
        transport = conn.transport
        if not transport.encrypted:
            return int(ring.recv_into(transport.sock))
        try:
            window = ring.get_buffer()
        except BufferError:
            return -1
        try:
            n = conn.recv_into(window)
        finally:
            window.release()
        if n:
            ring.buffer_updated(n)
        return n

    def close(self, conn: Connection) -> None:
        """The connection closed: a partial response is dropped; responses still held by the
        caller keep the ring until they are released (the owner reaps it with
        release_ring_if_idle())."""
        ring = self.ring
        if ring is not None and ring.unreleased == 0:
            try:
                ring.close()
                self.ring = None
            except KafkaCodecError:
                pass                            # a raw export is alive: reaped later


def open_connection(loop: Loop, host: str, port: int, reader: ResponseReader, *,
                    on_closed: Callable[[Connection], None], deadlines: Deadlines,
                    tls: ssl.SSLContext | None = None, name: str = "") -> Connection:
    """Start connecting to (host, port) without blocking; the Connection sends what is queued
    once the connect (and the TLS handshake, with `tls`) completes.  OSError when the connect
    fails at once (an unknown host, no route)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
    except OSError:
        address = (host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            raise ConnectionRefusedError(code, f"cannot connect to {name or f'{host}:{port}'}: "
                                               f"{errno.errorcode.get(code, code)}")
    except BaseException:
        sock.close()
        raise

    def start_tls(connected: socket.socket) -> Transport:
        assert tls is not None
        return TlsTransport(connected, tls, server_side=False, server_hostname=host)

    return Connection(loop, PlainTransport(sock), (host, port), reader, on_closed=on_closed,
                      deadlines=deadlines, name=name, connecting=bool(code),
                      start_tls=start_tls if tls is not None else None)

