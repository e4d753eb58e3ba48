"""`kafkacodec mirror` between two librdkafka mock clusters (3 brokers each, shared by the
module): every codec, an idempotent producer, committed and aborted transactions, --rename,
checkpoints and source-group commits, metrics, and a restart after kill -9 in the middle
(at-least-once: the duplicates a restart writes are counted against the documented bound).
confluent-kafka's consumer reads both sides."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from isolated import child_env

ck = pytest.importorskip("confluent_kafka")

from mock_cluster import MockCluster  # noqa: E402

from kafkacodec.consumer import Consumer  # noqa: E402
from kafkacodec.mirror import Mirror, MirrorConfig  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def clusters():
    return MockCluster(3), MockCluster(3)


def read_all(cluster, topic, partitions=range(4), timeout=30.0):
    """Every record of `topic` on `cluster` (confluent-kafka), up to the high watermarks:
    {partition: [(key, value, headers, timestamp)]}."""
    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "verify",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    ends = {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
            for p in partitions}
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
    out = {p: [] for p in partitions}
    deadline = time.monotonic() + timeout
    try:
        while any(len(out[p]) < ends[p] for p in partitions):
            assert time.monotonic() < deadline, ({p: len(v) for p, v in out.items()}, ends)
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                out[msg.partition()].append((msg.key(), msg.value(), msg.headers() or [],
                                             msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


def produce(cluster, topic, n, codec="none", seed="", **config):
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": codec,
                            "linger.ms": 5, "batch.num.messages": 10, **config})
    for i in range(n):
        for p in range(4):
            producer.produce(topic, key=b"%s%d" % (seed.encode(), i),
                             value=b"%s %s p%d r%d " % (topic.encode(), seed.encode(), p, i) * (1 + i % 4),
                             partition=p, timestamp=1_700_000_000_000 + i,
                             headers=[("i", b"%d" % i)] if i % 2 else None)
        producer.poll(0)
    assert producer.flush(30) == 0


def topic_on_both(clusters, topic, n, codec="none", seed=""):
    """`topic` on the source and the target, `n` records in each source partition."""
    source, target = clusters
    source.create_topic(topic)
    target.create_topic(topic)
    produce(source, topic, n, codec, seed)
    return source, target


def mirror(source, target, topics, state_dir, **options):
    config = MirrorConfig(source=source.bootstrap, target=target.bootstrap, topics=topics,
                          state_dir=str(state_dir), until_caught_up=True, progress=False, **options)
    m = Mirror(config)
    assert m.run() == 0
    return m


def test_every_codec_and_a_rename(clusters, tmp_path):
    source, target = clusters
    topics = [f"codec-{c}" for c in CODECS]
    for topic, codec in zip(topics, CODECS):
        source.create_topic(topic)
        target.create_topic(topic if codec != "zstd" else "renamed-zstd")
        produce(source, topic, 60, codec)
    m = mirror(source, target, topics, tmp_path, rename={"codec-zstd": "renamed-zstd"})
    for topic in topics:
        want = read_all(source, topic)
        got = read_all(target, m.target_topic(topic))
        assert got == want and sum(len(v) for v in got.values()) == 240
    # whole batches moved: same boundaries, same compression, the mirror's producer state
    with Consumer(target.bootstrap, buffer_memory=2 << 20) as consumer:
        consumer.assign({("renamed-zstd", 0): 0})
        part = consumer.poll(5.0)[0]
        batch = part.batches[0]
        assert batch.compression.name == "ZSTD" and batch.producer_id == m.producer.producer_id
        assert batch.base_sequence == 0 and not batch.is_transactional
        part.release()
    state = json.loads((tmp_path / "checkpoint.json").read_text())
    assert state["positions"]["codec-lz4/3"] == 60
    assert state["topics"]["codec-zstd"] == "renamed-zstd"


def test_transactions_and_an_idempotent_source(clusters, tmp_path):
    source, target = clusters
    topic = "txn-source"
    source.create_topic(topic)
    target.create_topic(topic)
    plain = ck.Producer({"bootstrap.servers": source.bootstrap, "enable.idempotence": True,
                         "linger.ms": 1})
    txn = ck.Producer({"bootstrap.servers": source.bootstrap, "transactional.id": "mirror-src",
                       "linger.ms": 1, "batch.num.messages": 4, "compression.type": "lz4"})
    txn.init_transactions(10)
    want = {p: [] for p in range(4)}
    for t in range(6):
        txn.begin_transaction()
        values = []
        for r in range(9):
            for p in range(4):
                value = b"txn %d r%d p%d" % (t, r, p)
                txn.produce(topic, value=value, partition=p)
                values.append((p, value))
            if r == 4:
                for p in range(4):
                    plain.produce(topic, value=b"plain %d p%d" % (t, p), partition=p)
                    want[p].append(b"plain %d p%d" % (t, p))
                assert plain.flush(10) == 0
            txn.poll(0)
        txn.flush(10)
        if t % 2:
            txn.abort_transaction(10)
        else:
            txn.commit_transaction(10)
            for p, value in values:
                want[p].append(value)
    m = mirror(source, target, [topic], tmp_path)
    got = read_all(target, topic)
    # plain records were written in the middle of transactions: compare per partition as sets
    # of values, then the order of each producer's records
    for p in range(4):
        values = [v for _, v, _, _ in got[p]]
        assert sorted(values) == sorted(want[p])
        assert [v for v in values if v.startswith(b"txn")] == [v for v in want[p] if v.startswith(b"txn")]
    # nothing transactional, no control batch reached the target; one producer id
    with Consumer(target.bootstrap, buffer_memory=2 << 20, control_batches=True) as consumer:
        consumer.assign({(topic, p): 0 for p in range(4)})
        ends = consumer.end_offsets(consumer.assignment())
        seen = 0
        while any(consumer.position(tp) < e for tp, e in ends.items()):
            for part in consumer.poll(1.0):
                for batch in part.batches:
                    assert not batch.is_transactional and not batch.is_control
                    assert batch.producer_id == m.producer.producer_id
                    seen += 1
                part.release()
        assert seen > 0


def test_group_commits_and_a_second_run_continues(clusters, tmp_path):
    topic = "resume"
    source, target = topic_on_both(clusters, topic, 20, "snappy", "a")
    mirror(source, target, [topic], tmp_path, group_id="mirror-group", checkpoint_interval=0)
    with Consumer(source.bootstrap, group_id="mirror-group") as consumer:
        assert consumer.committed([(topic, p) for p in range(4)]) == {(topic, p): 20 for p in range(4)}
    produce(source, topic, 15, "snappy", "b")
    mirror(source, target, [topic], tmp_path)                  # from the checkpoint
    assert read_all(target, topic) == read_all(source, topic)


def test_metrics_endpoint(clusters, tmp_path):
    pytest.importorskip("prometheus_client")
    source, target = clusters
    topic = "metrics"
    source.create_topic(topic)
    target.create_topic(topic)
    produce(source, topic, 10)
    config = MirrorConfig(source=source.bootstrap, target=target.bootstrap, topics=[topic],
                          state_dir=str(tmp_path), progress=False, metrics_listen="127.0.0.1:0")
    m = Mirror(config)
    runner = threading.Thread(target=m.run)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while not (m.producer and m.producer.records_acked >= 40):
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.05)
        text = urllib.request.urlopen(f"http://127.0.0.1:{m.metrics_port}/metrics", timeout=10).read().decode()
    finally:
        m.stop()
        runner.join(30)
    assert "kafkacodec_mirror_records_total 40.0" in text
    assert 'kafkacodec_mirror_position{partition="0",topic="metrics"} 10.0' in text
    assert "memory_pool_used_bytes" in text


def test_with_checkpoint_interval_0_every_ack_is_kept_before_another_batch_goes(clusters, tmp_path, monkeypatch):
    """--checkpoint-interval 0 checkpoints every acknowledgement before the producer sends
    again, so a crash writes again at most the batches in flight (--max-in-flight per
    partition), never also batches acknowledged and sent past since the last checkpoint."""
    from kafkacodec.mirror._producer import IdempotentProducer

    source, target = clusters
    topic = "every-ack"
    source.create_topic(topic)
    target.create_topic(topic)
    produce(source, topic, 2000, "lz4", **{"batch.num.messages": 10})
    config = MirrorConfig(source=source.bootstrap, target=target.bootstrap, topics=[topic],
                          state_dir=str(tmp_path), until_caught_up=True, progress=False,
                          checkpoint_interval=0)
    m = Mirror(config)
    unsaved: list[int] = []
    send_ready = IdempotentProducer.send_ready

    def checked(producer):
        if producer.busy:
            unsaved.append(m._dirty)          # an acknowledgement not in the checkpoint
        return send_ready(producer)

    monkeypatch.setattr(IdempotentProducer, "send_ready", checked)
    assert m.run() == 0
    assert len(unsaved) > 50 and not any(unsaved), f"{sum(unsaved)} of {len(unsaved)} sends"
    assert read_all(target, topic) == read_all(source, topic)


def run_cli(source, target, topic, state_dir, *extra):
    env = child_env()
    return subprocess.Popen([sys.executable, "-m", "kafkacodec.cli", "mirror", "--source", source.bootstrap,
                             "--target", target.bootstrap, "--topics", topic, "--state-dir", str(state_dir),
                             "--no-progress", *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_kill_9_in_the_middle_loses_nothing(clusters, tmp_path):
    """A mirror killed with SIGKILL mid-way and restarted writes every source record to the
    target, in order; what it writes twice is one stretch per partition, no longer than the
    batches that may have been acknowledged after the last checkpoint or in flight:
    --max-in-flight batches per partition with --checkpoint-interval 0."""
    source, target = clusters
    topic = "kill9"
    source.create_topic(topic)
    target.create_topic(topic)
    per_batch = 10
    produce(source, topic, 5000, "lz4", **{"batch.num.messages": per_batch})
    want = {p: [v for _, v, _, _ in records] for p, records in read_all(source, topic).items()}
    total = sum(len(v) for v in want.values())
    state = tmp_path / "checkpoint.json"
    first = run_cli(source, target, topic, tmp_path, "--checkpoint-interval", "0", "--max-in-flight", "5")
    deadline = time.monotonic() + 60
    try:
        while True:
            assert time.monotonic() < deadline and first.poll() is None, first.stderr.read() if first.poll() is not None else ""
            if state.exists():
                done = sum(json.loads(state.read_text())["positions"].values())
                if done >= total * 0.2:
                    break
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    killed_at = json.loads(state.read_text())["positions"]
    assert sum(killed_at.values()) < total, "the first run finished before the kill"
    second = run_cli(source, target, topic, tmp_path, "--until-caught-up")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    # off a terminal (a pipe here, cron's log there) the run leaves one summary line
    assert f"kafkacodec mirror: caught up: {total - sum(killed_at.values())} offsets (" in err, err
    assert "of 4 partitions from" in err and f"positions kept in {tmp_path}" in err, err
    got = {p: [v for _, v, _, _ in records] for p, records in read_all(target, topic).items()}
    bound = 5 * per_batch
    duplicates = 0
    for p in range(4):
        source_values, target_values = want[p], got[p]
        x = next((i for i, (a, b) in enumerate(zip(source_values, target_values)) if a != b),
                 min(len(source_values), len(target_values)))
        if x < len(target_values):
            c = source_values.index(target_values[x])         # where the restart began
            assert c <= x and target_values == source_values[:x] + source_values[c:]
            duplicates += x - c
            assert x - c <= bound, (p, x, c)
        else:
            assert target_values == source_values
    assert sum(len(v) for v in got.values()) == total + duplicates
    print("kill -9: killed at", sum(killed_at.values()), "of", total, "duplicates", duplicates)


class DisturbedMirror(Mirror):
    """A mirror whose target metadata is wrong (NOT_LEADER_OR_FOLLOWER) or whose target
    connections are cut when the first batches arrive."""

    def __init__(self, config, how):
        super().__init__(config)
        self.how = how
        self.disturbed = False

    def _take(self, part):
        if not self.disturbed:
            self.disturbed = True
            if self.how == "not-leader":
                brokers = sorted(self.target.brokers)
                for key, leader in list(self.target.leaders.items()):
                    self.target.leaders[key] = brokers[(brokers.index(leader) + 1) % len(brokers)]
            else:
                # cut every target connection right after requests went out on it
                send_ready = self.producer.send_ready

                def send_and_cut():
                    send_ready()
                    for link in list(self.target.connections.values()):
                        if link.in_flight and not link.closed and not self.cut:
                            link.conn.flush()             # the request is on the wire
                            link.conn.transport.sock.shutdown(socket.SHUT_RDWR)
                            self.cut = True

                self.cut = False
                self.producer.send_ready = send_and_cut
        super()._take(part)


@pytest.mark.parametrize("how", ["not-leader", "disconnect"])
def test_target_errors_are_retried_in_order(clusters, tmp_path, how):
    source, target = clusters
    topic = f"retry-{how}"
    source.create_topic(topic)
    target.create_topic(topic)
    produce(source, topic, 200, "lz4")
    config = MirrorConfig(source=source.bootstrap, target=target.bootstrap, topics=[topic],
                          state_dir=str(tmp_path), until_caught_up=True, progress=False)
    m = DisturbedMirror(config, how)
    assert m.run() == 0
    assert m.disturbed and m.producer.retries > 0
    assert how == "not-leader" or m.cut
    want = read_all(source, topic)
    got = read_all(target, topic)
    if how == "not-leader":
        assert got == want                         # refused batches were not written
    else:
        for p in range(4):                         # at-least-once: order kept, nothing lost
            values = [v for _, v, _, _ in got[p]]
            assert set(values) == {v for _, v, _, _ in want[p]}


def run_bounded(m, timeout=30.0):
    """m.run() in a thread: its exit status, or None when it had not ended by itself after
    `timeout` seconds (then it is stopped)."""
    result = []
    runner = threading.Thread(target=lambda: result.append(m.run()))
    runner.start()
    runner.join(timeout)
    if runner.is_alive():
        m.stop()
        runner.join(30)
        return None
    return result[0] if result else "raised"


def test_a_rename_onto_another_mirrored_topic_books_each_source_apart(clusters, tmp_path):
    """--topics a,b --rename a:b sends both source topics to target topic b (allowed: a merge);
    each acknowledgement moves the position of the source partition its batch came from (the
    rename map was inverted, booking b's batches as a's: b never caught up)."""
    source, target = clusters
    a, b = "merge-a", "merge-b"
    for topic in (a, b):
        source.create_topic(topic)
    target.create_topic(b)
    produce(source, a, 30, "lz4", "a")
    produce(source, b, 20, "none", "b")
    config = MirrorConfig(source=source.bootstrap, target=target.bootstrap, topics=[a, b], rename={a: b},
                          state_dir=str(tmp_path), until_caught_up=True, progress=False, checkpoint_interval=0)
    assert run_bounded(Mirror(config)) == 0
    state = json.loads((tmp_path / "checkpoint.json").read_text())
    assert state["positions"] == {f"{t}/{p}": n for t, n in ((a, 30), (b, 20)) for p in range(4)}
    assert state["topics"] == {a: b, b: b}
    got, want_a, want_b = read_all(target, b), read_all(source, a), read_all(source, b)
    for p in range(4):                            # each source's records in order, none twice
        assert [r for r in got[p] if r[0].startswith(b"a")] == want_a[p]
        assert [r for r in got[p] if r[0].startswith(b"b")] == want_b[p]
        assert len(got[p]) == 50


def test_a_damaged_checkpoint_stops_the_command_in_one_line_unless_a_start_is_given(clusters, tmp_path, capsys):
    from kafkacodec.cli import main

    topic = "damaged-checkpoint"
    source, target = topic_on_both(clusters, topic, 10)
    state = tmp_path / "checkpoint.json"
    state.write_text('{"format": 1, "positions": {"damaged-checkpoint/0": ')     # cut short
    argv = ["mirror", "--source", source.bootstrap, "--target", target.bootstrap, "--topics", topic,
            "--state-dir", str(tmp_path), "--no-progress", "--until-caught-up"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("kafkacodec: error:")]
    (moved,) = [p for p in tmp_path.iterdir() if p.name.startswith("checkpoint.json.damaged-")]
    assert str(state) in line and str(moved) in line and "--start" in line
    assert sum(len(v) for v in read_all(target, topic).values()) == 0    # nothing copied again
    state.write_text("{}")                                                # damaged again
    assert main(argv + ["--start", "earliest"]) == 0                     # the user's choice
    assert read_all(target, topic) == read_all(source, topic)
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("checkpoint.json.damaged-")]) == 2


def test_a_damaged_checkpoint_falls_back_to_the_previous_generation(clusters, tmp_path):
    topic = "previous-checkpoint"
    source, target = topic_on_both(clusters, topic, 10, "gzip", "a")
    mirror(source, target, [topic], tmp_path)
    # the generation a later write keeps as checkpoint.json.previous
    (tmp_path / "checkpoint.json.previous").write_bytes((tmp_path / "checkpoint.json").read_bytes())
    produce(source, topic, 10, "gzip", "b")
    (tmp_path / "checkpoint.json").write_text("[]")
    m = mirror(source, target, [topic], tmp_path)
    assert read_all(target, topic) == read_all(source, topic)           # from 10: none twice, none lost
    assert m.checkpoint.store.quarantined == 1
    from kafkacodec.mirror._metrics import MirrorCollector

    families = {f.name: f for f in MirrorCollector(m).collect()}
    assert families["kafkacodec_mirror_state_files_quarantined"].samples[0].value == 1
    assert json.loads((tmp_path / "checkpoint.json").read_text())["positions"][f"{topic}/0"] == 20
