"""Columnar decode (kafkacodec._arrow) against per-record decode, same data, same run:
aiokafka's compiled records, kafka-python, and kafkacodec's own MemoryRecords objects.
Every decoder touches the same fields per record (offset, timestamp, key, value, headers).

    /work/venv/bin/python -m pytest bench/bench_arrow.py --benchmark-enable -p no:cacheprovider
    python bench/bench_arrow.py [RECORDS]   # quick table (CPU time, best of 5; default 200,000)
    (the installed kafkacodec; PYTHONPATH=. for a checkout built in place)

Like for like: "kafkacodec-arrow" and "aiokafka-crc" check every batch's CRC (both consumers'
default), "kafkacodec-arrow-nocrc" and "aiokafka" check none.

Workload (issue 6 target): uncompressed v2, 100-byte values, 1000 records per batch; the
codec variants show where decompression takes over.
"""

import os
import struct
import sys
import time

import pytest

from aiokafka.record._crecords import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record._crecords import MemoryRecords as AioMemoryRecords
from kafka.record import MemoryRecords as KpMemoryRecords

from kafkacodec import MemoryRecords
from kafkacodec._arrow import ArrowDecoder

RECORDS = int(os.environ.get("KC_BENCH_RECORDS", "200000"))   # smaller in smoke runs
PER_BATCH = 1_000
CODECS = {"none": 0, "lz4": 3, "zstd": 4}


def build_log(codec: int, records: int = RECORDS) -> bytes:
    out = bytearray()
    for start in range(0, records, PER_BATCH):
        b = AioBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
        for i in range(PER_BATCH):
            n = start + i
            value = (b"%010d:" % n) + b"payload-" * 11 + b"x" * 1      # 100 bytes
            b.append(i, 1_700_000_000_000 + n, b"key-%06d" % (n % 50_000), value[:100],
                     [("trace", b"%d" % n)] if n % 4 == 0 else [])
        batch = b.build()
        batch[0:8] = struct.pack(">q", start)
        out += batch
    return bytes(out)


def arrow(data, validate_crc=True):
    """Default batch bounds (65536 rows / 16 MiB), as the Spark reader uses it.  CRCs are
    checked by default; the peers' record iteration checks none (Kafka's neither)."""
    dec = ArrowDecoder("t", 0, validate_crc=validate_crc)
    pos, n = 0, 0
    while pos < len(data):
        rb, pos = dec.decode(data, pos)
        n += rb.num_rows
    return n


def ours_per_record(data):
    n = 0
    for r in MemoryRecords(data).records():
        r.offset, r.timestamp, r.key, r.value, r.headers
        n += 1
    return n


def peer(memory_records, data, validate_crc=False):
    n = 0
    records = memory_records(data)
    while (batch := records.next_batch()) is not None:
        if validate_crc and not batch.validate_crc():      # what its consumer does by default
            raise ValueError("CRC mismatch")
        for r in batch:
            r.offset, r.timestamp, r.key, r.value, r.headers
            n += 1
    return n


DECODERS = {
    "kafkacodec-arrow": arrow,
    "kafkacodec-arrow-nocrc": lambda d: arrow(d, validate_crc=False),
    "kafkacodec-records": ours_per_record,
    "aiokafka": lambda d: peer(AioMemoryRecords, d),
    "aiokafka-crc": lambda d: peer(AioMemoryRecords, d, validate_crc=True),
    "kafka-python": lambda d: peer(KpMemoryRecords, d),
}


@pytest.fixture(scope="module")
def logs():
    return {name: build_log(codec) for name, codec in CODECS.items()}


@pytest.mark.parametrize("library", list(DECODERS))
@pytest.mark.parametrize("codec", list(CODECS))
def test_columnar_vs_per_record(benchmark, logs, codec, library):
    if library == "kafka-python" and codec != "none":
        pytest.skip("kafka-python is only measured on the target workload")
    benchmark.group = f"decode v2 {codec}, 100-byte values"
    benchmark.extra_info["records"] = RECORDS
    # one warm-up round: the first decode maps the buffers later rounds reuse
    n = benchmark.pedantic(DECODERS[library], args=(logs[codec],), rounds=5, iterations=1,
                           warmup_rounds=1)
    assert n == RECORDS


def main(records: int = RECORDS) -> None:
    rows = []
    for codec_name, codec in CODECS.items():
        data = build_log(codec, records)
        for name, fn in DECODERS.items():
            if name == "kafka-python" and codec_name != "none":
                continue
            _timed(fn, data, records)                # warm-up: buffers get mapped once
            best = min(_timed(fn, data, records) for _ in range(5))
            rows.append((codec_name, name, records / best))
    for codec_name in CODECS:
        ours = next(r for c, n, r in rows if c == codec_name and n == "kafkacodec-arrow")
        for c, n, r in rows:
            if c == codec_name:
                print(f"{c:5} {n:24} {r / 1e6:8.2f} M records/s   arrow is x{ours / r:5.1f}")


def _timed(fn, data, records):
    # CPU time of this process: on a shared machine wall time mostly measures the neighbours.
    t = time.process_time()
    n = fn(data)
    assert n == records
    return max(time.process_time() - t, 1e-6)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else RECORDS))
