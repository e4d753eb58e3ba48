"""The consumer core against confluent-kafka's consumer, in the same run, from the same
librdkafka mock cluster (3 brokers, living in this process; each consumer runs in a subprocess
of its own, so its CPU time is its own):

- raw: whole batches (kafkacodec: FetchedPartition.batches, nothing decompressed) against
  confluent-kafka delivering every message (value and key touched); bytes/s of source batches;
- Arrow: records/s decoded into pyarrow RecordBatches (FetchedPartition.to_arrow) against
  confluent-kafka's records/s.

    python bench/bench_consumer.py [MB]

The mock answers one batch per Fetch (a real broker fills the response), so wall-clock rates
are the mock's round trips as much as the consumer; CPU seconds per GB are the consumer's.
"""

from __future__ import annotations

import json
import os
import platform
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

OURS = """
import json, sys, time
import numpy, pyarrow
pyarrow.array(numpy.zeros(1, dtype=numpy.int32))      # pyarrow's one-time set-up, not timed
from kafkacodec.consumer import Consumer
bootstrap, topics, form = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
t0, c0 = time.perf_counter(), time.process_time()
consumer = Consumer(bootstrap, buffer_memory=64 << 20)
consumer.assign_topics(topics)
ends = consumer.end_offsets(consumer.assignment())
records = size = 0
while any(consumer.position(tp) < end for tp, end in ends.items()):
    for part in consumer.poll(1.0):
        with part:
            if form == "raw":
                for batch in part.batches:
                    records += batch.record_count
                    size += len(batch.value)
            else:
                size += part.size_in_bytes
                for table in part.to_arrow():
                    records += table.num_rows
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
consumer.close()
print(json.dumps(dict(wall=wall, cpu=cpu, records=records, bytes=size)))
"""

CONFLUENT = """
import json, sys, time
import confluent_kafka as ck
bootstrap, topics, total = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
t0, c0 = time.perf_counter(), time.process_time()
consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                        "enable.auto.commit": False, "auto.offset.reset": "earliest",
                        "fetch.max.bytes": 64 << 20})
consumer.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t in topics for p in range(4)])
records = size = 0
while records < total:
    for msg in consumer.consume(min(10000, total - records), 1.0):   # (never waits for more than are left)
        if msg.error():
            continue
        value = msg.value()
        key = msg.key()
        size += len(value) + (len(key) if key else 0)
        records += 1
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
consumer.close()
print(json.dumps(dict(wall=wall, cpu=cpu, records=records, bytes=size)))
"""


def prepare(megabytes: int = 64) -> tuple[object, list[str], int]:
    """A 3-broker mock cluster holding `megabytes` of lz4 batches in topics of 4 partitions:
    (the cluster, its topics, the record count)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    sys.path.insert(0, HERE)
    import confluent_kafka as ck
    from bench_mirror import _value
    from mock_cluster import MockCluster

    mock = MockCluster(3)
    topics = [f"consumer-bench-{i}" for i in range(max(1, megabytes // 16))]
    producer = ck.Producer({"bootstrap.servers": mock.bootstrap, "compression.type": "lz4",
                            "linger.ms": 50, "batch.size": 256 << 10,
                            "queue.buffering.max.kbytes": 1 << 20})
    rng = random.Random(2)
    records = 0
    for topic in topics:
        mock.create_topic(topic)
        size = 0
        while size < 16 << 20:                        # the mock keeps ~5 MB per partition
            value = _value(rng, records)
            producer.produce(topic, value=value, key=b"key-%d" % (records % 97), partition=records % 4)
            size += len(value) // 2
            records += 1
            if records % 10000 == 0:
                producer.poll(0)
    assert producer.flush(120) == 0
    return mock, topics, records


def run_consumer(script: str, *args: str, code: str = ROOT) -> dict:
    """One consumer in a child process importing kafkacodec from `code` (bench_net_ab.py passes
    another tree; the child's working directory is `code` too, since `python -c` puts it first
    on sys.path): its JSON line."""
    env = dict(os.environ, PYTHONPATH=code)
    run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         env=env, cwd=code, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(megabytes: int = 64) -> None:
    import confluent_kafka as ck

    import kafkacodec

    mock, topics, records = prepare(megabytes)
    runs = {
        "kafkacodec raw batches": [OURS, mock.bootstrap, ",".join(topics), "raw"],
        "kafkacodec -> Arrow": [OURS, mock.bootstrap, ",".join(topics), "arrow"],
        "confluent-kafka messages": [CONFLUENT, mock.bootstrap, ",".join(topics), str(records)],
    }
    results = {name: run_consumer(*args) for name, args in runs.items()}
    wire = results["kafkacodec raw batches"]["bytes"]
    print(f"kafkacodec {kafkacodec.__version__} | confluent-kafka {ck.version()[0]} (librdkafka "
          f"{ck.libversion()[0]}) | {platform.python_implementation()} {platform.python_version()} | "
          f"{os.cpu_count()} CPUs | load {os.getloadavg()[0]:.1f}")
    print(f"{len(topics)} topics x 4 partitions, {records} records, {wire / 1e6:.1f} MB of lz4 "
          f"batches (256 KiB) from a 3-broker mock cluster (one batch per fetch)")
    print(f"{'consumer':26} {'records':>9} {'wall s':>7} {'MB/s':>7} {'krec/s':>8} {'CPU s':>7} "
          f"{'CPU s/GB':>9} {'krec/CPU-s':>11}")
    for name, r in results.items():
        assert r["records"] == records, (name, r["records"], records)
        print(f"{name:26} {r['records']:9d} {r['wall']:7.2f} {wire / 1e6 / r['wall']:7.1f} "
              f"{r['records'] / r['wall'] / 1e3:8.0f} {r['cpu']:7.2f} {r['cpu'] / (wire / 1e9):9.2f} "
              f"{r['records'] / r['cpu'] / 1e3:11.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 64)
