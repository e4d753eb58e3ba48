"""The consumer core's public face: assign partitions, poll FetchedPartitions (raw batches,
Arrow, or flyweight records), look up and commit offsets.  See docs/consumer.md.

The blocking calls are their asynchronous forms (`assign_async`, `list_offsets_async`, and
GroupOffsets' `commit_async`/`committed_async`, on the Cluster's) run to their end on the
consumer's loop; on a loop it shares (`loop=`, the gateway's), only the asynchronous forms, and
the calls that never wait (seek, pause, resume, unassign, poll(0), position of a partition not
being reset), may be made from its callbacks."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kafkacodec._inuse import InUse
from kafkacodec._pool import SimpleMemoryPool
from kafkacodec._ring import FetchRecord, Response
from kafkacodec.consumer._cluster import (
    DEFAULT_RECEIVE_MESSAGE_MAX_BYTES,
    BrokerError,
    Cluster,
    Deadline,
    Done,
)
from kafkacodec.consumer._fetcher import Fetcher
from kafkacodec.consumer._forms import FetchedPartition, records_filter
from kafkacodec.consumer._groups import GroupOffsets
from kafkacodec.consumer._offsets import OffsetLookup
from kafkacodec.net.loop import Loop
from kafkacodec.protocol import control
from kafkacodec.protocol.api import Error

__all__ = ["Consumer", "DEFAULT_BUFFER_MEMORY", "COORDINATOR_RING_BYTES"]

DEFAULT_BUFFER_MEMORY = 64 << 20
#: The ring of a coordinator connection (priority: outside buffer_memory when the pool is full).
COORDINATOR_RING_BYTES = 256 << 10

Position = int | str           # an offset, or "earliest" / "latest" / "committed"
TopicPartition = tuple[str, int]


class Consumer:
    """Consumer(bootstrap, *, buffer_memory=64 MiB, isolation_level="read_uncommitted", ...)

    Fetches assigned partitions from their leaders into one ResponseRingBuffer per broker
    connection, every ring from one SimpleMemoryPool of `buffer_memory` bytes (KIP-81): a
    connection reads only while the pool can hold what it reads.  ``poll()`` returns
    FetchedPartitions (raw batches; ``to_arrow()``), ``records()`` the ring's flyweight records.

    - ``ring_bytes``: each data connection's ring (default buffer_memory / 4, at least 1 MiB when
      the budget allows); a response must fit it, so it must exceed the largest batch.
    - ``max_in_flight``: fetches in flight per connection (each asks for at most ring_bytes /
      max_in_flight bytes, so every answer in flight fits the ring at once).
    - ``isolation_level="read_committed"``: aborted transactions and control batches never
      reach the caller, with or without the broker's aborted-transaction lists.  With
      ``control_batches=True`` too, ``batches`` keep every decided batch instead (aborted data
      and markers: what a log holds up to the last stable offset) and ``dropped`` names the
      aborted ones (serve --upstream answers clients of both isolation levels from them).
    - ``whole_batches=True``: a fetch that starts inside a batch returns that batch whole, as
      the broker sent it (the offsets before the fetch offset included), instead of trimmed to
      the fetch offset (one decode and encode of that batch): for callers that pass batches on
      to Kafka clients, which skip those offsets themselves.
    - ``security``: TLS and SASL: a ``client.properties`` path, a dict of client properties
      (Kafka's and librdkafka's names: security.protocol, ssl.ca.location, sasl.mechanism,
      sasl.username/sasl.password or sasl.jaas.config...) or a kafkacodec.net.ClientSecurity
      (docs/security.md).
    - ``group_id``: for commit() / committed() (no group membership: partitions are assigned
      by the caller).
    - Timeouts (seconds): ``request_timeout`` (Kafka's request.timeout.ms) is how long one
      answer may take before its connection is dropped and the request retried;
      ``default_api_timeout`` (default.api.timeout.ms; None: request_timeout) is the whole time a
      blocking call (assign, assign_topics, partitions_for, beginning_offsets, end_offsets,
      commit, committed, position when it must look the position up) may take with its
      retries; a call's own ``timeout=`` replaces it for that call.  When it runs out the call
      raises KafkaTimeoutError (a TimeoutError) naming the call and the broker it waited for.
      poll(timeout) never waits longer than its timeout (Metadata and resets go on meanwhile);
      close() does not wait.
    - ``receive_message_max_bytes`` (librdkafka's receive.message.max.bytes, default 1 MiB):
      the largest answer decoded into Python objects (Metadata, ListOffsets, the coordinator's);
      a larger one fails its call with RecordTooLargeError.  Fetch answers are bounded by the
      ring instead.

    Memory: the rings (and so every fetched byte and every answer read) stay within
    `buffer_memory`; on top of it, coordinator rings (COORDINATOR_RING_BYTES each, priority
    allocations), small per-connection state, one decompression buffer per ring while records()
    walks compressed batches, and what the caller keeps (Arrow batches, copies).  A control
    answer adds at most receive_message_max_bytes while it is decoded (one copy of it), and
    the Cluster keeps about 110 bytes per partition of the topics asked about (a Metadata answer
    naming other topics does not add them).

    Not thread-safe: one thread at a time (a second thread entering gets ConcurrentUseError).
    """

    def __init__(self, bootstrap: str, *, buffer_memory: int = DEFAULT_BUFFER_MEMORY,
                 ring_bytes: int | None = None, isolation_level: str = "read_uncommitted",
                 group_id: str | None = None, client_id: str = "kafkacodec",
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 50 << 20, max_partition_fetch_bytes: int = 1 << 20,
                 max_in_flight: int = 2, auto_offset_reset: str = "earliest",
                 control_batches: bool = False, whole_batches: bool = False,
                 request_timeout: float = 30.0, default_api_timeout: float | None = None,
                 receive_message_max_bytes: int = DEFAULT_RECEIVE_MESSAGE_MAX_BYTES,
                 retry_backoff: float = 0.1, max_retry_backoff: float = 1.0,
                 loop: Loop | None = None, security: Any = None):
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError("isolation_level is 'read_uncommitted' or 'read_committed'")
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset is 'earliest', 'latest' or 'none'")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        if ring_bytes is None:
            ring_bytes = min(buffer_memory, max(buffer_memory // 4, 1 << 20))
        if ring_bytes > buffer_memory:
            raise ValueError(f"ring_bytes ({ring_bytes}) cannot exceed buffer_memory "
                             f"({buffer_memory}): a ring comes from the pool")
        if ring_bytes < 64 << 10:
            raise ValueError("ring_bytes must be at least 64 KiB")
        self.buffer_memory = buffer_memory
        self.ring_bytes = ring_bytes
        self.isolation_level = isolation_level
        self.group_id = group_id
        self.client_id = client_id
        self.pool = SimpleMemoryPool(buffer_memory, buffer_memory, strict=True)
        self._own_loop = loop is None
        self.loop = loop or Loop()
        self.cluster = Cluster(bootstrap, pool=self.pool, ring_bytes=ring_bytes,
                               coordinator_ring_bytes=COORDINATOR_RING_BYTES,
                               client_id=client_id, request_timeout=request_timeout,
                               default_api_timeout=default_api_timeout,
                               receive_message_max_bytes=receive_message_max_bytes,
                               retry_backoff=retry_backoff, max_retry_backoff=max_retry_backoff,
                               loop=self.loop, name="source", security=security)
        self.fetcher = Fetcher(self.cluster, read_committed=isolation_level == "read_committed",
                               max_wait_ms=fetch_max_wait_ms, min_bytes=fetch_min_bytes,
                               fetch_max_bytes=fetch_max_bytes,
                               max_partition_fetch_bytes=max_partition_fetch_bytes,
                               max_in_flight=max_in_flight, control_batches=control_batches,
                               whole_batches=whole_batches,
                               auto_offset_reset=auto_offset_reset, retry_backoff=retry_backoff,
                               max_retry_backoff=max_retry_backoff, client_id=client_id,
                               on_reset=self._on_reset)
        self.groups = GroupOffsets(self.cluster, client_id=client_id, retry_backoff=retry_backoff,
                                   max_retry_backoff=max_retry_backoff)
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self._returned: dict[TopicPartition, int] = {}     # next offset after what poll() gave
        self._in_use = InUse("Consumer")     # one thread at a time (ConcurrentUseError)
        self.closed = False

    # -- guards --------------------------------------------------------------------------------
    def _enter(self) -> None:
        if self.closed:
            raise RuntimeError("the consumer is closed")
        self._in_use.__enter__()

    def _leave(self) -> None:
        self._in_use.__exit__(None, None, None)

    @contextlib.contextmanager
    def _blocking(self, call: str, timeout: float | None) -> Iterator[Deadline]:
        """One thread at a time, and one deadline for the whole call (KafkaTimeoutError)."""
        self._enter()
        try:
            with self.cluster.deadline(call, timeout) as deadline:
                yield deadline
        finally:
            self._leave()

    def deadline(self, call: str, timeout: float | None = None) -> Deadline:
        """A deadline for an asynchronous call: `timeout` seconds (None: default_api_timeout)."""
        return Deadline(call, self.cluster.default_api_timeout if timeout is None else timeout)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pause(self, attempt: int) -> None:
        """The backoff before another attempt (ends at the deadline: KafkaTimeoutError)."""
        self.cluster.wait(min(self.retry_backoff * 2 ** attempt, self.max_retry_backoff))

    # -- metadata and assignment ---------------------------------------------------------------
    def partitions_for(self, topic: str, *, timeout: float | None = None) -> int:
        """The partition count of `topic` (BrokerError when the cluster does not know it)."""
        with self._blocking("partitions_for", timeout):
            return self._partitions_for(topic)

    def _partitions_for(self, topic: str) -> int:
        attempt = 0
        while True:
            self.cluster.refresh_metadata([topic])
            code = self.cluster.topic_errors.get(topic, 0)
            if code == 0 and topic in self.cluster.partition_counts:
                return self.cluster.partition_counts[topic]
            unknown = Error.UNKNOWN_TOPIC_OR_PARTITION
            if not Error.for_code(code).retriable or code == unknown and attempt >= 3:
                raise BrokerError(f"no metadata for topic {topic!r}", error_code=code or unknown)
            self.cluster.note(None, f"Metadata answered {Error.name_of(code)} ({code}) for topic "
                                    f"{topic!r}")
            self._pause(attempt)
            attempt += 1

    def assign(self, positions: Mapping[TopicPartition, Position], *,
               timeout: float | None = None) -> None:
        """Fetch these partitions from these positions: an offset, "earliest", "latest" or
        "committed" (the group's committed offset, else auto_offset_reset)."""
        with self._blocking("assign", timeout) as deadline:
            self.cluster.complete(lambda done: self._assign_async(positions, deadline, done),
                                  deadline)

    def assign_async(self, positions: Mapping[TopicPartition, Position], on_done: Done, *,
                     timeout: float | None = None) -> None:
        """assign() without waiting: `on_done(None, None)` once the leaders and the positions
        are known, else the error (KafkaTimeoutError after `timeout`, default
        default_api_timeout).  Partitions at an offset are assigned before it returns."""
        self._enter()
        try:
            self._assign_async(positions, self.deadline("assign", timeout), on_done)
        finally:
            self._leave()

    def _assign_async(self, positions: Mapping[TopicPartition, Position], deadline: Deadline,
                      on_done: Done) -> None:
        """Check every position, look up committed ones, assign, then learn the leaders and
        look up the "earliest"/"latest" positions.  A deadline that runs out in those last two
        steps leaves the partitions assigned, their positions looked up by poll() or position()."""
        for tp, pos in positions.items():
            if isinstance(pos, str):
                if pos not in ("earliest", "latest", "committed"):
                    raise ValueError(f"position {pos!r}: an offset, 'earliest', 'latest' or 'committed'")
            elif pos < 0:
                raise ValueError(f"offset {pos} for {tp} is negative")
        wanted = [tp for tp, pos in positions.items() if pos == "committed"]
        group = self._group("assign") if wanted else None
        topics = {t for t, _ in positions}

        def with_committed(committed: Any, error: BaseException | None) -> None:
            if error is not None:
                on_done(None, error)
                return
            for tp, pos in positions.items():
                if pos == "committed":
                    offset = committed.get(tp)
                    if offset is None or offset < 0:
                        pos = self.fetcher.auto_offset_reset
                        if pos == "none":
                            on_done(None, BrokerError(
                                "no committed offset and auto_offset_reset='none'",
                                error_code=Error.OFFSET_OUT_OF_RANGE, topic=tp[0], partition=tp[1]))
                            return
                    else:
                        pos = offset
                if isinstance(pos, str):
                    self.fetcher.assign(tp, None, reset=pos)
                else:
                    self.fetcher.assign(tp, int(pos))
                self._returned[tp] = -1 if isinstance(pos, str) else int(pos)
            self.cluster.metadata_async(topics, deadline, with_metadata)

        def with_metadata(_: Any, error: BaseException | None) -> None:
            if error is not None:
                on_done(None, error)
                return
            self._resolve_resets(list(positions), deadline, on_done)

        if group is not None:
            self.groups.committed_async(group, wanted, with_committed, deadline=deadline)
        else:
            with_committed({}, None)

    def assign_topics(self, topics: Iterable[str], start: Position = "earliest", *,
                      timeout: float | None = None) -> dict[TopicPartition, int]:
        """Assign every partition of `topics` from `start`; returns the positions."""
        with self._blocking("assign_topics", timeout) as deadline:
            wanted: dict[TopicPartition, Position] = {}
            for topic in topics:
                for p in range(self._partitions_for(topic)):
                    wanted[(topic, p)] = start
            self.cluster.complete(lambda done: self._assign_async(wanted, deadline, done), deadline)
            return {tp: self._returned[tp] for tp in wanted}

    def unassign(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._enter()
        try:
            for tp in list(self.fetcher.states) if partitions is None else partitions:
                self.fetcher.unassign(tp)
                self._returned.pop(tp, None)
        finally:
            self._leave()

    def assignment(self) -> list[TopicPartition]:
        return sorted(self.fetcher.states)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Continue `partition` from `offset` (data already fetched beyond it is dropped)."""
        self._enter()
        try:
            self.fetcher.seek(partition, offset)
            self._returned[partition] = offset
        finally:
            self._leave()

    def position(self, partition: TopicPartition, *, timeout: float | None = None) -> int:
        """The offset after the data poll() returned last for `partition` (what to commit).  A
        partition being reset ("earliest"/"latest", or out of range) has its position looked
        up first (a blocking call: KafkaTimeoutError after the timeout)."""
        st = self.fetcher.states.get(partition)
        if st is not None and st.reset is not None:
            with self._blocking("position", timeout) as deadline:
                self.cluster.complete(lambda done: self._resolve_resets([partition], deadline, done),
                                      deadline)
        return self._returned[partition]

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.fetcher.states[tp].paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.fetcher.states[tp].paused = False

    # -- offsets -------------------------------------------------------------------------------
    def beginning_offsets(self, partitions: Iterable[TopicPartition], *,
                          timeout: float | None = None) -> dict[TopicPartition, int]:
        with self._blocking("beginning_offsets", timeout):
            return self._list_offsets(list(partitions), control.EARLIEST_TIMESTAMP)

    def end_offsets(self, partitions: Iterable[TopicPartition], *,
                    timeout: float | None = None) -> dict[TopicPartition, int]:
        """The high watermark of each partition, or the last stable offset under
        read_committed (what the consumer can reach now)."""
        with self._blocking("end_offsets", timeout):
            return self._list_offsets(list(partitions), control.LATEST_TIMESTAMP)

    def _list_offsets(self, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """ListOffsets, waited for (within the running call's deadline, else one of its own)."""
        with self.cluster.deadline("list_offsets") as deadline:
            found: dict[TopicPartition, int] = self.cluster.complete(
                lambda done: self.list_offsets_async(partitions, timestamp, done, deadline=deadline),
                deadline)
        return found

    def list_offsets_async(self, partitions: Iterable[TopicPartition], timestamp: int,
                           on_done: Done, *, deadline: Deadline) -> None:
        """The offsets of `partitions` at `timestamp` (control.EARLIEST_TIMESTAMP,
        LATEST_TIMESTAMP, or a time in ms) without waiting: `on_done({(topic, partition):
        offset}, None)`, else the error (BrokerError, KafkaTimeoutError at the deadline)."""
        OffsetLookup(self.cluster, partitions, timestamp,
                     read_committed=self.isolation_level == "read_committed",
                     client_id=self.client_id, retry_backoff=self.retry_backoff,
                     max_retry_backoff=self.max_retry_backoff).start(deadline, on_done)

    def _resolve_resets(self, partitions: list[TopicPartition], deadline: Deadline,
                        on_done: Done) -> None:
        """`on_done(None, None)` once the resets of `partitions` are looked up (the fetcher's
        lookups), else the lookups' error or KafkaTimeoutError."""
        fetcher = self.fetcher
        states = fetcher.states

        def resolved() -> bool:
            return fetcher.fatal is not None or all(
                states[tp].reset is None for tp in partitions if tp in states)

        def finished(_: Any, error: BaseException | None) -> None:
            if error is None and fetcher.fatal is not None:
                error, fetcher.fatal = fetcher.fatal, None
            on_done(None, error)

        self.cluster.pursue(resolved, fetcher.send_resets, {t for t, _ in partitions}, deadline,
                            finished)

    def _on_reset(self, partition: TopicPartition, offset: int) -> None:
        self._returned[partition] = offset

    def _group(self, call: str) -> str:
        if self.group_id is None:
            raise ValueError(f"{call}() needs a group_id")
        return self.group_id

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, *,
               timeout: float | None = None) -> None:
        """Commit `offsets` ((topic, partition) -> next offset to read; default: position() of
        every assigned partition) to the group's coordinator (OffsetCommit, no membership)."""
        with self._blocking("commit", timeout):
            if offsets is None:
                offsets = {tp: o for tp, o in self._returned.items() if o >= 0}
            if offsets:
                self.groups.commit(self._group("commit"), offsets)

    def committed(self, partitions: Iterable[TopicPartition], *,
                  timeout: float | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None where nothing is committed)."""
        with self._blocking("committed", timeout):
            return self.groups.committed(self._group("committed"), partitions)

    # -- fetching ------------------------------------------------------------------------------
    def _maintain(self) -> None:
        """poll()'s upkeep, none of it waited for: Metadata when stale, resets looked up."""
        if self.cluster.metadata_stale:
            self.cluster.request_metadata({t for t, _ in self.fetcher.states})
        self.fetcher.send_resets()

    def poll(self, timeout: float = 1.0, max_partitions: int | None = None) -> list[FetchedPartition]:
        """Wait up to `timeout` seconds for fetched data; return it as FetchedPartitions (in
        offset order per partition; release each one when done with it)."""
        self._enter()
        try:
            deadline = time.monotonic() + timeout
            fetcher = self.fetcher
            while True:
                if fetcher.fatal is not None:
                    error, fetcher.fatal = fetcher.fatal, None
                    raise error
                if fetcher.ready:
                    break
                self._maintain()
                fetcher.send_fetches()
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.loop.run_once(min(left, 0.1))
            out: list[FetchedPartition] = []
            while fetcher.ready and (max_partitions is None or len(out) < max_partitions):
                part = fetcher.ready.popleft()
                self._returned[(part.topic, part.partition)] = part.next_offset
                out.append(part)
            fetcher.send_fetches()                     # prefetch while the caller works
            return out
        finally:
            self._leave()

    def records(self, timeout: float = 1.0) -> Iterator[FetchRecord]:
        """The records of one poll() through the ring's flyweight (one FetchRecord object,
        refilled per record: copy() what you keep).  Each response is released when its
        records are done; the iterator must be finished or closed before the next poll."""
        parts = self.poll(timeout)
        try:
            groups: list[tuple[Response, int, list[FetchedPartition]]] = []
            for part in parts:
                lease = part._lease
                if lease is None or lease.response is None:
                    continue
                if groups and groups[-1][0] is lease.response:
                    groups[-1][2].append(part)
                else:
                    groups.append((lease.response, lease.api_version, [part]))
            for response, version, group in groups:
                wanted = records_filter(group)
                for rec in response.records(version):
                    limits = wanted.get((rec.topic, rec.partition))      # type: ignore[arg-type]
                    if limits is None:
                        continue
                    offset = rec.offset
                    if offset < limits[0] or offset >= limits[1]:
                        continue
                    if limits[2] and any(a <= offset <= b for a, b in limits[2]):
                        continue
                    yield rec
                for part in group:
                    part.release()
        finally:
            for part in parts:
                part.release()

    def metrics(self) -> dict[str, Any]:
        """The pool's KIP-81 metrics plus fetch counters."""
        out: dict[str, Any] = dict(self.pool.metrics())
        out.update({
            "fetches-sent": self.fetcher.fetches_sent,
            "fetch-responses": self.fetcher.responses,
            "bytes-fetched": self.fetcher.bytes_fetched,
            "muted-connections": sum(c.muted for c in self.cluster.connections.values()),
            "rings": sum(c.ring is not None for c in self.cluster.connections.values()),
        })
        return out

    def close(self) -> None:
        """Close the connections at once (nothing is sent or waited for: requests in flight are
        abandoned) and release the data not taken by poll()."""
        if self.closed:
            return
        for part in list(self.fetcher.ready):
            part.release()
        self.fetcher.ready.clear()
        self.cluster.close()
        if self._own_loop:
            self.loop.close()
        self.closed = True
