"""Building record batches: kafkacodec vs aiokafka's compiled builders vs kafka-python, same data,
same run.  Run: python -m pytest bench/bench_build.py --benchmark-enable -q

(1) 100,000 records (10-byte keys, 100-byte values) in 1,000-record v2 batches, none/lz4/zstd;
(4) the same through v1 and v0 message sets, none/gzip.
kafkacodec runs one append() call per record, and append_many() per batch from Python lists
and (v2) from pyarrow binary arrays (converted once, in the warmup round)."""

import os
import platform

import aiokafka
import kafka
import pytest

from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioV2Builder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder as KpV2Builder
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder

import kafkacodec
from kafkacodec import Compression, MemoryRecordsBuilder

RESULTS: dict[str, dict[str, float]] = {}

RECORDS = int(os.environ.get("KC_BENCH_RECORDS", "100000"))   # bench/gate.py: fewer
PER_BATCH = 1_000
TIMESTAMP = 1_700_000_000_000
IMPLS = ["kafkacodec", "kafkacodec-append_many", "aiokafka", "kafka-python"]


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    """Print every group's best times and ratios to kafkacodec's when the module is done.
    Best round (min), not median: on a shared machine the rest mostly measures the neighbours."""
    yield
    if not RESULTS:
        return
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\nkafkacodec {kafkacodec.__version__}, aiokafka {aiokafka.__version__}, kafka-python "
              f"{kafka.__version__}, Python {platform.python_version()}, {platform.machine()}")
        for group, times in RESULTS.items():
            ours = min(t for name, t in times.items() if name.startswith("kafkacodec"))
            print(f"{group}:")
            for name, seconds in sorted(times.items(), key=lambda item: item[1]):
                print(f"    {name:<24} {seconds * 1e3:9.1f} ms  {RECORDS / seconds / 1e6:6.2f} M records/s"
                      f"  x{seconds / ours:.2f}")


@pytest.fixture(scope="module")
def data():
    rng = os.urandom
    # Compressible values (a repeated alphabet with a random tail) so codecs have work to do.
    values = [b"abcdefghij" * 9 + rng(10) for _ in range(RECORDS)]
    keys = [rng(10) for _ in range(RECORDS)]
    return keys, values


def ours_per_record(magic, codec):
    def run(keys, values):
        builder = MemoryRecordsBuilder(magic=magic, compression=codec)
        append = builder.append
        out = []
        for start in range(0, RECORDS, PER_BATCH):
            for i in range(start, start + PER_BATCH):
                append(TIMESTAMP, keys[i], values[i])
            out.append(builder.build())
        return out
    return run


def ours_columnar(magic, codec):
    def run(keys, values):
        builder = MemoryRecordsBuilder(magic=magic, compression=codec)
        out = []
        for start in range(0, RECORDS, PER_BATCH):
            builder.append_many(TIMESTAMP, keys[start:start + PER_BATCH], values[start:start + PER_BATCH])
            out.append(builder.build())
        return out
    return run


def ours_arrow(magic, codec):
    import pyarrow as pa

    columns = {}

    def run(keys, values):
        # The Arrow columns are input data, made once like the lists (not timed after warmup).
        if not columns:
            columns.update(keys=pa.array(keys, pa.binary()), values=pa.array(values, pa.binary()))
        key_column, value_column = columns["keys"], columns["values"]
        builder = MemoryRecordsBuilder(magic=magic, compression=codec)
        out = []
        for start in range(0, RECORDS, PER_BATCH):
            builder.append_many(TIMESTAMP, key_column.slice(start, PER_BATCH),
                                value_column.slice(start, PER_BATCH))
            out.append(builder.build())
        return out
    return run


def peer_v2(builder_cls, codec):
    codec_id = Compression[codec.upper()]

    def run(keys, values):
        out = []
        for start in range(0, RECORDS, PER_BATCH):
            builder = builder_cls(2, codec_id, 0, -1, -1, -1, 1 << 30)
            append = builder.append
            for i in range(start, start + PER_BATCH):
                append(i - start, TIMESTAMP, keys[i], values[i], [])
            out.append(bytes(builder.build()))
        return out
    return run


def peer_legacy(builder_cls, magic, codec):
    codec_id = Compression[codec.upper()]

    def run(keys, values):
        out = []
        for start in range(0, RECORDS, PER_BATCH):
            builder = builder_cls(magic, codec_id, 1 << 30)
            append = builder.append
            for i in range(start, start + PER_BATCH):
                append(i - start, TIMESTAMP, keys[i], values[i])
            out.append(bytes(builder.build()))
        return out
    return run


def implementation(impl, magic, codec):
    if impl == "kafkacodec":
        return ours_per_record(magic, codec)
    if impl == "kafkacodec-append_many":
        return ours_columnar(magic, codec)
    if impl == "kafkacodec-arrow":
        return ours_arrow(magic, codec)
    if magic == 2:
        return peer_v2(AioV2Builder if impl == "aiokafka" else KpV2Builder, codec)
    return peer_legacy(AioLegacyBuilder if impl == "aiokafka" else KpLegacyBuilder, magic, codec)


def run_bench(benchmark, data, impl, magic, codec):
    benchmark.group = f"build v{magic} {codec}: {RECORDS:,} records"
    run = implementation(impl, magic, codec)
    # Few rounds: the machine is shared; the ratio summary uses each side's best round.
    ours = impl.startswith("kafkacodec")
    batches = benchmark.pedantic(run, args=data, rounds=5 if ours else 3, iterations=1,
                                 warmup_rounds=0 if impl == "kafka-python" else 1)
    if benchmark.stats is not None:   # None with --benchmark-disable
        RESULTS.setdefault(benchmark.group, {})[impl] = benchmark.stats.stats.min
        benchmark.extra_info["records_per_second"] = round(RECORDS / benchmark.stats.stats.min)
    assert len(batches) == RECORDS // PER_BATCH
    return batches


@pytest.mark.parametrize("impl", IMPLS + ["kafkacodec-arrow"])
@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_build_v2(benchmark, data, impl, codec):
    run_bench(benchmark, data, impl, 2, codec)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest.mark.parametrize("magic", [1, 0])
def test_build_legacy(benchmark, data, impl, magic, codec):
    run_bench(benchmark, data, impl, magic, codec)
