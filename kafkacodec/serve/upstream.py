"""`serve --upstream`: the gateway's view of a Kafka cluster, read through the consumer core.

The same server answers clients, but its partitions are the upstream cluster's, fetched by one
`kafkacodec.consumer.Consumer` (one ResponseRingBuffer per broker from one SimpleMemoryPool,
KIP-81) on the server's own loop: its connections are watched by the same selector as the
clients', and every upstream answer is a callback.  Nothing on that loop waits for the cluster:
a request that needs it (ListOffsets, OffsetFetch, OffsetCommit) is answered from the callback
of the upstream call (the consumer core's asynchronous forms), so one slow upstream answer
delays that request only, never another client's.  Only the start waits, once: topics and
bounds are loaded before the server listens (the loop is not running yet).

- Metadata: every topic of the cluster, loaded before the server listens and again every
  `upstream_metadata_interval_s` (or sooner when a client asks for a topic not known yet); the
  gateway advertises itself as the leader of every partition; topic ids are the cluster's.
- Fetch: a client's fetch offset becomes the partition's *demand*.  A pass on the loop (every
  FOLLOW_S, at once when a demand changes, and after every batch of upstream answers) assigns
  the partition upstream (or seeks it) there, polls the consumer without waiting and copies each
  fetched answer out of the ring into a `_Chunk` (one copy; the ring is released at once), kept
  per partition in order: the cluster's batches byte for byte (a fetch offset inside a batch
  gets that batch whole, as Kafka answers it, never a batch re-encoded from the offset).  The
  fetch path answers from the chunks exactly as from a segment: stored batches as they are for
  Fetch v4+, lazily down-converted for v0-3.  A partition whose chunks run far enough past the
  demand is paused upstream, and so is one caught up with the cluster that no client waits at
  the end of (a reader that seeks, and the ListOffsets asked for it, would wait behind its long
  poll: a broker answers a connection in order); chunks beyond `upstream_cache_memory` are
  dropped oldest first.  The upstream consumer keeps control batches and aborted ones (named:
  "Isolation" below), so the chunks are the log.
- Offsets out of range: below the log start last heard (it only grows) at once; past the end
  last heard, the fetch waits (the offset is demanded) until the cluster answers it or says it
  is out of range, and only then does the client get OFFSET_OUT_OF_RANGE.  A client at the end
  demands it too, so the upstream consumer long-polls there and new data reaches it.
- ListOffsets: asked of the cluster (ListOffsets of a current version) on the client's behalf;
  the answer (or the failure, at the latest after `upstream_timeout_s`) calls back.
- Groups: the gateway coordinates them (kafkacodec.serve.groups), and their offsets are the
  cluster's: OffsetFetch reads the cluster's committed offsets of the group and OffsetCommit
  writes them there (OffsetCommit v2+ with generation -1: a group without members upstream),
  answered once the cluster acknowledged it.  A client can later consume the cluster directly
  with the same group id and resume.  Every group goes through the upstream consumer's own
  connections (consumer._groups.GroupOffsets): its coordinator connections, one per broker,
  carry every group's requests, so the gateway holds at most two connections (data and
  coordinator) per broker and per bootstrap address however many group ids clients name.
  Each call ends within `upstream_timeout_s` (its deadline: then the client gets
  COORDINATOR_NOT_AVAILABLE and retries); requests of other clients go on meanwhile.
- Metadata answers: every topic of the cluster is asked for, so the upstream consumer accepts
  answers (and other control answers) up to its ring's size (`receive_message_max_bytes` =
  buffer_memory / 4, at least 1 MiB) instead of the consumer's 1 MiB default.

- Isolation: the consumer above reads read_committed (every batch up to the last stable offset,
  the aborted ones named).  A read_uncommitted client past the last stable offset (an open
  transaction holds it back, while the high watermark moves on: Fetch v0-3 clients are all
  read_uncommitted) is followed by a second consumer, started on the first such demand, that
  reads read_uncommitted from there: its chunks (the *tail*) serve read_uncommitted fetches
  only, as a broker serves them up to the high watermark.

By-timestamp ListOffsets answers carry timestamp -1.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kafkacodec._records import MemoryRecords
from kafkacodec.consumer._cluster import Completion, Deadline, Done
from kafkacodec.net.loop import Loop
from kafkacodec.net.pieces import BytesPiece
from kafkacodec.protocol import control
from kafkacodec.protocol.api import Error
from kafkacodec.serve.offsets import CommittedOffset

__all__ = ["UpstreamView", "UpstreamOffsetStore", "UpstreamError"]

log = logging.getLogger("kafkacodec.serve")

#: chunks kept ahead of a partition's demand before it is paused upstream
CHUNKS_AHEAD = 2
#: bytes of one partition an upstream fetch asks for (a chunk): a proxy's round trips amortized
UPSTREAM_PARTITION_FETCH_BYTES = 8 << 20
#: how long an upstream fetch waits for data at the end of a log: a reader that starts or seeks
#: meanwhile waits behind it once (a broker answers a connection's requests in order); new data
#: ends it at once, so this bounds that wait, not a waiting client's latency (at 50 ms, every
#: other round of a reader starting after another got its first record 60-70 ms late)
UPSTREAM_MAX_WAIT_MS = 10
#: a partition caught up with the cluster and demanded by no client for this long (at least 20
#: of serve's poll intervals: a client waiting at the end renews its demand at each) stops its
#: upstream long poll
TAIL_IDLE_S = 0.2
#: a partition no client fetched for this long is unassigned upstream and its chunks dropped
IDLE_S = 60.0
#: how long the cluster's OFFSET_OUT_OF_RANGE for an offset is repeated to clients without asking
FRESH_S = 1.0
#: how often the gateway follows the clients' demand when nothing else brings it round
FOLLOW_S = 0.05
#: the two upstream consumers: read_committed (every client below the LSO), read_uncommitted (past it)
COMMITTED, TAIL = "committed", "tail"
#: how long upstream fetching rests after a fetch failure that names no partition
FETCH_FAILURE_BACKOFF_S = 0.1


class UpstreamError(OSError):
    """The upstream cluster did not answer (or refused) a call made on a client's behalf."""


