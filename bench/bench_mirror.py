"""FetchResponse -> ProduceRequest mirroring: the shallow path (kafkacodec.mirror, no
decompression, one copy) against the deep path a user would otherwise write with aiokafka or
kafka-python (decode every record, rebuild the batches, recompress), in the same run.

    # summary table (GB/s, batches/s, CPU seconds per GB, CPU ratio deep/shallow):
    python bench/bench_mirror.py
    # the mirror process between two mock clusters against a confluent-kafka deep mirror:
    python bench/bench_mirror.py process [MB]
    # the mirror between two Kafka 4.1 brokers, PLAINTEXT against SASL_SSL (SCRAM-SHA-512):
    python bench/bench_mirror.py kafka [MB] [--rounds 3] [--base OTHER_CHECKOUT] [--base-tls OTHER]
    # pytest-benchmark:
    python -m pytest bench/bench_mirror.py -o python_files='bench_*.py' --benchmark-enable -q

The fetch response holds PARTITIONS x BATCHES v2 batches of ~16 KiB (compressed size on the
wire) of JSON-like records; it is decoded from bytes in every round (zero-copy) and turned into
a ProduceRequest in a reused output buffer.
"""

from __future__ import annotations

import io
import os
import platform
import random
import time
from functools import lru_cache

import pytest

from aiokafka.protocol.fetch import FetchResponse_v10 as AioFetchResponse
from aiokafka.protocol.produce import ProduceRequest_v7 as AioProduceRequest
from aiokafka.record._crecords import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record._crecords import MemoryRecords as AioMemoryRecords
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse
from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest
from kafka.record.memory_records import MemoryRecords as KMemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder as KBuilder

import kafkacodec
from kafkacodec._writer import WriteBuffer
from kafkacodec.mirror import fetch_to_produce
from kafkacodec.protocol import decode_fetch_response

CODECS = {"lz4": 3, "zstd": 4, "gzip": 1}
TARGET_BATCH = 16 * 1024
PARTITIONS = 8
BATCHES = 128            # per partition: 8 x 128 x 16 KiB = 16 MiB per fetch response
FETCH_VERSION = 10       # aiokafka's newest FetchResponse; zstd needs >= 10
PRODUCE_VERSION = 7      # aiokafka's newest ProduceRequest; zstd needs >= 7
TOPIC = "mirror-bench"


def _value(rng: random.Random, i: int) -> bytes:
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    return (f'{{"id": {rng.randrange(1 << 40)}, "seq": {i}, "user": "{rng.getrandbits(64):016x}", '
            f'"event": "{rng.choice(words)}", "tags": ["{rng.choice(words)}", "{rng.choice(words)}"], '
            f'"amount": {rng.random() * 1000:.3f}}}').encode()


def _batch(codec: int, count: int, seed: int) -> bytes:
    rng = random.Random(seed)
    builder = AioBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
    for i in range(count):
        builder.append(i, 1_700_000_000_000 + i, b"key-%d" % (i % 97), _value(rng, i),
                       [("h", b"1")] if i % 10 == 0 else [])
    return bytes(builder.build())


@lru_cache(maxsize=None)
def records_per_batch(codec: int) -> int:
    trial = 200
    size = len(_batch(codec, trial, 0))
    return max(1, int(trial * TARGET_BATCH / size))


@lru_cache(maxsize=None)
def fetch_response(codec: int) -> tuple[bytes, int]:
    """A v10 FetchResponse (as bytes, starting at the correlation id) and its batch count."""
    count = records_per_batch(codec)
    T = KFetchResponse.FetchableTopicResponse
    P = T.PartitionData
    partitions = []
    offset = 0
    for p in range(PARTITIONS):
        batches = []
        for b in range(BATCHES):
            raw = _batch(codec, count, seed=p * 1000 + b % 8)
            batches.append(offset.to_bytes(8, "big") + raw[8:])   # broker-assigned offsets
            offset += count
        partitions.append(P(partition_index=p, error_code=0, high_watermark=offset, last_stable_offset=offset,
                            log_start_offset=0, aborted_transactions=None, records=b"".join(batches)))
    msg = KFetchResponse[FETCH_VERSION](throttle_time_ms=0, error_code=0, session_id=0,
                                        responses=[T(topic=TOPIC, partitions=partitions)])
    msg.with_header(correlation_id=1)
    return bytes(msg.encode(header=True)), PARTITIONS * BATCHES


