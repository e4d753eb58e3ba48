"""Up-conversion throughput: kafkacodec's up_convert against Kafka 3.9's own LogValidator.

Run (about a minute; needs java, javac and mvn for Kafka 3.9.1's jars):

    /work/venv/bin/python bench/bench_upconvert.py

Inputs: produce requests as an old producer sends them, 16 KiB of records (1 KiB or 100 B
values, JSON-like) as magic 1 messages, uncompressed (one message per entry) or in one lz4
wrapper.  Both sides append the same set with toMagic 2 (tests/java/UpConvertOracle.java runs
kafka-storage's LogValidator with a CreateTime topic, compression.type=producer): Java's time
is the thread CPU time of `repeat` appends after a JIT warm-up, ours the thread CPU time of the
same number of up_convert calls, best of five rounds each.  Records/s count input records.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))

from kafkacodec import MemoryRecordsBuilder, up_convert  # noqa: E402

NOW = 1_700_000_000_000
BATCH_BYTES = 16 << 10
REPEAT = 2000


def values(size: int, count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [(b'{"id":%d,"user":"u%06d","amount":%d.%02d,"tags":["a","b"],"pad":"' % (
        i, rng.randrange(10**6), rng.randrange(10**4), rng.randrange(100))).ljust(size - 2, b"x") + b'"}'
        for i in range(count)]


def produce_set(size: int, codec: str) -> tuple[bytes, int]:
    count = max(1, BATCH_BYTES // size)
    builder = MemoryRecordsBuilder(magic=1, compression=codec)
    for i, value in enumerate(values(size, count, size)):
        builder.append(NOW - i, b"key-%d" % i, value)
    return builder.build(), count


def ours_cpu_seconds(data: bytes, repeat: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        for _ in range(repeat):
            up_convert(data, now=NOW)
        best = min(best, time.thread_time() - start)
    return best


def main() -> int:
    import pytest  # noqa: F401  (tests/test_upconvert.py's oracle uses pytest.skip)
    from test_upconvert import Oracle, JAVA_SOURCE

    import kafka_broker
    import subprocess
    import tempfile

    cp = kafka_broker.classpath(kafka_broker.DOWNCONVERSION_VERSION, tools=("java", "javac", "mvn"))
    classes = Path(tempfile.mkdtemp(prefix="upconvert-bench-"))
    subprocess.run(["javac", "-d", str(classes), "-cp", cp, str(JAVA_SOURCE)], check=True)
    oracle = Oracle(cp, classes)
    print(f"{'input':<16} {'kafkacodec rec/s':>18} {'Kafka 3.9 rec/s':>18} {'ratio':>7}")
    try:
        for size in (100, 1024):
            for codec in ("none", "lz4"):
                data, count = produce_set(size, codec)
                oracle.call(data, now=NOW, repeat=REPEAT * 3)            # JIT warm-up
                java = min(oracle.call(data, now=NOW, repeat=REPEAT)[2] for _ in range(5)) / 1e9
                ours = ours_cpu_seconds(data, REPEAT)
                theirs_rate, ours_rate = count * REPEAT / java, count * REPEAT / ours
                label = f"{size} B {codec}"
                print(f"{label:<16} {ours_rate:>18,.0f} {theirs_rate:>18,.0f} {ours_rate / theirs_rate:>6.2f}x")
    finally:
        oracle.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
