"""A sample Kafka log directory, as a broker would have written it: the data behind
`kafkacodec generate DIR` and the Spark tests.

Layout: `<topic>-<partition>/<20-digit base offset>.log`.
- `events-0`, `events-1`: v2 batches cycling through every codec, keys, headers, an idempotent
  producer, and transactions closed by COMMIT and ABORT control batches; segments rolled at
  `segment_bytes`.
- `legacy-0`: the history of an upgraded broker: v0 messages (plain and a gzip wrapper), v1
  messages (plain, snappy, lz4, a LogAppendTime gzip wrapper), then v2 batches.

The batches are written by kafka-python's builders (an independent implementation), patched as
a broker patches them (base offsets, wrapper offsets and timestamps, control batches).
TODO(merge): build with kafkacodec.MemoryRecordsBuilder once it is on main.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kafkacodec import _crc

__all__ = ["generate", "SampleSummary", "segment_name"]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TIME = 1_700_000_000_000


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


@dataclass
class SampleSummary:
    directory: str
    records: int = 0                     # data records written (control records excluded)
    control_records: int = 0
    aborted_records: int = 0
    files: list[str] = field(default_factory=list)
    per_topic: Counter = field(default_factory=Counter)
    bytes: int = 0


def _builders():
    try:
        from kafka.record.default_records import DefaultRecordBatchBuilder
        from kafka.record.legacy_records import LegacyRecordBatchBuilder
    except ImportError:  # pragma: no cover - depends on the environment
        from kafkacodec.errors import UnsupportedVersionError
        raise UnsupportedVersionError(
            "generating the sample log needs kafka-python for now: pip install kafka-python") from None
    return DefaultRecordBatchBuilder, LegacyRecordBatchBuilder


def _v2_batch(base_offset, records, codec, *, producer_id=-1, producer_epoch=-1, base_sequence=-1,
              transactional=False, control=False, leader_epoch=0):
    """records: (timestamp, key, value, headers) tuples, offsets dense from base_offset."""
    Default, _ = _builders()
    b = Default(magic=2, compression_type=CODECS.index(codec), is_transactional=transactional,
                producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    if control:
        buf[22] |= 0x20
        struct.pack_into(">I", buf, 17, _crc.crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _marker(offset, producer_id, epoch, commit, ts):
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 7)                     # coordinator epoch 7
    return _v2_batch(offset, [(ts, key, value, [])], "none", producer_id=producer_id,
                     producer_epoch=epoch, transactional=True, control=True)


def _legacy(magic, base_offset, records, codec, *, log_append_time=None):
    """v0/v1: uncompressed → one entry per record; compressed → one broker-style wrapper."""
    _, Legacy = _builders()
    c = CODECS.index(codec)
    b = Legacy(magic=magic, compression_type=c, batch_size=1 << 30)
    for i, (ts, key, value) in enumerate(records):
        inner = i if (magic == 1 and c) else base_offset + i
        b.append(inner, timestamp=ts if magic else None, key=key, value=value)
    buf = bytearray(b.build())
    if not c:
        return bytes(buf)
    last = base_offset + len(records) - 1
    struct.pack_into(">q", buf, 0, last)                 # wrapper offset = last inner offset
    if magic == 1:
        attributes = buf[17] | (0x08 if log_append_time is not None else 0)
        ts = log_append_time if log_append_time is not None else max(r[0] for r in records)
        buf[17] = attributes
        struct.pack_into(">q", buf, 18, ts)
        struct.pack_into(">I", buf, 12, zlib.crc32(memoryview(buf)[16:]))
    return bytes(buf)


class _Partition:
    def __init__(self, root: Path, topic: str, partition: int, segment_bytes: int, summary):
        self.dir = root / f"{topic}-{partition}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topic = topic
        self.segment_bytes = segment_bytes
        self.summary = summary
        self.next_offset = 0
        self.file = None
        self.file_size = 0

    def append(self, entry: bytes, n_offsets: int, data_records: int):
        if self.file is None or self.file_size >= self.segment_bytes:
            if self.file:
                self.file.close()
            path = self.dir / segment_name(self.next_offset)
            self.file = open(path, "wb")
            self.summary.files.append(str(path))
            self.file_size = 0
        self.file.write(entry)
        self.file_size += len(entry)
        self.summary.bytes += len(entry)
        self.summary.per_topic[self.topic] += data_records
        self.summary.records += data_records
        self.next_offset += n_offsets

    def close(self):
        if self.file:
            self.file.close()


def _value(rng: random.Random, i: int, size: int) -> bytes:
    head = b'{"id":%d,"amount":%d,"note":"' % (i, rng.randrange(10**6))
    return head + bytes(rng.choice(b"abcdefghij") for _ in range(max(0, size - len(head) - 2))) + b'"}'


def generate(directory, *, batches: int = 60, seed: int = 1, segment_bytes: int = 64 * 1024,
             value_size: int = 100) -> SampleSummary:
    """Write the sample log under `directory` (created; existing segment files are replaced)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    summary = SampleSummary(str(root))
    ts = BASE_TIME

    for p in (0, 1):
        part = _Partition(root, "events", p, segment_bytes, summary)
        pid = 1000 + p
        epoch = 0
        seq = 0
        for n in range(batches):
            codec = CODECS[n % len(CODECS)]
            count = rng.randint(1, 40)
            records = []
            for i in range(count):
                ts += rng.randint(0, 3)
                key = None if i % 11 == 5 else b"user-%d" % rng.randrange(500)
                value = None if i % 17 == 16 else _value(rng, part.next_offset + i, value_size)
                headers = [("trace", b"t-%d" % i), ("empty", None)] if i % 3 == 0 else []
                records.append((ts, key, value, headers))
            txn = n % 6 == 3
            if txn:
                part.append(_v2_batch(part.next_offset, records, codec, producer_id=pid,
                                      producer_epoch=epoch, base_sequence=seq, transactional=True),
                            count, count)
                seq += count
                commit = (n // 6) % 2 == 0
                if not commit:
                    summary.aborted_records += count
                part.append(_marker(part.next_offset, pid, epoch, commit, ts), 1, 0)
                summary.control_records += 1
            else:
                part.append(_v2_batch(part.next_offset, records, codec, producer_id=pid + 100,
                                      producer_epoch=0, base_sequence=n * 1000), count, count)
        part.close()

    legacy = _Partition(root, "legacy", 0, segment_bytes, summary)

    def plain(count, magic):
        nonlocal ts
        out = []
        for i in range(count):
            ts += 1
            out.append((ts, b"k%d" % i if i % 2 else None, _value(rng, i, value_size)))
        return out

    for magic, codec, lat in ((0, "none", None), (0, "gzip", None), (1, "none", None),
                              (1, "snappy", None), (1, "lz4", None), (1, "gzip", BASE_TIME + 999)):
        recs = plain(rng.randint(3, 12), magic)
        if codec == "none":
            for r in recs:
                legacy.append(_legacy(magic, legacy.next_offset, [r], codec), 1, 1)
        else:
            legacy.append(_legacy(magic, legacy.next_offset, recs, codec, log_append_time=lat),
                          len(recs), len(recs))
    for codec in CODECS:
        recs = [(t, k, v, []) for t, k, v in plain(8, 2)]
        legacy.append(_v2_batch(legacy.next_offset, recs, codec), 8, 8)
    legacy.close()
    return summary
