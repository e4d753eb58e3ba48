"""A broker the test scripts, on 127.0.0.1: it reads framed requests and answers each the way
its `answer(api_key, api_version, body)` says, for the consumer core's failure cases that a real
cluster will not produce (a broker that accepts and never answers, a huge Metadata answer).

It advertises one non-flexible version of each api (every response header is v0: size,
correlation id), so the bodies below are plain big-endian fields (Kafka's protocol guide,
"Protocol Primitive Types").  `answer` returns the response body after the correlation id, or
None (no answer), or (body, trailing bytes) to write right after the framed answer in the same
send (a damaged frame behind a good one).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

from kafkacodec.protocol.api import ApiKey

FETCH, LIST_OFFSETS, METADATA = ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA
OFFSET_COMMIT, OFFSET_FETCH = ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH
FIND_COORDINATOR, API_VERSIONS = ApiKey.FIND_COORDINATOR, ApiKey.API_VERSIONS

#: api key -> (min, max): what the fake broker says it speaks (non-flexible versions).
VERSIONS = {API_VERSIONS: (0, 2), METADATA: (1, 1), FETCH: (4, 4), LIST_OFFSETS: (1, 5),
            FIND_COORDINATOR: (0, 2), OFFSET_COMMIT: (2, 7), OFFSET_FETCH: (1, 5)}

Answer = Callable[[int, int, bytes], "bytes | tuple[bytes, bytes] | None"]


def string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def api_versions_body() -> bytes:
    """ApiVersionsResponse v0-2: error, the api keys, throttle time (v1+; the client asks v2)."""
    keys = b"".join(struct.pack(">hhh", key, low, high) for key, (low, high) in VERSIONS.items())
    return struct.pack(">hi", 0, len(VERSIONS)) + keys + struct.pack(">i", 0)


def metadata_v1_body(port: int, topics: dict[str, int], *, node_id: int = 0,
                     replicas: int = 1) -> bytes:
    """MetadataResponse v1: one broker (this one, `node_id`), `topics` {name: partitions}, every
    partition led by it with `replicas` replica and isr entries."""
    brokers = struct.pack(">ii", 1, node_id) + string("127.0.0.1") + struct.pack(">ih", port, -1)
    nodes = struct.pack(">i", replicas) + struct.pack(">i", node_id) * replicas
    out = [brokers, struct.pack(">ii", node_id, len(topics))]
    for name, count in topics.items():
        out.append(struct.pack(">h", 0) + string(name) + struct.pack(">bi", 0, count))
        out.extend(struct.pack(">hii", 0, p, node_id) + nodes + nodes for p in range(count))
    return b"".join(out)


def fetch_v4_offsets(body: bytes) -> dict[tuple[str, int], int]:
    """The fetch offsets a FetchRequest v4 asks for: {(topic, partition): offset}."""
    pos = 17                          # replica id, max wait, min bytes, max bytes, isolation
    out = {}
    for _ in range(struct.unpack_from(">i", body, pos)[0]):
        n = struct.unpack_from(">h", body, pos + 4)[0]
        topic = body[pos + 6:pos + 6 + n].decode()
        pos += 6 + n
        count = struct.unpack_from(">i", body, pos)[0]
        pos += 4
        for _ in range(count):
            partition, offset = struct.unpack_from(">iq", body, pos)
            out[(topic, partition)] = offset
            pos += 16                 # partition, fetch offset, partition max bytes
    return out


def fetch_v4_body(topic: str, partition: int, records: bytes, high_watermark: int, *,
                  error_code: int = 0) -> bytes:
    """FetchResponse v4 for one partition: `error_code`, no aborted transactions, `records`."""
    return (struct.pack(">ii", 0, 1) + string(topic)
            + struct.pack(">iihqqi", 1, partition, error_code, high_watermark, high_watermark, -1)
            + struct.pack(">i", len(records)) + records)


class FakeBroker:
    """Listens on 127.0.0.1 (``port``); each accepted connection is served by a thread that
    answers requests with `answer` (default: none answered: a broker that accepts and never
    answers).  ``requests`` counts the requests read, by api key."""

    def __init__(self, answer: Answer | None = None):
        self.answer = answer or (lambda key, version, body: None)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.requests: dict[int, int] = {}
        self.connections: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self._lock:
                self.connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                size = struct.unpack(">i", _recv(conn, 4))[0]
                frame = _recv(conn, size)
                key, version, cid, id_len = struct.unpack_from(">hhih", frame)
                body = frame[10 + max(id_len, 0):]
                with self._lock:
                    self.requests[key] = self.requests.get(key, 0) + 1
                answer = self.answer(key, version, body)
                if answer is None:
                    continue
                body, trailing = answer if isinstance(answer, tuple) else (answer, b"")
                conn.sendall(struct.pack(">ii", 4 + len(body), cid) + body + trailing)
        except (OSError, ConnectionError):
            pass

    def close(self) -> None:
        self.server.close()
        with self._lock:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()

    def __enter__(self) -> FakeBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def answering(port_of: Callable[[], int], topics: dict[str, int]) -> Answer:
    """An `answer` that negotiates versions and answers Metadata (naming this broker the leader
    of `topics`), and nothing else: the broker then hangs on the call itself."""
    def answer(key: int, version: int, body: bytes) -> bytes | None:
        if key == API_VERSIONS:
            return api_versions_body()
        if key == METADATA:
            return metadata_v1_body(port_of(), topics)
        return None

    return answer


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def refused_address() -> tuple[str, socket.socket]:
    """A loopback address where nothing listens (bound, not listening: connections refused) and
    the socket that keeps it so: close it after the test."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return f"127.0.0.1:{sock.getsockname()[1]}", sock