class _Chunk:
    """One upstream fetch answer of a partition, copied out of the ring: entries covering
    offsets [start, next_offset) (the first may begin before start)."""

    __slots__ = ("start", "next_offset", "data", "positions", "sizes", "lasts",
                 "last_offset", "nbytes", "path", "aborted", "_crcs_hold")

    def __init__(self, start: int, next_offset: int, data: bytes, where: str,
                 aborted: list[tuple[int, int, int]] | None = None):
        self.start = start
        # (producer id, base offset, last offset) of the aborted batches in `data`
        self.aborted = aborted or []
        self.next_offset = next_offset
        self.data = data
        rows = MemoryRecords(data).index(check_crc=False)
        self.positions = rows["position"].astype(np.int64)
        self.sizes = rows["size_in_bytes"].astype(np.int64)
        self.lasts = rows["last_offset"].astype(np.int64)
        self.last_offset = int(self.lasts[-1]) if len(rows) else next_offset - 1
        self.nbytes = len(data)
        self.path = where                    # named in error messages like a segment's path
        self._crcs_hold: bool | None = None

    def crcs_hold(self) -> bool:
        """Whether every entry's checksum holds: computed once, when a conversion first needs
        it (every old client converts the same chunk; current clients check batches themselves)."""
        if self._crcs_hold is None:
            self._crcs_hold = bool(MemoryRecords(self.data).index(check_crc=True)["crc_valid"].all())
        return self._crcs_hold

    def slice(self, position: int, size: int) -> MemoryRecords:
        """The entries in [position, position + size), as a segment's slice()."""
        return MemoryRecords(memoryview(self.data)[position:position + size])


