import uuid

from kafkacodec import Compression, MemoryPool, ResponseRingBuffer, SimpleMemoryPool, TimestampType

pool = SimpleMemoryPool(1 << 20, 1 << 16, strict=True)
buf = pool.try_allocate(100, priority=True)
if buf is not None:
    pool.release(buf)
ratio: float = pool.metrics()["memory-pool-avg-depleted-percent"]
ring = ResponseRingBuffer(1 << 16, MemoryPool.NONE)
accepted: int = ring.feed(bytearray(b"abc"))
resp = ring.next_response()
if resp is not None:
    cid: int = resp.correlation_id
    body: bytes = bytes(resp.payload)
    for rec in resp.records(12):
        offset: int = rec.offset
        value: bytes | None = rec.value
        kind: TimestampType = rec.timestamp_type
        codec: Compression = rec.compression
        headers: tuple[tuple[str, bytes | None], ...] = rec.headers
        topic_id: uuid.UUID | None = rec.topic_id
        as_list: list[tuple[str, bytes | None]] = rec.headers  # E: Incompatible types in assignment
    resp.release()
n: str = ring.feed(b"x")  # E: Incompatible types in assignment
pool.try_allocate("5")  # E: Argument 1 to "try_allocate" of "SimpleMemoryPool" has incompatible type "str"
