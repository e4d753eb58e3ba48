"""The consumer core (KIP-81 + KAFKA-2045): one ResponseRingBuffer per broker connection, every
ring from one SimpleMemoryPool sized by ``buffer_memory``; connections read only while the pool
can hold what they read.  Several fetches in flight per connection, leader routing from
Metadata, retries with backoff, read_committed with or without the broker's aborted lists, and
the data as raw batches, Arrow record batches or the ring's flyweight records.

Needs the ``kafkacodec[consumer]`` extra (kafka-python, for the control-plane messages).
See docs/consumer.md.

    from kafkacodec.consumer import Consumer

    with Consumer("broker:9092", buffer_memory=64 << 20, isolation_level="read_committed") as c:
        c.assign_topics(["orders"], start="earliest")
        for part in c.poll(timeout=1.0):
            with part:
                for batch in part.batches:        # whole batches, still compressed
                    ...
"""

from kafkacodec.consumer._cluster import (
    DEFAULT_RECEIVE_MESSAGE_MAX_BYTES,
    BrokerError,
    Cluster,
    Reactor,
)
from kafkacodec.consumer._consumer import COORDINATOR_RING_BYTES, DEFAULT_BUFFER_MEMORY, Consumer
from kafkacodec.consumer._forms import FetchedPartition

__all__ = [
    "Consumer",
    "FetchedPartition",
    "BrokerError",
    "Cluster",
    "Reactor",
    "DEFAULT_BUFFER_MEMORY",
    "COORDINATOR_RING_BYTES",
    "DEFAULT_RECEIVE_MESSAGE_MAX_BYTES",
]
