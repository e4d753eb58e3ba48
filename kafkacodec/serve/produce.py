"""serve --upstream --produce: producers write to the cluster through the gateway, old ones too.

Kafka 4 closes the connection of a Produce v0-2 (KIP-896).  Here:
- Produce v0-2 (magic 0/1 message sets): each partition's set is up-converted as a Kafka 3.9
  broker appends it (up_convert: LogValidator's rules; the cluster assigns the offsets) and sent
  as one v2 batch with the newest Produce version the leader speaks.  A set Kafka 3.9 refused
  gets the code it answered: CORRUPT_MESSAGE for a checksum, INVALID_RECORD or INVALID_TIMESTAMP
  for records (up_convert's InvalidRecordError.error_code).  The rules follow the topic's
  `message.timestamp.type`, asked of the cluster (DescribeConfigs) before a topic's first set
  and again after TOPIC_CONFIG_TTL_S: a message carrying the LogAppendTime attribute is refused
  on a LogAppendTime topic (the batch sent is CreateTime all the same: the cluster stamps it,
  and refuses a batch that claims LogAppendTime).  The other topic rules (timestamp bounds, keys on a compacted topic)
  the cluster applies itself to the v2 batch, with the same codes.
- Produce v3+ passes through as it came (batches, producer ids and sequences untouched), and
  InitProducerId without a transactional id is forwarded, so idempotent producers work;
  transactional producers are refused (their coordinator is not bridged).
- The leader's answer is mapped back: error, base offset, log append time (v2+), log start
  offset (v5+), record errors and message (v8+).  acks=0 is sent to the cluster with acks=1
  (the cluster's answer is awaited by nobody: Kafka sends the client none).
- A leader that cannot be reached, or no answer in time: REQUEST_TIMED_OUT, which every client
  retries; a partition the cluster does not have: UNKNOWN_TOPIC_OR_PARTITION.

Off by default (serve is read-only: POLICY_VIOLATION); with an ACL file, a principal needs a
``Write:TOPIC`` rule (kafkacodec.net.acl).
"""

from __future__ import annotations

import functools
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kafkacodec._types import TimestampType
from kafkacodec.consumer._cluster import Deadline
from kafkacodec.errors import (CorruptRecordError, InvalidRecordError, KafkaCodecError,
                               KafkaTimeoutError, RecordTooLargeError, UnsupportedCompressionError,
                               UnsupportedVersionError)
from kafkacodec.net.connection import FAILED, SHUTDOWN
from kafkacodec.protocol import control
from kafkacodec.protocol import messages as m
from kafkacodec.protocol._produce import decode_produce_response, encode_produce_request
from kafkacodec.protocol.api import ApiKey, Error
from kafkacodec.serve.dispatch import Answers

if TYPE_CHECKING:
    from kafkacodec.serve.dispatch import Request
    from kafkacodec.serve.server import Server

__all__ = ["ProduceForwarder", "UP_CONVERTED_VERSIONS"]

log = logging.getLogger("kafkacodec.serve")

#: Produce versions whose message sets are magic 0/1 (Produce v3 brought v2 batches, KIP-98).
UP_CONVERTED_VERSIONS = range(0, 3)
#: One partition of a Produce request: (topic, partition, its records or the batch to send, its answer).
Part = tuple[str, int, Any, dict[str, Any]]
#: The Produce versions the gateway sends the cluster (its writer's range).
FORWARD_VERSIONS = (3, 11)
#: How long a topic's timestamp type, as the cluster described it, is used before asking again.
TOPIC_CONFIG_TTL_S = 60.0
#: The topic config up-conversion follows (LogValidator.validateTimestamp).
TIMESTAMP_TYPE_CONFIG = "message.timestamp.type"


def refusal_code(error: KafkaCodecError) -> int:
    """Kafka 3.9's answer to a message set up_convert refused."""
    if isinstance(error, InvalidRecordError):
        return error.error_code if error.error_code >= 0 else Error.UNKNOWN_SERVER_ERROR
    if isinstance(error, RecordTooLargeError):
        return Error.MESSAGE_TOO_LARGE
    if isinstance(error, UnsupportedCompressionError):
        return Error.UNSUPPORTED_COMPRESSION_TYPE
    if isinstance(error, CorruptRecordError):
        return Error.CORRUPT_MESSAGE
    return Error.INVALID_RECORD                 # e.g. a v2 batch in a Produce v0-2


