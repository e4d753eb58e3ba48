"""The consumer core against librdkafka's mock cluster (3 brokers, one per module): every codec
in the three output forms (raw batches, Arrow, flyweight records) against confluent-kafka's
consumer; read_committed with committed and aborted transactions although the mock lists no
aborted transactions; commits through the group coordinator; KIP-81 muting and priority
coordinator rings; retries after NOT_LEADER, disconnects and timeouts."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

ck = pytest.importorskip("confluent_kafka")

from mock_cluster import MockCluster  # noqa: E402

from kafkacodec import ConcurrentUseError, MemoryRecords  # noqa: E402
from kafkacodec.consumer import Consumer  # noqa: E402
from kafkacodec.consumer._cluster import Cluster  # noqa: E402
from kafkacodec.net.client import ResponseReader  # noqa: E402
from kafkacodec.protocol.api import ApiKey  # noqa: E402

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_PARTITION = 60


@pytest.fixture(scope="module")
def mock():
    return MockCluster(3)


def make_records(partitions, n, seed=""):
    out = []
    for i in range(n):
        for p in partitions:
            out.append((p, None if i % 9 == 4 else b"%s-key-%d" % (seed.encode(), i),
                        (b"%s value %d/%d " % (seed.encode(), p, i)) * (1 + i % 11),
                        [("i", b"%d" % i), ("h", None)] if i % 3 == 0 else None,
                        1_700_000_000_000 + 17 * i))
    return out


def debug_state(consumer, ends):
    return ({tp: consumer.position(tp) for tp in ends},
            [(k, c.state, c.muted, c.ring, len(c.in_flight), c.leases) for k, c in consumer.cluster.connections.items()],
            [(st.topic, st.partition, st.position, st.fetch is not None, st.backoff_until - time.monotonic(), st.reset)
             for st in consumer.fetcher.states.values()],
            consumer.pool.available_memory, consumer.fetcher.in_flight, consumer.cluster.leaders,
            len(consumer.cluster.closing))


def consume_all(consumer, ends, form, timeout=30.0):
    """Everything up to `ends` {tp: end offset} as (partition, offset, key, value, headers, ts)."""
    out = []
    deadline = time.monotonic() + timeout
    while any(consumer.position(tp) < end for tp, end in ends.items()):
        assert time.monotonic() < deadline, debug_state(consumer, ends)
        if form == "records":
            for rec in consumer.records(0.5):
                out.append((rec.partition, rec.offset, rec.key, rec.value, list(rec.headers),
                            rec.timestamp))
            continue
        for part in consumer.poll(0.5):
            with part:
                if form == "raw":
                    for batch in part.batches:
                        for r in MemoryRecords(bytes(batch.value)).records():
                            if r.offset >= part.start_offset:
                                out.append((part.partition, r.offset, r.key, r.value,
                                            list(r.headers), r.timestamp))
                else:
                    for table in part.to_arrow():
                        for row in table.to_pylist():
                            assert row["topic"] == part.topic
                            out.append((row["partition"], row["offset"], row["key"], row["value"],
                                        [(h["key"], h["value"]) for h in row["headers"] or []],
                                        int(row["timestamp"].timestamp() * 1000)))
    return sorted(out, key=lambda m: (m[0], m[1]))


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_in_every_form_matches_confluent_kafka(mock, codec):
    topic = f"codec-{codec}"
    mock.create_topic(topic)
    mock.produce(topic, make_records(range(4), PER_PARTITION, codec),
                 **{"compression.type": codec, "batch.num.messages": 13})
    expected = mock.consume(topic, range(4), 4 * PER_PARTITION)
    assert len(expected) == 4 * PER_PARTITION
    for form in ("raw", "arrow", "records"):
        with Consumer(mock.bootstrap, buffer_memory=4 << 20, max_in_flight=2) as consumer:
            consumer.assign_topics([topic])
            ends = consumer.end_offsets(consumer.assignment())
            got = consume_all(consumer, ends, form)
            assert got == expected, form
            # three brokers, one ring each, all from the pool
            assert consumer.pool.size == 4 << 20


def test_idempotent_producer_and_starting_inside_a_batch(mock):
    topic = "idempotent"
    mock.create_topic(topic)
    mock.produce(topic, make_records([0], 40, "idem"),
                 **{"enable.idempotence": True, "compression.type": "lz4",
                    "batch.num.messages": 10, "linger.ms": 50})
    expected = mock.consume(topic, [0], 40)
    with Consumer(mock.bootstrap, buffer_memory=2 << 20) as consumer:
        consumer.assign({(topic, 0): 0})
        first = consumer.poll(5.0)[0]
        batch = first.batches[0]
        assert batch.producer_id >= 0 and batch.base_sequence == 0 and batch.record_count >= 2
        inside = batch.base_offset + 1
        stored = bytes(batch.value)
        first.release()
        consumer.seek((topic, 0), inside)
        parts = consumer.poll(5.0)
        trimmed = parts[0].batches[0]
        assert trimmed.trimmed and trimmed.base_offset == inside
        assert trimmed.base_sequence == 1                 # the sequence moves with the offsets
        for part in parts:
            part.release()
        consumer.seek((topic, 0), inside)
        got = consume_all(consumer, {(topic, 0): 40}, "arrow")
    assert got == [m for m in expected if m[1] >= inside]
    # whole_batches: the batch as the broker sent it (the gateway passes it on to clients)
    with Consumer(mock.bootstrap, buffer_memory=2 << 20, whole_batches=True) as consumer:
        consumer.assign({(topic, 0): inside})
        parts = consumer.poll(5.0)
        assert parts[0].start_offset == inside
        whole = parts[0].batches[0]
        assert not whole.trimmed and bytes(whole.value) == stored
        for part in parts:
            part.release()


def transactional_history(mock, topic, partitions):
    """Committed and aborted transactions interleaved with plain records on every partition;
    returns the records a read_committed consumer must see, and all data records."""
    outcome = {}
    plain = ck.Producer({"bootstrap.servers": mock.bootstrap, "linger.ms": 1})
    txn = ck.Producer({"bootstrap.servers": mock.bootstrap, "transactional.id": f"{topic}-tx",
                       "linger.ms": 1, "batch.num.messages": 3, "compression.type": "zstd"})
    txn.init_transactions(10)
    committed_values, all_values = [], []
    for t in range(8):
        txn.begin_transaction()
        values = []
        for j in range(9):
            for p in partitions:
                value = b"txn %d record %d p%d" % (t, j, p)
                txn.produce(topic, value=value, partition=p)
                values.append((p, value))
            txn.poll(0)
            if j == 4:
                for p in partitions:
                    plain.produce(topic, value=b"plain %d p%d" % (t, p), partition=p)
                    committed_values.append((p, b"plain %d p%d" % (t, p)))
                    all_values.append((p, b"plain %d p%d" % (t, p)))
                assert plain.flush(10) == 0
        txn.flush(10)
        if t % 3 == 1:
            txn.abort_transaction(10)
        else:
            txn.commit_transaction(10)
            committed_values += values
        all_values += values
        outcome[t] = t % 3 != 1
    return sorted(committed_values), sorted(all_values)


def test_read_committed_without_the_brokers_aborted_lists(mock):
    topic = "transactions"
    mock.create_topic(topic)
    committed, everything = transactional_history(mock, topic, [0, 1])
    for isolation, want in (("read_committed", committed), ("read_uncommitted", everything)):
        with Consumer(mock.bootstrap, buffer_memory=2 << 20, isolation_level=isolation) as consumer:
            consumer.assign({(topic, 0): "earliest", (topic, 1): "earliest"})
            ends = consumer.end_offsets(consumer.assignment())
            for form in ("raw", "arrow", "records"):
                for tp in ends:
                    consumer.seek(tp, 0)
                got = consume_all(consumer, ends, form)
                assert sorted((m[0], m[3]) for m in got) == want, (isolation, form)
                # in offset order per partition
                assert got == sorted(got, key=lambda m: (m[0], m[1]))
    # the mock itself does not filter: its read_committed view still shows aborted records
    oracle = mock.consume(topic, [0, 1], len(everything), isolation="read_committed", timeout=10)
    assert len(oracle) == len(everything)


def test_commit_and_committed_through_the_coordinator(mock):
    topic = "commits"
    mock.create_topic(topic)
    mock.produce(topic, make_records([0, 1], 10, "c"))
    with Consumer(mock.bootstrap, buffer_memory=2 << 20, group_id="g1") as consumer:
        assert consumer.committed([(topic, 0), (topic, 1)]) == {(topic, 0): None, (topic, 1): None}
        consumer.assign({(topic, 0): 3, (topic, 1): "earliest"})
        consumer.commit({(topic, 0): 7, (topic, 1): 2})
        assert consumer.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 7, (topic, 1): 2}
    # confluent-kafka's consumer of the same group starts there
    oracle = ck.Consumer({"bootstrap.servers": mock.bootstrap, "group.id": "g1",
                          "enable.auto.commit": False})
    try:
        got = oracle.committed([ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)], timeout=10)
        assert [(tp.partition, tp.offset) for tp in got] == [(0, 7), (1, 2)]
    finally:
        oracle.close()
    with Consumer(mock.bootstrap, buffer_memory=2 << 20, group_id="g1") as consumer:
        consumer.assign({(topic, 0): "committed", (topic, 1): "committed"})
        assert consumer.position((topic, 0)) == 7 and consumer.position((topic, 1)) == 2


def unread_bytes(sock):
    try:
        return len(sock.recv(1 << 16, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return 0


def test_a_connection_reads_only_when_the_pool_can_hold_it(mock):
    """KIP-81: with the pool exhausted, the connection does not read the response waiting on
    its socket (it is muted); once memory returns it reads it."""
    topic = "muting"
    mock.create_topic(topic)
    mock.produce(topic, make_records([0], 100, "m"), **{"batch.num.messages": 5})
    with Consumer(mock.bootstrap, buffer_memory=1 << 20, ring_bytes=1 << 20) as consumer:
        consumer.assign({(topic, 0): 0})
        consumer.pause([(topic, 0)])
        first = consumer.poll(0)
        assert first == [] and consumer.fetcher.fetches_sent == 0
        consumer.resume([(topic, 0)])
        consumer.poll(5.0)[0].release()
        consumer.pause([(topic, 0)])
        cluster = consumer.cluster
        leader = cluster.leaders[(topic, 0)]
        conn = cluster.connections[(leader, "data")]
        while conn.in_flight:                      # the prefetch sent by poll() comes back
            consumer.loop.run_once(0.05)
        for part in consumer.fetcher.ready:
            part.release()
        consumer.fetcher.ready.clear()
        # The idle ring goes back to the pool; then the whole pool is taken away.
        cluster.prepare(time.monotonic())
        assert conn.ring is None and consumer.pool.available_memory == 1 << 20
        hog = consumer.pool.try_allocate(1 << 20)
        consumer.resume([(topic, 0)])
        consumer.fetcher.send_fetches()
        deadline = time.monotonic() + 10
        while not conn.muted:                      # the answer arrives: no ring for it
            assert time.monotonic() < deadline
            consumer.loop.run_once(0.05)
        assert conn.ring is None and unread_bytes(conn.conn.transport.sock) > 0
        assert consumer.poll(0.5) == []                # nothing read: the bytes wait in the kernel
        assert unread_bytes(conn.conn.transport.sock) > 0 and consumer.metrics()["muted-connections"] == 1
        assert consumer.pool.metrics()["memory-pool-used"] == 1 << 20
        consumer.pool.release(hog)
        parts = consumer.poll(5.0)
        assert parts and parts[0].batches and not conn.muted
        for part in parts:
            part.release()


def test_coordinator_rings_have_priority(mock):
    """A fetch ring holding the whole pool does not stop a commit: the coordinator connection
    takes its ring with priority=True (from the heap, outside the budget), and so does the
    coordinator lookup (FindCoordinator): over the muted data connection it waited out the
    request timeout (30 s by default) before a retry found another way."""
    topic = "priority"
    mock.create_topic(topic)
    mock.produce(topic, make_records([0], 5, "p"))
    with Consumer(mock.bootstrap, buffer_memory=1 << 20, ring_bytes=1 << 20, group_id="gp") as consumer:
        consumer.assign({(topic, 0): 0})
        held = consumer.poll(5.0)
        assert consumer.pool.available_memory == 0       # the data ring holds the whole pool
        sent, real_send = [], consumer.cluster.send

        def send(node, request, purpose="data"):
            sent.append((request.api_key, purpose))
            return real_send(node, request, purpose)

        consumer.cluster.send = send
        consumer.commit({(topic, 0): 3})
        assert consumer.committed([(topic, 0)]) == {(topic, 0): 3}
        assert consumer.pool.available_memory == 0
        # every request of the commit went over a priority connection, none timed out and was
        # sent again
        assert sent and {purpose for _, purpose in sent} == {"coordinator"}, sent
        assert len(sent) == len({api for api, _ in sent}), sent
        for part in held:
            part.release()


def spread_topic(mock, prefix):
    """A topic whose 4 partitions have at least 2 leaders: the mock picks each partition's leader
    at random, so all four land on one broker about once in 27 topics."""
    for attempt in range(20):
        topic = f"{prefix}-{attempt}"
        mock.create_topic(topic)
        partitions = mock.producer.list_topics(topic, timeout=10).topics[topic].partitions
        if len({p.leader for p in partitions.values()}) >= 2:
            return topic
    raise AssertionError("the mock put every partition of 20 topics on one broker")


def test_fewer_ring_bytes_than_brokers_need_mute_instead_of_growing(mock):
    """Several leaders, one ring's worth of pool: connections take turns, the pool never grants
    more than buffer_memory, and every record arrives."""
    topic = spread_topic(mock, "turns")
    mock.produce(topic, make_records(range(4), 45, "turns"), **{"batch.num.messages": 5})
    expected = mock.consume(topic, range(4), 180)
    with Consumer(mock.bootstrap, buffer_memory=1 << 20, ring_bytes=1 << 20) as consumer:
        consumer.assign_topics([topic])
        ends = consumer.end_offsets(consumer.assignment())
        assert len({consumer.cluster.leaders[tp] for tp in ends}) >= 2     # 2 or 3 brokers
        used = []
        real_poll = consumer.loop.run_once

        def poll(timeout):
            real_poll(timeout)
            used.append(consumer.pool.size - consumer.pool.available_memory)

        consumer.loop.run_once = poll  # type: ignore[method-assign]
        got = consume_all(consumer, ends, "raw")
        assert got == expected
        assert max(used) <= 1 << 20


def test_not_leader_refreshes_metadata_and_retries(mock):
    topic = "leaders"
    mock.create_topic(topic)
    mock.produce(topic, make_records([0], 10, "l"))
    with Consumer(mock.bootstrap, buffer_memory=2 << 20) as consumer:
        consumer.assign({(topic, 0): 0})
        leader = consumer.cluster.leaders[(topic, 0)]
        wrong = next(n for n in consumer.cluster.brokers if n != leader)
        consumer.cluster.leaders[(topic, 0)] = wrong      # stale metadata
        responses = consumer.fetcher.responses
        got = consume_all(consumer, {(topic, 0): 10}, "raw")
        assert len(got) == 10
        assert consumer.cluster.leaders[(topic, 0)] == leader
        assert consumer.fetcher.responses >= responses + 2     # the NOT_LEADER answer, then data


class FakeBroker:
    """A listening socket that accepts and then either closes at once or never answers."""

    def __init__(self, mode):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.mode = mode
        self.accepted = 0
        self.held = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "close":
                conn.close()
            else:
                self.held.append(conn)

    def close(self):
        self.server.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("mode", ["close", "silent"])
def test_disconnects_and_timeouts_are_retried(mock, mode):
    topic = f"retry-{mode}"
    mock.create_topic(topic)
    mock.produce(topic, make_records([0], 10, mode))
    fake = FakeBroker(mode)
    try:
        with Consumer(mock.bootstrap, buffer_memory=2 << 20, request_timeout=1.0,
                      retry_backoff=0.05) as consumer:
            consumer.assign({(topic, 0): 0})
            # the leader's address points at the fake broker until Metadata is refreshed
            consumer.cluster.brokers[99] = ("127.0.0.1", fake.port)
            consumer.cluster.leaders[(topic, 0)] = 99
            got = consume_all(consumer, {(topic, 0): 10}, "records", timeout=20)
            assert len(got) == 10 and fake.accepted >= 1
    finally:
        fake.close()


def test_one_thread_at_a_time(mock):
    topic = "threads"
    mock.create_topic(topic)
    with Consumer(mock.bootstrap, buffer_memory=2 << 20) as consumer:
        consumer.assign({(topic, 0): 0})
        errors = []
        started = threading.Event()

        def other():
            started.wait(5)
            try:
                consumer.poll(0)
            except ConcurrentUseError as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        real = consumer.loop.run_once

        def slow(timeout):
            started.set()
            time.sleep(0.2)
            real(timeout)

        consumer.loop.run_once = slow  # type: ignore[method-assign]
        consumer.poll(0.3)
        thread.join()
        assert len(errors) == 1 and str(errors[0]) == "Consumer is in use by another thread: use one per thread"


def test_connection_rings_come_from_the_pool(mock):
    pool = __import__("kafkacodec").SimpleMemoryPool(1 << 20, 1 << 20, True)
    reader = ResponseReader(pool, 1 << 20, lambda conn, done, error: None)
    assert reader.take_ring() and pool.available_memory == 0
    closed = type("Closed", (), {"closed": True})()
    assert reader.release_ring_if_idle(closed) and pool.available_memory == 1 << 20


def test_a_ring_full_of_held_answers_reads_again_once_they_are_released(mock):
    """The caller holds every partition it polled (as the mirror does until the target acks)
    until the data connection's ring has no room left; the connection stops reading.  Releasing
    them must let it read again at once.  Before: nothing watched the socket again (the loop
    re-arms a connection only on its own events, the KIP-81 tick only a pool-muted one), so
    the next poll got nothing until the request timeout (30 s) failed the connection: the
    mirror between two Kafka brokers stalled 30 s at a time."""
    topic = "full-ring"
    mock.create_topic(topic)
    mock.produce(topic, [(0, b"k%d" % i, b"v" * 2000, None, None) for i in range(1000)],
                 **{"batch.num.messages": 20})
    with Consumer(mock.bootstrap, buffer_memory=4 << 20, ring_bytes=256 << 10, request_timeout=30) as consumer:
        consumer.assign({(topic, 0): 0})
        held: list = []
        link = None
        deadline = time.monotonic() + 10
        while link is None or link.ring is None or link.ring.writable() > 0:
            assert time.monotonic() < deadline, "the ring never filled"
            held += consumer.poll(0.2)
            link = next((c for (node, purpose), c in consumer.cluster.connections.items()
                         if node >= 0 and purpose == "data"), None)
        assert link.in_flight                       # an answer waits behind the full ring
        for part in held:
            part.release()
        started = time.monotonic()
        got = consumer.poll(2.0)
        assert got, f"nothing read {time.monotonic() - started:.1f} s after the ring was emptied"
        for part in got:
            part.release()


# --- damaged frames: every complete answer read before one is kept ----------------------------

BAD_FRAMES = {
    "too short for a correlation id": struct.pack(">i", 2) + b"\0\0",
    "an unknown correlation id": struct.pack(">ii", 4, 0x7FFF0000),
    "a negative size": struct.pack(">i", -7),
}


@pytest.mark.parametrize("bad", list(BAD_FRAMES), ids=list(BAD_FRAMES))
def test_answers_read_before_a_bad_frame_are_delivered(bad):
    """One read brings a good Metadata answer and then a damaged frame: the answer reaches
    its request (before: it was taken from the ring and dropped, or failed as if unanswered),
    the request still waiting gets the connection's error, and the connection is closed."""
    from fake_broker import METADATA, FakeBroker, answering

    from kafkacodec import SimpleMemoryPool
    from kafkacodec.consumer._cluster import Request
    from kafkacodec.protocol._metadata import decode_metadata_response, encode_metadata_request

    normal = answering(lambda: fake.port, {"t": 1})

    def answer(key, version, body):
        if key == METADATA:
            return normal(key, version, body), BAD_FRAMES[bad]
        return normal(key, version, body)       # ApiVersions; never ListOffsets

    with FakeBroker(answer) as fake:
        cluster = Cluster(fake.bootstrap, pool=SimpleMemoryPool(1 << 20, 1 << 20, True),
                          ring_bytes=1 << 20, request_timeout=5)
        events = []

        def on_metadata(resp, version):
            with resp:
                events.append(("metadata", len(decode_metadata_response(resp.payload, version).topics)))

        hang = Request(ApiKey.LIST_OFFSETS, _list_offsets_frame, lambda r, v: r.release(),
                       lambda exc: events.append(("hang failed", type(exc).__name__)),
                       max_version=5, min_version=1)
        meta = Request(METADATA, lambda v, cid: encode_metadata_request(["t"], api_version=v,
                                                                        correlation_id=cid),
                       on_metadata, lambda exc: events.append(("metadata failed", repr(exc))),
                       max_version=1, min_version=1)
        conn = cluster.send(-1, hang)            # sent first: its answer never comes
        cluster.send(-1, meta)
        deadline = time.monotonic() + 5
        while len(events) < 2 and time.monotonic() < deadline:
            cluster.loop.run_once(0.05)
        cluster.close()
    assert events[0] == ("metadata", 1), events
    assert events[1][0] == "hang failed" and conn.closed, events


