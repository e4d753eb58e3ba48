"""Down-conversion throughput: kafkacodec (eager and KIP-283 lazy chunks) vs the peers' only way.

Run (a few minutes; one core is used):

    /work/venv/bin/python -m pytest bench/bench_downconvert.py --benchmark-enable \
        --benchmark-min-rounds=3 --benchmark-max-time=0.5 --benchmark-columns=min,median -q

or, for a compact table without pytest-benchmark's one:

    /work/venv/bin/python bench/bench_downconvert.py

Inputs: 4 MiB v2 logs as a producer writes them (16 KiB batches, i.e. 16 records of 1 KiB or
~130 of 100 bytes) uncompressed, lz4 and gzip; every implementation converts the same log.  kafka-python and aiokafka have no down-converter: the
peers' path is to decode every batch and rebuild it as v1/v0 with their legacy builders (one
wrapper per compressed batch, like Kafka).  "memcpy" copies the input once: the machine's floor
for anything that reads and writes every byte.  MB/s count input bytes; records/s converted
records.  Medians are noisy on a shared machine; the table uses the best round.
"""

from __future__ import annotations

import json
import os
import platform
import random
import struct
import sys
import time

import aiokafka
import kafka
import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioV2Builder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

from kafkacodec import LazyDownConvertRecords, down_convert

CODECS = {"none": 0, "gzip": 1, "lz4": 3}
RECORD_SIZES = {"1KiB": 1024, "100B": 100}
# every implementation converts the same log: times compare (4 MiB; smoke runs set KC_BENCH_MB=1)
LOG_BYTES = min(4, int(os.environ.get("KC_BENCH_MB", "4"))) << 20
CHUNKS = [16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20]


def values(size, count, seed):
    """JSON-like values of `size` bytes: field names repeat, numbers and ids vary (compresses
    about 2-3x, like typical event data)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        doc = b""
        while len(doc) < size:
            doc += json.dumps({"user": f"user_{rng.randrange(10**6)}", "event": rng.choice(
                ["click", "view", "purchase"]), "ts": 1_700_000_000_000 + rng.randrange(10**9),
                "session": rng.randbytes(8).hex(), "amount": rng.randrange(10**5)}).encode()
        out.append(doc[:size])
    return out


def make_log(record_size, codec, total, seed=1):
    """A v2 log of ~`total` bytes: distinct 16 KiB producer batches (aiokafka's builder), with
    base offsets patched in sequence as the broker assigns them."""
    per_batch = max(1, (16 << 10) // (record_size + 20))
    batches = []
    for b in range(8):
        builder = AioV2Builder(2, codec, 0, -1, -1, -1, 1 << 30)
        vals = values(record_size, per_batch, seed + b)
        for i, value in enumerate(vals):
            builder.append(i, timestamp=1_700_000_000_000 + i, key=b"key-%08d" % i, value=value,
                           headers=[])
        batches.append(bytes(builder.build()))
    out = bytearray()
    offset = 0
    i = 0
    while len(out) < total:
        batch = bytearray(batches[i % len(batches)])
        struct.pack_into(">q", batch, 0, offset)
        out += batch
        offset += per_batch
        i += 1
    return bytes(out), offset


def peer_kafka_python(data, magic):
    out = bytearray()
    for batch in KpMemoryRecords(data):
        builder = KpLegacyBuilder(magic, batch.compression_type, 1 << 30)
        for rec in batch:
            builder.append(rec.offset, rec.timestamp, rec.key, rec.value)
        out += builder.build()
    return out


def peer_aiokafka(data, magic):
    out = bytearray()
    records = AioMemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        builder = AioLegacyBuilder(magic, batch.compression_type, 1 << 30)
        for rec in batch:
            builder.append(rec.offset, rec.timestamp, rec.key, rec.value)
        out += builder.build()
    return out


def lazy_all(data, magic, chunk):
    for _ in LazyDownConvertRecords(data, magic, chunk_size=chunk):
        pass


_LOGS: dict = {}


def log(record, codec):
    key = (record, codec)
    if key not in _LOGS:
        _LOGS[key] = make_log(RECORD_SIZES[record], CODECS[codec], LOG_BYTES)
    return _LOGS[key]


def make(impl, record, codec, magic):
    """(function, input bytes, records) for one implementation; None if it cannot do it."""
    if impl == "aiokafka" and magic == 0 and codec == "lz4":
        return None                  # aiokafka refuses to write magic-0 LZ4
    data, count = log(record, codec)
    if impl in ("kafka-python", "aiokafka"):
        fn = peer_kafka_python if impl == "kafka-python" else peer_aiokafka
        return (lambda: fn(data, magic)), len(data), count
    if impl == "memcpy":
        src = np.frombuffer(data, dtype=np.uint8)
        dst = np.empty_like(src)
        return (lambda: np.copyto(dst, src)), len(data), count
    if impl == "kafkacodec-eager":
        return (lambda: down_convert(data, magic)), len(data), count
    chunk = int(impl.rsplit("-", 1)[1]) << 10
    return (lambda: lazy_all(data, magic, chunk)), len(data), count


IMPLS = (["kafkacodec-eager"] + [f"kafkacodec-lazy-{c >> 10}" for c in CHUNKS]
         + ["kafka-python", "aiokafka", "memcpy"])
CASES = [(r, c, m) for r in RECORD_SIZES for c in CODECS for m in (1, 0)]


def case_impls(record, codec, magic):
    # every chunk size for the KIP's case (1 KiB, uncompressed, v1); the default chunk elsewhere
    if (record, codec, magic) == ("1KiB", "none", 1):
        return IMPLS
    return ["kafkacodec-eager", "kafkacodec-lazy-128", "kafka-python", "aiokafka", "memcpy"]


@pytest.mark.parametrize("impl,record,codec,magic",
                         [(i, r, c, m) for r, c, m in CASES for i in case_impls(r, c, m)])
def test_down_convert(benchmark, impl, record, codec, magic):
    made = make(impl, record, codec, magic)
    if made is None:
        pytest.skip(f"{impl} cannot write v{magic} {codec}")
    fn, size, count = made
    benchmark.group = f"v2->v{magic} {record} {codec}"
    benchmark.extra_info.update(input_bytes=size, records=count)
    benchmark(fn)


def machine_facts():
    return (f"Python {platform.python_version()} {platform.machine()}, {os.cpu_count()} cpus; "
            f"kafka-python {kafka.__version__}, aiokafka {aiokafka.__version__}")


def main():
    """Print a table: MB/s and records/s per implementation (best of several rounds)."""
    print(machine_facts())
    print(f"{'case':24}{'impl':22}{'MB/s':>9}{'Mrec/s':>9}{'x kafka-py':>11}{'x aiokafka':>11}")
    for record, codec, magic in CASES:
        rates = {}
        for impl in case_impls(record, codec, magic):
            made = make(impl, record, codec, magic)
            if made is None:
                continue
            fn, size, count = made
            fn()
            best = float("inf")
            budget = time.perf_counter() + 1.0
            rounds = 0
            while rounds < 3 or time.perf_counter() < budget:
                start = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - start)
                rounds += 1
            rates[impl] = (size / best / 1e6, count / best / 1e6)
        for impl, (mbs, mrs) in rates.items():
            extra = ""
            if impl.startswith("kafkacodec"):
                extra = "".join(f"{mrs / rates[p][1]:>11.1f}" if p in rates else f"{'n/a':>11}"
                                for p in ("kafka-python", "aiokafka"))
            print(f"{f'v2->v{magic} {record} {codec}':24}{impl:22}{mbs:>9.0f}{mrs:>9.2f}{extra}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
