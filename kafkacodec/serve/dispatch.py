"""Request dispatch: the request header, the versions served, and the APIs that need no state
of their own (ApiVersions, Metadata, ListOffsets, and the writes a read-only server refuses).

Kafka's rules for what cannot be served (spec server.md): an unknown API key, a version outside
the range served (except ApiVersions), a header or body that does not parse: the connection is
closed.  An ApiVersions request of a newer version than served is answered in the v0 layout
with UNSUPPORTED_VERSION and the ranges, so the client retries with one it can use (KIP-511).

Writes (Produce, CreateTopics, DeleteTopics, DeleteRecords, InitProducerId, CreatePartitions)
are answered with POLICY_VIOLATION (44), with the message "kafkacodec serve is read-only"
where the version has a message field; a Produce with acks=0 gets no response, as Kafka.

Answers that need the view or the offset store (ListOffsets here, OffsetFetch and OffsetCommit
in groups.py) are built when every part has called back (`Answers`): at once over log
directories, when the cluster answered under `serve --upstream`.  A handler never waits.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkacodec.net.connection import AUTH_FAILED, FAILED, request_done
from kafkacodec.net.pieces import BytesPiece
from kafkacodec.protocol import messages as m
from kafkacodec.protocol._schema import ZERO_UUID
from kafkacodec.protocol.api import ApiKey, Error

if TYPE_CHECKING:
    from kafkacodec.net.connection import Connection
    from kafkacodec.serve.server import Server

__all__ = ["API_RANGES", "Request", "Dispatcher", "READ_ONLY", "Answers"]

log = logging.getLogger("kafkacodec.serve")

READ_ONLY = "kafkacodec serve is read-only"

#: api key -> (min, max) version served (Kafka 3.9's ranges; Fetch in _fetch_server.pyx).
API_RANGES: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 11), ApiKey.FETCH: (0, 17), ApiKey.LIST_OFFSETS: (0, 9),
    ApiKey.METADATA: (0, 12), ApiKey.OFFSET_COMMIT: (0, 9), ApiKey.OFFSET_FETCH: (0, 9),
    ApiKey.FIND_COORDINATOR: (0, 5), ApiKey.JOIN_GROUP: (0, 9), ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5), ApiKey.SYNC_GROUP: (0, 5), ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7), ApiKey.DELETE_TOPICS: (0, 6), ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5), ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3), ApiKey.ADD_OFFSETS_TO_TXN: (0, 4), ApiKey.END_TXN: (0, 4),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
}


@dataclass
class Request:
    """One request being handled: answer it with `respond(body)` (a response body, framed
    here) or `send(pieces)`, or `done()` when it gets no response."""
    conn: Connection
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    received: float
    slot: Any = None                     # pipelined: where its answer goes in the queue

    @property
    def flexible(self) -> bool:
        return m.is_flexible(self.api_key, self.api_version)

    def respond(self, body: bytes | bytearray) -> None:
        """Answer with a response body (framed here, with the response header of the api and
        version: messages.response_header_version)."""
        self.send([BytesPiece(m.frame_response(self.api_key, self.api_version,
                                               self.correlation_id, body))])

    def send(self, pieces: list[Any]) -> None:
        """Answer with framed pieces; the next request is read once they are written (Kafka
        mutes a connection from a complete request until its response is sent)."""
        conn = self.conn
        if self.slot is not None:
            slot, self.slot = self.slot, None
            conn.fill(slot, pieces)
            return
        conn.send(pieces, on_sent=lambda: request_done(conn))

    def done(self) -> None:
        if self.slot is not None:                 # answered by nothing after all
            slot, self.slot = self.slot, None
            self.conn.fill(slot, [])
            return
        request_done(self.conn)

    def pipeline(self, size: int = 0) -> None:
        """Read the next request now and answer this one later, in its turn: its answer's
        place is kept in the connection's queue (a client matches answers in request order).
        For requests whose handler keeps their order itself (serve --upstream's Produce);
        `size`, the bytes it holds meanwhile, counts in conn.reserved_bytes."""
        self.slot = self.conn.reserve(size)
        request_done(self.conn)


class Answers:
    """The parts of one request's answer that come by callback: `expect(fill)` gives the
    callback of one part (`fill(value, error)` files it); `ready(build)`, after the last
    expect(), runs `build()` (the one place the answer is made and sent) once every part has
    come: at once when all came already (log directories), else from the last callback (serve
    --upstream).  A fill or build that raises closes the request's connection, as a failed
    handler does."""

    def __init__(self, req: Request):
        self.req = req
        self.waiting = 0
        self.build: Callable[[], None] | None = None

    def expect(self, fill: Callable[[Any, BaseException | None], None]
               ) -> Callable[[Any, BaseException | None], None]:
        self.waiting += 1

        def arrived(value: Any, error: BaseException | None) -> None:
            self._guarded(fill, value, error)
            self.waiting -= 1
            self._maybe_build()

        return arrived

    def ready(self, build: Callable[[], None]) -> None:
        self.build = build
        self._maybe_build()

    def _maybe_build(self) -> None:
        if self.waiting == 0 and self.build is not None:
            build, self.build = self.build, None
            self._guarded(build)

    def _guarded(self, step: Callable[..., None], *args: Any) -> None:
        try:
            step(*args)
        except Exception:
            req = self.req
            log.exception("api key %d v%d from %s failed; closing the connection", req.api_key,
                          req.api_version, req.conn.peer)
            req.conn.close("handler failed", FAILED)


class Dispatcher:
    """Routes decoded requests to their handlers."""

    def __init__(self, server: Server):
        self.server = server

    # --- ApiVersions -----------------------------------------------------------------------
    def api_versions(self, req: Request, body: dict[str, Any]) -> None:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(API_RANGES.items())]
        req.respond(m.API_VERSIONS_RESPONSE.encode(req.api_version, {
            "error_code": Error.NONE, "api_keys": keys, "throttle_time_ms": 0}))

    def api_versions_fallback(self, req: Request) -> None:
        """A newer ApiVersions than served: the v0 layout, UNSUPPORTED_VERSION, the ranges."""
        keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(API_RANGES.items())]
        body = m.API_VERSIONS_RESPONSE.encode(0, {"error_code": Error.UNSUPPORTED_VERSION,
                                                  "api_keys": keys})
        req.respond(body)

    # --- Metadata --------------------------------------------------------------------------
    def metadata(self, req: Request, body: dict[str, Any]) -> None:
        server = self.server
        view = server.view
        view.refresh()
        version = req.api_version
        wanted = body["topics"]
        principal = req.conn.principal
        if wanted is None or (version == 0 and not wanted):
            # every topic the principal may describe (Kafka leaves the others out)
            entries: list[tuple[str | None, uuid.UUID | None]] = [
                (name, None) for name in sorted(view.topics) if server.may_read(principal, name)]
        else:
            # Kafka answers the set of topics asked for: a name (or id) repeated, once
            entries = list(dict.fromkeys(
                (t["name"], t["topic_id"] if t["topic_id"] != ZERO_UUID else None) for t in wanted))
        host, port = req.conn.listener.advertised if req.conn.listener else server.advertised
        topics: list[dict[str, Any]] = []
        for name, topic_id in entries:
            topic = view.topics.get(name) if name is not None else view.by_id.get(topic_id)
            if not server.may_read(principal, topic.name if topic is not None else name):
                # Kafka: TOPIC_AUTHORIZATION_FAILED, whether or not the topic exists
                topics.append({"error_code": Error.TOPIC_AUTHORIZATION_FAILED, "name": name,
                               "topic_id": topic_id or ZERO_UUID, "partitions": []})
                continue
            if topic is None:
                missing = Error.UNKNOWN_TOPIC_ID if name is None else Error.UNKNOWN_TOPIC_OR_PARTITION
                topics.append({"error_code": missing, "name": name,
                               "topic_id": topic_id or ZERO_UUID, "partitions": []})
                continue
            node = server.config.node_id
            topics.append({
                "error_code": Error.NONE, "name": topic.name, "topic_id": topic.topic_id,
                "is_internal": topic.is_internal,
                "partitions": [{"error_code": Error.NONE, "partition_index": p, "leader_id": node,
                                "leader_epoch": -1, "replica_nodes": [node], "isr_nodes": [node],
                                "offline_replicas": []}
                               for p in sorted(topic.partitions)]})
        req.respond(m.METADATA_RESPONSE.encode(version, {
            "brokers": [{"node_id": server.config.node_id, "host": host, "port": port, "rack": None}],
            "cluster_id": server.cluster_id, "controller_id": server.config.node_id, "topics": topics}))

    # --- ListOffsets -----------------------------------------------------------------------
    def list_offsets(self, req: Request, body: dict[str, Any]) -> None:
        version = req.api_version
        committed = body["isolation_level"] == 1
        answers = Answers(req)
        topics = []
        for t in body["topics"]:
            parts = []
            allowed = self.server.may_read(req.conn.principal, t["name"])
            for p in t["partitions"]:
                answer: dict[str, Any] = {"partition_index": p["partition_index"],
                                          "error_code": Error.NONE, "old_style_offsets": [],
                                          "timestamp": -1, "offset": -1, "leader_epoch": -1}
                part = self.server.view.partition(t["name"], p["partition_index"]) if allowed else None
                if not allowed:
                    answer["error_code"] = Error.TOPIC_AUTHORIZATION_FAILED
                elif part is None:
                    answer["error_code"] = Error.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    part.list_offset(p["timestamp"], committed, answers.expect(
                        functools.partial(self._offset_found, answer, version)))
                parts.append(answer)
            topics.append({"name": t["name"], "partitions": parts})
        answers.ready(lambda: req.respond(m.LIST_OFFSETS_RESPONSE.encode(version, {"topics": topics})))

    @staticmethod
    def _offset_found(answer: dict[str, Any], version: int, found: tuple[int, int] | None,
                      error: BaseException | None) -> None:
        """One partition's ListOffsets answer: its (timestamp, offset), or the storage (or
        serve --upstream's cluster) failing."""
        if error is not None:
            log.warning("ListOffsets of partition %d: %s", answer["partition_index"], error)
            answer["error_code"] = (Error.KAFKA_STORAGE_ERROR if version >= 1
                                    else Error.NOT_LEADER_OR_FOLLOWER)
        elif found is not None:
            answer["timestamp"], answer["offset"] = found
            answer["old_style_offsets"] = [found[1]]

    # --- writes ------------------------------------------------------------------------------
    # --- SASL (the listener's ServerAuthenticator decides; kafkacodec.net.authentication) --------
    def sasl_handshake(self, req: Request, body: dict[str, Any]) -> None:
        auth = req.conn.auth
        if auth is None:                          # Kafka: a SASL request on a listener without SASL
            req.conn.close("SaslHandshake on a listener without SASL", AUTH_FAILED)
            return
        answer = auth.handshake(req.api_version, body["mechanism"])
        req.respond(m.SASL_HANDSHAKE_RESPONSE.encode(req.api_version, answer))

    def sasl_authenticate(self, req: Request, body: dict[str, Any]) -> None:
        auth = req.conn.auth
        if auth is None or auth.raw:
            req.conn.close("SaslAuthenticate without a SaslHandshake v1", AUTH_FAILED)
            return
        challenge, failure = auth.step(body["auth_bytes"] or b"", req.api_version)
        answer = {"error_code": Error.NONE, "error_message": None, "auth_bytes": challenge or b"",
                  "session_lifetime_ms": auth.session_lifetime_ms()}
        if failure is not None:
            answer.update(error_code=Error.SASL_AUTHENTICATION_FAILED, error_message=failure,
                          auth_bytes=b"", session_lifetime_ms=0)
            auth.fail(failure, [BytesPiece(m.frame_response(
                req.api_key, req.api_version, req.correlation_id,
                m.SASL_AUTHENTICATE_RESPONSE.encode(req.api_version, answer)))])
            return
        req.respond(m.SASL_AUTHENTICATE_RESPONSE.encode(req.api_version, answer))

    def refuse_write(self, req: Request, body: dict[str, Any]) -> None:
        key, version = req.api_key, req.api_version
        if key == ApiKey.PRODUCE:
            if body["acks"] == 0:
                req.done()                            # Kafka sends nothing for acks=0
                return
            answer: dict[str, Any] = {"responses": [
                {"name": t["name"], "partition_responses": [
                    {"index": p["index"], "error_code": Error.POLICY_VIOLATION, "base_offset": -1,
                     "error_message": READ_ONLY} for p in t["partition_data"]]}
                for t in body["topic_data"]]}
        elif key == ApiKey.CREATE_TOPICS:
            answer = {"topics": [{"name": t["name"], "error_code": Error.POLICY_VIOLATION,
                                  "error_message": READ_ONLY} for t in body["topics"]]}
        elif key == ApiKey.DELETE_TOPICS:
            names = [t["name"] for t in body["topics"]] if version >= 6 else body["topic_names"]
            answer = {"responses": [{"name": n, "error_code": Error.POLICY_VIOLATION,
                                     "error_message": READ_ONLY} for n in names]}
        elif key == ApiKey.DELETE_RECORDS:
            answer = {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "low_watermark": -1,
                 "error_code": Error.POLICY_VIOLATION} for p in t["partitions"]]} for t in body["topics"]]}
        elif key == ApiKey.INIT_PRODUCER_ID:
            answer = {"error_code": Error.POLICY_VIOLATION, "producer_id": -1, "producer_epoch": -1}
        else:                                         # CreatePartitions
            answer = {"results": [{"name": t["name"], "error_code": Error.POLICY_VIOLATION,
                                   "error_message": READ_ONLY} for t in body["topics"]]}
        req.respond(m.RESPONSES[key].encode(version, answer))
