"""One broker connection as a Cluster keeps it: the network layer's Connection (kafkacodec.net),
its ResponseReader (the ring, KIP-81 muting, the requests in flight), and what the Cluster
learns over it (the broker's api versions) and lends out (responses the caller still holds).

Not thread-safe: a link belongs to one Cluster, on one loop.
"""

from __future__ import annotations

from typing import Any

from kafkacodec._ring import ResponseRingBuffer
from kafkacodec.net.client import InFlight, ResponseReader
from kafkacodec.net.connection import Connection

__all__ = ["BrokerLink"]


class BrokerLink:
    """The connection to broker `node_id` for `purpose` ("data" or "coordinator")."""

    def __init__(self, node_id: int, purpose: str, name: str, reader: ResponseReader):
        self.node_id = node_id
        self.purpose = purpose
        self.name = name
        self.reader = reader
        self.conn: Connection | None = None         # set once connecting started
        self.api_versions: dict[int, tuple[int, int]] | None = None   # api key -> (min, max)
        self.authenticated = False                  # SASL done (or not needed)
        self.leases = 0                             # responses the caller still holds
        self.error: BaseException | None = None     # why the Cluster closed it

    def __repr__(self) -> str:
        return f"<BrokerLink {self.name} in_flight={len(self.reader.in_flight)}>"

    @property
    def closed(self) -> bool:
        return self.conn is None or self.conn.closed

    @property
    def ready(self) -> bool:
        """Connected, versions known and authenticated: requests go out now."""
        return not self.closed and self.api_versions is not None and self.authenticated

    @property
    def ring(self) -> ResponseRingBuffer | None:
        return self.reader.ring

    @property
    def muted(self) -> bool:
        return self.reader.muted

    @property
    def in_flight(self) -> dict[int, InFlight]:
        return self.reader.in_flight

    def send(self, frame: Any, request: InFlight, correlation_id: int) -> None:
        assert self.conn is not None
        self.reader.send(self.conn, frame, request, correlation_id)

    def next_correlation_id(self) -> int:
        return self.reader.next_correlation_id()

    def take_ring(self) -> bool:
        return self.reader.take_ring()

    def release_ring_if_idle(self) -> bool:
        return self.conn is not None and self.reader.release_ring_if_idle(self.conn)

    def unmute(self) -> None:
        """Memory may have returned (the pool's, or the ring's): read again if it can now."""
        if self.conn is not None:
            self.reader.unmute(self.conn)
