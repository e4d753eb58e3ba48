"""The mirror process (``kafkacodec mirror``): shallow KIP-712 mirroring of topics from a source
cluster to a target cluster.

- The source is read by the consumer core (read_committed: control batches and aborted
  transactions never reach the target) into rings from one pool of `buffer_memory` bytes.
- Whole batches move without decompression; the first is trimmed when a start position lies
  inside it.  Each is copied once into a ProduceRequest with the mirror's own idempotent
  producer state (InitProducerId; per-partition sequences; the transactional flag cleared) and
  its CRC-32C updated from the header alone.  acks=all; one batch per partition per request
  unless `multi_batch`.
- The source position after the last acknowledged batch is checkpointed atomically in the state
  directory (and optionally committed to a source group): a crash and restart lose nothing and
  write again at most what was acknowledged after the last checkpoint plus what was in flight.
- Source partition p goes to target partition p of the (renamed) target topic; a target topic
  with fewer partitions is refused, a missing one created with the source's partition count and
  topic configs (mirror/_topics.py) unless `create_topics` is off.  Several source topics may
  go to one target topic (a merge, also `--topics a,b --rename a:b`): each batch carries its
  source partition, whose position its acknowledgement moves.  `until_caught_up` ends once
  everything that was in the source at start is acknowledged.

See docs/mirroring.md.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from typing import Any

from kafkacodec.consumer import Consumer
from kafkacodec.consumer._cluster import BrokerError, Cluster
from kafkacodec.consumer._forms import FetchedPartition
from kafkacodec.net.loop import Loop
from kafkacodec.mirror._checkpoint import Checkpoint, CheckpointDamagedError
from kafkacodec.mirror._producer import IdempotentProducer, Item
from kafkacodec.mirror._topics import create_topics, source_configs
from kafkacodec.protocol.api import Error

__all__ = ["Mirror", "MirrorConfig", "MirrorError", "TARGET_RING_BYTES"]

#: Each target connection's ring (ProduceResponses are small); taken from the pool with priority.
TARGET_RING_BYTES = 256 << 10


class MirrorError(Exception):
    """A configuration the mirror refuses (missing topics, a target with fewer partitions...)."""


@dataclasses.dataclass
class MirrorConfig:
    source: str
    target: str
    topics: list[str]
    state_dir: str
    rename: dict[str, str] = dataclasses.field(default_factory=dict)
    until_caught_up: bool = False
    buffer_memory: int = 64 << 20
    multi_batch: bool = False
    group_id: str | None = None          # also commit the positions to this source group
    start: str | None = None             # without a checkpoint: earliest (None) | latest | committed;
                                         # given, also where to begin when it is damaged
    checkpoint_interval: float = 1.0     # seconds between checkpoints (0: after every ack)
    max_in_flight: int = 5               # unacknowledged batches per partition (<= 5)
    max_request_bytes: int = 8 << 20
    request_timeout: float = 30.0
    metrics_listen: str | None = None
    progress: bool | None = None         # None: when stderr is a terminal
    # TLS and SASL toward each cluster: a kafkacodec.net.ClientSecurity, client properties, or a
    # client.properties path (None: PLAINTEXT)
    source_security: Any = None
    target_security: Any = None
    client_id: str = "kafkacodec-mirror"
    create_topics: bool = True           # missing target topics are created (MirrorMaker 2 does)


class Mirror:
    """One mirror run.  `run()` returns an exit status (0: done or stopped cleanly)."""

    def __init__(self, config: MirrorConfig):
        self.config = config
        self.checkpoint = Checkpoint(config.state_dir)
        self.consumer: Consumer | None = None
        self.loop: Loop | None = None
        self.target: Cluster | None = None
        self.producer: IdempotentProducer | None = None
        self.acked: dict[tuple[str, int], int] = {}        # source position acknowledged
        self.ends: dict[tuple[str, int], int] = {}          # --until-caught-up targets
        self.stopping = False
        self.metrics_port: int | None = None
        self._metrics_server: Any = None
        self._dirty = False
        self._copied_left: dict[int, int] = {}               # id(FetchedPartition) -> batches left
        self._parts: dict[int, FetchedPartition] = {}
        self._first: dict[tuple[str, int], int] = {}         # positions at start, for summary()
        self._started = time.monotonic()

    def target_topic(self, topic: str) -> str:
        return self.config.rename.get(topic, topic)

    def stop(self, *_: object) -> None:
        """Finish the requests in flight, checkpoint, and return from run() (signal-safe)."""
        self.stopping = True

    # -- set-up --------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg = self.config
        self.loop = loop = Loop()
        self.consumer = Consumer(cfg.source, buffer_memory=cfg.buffer_memory,
                                 isolation_level="read_committed", group_id=cfg.group_id,
                                 client_id=cfg.client_id, request_timeout=cfg.request_timeout,
                                 loop=loop, max_in_flight=2, security=cfg.source_security)
        self.target = Cluster(cfg.target, pool=self.consumer.pool, ring_bytes=TARGET_RING_BYTES,
                              client_id=cfg.client_id, request_timeout=cfg.request_timeout,
                              loop=loop, priority=True, name="target", security=cfg.target_security)
        counts = {topic: self.consumer.partitions_for(topic) for topic in cfg.topics}
        targets = [self.target_topic(t) for t in cfg.topics]
        self.target.refresh_metadata(targets)
        missing = [t for t in cfg.topics
                   if self.target.topic_errors.get(self.target_topic(t)) == Error.UNKNOWN_TOPIC_OR_PARTITION]
        if missing and cfg.create_topics:
            self._create_target_topics(missing, counts)
        for attempt in range(12):
            # a topic just created may take a moment to reach every broker's metadata
            self.target.refresh_metadata(targets)
            if all(self.target.topic_errors.get(t, 3) == 0 for t in targets) or attempt == 11:
                break
            self.target.wait(min(0.1 * 2 ** attempt, 1.0))
        for topic in cfg.topics:
            name = self.target_topic(topic)
            code = self.target.topic_errors.get(name, 3)
            if code:
                raise MirrorError(f"target topic {name!r} is not available on {cfg.target} "
                                  f"(error {code}): create it with at least {counts[topic]} "
                                  f"partitions" + ("" if cfg.create_topics else
                                                   ", or leave out --no-create-topics"))
            have = self.target.partition_counts[name]
            if have < counts[topic]:
                raise MirrorError(f"target topic {name!r} has {have} partitions, fewer than the "
                                  f"{counts[topic]} of source topic {topic!r}: each source "
                                  f"partition needs its own target partition")
        try:
            saved = self.checkpoint.load(self.consumer.cluster.cluster_id, self.target.cluster_id)
        except CheckpointDamagedError as exc:
            if cfg.start is None:                # never the whole topics again unasked
                raise MirrorError(str(exc)) from None
            saved = {}
        wanted: dict[tuple[str, int], Any] = {}
        for topic, count in counts.items():
            for p in range(count):
                key = (topic, p)
                wanted[key] = saved.get(key, cfg.start or "earliest")
        self.consumer.assign(wanted)
        for key in wanted:
            self.acked[key] = self.consumer.position(key)
        self._first = dict(self.acked)
        if cfg.until_caught_up:
            self.ends = self.consumer.end_offsets(list(wanted))
        self.producer = IdempotentProducer(
            self.target, max_in_flight=cfg.max_in_flight, max_request_bytes=cfg.max_request_bytes,
            multi_batch=cfg.multi_batch, client_id=cfg.client_id, on_copied=self._on_copied,
            on_acked=self._on_acked, timeout_ms=int(cfg.request_timeout * 1000))
        self.producer.init_producer_id()
        if cfg.metrics_listen:
            from kafkacodec.mirror._metrics import start_metrics_server

            self._metrics_server, self.metrics_port = start_metrics_server(self, cfg.metrics_listen)

    def _create_target_topics(self, topics: list[str], counts: dict[str, int]) -> None:
        """The missing target topics, as MirrorMaker 2 creates them (mirror/_topics.py)."""
        assert self.consumer is not None and self.target is not None
        cfg = self.config
        configs = source_configs(self.consumer.cluster, topics, cfg.client_id)
        wanted = {self.target_topic(t): (counts[t], (configs or {}).get(t, {})) for t in topics}
        try:
            create_topics(self.target, wanted, cfg.client_id, int(cfg.request_timeout * 1000))
        except BrokerError as exc:
            partitions = wanted[exc.topic][0] if exc.topic in wanted else max(counts.values())
            raise MirrorError(f"{exc} on {cfg.target}: create it with at least {partitions} "
                              "partitions, or allow the mirror to (CREATE on the topic)") from None
        for name, (partitions, copied) in wanted.items():
            shown = ", ".join(f"{k}={v}" for k, v in sorted(copied.items())) or "none set on the source"
            print(f"kafkacodec mirror: created target topic {name!r} with {partitions} partitions; "
                  f"configs {shown if configs is not None else 'not copied (the source cannot describe them)'}",
                  file=sys.stderr)

    # -- the flow of batches -------------------------------------------------------------------
    def _take(self, part: FetchedPartition) -> None:
        """Queue a fetched partition's batches for the target (or its new position only)."""
        assert self.producer is not None
        topic = self.target_topic(part.topic)
        source = (part.topic, part.partition)
        batches = part.batches
        if not batches:
            self.producer.enqueue(topic, part.partition, Item(None, source, part.next_offset, part))
            part.release()
            return
        self._copied_left[id(part)] = len(batches)
        self._parts[id(part)] = part
        for i, batch in enumerate(batches):
            following = batch.offset + 1 if i + 1 < len(batches) else part.next_offset
            self.producer.enqueue(topic, part.partition, Item(batch, source, following, part))

    def _on_copied(self, item: Item) -> None:
        """A batch is in a request frame: its source bytes may go back to the ring."""
        key = id(item.owner)
        left = self._copied_left.get(key)
        if left is None:
            return
        if left <= 1:
            del self._copied_left[key]
            self._parts.pop(key).release()
        else:
            self._copied_left[key] = left - 1

    def _on_acked(self, item: Item) -> None:
        self.acked[item.source] = item.source_next
        self._dirty = True

    def summary(self, outcome: str) -> str:
        """One line of what this run did, for a log with no progress bar (cron, systemd)."""
        cfg = self.config
        offsets = sum(self.acked[tp] - start for tp, start in self._first.items())
        sent = self.producer.bytes_sent if self.producer is not None else 0
        return (f"kafkacodec mirror: {outcome}: {offsets} offsets ({sent / 1e6:.1f} MB) of "
                f"{len(self._first)} partitions from {cfg.source} to {cfg.target} in "
                f"{time.monotonic() - self._started:.1f} s; positions kept in {cfg.state_dir}")

    def caught_up(self) -> bool:
        return bool(self.ends) and all(self.acked.get(tp, -1) >= end for tp, end in self.ends.items())

    def save_checkpoint(self, force: bool = False) -> None:
        if not self._dirty and not force:
            return
        interval = self.config.checkpoint_interval
        if not force and interval > 0 and time.monotonic() - self.checkpoint.written_at < interval:
            return
        positions = dict(self.acked)
        self.checkpoint.save(positions, {t: self.target_topic(t) for t in self.config.topics})
        self._dirty = False
        if self.config.group_id and self.consumer is not None:
            try:
                self.consumer.commit(positions)
            except (BrokerError, ConnectionError, TimeoutError, OSError) as exc:
                print(f"kafkacodec mirror: commit to group {self.config.group_id!r} failed: "
                      f"{exc}", file=sys.stderr)

    # -- the loop ------------------------------------------------------------------------------
    def run(self, install_signals: bool = False) -> int:
        previous = {}
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self.stop)
        try:
            self._setup()
            return self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.close()

    def _loop(self) -> int:
        consumer, producer = self.consumer, self.producer
        assert consumer is not None and producer is not None
        progress = _progress(self)
        try:
            while True:
                if producer.fatal is not None:
                    self.save_checkpoint(force=True)
                    raise producer.fatal
                if self.caught_up() and not producer.busy:
                    self.save_checkpoint(force=True)
                    return 0
                if self.stopping:
                    return self._drain()
                timeout = 0.01 if producer.busy else 0.2
                for part in consumer.poll(timeout):
                    self._take(part)
                # acknowledgements are checkpointed (when due) before more is sent: with
                # checkpoint_interval 0 a crash writes again only what was in flight
                self.save_checkpoint()
                producer.send_ready()
                if producer.busy:
                    consumer.loop.run_once(0)           # acknowledgements that already arrived
                    self.save_checkpoint()
                    producer.send_ready()
                progress.update()
        finally:
            progress.close()

    def _drain(self, timeout: float = 30.0) -> int:
        """Stop fetching; wait for what was sent; checkpoint."""
        assert self.consumer is not None and self.producer is not None
        deadline = time.monotonic() + timeout
        for tp in self.consumer.assignment():
            self.consumer.fetcher.states[tp].paused = True
        while any(tp.in_flight for tp in self.producer.partitions.values()) and \
                time.monotonic() < deadline and self.producer.fatal is None:
            self.consumer.loop.run_once(0.05)
        self.save_checkpoint(force=True)
        return 0

    def close(self) -> None:
        for part in list(self._parts.values()):
            part.release()
        self._parts.clear()
        if self.target is not None:
            self.target.close()
        if self.consumer is not None:
            self.consumer.close()
        if self.loop is not None:
            self.loop.close()
            self.loop = None
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server = None


