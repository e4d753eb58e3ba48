"""A tiny blocking client for the tests: connect, send a framed request, read one
size-prefixed response.  No retries, no pipelining, no SASL/TLS: not a production client."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar, Union

from kafkacodec import WriteBuffer
from kafkacodec._inuse import InUse
from kafkacodec.errors import CorruptRecordError, RecordTooLargeError
from kafkacodec.protocol._fetch import decode_fetch_response, encode_fetch_request
from kafkacodec.protocol._metadata import (
    decode_api_versions_response,
    decode_metadata_response,
    encode_api_versions_request,
    encode_metadata_request,
)
from kafkacodec.protocol._produce import decode_produce_response, encode_produce_request
from kafkacodec.protocol._types import (
    ApiVersionsResponse,
    FetchResponse,
    MetadataResponse,
    ProduceResponse,
)

__all__ = ["BlockingClient"]

_SIZE = struct.Struct(">i")


class _Response(Protocol):
    @property
    def correlation_id(self) -> int | None: ...


# A framed request: what the encoders return (bytes, or our WriteBuffer) or any byte buffer.
_Frame = Union[bytes, bytearray, memoryview, WriteBuffer]


_R = TypeVar("_R", bound=_Response)


class BlockingClient:
    """One TCP connection to one broker.  ``request(frame)`` returns the response payload
    (starting at the correlation id) as a bytearray, the buffer the decoders slice into.

    Not for concurrent use: a request and its response are two socket calls, so a second
    thread's send(), receive() or request() while one runs raises ConcurrentUseError instead
    of taking another thread's response."""

    def __init__(self, host: str, port: int, *, client_id: str = "kafkacodec",
                 timeout: float = 10.0, max_response_bytes: int = 256 * 1024 * 1024):
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_id = 0
        self._in_use = InUse("BlockingClient")

    @classmethod
    def from_bootstrap(cls, bootstrap: str, **kwargs: Any) -> BlockingClient:
        """Connect to the first "host:port" of a bootstrap list."""
        host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
        return cls(host, int(port), **kwargs)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        return self._correlation_id

    def send(self, frame: _Frame) -> None:
        with self._in_use:
            self._sock.sendall(frame)

    def receive(self) -> bytearray:
        """Read one int32-size-prefixed response; return the bytes after the size."""
        with self._in_use:
            return self._receive()

    def _receive(self) -> bytearray:
        size = _SIZE.unpack(self._recv_exactly(4))[0]
        if size < 4:
            raise CorruptRecordError(f"response size {size} is below a correlation id", position=0)
        if size > self.max_response_bytes:
            raise RecordTooLargeError(
                f"response of {size} bytes exceeds max_response_bytes={self.max_response_bytes}",
                position=0)
        return self._recv_exactly(size)

    def _recv_exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError(f"connection closed after {got} of {n} bytes")
            got += k
        return buf

    def request(self, frame: _Frame) -> bytearray:
        with self._in_use:
            self._sock.sendall(frame)
            return self._receive()

    # --- conveniences ---------------------------------------------------------------------
    def api_versions(self, api_version: int = 2) -> ApiVersionsResponse:
        cid = self.next_correlation_id()
        frame = encode_api_versions_request(api_version=api_version, correlation_id=cid,
                                            client_id=self.client_id)
        return self._check(decode_api_versions_response(self.request(frame), api_version), cid)

    def metadata(self, topics: Iterable[str] | None = None, api_version: int = 12) -> MetadataResponse:
        cid = self.next_correlation_id()
        frame = encode_metadata_request(topics, api_version=api_version, correlation_id=cid,
                                        client_id=self.client_id)
        return self._check(decode_metadata_response(self.request(frame), api_version), cid)

    def fetch(self, topics: Any, api_version: int = 12, **kwargs: Any) -> FetchResponse:
        """Send a FetchRequest; the decoded response's records are views of a fresh buffer."""
        cid = self.next_correlation_id()
        frame = encode_fetch_request(topics, api_version=api_version, correlation_id=cid,
                                     client_id=self.client_id, **kwargs)
        return self._check(decode_fetch_response(self.request(frame), api_version), cid)

    def produce(self, topic_data: Any, api_version: int = 9, **kwargs: Any) -> ProduceResponse:
        cid = self.next_correlation_id()
        frame = encode_produce_request(topic_data, api_version=api_version, correlation_id=cid,
                                       client_id=self.client_id, **kwargs)
        return self.produce_frame(frame, api_version, cid)

    def produce_frame(self, frame: _Frame, api_version: int,
                      correlation_id: int) -> ProduceResponse:
        """Send an already-encoded ProduceRequest (e.g. from fetch_to_produce)."""
        return self._check(decode_produce_response(self.request(frame), api_version),
                           correlation_id)

    @staticmethod
    def _check(response: _R, correlation_id: int) -> _R:
        if response.correlation_id != correlation_id:
            raise CorruptRecordError(
                f"response correlation id {response.correlation_id} != request {correlation_id}",
                position=0)
        return response
