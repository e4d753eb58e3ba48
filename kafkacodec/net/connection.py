"""One connection, client or server side: a transport (plain or TLS) on the loop, size-prefixed
frames in, pieces out, deadlines, and a close that gives back everything it held.

What comes in is the reader's job, the one part that differs by side:
- `RequestReader` (server side, KIP-72): one request at a time, read into a block of the
  server's request pool; when the pool refuses, the connection is muted (not read; the bytes wait
  in the kernel) until memory returns.  A size below 1 or above socket.request.max.bytes closes
  the connection (Kafka's InvalidReceiveException).
- `ResponseReader` (client side, KIP-81 + KAFKA-2045, in kafkacodec.net.client): responses read
  into a ResponseRingBuffer taken from the client's pool, matched to requests by correlation id.

What goes out is a queue of messages, each a list of pieces (kafkacodec.net.pieces) written in
order as the transport accepts them; each piece is released once, written or not.  A place in
the queue can be reserved for a message made later (`reserve`, `fill`: a server's pipelined
answers keep their request's turn); what comes after it waits.

Deadlines (`expired()`, called by the owner's sweep): the connect, the TLS handshake and a
server's SASL exchange within `handshake`; a request whole within `request_read_timeout` of its first byte (time
muted for memory excepted); a message being written moving at least every
`response_write_timeout`; nothing in progress and no byte either way for `idle_timeout`.

Everything runs on the loop's thread.  Not thread-safe.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from kafkacodec.net.loop import Loop
from kafkacodec.net.transport import READ, WRITE, TlsError, Transport

__all__ = ["Connection", "RequestReader", "Deadlines", "CLOSE_KINDS", "request_done"]

log = logging.getLogger("kafkacodec.net")

# Why a connection closed (kafkacodec_serve_connections_closed_total{reason}).
CLIENT, IDLE, READ_TIMEOUT, WRITE_TIMEOUT = "client", "idle", "request_read_timeout", "response_write_timeout"
HANDSHAKE_TIMEOUT, TLS_FAILED, AUTH_FAILED = "handshake_timeout", "tls_failed", "authentication_failed"
TOO_LARGE, TOO_COSTLY, MALFORMED, UNSUPPORTED = "request_too_large", "request_too_costly", "malformed", "unsupported"
FAILED, SHUTDOWN = "failed", "shutdown"
CLOSE_KINDS = (CLIENT, IDLE, READ_TIMEOUT, WRITE_TIMEOUT, HANDSHAKE_TIMEOUT, TLS_FAILED, AUTH_FAILED,
               TOO_LARGE, TOO_COSTLY, MALFORMED, UNSUPPORTED, FAILED, SHUTDOWN)


class Deadlines:
    """A connection's deadlines in seconds."""

    __slots__ = ("idle", "request_read", "response_write", "handshake")

    def __init__(self, idle: float = 600.0, request_read: float = 30.0, response_write: float = 30.0,
                 handshake: float = 10.0):
        self.idle = idle
        self.request_read = request_read
        self.response_write = response_write
        self.handshake = handshake


class Reader(Protocol):
    frame_started: float | None        # the first byte of the frame being read (None: between frames)
    muted_for: float                   # of that frame, time spent muted for memory
    muted: bool

    def read(self, conn: Connection) -> None: ...
    def readable(self, conn: Connection) -> bool: ...
    def unmute(self, conn: Connection) -> None: ...
    def close(self, conn: Connection) -> None: ...


class _Message:
    __slots__ = ("pieces", "on_sent", "filled", "size")

    def __init__(self, pieces: list[Any], on_sent: Callable[[], None] | None, filled: bool = True):
        self.pieces: deque[Any] = deque(pieces)
        self.on_sent = on_sent
        self.filled = filled              # False: a place reserved for a message made later
        self.size = 0                     # reserved: the bytes its request holds