class _NoProgress:
    def update(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Progress:
    """Progress on stderr with tqdm: records acknowledged (of the backlog at start with
    --until-caught-up), bytes and the slowest partition's lag."""

    def __init__(self, mirror: Mirror):
        from tqdm import tqdm

        self.mirror = mirror
        total = None
        if mirror.ends:
            total = sum(max(0, end - mirror.acked.get(tp, end)) for tp, end in mirror.ends.items())
        self.start = dict(mirror.acked)
        self.bar = tqdm(total=total, unit="rec", unit_scale=True, desc="mirror", file=sys.stderr,
                        dynamic_ncols=True)
        self.last = 0.0

    def update(self) -> None:
        now = time.monotonic()
        if now - self.last < 0.2:
            return
        self.last = now
        m = self.mirror
        done = sum(max(0, m.acked[tp] - self.start.get(tp, m.acked[tp])) for tp in m.acked)
        self.bar.n = done
        producer = m.producer
        self.bar.set_postfix_str(
            f"{(producer.bytes_sent if producer else 0) / 1e6:.1f} MB sent, "
            f"{producer.pending_batches() if producer else 0} batches queued", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.update()
        self.bar.close()


def _progress(mirror: Mirror) -> Any:
    enabled = mirror.config.progress
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return _NoProgress()
    try:
        return _Progress(mirror)
    except ImportError:
        print("kafkacodec mirror: progress needs tqdm (pip install kafkacodec[mirror])",
              file=sys.stderr)
        return _NoProgress()