def _list_offsets_frame(version, cid):
    from kafkacodec.protocol import control

    return control.encode_request(control.list_offsets_request({"t": [(0, -1)]}), version, cid)


def test_a_fetch_answer_followed_by_a_bad_frame_is_kept():
    """The red team's case: a valid Fetch answer and a bad frame in one read.  Before, the
    answer was dropped and its partition stayed "in flight" forever: poll() returned nothing,
    without an error.  Now its records are returned, the connection is dropped and opened
    again, and the partition continues after them (offset 0 is fetched once)."""
    from fake_broker import FETCH, FakeBroker, answering, fetch_v4_body, fetch_v4_offsets

    from kafkacodec import MemoryRecordsBuilder

    def batch(base):
        builder = MemoryRecordsBuilder(base_offset=base)
        for i in range(5):
            builder.append(1_700_000_000_000 + base + i, b"k%d" % (base + i), b"v%d" % (base + i))
        return bytes(builder.build())

    batches = {0: batch(0), 5: batch(5)}
    asked = []
    normal = answering(lambda: fake.port, {"t": 1})

    def answer(key, version, body):
        if key != FETCH:
            return normal(key, version, body)
        offset = fetch_v4_offsets(body)[("t", 0)]
        asked.append(offset)
        records = batches.get(offset, b"")
        if not records:
            time.sleep(0.05)                     # the end of the log: a (short) long poll
        body = fetch_v4_body("t", 0, records, 10)
        return (body, BAD_FRAMES["too short for a correlation id"]) if offset == 0 else body

    with FakeBroker(answer) as fake, \
            Consumer(fake.bootstrap, buffer_memory=1 << 20, retry_backoff=0.01) as consumer:
        consumer.assign({("t", 0): 0})
        got = consume_all(consumer, {("t", 0): 10}, "raw", timeout=5)
    assert [(p, o, k, v) for p, o, k, v, _, _ in got] == [(0, i, b"k%d" % i, b"v%d" % i) for i in range(10)]
    assert asked.count(0) == 1 and 5 in asked, asked


