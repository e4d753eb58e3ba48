"""`serve --upstream`: the gateway's view of a Kafka cluster, read through the consumer core.

The same server answers clients, but its partitions are the upstream cluster's, fetched by one
`kafkacodec.consumer.Consumer` (one ResponseRingBuffer per broker from one SimpleMemoryPool,
KIP-81) on the thread `kafkacodec-upstream`; nothing else touches that consumer.

- Metadata: every topic of the cluster, loaded before the server listens and again every
  `upstream_metadata_interval_s` (or sooner when a client asks for a topic not known yet); the
  gateway advertises itself as the leader of every partition; topic ids are the cluster's.
- Fetch: a client's fetch offset becomes the partition's *demand*. The upstream thread assigns
  the partition (or seeks it) there and copies each fetched answer out of the ring into a
  `_Chunk` (one copy; the ring is released at once), kept per partition in order.  The loop
  thread answers from the chunks exactly as from a segment: stored batches as they are for
  Fetch v4+, lazily down-converted for v0-3.  A partition whose chunks run far enough past the
  demand is paused upstream; chunks beyond `upstream_cache_memory` are dropped oldest first.
  The upstream consumer reads read_uncommitted with control batches, so the chunks are the log.
- Offsets out of range: below the log start last heard (it only grows) at once; past the end
  last heard, the fetch waits (the offset is demanded) until the cluster answers it or says it
  is out of range, and only then does the client get OFFSET_OUT_OF_RANGE.  A client at the end
  demands it too, so the upstream consumer long-polls there and new data reaches it.
- ListOffsets: asked of the cluster (ListOffsets of a current version) on the client's behalf.
- Groups: the gateway coordinates them (kafkacodec.serve.groups), and their offsets are the
  cluster's: OffsetFetch reads the cluster's committed offsets of the group and OffsetCommit
  writes them there (OffsetCommit v2+ with generation -1: a group without members upstream),
  answered once the cluster acknowledged it.  A client can later consume the cluster directly
  with the same group id and resume.  Every group goes through the upstream consumer's own
  connections (consumer._groups.GroupOffsets): its coordinator connections, one per broker,
  carry every group's requests, so the gateway holds at most two connections (data and
  coordinator) per broker and per bootstrap address however many group ids clients name.
  The loop thread waits for those calls (at most `upstream_timeout_s`, the deadline of each
  call upstream too); they happen at joins and commits, not per fetch.
- Metadata answers: every topic of the cluster is asked for, so the upstream consumer accepts
  answers (and other control answers) up to its ring's size (`receive_message_max_bytes` =
  buffer_memory / 4, at least 1 MiB) instead of the consumer's 1 MiB default.

Limitations: read_committed fetches are answered up to the cluster's last stable offset, but
without the list of aborted transactions (old clients cannot ask for read_committed; new ones
can consume the cluster directly).  By-timestamp ListOffsets answers carry timestamp -1.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kafkacodec._records import MemoryRecords
from kafkacodec.protocol.api import Error
from kafkacodec.serve.offsets import CommittedOffset

__all__ = ["UpstreamView", "UpstreamOffsetStore", "UpstreamError"]

log = logging.getLogger("kafkacodec.serve")

#: chunks kept ahead of a partition's demand before it is paused upstream
CHUNKS_AHEAD = 2
#: a partition no client fetched for this long is unassigned upstream and its chunks dropped
IDLE_S = 60.0
#: how long the cluster's OFFSET_OUT_OF_RANGE for an offset is repeated to clients without asking
FRESH_S = 1.0


class UpstreamError(OSError):
    """The upstream cluster did not answer (or refused) a call made on a client's behalf."""


