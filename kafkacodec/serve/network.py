"""Listener and connections: one selector loop (Kafka's network thread), KIP-72 request memory
and responses written piece by piece.

Reading (KIP-72): the int32 size is read first; a size below 1 or above
socket.request.max.bytes closes the connection (Kafka's InvalidReceiveException); the body's
buffer comes from the request pool, and when the pool refuses, the connection is muted (no more
reads from it) until memory returns; when the pool has less than 10% left, ready connections are
served in random order so none is always last.  As in Kafka, a connection is also muted from a
complete request until its response is sent: one request per connection at a time, answers in
order.

Writing: a response is a list of pieces, written as the socket accepts them: bytes, a byte range
of a segment file (`os.sendfile`, the bytes never pass through Python; a write of the mapped
range where sendfile is unavailable) and a lazy down-conversion (`LazyDownConvertRecords`,
converted chunk by chunk as the socket drains).  A connection that closes, at any point,
releases its request buffer and every piece it held.

Everything runs on the loop's thread; `Loop.call_soon_threadsafe` is the only entry from
others.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import os
import random
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from kafkacodec.errors import FileTruncatedError

__all__ = ["Loop", "Timer", "Connection", "Piece", "BytesPiece", "FilePiece", "LazyPiece"]

log = logging.getLogger("kafkacodec.serve")

_SENDFILE_BROKEN = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK}


class Timer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]):
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    """A selector loop with timers and a wake-up socket pair."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._pending: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, self._drain_wake)
        self.running = False
        self.thread: threading.Thread | None = None

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + max(0.0, delay), callback)
        heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        return timer

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._pending.append(callback)
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass                                  # already awake, or closing

    def _drain_wake(self, mask: int) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def run_once(self, fairness: Callable[[], bool] = lambda: False) -> None:
        timeout: float | None = None
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        if self._timers:
            timeout = max(0.0, self._timers[0][0] - time.monotonic())
        if self._pending:
            timeout = 0.0
        events = self.selector.select(timeout)
        if len(events) > 1 and fairness():
            random.shuffle(events)                # KIP-72: no connection always served last
        for key, mask in events:
            _guarded(key.data, mask)
        while True:
            with self._lock:
                if not self._pending:
                    break
                callback = self._pending.popleft()
            _guarded(callback)
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                _guarded(timer.callback)

    def close(self) -> None:
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()


def _guarded(callback: Callable[..., None], *args: Any) -> None:
    """Run a loop callback; a failure is logged, never the end of the loop (the callbacks
    that own a connection close it themselves)."""
    try:
        callback(*args)
    except Exception:
        log.exception("a server callback failed")


# --- response pieces ---------------------------------------------------------------------------
class Piece(Protocol):
    def write(self, sock: socket.socket) -> bool:
        """Write what the socket accepts now; True once the piece is complete."""
    def release(self) -> None:
        """Give back what the piece holds (called once, written or not)."""


class BytesPiece:
    __slots__ = ("view",)

    def __init__(self, data: bytes | bytearray | memoryview):
        self.view = memoryview(data).cast("B")

    def write(self, sock: socket.socket) -> bool:
        while self.view.nbytes:
            try:
                n = sock.send(self.view)
            except BlockingIOError:
                return False
            self.view = self.view[n:]
        return True

    def release(self) -> None:
        self.view = memoryview(b"")