class Connection:
    """A connection on `loop` over `transport`, reading with `reader`.  `on_closed(conn)` runs
    once when it closes (`close_kind`, `close_reason` say why)."""

    _ids = itertools.count(1)

    def __init__(self, loop: Loop, transport: Transport, peer: Any, reader: Reader, *,
                 on_closed: Callable[[Connection], None], deadlines: Deadlines | None = None,
                 name: str = "", connecting: bool = False,
                 start_tls: Callable[[Any], Transport] | None = None):
        self.id = next(Connection._ids)
        self.loop = loop
        self.transport = transport
        self.peer = peer
        self.reader = reader
        self.on_closed = on_closed
        self.deadlines = deadlines or Deadlines()
        self.name = name or f"connection {self.id} ({peer})"
        self.busy = False                 # a request is being handled (server side)
        self.closing = False              # close once the messages queued are out
        self.closed = False
        self.close_kind = ""
        self.close_reason = ""
        self.close_error: BaseException | None = None
        self.principal = "User:ANONYMOUS"  # set by a TLS client certificate or SASL
        self.listener: Any = None         # server side: the listener it came in on
        self.auth: Any = None             # the SASL exchange (kafkacodec.net.authentication)
        self.messages: deque[_Message] = deque()
        self.reserved = 0                 # places reserved in `messages`, not filled yet
        self.reserved_bytes = 0
        now = time.monotonic()
        self.opened_at = now
        self.last_activity = now          # a byte read, or the transport writable
        self.write_progress = now         # the last time a message could move
        self.connecting = connecting      # client side: the TCP connect is under way
        self.start_tls = start_tls        # client side: TLS over the socket once connected
        self.handshaken = not transport.encrypted and not connecting and start_tls is None
        self._events = 0
        self._read_soon: Any = None
        sock = transport.sock
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self._update_interest()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Connection {self.name} {state}>"

    # --- interest ------------------------------------------------------------------------------
    def _update_interest(self) -> None:
        if self.closed:
            return
        events = 0
        if self.connecting:
            events = WRITE                        # a non-blocking connect completes writable
        elif not self.handshaken:
            events = self.transport.wants
        else:
            if not self.closing and not self.busy and self.reader.readable(self):
                events |= READ
            if self.messages and self.messages[0].filled:
                events |= WRITE
            if events and self.transport.encrypted and self.transport.wants != READ:
                events |= self.transport.wants      # TLS: a read that needs a write, or the reverse
        self._events = self.loop.watch(self.transport.sock, events, self._on_event, self._events)

    def _on_event(self, mask: int) -> None:
        kind = FAILED
        error: BaseException
        try:
            self.last_activity = time.monotonic()
            if self.connecting:
                self._connected()
            if not self.handshaken:
                self._handshake()
                return
            if mask & WRITE:
                self.write_progress = self.last_activity
            if self.messages:
                self.flush()
            # (a TLS read may have waited for the socket to be writable)
            if not self.closed and (mask & READ or self.transport.wants == WRITE):
                self.read_now()
            return
        except TlsError as exc:
            failure, kind, error = str(exc), TLS_FAILED, exc
        except (ConnectionError, TimeoutError) as exc:
            failure, kind, error = f"connection lost: {exc}", CLIENT, exc   # reset by the peer or the network
        except OSError as exc:
            failure, error = f"socket error: {exc}", exc
        except Exception as exc:
            log.exception("%s failed", self.name)
            failure, error = f"failed: {exc}", exc
        self.close(failure, kind, error)

    def _connected(self) -> None:
        """The non-blocking connect ended: an error, or the socket is ready (for TLS first)."""
        sock = self.transport.sock
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            raise ConnectionRefusedError(code, f"cannot connect to {self.name}: {os.strerror(code).lower()}")
        self.connecting = False
        if self.start_tls is not None:
            # the TLS socket takes over the descriptor: watched again under its new object
            self.loop.forget(sock)
            self._events = 0
            self.transport = self.start_tls(sock)
            self.start_tls = None

    def _handshake(self) -> None:
        if self.transport.handshake():
            self.handshaken = True
            if self.transport.encrypted:
                from kafkacodec.net.tls import peer_principal

                self.principal = peer_principal(self.transport.sock)   # ANONYMOUS without one
            self.resume_reading()                 # (a request may already be decrypted)
            return
        self._update_interest()

    # --- reading -------------------------------------------------------------------------------
    def read_now(self) -> None:
        """Read what the reader takes now (and what TLS decrypted ahead)."""
        self._read_soon = None
        if not self.closed and self.handshaken and not self.busy and not self.closing:
            self.reader.read(self)
            self._update_interest()

    def resume_reading(self) -> None:
        """Reading may go on (memory returned, a request answered): bytes TLS already decrypted
        are read at once, since the selector will not report them."""
        self._update_interest()
        if self.transport.pending() and self._read_soon is None and not self.closed:
            self._read_soon = self.loop.call_soon(self.read_now)

    def recv_into(self, view: Any) -> int:
        """Bytes read into `view` (0: the peer closed); BlockingIOError when none are there."""
        n = self.transport.recv_into(view)
        if n:
            self.last_activity = time.monotonic()
        return int(n)

    # --- writing -------------------------------------------------------------------------------
    def send(self, pieces: list[Any], on_sent: Callable[[], None] | None = None) -> None:
        """Queue a message (its pieces in order); `on_sent` runs once it is all written.  The
        connection owns the pieces from here: each is released once, written or not."""
        if self.closed:
            for piece in pieces:
                piece.release()
            return
        if not self.messages:
            self.write_progress = time.monotonic()
        self.messages.append(_Message(pieces, on_sent))
        if self.handshaken:
            self.flush()

    def reserve(self, size: int = 0) -> _Message:
        """A place in the queue for a message made later (`fill`): a server answers requests
        in the order they came (Kafka's rule), so what is queued behind it waits for it.
        `reserved` counts the places not filled yet and `reserved_bytes` the `size`s given
        (what their requests hold), for the caller's bounds."""
        slot = _Message([], None, filled=False)
        slot.size = size
        if not self.closed:
            self.messages.append(slot)
            self.reserved += 1
            self.reserved_bytes += size
        return slot

    def fill(self, slot: _Message, pieces: list[Any], on_sent: Callable[[], None] | None = None) -> None:
        """The message of a place `reserve()` gave; owned from here as `send`'s are."""
        if self.closed:
            for piece in pieces:
                piece.release()
            return
        self.reserved -= 1
        self.reserved_bytes -= slot.size
        slot.pieces.extend(pieces)
        slot.on_sent, slot.filled = on_sent, True
        if self.messages and self.messages[0] is slot:
            self.write_progress = time.monotonic()
        if self.handshaken:
            self.flush()

    def flush(self) -> None:
        failure = self._write()
        if failure is not None:
            # closed outside the except clause: the traceback (and the views of pool blocks its
            # frames hold) is gone, so everything is given back at once
            self.close(*failure)
            return
        if self.closing and not self.busy and not self.messages:
            self.close("shutting down", SHUTDOWN)     # the last answer of a stopping server
            return
        self._update_interest()

    def _write(self) -> tuple[str, str] | None:
        """Write what the transport takes; why to close (and the kind) when a message cannot go on."""
        try:
            while self.messages and not self.closed:
                message = self.messages[0]
                if not message.filled:
                    return None               # its answer is not made yet: the rest waits
                while message.pieces:
                    piece = message.pieces[0]
                    if not piece.write(self.transport):
                        return None
                    message.pieces.popleft()
                    piece.release()
                self.messages.popleft()
                self.write_progress = time.monotonic()    # the next message's clock starts
                if message.on_sent is not None:
                    message.on_sent()
        except BlockingIOError:
            return None
        except (ConnectionError, TimeoutError) as exc:
            return f"connection lost while writing: {exc}", CLIENT
        except Exception as exc:          # a cut segment, a conversion that failed half-way
            log.warning("closing %s: a message could not be completed: %s", self.name, exc)
            return f"message failed: {exc}", FAILED
        return None

    # --- deadlines -----------------------------------------------------------------------------
    def expired(self, now: float) -> str | None:
        """The deadline this connection has passed (a close kind), if any."""
        d = self.deadlines
        if self.connecting or not self.handshaken or (self.auth is not None and not self.auth.authenticated):
            # the connect, the TLS handshake and (server side) the SASL exchange, from the start
            if now - self.opened_at > d.handshake:
                return HANDSHAKE_TIMEOUT
            if self.handshaken and not self.connecting:
                return self._traffic_deadline(now)
            return None
        return self._traffic_deadline(now)

    def _traffic_deadline(self, now: float) -> str | None:
        d = self.deadlines
        if self.messages:
            if not self.messages[0].filled:
                return None               # an answer being made: the request's own deadline bounds it
            return WRITE_TIMEOUT if now - self.write_progress > d.response_write else None
        started = self.reader.frame_started
        if started is not None:
            if self.reader.muted:
                return None
            return READ_TIMEOUT if now - started - self.reader.muted_for > d.request_read else None
        if not self.busy and now - self.last_activity > d.idle:
            return IDLE
        return None

    # --- closing -------------------------------------------------------------------------------
    def close(self, reason: str = "", kind: str = FAILED, error: BaseException | None = None) -> None:
        """Close (once): `kind` says why for metrics, `reason` for logs, `error` is the exception
        behind it if any (what a client's waiting requests fail with)."""
        if self.closed:
            return
        log.debug("%s closed (%s): %s", self.name, kind, reason)
        self.loop.forget(self.transport.sock)
        self._events = 0
        self.closed = True
        self.close_kind, self.close_reason, self.close_error = kind, reason, error
        if self._read_soon is not None:
            self._read_soon.cancel()
        self.transport.close()
        self.reader.close(self)
        while self.messages:
            for piece in self.messages.popleft().pieces:
                piece.release()
        self.on_closed(self)


