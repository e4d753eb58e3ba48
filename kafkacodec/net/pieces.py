"""What a connection writes: a message is a list of pieces, each written as the transport
accepts it and released once, written or not (the connection owns them from `send()` on).

- `BytesPiece`: bytes already in memory (a request, a response's headers).
- `FilePiece`: a byte range of a segment file.  Zero-copy where the transport allows it
  (`os.sendfile`: a plain socket, or kernel TLS); otherwise read with `os.pread` through one
  bounded buffer (FILE_BUFFER_BYTES) and sent, so TLS costs a copy but never unbounded memory.
  The piece opens its own descriptor when it starts writing and closes it in release(): a message
  being built holds none, a message being written holds one.
- `LazyPiece`: a partition's down-converted records (KIP-283 `LazyDownConvertRecords`),
  converted chunk by chunk as the transport drains.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

from kafkacodec.errors import FileTruncatedError

__all__ = ["Piece", "BytesPiece", "FilePiece", "LazyPiece", "FILE_BUFFER_BYTES"]

log = logging.getLogger("kafkacodec.net")

#: The buffer a FilePiece reads through where the transport cannot send a file itself.
FILE_BUFFER_BYTES = 256 * 1024
_SENDFILE_BROKEN = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK}


class Piece(Protocol):
    def write(self, transport: Any) -> bool:
        """Write what the transport accepts now; True once the piece is complete (raises
        BlockingIOError or returns False when it would block)."""
    def release(self) -> None:
        """Give back what the piece holds (called once, written or not)."""


class BytesPiece:
    __slots__ = ("view",)

    def __init__(self, data: bytes | bytearray | memoryview):
        self.view = memoryview(data).cast("B")

    @property
    def nbytes(self) -> int:
        return self.view.nbytes

    def write(self, transport: Any) -> bool:
        while self.view.nbytes:
            try:
                n = transport.send(self.view)
            except BlockingIOError:
                return False
            self.view = self.view[n:]
        return True

    def release(self) -> None:
        self.view = memoryview(b"")


class FilePiece:
    """Bytes [offset, offset + count) of `path`, which must still be the file the range was
    read from (`inode`: (st_dev, st_ino)) and hold the range; otherwise (replaced or cut by
    another process) FileTruncatedError: the message cannot be completed, the connection
    closes and the client asks again."""

    __slots__ = ("path", "inode", "fd", "offset", "count", "done", "on_bytes", "buffer", "buffered")
    use_sendfile = hasattr(os, "sendfile")

    def __init__(self, path: str, inode: tuple[int, int] | None, offset: int, count: int,
                 on_bytes: Callable[[int], None] | None = None):
        self.path = path
        self.inode = inode
        self.fd = -1
        self.offset = offset
        self.count = count
        self.done = 0                            # bytes the transport took
        self.on_bytes = on_bytes
        self.buffer: memoryview | None = None    # read but not yet sent (no zero-copy)
        self.buffered = memoryview(b"")

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

    def write(self, transport: Any) -> bool:
        if self.fd < 0:
            self._open()
        while self.done < self.count:
            try:
                n = self._write_some(transport, self.count - self.done)
            except BlockingIOError:
                return False
            if n == 0:
                size = os.fstat(self.fd).st_size
                raise FileTruncatedError(
                    f"{self.path}: the file ends at byte {size}, inside the range being sent",
                    path=self.path, size=size, position=self.offset + self.done)
            self.done += n
            if self.on_bytes is not None:
                self.on_bytes(n)
        return True

    def _write_some(self, transport: Any, left: int) -> int:
        """Bytes the transport took now (0: the file ended); BlockingIOError when it is full."""
        if FilePiece.use_sendfile and not self.buffered.nbytes and transport.zero_copy:
            try:
                sent = transport.sendfile(self.fd, self.offset + self.done, left)
            except OSError as exc:
                if exc.errno not in _SENDFILE_BROKEN:
                    raise
                log.info("sendfile unavailable (%s): files are read and sent", exc)
                FilePiece.use_sendfile = False
            else:
                if sent is not None:
                    return int(sent)
        if not self.buffered.nbytes:
            if self.buffer is None:
                self.buffer = memoryview(bytearray(min(FILE_BUFFER_BYTES, self.count)))
            want = min(left, self.buffer.nbytes)
            got = os.preadv(self.fd, [self.buffer[:want]], self.offset + self.done)
            if got == 0:
                return 0
            self.buffered = self.buffer[:got]
        n = int(transport.send(self.buffered))
        self.buffered = self.buffered[n:]
        return n

    def release(self) -> None:
        self.buffer = None
        self.buffered = memoryview(b"")
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

    def write(self, transport: Any) -> bool:
        while not self.lazy.completed:
            n = self.lazy.write_to(transport)
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