def test_a_corrupt_message_fetch_answer_fails_the_consumer():
    """CORRUPT_MESSAGE is retriable in Kafka's error table (CorruptRecordException), yet Kafka's
    consumer fails on it in a fetch answer (FetchCollector) instead of asking for the same bytes
    again: poll() raises BrokerError naming it, after one fetch."""
    from fake_broker import FETCH, FakeBroker, answering, fetch_v4_body

    from kafkacodec.consumer import BrokerError

    fetches = []
    normal = answering(lambda: fake.port, {"t": 1})

    def answer(key, version, body):
        if key != FETCH:
            return normal(key, version, body)
        fetches.append(body)
        return fetch_v4_body("t", 0, b"", 10, error_code=2)

    with FakeBroker(answer) as fake, \
            Consumer(fake.bootstrap, buffer_memory=1 << 20, retry_backoff=0.01) as consumer:
        consumer.assign({("t", 0): 0})
        deadline = time.monotonic() + 5
        with pytest.raises(BrokerError) as info:
            while time.monotonic() < deadline:
                consumer.poll(0.1)
    assert info.value.error_code == 2 and info.value.error_name == "CORRUPT_MESSAGE", str(info.value)
    assert (info.value.topic, info.value.partition) == ("t", 0) and len(fetches) == 1