class RequestHost(Protocol):
    """What a RequestReader needs from the server."""
    socket_request_max_bytes: int

    def allocate_request(self, conn: Connection, size: int) -> memoryview | None: ...
    def release_request(self, body: memoryview) -> None: ...
    def handle_request(self, conn: Connection, body: memoryview) -> None: ...
    def memory_muted(self, conn: Connection) -> None: ...


class RequestReader:
    """Server side: one size-prefixed request at a time into a request-pool block (KIP-72)."""

    __slots__ = ("host", "size_buf", "size_got", "frame_size", "body", "body_got", "frame_started",
                 "muted", "muted_at", "muted_for")

    def __init__(self, host: RequestHost):
        self.host = host
        self.size_buf = bytearray(4)
        self.size_got = 0
        self.frame_size = -1
        self.body: memoryview | None = None
        self.body_got = 0
        self.frame_started: float | None = None
        self.muted = False                # waiting for request memory
        self.muted_at = 0.0
        self.muted_for = 0.0

    def readable(self, conn: Connection) -> bool:
        return not self.muted

    def unmute(self, conn: Connection) -> None:
        if self.muted and not conn.closed:
            self.muted = False
            self.muted_for += time.monotonic() - self.muted_at
            conn.resume_reading()

    def read(self, conn: Connection) -> None:
        host = self.host
        while not (conn.busy or self.muted or conn.closed or conn.closing):
            try:
                if self.frame_size < 0:
                    n = conn.recv_into(memoryview(self.size_buf)[self.size_got:])
                    if n == 0:
                        conn.close("closed by the client", CLIENT)
                        return
                    if self.size_got == 0:
                        self.frame_started, self.muted_for = conn.last_activity, 0.0
                    self.size_got += n
                    if self.size_got < 4:
                        continue
                    size = int.from_bytes(self.size_buf, "big", signed=True)
                    if size < 1 or size > host.socket_request_max_bytes:
                        # Kafka's InvalidReceiveException: the connection is closed
                        conn.close(f"request size {size} is outside 1..socket.request.max.bytes "
                                   f"({host.socket_request_max_bytes})", TOO_LARGE)
                        return
                    self.frame_size = size
                if self.body is None:
                    block = host.allocate_request(conn, self.frame_size)
                    if block is None:
                        self.muted = True
                        self.muted_at = time.monotonic()
                        host.memory_muted(conn)
                        return
                    self.body, self.body_got = block, 0
                n = conn.recv_into(self.body[self.body_got:])
            except BlockingIOError:
                return
            if n == 0:
                conn.close("closed by the client in the middle of a request", CLIENT)
                return
            self.body_got += n
            if self.body_got == self.frame_size:
                body = self.body
                self.body, self.frame_size, self.size_got = None, -1, 0
                self.frame_started = None
                conn.busy = True
                host.handle_request(conn, body)

    def close(self, conn: Connection) -> None:
        if self.body is not None:
            body, self.body = self.body, None
            self.host.release_request(body)


def request_done(conn: Connection) -> None:
    """Server side: the current request needs no (more) answer: read the next one."""
    conn.busy = False
    conn.last_activity = time.monotonic()
    if conn.closing and not conn.messages:
        conn.close("shutting down", SHUTDOWN)
        return
    conn.resume_reading()

