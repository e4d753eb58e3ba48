"""serve --upstream --produce: transactional producers through the gateway (KIP-98).

A transactional producer asks for its transaction coordinator (FindCoordinator, key type 1) and
the gateway names itself, as it names itself every partition's leader and every group's
coordinator.  What the producer then sends its coordinator goes on to the cluster's:
InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the
transaction coordinator of the id, TxnOffsetCommit to the coordinator of the group on the
cluster (where the gateway keeps the offsets of the groups it coordinates).  Its Produce
requests carry the transactional id on (produce.py): a Kafka 4 leader checks with the
coordinator that the partition was added (KIP-890).

Each request goes in the client's own version (the gateway serves Kafka 3.9's ranges, all of
which Kafka 4 answers) and the cluster's answer comes back as it is.  A coordinator that moved
(NOT_COORDINATOR and the other coordinator errors) is looked up again at the client's retry; a
cluster that does not answer in time gives COORDINATOR_NOT_AVAILABLE, which clients retry.

TxnOffsetCommit v3+ names the consumer's member and generation (KIP-447): the group is the
gateway's (serve/groups.py), so they are checked here as Kafka's coordinator checks them, and the
commit goes to the cluster without them, as the gateway's own commits do.

Authorization (an ACL file): a ``TransactionalId:ID`` rule for the id (Kafka's
TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise), ``Write:`` rules for the partitions added,
a ``Group:`` rule for the group whose offsets the transaction commits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafkacodec.consumer._cluster import Deadline
from kafkacodec.errors import KafkaTimeoutError
from kafkacodec.protocol import control
from kafkacodec.protocol import messages as m
from kafkacodec.protocol.api import ApiKey, Error

if TYPE_CHECKING:
    from kafkacodec.serve.dispatch import Request
    from kafkacodec.serve.server import Server

__all__ = ["TransactionForwarder", "TRANSACTION_APIS"]

log = logging.getLogger("kafkacodec.serve")

#: The transaction coordinator's APIs the gateway forwards (and a read-only server refuses).
TRANSACTION_APIS = (ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN,
                    ApiKey.TXN_OFFSET_COMMIT)
#: FindCoordinator's key types.
GROUP_KEY, TRANSACTION_KEY = 0, 1
#: A coordinator answering these moved or is not ready: looked up again next time.
_MOVED = (Error.NOT_COORDINATOR, Error.COORDINATOR_NOT_AVAILABLE, Error.COORDINATOR_LOAD_IN_PROGRESS)


def refusal(api_key: int, version: int, body: dict[str, Any], code: int) -> bytes:
    """The answer to a transaction request refused with `code` (every partition, where the
    answer has partitions)."""
    if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
        answer: dict[str, Any] = {"results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": code} for p in t["partitions"]]}
            for t in body["v3_and_below_topics"]]}
    elif api_key == ApiKey.TXN_OFFSET_COMMIT:
        answer = {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]]}
            for t in body["topics"]]}
    elif api_key == ApiKey.INIT_PRODUCER_ID:
        answer = {"error_code": code, "producer_id": -1, "producer_epoch": -1}
    else:                                        # AddOffsetsToTxn, EndTxn
        answer = {"error_code": code}
    return bytes(m.RESPONSES[api_key].encode(version, {"throttle_time_ms": 0, **answer}))


def refuse(req: Request, body: dict[str, Any]) -> None:
    """A read-only server's answer: transactions are writes."""
    req.respond(refusal(req.api_key, req.api_version, body, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))