class _Chunk:
    """One upstream fetch answer of a partition, copied out of the ring: entries covering
    offsets [start, next_offset) (the first may begin before start)."""

    __slots__ = ("start", "next_offset", "data", "records", "positions", "sizes", "lasts",
                 "last_offset", "nbytes", "path")

    def __init__(self, start: int, next_offset: int, data: bytes, where: str):
        self.start = start
        self.next_offset = next_offset
        self.data = data
        self.records = _ChunkRecords(data)   # segment.records.slice(...), as for a segment
        rows = MemoryRecords(data).index(check_crc=False)
        self.positions = rows["position"].astype(np.int64)
        self.sizes = rows["size_in_bytes"].astype(np.int64)
        self.lasts = rows["last_offset"].astype(np.int64)
        self.last_offset = int(self.lasts[-1]) if len(rows) else next_offset - 1
        self.nbytes = len(data)
        self.path = where                    # named in error messages like a segment's path


class _ChunkRecords:
    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def slice(self, position: int, size: int) -> MemoryRecords:
        return MemoryRecords(memoryview(self.data)[position:position + size])


@dataclass
class ChunkRange:
    """Bytes [position, position + size) of a chunk answer a fetch (logview.ReadRange's shape:
    `segment` is the chunk)."""
    segment: _Chunk
    position: int
    size: int
    first_size: int


class UpstreamPartition:
    """A partition of the upstream cluster as the fetch path sees it (logview.Partition's
    interface).  Read on the loop thread, filled by the upstream thread."""

    txn = None                                 # transactions are not scanned here

    def __init__(self, view: UpstreamView, topic: str, index: int):
        self.view = view
        self.topic = topic
        self.index = index
        self.log_start = 0
        self.log_end = 0
        self.stable = 0
        self.chunks: list[_Chunk] = []
        self.demand: int | None = None         # the offset clients want next
        self.demand_at = 0.0
        self.out_of_range_at = -1              # the last demand the cluster said is out of range
        self.refused_at = 0.0                  # ...and when

    # --- the fetch path's interface -----------------------------------------------------------
    def refresh(self) -> None:
        """Bounds come from the upstream thread: nothing to look at here."""

    def in_range(self, offset: int) -> bool | None:
        """True inside the bounds last heard (at their end, the offset is demanded: the upstream
        consumer long-polls there and the bounds move); False below the log start (it only
        grows) or where the cluster just refused this offset; None (demanded) past the end
        heard, until the cluster answers."""
        if offset < self.log_start:
            return False
        if offset <= self.log_end:
            if offset == self.log_end:
                self._want(offset)
            return True
        if offset == self.out_of_range_at and time.monotonic() - self.refused_at < FRESH_S:
            return False
        self._want(offset)
        return None

    def last_stable_offset(self) -> int:
        return self.stable

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        return []

    def read(self, offset: int, max_bytes: int, min_one: bool, upper: int) -> ChunkRange | None:
        """logview.Partition.read over the chunks; None (and the offset demanded) when no chunk
        holds it yet."""
        with self.view.lock:
            chunks = list(self.chunks)
        at = offset
        for chunk in chunks:
            if not chunk.start <= at < chunk.next_offset:
                continue
            i = int(np.searchsorted(chunk.lasts, at, side="left"))
            if i == len(chunk.lasts):          # nothing at or after `at` here: the next chunk
                at = chunk.next_offset
                continue
            self._want(offset)
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
        self._want(at)
        return None

    def list_offset(self, timestamp: int, committed: bool) -> tuple[int, int] | None:
        """ListOffsets asked of the cluster: (timestamp, offset), None for no answer."""
        offset = self.view.call(lambda c: c._list_offsets([(self.topic, self.index)], timestamp)
                                .get((self.topic, self.index)))
        if offset is None or offset < 0:
            return None
        return -1, int(offset)

    def _want(self, offset: int) -> None:
        self.demand = offset
        self.demand_at = time.monotonic()
        self.view.demanded.add(self)

    # --- the upstream thread's side -----------------------------------------------------------
    def set_bounds(self, log_start: int, log_end: int, stable: int) -> None:
        if log_start >= 0:
            self.log_start = log_start
        if log_end >= 0:
            self.log_end = log_end
            self.stable = stable if stable >= 0 else log_end

    def close(self) -> None:
        self.chunks = []