# --- the three paths -------------------------------------------------------------------------------
_out = WriteBuffer(64 << 20)


def shallow(raw: bytes) -> int:
    response = decode_fetch_response(raw, FETCH_VERSION)
    # every batch of a partition in one request (the peers' paths rebuild them all; a real broker
    # takes one per partition, the default, which would forward 1/BATCHES of the data)
    frame = fetch_to_produce(response, api_version=PRODUCE_VERSION, correlation_id=2, out=_out,
                             max_batches_per_partition=-1)
    return len(frame)


def deep_aiokafka(raw: bytes) -> int:
    """aiokafka: decode the response, every record of every batch, rebuild + recompress."""
    response = AioFetchResponse.decode(io.BytesIO(raw[4:]))
    topics = []
    for topic, partitions in response.topics:
        out_partitions = []
        for partition, _err, _hw, _lso, _lso2, _aborted, records in partitions:
            rebuilt = []
            memory = AioMemoryRecords(records)
            while memory.has_next():
                batch = memory.next_batch()
                builder = AioBuilder(2, batch.compression_type, 0, -1, -1, -1, 1 << 30)
                base = batch.base_offset
                for record in batch:
                    builder.append(record.offset - base, record.timestamp, record.key, record.value,
                                   record.headers)
                rebuilt.append(bytes(builder.build()))
            out_partitions.append((partition, b"".join(rebuilt)))
        topics.append((topic, out_partitions))
    request = AioProduceRequest(transactional_id=None, required_acks=-1, timeout=30000, topics=topics)
    return len(request.encode())


def deep_kafka_python(raw: bytes) -> int:
    """kafka-python: the same with its protocol classes and record builders."""
    response = KFetchResponse.decode(raw, version=FETCH_VERSION, header=True)
    PT = KProduceRequest.TopicProduceData
    PP = PT.PartitionProduceData
    topic_data = []
    for topic in response.responses:
        partition_data = []
        for part in topic.partitions:
            rebuilt = []
            memory = KMemoryRecords(part.records)
            while memory.has_next():
                batch = memory.next_batch()
                builder = KBuilder(2, batch.compression_type, False, -1, -1, -1, 1 << 30)
                base = batch.base_offset
                for record in batch:
                    builder.append(record.offset - base, record.timestamp, record.key, record.value,
                                   list(record.headers))
                rebuilt.append(bytes(builder.build()))
            partition_data.append(PP(index=part.partition_index, records=b"".join(rebuilt)))
        topic_data.append(PT(name=topic.topic, partition_data=partition_data))
    request = KProduceRequest[PRODUCE_VERSION](transactional_id=None, acks=-1, timeout_ms=30000,
                                               topic_data=topic_data)
    return len(request.encode(header=False))


PATHS = {"shallow": shallow, "deep-aiokafka": deep_aiokafka, "deep-kafka-python": deep_kafka_python}


# --- pytest-benchmark ----------------------------------------------------------------------------
@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("path", list(PATHS))
def test_mirror(benchmark, codec, path):
    raw, batches = fetch_response(CODECS[codec])
    fn = PATHS[path]
    assert fn(raw) > 0.99 * len(raw) if path == "shallow" else fn(raw) > 0
    rounds = 30 if path == "shallow" else 1
    benchmark.extra_info.update(bytes=len(raw), batches=batches)
    benchmark.pedantic(fn, args=(raw,), rounds=rounds, iterations=1, warmup_rounds=1 if rounds > 1 else 0)


# --- trim: the first batch of a fetch that starts inside it (trim_batch) -----------------------
@lru_cache(maxsize=None)
def trim_case(case: str) -> tuple[bytes, int]:
    """(batch, fetch offset in its middle): producer-sized v2 batches (uncompressed also with
    400 small records: the per-record walk dominates) and broker-written v0/v1 gzip wrappers."""
    if case.startswith("v2-small"):
        builder = AioBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i in range(400):
            builder.append(i, 1_700_000_000_000 + i, None, b"x" * 30, [])
        return bytes(builder.build()), 200
    if case.startswith("v2-"):
        codec = {"v2-none": 0, "v2-gzip": 1, "v2-lz4": 3}[case]
        count = records_per_batch(codec)
        return _batch(codec, count, 1), count // 2
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    magic = int(case[1])
    rng = random.Random(2)
    builder = LegacyRecordBatchBuilder(magic, 1, 1 << 30)
    for i in range(100):
        builder.append(i, 1_700_000_000_000 + i, b"key-%d" % i, _value(rng, i))
    raw = bytearray(builder.build())
    raw[:8] = (99).to_bytes(8, "big")            # the broker's wrapper offset: the last one
    return bytes(raw), 50


