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
  InitProducerId is forwarded, so idempotent producers work; transactional ones too, their
  transactional id carried on and their coordinator's requests forwarded (transactions.py).
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
from collections import deque
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
from kafkacodec.protocol._produce_server import encode_produce_response
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
#: Produce v0-2 requests of one connection read while the ones before are converted and
#: forwarded (their answers keep their turn), and the message-set bytes they may hold: a
#: producer's in-flight requests (Kafka's max.in.flight.requests.per.connection default is 5)
#: overlap the cluster's append with the next up-conversion.
PIPELINED_REQUESTS = 5
PIPELINED_BYTES = 8 << 20
#: A request of small message sets is up-converted on the loop when nothing is on the converter
#: thread (its order kept): the hand-off to the thread and back costs more than converting
#: INLINE_UNCOMPRESSED_BYTES of uncompressed sets, or INLINE_BYTES of lz4 or snappy ones (which
#: inflate at most ~255x and ~21x).  gzip inflates a thousandfold: always on the thread.
INLINE_BYTES = 16 << 10
INLINE_UNCOMPRESSED_BYTES = 256 << 10


class _Job:
    """One Produce request on its way to the cluster, in arrival order (its connection's order
    is the order its partitions are appended in): waiting for the timestamp types of `waiting`."""

    __slots__ = ("req", "body", "responses", "admitted", "convert", "waiting", "types")

    def __init__(self, req: Request, body: dict[str, Any], responses: list[dict[str, Any]],
                 admitted: list[Part], convert: bool):
        self.req, self.body, self.responses, self.admitted = req, body, responses, admitted
        self.convert = convert                # magic 0/1 sets (Produce v0-2)
        self.waiting: set[str] = set()
        self.types: dict[str, TimestampType] = {}


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


def _inline(admitted: list[Part]) -> bool:
    """Whether a request's message sets are small enough to up-convert on the loop."""
    from kafkacodec import Compression, MemoryRecords

    size = sum(len(records) for _, _, records, _ in admitted)
    if size > INLINE_UNCOMPRESSED_BYTES:
        return False
    for _, _, records, _ in admitted:
        try:
            codecs = MemoryRecords(records).index(check_crc=False)["compression"]
        except KafkaCodecError:
            return False                     # refused by the converter, with its code
        if codecs.any() and (size > INLINE_BYTES or not (
                (codecs == Compression.NONE) | (codecs == Compression.SNAPPY) | (codecs == Compression.LZ4)).all()):
            return False
    return True