# --- timeouts: every blocking call ends within its deadline ------------------------------------

TIMEOUT, SLACK = 0.3, 0.5


def run_bounded(call, limit):
    """(seconds `call()` took, what it raised or returned); fails after `limit` seconds instead
    of waiting for a call that does not end (it runs in a daemon thread)."""
    from background import in_thread

    thread, box = in_thread(call)
    thread.join(limit)
    assert not thread.is_alive(), f"still blocked after {limit} s"
    return box["took"], box["result"] if "result" in box else box["error"]


def assert_timed_out(took, result, call, address, timeout=TIMEOUT):
    from kafkacodec.errors import KafkaCodecError, KafkaTimeoutError

    assert isinstance(result, KafkaTimeoutError), (call, result)
    assert isinstance(result, TimeoutError) and isinstance(result, KafkaCodecError)
    assert result.call == call and address in result.broker, (call, str(result))
    assert f"{call}()" in str(result) and address in str(result), str(result)
    assert took <= timeout + SLACK, (call, took, str(result))


BLOCKING_CALLS = {
    "partitions_for": lambda c: c.partitions_for("t"),
    "assign": lambda c: c.assign({("t", 0): "earliest"}),
    "assign_topics": lambda c: c.assign_topics(["t"]),
    "beginning_offsets": lambda c: c.beginning_offsets([("t", 0)]),
    "end_offsets": lambda c: c.end_offsets([("t", 0)]),
    "commit": lambda c: c.commit({("t", 0): 5}),
    "committed": lambda c: c.committed([("t", 0)]),
    "position": lambda c: c.position(("t", 0)),     # after an assign that timed out
}


