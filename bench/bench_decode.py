"""Reading benchmarks: kafkacodec against aiokafka's compiled codecs and kafka-python, same data,
same run (issue 2 workloads 2, 3 and 4).  Ratios (peer time / kafkacodec time) are printed at
the end of the module.

    /work/venv/bin/python -m pytest bench/bench_decode.py --benchmark-enable -p no:cacheprovider

KAFKACODEC_BENCH_SHALLOW_MB sets the size of the shallow-iteration log (default 256).
"""

import os
import platform
import struct

import pytest

import aiokafka
import kafka
from aiokafka.record._crecords import (DefaultRecordBatchBuilder as AioDefaultBuilder,
                                       LegacyRecordBatchBuilder as AioLegacyBuilder,
                                       MemoryRecords as AioMemoryRecords)
from kafka.record import MemoryRecords as KpMemoryRecords

import kafkacodec
from kafkacodec import MemoryRecords
from kafkacodec import _crc

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDS = int(os.environ.get("KC_BENCH_RECORDS", "100000"))   # bench/gate.py: fewer
PER_BATCH = 1_000
SHALLOW_MB = int(os.environ.get("KAFKACODEC_BENCH_SHALLOW_MB", "256"))
RESULTS = {}          # group -> {library: (min seconds, median seconds)}
SHALLOW_BYTES = []
SLOWDOWN = int(os.environ.get("KC_BENCH_SLOWDOWN", "1"))   # kafkacodec's work done N times a round


def _slowed(fn, times):
    def run(*args):
        for _ in range(times - 1):
            fn(*args)
        return fn(*args)
    return run


def _payloads(n, seed=7):
    # Repetitive but not constant text, so codecs have something to do (like JSON-ish data).
    words = [b"alpha", b"beta", b"gamma", b"delta", b"omega", b"kafka", b"record", b"batch"]
    out = []
    for i in range(n):
        value = b" ".join(words[(i * 7 + j * seed) % 8] for j in range(20))[:90]
        value += b"%010d" % i
        out.append((b"key%07d" % i, value))
    return out


def build_v2_log(codec):
    out = bytearray()
    payloads = _payloads(RECORDS)
    for start in range(0, RECORDS, PER_BATCH):
        b = AioDefaultBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
        for i in range(PER_BATCH):
            key, value = payloads[start + i]
            b.append(i, 1_700_000_000_000 + start + i, key, value, [])
        batch = b.build()
        batch[0:8] = struct.pack(">q", start)
        out += batch
    return bytes(out)


def build_legacy_log(magic, codec):
    out = bytearray()
    payloads = _payloads(RECORDS)
    per_wrapper = PER_BATCH if codec else RECORDS
    for start in range(0, RECORDS, per_wrapper):
        b = AioLegacyBuilder(magic, codec, 1 << 30)
        for i in range(per_wrapper):
            key, value = payloads[start + i]
            b.append(start + i, 1_700_000_000_000 + start + i, key, value)
        out += b.build()
    return bytes(out)


def build_shallow_log(megabytes):
    b = AioDefaultBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(138):                     # 138 records of ~118 bytes: a ~16 KB batch
        b.append(i, 1_700_000_000_000 + i, b"k%09d" % i, b"v" * 100, [])
    batch = bytes(b.build())
    count = megabytes * 1024 * 1024 // len(batch)
    # BaseOffset is outside the CRC: every copy stays a valid batch with its own offsets.
    return b"".join(struct.pack(">q", i * 138) + batch[8:] for i in range(count)), len(batch)


# --- decoders under test ---------------------------------------------------------------------

def decode_kafkacodec(data):
    n = 0
    for record in MemoryRecords(data).records():
        record.value
        n += 1
    return n


def decode_peer(memory_records, data):
    n = 0
    records = memory_records(data)
    while (batch := records.next_batch()) is not None:
        for record in batch:
            record.value
            n += 1
    return n


DECODERS = {
    "kafkacodec": decode_kafkacodec,
    "aiokafka": lambda data: decode_peer(AioMemoryRecords, data),
    "kafka-python": lambda data: decode_peer(KpMemoryRecords, data),
}