class UpstreamTopic:
    def __init__(self, name: str, topic_id: uuid.UUID | None):
        self.name = name
        self.topic_id = topic_id or uuid.uuid5(uuid.NAMESPACE_URL, "kafkacodec-serve:" + name)
        self.partitions: dict[int, UpstreamPartition] = {}

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")


class UpstreamView:
    """The cluster's topics and partitions (logview.LogView's interface) and the thread that
    feeds them.  Topics and bounds are loaded before the constructor returns; UpstreamError
    when the cluster cannot be reached within `timeout` seconds."""

    def __init__(self, bootstrap: str, *, buffer_memory: int, cache_memory: int,
                 metadata_interval_s: float = 5.0, timeout: float = 30.0,
                 client_id: str = "kafkacodec-serve", security: Any = None):
        from kafkacodec.consumer import Consumer        # kafka-python: the serve extra
        from kafkacodec.consumer._cluster import DEFAULT_RECEIVE_MESSAGE_MAX_BYTES

        self.bootstrap = bootstrap
        self.timeout = timeout
        self.cache_memory = cache_memory
        self.metadata_interval_s = metadata_interval_s
        self.lock = threading.Lock()
        self.topics: dict[str, UpstreamTopic] = {}
        self.by_id: dict[uuid.UUID, UpstreamTopic] = {}
        self.cluster_id: str | None = None
        self.demanded: set[UpstreamPartition] = set()
        self._jobs: list[tuple[Callable[[Any], Any], concurrent.futures.Future[Any]]] = []
        self._jobs_lock = threading.Lock()
        self._lru: OrderedDict[int, tuple[UpstreamPartition, _Chunk]] = OrderedDict()
        self._cached = 0
        self._metadata_due = 0.0
        self._stop = threading.Event()
        self.consumer = Consumer(bootstrap, buffer_memory=buffer_memory, client_id=client_id,
                                 control_batches=True, auto_offset_reset="none",
                                 fetch_max_wait_ms=200, request_timeout=timeout, security=security,
                                 receive_message_max_bytes=max(DEFAULT_RECEIVE_MESSAGE_MAX_BYTES,
                                                               buffer_memory // 4))
        self.thread = threading.Thread(target=self._run, name="kafkacodec-upstream", daemon=True)
        self.thread.start()
        try:
            self.call(self._load_metadata)
        except BaseException:
            self.close()
            raise

    # --- the loop thread's side ---------------------------------------------------------------
    def refresh(self) -> None:
        """A Metadata request: look at the cluster again soon (never waits)."""
        self._metadata_due = min(self._metadata_due, time.monotonic() + 1.0)

    def partition(self, topic: str, index: int) -> UpstreamPartition | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(index)

    def call(self, job: Callable[[Any], Any], timeout: float | None = None) -> Any:
        """Run `job(consumer)` on the upstream thread and wait for its result (UpstreamError
        when it fails or takes longer than the timeout)."""
        if not self.thread.is_alive():
            raise UpstreamError("the upstream thread has stopped")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._jobs_lock:
            self._jobs.append((job, future))
        try:
            return future.result(self.timeout if timeout is None else timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise UpstreamError(f"the upstream cluster ({self.bootstrap}) did not answer in time") from None
        except OSError:
            raise
        except Exception as exc:
            raise UpstreamError(f"upstream cluster ({self.bootstrap}): {exc}") from exc

    @property
    def cached_bytes(self) -> int:
        return self._cached

    def close(self) -> None:
        self._stop.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(self.timeout + 5)
        for t in self.topics.values():
            for p in t.partitions.values():
                p.close()

    # --- the upstream thread ------------------------------------------------------------------
    def _run(self) -> None:
        consumer = self.consumer
        try:
            while not self._stop.is_set():
                self._run_jobs(consumer)
                now = time.monotonic()
                if now >= self._metadata_due:
                    try:
                        self._load_metadata(consumer)
                    except (OSError, Exception) as exc:         # retried at the next interval
                        log.warning("upstream metadata: %s", exc)
                        self._metadata_due = now + 1.0
                self._follow_demand(consumer)
                if not consumer.assignment():
                    consumer.loop.run_once(0.02)
                    continue
                try:
                    parts = consumer.poll(0.02)
                except Exception as exc:
                    self._fetch_failed(consumer, exc)
                    continue
                for part in parts:
                    self._keep(part)
        except BaseException:
            log.exception("the upstream thread failed")
        finally:
            self._fail_jobs()
            consumer.close()

    def _run_jobs(self, consumer: Any) -> None:
        with self._jobs_lock:
            jobs, self._jobs = self._jobs, []
        for job, future in jobs:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job(consumer))
            except BaseException as exc:
                future.set_exception(exc)

    def _fail_jobs(self) -> None:
        with self._jobs_lock:
            jobs, self._jobs = self._jobs, []
        for _, future in jobs:
            if future.set_running_or_notify_cancel():
                future.set_exception(UpstreamError("the upstream thread has stopped"))

    def _load_metadata(self, consumer: Any) -> None:
        from kafkacodec.protocol._metadata import (METADATA_MAX_VERSION, decode_metadata_response,
                                                   encode_metadata_request)

        cluster = consumer.cluster
        metadata = cluster.call(
            None, 3, lambda v, cid: encode_metadata_request(None, api_version=v, correlation_id=cid,
                                                            client_id=cluster.client_id,
                                                            allow_auto_topic_creation=False),
            lambda resp, v: decode_metadata_response(resp.payload, v),
            max_version=METADATA_MAX_VERSION, min_version=1)
        cluster.apply_metadata(metadata)
        self.cluster_id = metadata.cluster_id
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
        if fresh:
            self._load_bounds(consumer, fresh, topics)
        self.topics = topics
        self.by_id = {t.topic_id: t for t in topics.values()}
        self._metadata_due = time.monotonic() + self.metadata_interval_s

    def _load_bounds(self, consumer: Any, tps: list[tuple[str, int]],
                     topics: dict[str, UpstreamTopic] | None = None) -> None:
        topics = topics if topics is not None else self.topics
        starts = consumer._list_offsets(tps, -2)
        ends = consumer._list_offsets(tps, -1)
        for tp in tps:
            part = topics[tp[0]].partitions[tp[1]]
            part.set_bounds(starts.get(tp, -1), ends.get(tp, -1), -1)

    def _follow_demand(self, consumer: Any) -> None:
        """Assign, seek, pause, resume and drop partitions after what clients fetch."""
        now = time.monotonic()
        assigned = set(consumer.assignment())
        for part in list(self.demanded):
            tp = (part.topic, part.index)
            if now - part.demand_at > IDLE_S:
                self.demanded.discard(part)
                if tp in assigned:
                    consumer.unassign([tp])
                self._drop(part)
                continue
            demand = part.demand
            if demand is None:
                continue
            chunks = part.chunks
            refused = demand == part.out_of_range_at and now - part.refused_at < FRESH_S
            if tp not in assigned:
                if refused:                    # the client hears OFFSET_OUT_OF_RANGE first
                    continue
                consumer.assign({tp: demand})
                assigned.add(tp)
                continue
            covered = any(c.start <= demand < c.next_offset for c in chunks)
            coming = consumer.position(tp) == demand
            if not covered and not coming and not refused:
                consumer.seek(tp, demand)
                consumer.resume([tp])
                continue
            ahead = sum(1 for c in chunks if c.next_offset > demand)
            if ahead > CHUNKS_AHEAD:
                consumer.pause([tp])
            else:
                consumer.resume([tp])

    def _fetch_failed(self, consumer: Any, exc: Exception) -> None:
        topic, index = getattr(exc, "topic", None), getattr(exc, "partition", None)
        part = self.partition(topic, index) if topic is not None and index is not None else None
        if part is None:
            log.warning("upstream fetch: %s", exc)
            consumer.loop.run_once(0.1)
            return
        code = getattr(exc, "error_code", None)
        log.info("upstream fetch of %s-%d: %s", topic, index, exc)
        consumer.unassign([(part.topic, part.index)])
        if code == Error.OFFSET_OUT_OF_RANGE:  # the client hears it
            part.out_of_range_at = part.demand if part.demand is not None else -1
            part.refused_at = time.monotonic()
        try:
            self._load_bounds(consumer, [(part.topic, part.index)])
        except Exception as err:
            log.warning("upstream offsets of %s-%d: %s", topic, index, err)

    def _keep(self, fetched: Any) -> None:
        """Copy a FetchedPartition out of the ring into a chunk, release it."""
        with fetched:
            part = self.partition(fetched.topic, fetched.partition)
            if part is None:
                return
            part.set_bounds(fetched.log_start_offset, fetched.high_watermark, fetched.last_stable_offset)
            part.out_of_range_at = -1
            if fetched.next_offset <= fetched.start_offset:
                return
            data = b"".join(bytes(b.value) for b in fetched.batches)
            chunk = _Chunk(fetched.start_offset, fetched.next_offset, data,
                           f"upstream {fetched.topic}-{fetched.partition}@{fetched.start_offset}")
        with self.lock:
            # a seek backwards drops what no longer continues from the new chunk
            part.chunks = [c for c in part.chunks
                           if c.next_offset <= chunk.start or c.start >= chunk.next_offset] + [chunk]
            part.chunks.sort(key=lambda c: c.start)
            self._lru[id(chunk)] = (part, chunk)
            self._cached += chunk.nbytes
            while self._cached > self.cache_memory and len(self._lru) > 1:
                _, (owner, old) = self._lru.popitem(last=False)
                if old in owner.chunks:
                    owner.chunks = [c for c in owner.chunks if c is not old]
                self._cached -= old.nbytes
            live = {id(c) for c in part.chunks}
            for key in [k for k, (owner, _) in self._lru.items() if owner is part and k not in live]:
                self._cached -= self._lru.pop(key)[1].nbytes

    def _drop(self, part: UpstreamPartition) -> None:
        with self.lock:
            for chunk in part.chunks:
                if self._lru.pop(id(chunk), None) is not None:
                    self._cached -= chunk.nbytes
            part.chunks = []


class UpstreamOffsetStore:
    """Group offsets kept by the upstream cluster (offsets.OffsetStore's interface): read and
    written through the cluster's group coordinator on the upstream thread, over the upstream
    consumer's connections (its GroupOffsets: any number of groups, one coordinator connection
    per broker)."""

    def __init__(self, view: UpstreamView):
        self.view = view

    def get(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        view = self.view
        tps = [(t.name, p) for t in view.topics.values() if not t.is_internal for p in t.partitions]

        def fetch(consumer: Any) -> dict[tuple[str, int], int | None]:
            result: dict[tuple[str, int], int | None] = consumer.groups.committed(group, tps)
            return result

        found = view.call(fetch)
        return {tp: CommittedOffset(offset) for tp, offset in found.items() if offset is not None}

    def commit(self, group: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """Commit upstream and return once the cluster acknowledged; UpstreamError (an
        OSError: the client gets COORDINATOR_NOT_AVAILABLE and retries) otherwise."""
        view = self.view
        plain = {tp: value.offset for tp, value in offsets.items()}
        view.call(lambda consumer: consumer.groups.commit(group, plain))
