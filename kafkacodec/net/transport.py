"""The byte stream under a connection: a plain non-blocking socket, or TLS over it.

Both raise `BlockingIOError` when the socket cannot go on now, and say which readiness would let
it (`wants`: a TLS read may need the socket writable, a write readable, during a handshake or a
key update).  TLS goes through the standard `ssl` module (`SSLSocket` in non-blocking mode); the
handshake is driven by the loop (`handshake()` until True).

Zero-copy out (`sendfile`): a plain socket moves file pages with `os.sendfile`; TLS does so only
when the kernel encrypts (kernel TLS: `ssl.OP_ENABLE_KTLS`, Python 3.12+ with OpenSSL 3 and the
kernel's `tls` module, for the negotiated cipher); otherwise `sendfile` returns None and the
caller sends the file's bytes through a bounded buffer.  `os.sendfile` is never used on a TLS
socket without kernel TLS: the bytes would leave unencrypted.
"""

from __future__ import annotations

import os
import selectors
import socket
import ssl
from typing import Any

from kafkacodec.net.tls import kernel_tls_send

__all__ = ["Transport", "PlainTransport", "TlsTransport", "TlsError"]

READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


class TlsError(ConnectionError):
    """The TLS handshake failed: the reason is OpenSSL's, with what it usually means."""


class Transport:
    sock: Any
    wants = READ                          # what the last BlockingIOError waits for
    encrypted = False
    zero_copy = True                      # sendfile moves file pages without passing them through us

    def handshake(self) -> bool:
        return True

    def recv_into(self, view: Any) -> int:
        raise NotImplementedError

    def send(self, view: Any) -> int:
        raise NotImplementedError

    def sendfile(self, fd: int, offset: int, count: int) -> int | None:
        """Bytes of `fd` sent without a copy through user space, or None where this transport
        cannot (the caller writes them itself)."""
        return None

    def write(self, view: Any) -> int:
        """send(), with 0 for "would block" (the file-like form LazyDownConvertRecords.write_to
        takes)."""
        try:
            return self.send(view)
        except BlockingIOError:
            return 0

    def pending(self) -> int:
        """Bytes read from the socket and not yet returned (TLS records decrypted ahead): the
        selector will not report them, so a reader drains them first."""
        return 0

    def fileno(self) -> int:
        return int(self.sock.fileno())

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class PlainTransport(Transport):
    __slots__ = ("sock",)

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def recv_into(self, view: Any) -> int:
        return int(self.sock.recv_into(view))

    def send(self, view: Any) -> int:
        return int(self.sock.send(view))

    def sendfile(self, fd: int, offset: int, count: int) -> int | None:
        return os.sendfile(self.sock.fileno(), fd, offset, count)


class TlsTransport(Transport):
    """TLS over a connected non-blocking socket (`server_side`, or a client checking
    `server_hostname` when the context verifies hostnames)."""

    encrypted = True

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, *, server_side: bool,
                 server_hostname: str | None = None):
        self.sock: ssl.SSLSocket = context.wrap_socket(
            sock, server_side=server_side, server_hostname=None if server_side else server_hostname,
            do_handshake_on_connect=False)
        self.done = False
        self.kernel_tls = False
        self.zero_copy = False

    def handshake(self) -> bool:
        if self.done:
            return True
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self.wants = READ
            return False
        except ssl.SSLWantWriteError:
            self.wants = WRITE
            return False
        except ssl.SSLCertVerificationError as exc:
            raise TlsError(f"TLS handshake failed: certificate not trusted: {exc.verify_message}") from None
        except ssl.SSLError as exc:
            raise TlsError(f"TLS handshake failed: {_explain(exc)}") from None
        except (ConnectionError, OSError) as exc:
            raise TlsError(f"TLS handshake failed: the peer closed the connection ({exc}); is "
                           "its listener TLS?") from None
        self.done = True
        self.kernel_tls = kernel_tls_send(self.sock)
        self.zero_copy = self.kernel_tls
        return True

    def recv_into(self, view: Any) -> int:
        try:
            return self.sock.recv_into(view)
        except ssl.SSLWantReadError:
            self.wants = READ
            raise BlockingIOError from None
        except ssl.SSLWantWriteError:
            self.wants = WRITE
            raise BlockingIOError from None
        except ssl.SSLZeroReturnError:
            return 0                              # close_notify: end of stream
        except ssl.SSLEOFError:
            return 0

    def send(self, view: Any) -> int:
        try:
            return self.sock.send(view)
        except ssl.SSLWantWriteError:
            self.wants = WRITE
            raise BlockingIOError from None
        except ssl.SSLWantReadError:
            self.wants = READ
            raise BlockingIOError from None

    def sendfile(self, fd: int, offset: int, count: int) -> int | None:
        if not self.kernel_tls:
            return None
        return os.sendfile(self.sock.fileno(), fd, offset, count)

    def pending(self) -> int:
        return self.sock.pending() if self.done else 0

    @property
    def peer_certificate(self) -> Any:
        """The peer's certificate (DER bytes) or None."""
        try:
            return self.sock.getpeercert(binary_form=True)
        except (ValueError, OSError):
            return None


def _explain(exc: ssl.SSLError) -> str:
    reason = getattr(exc, "reason", None) or str(exc)
    hints = {
        "WRONG_VERSION_NUMBER": "the peer does not speak TLS (a plaintext client or listener?)",
        "HTTP_REQUEST": "the peer sent HTTP",
        "UNSUPPORTED_PROTOCOL": "the peer offers only TLS versions below 1.2",
        "TLSV1_ALERT_PROTOCOL_VERSION": "the peer refused our TLS version",
        "NO_PROTOCOLS_AVAILABLE": "no TLS version both sides allow",
        "PEER_DID_NOT_RETURN_A_CERTIFICATE": "a client certificate is required",
        "CERTIFICATE_VERIFY_FAILED": "certificate not trusted",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the peer did not trust our certificate",
        "TLSV1_ALERT_UNKNOWN_CA": "the peer did not trust our certificate's CA",
        "SSLV3_ALERT_BAD_CERTIFICATE": "the peer refused our certificate",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the peer requires a client certificate",
    }
    hint = hints.get(str(reason))
    return f"{reason} ({hint})" if hint else str(reason)