@pytest.mark.parametrize("broker", ["silent", "answers metadata only", "unreachable"])
def test_every_blocking_call_honours_its_timeout(broker):
    """request_timeout=0.3 and no other setting: each blocking call raises KafkaTimeoutError
    (naming the call and the broker) within 0.3 s plus a small slack (0.5 s), against a broker
    that accepts and never answers, one that answers only ApiVersions and Metadata, and one
    that refuses connections.  (Before: Cluster.call tried 6 times at timeout + 1 s each, plus
    backoff, under loops of up to 10 or 20 attempts: 6.6-38.7 s at request_timeout=1; against
    the refusing broker a ConnectionRefusedError.)  close() does not wait for what is in
    flight."""
    from fake_broker import FakeBroker, answering, refused_address

    if broker == "unreachable":
        bootstrap, holder = refused_address()
        fake = None
    else:
        fake = FakeBroker(answering(lambda: fake.port, {"t": 1}) if broker != "silent" else None)
        bootstrap, holder = fake.bootstrap, None
    try:
        for name, call in BLOCKING_CALLS.items():
            if name == "partitions_for" and fake is not None and broker != "silent":
                continue                               # it answers that one
            consumer = Consumer(bootstrap, buffer_memory=1 << 20, group_id="g",
                                request_timeout=TIMEOUT, retry_backoff=0.05)
            if name == "position":
                _, error = run_bounded(lambda: consumer.assign({("t", 0): "earliest"}), TIMEOUT + 5)
                assert isinstance(error, TimeoutError), error
            took, result = run_bounded(lambda: call(consumer), TIMEOUT + 5)
            assert_timed_out(took, result, name, bootstrap)
            took, _ = run_bounded(consumer.close, 5)
            assert took < 0.2, took
    finally:
        if fake is not None:
            fake.close()
        if holder is not None:
            holder.close()


