"""Where `kafkacodec serve` listens: one bound socket per entry of Kafka's `listeners` (PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL), each with its TLS context, SASL mechanisms and the address
clients are told (Metadata and FindCoordinator answer with the listener a request came in on,
as Kafka's `advertised.listeners`).

Zero-copy: a PLAINTEXT/SASL_PLAINTEXT listener sends segment bytes with `sendfile`; a TLS one
asks for kernel TLS (`ssl.OP_ENABLE_KTLS`, Python 3.12+ with OpenSSL 3 and the kernel's `tls`
module) and, where a connection gets it, still sends with `sendfile` (the kernel encrypts);
otherwise the bytes go through one bounded buffer per connection being written
(kafkacodec.net.pieces).  `zero_copy` says which the listener can do; the startup lines and the
`kafkacodec_serve_listener_info` metric show it.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

from kafkacodec.net.properties import Listener
from kafkacodec.net.transport import PlainTransport, TlsTransport, Transport

__all__ = ["Listening", "bind", "parse_advertised"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass
class Listening:
    """A listener bound: its settings, socket, TLS context and advertised address."""
    listener: Listener
    sock: socket.socket
    host: str
    port: int
    advertised: tuple[str, int]
    tls: ssl.SSLContext | None = None

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def protocol(self) -> str:
        return self.listener.security_protocol

    @property
    def zero_copy(self) -> str:
        """How segment bytes leave: "sendfile", "kernel TLS" (when the kernel takes the
        connection's keys, else buffered) or "buffered" (read and encrypted in user space)."""
        if self.tls is None:
            return "sendfile"
        return "kernel TLS" if self.tls.options & getattr(ssl, "OP_ENABLE_KTLS", 0) else "buffered"

    @property
    def secured(self) -> bool:
        return self.protocol != "PLAINTEXT"

    def transport(self, sock: socket.socket) -> Transport:
        if self.tls is None:
            return PlainTransport(sock)
        return TlsTransport(sock, self.tls, server_side=True)

    def describe(self) -> str:
        return (f"listener {self.name} {self.protocol} {self.host}:{self.port}: advertised as "
                f"{self.advertised[0]}:{self.advertised[1]}, sending segments with {self.zero_copy}"
                + (f", SASL {' '.join(self.listener.sasl_enabled_mechanisms)}"
                   if self.listener.uses_sasl else ""))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def bind(listener: Listener, tls: ssl.SSLContext | None, advertised: tuple[str, int] | None,
         backlog: int = 128) -> Listening:
    """Bind and listen (port 0: any free port); `advertised` defaults to the bound address
    (127.0.0.1 for a wildcard host)."""
    host = listener.host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, listener.port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    port = sock.getsockname()[1]
    if advertised is None:
        advertised = ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host, port)
    elif advertised[1] == 0:
        advertised = (advertised[0], port)
    return Listening(listener, sock, host, port, advertised, tls)


def parse_advertised(text: str | None) -> dict[str, tuple[str, int]]:
    """Kafka's `advertised.listeners` (NAME://HOST:PORT,...) -> {NAME: (host, port)}."""
    out: dict[str, tuple[str, int]] = {}
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, rest = entry.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ValueError(f"advertised.listeners: {entry!r} is not NAME://HOST:PORT")
        out[name.upper()] = (host.strip("[]"), int(port))
    return out

