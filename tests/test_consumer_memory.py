"""The consumer core's memory: a backlog ten times `buffer_memory` read through the consumer
(raw batches and Arrow) keeps the process's peak RSS within buffer_memory plus a documented
constant (measured in a subprocess, against the mock cluster living in this process), and a
garbage-collected cycle holding a pool and its rings frees them without crashing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from isolated import child_env

TESTS = os.path.dirname(os.path.abspath(__file__))


def run_python(code, timeout=300):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=child_env(TESTS), cwd=TESTS)


def test_a_collected_cycle_holding_a_pool_and_its_ring_does_not_crash():
    """The ring held the pool's memoryview as a traversed attribute: the cyclic GC cleared that
    memoryview (dropping its buffer) while the ring still held an export of it, and the ring's
    dealloc then released it again: SIGSEGV in memory_dealloc."""
    result = run_python("""
        import gc, struct
        from kafkacodec import ResponseRingBuffer, SimpleMemoryPool

        class Holder:
            pass

        for keep in (None, "response", "view"):
            # made before the holder: the GC's list of garbage meets the pool's memoryview
            # before the holder whose attributes drop the ring
            pool = SimpleMemoryPool(1 << 20, 1 << 20, True)
            ring = ResponseRingBuffer(1 << 16, pool)
            payload = struct.pack(">i", 7) + b"x" * 100
            ring.feed(struct.pack(">i", len(payload)) + payload)
            response = ring.next_response()
            h = Holder()
            h.self = h
            h.ring = ring
            h.pool = pool
            if keep == "response":
                h.response = response
            elif keep == "view":
                h.view = memoryview(response.payload)
            del response, ring, pool, h
            assert gc.collect() > 0
        print("ok")
    """)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.strip() == "ok"
    assert "Exception ignored" not in result.stderr, result.stderr


ck = pytest.importorskip("confluent_kafka")

BUFFER_MEMORY = 3 << 20
BACKLOG = 10 * BUFFER_MEMORY
TOPICS = ("backlog-a", "backlog-b")     # the mock keeps ~5 MB per partition, 4 partitions a topic
#: What the consumer may use beyond buffer_memory (docs/consumer.md): per-connection state, the
#: decompressed batches and Arrow columns of the fetch being converted, and what the allocator
#: keeps of freed objects.  Measured: raw ~0 beyond the rings, Arrow ~7 MiB.
CONSTANT = 16 << 20


@pytest.fixture(scope="module")
def backlog():
    from mock_cluster import MockCluster

    mock = MockCluster(3, **{"compression.type": "lz4", "batch.size": 256 << 10,
                             "linger.ms": 20})
    for topic in TOPICS:
        mock.create_topic(topic)
    for i in range(BACKLOG // 1000):
        # incompressible and distinct: the backlog is as big on the wire as in the log
        mock.producer.produce(TOPICS[i % 2], value=os.urandom(1000), key=b"%d" % i,
                              partition=i // 2 % 4)
        if i % 10000 == 0:
            mock.producer.poll(0)
    assert mock.producer.flush(60) == 0
    return mock


@pytest.mark.skipif(os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="ASan's quarantine keeps freed memory: the RSS is not the program's")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self (VmHWM reset)")
@pytest.mark.parametrize("form", ["raw", "arrow"])
def test_peak_rss_with_a_backlog_ten_times_buffer_memory(backlog, form):
    result = run_python(f"""
        import json, time
        import numpy, pyarrow
        # pyarrow's first conversion from numpy costs ~50 MB of RSS once (its lazy set-up, in
        # any process): done before the baseline, it is not the consumer's
        pyarrow.array(numpy.zeros(1, dtype=numpy.int32))
        from kafkacodec.consumer import Consumer

        def status_kib(field):
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1])

        consumer = Consumer({backlog.bootstrap!r}, buffer_memory={BUFFER_MEMORY})
        consumer.assign_topics({list(TOPICS)!r})
        assert consumer.beginning_offsets(consumer.assignment()) == {{tp: 0 for tp in consumer.assignment()}}
        ends = consumer.end_offsets(consumer.assignment())
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                 # Linux: reset the peak (VmHWM) to the current RSS
        baseline = status_kib("VmRSS")
        records = fetched = 0
        deadline = time.monotonic() + 240
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            assert time.monotonic() < deadline
            for part in consumer.poll(1.0):
                with part:
                    if {form!r} == "raw":
                        for batch in part.batches:
                            records += batch.record_count
                            fetched += len(batch.value)
                    else:
                        for table in part.to_arrow():
                            records += table.num_rows
                            fetched += table.nbytes
        peak = status_kib("VmHWM")
        print(json.dumps(dict(baseline=baseline, peak=peak,
                              records=records, fetched=fetched, ends=sorted(ends.values()),
                              used=consumer.pool.metrics()["memory-pool-used"])))
        consumer.close()
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["records"] == BACKLOG // 1000, json.dumps(facts)
    assert facts["fetched"] >= BACKLOG * 0.9
    growth = (facts["peak"] - facts["baseline"]) * 1024
    assert growth <= BUFFER_MEMORY + CONSTANT, json.dumps(facts)


