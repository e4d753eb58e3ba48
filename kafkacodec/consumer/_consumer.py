"""The consumer core's public face: assign partitions, poll FetchedPartitions (raw batches,
Arrow, or flyweight records), look up and commit offsets.  See docs/consumer.md."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kafkacodec._inuse import InUse
from kafkacodec._pool import SimpleMemoryPool
from kafkacodec._ring import FetchRecord, Response
from kafkacodec.consumer._cluster import RETRIABLE_ERRORS, BrokerError, Cluster, Reactor
from kafkacodec.consumer._fetcher import Fetcher
from kafkacodec.consumer._forms import FetchedPartition, records_filter
from kafkacodec.protocol import control

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
      reach the caller, with or without the broker's aborted-transaction lists.
    - ``group_id``: for commit() / committed() (no group membership: partitions are assigned
      by the caller).

    Memory: the rings (and so every fetched byte) stay within `buffer_memory`; on top of it,
    coordinator rings (COORDINATOR_RING_BYTES each, priority allocations), small per-connection
    state, one decompression buffer per ring while records() walks compressed batches, and what
    the caller keeps (Arrow batches, copies).

    Not thread-safe: one thread at a time (a second thread entering gets ConcurrentUseError).
    """

    def __init__(self, bootstrap: str, *, buffer_memory: int = DEFAULT_BUFFER_MEMORY,
                 ring_bytes: int | None = None, isolation_level: str = "read_uncommitted",
                 group_id: str | None = None, client_id: str = "kafkacodec",
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 50 << 20, max_partition_fetch_bytes: int = 1 << 20,
                 max_in_flight: int = 2, auto_offset_reset: str = "earliest",
                 control_batches: bool = False, request_timeout: float = 30.0,
                 retry_backoff: float = 0.1, max_retry_backoff: float = 1.0,
                 reactor: Reactor | None = None):
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
        self._own_reactor = reactor is None
        self.reactor = reactor or Reactor()
        self.cluster = Cluster(bootstrap, pool=self.pool, ring_bytes=ring_bytes,
                               coordinator_ring_bytes=COORDINATOR_RING_BYTES,
                               client_id=client_id, request_timeout=request_timeout,
                               retry_backoff=retry_backoff, max_retry_backoff=max_retry_backoff,
                               reactor=self.reactor, name="source")
        self.fetcher = Fetcher(self.cluster, read_committed=isolation_level == "read_committed",
                               max_wait_ms=fetch_max_wait_ms, min_bytes=fetch_min_bytes,
                               fetch_max_bytes=fetch_max_bytes,
                               max_partition_fetch_bytes=max_partition_fetch_bytes,
                               max_in_flight=max_in_flight, control_batches=control_batches,
                               auto_offset_reset=auto_offset_reset, retry_backoff=retry_backoff,
                               max_retry_backoff=max_retry_backoff, client_id=client_id)
        self.retry_backoff = retry_backoff
        self._returned: dict[TopicPartition, int] = {}     # next offset after what poll() gave
        self._coordinator: int | None = None
        self._in_use = InUse("Consumer")     # one thread at a time (ConcurrentUseError)
        self._last_metadata = 0.0
        self.closed = False

    # -- guards --------------------------------------------------------------------------------
    def _enter(self) -> None:
        if self.closed:
            raise RuntimeError("the consumer is closed")
        self._in_use.__enter__()

    def _leave(self) -> None:
        self._in_use.__exit__(None, None, None)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata and assignment ---------------------------------------------------------------
    def partitions_for(self, topic: str) -> int:
        """The partition count of `topic` (BrokerError when the cluster does not know it)."""
        self._enter()
        try:
            return self._partitions_for(topic)
        finally:
            self._leave()

    def _partitions_for(self, topic: str) -> int:
        for attempt in range(10):
            self.cluster.refresh_metadata([topic])
            code = self.cluster.topic_errors.get(topic, 0)
            if code == 0 and topic in self.cluster.partition_counts:
                return self.cluster.partition_counts[topic]
            if code not in RETRIABLE_ERRORS or code == 3 and attempt >= 3:
                raise BrokerError(f"no metadata for topic {topic!r}", error_code=code or 3)
            self.cluster.wait(self.retry_backoff * (attempt + 1))
        raise BrokerError(f"no metadata for topic {topic!r}", error_code=5)

    def assign(self, positions: Mapping[TopicPartition, Position]) -> None:
        """Fetch these partitions from these positions: an offset, "earliest", "latest" or
        "committed" (the group's committed offset, else auto_offset_reset)."""
        self._enter()
        try:
            topics = {t for t, _ in positions}
            self.cluster.refresh_metadata(topics)
            committed: dict[TopicPartition, int | None] = {}
            wanted = [tp for tp, pos in positions.items() if pos == "committed"]
            if wanted:
                committed = self._committed(wanted)
            for tp, pos in positions.items():
                if pos == "committed":
                    offset = committed.get(tp)
                    if offset is None or offset < 0:
                        pos = self.fetcher.auto_offset_reset
                        if pos == "none":
                            raise BrokerError("no committed offset and auto_offset_reset='none'",
                                              error_code=1, topic=tp[0], partition=tp[1])
                    else:
                        pos = offset
                if isinstance(pos, str):
                    if pos not in ("earliest", "latest"):
                        raise ValueError(f"position {pos!r}: an offset, 'earliest', 'latest' or 'committed'")
                    self.fetcher.assign(tp, None, reset=pos)
                else:
                    if pos < 0:
                        raise ValueError(f"offset {pos} for {tp} is negative")
                    self.fetcher.assign(tp, int(pos))
                self._returned[tp] = -1
            self._resolve_resets()
            for tp in positions:
                st = self.fetcher.states[tp]
                self._returned[tp] = st.position if st.position is not None else -1
        finally:
            self._leave()

    def assign_topics(self, topics: Iterable[str], start: Position = "earliest") -> dict[TopicPartition, int]:
        """Assign every partition of `topics` from `start`; returns the positions."""
        wanted: dict[TopicPartition, Position] = {}
        for topic in topics:
            for p in range(self.partitions_for(topic)):
                wanted[(topic, p)] = start
        self.assign(wanted)
        return {tp: self.position(tp) for tp in wanted}

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

    def position(self, partition: TopicPartition) -> int:
        """The offset after the data poll() returned last for `partition` (what to commit)."""
        return self._returned[partition]

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.fetcher.states[tp].paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.fetcher.states[tp].paused = False

    # -- offsets -------------------------------------------------------------------------------
    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        self._enter()
        try:
            return self._list_offsets(list(partitions), control.EARLIEST_TIMESTAMP)
        finally:
            self._leave()

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition, or the last stable offset under
        read_committed (what the consumer can reach now)."""
        self._enter()
        try:
            return self._list_offsets(list(partitions), control.LATEST_TIMESTAMP)
        finally:
            self._leave()

    def _list_offsets(self, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        isolation = 1 if self.isolation_level == "read_committed" else 0
        result: dict[TopicPartition, int] = {}
        todo = list(partitions)
        for attempt in range(20):
            if not todo:
                return result
            if attempt or any(tp not in self.cluster.leaders for tp in todo):
                self.cluster.refresh_metadata({t for t, _ in todo})
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in todo:
                leader = self.cluster.leaders.get(tp)
                if leader is not None:
                    by_leader.setdefault(leader, []).append(tp)
            retry: list[TopicPartition] = [tp for tp in todo if tp not in self.cluster.leaders]
            for leader, tps in by_leader.items():
                grouped: dict[str, list[tuple[int, int]]] = {}
                for t, p in tps:
                    grouped.setdefault(t, []).append((p, timestamp))
                try:
                    answer = self.cluster.call(
                        leader, control.LIST_OFFSETS,
                        _encoder(control.list_offsets_request(grouped, isolation_level=isolation),
                                 self.client_id),
                        _decoder(control.LIST_OFFSETS), max_version=control.MAX_VERSIONS[control.LIST_OFFSETS],
                        min_version=1, retries=0)
                except (ConnectionError, TimeoutError, OSError):
                    retry += tps
                    continue
                for topic in answer.topics:
                    for part in topic.partitions:
                        tp = (topic.name, part.partition_index)
                        if part.error_code == 0:
                            result[tp] = part.offset
                        elif part.error_code in RETRIABLE_ERRORS:
                            retry.append(tp)
                        else:
                            raise BrokerError("ListOffsets failed", error_code=part.error_code,
                                              topic=tp[0], partition=tp[1])
            todo = [tp for tp in retry if tp not in result]
            if todo:
                self.cluster.wait(min(self.retry_backoff * (2 ** attempt), 1.0))
        raise BrokerError(f"ListOffsets did not succeed for {todo}", error_code=5)

    def _resolve_resets(self) -> None:
        pending = {tp: st.reset for tp, st in self.fetcher.states.items() if st.reset}
        if not pending:
            return
        for kind in ("earliest", "latest"):
            tps = [tp for tp, k in pending.items() if k == kind]
            if not tps:
                continue
            offsets = self._list_offsets(tps, control.EARLIEST_TIMESTAMP if kind == "earliest"
                                         else control.LATEST_TIMESTAMP)
            for tp, offset in offsets.items():
                self.fetcher.seek(tp, offset)
                if self._returned.get(tp, -1) < 0 or kind:
                    self._returned[tp] = offset

    def _find_coordinator(self, refresh: bool = False) -> int:
        if self.group_id is None:
            raise ValueError("commit() and committed() need a group_id")
        if self._coordinator is not None and not refresh:
            return self._coordinator
        message = control.find_coordinator_request(self.group_id)
        for attempt in range(10):
            # coordinator traffic (KIP-81): over a priority connection, so a pool that the data
            # rings hold whole does not stall the lookup until the request times out
            answer = self.cluster.call(
                None, control.FIND_COORDINATOR,
                _encoder(message, self.client_id), _decoder(control.FIND_COORDINATOR),
                max_version=control.MAX_VERSIONS[control.FIND_COORDINATOR], purpose="coordinator")
            if answer.error_code == 0:
                self.cluster.brokers.setdefault(answer.node_id, (answer.host, answer.port))
                self._coordinator = int(answer.node_id)
                return self._coordinator
            if answer.error_code not in RETRIABLE_ERRORS:
                raise BrokerError("FindCoordinator failed", error_code=answer.error_code)
            self.cluster.wait(min(self.retry_backoff * (2 ** attempt), 1.0))
        raise BrokerError("no group coordinator", error_code=15)

    def _coordinator_call(self, api_key: int, message: Any, check: Any) -> Any:
        """A request to the group coordinator (its own connection, priority ring), retried
        while the coordinator moves or loads."""
        for attempt in range(10):
            node = self._find_coordinator(refresh=attempt > 0)
            try:
                answer = self.cluster.call(
                    node, api_key, _encoder(message, self.client_id), _decoder(api_key), max_version=control.MAX_VERSIONS[api_key],
                    min_version=1 if api_key == control.OFFSET_FETCH else 2,
                    purpose="coordinator", retries=1)
            except (ConnectionError, TimeoutError, OSError):
                self.cluster.wait(min(self.retry_backoff * (2 ** attempt), 1.0))
                continue
            code = check(answer)
            if code == 0:
                return answer
            if code not in RETRIABLE_ERRORS:
                raise BrokerError(f"api {api_key} for group {self.group_id!r} failed", error_code=code)
            self.cluster.wait(min(self.retry_backoff * (2 ** attempt), 1.0))
        raise BrokerError(f"the coordinator of group {self.group_id!r} did not answer", error_code=15)

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` ((topic, partition) -> next offset to read; default: position() of
        every assigned partition) to the group's coordinator (OffsetCommit, no membership)."""
        self._enter()
        try:
            if offsets is None:
                offsets = {tp: o for tp, o in self._returned.items() if o >= 0}
            grouped: dict[str, list[tuple[int, int]]] = {}
            for (t, p), o in offsets.items():
                grouped.setdefault(t, []).append((p, o))
            if not grouped:
                return
            if self.group_id is None:
                raise ValueError("commit() needs a group_id")
            message = control.offset_commit_request(self.group_id, grouped)

            def check(answer: Any) -> int:
                for topic in answer.topics:
                    for part in topic.partitions:
                        if part.error_code:
                            return int(part.error_code)
                return 0

            self._coordinator_call(control.OFFSET_COMMIT, message, check)
        finally:
            self._leave()

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None where nothing is committed)."""
        self._enter()
        try:
            return self._committed(list(partitions))
        finally:
            self._leave()

    def _committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        grouped: dict[str, list[int]] = {}
        for t, p in partitions:
            grouped.setdefault(t, []).append(p)
        message = control.offset_fetch_request(self.group_id or "", grouped)

        def check(answer: Any) -> int:
            code = int(getattr(answer, "error_code", 0) or 0)
            if code:
                return code
            for topic in answer.topics:
                for part in topic.partitions:
                    if part.error_code and part.error_code != 3:
                        return int(part.error_code)
            return 0

        answer = self._coordinator_call(control.OFFSET_FETCH, message, check)
        out: dict[TopicPartition, int | None] = {tp: None for tp in partitions}
        for topic in answer.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                if tp in out and part.error_code == 0 and part.committed_offset >= 0:
                    out[tp] = int(part.committed_offset)
        return out

    # -- fetching ------------------------------------------------------------------------------
    def _maintain(self) -> None:
        now = time.monotonic()
        if self.cluster.metadata_stale and now - self._last_metadata >= self.retry_backoff:
            self._last_metadata = now
            try:
                self.cluster.refresh_metadata({t for t, _ in self.fetcher.states})
            except (ConnectionError, TimeoutError, OSError):
                pass                          # retried at the next poll, after the backoff
        if any(st.reset for st in self.fetcher.states.values()):
            self._resolve_resets()

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
                self.reactor.poll(min(left, 0.1))
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
        if self.closed:
            return
        for part in list(self.fetcher.ready):
            part.release()
        self.fetcher.ready.clear()
        self.cluster.close()
        if self._own_reactor:
            self.reactor.close()
        self.closed = True


def _encoder(message: Any, client_id: str) -> Any:
    def encode(version: int, correlation_id: int) -> bytes:
        return control.encode_request(message, version, correlation_id, client_id)

    return encode


def _decoder(api_key: int) -> Any:
    cls = control.RESPONSES[api_key]

    def decode(resp: Response, version: int) -> Any:
        return control.decode_response(cls, resp.payload, version)

    return decode