def test_the_api_timeout_and_a_call_timeout_set_the_deadline():
    """default_api_timeout (Kafka's default.api.timeout.ms) bounds every blocking call, a
    call's own timeout= bounds that call; request_timeout stays the wait for one answer.  At
    request_timeout=1 s, commit() ends in about 1 s (the red team measured 28-38 s)."""
    from fake_broker import FakeBroker

    with FakeBroker() as fake:
        with Consumer(fake.bootstrap, buffer_memory=1 << 20, request_timeout=30,
                      default_api_timeout=TIMEOUT) as consumer:
            assert_timed_out(*run_bounded(lambda: consumer.partitions_for("t"), 10),
                             "partitions_for", fake.bootstrap)
        with Consumer(fake.bootstrap, buffer_memory=1 << 20, request_timeout=30) as consumer:
            assert_timed_out(*run_bounded(lambda: consumer.end_offsets([("t", 0)], timeout=TIMEOUT), 10),
                             "end_offsets", fake.bootstrap)
        with Consumer(fake.bootstrap, buffer_memory=1 << 20, request_timeout=1.0,
                      group_id="g") as consumer:
            assert_timed_out(*run_bounded(lambda: consumer.commit({("t", 0): 1}), 10),
                             "commit", fake.bootstrap, timeout=1.0)


