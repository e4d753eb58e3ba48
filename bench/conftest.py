"""Shared benchmark data and conventions for bench/ (pytest-benchmark).

Conventions that bench/report.py reads (set them through the `meta` fixture; it also accepts
extra_info["library"] or the parameter id as the implementation):
  benchmark.group              the workload, e.g. "decode v2 lz4 100k records"
  extra_info["impl"]           "kafkacodec", "aiokafka", "kafka-python" or "limit" (machine limit)
  extra_info["bytes"]          bytes processed per round (for MB/s)
  extra_info["items"]          records processed per round (for records/s)
Data is made once per session, with kafka-python (an independent writer), deterministically.
KC_BENCH_MB scales the big-buffer workloads (default 64 MB; the issue's figure is 256).
KC_BENCH_RECORDS shrinks the record workloads for smoke runs (`report.py --quick`; default 100,000:
the groups keep their "100k" names).
"""

from __future__ import annotations

import os
import platform
import random
import sys
from importlib import metadata

import pytest

SCALE_MB = int(os.environ.get("KC_BENCH_MB", "64"))
N_RECORDS = int(os.environ.get("KC_BENCH_RECORDS", "100000"))
PER_BATCH = 1_000
KEY_SIZE, VALUE_SIZE = 10, 100
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def pytest_benchmark_update_machine_info(config, machine_info):
    """Versions and machine facts recorded with every result (report.py prints them)."""
    versions = {}
    for dist in ("kafkacodec", "aiokafka", "kafka-python", "confluent-kafka", "numpy", "lz4",
                 "zstandard", "cramjam", "crc32c", "Cython", "pytest-benchmark"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    machine_info["kafkacodec_versions"] = versions
    facts = {"python": sys.version.split()[0], "platform": platform.platform(),
             "cpu_count": os.cpu_count(), "scale_mb": SCALE_MB,
             "env": {k: os.environ.get(k) for k in ("KC_BENCH_MB", "KAFKACODEC_BENCH_SHALLOW_MB")}}
    try:
        with open("/proc/cpuinfo") as f:
            facts["cpu_model"] = next((line.split(":", 1)[1].strip() for line in f
                                       if line.startswith("model name")), None)
    except OSError:
        facts["cpu_model"] = platform.processor() or None
    try:
        from kafkacodec import _crc

        facts["crc32c_hardware"] = _crc.crc32c_is_hardware()
    except ImportError:
        pass
    machine_info["kafkacodec_facts"] = facts


@pytest.fixture
def meta(benchmark):
    """meta(group, impl, nbytes=None, items=None): label a benchmark for bench/report.py."""

    def label(group: str, impl: str, nbytes: int | None = None, items: int | None = None):
        benchmark.group = group
        benchmark.extra_info["impl"] = impl
        if nbytes is not None:
            benchmark.extra_info["bytes"] = int(nbytes)
        if items is not None:
            benchmark.extra_info["items"] = int(items)
        return benchmark

    return label


@pytest.fixture(scope="session")
def records_100k() -> list[tuple[bytes, bytes]]:
    """The issue's workload: 100,000 records, 10-byte keys, 100-byte values (compressible)."""
    rng = random.Random(7)
    words = [bytes(rng.choice(b"abcdefghijklmnop") for _ in range(8)) for _ in range(64)]
    out = []
    for i in range(N_RECORDS):
        value = b" ".join(rng.choice(words) for _ in range(12))[:VALUE_SIZE].ljust(VALUE_SIZE, b".")
        out.append((b"key-%06d" % i, value))
    return out


def kafka_python_log(records, magic: int = 2, codec: str = "none",
                     per_batch: int = PER_BATCH) -> bytes:
    """A log of `records` in batches of `per_batch`, written by kafka-python."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    parts = []
    for start in range(0, len(records), per_batch):
        chunk = records[start:start + per_batch]
        if magic == 2:
            builder = DefaultRecordBatchBuilder(2, CODEC_IDS[codec], False, -1, -1, -1, 1 << 30)
            for i, (key, value) in enumerate(chunk):
                builder.append(i, 1_700_000_000_000 + start + i, key, value, [])
        else:
            builder = LegacyRecordBatchBuilder(magic, CODEC_IDS[codec], 1 << 30)
            for i, (key, value) in enumerate(chunk):
                builder.append(i, 1_700_000_000_000 + start + i if magic else None, key, value)
        batch = bytearray(builder.build())
        batch[0:8] = start.to_bytes(8, "big")  # absolute base offset (not covered by the CRC)
        parts.append(bytes(batch))
    return b"".join(parts)


_LOGS: dict[tuple, bytes] = {}


@pytest.fixture(scope="session")
def log_of(records_100k):
    """log_of(magic, codec) -> the 100k-record log (cached for the session)."""

    def make(magic: int = 2, codec: str = "none") -> bytes:
        key = (magic, codec)
        if key not in _LOGS:
            _LOGS[key] = kafka_python_log(records_100k, magic, codec)
        return _LOGS[key]

    return make


@pytest.fixture(scope="session")
def big_uncompressed_log() -> bytes:
    """~KC_BENCH_MB of 16 KiB uncompressed v2 batches (shallow iteration + CRC workload)."""
    rng = random.Random(3)
    value = bytes(rng.getrandbits(8) for _ in range(16_000))
    one = kafka_python_log([(b"k", value)], 2, "none", per_batch=1)
    count = SCALE_MB * 1024 * 1024 // len(one)
    parts = []
    for n in range(count):
        batch = bytearray(one)
        batch[0:8] = n.to_bytes(8, "big")
        parts.append(batch)
    return b"".join(parts)


@pytest.fixture(scope="session")
def big_buffer() -> bytes:
    """KC_BENCH_MB of random bytes (memcpy and checksum limits)."""
    return os.urandom(SCALE_MB * 1024 * 1024)
