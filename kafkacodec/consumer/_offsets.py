"""ListOffsets for the consumer core: the offsets of partitions at a timestamp (earliest,
latest), asked of each partition's leader without waiting.  poll() resets partitions with it
(never waiting for an answer); `start()` runs a lookup to its end with a callback (the
gateway's ListOffsets, Consumer.list_offsets_async); beginning_offsets(), end_offsets() and
assign() are that run to its end inside their deadline.  One request per leader; a partition whose leader is not known yet, or
whose answer is a retriable error (NOT_LEADER_OR_FOLLOWER, a dropped connection...), is asked
again after a backoff, with Metadata refreshed first when the error says it is stale."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafkacodec._ring import Response
from kafkacodec.consumer._cluster import BrokerError, Cluster, Deadline, Done, Request
from kafkacodec.errors import KafkaTimeoutError
from kafkacodec.protocol import control
from kafkacodec.protocol.api import ApiKey, Error

__all__ = ["OffsetLookup"]

TopicPartition = tuple[str, int]


class OffsetLookup:
    """The offsets of `partitions` at `timestamp` (control.EARLIEST_TIMESTAMP / LATEST_TIMESTAMP;
    the last stable offset for latest under read_committed).  `send()` asks the leaders of the
    partitions neither found nor asked nor backing off; answers fill `found` (and call
    `on_found(tp, offset)`); a non-retriable error is `error`.  `done` when every partition is
    found or an error came."""

    def __init__(self, cluster: Cluster, partitions: Iterable[TopicPartition], timestamp: int, *,
                 read_committed: bool, client_id: str, retry_backoff: float,
                 max_retry_backoff: float,
                 on_found: Callable[[TopicPartition, int], None] | None = None):
        self.cluster = cluster
        self.wanted = dict.fromkeys(partitions)          # ordered, unique
        self.timestamp = timestamp
        self.isolation = 1 if read_committed else 0
        self.client_id = client_id
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.on_found = on_found
        self.found: dict[TopicPartition, int] = {}
        self.error: BaseException | None = None
        self.asking: set[TopicPartition] = set()           # in a request now
        self.backoff: dict[TopicPartition, tuple[float, int]] = {}   # tp -> (until, failures)
        self.deadline: Deadline | None = None     # the call asking (None: the blocking one)

    def start(self, deadline: Deadline, on_done: Done) -> None:
        """Look every partition up without waiting (Metadata refreshed while a leader is
        unknown or stale, retriable errors asked again after a backoff): `on_done(found, None)`
        once each is found, else the error (a non-retriable answer, or KafkaTimeoutError at
        the deadline)."""
        self.deadline = deadline

        def finished(_: object, error: BaseException | None) -> None:
            error = error or self.error
            on_done(None if error is not None else self.found, error)

        self.cluster.pursue(lambda: self.done, self.send, {t for t, _ in self.wanted}, deadline,
                            finished)

    @property
    def done(self) -> bool:
        return self.error is not None or len(self.found) == len(self.wanted)

    def missing(self) -> list[TopicPartition]:
        return [tp for tp in self.wanted if tp not in self.found]

    def send(self) -> None:
        """Ask what can be asked now: one ListOffsets per leader."""
        if self.done:
            return
        now = time.monotonic()
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in self.missing():
            if tp in self.asking or self.backoff.get(tp, (0.0, 0))[0] > now:
                continue
            leader = self.cluster.leaders.get(tp)
            if leader is None:
                refused = self.cluster.topic_refused(*tp)
                if refused is not None:
                    self.error = refused
                    return
                self.cluster.metadata_stale = True      # the caller refreshes Metadata
                continue
            if self.cluster.available(leader, now):
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            self._ask(leader, tps)

    def _ask(self, leader: int, tps: list[TopicPartition]) -> None:
        grouped: dict[str, list[tuple[int, int]]] = {}
        for t, p in tps:
            grouped.setdefault(t, []).append((p, self.timestamp))
        message = control.list_offsets_request(grouped, isolation_level=self.isolation)
        decode = control.response_decoder(ApiKey.LIST_OFFSETS)
        self.asking.update(tps)

        def on_response(resp: Response, version: int) -> None:
            self.asking.difference_update(tps)
            try:
                answer = decode(resp, version)
            except Exception as exc:          # a damaged answer: the caller sees it
                self.error = exc
                return
            finally:
                resp.release()
            self._answered(leader, tps, answer)

        def on_error(exc: BaseException) -> None:
            self.asking.difference_update(tps)
            if isinstance(exc, (ConnectionError, TimeoutError, OSError)) and \
                    not isinstance(exc, KafkaTimeoutError):
                self._retry(tps)              # the connection failed: Metadata is stale already
            else:
                self.error = exc

        request = Request(ApiKey.LIST_OFFSETS, control.request_encoder(message, self.client_id),
                          on_response, on_error,
                          max_version=control.MAX_VERSIONS[ApiKey.LIST_OFFSETS], min_version=1,
                          timeout=self.cluster.request_timeout, deadline=self.deadline)
        try:
            self.cluster.send(leader, request)
        except (ConnectionError, KeyError):
            pass                              # on_error ran

    def _answered(self, leader: int, tps: list[TopicPartition], answer: Any) -> None:
        retry = []
        answered = set()
        for topic in answer.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                if tp not in self.wanted or tp in self.found:
                    continue
                answered.add(tp)
                code = part.error_code
                if code == 0:
                    self.found[tp] = part.offset
                    self.backoff.pop(tp, None)
                    if self.on_found is not None:
                        self.on_found(tp, part.offset)
                elif Error.for_code(code).retriable:
                    if Error.for_code(code).invalid_metadata:
                        self.cluster.metadata_stale = True
                    self.cluster.note(leader, f"ListOffsets answered {Error.name_of(code)} "
                                              f"({code}) for {tp[0]}-{tp[1]}",
                                      deadline=self.deadline)
                    retry.append(tp)
                else:
                    self.error = BrokerError("ListOffsets failed", error_code=code, topic=tp[0],
                                             partition=tp[1])
        self._retry(retry + [tp for tp in tps if tp not in answered and tp not in self.found])

    def _retry(self, tps: list[TopicPartition]) -> None:
        now = time.monotonic()
        for tp in tps:
            _, failures = self.backoff.get(tp, (0.0, 0))
            delay = min(self.retry_backoff * 2 ** failures, self.max_retry_backoff)
            self.backoff[tp] = (now + delay * (0.8 + 0.4 * random.random()), failures + 1)