@pytest.mark.parametrize("case", ["v2-none", "v2-small", "v2-gzip", "v2-lz4", "v1-gzip", "v0-gzip"])
def test_trim(benchmark, case):
    from kafkacodec.mirror import trim_batch
    batch, fetch_offset = trim_case(case)
    assert trim_batch(batch, fetch_offset).trimmed
    benchmark(trim_batch, batch, fetch_offset)


# --- framing only: decode a FetchResponse / encode a ProduceRequest of many partitions ----------
FRAMING_PARTITIONS = 1000


@lru_cache(maxsize=None)
def many_partitions() -> tuple[bytes, list]:
    T = KFetchResponse.FetchableTopicResponse
    P = T.PartitionData
    records = _batch(0, 8, 1)
    partitions = [P(partition_index=p, error_code=0, high_watermark=100, last_stable_offset=100,
                    log_start_offset=0, aborted_transactions=None, records=records)
                  for p in range(FRAMING_PARTITIONS)]
    msg = KFetchResponse[FETCH_VERSION](throttle_time_ms=0, error_code=0, session_id=0,
                                        responses=[T(topic=TOPIC, partitions=partitions)])
    msg.with_header(correlation_id=1)
    produce = [(TOPIC, [(p, records) for p in range(FRAMING_PARTITIONS)])]
    return bytes(msg.encode(header=True)), produce


def decode_ours(raw):
    return decode_fetch_response(raw, FETCH_VERSION)


def decode_aiokafka(raw):
    return AioFetchResponse.decode(io.BytesIO(raw[4:]))


def decode_kafka_python(raw):
    return KFetchResponse.decode(raw, version=FETCH_VERSION, header=True)


def encode_ours(topics):
    from kafkacodec.protocol import encode_produce_request
    return encode_produce_request(topics, api_version=PRODUCE_VERSION, out=_out)


def encode_aiokafka(topics):
    return AioProduceRequest(transactional_id=None, required_acks=-1, timeout=30000, topics=topics).encode()


def encode_kafka_python(topics):
    PT = KProduceRequest.TopicProduceData
    PP = PT.PartitionProduceData
    data = [PT(name=t, partition_data=[PP(index=p, records=r) for p, r in parts]) for t, parts in topics]
    return KProduceRequest[PRODUCE_VERSION](transactional_id=None, acks=-1, timeout_ms=30000,
                                            topic_data=data).encode()


FRAMING = {
    "decode FetchResponse": {"kafkacodec": decode_ours, "aiokafka": decode_aiokafka,
                             "kafka-python": decode_kafka_python},
    "encode ProduceRequest": {"kafkacodec": encode_ours, "aiokafka": encode_aiokafka,
                              "kafka-python": encode_kafka_python},
}


@pytest.mark.parametrize("who", ["kafkacodec", "aiokafka", "kafka-python"])
@pytest.mark.parametrize("what", list(FRAMING))
def test_framing(benchmark, what, who):
    raw, produce = many_partitions()
    arg = raw if what.startswith("decode") else produce
    benchmark.extra_info.update(partitions=FRAMING_PARTITIONS)
    benchmark(FRAMING[what][who], arg)


# --- summary ------------------------------------------------------------------------------------------
def measure(fn, raw: bytes, min_seconds: float) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, rounds) over at least min_seconds of wall time."""
    fn(raw)                                           # warm up
    rounds = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while True:
        fn(raw)
        rounds += 1
        wall = time.perf_counter() - wall0
        if wall >= min_seconds:
            return wall, time.process_time() - cpu0, rounds


def memcpy_baseline(raw: bytes) -> tuple[float, float]:
    """The machine's limit for one copy: (wall GB/s, GB per CPU second) of memcpy."""
    buf = bytearray(len(raw))
    view = memoryview(buf)
    view[:] = raw
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(50):
        view[:] = raw
    gb = 50 * len(raw) / 1e9
    return gb / (time.perf_counter() - wall0), gb / (time.process_time() - cpu0)


