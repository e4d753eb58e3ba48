"""Committed offsets of consumer groups, without membership: FindCoordinator, then OffsetCommit
(generation -1, no member: a "simple" consumer's commit) or OffsetFetch to the group's
coordinator.  Any number of group ids share one Cluster's connections: the lookups and the
group requests go over its coordinator connections, one per broker (priority rings, KIP-81 3.b),
so N groups cost no more connections than one.  Each group's coordinator is remembered (the
`max_groups` used last), and looked up again when it moves (NOT_COORDINATOR and the other
retriable errors) or its connection fails.  Every call runs inside the deadline of the blocking
call it is part of (Cluster.deadline)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from kafkacodec.consumer._cluster import BrokerError, Cluster
from kafkacodec.errors import KafkaTimeoutError
from kafkacodec.protocol import control
from kafkacodec.protocol.api import ApiKey, Error

__all__ = ["GroupOffsets", "MAX_GROUPS"]

#: Coordinators remembered (least recently used dropped first): a lookup costs one request.
MAX_GROUPS = 1024

TopicPartition = tuple[str, int]


class GroupOffsets:
    """commit(group, offsets) and committed(group, partitions) over `cluster`."""

    def __init__(self, cluster: Cluster, *, client_id: str, retry_backoff: float,
                 max_retry_backoff: float, max_groups: int = MAX_GROUPS):
        self.cluster = cluster
        self.client_id = client_id
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.max_groups = max_groups
        self.coordinators: OrderedDict[str, int] = OrderedDict()     # group -> node id

    def _pause(self, attempt: int) -> None:
        """The backoff before another attempt (ends at the deadline: KafkaTimeoutError)."""
        self.cluster.wait(min(self.retry_backoff * 2 ** attempt, self.max_retry_backoff))

    def coordinator(self, group: str, refresh: bool = False) -> int:
        """The node id of `group`'s coordinator (FindCoordinator when not known or `refresh`)."""
        if not refresh and group in self.coordinators:
            self.coordinators.move_to_end(group)
            return self.coordinators[group]
        self.coordinators.pop(group, None)
        encode = control.request_encoder(control.find_coordinator_request(group), self.client_id)
        decode = control.response_decoder(ApiKey.FIND_COORDINATOR)
        attempt = 0
        while True:
            # over a priority connection, so a pool that the data rings hold whole does not
            # stall the lookup until the request times out
            answer = self.cluster.call(None, ApiKey.FIND_COORDINATOR, encode, decode,
                                       max_version=control.MAX_VERSIONS[ApiKey.FIND_COORDINATOR],
                                       purpose="coordinator")
            code = answer.error_code
            if code == 0:
                node = int(answer.node_id)
                self.cluster.brokers.setdefault(node, (answer.host, answer.port))
                self.coordinators[group] = node
                while len(self.coordinators) > self.max_groups:
                    self.coordinators.popitem(last=False)
                return node
            if not Error.for_code(code).retriable:
                raise BrokerError(f"FindCoordinator for group {group!r} failed", error_code=code)
            self.cluster.note(None, f"FindCoordinator answered {Error.name_of(code)} ({code}) for "
                                    f"group {group!r}")
            self._pause(attempt)
            attempt += 1

    def _call(self, group: str, api_key: int, message: Any, check: Any) -> Any:
        """A request to `group`'s coordinator, retried (coordinator looked up again) while it
        moves, loads or cannot be reached, until the deadline."""
        encode = control.request_encoder(message, self.client_id)
        decode = control.response_decoder(api_key)
        attempt = 0
        while True:
            node = self.coordinator(group, refresh=attempt > 0)
            try:
                answer = self.cluster.call(
                    node, api_key, encode, decode, max_version=control.MAX_VERSIONS[api_key],
                    min_version=1 if api_key == ApiKey.OFFSET_FETCH else 2,
                    purpose="coordinator", retries=1)
            except KafkaTimeoutError:
                raise
            except (ConnectionError, TimeoutError, OSError):
                self._pause(attempt)              # the failure is noted on the deadline
                attempt += 1
                continue
            code = check(answer)
            if code == 0:
                return answer
            if not Error.for_code(code).retriable:
                raise BrokerError(f"{ApiKey.name_of(api_key)} for group {group!r} failed",
                                  error_code=code)
            self.cluster.note(node, f"answered {Error.name_of(code)} ({code}) for group {group!r}",
                              "coordinator")
            self._pause(attempt)
            attempt += 1

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit `offsets` ((topic, partition) -> next offset to read) for `group`."""
        grouped: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in offsets.items():
            grouped.setdefault(t, []).append((p, o))
        if not grouped:
            return

        def check(answer: Any) -> int:
            for topic in answer.topics:
                for part in topic.partitions:
                    if part.error_code:
                        return int(part.error_code)
            return 0

        with self.cluster.deadline("commit"):
            self._call(group, ApiKey.OFFSET_COMMIT,
                       control.offset_commit_request(group, grouped), check)

    def committed(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """`group`'s committed offsets of `partitions` (None where nothing is committed)."""
        wanted = list(partitions)
        grouped: dict[str, list[int]] = {}
        for t, p in wanted:
            grouped.setdefault(t, []).append(p)

        def check(answer: Any) -> int:
            code = int(getattr(answer, "error_code", 0) or 0)
            if code:
                return code
            for topic in answer.topics:
                for part in topic.partitions:
                    if part.error_code and part.error_code != Error.UNKNOWN_TOPIC_OR_PARTITION:
                        return int(part.error_code)
            return 0

        with self.cluster.deadline("committed"):
            answer = self._call(group, ApiKey.OFFSET_FETCH,
                                control.offset_fetch_request(group, grouped), check)
        out: dict[TopicPartition, int | None] = {tp: None for tp in wanted}
        for topic in answer.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                if tp in out and part.error_code == 0 and part.committed_offset >= 0:
                    out[tp] = int(part.committed_offset)
        return out