class ProduceForwarder:
    """Produce and InitProducerId requests forwarded to serve --upstream's cluster (the upstream
    view's Cluster, on the server's loop).  Handlers never wait: the answer is sent from the
    last leader's callback (dispatch.Answers).

    Up-conversion (a gzip message set of a few MB takes a second: inflate, check, deflate again)
    runs on one converter thread, never on the loop, which meanwhile serves every other
    connection; the connection itself is muted until its answer is sent (Kafka's rule), so its
    requests stay in order.  Decompression and compression release the GIL.  The thread is
    owned here: `close()` (the server's stop) ends it and drops conversions not yet started."""

    def __init__(self, server: Server):
        self.server = server
        self.cluster = server.view.consumer.cluster
        self.converter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkacodec-serve-upconvert")
        #: topic -> (monotonic time it expires, its message.timestamp.type)
        self.timestamp_types: dict[str, tuple[float, TimestampType]] = {}

    def close(self) -> None:
        self.converter.shutdown(wait=False, cancel_futures=True)

    def produce(self, req: Request, body: dict[str, Any]) -> None:
        principal = req.conn.principal
        responses: list[dict[str, Any]] = []
        admitted: list[Part] = []
        for t in body["topic_data"]:
            name = t["name"]
            parts: list[dict[str, Any]] = []
            for p in t["partition_data"]:
                answer: dict[str, Any] = {"index": p["index"], "error_code": Error.NONE,
                                          "base_offset": -1, "log_append_time_ms": -1,
                                          "log_start_offset": -1, "record_errors": [],
                                          "error_message": None}
                parts.append(answer)
                answer["error_code"] = self._admitted(principal, name, p["index"], p["records"])
                if answer["error_code"] == Error.NONE:
                    admitted.append((name, p["index"], p["records"], answer))
            responses.append({"name": name, "partition_responses": parts})
        if req.api_version not in UP_CONVERTED_VERSIONS or not admitted:
            # the request's buffer goes back to the pool
            self._send(req, body, responses, [(t, i, bytes(r), a) for t, i, r, a in admitted])
            return
        self._with_timestamp_types({topic for topic, *_ in admitted}, functools.partial(
            self._convert, req, body, responses, admitted))

    def _with_timestamp_types(self, topics: set[str],
                              then: Any) -> None:
        """`then({topic: its timestamp type})` on the loop, once the cluster has described the
        topics not known (or known too long); a topic it could not describe in time is left out.
        A cluster without DescribeConfigs v1+, or a topic the gateway may not describe: CreateTime
        (what a topic is unless set otherwise), and a warning."""
        now = time.monotonic()
        known = {t: entry[1] for t in topics if (entry := self.timestamp_types.get(t)) and entry[0] > now}
        missing = sorted(topics - known.keys())
        if not missing:
            then(known)
            return

        def described(value: Any, error: BaseException | None) -> None:
            found: dict[str, TimestampType] = {}
            if error is None:
                for result in value.results:
                    if result.error_code != Error.NONE:
                        log.warning("the cluster does not describe topic %s (%s): its messages are "
                                    "up-converted as CreateTime ones", result.resource_name,
                                    result.error_message or Error.name_of(result.error_code))
                    setting = next((c.value for c in result.configs if c.name == TIMESTAMP_TYPE_CONFIG), None)
                    found[result.resource_name] = (TimestampType.LOG_APPEND_TIME if setting == "LogAppendTime"
                                                   else TimestampType.CREATE_TIME)
            elif isinstance(error, UnsupportedVersionError):
                log.warning("the cluster has no DescribeConfigs v1+: messages are up-converted as "
                            "CreateTime ones")
                found = dict.fromkeys(missing, TimestampType.CREATE_TIME)
            else:
                log.warning("DescribeConfigs of %s failed: %s", ", ".join(missing), error)
            expires = time.monotonic() + TOPIC_CONFIG_TTL_S
            for topic, kind in found.items():
                self.timestamp_types[topic] = (expires, kind)
            then({**known, **{t: found[t] for t in missing if t in found}})

        outgoing = control.describe_configs_request(missing, [TIMESTAMP_TYPE_CONFIG])
        self.cluster.call_async(None, ApiKey.DESCRIBE_CONFIGS, control.request_encoder(outgoing, "kafkacodec-serve"),
                                control.response_decoder(ApiKey.DESCRIBE_CONFIGS), described,
                                deadline=Deadline("describe_configs", self.cluster.request_timeout),
                                max_version=control.MAX_VERSIONS[ApiKey.DESCRIBE_CONFIGS], min_version=1)

    def _convert(self, req: Request, body: dict[str, Any], responses: list[dict[str, Any]],
                 admitted: list[Part], timestamp_types: dict[str, TimestampType]) -> None:
        """On the loop: the sets up-converted on the converter thread, then sent; a set of a
        topic whose timestamp type is not known gets REQUEST_TIMED_OUT (the client retries)."""
        if req.conn.closed:
            return
        for _, _, _, answer in (part for part in admitted if part[0] not in timestamp_types):
            answer["error_code"] = Error.REQUEST_TIMED_OUT
        admitted = [part for part in admitted if part[0] in timestamp_types]

        def send(done: Future[list[Part]]) -> None:          # on the loop
            try:
                self._send(req, body, responses, done.result())
            except Exception:
                log.exception("Produce v%d from %s failed; closing the connection", req.api_version,
                              req.conn.peer)
                req.conn.close("handler failed", FAILED)

        def converted(done: Future[list[Part]]) -> None:     # on the converter thread
            if not done.cancelled():
                self.server.loop.call_soon_threadsafe(lambda: send(done))

        try:
            self.converter.submit(self._up_converted, req, admitted, timestamp_types).add_done_callback(converted)
        except RuntimeError:                     # shut down: the server is stopping
            req.conn.close("server stopped", SHUTDOWN)

    def _admitted(self, principal: str, topic: str, partition: int, records: Any) -> int:
        """Error.NONE, or the code a partition's records are refused with before conversion."""
        if not self.server.may_write(principal, topic):
            return Error.TOPIC_AUTHORIZATION_FAILED
        if self.server.view.partition(topic, partition) is None:
            self.server.view.refresh()           # a topic created since: known on the retry
            return Error.UNKNOWN_TOPIC_OR_PARTITION
        if records is None or not len(records):
            return Error.INVALID_RECORD
        return Error.NONE

    @staticmethod
    def _up_converted(req: Request, admitted: list[Part], timestamp_types: dict[str, TimestampType]) -> list[Part]:
        """On the converter thread: each message set as one v2 batch; a refused one gets its
        code in its answer (nobody else touches it meanwhile: the connection is muted)."""
        from kafkacodec import up_convert

        out = []
        for topic, partition, records, answer in admitted:
            try:
                if timestamp_types[topic] == TimestampType.LOG_APPEND_TIME:
                    # Kafka 3.9's rules for the topic (a LogAppendTime attribute refused, no time
                    # bounds); the batch itself goes as CreateTime, the cluster stamps it (it
                    # refuses a v2 batch that claims LogAppendTime as it refuses the message)
                    up_convert(records, timestamp_type=TimestampType.LOG_APPEND_TIME)
                out.append((topic, partition, up_convert(records).records, answer))
            except KafkaCodecError as exc:
                log.info("Produce v%d to %s-%d from %s refused: %s", req.api_version, topic,
                         partition, req.conn.peer, exc)
                answer["error_code"] = refusal_code(exc)
        return out

    def _send(self, req: Request, body: dict[str, Any], responses: list[dict[str, Any]], batches: list[Part]) -> None:
        """On the loop: each batch to its partition's leader; the answer once all have come."""
        answers = Answers(req)
        by_leader: dict[int, list[Part]] = {}
        for topic, partition, batch, answer in batches:
            leader = self.cluster.leaders.get((topic, partition))
            if leader is None:                   # the client asks Metadata again and retries
                self.cluster.metadata_stale = True
                answer["error_code"] = Error.NOT_LEADER_OR_FOLLOWER
                continue
            by_leader.setdefault(leader, []).append((topic, partition, batch, answer))
        for leader, led in by_leader.items():
            self._forward(leader, led, body["acks"], body["timeout_ms"], req.client_id,
                          answers.expect(functools.partial(self._answered, led)))
        if body["acks"] == 0:
            req.done()                           # Kafka sends nothing for acks=0
            return
        answers.ready(lambda: req.respond(m.PRODUCE_RESPONSE.encode(req.api_version, {
            "responses": responses, "throttle_time_ms": 0})))

    def _forward(self, leader: int, batches: list[Part], acks: int,
                 timeout_ms: int, client_id: str | None, on_done: Any) -> None:
        topics: dict[str, list[tuple[int, Any]]] = {}
        for topic, partition, batch, _ in batches:
            topics.setdefault(topic, []).append((partition, batch))

        def encode(version: int, correlation_id: int) -> Any:
            return encode_produce_request(list(topics.items()), api_version=version,
                                          correlation_id=correlation_id,
                                          client_id=client_id or "kafkacodec-serve",
                                          acks=acks or 1, timeout_ms=timeout_ms)

        def decode(resp: Any, version: int) -> dict[tuple[str, int], Any]:
            decoded = decode_produce_response(resp.payload, version)
            return {(t.name, p.partition_index): p for t in decoded.responses
                    for p in t.partition_responses}

        wait = max(timeout_ms, 0) / 1000 + self.cluster.request_timeout
        self.cluster.call_async(leader, ApiKey.PRODUCE, encode, decode, on_done,
                                deadline=Deadline("produce", wait), min_version=FORWARD_VERSIONS[0],
                                max_version=FORWARD_VERSIONS[1], retries=0)

    def _answered(self, batches: list[Part], value: Any,
                  error: BaseException | None) -> None:
        for topic, partition, _, answer in batches:
            got = None if value is None else value.get((topic, partition))
            if got is None:
                if error is not None and not isinstance(error, KafkaTimeoutError):
                    log.warning("Produce to %s-%d: the cluster failed: %s", topic, partition, error)
                self.cluster.metadata_stale = True
                answer["error_code"] = Error.REQUEST_TIMED_OUT
                continue
            answer.update(error_code=got.error_code, base_offset=got.base_offset,
                          log_append_time_ms=got.log_append_time_ms,
                          log_start_offset=got.log_start_offset, error_message=got.error_message,
                          record_errors=[{"batch_index": i, "batch_index_error_message": text}
                                         for i, text in got.record_errors])
            if Error.for_code(got.error_code).invalid_metadata:
                self.cluster.metadata_stale = True

    def init_producer_id(self, req: Request, body: dict[str, Any]) -> None:
        """An idempotent producer's id, from the cluster; a transactional one is refused."""
        version = req.api_version

        def reply(code: int, producer_id: int = -1, epoch: int = -1) -> None:
            req.respond(m.INIT_PRODUCER_ID_RESPONSE.encode(version, {
                "throttle_time_ms": 0, "error_code": code, "producer_id": producer_id,
                "producer_epoch": epoch}))

        if body["transactional_id"] is not None:
            reply(Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return

        def answered(value: Any, error: BaseException | None) -> None:
            if error is not None:
                reply(Error.COORDINATOR_NOT_AVAILABLE)
            else:
                reply(value.error_code, value.producer_id, value.producer_epoch)

        outgoing = control.Outgoing(m.INIT_PRODUCER_ID_REQUEST, {
            "transactional_id": None, "transaction_timeout_ms": body["transaction_timeout_ms"],
            "producer_id": body.get("producer_id", -1), "producer_epoch": body.get("producer_epoch", -1)})
        self.cluster.call_async(None, ApiKey.INIT_PRODUCER_ID,
                                control.request_encoder(outgoing, req.client_id),
                                control.response_decoder(ApiKey.INIT_PRODUCER_ID), answered,
                                deadline=Deadline("init_producer_id", self.cluster.request_timeout),
                                max_version=control.MAX_VERSIONS[ApiKey.INIT_PRODUCER_ID])
