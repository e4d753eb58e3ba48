"""The mirror's idempotent producer toward the target cluster.

- InitProducerId once (no transactional id): one producer id and epoch for the run.
- Every target partition keeps its own sequence (from 0, advancing by lastOffsetDelta + 1 per
  batch, wrapping at 2**31 - 1 as Kafka's producer does); a batch keeps its sequence across
  retries, so a retried batch the broker already has is recognised (DUPLICATE_SEQUENCE_NUMBER,
  or success with its first offset).
- One batch per partition per ProduceRequest (real brokers answer INVALID_RECORD to more)
  unless `multi_batch`; acks=all; at most `max_in_flight` batches of a partition unacknowledged
  (Kafka keeps the last 5 per producer for duplicate detection), one until the partition's
  first is acknowledged, and `max_in_flight_requests` requests per broker.
- A failed batch (retriable error, dropped connection, timeout) waits until every later batch of
  its partition has answered, then the unacknowledged ones are sent again in order with their
  sequences (leader moves are followed through Metadata).  Other errors are fatal
  (`ProducerFencedError`-like conditions, INVALID_RECORD, CORRUPT_MESSAGE...): `fatal` is set.

A batch is the caller's object until it is written into a request frame (one copy, header
rewritten, CRC updated); `on_copied(item)` then lets the caller release the source bytes, and
`on_acked(item)` reports its acknowledgement (`item.source`: the source partition it came from;
several source partitions may go to one target partition).  Not thread-safe (one thread drives it).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kafkacodec._ring import Response
from kafkacodec.consumer._cluster import BrokerError, Cluster, Request
from kafkacodec.mirror._rewrite import write_produce_request
from kafkacodec.protocol import control
from kafkacodec.protocol._produce import decode_produce_response
from kafkacodec.protocol.api import ApiKey, Error

__all__ = ["IdempotentProducer", "Item", "PRODUCE_MAX_VERSION"]

PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION = 3, 11
INT32_MAX = 0x7FFFFFFF


def next_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps from 2**31 - 1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


class Item:
    """One source batch on its way to a target partition, or a position-only marker (batch
    None: control batches or aborted data the source position moves over)."""

    __slots__ = ("batch", "source", "source_next", "owner", "sequence", "frame", "position", "size",
                 "acked", "attempts", "trailers", "serial")

    def __init__(self, batch: Any, source: tuple[str, int], source_next: int, owner: Any = None):
        self.batch = batch                  # RawBytesBatchRecord (or None)
        self.source = source                # the source (topic, partition) it comes from
        self.source_next = source_next      # the source offset after it there
        self.owner = owner                  # what to release once copied (FetchedPartition)
        self.sequence = -1
        self.frame: Any = None              # the request frame holding the rewritten copy
        self.position = 0
        self.size = 0
        self.acked = False
        self.attempts = 0
        self.trailers: list[Item] = []      # position-only items acknowledged with this one
        self.serial = -1                    # send order (sequences wrap; this does not)


class _TargetPartition:
    __slots__ = ("topic", "partition", "pending", "in_flight", "next_sequence", "failed",
                 "backoff_until", "failures", "confirmed")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.pending: deque[Item] = deque()      # not sent yet (or to be sent again)
        self.in_flight: deque[Item] = deque()    # sent, not acknowledged, in sequence order
        self.next_sequence = 0
        self.failed = False                      # resend once nothing is in flight
        self.backoff_until = 0.0
        self.failures = 0
        # a broker takes any first sequence from a producer it has no state for: until one
        # batch of the partition is acknowledged, one at a time (Java's producer waits for its
        # first in-flight sequence alike), or a failed first batch would land after its successors
        self.confirmed = False


class IdempotentProducer:
    def __init__(self, cluster: Cluster, *, acks: int = -1, timeout_ms: int = 30000,
                 max_in_flight: int = 5, max_in_flight_requests: int = 5,
                 max_request_bytes: int = 8 << 20, multi_batch: bool = False,
                 client_id: str = "kafkacodec-mirror",
                 on_copied: Callable[[Item], None] | None = None,
                 on_acked: Callable[[Item], None] | None = None,
                 retry_backoff: float = 0.1, max_retry_backoff: float = 1.0):
        self.cluster = cluster
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.max_in_flight = min(max_in_flight, 5)
        self.max_in_flight_requests = max_in_flight_requests
        self.max_request_bytes = max_request_bytes
        self.multi_batch = multi_batch
        self.client_id = client_id
        self.on_copied = on_copied
        self.on_acked = on_acked
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.producer_id = -1
        self.producer_epoch = -1
        self.serial = 0
        self.last_metadata = 0.0
        self.partitions: dict[tuple[str, int], _TargetPartition] = {}
        self.requests_in_flight: dict[int, int] = {}
        self.fatal: BaseException | None = None
        self.requests = 0
        self.retries = 0
        self.errors: dict[str, int] = {}
        self.bytes_sent = 0
        self.batches_acked = 0
        self.records_acked = 0

    # -- set-up --------------------------------------------------------------------------------
    def init_producer_id(self) -> None:
        message = control.init_producer_id_request()
        for attempt in range(10):
            answer = self.cluster.call(
                None, ApiKey.INIT_PRODUCER_ID, control.request_encoder(message, self.client_id),
                control.response_decoder(ApiKey.INIT_PRODUCER_ID),
                max_version=control.MAX_VERSIONS[ApiKey.INIT_PRODUCER_ID])
            if answer.error_code == Error.NONE:
                self.producer_id = int(answer.producer_id)
                self.producer_epoch = int(answer.producer_epoch)
                return
            if not Error.for_code(answer.error_code).retriable:
                raise BrokerError("InitProducerId failed on the target", error_code=answer.error_code)
            self.cluster.wait(min(self.retry_backoff * 2 ** attempt, 1.0))
        raise BrokerError("InitProducerId did not succeed on the target",
                          error_code=Error.COORDINATOR_NOT_AVAILABLE)

    # -- queueing ------------------------------------------------------------------------------
    def partition(self, topic: str, partition: int) -> _TargetPartition:
        key = (topic, partition)
        tp = self.partitions.get(key)
        if tp is None:
            tp = self.partitions[key] = _TargetPartition(topic, partition)
        return tp

    def enqueue(self, topic: str, partition: int, item: Item) -> None:
        """Queue a batch, or a position-only item (batch None): that one is acknowledged with
        the batch before it, or at once when nothing is ahead of it."""
        tp = self.partition(topic, partition)
        if item.batch is not None:
            tp.pending.append(item)
            return
        ahead = tp.pending[-1] if tp.pending else tp.in_flight[-1] if tp.in_flight else None
        if ahead is not None:
            ahead.trailers.append(item)
        else:
            item.acked = True
            if self.on_acked is not None:
                self.on_acked(item)

    @property
    def busy(self) -> bool:
        return any(tp.pending or tp.in_flight for tp in self.partitions.values())

    def pending_batches(self) -> int:
        return sum(len(tp.pending) + len(tp.in_flight) for tp in self.partitions.values())

    # -- sending -------------------------------------------------------------------------------
    def send_ready(self) -> None:
        """Build and send the requests that can go now."""
        if self.fatal is not None:
            return
        now = time.monotonic()
        if self.cluster.metadata_stale and now - self.last_metadata >= self.retry_backoff:
            # a leader moved or a connection failed: learn the leaders again
            self.last_metadata = now
            try:
                self.cluster.refresh_metadata({t for t, _ in self.partitions})
            except (ConnectionError, TimeoutError, OSError):
                pass                             # tried again after the backoff
        by_node: dict[int, list[_TargetPartition]] = {}
        for tp in self.partitions.values():
            if not tp.pending or now < tp.backoff_until:
                continue
            if tp.failed:
                if tp.in_flight:
                    continue                     # wait for every later batch to answer
                tp.failed = False
            if len(tp.in_flight) >= self._window(tp):
                continue
            leader = self.cluster.leaders.get((tp.topic, tp.partition))
            if leader is None:
                self.cluster.metadata_stale = True
                continue
            if self.cluster.available(leader, now):
                by_node.setdefault(leader, []).append(tp)
        for node, ready in by_node.items():
            while ready and self.requests_in_flight.get(node, 0) < self.max_in_flight_requests:
                chosen: list[tuple[_TargetPartition, list[Item]]] = []
                size = 0
                rest = []
                for tp in ready:
                    items: list[Item] = []
                    room = self._window(tp) - len(tp.in_flight)
                    while tp.pending and room > 0 and (not items or self.multi_batch):
                        item = tp.pending[0]
                        n = item.size or len(item.batch.value)
                        if chosen and size + n > self.max_request_bytes:
                            break
                        tp.pending.popleft()
                        items.append(item)
                        size += n
                        room -= 1
                    if items:
                        chosen.append((tp, items))
                    if tp.pending and len(tp.in_flight) + len(items) < self._window(tp):
                        rest.append(tp)
                ready = rest if chosen else []
                if chosen:
                    self._send(node, chosen)

    def _window(self, tp: _TargetPartition) -> int:
        """Batches the partition may have in flight: one until its first is acknowledged."""
        return self.max_in_flight if tp.confirmed else 1

    def _send(self, node: int, chosen: list[tuple[_TargetPartition, list[Item]]]) -> None:
        topics: dict[str, list[tuple[int, list[tuple[Any, int, int, int]]]]] = {}
        order: list[Item] = []
        for tp, items in chosen:
            entries = []
            for item in items:
                if item.sequence < 0:
                    self.serial += 1
                    item.serial = self.serial
                    item.sequence = tp.next_sequence
                    batch = item.batch
                    tp.next_sequence = next_sequence(tp.next_sequence, batch.offset - batch.base_offset + 1)
                source = item.frame[item.position:item.position + item.size] if item.frame is not None \
                    else item.batch.value
                entries.append((source, self.producer_id, self.producer_epoch, item.sequence))
                order.append(item)
                tp.in_flight.append(item)
            topics.setdefault(tp.topic, []).append((tp.partition, entries))
        sent = list(topics.items())
        context = (node, chosen)

        def encode(version: int, cid: int) -> Any:
            frame, positions = write_produce_request(
                sent, api_version=version, correlation_id=cid, client_id=self.client_id,
                acks=self.acks, timeout_ms=self.timeout_ms)
            view = memoryview(frame)
            for item, (position, size) in zip(order, positions):
                first_copy = item.frame is None
                item.frame, item.position, item.size = view, position, size
                if first_copy and self.on_copied is not None:
                    self.on_copied(item)
            self.bytes_sent += sum(size for _, size in positions)
            return frame

        request = Request(ApiKey.PRODUCE, encode, lambda resp, v: self._on_response(resp, v, context),
                          lambda exc: self._on_error(exc, context),
                          max_version=PRODUCE_MAX_VERSION, min_version=PRODUCE_MIN_VERSION,
                          timeout=self.cluster.request_timeout + self.timeout_ms / 1000)
        self.requests_in_flight[node] = self.requests_in_flight.get(node, 0) + 1
        self.requests += 1
        try:
            self.cluster.send(node, request)
        except (ConnectionError, KeyError):
            pass                                 # on_error ran

    # -- answers -------------------------------------------------------------------------------
    def _request_done(self, node: int) -> None:
        self.requests_in_flight[node] = max(0, self.requests_in_flight.get(node, 1) - 1)

    def _fail(self, tp: _TargetPartition, item: Item, reason: str) -> None:
        """Put an unacknowledged batch back (sent again, in order, once nothing is in flight)."""
        if item in tp.in_flight:
            tp.in_flight.remove(item)
        item.attempts += 1
        tp.failed = True
        tp.failures += 1
        tp.backoff_until = time.monotonic() + min(self.retry_backoff * 2 ** min(tp.failures, 10),
                                                  self.max_retry_backoff)
        # keep sequence order: failed batches go back before the untouched ones
        waiting = sorted([i for i in tp.pending if i.sequence >= 0] + [item],
                         key=lambda i: i.serial)
        fresh = [i for i in tp.pending if i.sequence < 0]
        tp.pending = deque(waiting + fresh)
        self.retries += 1
        self.errors[reason] = self.errors.get(reason, 0) + 1

    def _ack(self, tp: _TargetPartition, item: Item) -> None:
        item.acked = True
        tp.confirmed = True
        tp.failures = 0
        self.batches_acked += 1
        self.records_acked += item.batch.record_count or 0
        # acknowledgements are reported in sequence order: never past a batch waiting to be sent
        # again (its successors cannot have landed before it; if a broker says they did, the
        # position stays before it and the run ends on the broker's refusal of it)
        first_waiting = min((i.serial for i in tp.pending if i.sequence >= 0), default=None)
        while tp.in_flight and tp.in_flight[0].acked and (
                first_waiting is None or tp.in_flight[0].serial < first_waiting):
            done = tp.in_flight.popleft()
            done.frame = None
            if self.on_acked is not None:
                self.on_acked(done)
                for trailer in done.trailers:
                    self.on_acked(trailer)
            done.trailers = []

    def _on_error(self, exc: BaseException, context: Any) -> None:
        node, chosen = context
        self._request_done(node)
        for tp, items in chosen:
            for item in items:
                self._fail(tp, item, type(exc).__name__)

    def _on_response(self, resp: Response, version: int, context: Any) -> None:
        node, chosen = context
        self._request_done(node)
        try:
            decoded = decode_produce_response(resp.payload, version)
        except Exception as exc:
            resp.release()
            self.fatal = exc
            return
        resp.release()
        codes: dict[tuple[str, int], tuple[int, str | None]] = {}
        for topic in decoded.responses:
            for part in topic.partition_responses:
                codes[(topic.name, part.partition_index)] = (part.error_code, part.error_message)
        for tp, items in chosen:
            code, message = codes.get((tp.topic, tp.partition),
                                      (Error.NETWORK_EXCEPTION, "partition missing from the answer"))
            error = Error.for_code(code)
            # CORRUPT_MESSAGE is retriable in Kafka's table, but the same bytes would be sent
            # again, without end (the mirror has no delivery timeout): fatal
            retriable = error.retriable and error != Error.CORRUPT_MESSAGE
            for item in items:
                if code in (Error.NONE, Error.DUPLICATE_SEQUENCE_NUMBER):
                    self._ack(tp, item)
                elif retriable or (code == Error.OUT_OF_ORDER_SEQUENCE_NUMBER and tp.failed):
                    if error.invalid_metadata:
                        self.cluster.metadata_stale = True
                    self._fail(tp, item, f"error {code}")
                else:
                    self.fatal = BrokerError(
                        f"the target refused a batch (source offsets {item.batch.base_offset}-"
                        f"{item.batch.offset}){': ' + message if message else ''}",
                        error_code=code, topic=tp.topic, partition=tp.partition)
                    return

