"""(De)compressing one records section per codec: kafkacodec vs kafka-python vs aiokafka.

Run (one core is enough; the numbers are ratios measured side by side in one process):

    /work/venv/bin/python -m pytest bench/bench_compression.py --benchmark-enable \
        --benchmark-max-time=0.5 --benchmark-timer=time.process_time \
        --benchmark-columns=min,median,ops -q

Every implementation decodes the same bytes (Kafka's containers as written by kafkacodec,
which kafka-python and aiokafka read too).  "ours-into" is the Decompressor writing into its
reusable buffer (what the record readers use); "ours-bytes" returns a new bytes object;
"memcpy" copies the decompressed size once, the machine's floor.  The ratio table printed at
the end is peer median time / ours-into median time (higher = we are faster).
Compression is measured too (ours at Kafka's default levels; kafka-python's and aiokafka's
gzip use level 9 and aiokafka's lz4 uses LZ4 HC, so those rows compare different work).
"""

import json
import platform
import random

import aiokafka
import aiokafka.codec as aio
import cramjam
import kafka
import kafka.codec as kp
import lz4
import numpy as np
import pytest
import zstandard

from kafkacodec._compression import Decompressor, compress, decompress

CODECS = ["gzip", "snappy", "lz4", "zstd"]
SIZES = {"16KiB": 16 * 1024, "1MiB": 1024 * 1024}
MAGIC = 2


def records_section(size, seed=7):
    """Record-like bytes: small JSON values with repeated field names, varying numbers."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        value = json.dumps({"user": f"user_{rng.randrange(10_000)}", "event": rng.choice(
            ["click", "view", "purchase", "scroll"]), "ts": 1_700_000_000_000 + rng.randrange(10**9),
            "amount": round(rng.random() * 100, 2), "session": rng.randbytes(6).hex()}).encode()
        out += bytes([len(value) & 0x7F]) + rng.randbytes(4) + value
    return bytes(out[:size])


DATA = {name: records_section(size) for name, size in SIZES.items()}
FRAMES = {(codec, name): compress(codec, MAGIC, DATA[name]) for codec in CODECS for name in SIZES}
PEERS = {
    "kafka-python": {"gzip": kp.gzip_decode, "snappy": kp.snappy_decode, "lz4": kp.lz4_decode,
                     "zstd": kp.zstd_decode},
    "aiokafka": {"gzip": aio.gzip_decode, "snappy": aio.snappy_decode, "lz4": aio.lz4_decode,
                 "zstd": aio.zstd_decode},
}
IMPLS = ["ours-into", "ours-bytes", "kafka-python", "aiokafka", "memcpy"]
ENCODERS = {
    "kafka-python": {"gzip": kp.gzip_encode, "snappy": lambda d: kp.snappy_encode(d, True),
                     "lz4": kp.lz4_encode, "zstd": kp.zstd_encode},
    "aiokafka": {"gzip": aio.gzip_encode, "snappy": lambda d: aio.snappy_encode(d, True),
                 "lz4": aio.lz4_encode, "zstd": aio.zstd_encode},
}
RESULTS = {}


def make(impl, codec, name):
    frame = FRAMES[codec, name]
    if impl == "ours-into":
        d = Decompressor()
        return lambda: d.decompress(codec, MAGIC, frame)
    if impl == "ours-bytes":
        return lambda: decompress(codec, MAGIC, frame)
    if impl == "memcpy":
        src = np.frombuffer(DATA[name], dtype=np.uint8)
        dst = np.empty_like(src)
        return lambda: np.copyto(dst, src)
    return lambda: PEERS[impl][codec](frame)


@pytest.fixture(scope="module", autouse=True)
def ratio_table(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print_table(reporter.write_line if reporter else print)


def print_table(write):
    write("")
    write(f"kafkacodec decompression (magic 2), Python {platform.python_version()}, "
          f"{platform.machine()}; kafka-python {kafka.__version__}, aiokafka {aiokafka.__version__}, "
          f"lz4 {lz4.library_version_string()}, zstandard {zstandard.__version__}, "
          f"cramjam {cramjam.__version__}")
    write(f"{'codec':8}{'size':>7}{'ratio':>9}  {'ours-into':>10}{'ours-bytes':>11}"
          f"{'kafka-py':>10}{'aiokafka':>10}{'memcpy':>10}   MB/s ours-into  x kafka-python  x aiokafka")
    for codec in CODECS:
        for name, size in SIZES.items():
            times = {impl: RESULTS.get((impl, codec, name)) for impl in IMPLS}
            if None in times.values():
                continue
            ours = times["ours-into"]
            cells = "".join(f"{times[i] * 1e6:>10.1f}" for i in IMPLS[:1]) + \
                f"{times['ours-bytes'] * 1e6:>11.1f}" + \
                "".join(f"{times[i] * 1e6:>10.1f}" for i in IMPLS[2:])
            ratio = len(DATA[name]) / len(FRAMES[codec, name])
            write(f"{codec:8}{name:>7}{ratio:>8.1f}x  {cells}   {size / ours / 1e6:>9.0f}"
                  f"  {times['kafka-python'] / ours:>13.2f}  {times['aiokafka'] / ours:>9.2f}")
    write("(times are medians in microseconds)")
    write(f"{'compress':8}{'size':>7}  {'ours':>10}{'kafka-py':>10}{'aiokafka':>10}"
          f"   MB/s ours  x kafka-python  x aiokafka")
    for codec in CODECS:
        for name, size in SIZES.items():
            times = {impl: RESULTS.get(("compress-" + impl, codec, name))
                     for impl in ("ours", "kafka-python", "aiokafka")}
            if None in times.values():
                continue
            ours = times["ours"]
            write(f"{codec:8}{name:>7}  " + "".join(f"{t * 1e6:>10.1f}" for t in times.values())
                  + f"   {size / ours / 1e6:>9.0f}  {times['kafka-python'] / ours:>13.2f}"
                  f"  {times['aiokafka'] / ours:>9.2f}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("codec", CODECS)
def test_decompress(benchmark, codec, name, impl):
    fn = make(impl, codec, name)
    if impl != "memcpy":
        assert bytes(fn()) == DATA[name]
    benchmark.group = f"decompress {codec} {name}"
    benchmark(fn)
    if benchmark.stats is not None:
        RESULTS[impl, codec, name] = benchmark.stats.stats.median


@pytest.mark.parametrize("impl", ["ours", "kafka-python", "aiokafka"])
@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("codec", CODECS)
def test_compress(benchmark, codec, name, impl):
    data = DATA[name]
    if impl == "ours":
        fn = lambda: compress(codec, MAGIC, data)      # noqa: E731
    else:
        fn = lambda: ENCODERS[impl][codec](data)        # noqa: E731
    assert decompress(codec, MAGIC, fn()) == data
    benchmark.group = f"compress {codec} {name}"
    benchmark(fn)
    if benchmark.stats is not None:
        RESULTS["compress-" + impl, codec, name] = benchmark.stats.stats.median
