"""A realistic mixed sample log, as a broker upgraded from 0.8 to 3.x would hold it.

Each partition's log is one dense offset sequence starting at 0: magic 0 message sets (every
legacy codec, LZ4 with the 0.8/0.9 header checksum), then magic 1 (CreateTime and LogAppendTime,
compressed wrappers), then magic 2 batches: every codec, headers (with null values), tombstones,
null keys, an idempotent producer, transactions ended by COMMIT and ABORT markers, LogAppendTime
batches and a leader-epoch change.  Deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from kafkacodec._atomic import atomic_output
from kafkacodec._builder import MemoryRecordsBuilder
from kafkacodec._types import TimestampType

__all__ = ["sample_log", "sample_segments", "write_sample_log"]

BASE_TIME_MS = 1_700_000_000_000
EVENTS = ["view", "click", "add_to_cart", "purchase", "logout"]


class _Partition:
    """Appends batches at the log end offset, keeping per-producer sequences like a broker."""

    def __init__(self, partition: int, seed: int, records_per_batch: int):
        self.partition = partition
        self.rng = random.Random(seed * 1_000_003 + partition)
        self.records_per_batch = records_per_batch
        self.batches: list[tuple[int, bytes]] = []        # (base offset, batch)
        self.next_offset = 0
        self.clock = BASE_TIME_MS + partition * 7
        self.sequences: dict[int, int] = {}

    def _record(self, headers: bool
                ) -> tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        rng = self.rng
        self.clock += rng.randint(0, 40)
        user = rng.randint(1, 500)
        timestamp = self.clock - (rng.randint(1, 5_000) if rng.random() < 0.05 else 0)  # late events
        key = None if rng.random() < 0.1 else b"user-%d" % user
        if rng.random() < 0.05:
            value = None                                                          # tombstone
        else:
            value = json.dumps({"user": user, "event": rng.choice(EVENTS),
                                "amount": round(rng.uniform(0, 250), 2),
                                "ts": timestamp}, separators=(",", ":")).encode()
        record_headers: list[tuple[str, bytes | None]] = []
        if headers and rng.random() < 0.7:
            record_headers = [("trace-id", b"%016x" % rng.getrandbits(64)),
                              ("source", rng.choice([b"web", b"ios", b"android", b""]))]
            if rng.random() < 0.3:
                record_headers.append(("retry", None))                           # null value
        return timestamp, key, value, record_headers

    def add(self, magic: int, codec: str, *, log_append: bool = False, producer_id: int = -1,
            transactional: bool = False, leader_epoch: int = -1) -> None:
        kwargs: dict[str, Any] = {}
        if log_append:
            self.clock += 3
            kwargs.update(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=self.clock)
        if producer_id != -1:
            kwargs.update(producer_id=producer_id, producer_epoch=0,
                          base_sequence=self.sequences.get(producer_id, 0), is_transactional=transactional)
        builder = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=self.next_offset,
                                       partition_leader_epoch=leader_epoch, **kwargs)
        count = self.rng.randint(1, self.records_per_batch)
        for _ in range(count):
            timestamp, key, value, headers = self._record(headers=magic == 2)
            builder.append(timestamp if magic else -1, key, value, headers)
        self._emit(builder.build(), count)
        if producer_id != -1:
            self.sequences[producer_id] = self.sequences.get(producer_id, 0) + count

    def end_transaction(self, producer_id: int, commit: bool, leader_epoch: int) -> None:
        self.clock += 5
        marker = MemoryRecordsBuilder.build_end_txn_marker(
            commit, producer_id, 0, coordinator_epoch=leader_epoch + 1, base_offset=self.next_offset,
            timestamp=self.clock, partition_leader_epoch=leader_epoch)
        self._emit(marker, 1)

    def _emit(self, batch: bytes, count: int) -> None:
        self.batches.append((self.next_offset, batch))
        self.next_offset += count


def _partition_batches(partition: int, seed: int, records_per_batch: int) -> list[tuple[int, bytes]]:
    log = _Partition(partition, seed, records_per_batch)
    # 0.8/0.9 era: magic 0
    for codec in ("none", "gzip", "snappy", "lz4", "none"):
        log.add(0, codec)
    # 0.10 era: magic 1, a topic switched to LogAppendTime for a while
    for codec in ("none", "gzip", "snappy", "lz4"):
        log.add(1, codec)
    log.add(1, "gzip", log_append=True)
    log.add(1, "none", log_append=True)
    # 0.11+ : magic 2
    epoch = 0
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        log.add(2, codec, leader_epoch=epoch)
    idempotent, transactional = 1000 + partition, 2000 + partition
    log.add(2, "lz4", producer_id=idempotent, leader_epoch=epoch)
    log.add(2, "zstd", producer_id=transactional, transactional=True, leader_epoch=epoch)
    log.add(2, "none", leader_epoch=epoch)                       # interleaved non-transactional
    log.add(2, "zstd", producer_id=transactional, transactional=True, leader_epoch=epoch)
    log.end_transaction(transactional, commit=True, leader_epoch=epoch)
    epoch = 1                                                    # leader change
    log.add(2, "lz4", producer_id=idempotent, leader_epoch=epoch)
    log.add(2, "snappy", producer_id=transactional, transactional=True, leader_epoch=epoch)
    log.end_transaction(transactional, commit=False, leader_epoch=epoch)
    log.add(2, "gzip", log_append=True, leader_epoch=epoch)
    log.add(2, "none", log_append=True, leader_epoch=epoch)
    log.add(2, "zstd", leader_epoch=epoch)
    return log.batches


def sample_log(partition: int = 0, *, seed: int = 0, records_per_batch: int = 20) -> bytes:
    """One partition's whole log (offsets 0..n-1, dense) as bytes."""
    return b"".join(batch for _, batch in _partition_batches(partition, seed, records_per_batch))


def sample_segments(topic: str = "sample", partitions: int = 2, *, seed: int = 0,
                    records_per_batch: int = 20,
                    batches_per_segment: int | None = None) -> list[tuple[str, bytes]]:
    """The segment files of one topic's sample log as (`<topic>-<partition>/<20-digit base
    offset>.log`, content), in order.

    batches_per_segment: roll a new segment after this many batches (None: one segment per
    partition).  Each segment is named after the first offset it holds, as Kafka names them."""
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    if records_per_batch < 1:
        raise ValueError("records_per_batch must be at least 1")
    if batches_per_segment is not None and batches_per_segment < 1:
        raise ValueError("batches_per_segment must be at least 1 (or None)")
    segments = []
    for partition in range(partitions):
        batches = _partition_batches(partition, seed, records_per_batch)
        step = batches_per_segment or len(batches)
        for start in range(0, len(batches), step):
            chunk = batches[start:start + step]
            segments.append((f"{topic}-{partition}/{chunk[0][0]:020d}.log",
                             b"".join(batch for _, batch in chunk)))
    return segments


def write_sample_log(directory: str | Path, *, topic: str = "sample", partitions: int = 2,
                     seed: int = 0, records_per_batch: int = 20,
                     batches_per_segment: int | None = None) -> list[Path]:
    """Write sample_segments() under `directory` (the layout of a broker's log directory),
    each file atomically (_atomic.atomic_output); return the segment paths in order."""
    paths = []
    for name, content in sample_segments(topic, partitions, seed=seed, records_per_batch=records_per_batch,
                                         batches_per_segment=batches_per_segment):
        path = Path(directory) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path) as out:
            out.write(content)
        paths.append(path)
    return paths
