"""Committed offsets of consumer groups, without membership: FindCoordinator, then OffsetCommit
(generation -1, no member: a "simple" consumer's commit) or OffsetFetch to the group's
coordinator.  Any number of group ids share one Cluster's connections: the lookups and the
group requests go over its coordinator connections, one per broker (priority rings, KIP-81 3.b),
so N groups cost no more connections than one.  Each group's coordinator is remembered (the
`max_groups` used last), and looked up again when it moves (NOT_COORDINATOR and the other
retriable errors) or its connection fails.

`commit_async` and `committed_async` never wait: retries and backoffs are loop timers, the
result (or the error: BrokerError, KafkaTimeoutError at the deadline) goes to a callback, so
any number of them run at once on one loop (the gateway's).  `commit` and `committed` are
them run to their end inside the deadline of the blocking call they are part of
(Cluster.deadline)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafkacodec.consumer._cluster import BrokerError, Cluster, Completion, Deadline, Done
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
        #: (key type, key) -> node id: 0 a group, 1 a transactional id (FindCoordinator's)
        self.coordinators: OrderedDict[tuple[int, str], int] = OrderedDict()

    def _backoff(self, attempt: int) -> float:
        return float(min(self.retry_backoff * 2 ** attempt, self.max_retry_backoff))

    def coordinator_async(self, group: str, deadline: Deadline, on_done: Done, *,
                          refresh: bool = False, key_type: int = 0) -> None:
        """`on_done(node id, None)` with `group`'s coordinator (FindCoordinator when not known or
        `refresh`; its retriable errors retried after a backoff), or the error.  With
        key_type 1, `group` is a transactional id and this its transaction coordinator."""
        key = (key_type, group)
        if not refresh and key in self.coordinators:
            self.coordinators.move_to_end(key)
            on_done(self.coordinators[key], None)
            return
        self.coordinators.pop(key, None)
        cluster = self.cluster
        encode = control.request_encoder(control.find_coordinator_request(group, key_type), self.client_id)
        decode = control.response_decoder(ApiKey.FIND_COORDINATOR)
        end = Completion(cluster.loop, deadline, on_done)
        attempts = [0]

        def ask() -> None:
            # over a priority connection, so a pool that the data rings hold whole does not
            # stall the lookup until the request times out
            cluster.call_async(None, ApiKey.FIND_COORDINATOR, encode, decode, answered,
                               deadline=deadline,
                               max_version=control.MAX_VERSIONS[ApiKey.FIND_COORDINATOR],
                               purpose="coordinator")

        def answered(answer: Any, error: BaseException | None) -> None:
            if error is not None:
                end.fail(error)
                return
            code = answer.error_code
            if code == 0:
                node = int(answer.node_id)
                cluster.brokers.setdefault(node, (answer.host, answer.port))
                self.coordinators[key] = node
                while len(self.coordinators) > self.max_groups:
                    self.coordinators.popitem(last=False)
                end.ok(node)
                return
            if not Error.for_code(code).retriable:
                end.fail(BrokerError(f"FindCoordinator for group {group!r} failed", error_code=code))
                return
            cluster.note(None, f"FindCoordinator answered {Error.name_of(code)} ({code}) for "
                               f"group {group!r}", deadline=deadline)
            end.later(self._backoff(attempts[0]), ask)
            attempts[0] += 1

        end.guard(ask)

    def _call_async(self, group: str, api_key: int, message: Any, check: Callable[[Any], int],
                    deadline: Deadline, on_done: Done) -> None:
        """A request to `group`'s coordinator, retried (coordinator looked up again) while it
        moves, loads or cannot be reached, until the deadline; `on_done(answer, None)` once
        `check(answer)` is 0."""
        cluster = self.cluster
        encode = control.request_encoder(message, self.client_id)
        decode = control.response_decoder(api_key)
        end = Completion(cluster.loop, deadline, on_done)
        attempts = [0]

        def retry() -> None:
            end.later(self._backoff(attempts[0]), start)
            attempts[0] += 1

        def start() -> None:
            self.coordinator_async(group, deadline, found, refresh=attempts[0] > 0)

        def found(node: Any, error: BaseException | None) -> None:
            if error is not None:
                end.fail(error)
                return
            cluster.call_async(
                node, api_key, encode, decode, lambda answer, err: answered(node, answer, err),
                deadline=deadline, max_version=control.MAX_VERSIONS[api_key],
                min_version=1 if api_key == ApiKey.OFFSET_FETCH else 2, purpose="coordinator",
                retries=1)

        def answered(node: int, answer: Any, error: BaseException | None) -> None:
            if error is not None:
                if isinstance(error, KafkaTimeoutError) or \
                        not isinstance(error, (ConnectionError, TimeoutError, OSError)):
                    end.fail(error)
                else:
                    retry()                       # the failure is noted on the deadline
                return
            code = check(answer)
            if code == 0:
                end.ok(answer)
                return
            if not Error.for_code(code).retriable:
                end.fail(BrokerError(f"{ApiKey.name_of(api_key)} for group {group!r} failed",
                                     error_code=code))
                return
            cluster.note(node, f"answered {Error.name_of(code)} ({code}) for group {group!r}",
                         "coordinator", deadline)
            retry()

        end.guard(start)

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit `offsets` ((topic, partition) -> next offset to read) for `group`: commit_async()
        run to its end."""
        with self.cluster.deadline("commit") as deadline:
            self.cluster.complete(
                lambda done: self.commit_async(group, offsets, done, deadline=deadline), deadline)

    def commit_async(self, group: str, offsets: Mapping[TopicPartition, int], on_done: Done, *,
                     deadline: Deadline) -> None:
        """Commit `offsets` for `group` without waiting: `on_done(None, None)` once the
        coordinator acknowledged every partition, else the error."""
        grouped: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in offsets.items():
            grouped.setdefault(t, []).append((p, o))
        if not grouped:
            on_done(None, None)
            return

        def check(answer: Any) -> int:
            for topic in answer.topics:
                for part in topic.partitions:
                    if part.error_code:
                        return int(part.error_code)
            return 0

        self._call_async(group, ApiKey.OFFSET_COMMIT, control.offset_commit_request(group, grouped),
                         check, deadline, lambda _, error: on_done(None, error))

    def committed(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """`group`'s committed offsets of `partitions` (None where nothing is committed):
        committed_async() run to its end."""
        with self.cluster.deadline("committed") as deadline:
            found: dict[TopicPartition, int | None] = self.cluster.complete(
                lambda done: self.committed_async(group, partitions, done, deadline=deadline),
                deadline)
        return found

    def committed_async(self, group: str, partitions: Iterable[TopicPartition], on_done: Done, *,
                        deadline: Deadline) -> None:
        """`group`'s committed offsets of `partitions` without waiting: `on_done({(topic,
        partition): offset or None}, None)`, else the error."""
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

        def found(answer: Any, error: BaseException | None) -> None:
            if error is not None:
                on_done(None, error)
                return
            out: dict[TopicPartition, int | None] = {tp: None for tp in wanted}
            for topic in answer.topics:
                for part in topic.partitions:
                    tp = (topic.name, part.partition_index)
                    if tp in out and part.error_code == 0 and part.committed_offset >= 0:
                        out[tp] = int(part.committed_offset)
            on_done(out, None)

        self._call_async(group, ApiKey.OFFSET_FETCH, control.offset_fetch_request(group, grouped),
                         check, deadline, found)