@dataclass
class ChunkRange:
    """Bytes [position, position + size) of a chunk answer a fetch (logview.ReadRange's shape:
    `segment` is the chunk)."""
    segment: _Chunk
    position: int
    size: int
    first_size: int

    @property
    def crc_checked(self) -> bool:
        return self.segment.crcs_hold()


class _Follow:
    """What one upstream consumer holds of a partition: its chunks, in offset order, and the
    offset clients want next from it."""

    __slots__ = ("chunks", "demand", "demand_at")

    def __init__(self) -> None:
        self.chunks: list[_Chunk] = []
        self.demand: int | None = None
        self.demand_at = 0.0


class UpstreamPartition:
    """A partition of the upstream cluster as the fetch path sees it (logview.Partition's
    interface), filled by the view's upstream callbacks on the same loop."""

    txn = None                                 # transactions are not scanned here

    def __init__(self, view: UpstreamView, topic: str, index: int):
        self.view = view
        self.topic = topic
        self.index = index
        self.log_start = 0
        self.log_end = 0
        self.stable = 0
        self.committed = _Follow()             # the read_committed consumer's: up to the LSO
        self.tail = _Follow()                  # the read_uncommitted one's: past the LSO
        self.out_of_range_at = -1              # the last demand the cluster said is out of range
        self.refused_at = 0.0                  # ...and when

    def follow(self, side: str) -> _Follow:
        return self.tail if side == TAIL else self.committed

    # --- the fetch path's interface -----------------------------------------------------------
    def refresh(self) -> None:
        """Bounds come from the upstream answers: nothing to look at here."""

    def in_range(self, offset: int) -> bool | None:
        """True inside the bounds last heard (at their end, the offset is demanded: the upstream
        consumer long-polls there and the bounds move); False below the log start (it only
        grows) or where the cluster just refused this offset; None (demanded) past the end
        heard, until the cluster answers."""
        if offset < self.log_start:
            return False
        side = TAIL if offset > self.stable else COMMITTED      # (only read_uncommitted passes the LSO)
        if offset <= self.log_end:
            if offset == self.log_end:
                self._want(offset, side)
            return True
        if offset == self.out_of_range_at and time.monotonic() - self.refused_at < FRESH_S:
            return False
        self._want(offset, side)
        return None

    def last_stable_offset(self) -> int:
        return self.stable

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted batches the chunks hold in [start, end):
        what a broker lists for a read_committed fetch (each aborted batch names its producer
        from its base offset on; the client drops that producer's transactional batches until
        its ABORT marker, which the chunks hold too)."""
        return [(pid, first) for chunk in self.committed.chunks if chunk.start < end and chunk.next_offset > start
                for pid, first, last in chunk.aborted if last >= start and first < end]

    @staticmethod
    def stored_piece(found: ChunkRange, on_bytes: Any) -> BytesPiece:
        """The stored bytes of a range, written from the chunk (logview.Partition's sends them
        from the segment file)."""
        on_bytes(found.size)
        return BytesPiece(memoryview(found.segment.data)[found.position:found.position + found.size])

    def read(self, offset: int, max_bytes: int, min_one: bool, upper: int) -> ChunkRange | None:
        """logview.Partition.read over the chunks; None (and the offset demanded) when no chunk
        holds it yet.  A read up to the LSO (read_committed) takes the read_committed consumer's
        chunks only (they name the aborted batches); a read past it, the tail's too."""
        uncommitted = upper > self.stable
        chunks = self.committed.chunks
        if uncommitted and self.tail.chunks:
            chunks = sorted(chunks + self.tail.chunks, key=lambda c: c.start)
        at = offset
        for chunk in chunks:
            if not chunk.start <= at < chunk.next_offset:
                continue
            i = int(np.searchsorted(chunk.lasts, at, side="left"))
            if i == len(chunk.lasts):          # nothing at or after `at` here: the next chunk
                at = chunk.next_offset
                continue
            self._want(offset, self._side(uncommitted, offset))
            position = int(chunk.positions[i])
            j = int(np.searchsorted(chunk.lasts, upper, side="left"))   # entries ending below upper
            limit = int(chunk.positions[j]) if j < len(chunk.lasts) else chunk.nbytes
            if limit <= position:
                return None
            first_size = int(chunk.sizes[i])
            size = min(max_bytes, limit - position)
            if min_one:
                size = max(size, min(first_size, limit - position))
            return ChunkRange(chunk, position, size, first_size)
        self._want(at, self._side(uncommitted, at))
        return None

    def _side(self, uncommitted: bool, offset: int) -> str:
        """The consumer that fetches `offset` for a read: the tail's past the LSO."""
        return TAIL if uncommitted and offset >= self.stable else COMMITTED

    def list_offset(self, timestamp: int, committed: bool, on_done: Done) -> None:
        """ListOffsets asked of the cluster: `on_done((timestamp, offset) or None, None)` (None:
        no answer), or `on_done(None, UpstreamError)` when the cluster does not answer within
        the view's timeout."""
        tp = (self.topic, self.index)
        view = self.view

        def found(offsets: Any, error: BaseException | None) -> None:
            if error is not None:
                on_done(None, view.failure(error))
                return
            offset = offsets.get(tp)
            on_done(None if offset is None or offset < 0 else (-1, int(offset)), None)

        view.consumer.list_offsets_async([tp], timestamp, found,
                                         deadline=Deadline("list_offsets", view.timeout))

    def _want(self, offset: int, side: str = COMMITTED) -> None:
        follow = self.follow(side)
        demanded = self.view.demanded if side == COMMITTED else self.view.tail_demanded
        now = time.monotonic()
        changed = follow.demand != offset or self not in demanded or now - follow.demand_at > self.view.tail_idle_s
        follow.demand = offset
        follow.demand_at = now
        demanded.add(self)
        if changed:
            self.view.soon()                  # follow it upstream now, not at the next tick

    # --- the upstream side ----------------------------------------------------------------------
    def set_bounds(self, log_start: int, log_end: int, stable: int) -> None:
        if log_start >= 0:
            self.log_start = log_start
        if log_end >= 0:
            self.log_end = log_end
            self.stable = stable if stable >= 0 else log_end

    def close(self) -> None:
        self.committed.chunks = []
        self.tail.chunks = []