def main() -> None:
    print(f"kafkacodec {kafkacodec.__version__} | {platform.python_implementation()} "
          f"{platform.python_version()} | {platform.machine()} | {os.cpu_count()} CPUs")
    import aiokafka
    import kafka
    print(f"aiokafka {aiokafka.__version__} | kafka-python {kafka.__version__}")
    print(f"fetch v{FETCH_VERSION} -> produce v{PRODUCE_VERSION}; {PARTITIONS} partitions x {BATCHES} batches")
    print("GB/s = wall clock; GB/CPU-s = bytes per CPU second (one core, robust to a busy machine);")
    print("CPU x = CPU time per GB relative to the shallow path")
    print(f"{'codec':6} {'path':18} {'MiB':>6} {'batch KiB':>9} {'GB/s':>8} {'GB/CPU-s':>9} "
          f"{'batches/s':>11} {'CPU s/GB':>9} {'CPU x':>8}")
    for codec, codec_id in CODECS.items():
        raw, batches = fetch_response(codec_id)
        wall_rate, cpu_rate = memcpy_baseline(raw)
        print(f"{codec:6} {'memcpy (limit)':18} {len(raw) / 2**20:6.1f} {'':9} {wall_rate:8.2f} {cpu_rate:9.2f}")
        shallow_cpu_per_gb = None
        for name, fn in PATHS.items():
            wall, cpu, rounds = measure(fn, raw, 1.0 if name == "shallow" else 0.5)
            gb = rounds * len(raw) / 1e9
            cpu_per_gb = cpu / gb
            if name == "shallow":
                shallow_cpu_per_gb = cpu_per_gb
            print(f"{codec:6} {name:18} {len(raw) / 2**20:6.1f} {len(raw) / batches / 1024:9.1f} "
                  f"{gb / wall:8.3f} {gb / cpu:9.3f} {rounds * batches / wall:11.0f} {cpu_per_gb:9.4f} "
                  f"{cpu_per_gb / shallow_cpu_per_gb:8.1f}")


    raw, produce = many_partitions()
    print(f"\nframing only, {FRAMING_PARTITIONS} partitions of {len(produce[0][1][0][1])} bytes")
    for what, impls in FRAMING.items():
        arg = raw if what.startswith("decode") else produce
        base = None
        for who, fn in impls.items():
            wall, cpu, rounds = measure(fn, arg, 0.5)
            per_call = cpu / rounds
            base = base or per_call
            print(f"{what:22} {who:13} {per_call * 1e6:10.1f} us/call  {per_call / base:6.1f}x")


# --- the mirror process --------------------------------------------------------------------------
# `kafkacodec mirror` (this package's Mirror, in a subprocess) against the MirrorMaker pattern
# written with confluent-kafka (consume every record, produce it again: librdkafka decompresses,
# Python touches each message, librdkafka recompresses), in the same run, between the same two
# librdkafka mock clusters (3 brokers each, living in this process: their CPU is not counted).
# CPU-seconds of each mirror process (all its threads, from the start of the work: interpreter
# start and imports left out) per GB of source batches.

OURS = """
import json, resource, sys, time
from kafkacodec.mirror import Mirror, MirrorConfig
source, target, topics, state = sys.argv[1:5]
t0, c0 = time.perf_counter(), time.process_time()
m = Mirror(MirrorConfig(source=source, target=target, topics=topics.split(","), state_dir=state,
                        until_caught_up=True, progress=False, buffer_memory=64 << 20))
assert m.run() == 0
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps(dict(wall=wall, cpu=cpu, records=m.producer.records_acked,
                      bytes=m.producer.bytes_sent, requests=m.producer.requests,
                      peak_rss_mb=ru.ru_maxrss / 1024)))
"""