class TransactionForwarder:
    """The transaction requests of serve --upstream --produce, forwarded to the cluster's
    coordinators over the upstream view's Cluster (its coordinator connections), on the loop.
    Handlers never wait: the answer is sent from the cluster's callback."""

    def __init__(self, server: Server):
        self.server = server
        self.cluster = server.view.consumer.cluster
        self.coordinators = server.view.consumer.groups       # GroupOffsets: the lookups, cached

    def init_producer_id(self, req: Request, body: dict[str, Any]) -> None:
        self._forward(req, body, TRANSACTION_KEY, body["transactional_id"])

    def add_partitions(self, req: Request, body: dict[str, Any]) -> None:
        if any(not self.server.may_write(req.conn.principal, t["name"]) for t in body["v3_and_below_topics"]):
            # Kafka: the topics it may not write TOPIC_AUTHORIZATION_FAILED, the rest OPERATION_NOT_ATTEMPTED
            answer = m.ADD_PARTITIONS_TO_TXN_RESPONSE.encode(req.api_version, {
                "throttle_time_ms": 0, "results_by_topic_v3_and_below": [
                    {"name": t["name"], "results_by_partition": [
                        {"partition_index": p, "partition_error_code":
                         Error.OPERATION_NOT_ATTEMPTED if self.server.may_write(req.conn.principal, t["name"])
                         else Error.TOPIC_AUTHORIZATION_FAILED} for p in t["partitions"]]}
                    for t in body["v3_and_below_topics"]]})
            req.respond(answer)
            return
        self._forward(req, body, TRANSACTION_KEY, body["v3_and_below_transactional_id"])

    def add_offsets(self, req: Request, body: dict[str, Any]) -> None:
        if not self.server.may_use_group(req.conn.principal, body["group_id"]):
            req.respond(refusal(req.api_key, req.api_version, body, Error.GROUP_AUTHORIZATION_FAILED))
            return
        self._forward(req, body, TRANSACTION_KEY, body["transactional_id"])

    def end_txn(self, req: Request, body: dict[str, Any]) -> None:
        self._forward(req, body, TRANSACTION_KEY, body["transactional_id"])

    def txn_offset_commit(self, req: Request, body: dict[str, Any]) -> None:
        group = body["group_id"]
        if not self.server.may_use_group(req.conn.principal, group):
            req.respond(refusal(req.api_key, req.api_version, body, Error.GROUP_AUTHORIZATION_FAILED))
            return
        if body.get("generation_id", -1) >= 0 or body.get("member_id"):
            code = self.server.groups.member_error(group, body["generation_id"], body["member_id"])
            if code != Error.NONE:
                req.respond(refusal(req.api_key, req.api_version, body, code))
                return
            body = {**body, "generation_id": -1, "member_id": "", "group_instance_id": None}
        self._forward(req, body, GROUP_KEY, group, transactional_id=body["transactional_id"])

    def _forward(self, req: Request, body: dict[str, Any], key_type: int, key: str,
                 transactional_id: str | None = None) -> None:
        """`body` to the coordinator of `key` in the client's version; its answer to the client."""
        api_key, version = req.api_key, req.api_version
        transactional_id = key if key_type == TRANSACTION_KEY else transactional_id
        if transactional_id is not None and not self.server.may_use_transactional_id(
                req.conn.principal, transactional_id):
            req.respond(refusal(api_key, version, body, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            return
        deadline = Deadline(ApiKey.name_of(api_key), self.cluster.request_timeout)
        outgoing = control.Outgoing(m.REQUESTS[api_key], body)
        decode = control.response_decoder(api_key)

        def failed(error: BaseException) -> None:
            if not isinstance(error, KafkaTimeoutError):
                log.warning("%s for %r: the cluster failed: %s", ApiKey.name_of(api_key), key, error)
            req.respond(refusal(api_key, version, body, Error.COORDINATOR_NOT_AVAILABLE))

        def answered(value: Any, error: BaseException | None) -> None:
            if error is not None:
                self.coordinators.coordinators.pop((key_type, key), None)
                failed(error)
                return
            if _error_codes(value) & set(_MOVED):
                self.coordinators.coordinators.pop((key_type, key), None)
            req.respond(m.RESPONSES[api_key].encode(version, value))

        def found(node: Any, error: BaseException | None) -> None:
            if error is not None:
                failed(error)
                return
            self.cluster.call_async(node, api_key, control.request_encoder(outgoing, req.client_id),
                                    decode, answered, deadline=deadline,
                                    min_version=version, max_version=version,
                                    purpose="coordinator", retries=0)

        self.coordinators.coordinator_async(key, deadline, found, key_type=key_type)


def _error_codes(answer: Any) -> set[int]:
    """Every error code of a transaction API's answer."""
    codes = {answer.get("error_code", Error.NONE)}
    for topic in answer.get("results_by_topic_v3_and_below", ()) or answer.get("topics", ()):
        for part in topic.get("results_by_partition", ()) or topic.get("partitions", ()):
            codes.add(part.get("partition_error_code", part.get("error_code", Error.NONE)))
    return codes