def test_partitions_at_their_end_never_hold_back_the_others_on_a_connection():
    """A broker answers a connection's requests in order: a fetch of partitions at their end
    alone would wait fetch_max_wait_ms there, and every fetch behind it too.  One broker, one
    partition with 30 batches (the mock answers one batch a fetch), three empty ones, 3 s long
    polls: the 30 batches come in far less than one long poll (before: 3 s per fetch)."""
    single = MockCluster(1)
    topic = "end-partitions"
    single.create_topic(topic)
    single.produce(topic, make_records([0], 300, "e"), **{"batch.num.messages": 10})
    with Consumer(single.bootstrap, buffer_memory=4 << 20, max_in_flight=2,
                  fetch_max_wait_ms=3000) as consumer:
        consumer.assign({(topic, p): 0 for p in range(4)})
        ends = consumer.end_offsets(consumer.assignment())
        assert ends[(topic, 0)] == 300 and all(ends[(topic, p)] == 0 for p in (1, 2, 3))
        started = time.monotonic()
        got = consume_all(consumer, ends, "raw", timeout=60)
        took = time.monotonic() - started
        assert [m[1] for m in got] == list(range(300))
        assert consumer.fetcher.fetches_sent >= 30
        assert took < 2.0, took


def test_poll_never_waits_longer_than_its_timeout():
    """poll(timeout) with stale Metadata and a broker that has stopped answering: the refresh
    is sent without waiting for it, so poll returns after its timeout (before: it waited for
    the Metadata answer, request_timeout and its retries, inside poll)."""
    from fake_broker import METADATA, FakeBroker, answering

    normal = answering(lambda: fake.port, {"t": 1})
    answered = []

    def answer(key, version, body):
        if key == METADATA:
            if answered:
                return None                      # only the first Metadata request
            answered.append(key)
        return normal(key, version, body)

    with FakeBroker(answer) as fake, \
            Consumer(fake.bootstrap, buffer_memory=1 << 20, request_timeout=5) as consumer:
        consumer.assign({("t", 0): 0})
        consumer.cluster.metadata_stale = True    # as after a NOT_LEADER answer
        took, result = run_bounded(lambda: consumer.poll(0.3), 4)
        assert result == [] and took <= 0.3 + SLACK, (took, result)
        assert fake.requests[METADATA] == 2       # the refresh went out