DEEP = """
import json, resource, sys, time
import confluent_kafka as ck
source, target, topics, total = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
t0, c0 = time.perf_counter(), time.process_time()
consumer = ck.Consumer({"bootstrap.servers": source, "group.id": "deep-mirror",
                        "enable.auto.commit": False, "auto.offset.reset": "earliest",
                        "isolation.level": "read_committed", "fetch.max.bytes": 64 << 20})
consumer.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t in topics for p in range(4)])
producer = ck.Producer({"bootstrap.servers": target, "compression.type": "lz4", "linger.ms": 20,
                        "batch.size": 256 << 10, "acks": "all", "enable.idempotence": True})
done = 0
while done < total:
    for msg in consumer.consume(min(10000, total - done), 1.0):   # (never waits for more than are left)
        if msg.error():
            continue
        while True:
            try:
                producer.produce("deep-" + msg.topic(), msg.value(), msg.key(),
                                 partition=msg.partition(), timestamp=msg.timestamp()[1],
                                 headers=msg.headers())
                break
            except BufferError:
                producer.poll(0.05)
        done += 1
    producer.poll(0)
assert producer.flush(120) == 0
consumer.close()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps(dict(wall=wall, cpu=cpu, records=done,
                      peak_rss_mb=ru.ru_maxrss / 1024)))
"""