def _run(benchmark, group, library, fn, *args, rounds=15):
    benchmark.group = group
    if library == "kafkacodec" and SLOWDOWN > 1:          # bench/gate.py --slow-down: the gate's proof
        fn = _slowed(fn, SLOWDOWN)
    benchmark.extra_info["library"] = library
    if "records" in group:                                 # bench/report.py: records/s
        benchmark.extra_info["items"] = RECORDS
    result = benchmark.pedantic(fn, args=args, rounds=rounds if library != "kafka-python" else 3,
                                iterations=1, warmup_rounds=1 if library != "kafka-python" else 0)
    if benchmark.stats is not None:   # None with --benchmark-disable
        stats = benchmark.stats.stats
        RESULTS.setdefault(group, {})[library] = (stats.min, stats.median)
    return result


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    """Print every group's medians and the peers' ratios when the module is done."""
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        _print_ratios(print)


def _print_ratios(write):
    write("")
    write(f"kafkacodec {kafkacodec.__version__}, aiokafka {aiokafka.__version__}, kafka-python "
          f"{kafka.__version__}, Python {platform.python_version()}, {platform.machine()}, "
          f"CRC-32C hardware: {_crc.crc32c_is_hardware()}")
    write("ratios = peer time / kafkacodec time, from the best round (min) and the median; the "
          "min is the least disturbed by other load on the machine")
    for group, times in RESULTS.items():
        ours = times.get("kafkacodec") or times.get("kafkacodec validate()")
        line = [f"{group:<36}"]
        for library, (best, median) in times.items():
            text = f"{library} {best * 1e3:.1f} ms"
            if group.startswith("shallow") and SHALLOW_BYTES:
                text += f" = {SHALLOW_BYTES[0] / best / 1e9:.2f} GB/s"
            if ours and not library.startswith("kafkacodec"):
                text += f" ({best / ours[0]:.2f}x min, {median / ours[1]:.2f}x median)"
            line.append(text)
        write(" | ".join(line))


# --- (2) decode v2 to Python records, every codec ------------------------------------------

@pytest.fixture(scope="module")
def v2_logs():
    return {name: build_v2_log(codec) for name, codec in CODECS.items()}


@pytest.mark.parametrize("library", list(DECODERS))
@pytest.mark.parametrize("codec", list(CODECS))
def test_decode_v2(benchmark, v2_logs, codec, library):
    n = _run(benchmark, f"decode v2 {RECORDS // 1000}k records {codec}", library, DECODERS[library],
             v2_logs[codec])
    assert n == RECORDS


# --- (4) decode v1/v0, none/gzip -------------------------------------------------------------

@pytest.fixture(scope="module")
def legacy_logs():
    return {(magic, codec): build_legacy_log(magic, CODECS[codec])
            for magic in (0, 1) for codec in ("none", "gzip")}


@pytest.mark.parametrize("library", list(DECODERS))
@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest.mark.parametrize("magic", [1, 0])
def test_decode_legacy(benchmark, legacy_logs, magic, codec, library):
    n = _run(benchmark, f"decode v{magic} {RECORDS // 1000}k records {codec}", library, DECODERS[library],
             legacy_logs[magic, codec])
    assert n == RECORDS


# --- (3) shallow iteration with CRC check over ~256 MB of 16 KB batches ----------------------

@pytest.fixture(scope="module")
def shallow_log():
    data, batch_size = build_shallow_log(SHALLOW_MB)
    SHALLOW_BYTES[:] = [len(data)]
    return data


def shallow_kafkacodec_objects(data):
    n = 0
    for batch in MemoryRecords(data).batches():
        batch.ensure_valid()
        n += 1
    return n


def shallow_kafkacodec_validate(data):
    return MemoryRecords(data).validate()


def shallow_peer(memory_records, data):
    n = 0
    records = memory_records(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        n += 1
    return n


SHALLOW = {
    "kafkacodec validate()": shallow_kafkacodec_validate,
    "kafkacodec batches()+ensure_valid()": shallow_kafkacodec_objects,
    "aiokafka": lambda data: shallow_peer(AioMemoryRecords, data),
    "kafka-python": lambda data: shallow_peer(KpMemoryRecords, data),
    "machine: crc32c over the buffer": lambda data: _crc.crc32c(data),
    "machine: bytes copy": lambda data: len(bytearray(data)),
}


@pytest.mark.parametrize("library", list(SHALLOW))
def test_shallow_crc(benchmark, shallow_log, library):
    group = f"shallow+CRC {len(shallow_log) >> 20} MB of 16 KB v2"
    _run(benchmark, group, library, SHALLOW[library], shallow_log, rounds=5)
    if group in RESULTS:
        best = RESULTS[group][library][0]
        benchmark.extra_info["GB/s"] = round(len(shallow_log) / best / 1e9, 2)