def test_the_asynchronous_forms_never_wait_and_end_as_the_blocking_ones():
    """The calls a loop that serves others makes (the gateway's): commit_async, committed_async,
    list_offsets_async, metadata_async and assign_async, five of each at once, against a broker
    that never answers.  Each returns at once, and at its deadline calls back exactly once with
    the KafkaTimeoutError its blocking form raises (naming the call and the broker); all of them
    end together, not one after another."""
    from fake_broker import FakeBroker

    # longer than the module's: under ASan on a loaded machine the 25 starts took over 0.3 s,
    # and the first call's deadline passed before the last one started
    timeout = 1.0
    with FakeBroker() as fake, Consumer(fake.bootstrap, buffer_memory=1 << 20, group_id="g",
                                        request_timeout=timeout, retry_backoff=0.05) as consumer:
        ended: dict[tuple[str, int], list] = {}

        def callback(call, i):
            return lambda value, error: ended.setdefault((call, i), []).append((value, error))

        starts = {
            "commit": lambda cb: consumer.groups.commit_async(
                "g", {("t", 0): 5}, cb, deadline=consumer.deadline("commit", timeout)),
            "committed": lambda cb: consumer.groups.committed_async(
                "g", [("t", 0)], cb, deadline=consumer.deadline("committed", timeout)),
            "list_offsets": lambda cb: consumer.list_offsets_async(
                [("t", 0)], -1, cb, deadline=consumer.deadline("list_offsets", timeout)),
            "refresh_metadata": lambda cb: consumer.cluster.metadata_async(
                ["t"], consumer.deadline("refresh_metadata", timeout), cb),
            "assign": lambda cb: consumer.assign_async({("t", 0): "earliest"}, cb, timeout=timeout),
        }
        begin = time.monotonic()
        for call, start in starts.items():
            for i in range(5):
                start(callback(call, i))
        # none waited for its answer (it would have called back, and the blocking forms one
        # after another take 25 x timeout); a bound in time that ASan's slower calls still meet
        started = time.monotonic()
        assert not ended and started - begin < 5 * timeout
        while len(ended) < 25 and time.monotonic() - started < timeout + 5:
            consumer.loop.run_once(0.05)
        took = time.monotonic() - started              # every deadline was set before `started`
        consumer.loop.run_once(0.2)                     # nothing calls back twice
    assert sorted(ended) == sorted((call, i) for call in starts for i in range(5))
    for (call, _), results in ended.items():
        assert len(results) == 1, (call, results)
        value, error = results[0]
        assert value is None
        assert_timed_out(took, error, call, fake.bootstrap, timeout)


def test_from_a_loop_callback_the_calls_that_never_wait_consume_and_a_blocking_one_is_refused(mock):
    """A Consumer on a loop that serves others (the gateway's), driven from that loop's
    callbacks only: assign_async, seek, pause, resume, position, assignment, poll(0) and
    unassign never run the loop, and together they read a partition whole; a blocking call made
    there (assign) is refused with ConcurrentUseError at once instead of holding the loop (before:
    it ran the loop inside the callback until its answer)."""
    from kafkacodec.net.loop import Loop

    mock.create_topic("on-loop")
    produced = mock.produce("on-loop", [(0, b"k%d" % i, b"v%d" % i, None, None) for i in range(30)])
    loop = Loop()
    consumer = Consumer(mock.bootstrap, buffer_memory=1 << 20, loop=loop)
    tp = ("on-loop", 0)
    got: list[tuple[int, bytes]] = []
    seen: dict[str, object] = {}

    def start() -> None:
        consumer.assign_async({tp: 10}, lambda value, error: seen.setdefault("assigned", error))
        consumer.seek(tp, 0)
        consumer.pause([tp])
        consumer.resume([tp])
        seen["assignment"] = consumer.assignment()
        seen["position"] = consumer.position(tp)
        try:
            consumer.assign({("on-loop", 1): 0})
        except ConcurrentUseError as exc:
            seen["blocking"] = exc

    def drain() -> None:
        for part in consumer.poll(0):
            with part:
                for batch in part.batches if part.partition == 0 else ():
                    got.extend((r.offset, r.value) for r in MemoryRecords(bytes(batch.value)).records()
                               if r.offset >= part.start_offset)
        if len(got) < 30:
            loop.call_later(0.01, drain)

    loop.call_soon(start)
    loop.call_soon(drain)
    deadline = time.monotonic() + 20
    try:
        # the records may all arrive before assign_async's own metadata answer (poll asked too)
        while (len(got) < 30 or "assigned" not in seen) and time.monotonic() < deadline:
            loop.run_once(0.05)
        assert isinstance(seen.get("blocking"), ConcurrentUseError), seen
        assert seen["assignment"] == [tp] and seen["position"] == 0, seen
        assert seen.get("assigned", "missing") is None, seen
        assert got == sorted((o, v) for (_, o), (_, v) in produced.items()), got
        consumer.unassign([tp])
        # the refused assign got as far as a timed-out one: its partition is assigned
        assert consumer.assignment() == [("on-loop", 1)]
    finally:
        consumer.close()
        loop.close()