# --- control answers: Metadata --------------------------------------------------------------

HUGE_TOPICS = {f"topic-{i:06d}": 2 for i in range(200_000)}      # ~14 MiB of valid Metadata


def metadata_broker(topics):
    from fake_broker import API_VERSIONS, METADATA, FakeBroker, api_versions_body, metadata_v1_body

    answer: dict[str, bytes] = {}

    def respond(key, version, body):
        if key == API_VERSIONS:
            return api_versions_body()
        return answer["metadata"] if key == METADATA else None

    fake = FakeBroker(respond)
    answer["metadata"] = metadata_v1_body(fake.port, topics)
    return fake, len(answer["metadata"])


@pytest.mark.skipif(os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="ASan's quarantine keeps freed memory: the RSS is not the program's")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_huge_metadata_answer_is_refused_within_bounds():
    """A broker answers a one-topic Metadata request with 14 MiB of valid Metadata (200,000
    topics).  Before, the consumer decoded it all and kept every topic's leaders: ~120 MiB of
    RSS beside a 64 MiB buffer_memory, for one partitions_for().  Now an answer larger than
    receive_message_max_bytes fails the call with RecordTooLargeError naming the setting, and
    the answer costs only the ring it was read into (within buffer_memory).  The process's
    peak RSS is measured around the call, after the imports and the consumer's set-up."""
    fake, size = metadata_broker(HUGE_TOPICS)
    try:
        result = run_python(f"""
            import json
            from kafkacodec.consumer import Consumer
            from kafkacodec.errors import RecordTooLargeError

            def status_kib(field):
                with open("/proc/self/status") as f:
                    for line in f:
                        if line.startswith(field + ":"):
                            return int(line.split()[1])

            with Consumer({fake.bootstrap!r}, buffer_memory=64 << 20, request_timeout=20) as c:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")                 # Linux: reset the peak (VmHWM) to the current RSS
                baseline = status_kib("VmRSS")
                try:
                    count = c.partitions_for("topic-000000")
                    outcome = f"answered {{count}}, kept {{len(c.cluster.leaders)}}"
                except RecordTooLargeError as exc:
                    outcome = f"refused: {{exc}}"
                print(json.dumps(dict(outcome=outcome, growth=(status_kib("VmHWM") - baseline) * 1024)))
        """, timeout=120)
    finally:
        fake.close()
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    outcome = facts["outcome"]
    # the answer's size prefix counts its correlation id too
    assert outcome.startswith("refused") and "receive_message_max_bytes" in outcome and \
        str(size + 4) in outcome, facts
    ring = 16 << 20                                  # buffer_memory / 4: the answer is read into it
    assert facts["growth"] <= ring + (4 << 20), facts


def test_a_metadata_answer_keeps_only_the_topics_asked():
    """A broker answering with topics nobody asked for (20,000 of them, within the size cap):
    the Cluster keeps the asked topic's leaders only (Kafka's consumer retains only the topics
    it wants, ConsumerMetadata.retainTopic); before, it kept them all."""
    from kafkacodec.consumer import Consumer

    topics = {f"topic-{i:06d}": 1 for i in range(20_000)}
    fake, size = metadata_broker(topics)
    assert size < 1 << 20
    try:
        with Consumer(fake.bootstrap, buffer_memory=4 << 20, request_timeout=20) as consumer:
            assert consumer.partitions_for("topic-000007") == 1
            cluster = consumer.cluster
            assert list(cluster.leaders) == [("topic-000007", 0)]
            assert list(cluster.partition_counts) == list(cluster.topic_errors) == ["topic-000007"]
    finally:
        fake.close()