def process_main(megabytes: int = 64) -> None:
    import json
    import subprocess
    import sys
    import tempfile

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from mock_cluster import MockCluster

    import confluent_kafka as ck

    source, target = MockCluster(3), MockCluster(3)
    # the mock keeps ~5 MB per partition: 4 MB per partition, 4 partitions per topic
    topics = [f"mirror-bench-{i}" for i in range(max(1, megabytes // 16))]
    for topic in topics:
        source.create_topic(topic)
        target.create_topic(topic)
        target.create_topic("deep-" + topic)
    producer = ck.Producer({"bootstrap.servers": source.bootstrap, "compression.type": "lz4",
                            "linger.ms": 50, "batch.size": 256 << 10, "queue.buffering.max.kbytes": 1 << 20})
    rng = random.Random(1)
    records = 0
    for topic in topics:
        size = 0
        while size < 16 << 20:                     # JSON-like values: lz4 about 2.5x
            value = _value(rng, records)
            producer.produce(topic, value=value, key=b"key-%d" % (records % 97), partition=records % 4)
            size += len(value) // 2
            records += 1
            if records % 10000 == 0:
                producer.poll(0)
    assert producer.flush(120) == 0
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    results = {}
    with tempfile.TemporaryDirectory() as state:
        for name, argv in (("kafkacodec mirror", [sys.executable, "-c", OURS, source.bootstrap,
                                                  target.bootstrap, ",".join(topics), state]),
                           ("confluent-kafka deep", [sys.executable, "-c", DEEP, source.bootstrap,
                                                     target.bootstrap, ",".join(topics), str(records)])):
            run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
            assert run.returncode == 0, run.stderr[-3000:]
            results[name] = json.loads(run.stdout.strip().splitlines()[-1])
    ours = results["kafkacodec mirror"]
    gb = ours["bytes"] / 1e9
    print(f"kafkacodec {kafkacodec.__version__} | confluent-kafka {ck.version()[0]} (librdkafka "
          f"{ck.libversion()[0]}) | {platform.python_implementation()} {platform.python_version()} | "
          f"{os.cpu_count()} CPUs | load {os.getloadavg()[0]:.1f}")
    print(f"{len(topics)} topics x 4 partitions, {records} records, {ours['bytes'] / 1e6:.1f} MB of lz4 "
          f"batches (256 KiB); mock clusters of 3 brokers, one batch per fetch")
    print(f"{'mirror':22} {'records':>9} {'wall s':>7} {'MB/s':>7} {'CPU s':>7} {'CPU s/GB':>9} "
          f"{'CPU x':>6} {'peak RSS MB':>12}")
    base = ours["cpu"] / gb
    for name, r in results.items():
        print(f"{name:22} {r['records']:9d} {r['wall']:7.2f} {gb * 1e3 / r['wall']:7.1f} "
              f"{r['cpu']:7.2f} {r['cpu'] / gb:9.2f} {r['cpu'] / gb / base:6.1f} {r['peak_rss_mb']:12.0f}")


# --- the mirror between two real Kafka brokers, PLAINTEXT against SASL_SSL -------------------------
# `kafkacodec mirror` (Mirror in a child process, --until-caught-up) between two Kafka 4.1 brokers
# (tests/kafka_broker.py: one KRaft node each, with PLAINTEXT and SASL_SSL listeners), the same
# source topic copied over PLAINTEXT and over SASL_SSL with SCRAM-SHA-512 toward both clusters
# (TLS 1.3, the brokers' trustme certificates), and over PLAINTEXT by other checkouts (--base);
# each round starts one mode later (run 3 or 6 rounds for 3 modes: each in every slot alike).  Figures: wall time,
# MB/s of source batches moved, the mirror process's CPU seconds per GB (process_time, all its
# threads, from before Mirror() to after run(): interpreter start and imports left out), and each
# broker's CPU seconds per GB (the JVM's /proc/PID/stat) for context.

MIRROR_CHILD = """
import json, resource, sys, time
from kafkacodec.mirror import Mirror, MirrorConfig
conf = json.loads(sys.argv[1])
# (security only when given: a checkout from before TLS and SASL can be compared over PLAINTEXT)
security = {k: conf[k] for k in ("source_security", "target_security") if conf[k] is not None}
t0, c0 = time.perf_counter(), time.process_time()
m = Mirror(MirrorConfig(source=conf["source"], target=conf["target"], topics=[conf["topic"]],
                        rename={conf["topic"]: conf["target_topic"]}, state_dir=conf["state"],
                        until_caught_up=True, progress=False, buffer_memory=64 << 20, **security))
code = m.run()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps(dict(code=code, wall=wall, cpu=cpu, records=m.producer.records_acked,
                      bytes=m.producer.bytes_sent, requests=m.producer.requests,
                      peak_rss_mb=ru.ru_maxrss / 1024)))
"""


def _jvm_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fill_source(bootstrap: str, topic: str, megabytes: int, partitions: int) -> int:
    """About `megabytes` of lz4 batches (256 KiB producer batches of JSON-like records with
    keys) in `topic`; the record count."""
    import confluent_kafka as ck

    rng = random.Random(3)
    pool = [_value(rng, i) for i in range(20_000)]   # distinct within any batch
    producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 50,
                            "batch.size": 256 << 10, "queue.buffering.max.kbytes": 1 << 20, "acks": "all"})
    size = records = 0
    while size < megabytes << 20:
        value = pool[records % len(pool)]
        while True:
            try:
                producer.produce(topic, value=value, key=b"key-%d" % (records % 97), partition=records % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        size += len(value) * 11 // 20             # lz4 keeps about 55% of these values
        records += 1
        if records % 10000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    return records


def kafka_main(argv: list[str]) -> None:
    import argparse
    import json
    import statistics
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="bench_mirror.py kafka",
                                     description="the mirror between two Kafka 4.1 brokers, PLAINTEXT vs SASL_SSL")
    parser.add_argument("megabytes", nargs="?", type=int, default=256, help="lz4 batches in the source topic")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--base", type=Path, action="append", default=[],
                        help="another checkout (modules built): its mirror over PLAINTEXT too, in the same "
                             "rounds (repeatable)")
    parser.add_argument("--base-tls", type=Path, action="append", default=[],
                        help="another checkout with TLS and SASL: its mirror over SASL_SSL too (repeatable)")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "tests"))
    import confluent_kafka as ck
    from kafka_broker import DEFAULT_VERSION, BrokerUnavailable, KafkaBroker, SecurityFiles

    modes = {"PLAINTEXT": (None, "PLAINTEXT", root), "SASL_SSL SCRAM-SHA-512": ("SCRAM-SHA-512", "SASL_SSL", root)}
    for base in args.base:
        modes[f"PLAINTEXT, {base.name}"] = (None, "PLAINTEXT", base.resolve())
    for base in args.base_tls:
        modes[f"SASL_SSL, {base.name}"] = ("SCRAM-SHA-512", "SASL_SSL", base.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        brokers = []
        try:
            for name in ("source", "target"):
                brokers.append(KafkaBroker.start(DEFAULT_VERSION, security=SecurityFiles.create(work / name)))
        except BrokerUnavailable as exc:
            for broker in brokers:
                broker.stop()
            print(f"mirror between Kafka brokers: unavailable: {exc}")
            return
        source, target = brokers
        try:
            source.create_topic("bench", partitions=args.partitions)
            started = time.perf_counter()
            records = _fill_source(source.bootstrap, "bench", args.megabytes, args.partitions)
            print(f"# source filled: {records} records in {time.perf_counter() - started:.0f} s", flush=True)
            results: dict[str, list[dict]] = {}
            for i in range(args.rounds):
                # each round starts one mode later: every mode runs in every slot of a round as
                # often (what runs just before, a broker still busy with it, costs the next one)
                order = list(modes.items())[i % len(modes):] + list(modes.items())[:i % len(modes)]
                load = os.getloadavg()[0]
                line = []
                for n, (name, (mechanism, protocol, code)) in enumerate(order):
                    # (copies are kept: a deleted topic's files go 60 s later, in another run)
                    topic = f"copy-{i}-{n}"
                    target.create_topic(topic, partitions=args.partitions)
                    conf = {"source": source.bootstrap_of(protocol), "target": target.bootstrap_of(protocol),
                            "topic": "bench", "target_topic": topic, "state": str(work / f"state-{topic}"),
                            "source_security": source.security.java(protocol, mechanism) if mechanism else None,
                            "target_security": target.security.java(protocol, mechanism) if mechanism else None}
                    # the previous run's copy written back to disk first: the kernel's writeback
                    # of a few hundred MB would otherwise land in this run
                    os.sync()
                    cpu = {b: _jvm_cpu(b.process.pid) for b in brokers}
                    run = subprocess.run([sys.executable, "-c", MIRROR_CHILD, json.dumps(conf)], capture_output=True,
                                         text=True, env=dict(os.environ, PYTHONPATH=str(code)), cwd=str(code),
                                         timeout=1800)
                    if run.returncode != 0:
                        raise RuntimeError(f"the mirror ({name}) failed: {run.stderr[-3000:]}")
                    r = json.loads(run.stdout.strip().splitlines()[-1])
                    if r["code"] != 0 or r["records"] != records:
                        raise RuntimeError(f"the mirror ({name}) ended with {r['code']} after {r['records']} of "
                                           f"{records} records")
                    r["source_cpu"], r["target_cpu"] = (_jvm_cpu(b.process.pid) - cpu[b] for b in brokers)
                    r["load"] = load
                    results.setdefault(name, []).append(r)
                    line.append(f"{name} {r['bytes'] / 1e6 / r['wall']:.0f} MB/s, "
                                f"{r['cpu'] / (r['bytes'] / 1e9):.2f} CPU s/GB")
                print(f"round {i + 1}, load {load:.2f}: " + "; ".join(line), flush=True)
        finally:
            target.stop()
            source.stop()
    moved = results["PLAINTEXT"][0]["bytes"]
    print(f"kafkacodec {kafkacodec.__version__} | Kafka {DEFAULT_VERSION} (2 brokers, KRaft, 1 node each) | "
          f"confluent-kafka {ck.version()[0]} (producer of the source) | {platform.python_implementation()} "
          f"{platform.python_version()} | {os.cpu_count()} CPUs | load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"1 topic x {args.partitions} partitions, {records} records, {moved / 1e6:.1f} MB of lz4 batches "
          f"(256 KiB producer batches); {args.rounds} rounds, each mode in turn first, medians (min..max)")
    print(f"{'mirror':28} {'wall s':>18} {'MB/s':>18} {'CPU s/GB':>18} {'vs plain':>8} {'source JVM':>10} "
          f"{'target JVM':>10} {'peak RSS MB':>11}")
    base = statistics.median(r["cpu"] for r in results["PLAINTEXT"]) / (moved / 1e9)

    def cell(values: list[float], digits: int) -> str:
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}..{max(values):.{digits}f})"

    for name, runs in results.items():
        gb = [r["bytes"] / 1e9 for r in runs]
        per_gb = [r["cpu"] / g for r, g in zip(runs, gb)]
        print(f"{name:28} {cell([r['wall'] for r in runs], 2):>18} "
              f"{cell([g * 1e3 / r['wall'] for r, g in zip(runs, gb)], 0):>18} {cell(per_gb, 2):>18} "
              f"{statistics.median(per_gb) / base:8.2f} "
              f"{statistics.median(r['source_cpu'] / g for r, g in zip(runs, gb)):10.2f} "
              f"{statistics.median(r['target_cpu'] / g for r, g in zip(runs, gb)):10.2f} "
              f"{max(r['peak_rss_mb'] for r in runs):11.0f}")
    print("CPU s/GB: the mirror process; source/target JVM: each broker's CPU seconds per GB moved")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["kafka"]:
        kafka_main(sys.argv[2:])
    elif sys.argv[1:2] == ["process"]:
        process_main(int(sys.argv[2]) if len(sys.argv) > 2 else 64)
    else:
        main()
