"""The fetcher: which partitions to fetch from which broker, the fetches in flight, and what a
FetchResponse becomes (FetchedPartitions, new positions, retries).

- Leader routing: a partition is fetched from its leader (Cluster.leaders, from Metadata).
- Several fetches in flight per connection (`max_in_flight`): a broker's partitions are spread
  over up to that many requests, and a partition is fetched again as soon as its previous
  answer was parsed (its next offset is known from the batch headers), before the caller has
  consumed it.  A partition is in at most one fetch at a time.  The rings bound what is
  prefetched: a full ring stops its connection from reading.  Partitions at their end ride
  along with a fetch that has data: a fetch of them alone long-polls, and the broker answers
  the connection's later fetches only after it.
- Errors: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION and the other metadata errors
  refresh Metadata and retry after a backoff (exponential, jittered, per partition); a dropped
  connection or a timed-out request retries its partitions the same way, as do the other
  retriable errors (Kafka's Errors) but CORRUPT_MESSAGE; OFFSET_OUT_OF_RANGE resets by
  `auto_offset_reset`; other errors are raised (BrokerError).
- Resets ("earliest"/"latest", from assign() or OFFSET_OUT_OF_RANGE) are looked up without
  waiting (`send_resets()`: ListOffsets through an OffsetLookup); `on_reset(tp, offset)` tells
  the consumer the new position.
- A response is parsed once: `decode_fetch_response` validates it in C; each partition's
  batches are walked shallowly (`shallow_records`, headers only; the first batch trimmed when the
  fetch starts inside it, unless `whole_batches`) and, for read_committed, decided by the
  partition's TransactionFilter.
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kafkacodec._ring import Response
from kafkacodec.consumer._cluster import BrokerError, Cluster, Request
from kafkacodec.net.client import RING_OVERHEAD
from kafkacodec.consumer._forms import FetchedPartition, ResponseLease
from kafkacodec.consumer._offsets import OffsetLookup
from kafkacodec.consumer._transactions import TransactionFilter
from kafkacodec.errors import AuthenticationError, RecordTooLargeError
from kafkacodec.mirror.shallow import shallow_records
from kafkacodec.protocol import control
from kafkacodec.protocol._fetch import decode_fetch_response, encode_fetch_request
from kafkacodec.protocol.api import ApiKey, Error

__all__ = ["Fetcher", "PartitionState", "FETCH_MAX_VERSION", "FETCH_MIN_VERSION"]

FETCH_MIN_VERSION, FETCH_MAX_VERSION = 4, 12     # topic names (v13+ name topics by id)
# A response's bytes beyond its records: header, topic names, partition headers and aborted
# transaction lists.  The request's max_bytes leaves this much of the ring for them.
RESPONSE_HEADROOM = 4096
PARTITION_HEADROOM = 128


class PartitionState:
    """What the fetcher knows about one assigned partition."""

    __slots__ = ("topic", "partition", "position", "epoch", "fetch", "backoff_until", "failures",
                 "txn", "high_watermark", "last_stable_offset", "log_start_offset", "alone",
                 "paused", "reset", "lookup")

    def __init__(self, topic: str, partition: int, position: int | None, read_committed: bool):
        self.topic = topic
        self.partition = partition
        self.position = position           # the next offset to fetch (None: to be resolved)
        self.epoch = 0                     # bumped by seek(): answers to older fetches are dropped
        self.fetch: _Fetch | None = None   # the fetch in flight for this partition
        self.backoff_until = 0.0
        self.failures = 0
        self.txn = TransactionFilter() if read_committed else None
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.alone = False                 # got only a partial batch: fetch it first and alone
        self.paused = False
        self.reset: str | None = None      # "earliest"/"latest": the position must be looked up
        self.lookup: OffsetLookup | None = None    # ...and the lookup asking for it

    def fetchable(self, now: float) -> bool:
        return (self.fetch is None and not self.paused and self.position is not None
                and self.reset is None and now >= self.backoff_until)


class _Fetch:
    """One FetchRequest in flight: the partitions it asked for, at which epoch and offset."""

    __slots__ = ("node", "partitions", "conn")

    def __init__(self, node: int, partitions: dict[tuple[str, int], tuple[int, int]]):
        self.node = node
        self.partitions = partitions       # (topic, partition) -> (epoch, fetch offset)
        self.conn: Any = None              # the connection it went out on


class Fetcher:
    def __init__(self, cluster: Cluster, *, read_committed: bool, max_wait_ms: int,
                 min_bytes: int, fetch_max_bytes: int, max_partition_fetch_bytes: int,
                 max_in_flight: int, control_batches: bool, whole_batches: bool,
                 auto_offset_reset: str, retry_backoff: float, max_retry_backoff: float,
                 client_id: str, on_reset: Callable[[tuple[str, int], int], None] | None = None):
        self.cluster = cluster
        self.on_reset = on_reset
        self.read_committed = read_committed
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_in_flight = max_in_flight
        self.control_batches = control_batches
        self.whole_batches = whole_batches
        self.auto_offset_reset = auto_offset_reset
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.client_id = client_id
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.ready: deque[FetchedPartition] = deque()
        self.fatal: BaseException | None = None
        self.in_flight: dict[int, int] = {}          # node -> fetches in flight
        self.lookups: list[OffsetLookup] = []        # resets being looked up
        self.rotation = 0
        self.fetches_sent = 0
        self.responses = 0
        self.bytes_fetched = 0

    # -- assignment ----------------------------------------------------------------------------
    def assign(self, key: tuple[str, int], position: int | None, reset: str | None = None) -> None:
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = PartitionState(key[0], key[1], position, self.read_committed)
        self.seek(key, position, reset)

    def seek(self, key: tuple[str, int], position: int | None, reset: str | None = None) -> None:
        st = self.states[key]
        st.position = position
        st.reset = reset
        st.lookup = None                   # an answer to an older lookup is not for this reset
        st.epoch += 1
        st.alone = False
        st.backoff_until = 0.0
        if st.txn is not None:
            st.txn = TransactionFilter()
        # data already parsed for the old position is dropped
        kept: deque[FetchedPartition] = deque()
        for part in self.ready:
            if (part.topic, part.partition) == key:
                part.release()
            else:
                kept.append(part)
        self.ready = kept

    def unassign(self, key: tuple[str, int]) -> None:
        if key in self.states:
            self.seek(key, None)
            del self.states[key]

    # -- resets --------------------------------------------------------------------------------
    def send_resets(self) -> None:
        """Look up the positions of the partitions to reset (one OffsetLookup per kind, asked
        without waiting; a lookup whose partitions were all sought elsewhere since is dropped).
        A lookup's non-retriable error becomes `fatal` (poll() raises it)."""
        fresh: dict[str, list[tuple[str, int]]] = {}
        for key, st in self.states.items():
            if st.reset is not None and st.lookup is None:
                fresh.setdefault(st.reset, []).append(key)
        for kind, keys in fresh.items():
            lookup = OffsetLookup(
                self.cluster, keys, control.EARLIEST_TIMESTAMP if kind == "earliest"
                else control.LATEST_TIMESTAMP, read_committed=self.read_committed,
                client_id=self.client_id, retry_backoff=self.retry_backoff,
                max_retry_backoff=self.max_retry_backoff)
            lookup.on_found = functools.partial(self._reset_found, lookup)
            for key in keys:
                self.states[key].lookup = lookup
            self.lookups.append(lookup)
        live = []
        for lookup in self.lookups:
            if not any(st.lookup is lookup for st in self.states.values()):
                continue                         # seek()/unassign() since: nobody waits for it
            if lookup.error is not None:
                self.fatal = lookup.error
                for st in self.states.values():
                    if st.lookup is lookup:
                        st.lookup = None         # looked up again at the next call
                continue
            lookup.send()
            live.append(lookup)
        self.lookups = live

    def _reset_found(self, lookup: OffsetLookup, key: tuple[str, int], offset: int) -> None:
        st = self.states.get(key)
        if st is None or st.lookup is not lookup:
            return                               # sought elsewhere since
        self.seek(key, offset)
        if self.on_reset is not None:
            self.on_reset(key, offset)

    # -- sending -------------------------------------------------------------------------------
    def send_fetches(self) -> None:
        """Send what can be sent now: per leader, up to max_in_flight fetches."""
        now = time.monotonic()
        by_node: dict[int, list[PartitionState]] = {}
        assigned: dict[int, int] = {}
        for st in self.states.values():
            leader = self.cluster.leaders.get((st.topic, st.partition))
            if leader is None:
                refused = self.cluster.topic_refused(st.topic, st.partition)
                if refused is not None and self.fatal is None:
                    self.fatal = refused             # poll() raises it, as Kafka's consumer
                if st.position is not None:
                    self.cluster.metadata_stale = True
                continue
            assigned[leader] = assigned.get(leader, 0) + 1
            if st.fetchable(now):
                by_node.setdefault(leader, []).append(st)
        muted = self.cluster.has_muted()
        for node, ready in by_node.items():
            if not self.cluster.available(node, now):
                continue
            conn = self.cluster.connections.get((node, "data"))
            if muted and conn is not None and conn.ring is not None and conn.leases:
                # KIP-81 pressure: no new fetch until the caller releases this connection's
                # data, so that its ring drains and goes back to the pool for the muted ones.
                # (A ring pinned only by views the caller kept cannot drain: not held back.)
                continue
            # fairness: rotate the order (Kafka's fetch session rotates the same way)
            self.rotation += 1
            if len(ready) > 1:
                k = self.rotation % len(ready)
                ready = ready[k:] + ready[:k]
            ready.sort(key=lambda s: not s.alone)           # a partition stuck on a partial batch first
            # A fetch of caught-up partitions only waits max_wait_ms at the broker, which answers
            # a connection's requests in order: every fetch behind it would wait as long.  So
            # caught-up partitions (and those not answered yet) ride along with the first fetch
            # that has data to return (answered at once), and go alone only as the connection's
            # one fetch.
            waiting: list[PartitionState] = []
            with_data: list[PartitionState] = []
            for st in ready:
                (waiting if self._caught_up(st) else with_data).append(st)
            ready = with_data
            if waiting and not ready and self.in_flight.get(node, 0) == 0:
                self._send(node, waiting)
                continue
            per_fetch = max(1, math.ceil(assigned[node] / self.max_in_flight))
            while ready and self.in_flight.get(node, 0) < self.max_in_flight:
                group = [ready.pop(0)] if ready[0].alone else ready[:per_fetch]
                if not group[0].alone:
                    del ready[:per_fetch]
                    group, waiting = group + waiting, []
                if not self._send(node, group):
                    break

    def _caught_up(self, st: PartitionState) -> bool:
        """Whether a fetch of `st` may wait at the broker: no answer yet, or the last one left
        nothing at its position (the high watermark; for read_committed the last stable offset)."""
        end = st.last_stable_offset if self.read_committed else st.high_watermark
        return end < 0 or end <= (st.position or 0)

    def _send(self, node: int, group: list[PartitionState]) -> bool:
        ring = self.cluster.ring_bytes
        room = ring // self.max_in_flight - RING_OVERHEAD - RESPONSE_HEADROOM - \
            PARTITION_HEADROOM * len(group) - sum(len(s.topic) for s in group)
        max_bytes = max(1, min(self.fetch_max_bytes, room))
        partition_bytes = max(1, min(self.max_partition_fetch_bytes, max_bytes))
        fetch = _Fetch(node, {(s.topic, s.partition): (s.epoch, s.position) for s in group})  # type: ignore[misc]
        topics: dict[str, list[tuple[int, int, int]]] = {}
        for s in group:
            assert s.position is not None
            topics.setdefault(s.topic, []).append((s.partition, s.position, partition_bytes))
        isolation = 1 if self.read_committed else 0

        def encode(version: int, cid: int) -> bytes:
            return encode_fetch_request(list(topics.items()), api_version=version,
                                        correlation_id=cid, client_id=self.client_id,
                                        max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes,
                                        max_bytes=max_bytes, isolation_level=isolation)

        request = Request(ApiKey.FETCH, encode,
                          lambda resp, version: self._on_response(resp, version, fetch),
                          lambda exc: self._on_error(exc, fetch), max_version=FETCH_MAX_VERSION,
                          min_version=FETCH_MIN_VERSION,
                          timeout=self.cluster.request_timeout + self.max_wait_ms / 1000,
                          ring_bounded=True)
        for s in group:
            s.fetch = fetch
        self.in_flight[node] = self.in_flight.get(node, 0) + 1
        try:
            fetch.conn = self.cluster.send(node, request)
        except (ConnectionError, KeyError):
            return False                        # on_error already ran
        self.fetches_sent += 1
        return True

    # -- answers -------------------------------------------------------------------------------
    def _done(self, fetch: _Fetch) -> None:
        self.in_flight[fetch.node] = max(0, self.in_flight.get(fetch.node, 1) - 1)
        for key in fetch.partitions:
            st = self.states.get(key)
            if st is not None and st.fetch is fetch:
                st.fetch = None

    def _backoff(self, st: PartitionState) -> None:
        delay = min(self.retry_backoff * (2 ** st.failures), self.max_retry_backoff)
        st.failures += 1
        st.backoff_until = time.monotonic() + delay

    def _on_error(self, exc: BaseException, fetch: _Fetch) -> None:
        self._done(fetch)
        if isinstance(exc, AuthenticationError):   # refused credentials: poll() raises, as Kafka's
            self.fatal = exc
            return
        if isinstance(exc, RecordTooLargeError):
            self.fatal = RecordTooLargeError(
                f"a fetch response from broker {fetch.node} does not fit the ring "
                f"({self.cluster.ring_bytes} bytes): a batch is larger than ring_bytes allows; "
                f"raise ring_bytes/buffer_memory above the topic's max.message.bytes ({exc})")
            return
        for key in fetch.partitions:
            st = self.states.get(key)
            if st is not None:
                self._backoff(st)

    def _on_response(self, resp: Response, version: int, fetch: _Fetch) -> None:
        self._done(fetch)
        self.responses += 1
        self.bytes_fetched += resp.size
        try:
            self._parse(resp, version, fetch)
        except BaseException as exc:          # bad data: the caller sees it at poll()
            resp.release()
            self.fatal = exc

    def _parse(self, resp: Response, version: int, fetch: _Fetch) -> None:
        decoded = decode_fetch_response(resp.payload, version)
        lease = ResponseLease(resp, version, fetch.conn)
        made: list[FetchedPartition] = []
        if decoded.error_code:
            for key in fetch.partitions:
                st = self.states.get(key)
                if st is not None:
                    self._partition_error(st, decoded.error_code)
            resp.release()
            return
        for topic in decoded.responses:
            name = topic.topic
            assert name is not None
            for part in topic.partitions:
                key = (name, part.partition_index)
                sent = fetch.partitions.get(key)
                st = self.states.get(key)
                if sent is None or st is None or st.epoch != sent[0]:
                    continue                           # not ours, or seek()/unassign() since
                if part.error_code:
                    self._partition_error(st, part.error_code)
                    continue
                st.failures = 0
                st.high_watermark = part.high_watermark
                st.last_stable_offset = part.last_stable_offset
                st.log_start_offset = part.log_start_offset
                made_part = self._take(st, sent[1], part, lease)
                if made_part is not None:
                    made.append(made_part)
        lease.start()                                  # released here when nothing refers to it
        self.ready.extend(made)

    def _take(self, st: PartitionState, fetch_offset: int, part: Any,
              lease: ResponseLease) -> FetchedPartition | None:
        records = part.records
        if records is None or len(records) == 0:
            return None
        if self.whole_batches:       # as sent, but for batches ending before the fetch offset
            batches = [b for b in shallow_records(records) if b.offset >= fetch_offset]
        else:
            batches = list(shallow_records(records, fetch_offset))
        if not batches:
            # Only a partial batch: the broker cut it (max bytes).  Fetch it alone and first
            # next time (KIP-74: the first partition of a response gets one whole batch).
            if st.alone:
                raise RecordTooLargeError(
                    f"{st.topic}-{st.partition} at offset {fetch_offset}: the broker returned "
                    f"only part of a {len(records)}+ byte batch, even alone; raise ring_bytes",
                    offset=fetch_offset)
            st.alone = True
            return None
        st.alone = False
        stop: int | None = None
        kept: list[Any]
        dropped: list[tuple[int, int, int]]
        if st.txn is not None:
            scanning = st.txn.scanning
            kept, dropped, next_fetch, stop = st.txn.walk(batches, fetch_offset,
                                                          part.aborted_transactions)
            st.position = next_fetch
            if scanning:
                return None                    # markers only: nothing is returned
            following = stop if stop is not None else next_fetch
            if self.control_batches:           # every decided batch, the aborted ones named
                kept = [b for b in batches if b.offset < following]
        else:
            kept = batches if self.control_batches else [b for b in batches if not b.is_control]
            dropped = []
            following = st.position = batches[-1].offset + 1
        if not kept:
            if following == fetch_offset:
                return None
            return FetchedPartition(st.topic, st.partition, fetch_offset, following, stop, [], [],
                                    None, None, st.high_watermark, st.last_stable_offset,
                                    st.log_start_offset)
        return FetchedPartition(st.topic, st.partition, fetch_offset, following, stop, kept,
                                dropped, records, lease, st.high_watermark,
                                st.last_stable_offset, st.log_start_offset)

    def _partition_error(self, st: PartitionState, code: int) -> None:
        if code == Error.OFFSET_OUT_OF_RANGE:
            if self.auto_offset_reset in ("earliest", "latest"):
                st.reset = self.auto_offset_reset
                return
            self.fatal = BrokerError(f"offset {st.position} is out of range", error_code=code,
                                     topic=st.topic, partition=st.partition)
            return
        error = Error.for_code(code)
        if error.invalid_metadata:
            self.cluster.metadata_stale = True
        # CORRUPT_MESSAGE is retriable in Kafka's table, but its consumer fails on it in a
        # fetch answer (FetchCollector): the same bytes would come back
        if error.retriable and error != Error.CORRUPT_MESSAGE:
            self._backoff(st)
            return
        self.fatal = BrokerError("fetch failed", error_code=code, topic=st.topic,
                                 partition=st.partition)