class FilePiece:
    """Bytes [offset, offset + count) of a segment, sent with os.sendfile (zero-copy: the
    kernel moves page-cache pages to the socket).  Where sendfile is unavailable or refuses
    this socket, the bytes are written from the segment's mapping instead.

    The piece opens its own descriptor of the file when it starts writing and closes it in
    release(): an answer being built holds none, an answer being written holds one (its
    current piece), whatever happens to the connection.  The file must still be the one the
    answer was built from (same device and inode) and hold the range; otherwise (replaced or
    cut by another process) FileTruncatedError: the response cannot be completed, the
    connection closes and the client fetches again."""

    __slots__ = ("records", "path", "inode", "fd", "offset", "count", "done", "on_bytes")
    use_sendfile = hasattr(os, "sendfile")

    def __init__(self, segment: Any, offset: int, count: int,
                 on_bytes: Callable[[int], None] | None = None):
        self.records = segment.records          # the mapping: where sendfile is unavailable
        self.path = segment.path
        self.inode = segment.inode              # (st_dev, st_ino) the range was read from
        self.fd = -1
        self.offset = offset
        self.count = count
        self.done = 0
        self.on_bytes = on_bytes

    def _open(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if self.inode is not None and (st.st_dev, st.st_ino) != tuple(self.inode):
                raise FileTruncatedError(f"{self.path} was replaced while its bytes were being sent",
                                         path=self.path, size=st.st_size, position=self.offset)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def write(self, sock: socket.socket) -> bool:
        if self.fd < 0:
            self._open()
        while self.done < self.count:
            left = self.count - self.done
            try:
                if FilePiece.use_sendfile:
                    n = os.sendfile(sock.fileno(), self.fd, self.offset + self.done, left)
                else:
                    n = self._write_mapped(sock, left)
            except BlockingIOError:
                return False
            except OSError as exc:
                if FilePiece.use_sendfile and exc.errno in _SENDFILE_BROKEN:
                    log.info("sendfile unavailable (%s): writing from the mapping", exc)
                    FilePiece.use_sendfile = False
                    continue
                raise
            if n == 0:
                size = os.fstat(self.fd).st_size
                raise FileTruncatedError(
                    f"{self.path}: the file ends at byte {size}, inside the range being sent",
                    path=self.path, size=size, position=self.offset + self.done)
            self.done += n
            if self.on_bytes is not None:
                self.on_bytes(n)
        return True

    def _write_mapped(self, sock: socket.socket, left: int) -> int:
        records = self.records
        if records is None or self.offset + self.done + left > records.size_in_bytes:
            return 0
        view = memoryview(records)[self.offset + self.done:self.offset + self.done + left]
        try:
            return sock.send(view)
        finally:
            view.release()

    def release(self) -> None:
        self.records = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class LazyPiece:
    """A partition's down-converted records (LazyDownConvertRecords), converted as written."""

    __slots__ = ("lazy", "on_done", "on_bytes")

    def __init__(self, lazy: Any, on_done: Callable[[Any], None] | None = None,
                 on_bytes: Callable[[int], None] | None = None):
        self.lazy = lazy
        self.on_done = on_done
        self.on_bytes = on_bytes

    def write(self, sock: socket.socket) -> bool:
        while not self.lazy.completed:
            n = self.lazy.write_to(sock)
            if n and self.on_bytes is not None:
                self.on_bytes(n)
            if not n and not self.lazy.completed:
                return False
        if self.on_done is not None:
            on_done, self.on_done = self.on_done, None
            on_done(self.lazy)
        return True

    def release(self) -> None:
        self.lazy.close()


class _Response:
    __slots__ = ("pieces", "on_sent")

    def __init__(self, pieces: list[Any], on_sent: Callable[[], None] | None):
        self.pieces: deque[Any] = deque(pieces)
        self.on_sent = on_sent


# --- connections -------------------------------------------------------------------------------
class ConnectionHost(Protocol):
    """What a Connection needs from the server."""
    loop: Loop
    socket_request_max_bytes: int

    def allocate_request(self, conn: Connection, size: int) -> memoryview | None: ...
    def release_request(self, body: memoryview) -> None: ...
    def handle_request(self, conn: Connection, body: memoryview) -> None: ...
    def memory_muted(self, conn: Connection) -> None: ...
    def connection_closed(self, conn: Connection) -> None: ...


# Why a connection closed (the `reason` label of kafkacodec_serve_connections_closed_total).
CLIENT, IDLE, READ_TIMEOUT, WRITE_TIMEOUT = "client", "idle", "request_read_timeout", "response_write_timeout"
TOO_LARGE, TOO_COSTLY, MALFORMED, UNSUPPORTED = "request_too_large", "request_too_costly", "malformed", "unsupported"
FAILED, SHUTDOWN = "failed", "shutdown"


class Connection:
    """One client connection: reads one request at a time into a request-pool buffer, writes
    responses in order.

    Deadlines (checked by `expired()`, which the server's sweep calls): a request must arrive
    whole within `request_read_timeout` of its first byte (time muted for memory excepted); a
    response must make progress at least every `response_write_timeout`; a connection with
    nothing in progress and no byte either way for `idle_timeout` is idle."""

    _ids = itertools.count(1)

    def __init__(self, host: ConnectionHost, sock: socket.socket, peer: Any):
        self.id = next(Connection._ids)
        self.host = host
        self.sock = sock
        self.peer = peer
        self.size_buf = bytearray(4)
        self.size_got = 0
        self.frame_size = -1
        self.body: memoryview | None = None
        self.body_got = 0
        self.busy = False                 # a request is being handled or answered
        self.memory_muted = False         # waiting for request memory
        self.closing = False              # close once the responses are out
        self.closed = False
        self.close_kind = ""              # why it closed (CLIENT, IDLE, ...)
        self.responses: deque[_Response] = deque()
        now = time.monotonic()
        self.last_activity = now          # a byte read or the socket writable
        self.request_started: float | None = None   # the first byte of the request being read
        self.muted_at = 0.0
        self.muted_total = 0.0            # of the request being read, time muted for memory
        self.write_progress = now         # the last time a response could move
        self._events = 0
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._update_interest()

    # --- interest --------------------------------------------------------------------------
    def _update_interest(self) -> None:
        if self.closed:
            return
        events = 0
        if not (self.busy or self.memory_muted or self.closing):
            events |= selectors.EVENT_READ
        if self.responses:
            events |= selectors.EVENT_WRITE
        if events == self._events:
            return
        selector = self.host.loop.selector
        if self._events == 0:
            selector.register(self.sock, events, self._on_event)
        elif events == 0:
            selector.unregister(self.sock)
        else:
            selector.modify(self.sock, events, self._on_event)
        self._events = events

    def _on_event(self, mask: int) -> None:
        failure, kind = None, FAILED
        try:
            if mask & selectors.EVENT_WRITE:
                self.last_activity = self.write_progress = time.monotonic()
                self.flush()
            if mask & selectors.EVENT_READ and not self.closed:
                self._read()
        except (ConnectionError, TimeoutError) as exc:
            failure, kind = f"connection lost: {exc}", CLIENT     # reset by the client or the network
        except OSError as exc:
            failure, kind = f"socket error: {exc}", FAILED
        except Exception as exc:
            log.exception("connection %s (%s) failed", self.id, self.peer)
            failure, kind = f"failed: {exc}", FAILED
        if failure is not None:
            self.close(failure, kind)

    # --- deadlines ---------------------------------------------------------------------------
    def expired(self, now: float, idle: float, read: float, write: float) -> str | None:
        """The deadline this connection has passed (IDLE, READ_TIMEOUT, WRITE_TIMEOUT), if any."""
        if self.responses:
            return WRITE_TIMEOUT if now - self.write_progress > write else None
        if self.request_started is not None:
            if self.memory_muted:
                return None
            return READ_TIMEOUT if now - self.request_started - self.muted_total > read else None
        if not self.busy and now - self.last_activity > idle:
            return IDLE
        return None

    # --- reading (KIP-72) ----------------------------------------------------------------------
    def unmute_memory(self) -> None:
        if self.memory_muted and not self.closed:
            self.memory_muted = False
            self.muted_total += time.monotonic() - self.muted_at
            self._update_interest()

    def _read(self) -> None:
        while not (self.busy or self.memory_muted or self.closed or self.closing):
            if self.frame_size < 0:
                view = memoryview(self.size_buf)[self.size_got:]
                try:
                    n = self.sock.recv_into(view)
                except BlockingIOError:
                    return
                if n == 0:
                    self.close("closed by the client", CLIENT)
                    return
                self.last_activity = time.monotonic()
                if self.size_got == 0:
                    self.request_started, self.muted_total = self.last_activity, 0.0
                self.size_got += n
                if self.size_got < 4:
                    continue
                size = int.from_bytes(self.size_buf, "big", signed=True)
                if size < 1 or size > self.host.socket_request_max_bytes:
                    # Kafka's InvalidReceiveException: the connection is closed
                    self.close(f"request size {size} is outside 1..socket.request.max.bytes "
                               f"({self.host.socket_request_max_bytes})", TOO_LARGE)
                    return
                self.frame_size = size
            if self.body is None:
                block = self.host.allocate_request(self, self.frame_size)
                if block is None:
                    self.memory_muted = True
                    self.muted_at = time.monotonic()
                    self._update_interest()
                    self.host.memory_muted(self)
                    return
                self.body = block
                self.body_got = 0
            try:
                n = self.sock.recv_into(self.body[self.body_got:])
            except BlockingIOError:
                return
            if n == 0:
                self.close("closed by the client in the middle of a request", CLIENT)
                return
            self.last_activity = time.monotonic()
            self.body_got += n
            if self.body_got == self.frame_size:
                body = self.body
                self.body, self.frame_size, self.size_got = None, -1, 0
                self.request_started = None
                self.busy = True
                self._update_interest()
                self.host.handle_request(self, body)

    # --- writing -------------------------------------------------------------------------------
    def send(self, pieces: list[Any], on_sent: Callable[[], None] | None = None) -> None:
        """Queue a response (its pieces in order); `on_sent` runs once it is all written.  The
        connection owns the pieces from here: each is released once, written or not."""
        if self.closed:
            for piece in pieces:
                piece.release()
            return
        if not self.responses:
            self.write_progress = time.monotonic()
        self.responses.append(_Response(pieces, on_sent))
        self.flush()

    def request_done(self) -> None:
        """The current request needs no (more) response: read the next one."""
        self.busy = False
        self.last_activity = time.monotonic()
        self._update_interest()
        if not self.responses and self.closing:
            self.close("shutting down", SHUTDOWN)

    def flush(self) -> None:
        failure = self._write()
        if failure is not None:
            # closed outside the except clause: the traceback (and the views of pool blocks its
            # frames hold) is gone, so everything is given back at once
            self.close(*failure)
            return
        self._update_interest()

    def _write(self) -> tuple[str, str] | None:
        """Write what the socket takes; why to close (and the kind) when a response cannot go on."""
        try:
            while self.responses and not self.closed:
                response = self.responses[0]
                while response.pieces:
                    piece = response.pieces[0]
                    if not piece.write(self.sock):
                        return None
                    response.pieces.popleft()
                    piece.release()
                self.responses.popleft()
                if response.on_sent is not None:
                    response.on_sent()
                self.request_done()
        except (ConnectionError, TimeoutError) as exc:
            return f"connection lost while writing: {exc}", CLIENT
        except Exception as exc:          # a cut segment, a conversion that failed half-way
            log.warning("closing connection %s (%s): a response could not be completed: %s",
                        self.id, self.peer, exc)
            return f"response failed: {exc}", FAILED
        return None

    # --- closing -------------------------------------------------------------------------------
    def close(self, reason: str = "", kind: str = FAILED) -> None:
        if self.closed:
            return
        log.debug("connection %s (%s) closed: %s", self.id, self.peer, reason)
        if self._events:
            try:
                self.host.loop.selector.unregister(self.sock)
            except (KeyError, ValueError):
                pass
        self._events = 0
        self.closed = True
        self.close_kind = kind
        try:
            self.sock.close()
        except OSError:
            pass
        if self.body is not None:
            body, self.body = self.body, None
            self.host.release_request(body)
        while self.responses:
            for piece in self.responses.popleft().pieces:
                piece.release()
        self.host.connection_closed(self)