class ProduceForwarder:
    """Produce and InitProducerId requests forwarded to serve --upstream's cluster (the upstream
    view's Cluster, on the server's loop).  Handlers never wait: the answer is sent from the
    last leader's callback (dispatch.Answers).

    Up-conversion (a gzip message set of a few MB takes a second: inflate, check, deflate again)
    runs on one converter thread, not on the loop, which meanwhile serves every other
    connection; only a request of small uncompressed, lz4 or snappy sets (`_inline`) is
    converted on the loop, when nothing is on the thread.  Decompression and compression
    release the GIL.  A connection's Produce v0-2 requests are pipelined (up to
    PIPELINED_REQUESTS / PIPELINED_BYTES): the next one is read while the ones before are
    converted and forwarded, and every answer is sent in its turn (dispatch.Request.pipeline).  Requests go through one queue in arrival order (`jobs`: a
    topic's first set waits there for its timestamp type), then the one converter thread (or
    the loop, once the thread has nothing), then the loop: a connection's sets reach their
    leader in the order they came.  The thread is owned here: `close()` (the server's stop)
    ends it and drops conversions not yet started."""

    def __init__(self, server: Server):
        self.server = server
        self.cluster = server.view.consumer.cluster
        self.converter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkacodec-serve-upconvert")
        #: topic -> (monotonic time it expires, its message.timestamp.type)
        self.timestamp_types: dict[str, tuple[float, TimestampType]] = {}
        self.describing: set[str] = set()     # topics a DescribeConfigs is out for
        self.jobs: deque[_Job] = deque()       # requests not yet handed to the converter
        self.converting = 0                    # jobs on the converter thread, not yet sent

    def close(self) -> None:
        self.converter.shutdown(wait=False, cancel_futures=True)

    def produce(self, req: Request, body: dict[str, Any]) -> None:
        principal = req.conn.principal
        responses: list[dict[str, Any]] = []
        admitted: list[Part] = []
        transactional_id = body.get("transactional_id")
        refused = transactional_id is not None and not self.server.may_use_transactional_id(
            principal, transactional_id)
        for t in body["topic_data"]:
            name = t["name"]
            parts: list[dict[str, Any]] = []
            for p in t["partition_data"]:
                answer: dict[str, Any] = {"index": p["index"], "error_code": Error.NONE,
                                          "base_offset": -1, "log_append_time_ms": -1,
                                          "log_start_offset": -1, "record_errors": [],
                                          "error_message": None}
                parts.append(answer)
                answer["error_code"] = (Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if refused else
                                        self._admitted(principal, name, p["index"], p["records"]))
                if answer["error_code"] == Error.NONE:
                    admitted.append((name, p["index"], p["records"], answer))
            responses.append({"name": name, "partition_responses": parts})
        conn = req.conn
        convert = req.api_version in UP_CONVERTED_VERSIONS and bool(admitted)
        if not convert and not conn.reserved:
            # nothing of this connection's is on its way: sent now (no conversion)
            # (bytes: the records may be views of the request's block, which goes back to the pool)
            self._send(req, body, responses, [(t, i, bytes(r), a) for t, i, r, a in admitted])
            return
        size = sum(len(records) for _, _, records, _ in admitted)
        if convert and body["acks"] != 0 and conn.reserved < PIPELINED_REQUESTS and \
                conn.reserved_bytes + size <= PIPELINED_BYTES:
            req.pipeline(size)
        job = _Job(req, body, responses, [(t, i, bytes(r), a) for t, i, r, a in admitted], convert)
        self.jobs.append(job)
        if convert:
            self._learn_timestamp_types(job)     # (a failure may call back at once)
        self._start_ready()

    def _learn_timestamp_types(self, job: _Job) -> None:
        """The job's topics' timestamp types as known; DescribeConfigs for those not known
        (the job waits) or known too long (asked again; the job goes on with what was known)."""
        now = time.monotonic()
        ask = set()
        for topic in {topic for topic, *_ in job.admitted}:
            entry = self.timestamp_types.get(topic)
            if entry is None:
                job.waiting.add(topic)
            else:
                job.types[topic] = entry[1]
            if (entry is None or entry[0] <= now) and topic not in self.describing:
                ask.add(topic)
        if ask:
            self._describe(sorted(ask))

    def _describe(self, topics: list[str]) -> None:
        """DescribeConfigs of `topics`' timestamp type; the jobs waiting for them go on when it
        answers or fails.  A cluster without DescribeConfigs v1+, or a topic the gateway may not
        describe: CreateTime (what a topic is unless set otherwise), and a warning.  A topic it
        could not describe in time: the jobs' sets of it get REQUEST_TIMED_OUT."""
        self.describing.update(topics)

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
                found = dict.fromkeys(topics, TimestampType.CREATE_TIME)
            else:
                log.warning("DescribeConfigs of %s failed: %s", ", ".join(topics), error)
            expires = time.monotonic() + TOPIC_CONFIG_TTL_S
            for topic, kind in found.items():
                self.timestamp_types[topic] = (expires, kind)
            self.describing.difference_update(topics)
            for job in self.jobs:
                for topic in job.waiting.intersection(topics):
                    job.waiting.discard(topic)
                    if topic in found:
                        job.types[topic] = found[topic]
            self._start_ready()

        outgoing = control.describe_configs_request(topics, [TIMESTAMP_TYPE_CONFIG])
        self.cluster.call_async(None, ApiKey.DESCRIBE_CONFIGS, control.request_encoder(outgoing, "kafkacodec-serve"),
                                control.response_decoder(ApiKey.DESCRIBE_CONFIGS), described,
                                deadline=Deadline("describe_configs", self.cluster.request_timeout),
                                max_version=control.MAX_VERSIONS[ApiKey.DESCRIBE_CONFIGS], min_version=1)

    def _start_ready(self) -> None:
        """On the loop: the jobs at the head of the queue whose types are known, to the
        converter thread in order; a set of a topic whose type could not be learnt gets
        REQUEST_TIMED_OUT (the client retries)."""
        while self.jobs and not self.jobs[0].waiting:
            job = self.jobs.popleft()
            req = job.req
            if req.conn.closed:
                continue
            admitted = job.admitted
            if job.convert:
                for _, _, _, answer in (part for part in admitted if part[0] not in job.types):
                    answer["error_code"] = Error.REQUEST_TIMED_OUT
                admitted = [part for part in admitted if part[0] in job.types]

            types = job.types if job.convert else None
            if not self.converting and _inline(admitted):
                try:
                    self._send(req, job.body, job.responses, self._up_converted(req, admitted, types))
                except Exception:
                    log.exception("Produce v%d from %s failed; closing the connection",
                                  req.api_version, req.conn.peer)
                    req.conn.close("handler failed", FAILED)
                continue

            def send(done: Future[list[Part]], job: _Job = job) -> None:      # on the loop
                self.converting -= 1
                try:
                    self._send(job.req, job.body, job.responses, done.result())
                except Exception:
                    log.exception("Produce v%d from %s failed; closing the connection",
                                  job.req.api_version, job.req.conn.peer)
                    job.req.conn.close("handler failed", FAILED)

            def converted(done: Future[list[Part]], send: Any = send) -> None:   # on the converter thread
                if not done.cancelled():
                    self.server.loop.call_soon_threadsafe(lambda: send(done))

            try:
                self.converter.submit(self._up_converted, req, admitted, types).add_done_callback(converted)
            except RuntimeError:                 # shut down: the server is stopping
                req.conn.close("server stopped", SHUTDOWN)
            else:
                self.converting += 1

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
    def _up_converted(req: Request, admitted: list[Part],
                      timestamp_types: dict[str, TimestampType] | None) -> list[Part]:
        """On the converter thread: each message set as one v2 batch (None: the sets are v2
        batches already, sent as they came); a refused one gets its code in its answer
        (nobody else touches it meanwhile: the answer is sent once all are back)."""
        from kafkacodec import up_convert

        if timestamp_types is None:
            return admitted
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
                          body.get("transactional_id"), answers.expect(functools.partial(self._answered, led)))
        if body["acks"] == 0:
            req.done()                           # Kafka sends nothing for acks=0
            return
        answers.ready(lambda: req.respond(encode_produce_response(req.api_version, {
            "responses": responses, "throttle_time_ms": 0})))

    def _forward(self, leader: int, batches: list[Part], acks: int, timeout_ms: int,
                 client_id: str | None, transactional_id: str | None, on_done: Any) -> None:
        topics: dict[str, list[tuple[int, Any]]] = {}
        for topic, partition, batch, _ in batches:
            topics.setdefault(topic, []).append((partition, batch))

        def encode(version: int, correlation_id: int) -> Any:
            return encode_produce_request(list(topics.items()), api_version=version,
                                          correlation_id=correlation_id,
                                          client_id=client_id or "kafkacodec-serve",
                                          acks=acks or 1, timeout_ms=timeout_ms,
                                          transactional_id=transactional_id)

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
        """An idempotent producer's id, from the cluster (a transactional one's from its
        transaction coordinator: serve/transactions.py)."""
        version = req.api_version

        def reply(code: int, producer_id: int = -1, epoch: int = -1) -> None:
            req.respond(m.INIT_PRODUCER_ID_RESPONSE.encode(version, {
                "throttle_time_ms": 0, "error_code": code, "producer_id": producer_id,
                "producer_epoch": epoch}))

        if body["transactional_id"] is not None:     # from its transaction coordinator
            self.server.transactions.init_producer_id(req, body)
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