class UpstreamTopic:
    def __init__(self, name: str, topic_id: uuid.UUID | None):
        self.name = name
        self.topic_id = topic_id or uuid.uuid5(uuid.NAMESPACE_URL, "kafkacodec-serve:" + name)
        self.partitions: dict[int, UpstreamPartition] = {}

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")


class UpstreamView:
    """The cluster's topics and partitions (logview.LogView's interface), fed on `loop` (the
    server's) by one Consumer (two once a read_uncommitted client reads past an LSO).  Topics and bounds are loaded before the constructor returns (it
    runs the loop until then: call it before the loop runs elsewhere); UpstreamError when the
    cluster cannot be reached within `timeout` seconds."""

    def __init__(self, bootstrap: str, *, loop: Loop, buffer_memory: int, cache_memory: int,
                 metadata_interval_s: float = 5.0, timeout: float = 30.0,
                 client_id: str = "kafkacodec-serve", security: Any = None,
                 poll_interval_s: float = 0.01):
        self.bootstrap = bootstrap
        self.tail_idle_s = max(TAIL_IDLE_S, 20 * poll_interval_s)
        self.loop = loop
        self.timeout = timeout
        self.cache_memory = cache_memory
        self.metadata_interval_s = metadata_interval_s
        self.topics: dict[str, UpstreamTopic] = {}
        self.by_id: dict[uuid.UUID, UpstreamTopic] = {}
        self.cluster_id: str | None = None
        self.demanded: set[UpstreamPartition] = set()        # by the read_committed consumer
        self.tail_demanded: set[UpstreamPartition] = set()   # by the read_uncommitted one
        self._lru: OrderedDict[int, tuple[UpstreamPartition, _Follow, _Chunk]] = OrderedDict()
        self._cached = 0
        self._metadata_due = 0.0
        self._loading = False                    # a Metadata reload is running
        self._fetch_rest_until = 0.0             # after a fetch failure naming no partition
        self._soon = False                       # a pass is scheduled for this loop iteration
        self._timer: Any = None
        self._watch: int | None = None
        self._tail_watch: int | None = None
        #: called after a pass that kept new chunks (the server's waiting fetches look again at
        #: once, not at their next poll interval)
        self.on_fetched: Callable[[], None] | None = None
        self.tail_consumer: Any = None           # started on the first demand past an LSO
        self._consumer_args = dict(buffer_memory=buffer_memory, client_id=client_id, security=security)
        self.closed = False
        # read_committed with control batches: every batch up to the last stable offset, the
        # aborted ones named (the consumer core's decisions, from the cluster's aborted lists or
        # the markers it reads itself), so read_committed clients are told exactly what the
        # cluster would tell them
        self.consumer = self._new_consumer("read_committed")
        cluster = self.consumer.cluster
        try:
            deadline = Deadline("load_metadata", timeout)
            cluster.complete(lambda done: self._load_metadata(deadline, done), deadline)
        except Exception as exc:
            self.close()
            raise self.failure(exc) from exc
        self._watch = cluster.watch(self._pass)     # after every batch of upstream answers
        self._timer = loop.call_later(FOLLOW_S, self._tick)

    def _new_consumer(self, isolation_level: str) -> Any:
        from kafkacodec.consumer import Consumer
        from kafkacodec.consumer._cluster import DEFAULT_RECEIVE_MESSAGE_MAX_BYTES

        args = self._consumer_args
        return Consumer(self.bootstrap, buffer_memory=args["buffer_memory"], client_id=args["client_id"],
                        control_batches=True, whole_batches=True, auto_offset_reset="none",
                        isolation_level=isolation_level,
                        fetch_max_wait_ms=UPSTREAM_MAX_WAIT_MS, request_timeout=self.timeout, loop=self.loop,
                        max_partition_fetch_bytes=UPSTREAM_PARTITION_FETCH_BYTES,
                        security=args["security"],
                        receive_message_max_bytes=max(DEFAULT_RECEIVE_MESSAGE_MAX_BYTES,
                                                      args["buffer_memory"] // 4))

    def _consumer(self, side: str) -> Any:
        """The consumer of `side`; the read_uncommitted one is started on first use."""
        if side == COMMITTED:
            return self.consumer
        if self.tail_consumer is None:
            self.tail_consumer = self._new_consumer("read_uncommitted")
            self._tail_watch = self.tail_consumer.cluster.watch(self._pass)
        return self.tail_consumer

    # --- what the server asks -------------------------------------------------------------------
    def refresh(self) -> None:
        """A Metadata request: look at the cluster again soon (never waits)."""
        self._metadata_due = min(self._metadata_due, time.monotonic() + 1.0)

    def partition(self, topic: str, index: int) -> UpstreamPartition | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(index)

    def failure(self, error: BaseException) -> UpstreamError:
        """An upstream call's failure as the server hears it: an UpstreamError (an OSError,
        answered as the cluster unavailable) naming the cluster and what the call last saw."""
        if isinstance(error, UpstreamError):
            return error
        return UpstreamError(f"upstream cluster ({self.bootstrap}): {error}")

    @property
    def cached_bytes(self) -> int:
        return self._cached

    def close(self) -> None:
        """Stop following the clients and close the upstream connections (on the loop's thread,
        or once the loop has stopped)."""
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._watch is not None:
            self.consumer.cluster.unwatch(self._watch)
        self.consumer.close()
        if self.tail_consumer is not None:
            if self._tail_watch is not None:
                self.tail_consumer.cluster.unwatch(self._tail_watch)
            self.tail_consumer.close()
        for t in self.topics.values():
            for p in t.partitions.values():
                p.close()

    # --- following the clients, on the loop -----------------------------------------------------
    def soon(self) -> None:
        """Run a pass in this loop iteration (once however many ask)."""
        if not self._soon and not self.closed:
            self._soon = True
            self.loop.call_soon(self._pass)

    def _tick(self) -> None:
        self._pass()
        if not self.closed:
            self._timer = self.loop.call_later(FOLLOW_S, self._tick)

    def _pass(self) -> None:
        """One pass: Metadata when due, the demand followed, what was fetched kept.  Never
        waits: the consumer is only polled without a timeout."""
        self._soon = False
        if self.closed:
            return
        now = time.monotonic()
        if now >= self._metadata_due and not self._loading:
            self._reload_metadata()
        self._follow_demand(now, COMMITTED)
        if self.tail_demanded:
            self._follow_demand(now, TAIL)
        if now < self._fetch_rest_until:
            return
        kept = False
        for side, consumer in ((COMMITTED, self.consumer), (TAIL, self.tail_consumer)):
            if consumer is None:
                continue
            try:
                parts = consumer.poll(0)
            except Exception as exc:
                self._fetch_failed(exc, side)
                continue
            for part in parts:
                kept = self._keep(part, side) or kept
        if kept and self.on_fetched is not None:
            self.on_fetched()

    def _reload_metadata(self) -> None:
        self._loading = True

        def loaded(_: Any, error: BaseException | None) -> None:
            self._loading = False
            if error is not None:                # tried again soon
                log.warning("upstream metadata: %s", error)
                self._metadata_due = time.monotonic() + 1.0

        self._load_metadata(Deadline("load_metadata", self.timeout), loaded)

    def _load_metadata(self, deadline: Deadline, on_done: Done) -> None:
        """Every topic of the cluster, and the bounds of partitions not seen before; the topics
        change once all of it is in (`on_done(None, None)`), else nothing changes."""
        cluster = self.consumer.cluster

        def loaded(metadata: Any, error: BaseException | None) -> None:
            if error is not None:
                on_done(None, error)
                return
            topics = dict(self.topics)
            fresh: list[tuple[str, int]] = []
            for t in metadata.topics:
                if t.name is None or t.error_code:
                    continue
                topic = topics.get(t.name)
                if topic is None:
                    topic = topics[t.name] = UpstreamTopic(t.name, t.topic_id)
                for p in t.partitions:
                    if p.partition_index not in topic.partitions:
                        topic.partitions[p.partition_index] = UpstreamPartition(self, t.name, p.partition_index)
                        fresh.append((t.name, p.partition_index))

            def bounded(_: Any, error: BaseException | None) -> None:
                if error is not None:
                    on_done(None, error)
                    return
                self.cluster_id = metadata.cluster_id
                self.topics = topics
                self.by_id = {t.topic_id: t for t in topics.values()}
                self._metadata_due = time.monotonic() + self.metadata_interval_s
                on_done(None, None)

            if fresh:
                self._load_bounds(fresh, topics, deadline, bounded)
            else:
                bounded(None, None)

        cluster.metadata_async(None, deadline, loaded, every_topic=True)

    def _load_bounds(self, tps: list[tuple[str, int]], topics: dict[str, UpstreamTopic],
                     deadline: Deadline, on_done: Done) -> None:
        """The log start and end of `tps` (two ListOffsets lookups at once), set when both
        are in; `on_done(None, None)` then, else the first error."""
        end = Completion(self.loop, deadline, on_done)
        found: dict[int, dict[tuple[str, int], int]] = {}

        def got(timestamp: int, offsets: Any, error: BaseException | None) -> None:
            if error is not None:
                end.fail(error)
                return
            found[timestamp] = offsets
            if len(found) < 2 or end.done:
                return
            starts, ends = found[control.EARLIEST_TIMESTAMP], found[control.LATEST_TIMESTAMP]
            for tp in tps:
                topics[tp[0]].partitions[tp[1]].set_bounds(starts.get(tp, -1), ends.get(tp, -1), -1)
            end.ok()

        for timestamp in (control.EARLIEST_TIMESTAMP, control.LATEST_TIMESTAMP):
            self.consumer.list_offsets_async(tps, timestamp, functools.partial(got, timestamp),
                                             deadline=deadline)

    def _follow_demand(self, now: float, side: str) -> None:
        """Assign, seek, pause, resume and drop partitions after what clients fetch from one
        consumer (none of which waits: an offset is assigned at once, its leader learnt by the
        consumer)."""
        consumer = self._consumer(side)
        demanded = self.demanded if side == COMMITTED else self.tail_demanded
        assigned = set(consumer.assignment())
        for part in list(demanded):
            tp = (part.topic, part.index)
            follow = part.follow(side)
            if now - follow.demand_at > IDLE_S:
                demanded.discard(part)
                if tp in assigned:
                    consumer.unassign([tp])
                self._drop(part, follow)
                continue
            demand = follow.demand
            if demand is None:
                continue
            chunks = follow.chunks
            refused = demand == part.out_of_range_at and now - part.refused_at < FRESH_S
            if tp not in assigned:
                if refused:                    # the client hears OFFSET_OUT_OF_RANGE first
                    continue
                consumer.assign_async({tp: demand}, self._assigned(tp), timeout=self.timeout)
                assigned.add(tp)
                continue
            covered = any(c.start <= demand < c.next_offset for c in chunks)
            position = consumer.position(tp)           # (never a lookup: no resets here)
            if not covered and position != demand and not refused:
                consumer.seek(tp, demand)
                consumer.resume([tp])
                continue
            caught_up = position >= (part.stable if side == COMMITTED else part.log_end)
            if (demand >= part.log_end or caught_up) and now - follow.demand_at > self.tail_idle_s:
                # nobody waits at the end (a reader gone, or one whose last fetch was inside the
                # chunks): no long poll upstream for a reader's seek to sit behind
                consumer.pause([tp])
                continue
            # read ahead: the chunks that continue from the demand, not those another client
            # left further on (counted, they would pause the consumer short of the demand)
            ahead, at = 0, demand
            for c in chunks:                   # (sorted by start)
                if c.next_offset <= at:
                    continue
                if c.start > at:
                    break
                ahead, at = ahead + 1, c.next_offset
            if ahead > CHUNKS_AHEAD:
                consumer.pause([tp])
            else:
                consumer.resume([tp])

    @staticmethod
    def _assigned(tp: tuple[str, int]) -> Done:
        def done(_: Any, error: BaseException | None) -> None:
            if error is not None:              # the consumer asks for the leader again itself
                log.info("upstream assign of %s-%d: %s", tp[0], tp[1], error)
        return done

    def _fetch_failed(self, exc: Exception, side: str) -> None:
        topic, index = getattr(exc, "topic", None), getattr(exc, "partition", None)
        part = self.partition(topic, index) if topic is not None and index is not None else None
        if part is None:
            log.warning("upstream fetch: %s", exc)
            self._fetch_rest_until = time.monotonic() + FETCH_FAILURE_BACKOFF_S
            return
        code = getattr(exc, "error_code", None)
        log.info("upstream fetch of %s-%d: %s", topic, index, exc)
        tp = (part.topic, part.index)
        self._consumer(side).unassign([tp])
        demand = part.follow(side).demand
        if code == Error.OFFSET_OUT_OF_RANGE:  # the client hears it
            part.out_of_range_at = demand if demand is not None else -1
            part.refused_at = time.monotonic()

        def bounded(_: Any, error: BaseException | None) -> None:
            if error is not None:
                log.warning("upstream offsets of %s-%d: %s", topic, index, error)

        self._load_bounds([tp], self.topics, Deadline("load_bounds", self.timeout), bounded)

    def _keep(self, fetched: Any, side: str) -> bool:
        """Copy a FetchedPartition out of the ring into a chunk of `side`, release it; whether
        it held records or moved the partition's bounds (what a waiting fetch looks at)."""
        with fetched:
            part = self.partition(fetched.topic, fetched.partition)
            if part is None:
                return False
            follow = part.follow(side)
            bounds = (part.log_start, part.log_end, part.stable)
            part.set_bounds(fetched.log_start_offset, fetched.high_watermark, fetched.last_stable_offset)
            part.out_of_range_at = -1
            if fetched.next_offset <= fetched.start_offset:
                return bounds != (part.log_start, part.log_end, part.stable)
            data = b"".join([b.value for b in fetched.batches])     # one copy out of the ring
            chunk = _Chunk(fetched.start_offset, fetched.next_offset, data,
                           f"upstream {fetched.topic}-{fetched.partition}@{fetched.start_offset}",
                           list(fetched.dropped))
        # a seek backwards drops what no longer continues from the new chunk
        follow.chunks = [c for c in follow.chunks
                         if c.next_offset <= chunk.start or c.start >= chunk.next_offset] + [chunk]
        follow.chunks.sort(key=lambda c: c.start)
        self._lru[id(chunk)] = (part, follow, chunk)
        self._cached += chunk.nbytes
        while self._cached > self.cache_memory and len(self._lru) > 1:
            _, (_, owner, old) = self._lru.popitem(last=False)
            if old in owner.chunks:
                owner.chunks = [c for c in owner.chunks if c is not old]
            self._cached -= old.nbytes
        live = {id(c) for c in follow.chunks}
        for key in [k for k, (_, owner, _) in self._lru.items() if owner is follow and k not in live]:
            self._cached -= self._lru.pop(key)[2].nbytes
        return True

    def _drop(self, part: UpstreamPartition, follow: _Follow) -> None:
        for chunk in follow.chunks:
            if self._lru.pop(id(chunk), None) is not None:
                self._cached -= chunk.nbytes
        follow.chunks = []


class UpstreamOffsetStore:
    """Group offsets kept by the upstream cluster (offsets.OffsetStore's `load`/`save`): read
    and written through the cluster's group coordinator by the view's consumer (its
    GroupOffsets: any number of groups, one coordinator connection per broker), answered by
    callback once the cluster answered, or with UpstreamError after the view's timeout."""

    def __init__(self, view: UpstreamView):
        self.view = view

    def load(self, group: str, on_done: Done) -> None:
        """`on_done({(topic, partition): CommittedOffset}, None)`: the group's offsets of every
        partition of the cluster's topics, as the cluster has them."""
        view = self.view
        tps = [(t.name, p) for t in view.topics.values() if not t.is_internal for p in t.partitions]

        def found(offsets: Any, error: BaseException | None) -> None:
            if error is not None:
                on_done(None, view.failure(error))
                return
            on_done({tp: CommittedOffset(offset) for tp, offset in offsets.items()
                     if offset is not None}, None)

        view.consumer.groups.committed_async(group, tps, found,
                                             deadline=Deadline("committed", view.timeout))

    def save(self, group: str, offsets: dict[tuple[str, int], CommittedOffset],
              on_done: Done) -> None:
        """Commit upstream: `on_done(None, None)` once the cluster acknowledged, else
        `on_done(None, UpstreamError)` (an OSError: the client gets COORDINATOR_NOT_AVAILABLE
        and retries)."""
        view = self.view
        plain = {tp: value.offset for tp, value in offsets.items()}
        view.consumer.groups.commit_async(
            group, plain, lambda _, error: on_done(None, None if error is None else view.failure(error)),
            deadline=Deadline("commit", view.timeout))
